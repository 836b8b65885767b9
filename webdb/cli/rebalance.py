"""``webdb rebalance DB --sections K``: re-split into K sections (hosts added or removed)."""

from __future__ import annotations

import webdb
from webdb.cli.common import add_json, add_lock_wait, emit
from webdb.tools.rebalance import rebalance


def add_parser(sub) -> None:
    p = sub.add_parser("rebalance", help="re-split a database into K sections", description=__doc__)
    p.add_argument("db")
    p.add_argument("--sections", type=int, required=True, help="the new number of sections")
    add_lock_wait(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from webdb.core.lockwait import wait_for_lock

    db = webdb.open(args.db)
    m = wait_for_lock(lambda: rebalance(db, args.sections), args.lock_wait, "rebalance")
    rb = m.rebalance
    summary = {
        "generation": m.generation,
        "from": rb["from"],
        "to": rb["to"],
        "raw_blocks": rb["raw_blocks"],
        "decoded_blocks": rb["decoded_blocks"],
        "seconds": round(m.seconds, 3),
        "pages": [t.get("pages_by_url", {}).get("records", 0) for t in m.tables],
    }
    emit(
        args,
        summary,
        f"rebalanced {args.db}: {rb['from']} -> {rb['to']} sections in {summary['seconds']} s "
        f"(generation {m.generation}; pages per section {summary['pages']}; "
        f"{rb['raw_blocks']} blocks carried raw, {rb['decoded_blocks']} re-cut)",
    )
    return 0
