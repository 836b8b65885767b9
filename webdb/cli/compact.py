"""``webdb compact DB [--budget SECONDS]``: merge the delta runs of the link tables and the due index into new
bases now (between rounds), as one generation; see docs/operations.md, *Levels and compaction*."""

from __future__ import annotations

import webdb
from webdb.cli.common import add_json, add_lock_wait, emit


def add_parser(sub) -> None:
    p = sub.add_parser("compact", help="merge the tables' delta runs into new bases", description=__doc__)
    p.add_argument("db")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop before a table that would not fit in this time (estimated from the bytes per second so far)",
    )
    add_lock_wait(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from webdb.core.lockwait import wait_for_lock
    from webdb.tools.compact import compact

    db = webdb.open(args.db)
    r = wait_for_lock(lambda: compact(db, args.budget), args.lock_wait, "compact")
    r["seconds"] = round(r["seconds"], 3)
    if r["generation"] is None:
        text = f"{args.db}: nothing compacted ({r['left']} tables with delta runs left)"
    else:
        runs = sum(c["runs"] for c in r["compacted"])
        text = (
            f"compacted {args.db}: {len(r['compacted'])} tables ({runs} delta runs) in {r['seconds']} s, "
            f"generation {r['generation']}; {r['left']} tables with runs left"
        )
    emit(args, r, text)
    return 0
