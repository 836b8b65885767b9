"""``webdb recover DB [--to N]``: show the generations present, or commit one explicitly.

Without ``--to``: list every manifest in ``DB/gen/``, whether it passes the quick check
(checksums, table files present with their recorded sizes: table blocks are not read, that is
``webdb check``) and whether it was committed, and what CURRENT says.  With ``--to N``: make
generation N the committed one (after a damaged, missing or rolled-back CURRENT, or to drop a
damaged parent manifest); newer generations and unreferenced files are removed, old-or-new
under kill -9.  Takes the writer lock.  docs/operations.md, *Recovery*.
"""

from __future__ import annotations

from webdb.cli.common import add_json, add_lock_wait, emit, open_db
from webdb.errors import CorruptionError


def add_parser(sub) -> None:
    p = sub.add_parser("recover", help="show generations, or commit one explicitly (--to N)", description=__doc__)
    p.add_argument("db")
    p.add_argument("--to", type=int, metavar="N", help="make generation N the committed one")
    add_lock_wait(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    db = open_db(args)
    if args.to is None:
        try:
            cur: int | str = db.committed()
        except CorruptionError as e:
            cur = f"unusable: {e}"
        gens = db.generations()
        lines = [f"CURRENT: {cur}"]
        for g in gens:
            state = "manifest and table sizes ok" if g["ok"] else f"FAILED: {g['error']}"
            lines.append(f"generation {g['generation']}{' (committed)' if g['committed'] else ''}: {state}")
        lines.append(f"(table blocks are not read here: `webdb check {args.db}` reads every block)")
        emit(args, {"current": cur, "generations": gens}, "\n".join(lines))
        return 0 if isinstance(cur, int) else 2
    from webdb.core.lockwait import wait_for_lock

    lock = wait_for_lock(lambda: db.lock().acquire(), args.lock_wait, "recover")
    try:
        removed = db.recover_to(args.to)
    finally:
        lock.release()
    emit(
        args,
        {"generation": args.to, "removed": removed},
        f"CURRENT is generation {args.to} (its manifest and table sizes checked; `webdb check` reads every "
        f"block); removed {len(removed)} files",
    )
    return 0
