"""``webdb create DB --sections K``: an empty database."""

from __future__ import annotations

import webdb
from webdb.cli.common import add_json, emit, parse_settings


def add_parser(sub) -> None:
    p = sub.add_parser("create", help="create an empty database", description=__doc__)
    p.add_argument("db", help="database directory (must not exist or be empty)")
    p.add_argument("--sections", type=int, default=1, help="number of sections (one per machine), default 1")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="a stored setting (see webdb/settings.py)")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    db = webdb.create(args.db, sections=args.sections, **parse_settings(args.set))
    emit(args, {"db": db.path, "sections": args.sections}, f"created {db.path} with {args.sections} section(s)")
    return 0
