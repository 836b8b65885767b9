"""``webdb unlock DB [--force]``: remove a writer lock whose holder will never finish.

A writer's lock is released by the kernel when its process dies, so a lock only needs this
when its holder is alive but stuck (stopped, hung) or holds it from another machine through
a shared filesystem.  The holder named in the lock is checked first: a holder alive on this
host is never unlocked (stop it first: `kill PID`); a lock held from another host, or by a
process other than the one named, is removed only with --force, after saying what was
checked.  In a rack, run it on the host whose lock it is: `webdb unlock <root>/<db>`.
"""

from __future__ import annotations

import argparse

from webdb.cli.common import add_json, emit


def add_parser(sub) -> None:
    p = sub.add_parser(
        "unlock",
        help="remove a stuck writer lock (with a safety check)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("db", help="database directory (or a section directory)")
    p.add_argument("--force", action="store_true", help="remove a lock whose holder cannot be checked from here")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from webdb.core.lockwait import unlock

    lines = unlock(args.db, force=args.force)
    emit(args, {"db": args.db, "done": lines}, "\n".join(lines))
    return 0
