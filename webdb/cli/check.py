"""``webdb check DB``: verify checksums, order, counts and cross-table invariants."""

from __future__ import annotations

from webdb.cli.common import add_db_location, add_json, emit, open_db
from webdb.errors import CorruptionError


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="verify a database", description=__doc__)
    p.add_argument("db")
    add_db_location(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    with open_db(args).reader() as r:
        try:
            res = r.check(progress=not args.json)
        except CorruptionError as e:
            emit(args, {"ok": False, "error": str(e)}, f"FAILED: {e}")
            return 1
    res = {"ok": True, **res}
    emit(args, res, f"ok: generation {res['generation']}, {res['pages']} pages, {res['links']} links")
    return 0
