"""``webdb dedup DB [--scope global|domain|host] [--canonical] [--dry-run] [--json]``: mark duplicate content.

Of the fetched pages carrying one content md5 the one with the highest score (then the
shortest url, then the smallest) is kept; the others become status DUPLICATE, in one batch.
``--scope domain`` (``host``) keeps one page per content in each registered domain (host).
``--canonical`` uses each page's recorded canonical URL (``meta["canonical"]``) as its URL:
the page others name canonical is kept, and scopes group by the canonical URL's host.
``--dry-run`` lists the changes (url, new status, kept url) and writes nothing.

With --hosts (DB is then the db name) each location finds its own sections' duplicates (the
pages of one md5 are in one section) and the changes commit as one batch of the rack; with
--dask tcp://HOST:PORT (or hosts.ini's dask_scheduler) the same runs as tasks on a Dask
cluster (docs/analysis.md, *On a rack or a Dask cluster*).
"""

from __future__ import annotations

import json
import sys

from webdb.cli.common import add_json, add_lock_wait, add_rack_args, emit, rack_failed, rack_target


def add_parser(sub) -> None:
    p = sub.add_parser(
        "dedup",
        help="mark pages with duplicate content",
        description=__doc__,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument("--dry-run", action="store_true", help="list the changes, write nothing")
    p.add_argument(
        "--scope",
        choices=("global", "domain", "host"),
        default="global",
        help="keep one page per content among all pages (global, the default), per registered domain or per host",
    )
    p.add_argument(
        "--canonical",
        action="store_true",
        help="a page's rel=canonical URL is its URL for dedup: the page others name canonical is kept",
    )
    add_lock_wait(p)
    add_rack_args(p, "dedup")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    import webdb
    from webdb.analysis.dedup import Change, dedup
    from webdb.tables.records import Status

    def show(c: Change) -> None:
        status = Status(c.status).name.lower()
        if args.json:
            sys.stdout.write(json.dumps({"url": c.page.url, "status": status, "kept": c.keeper}) + "\n")
        else:
            sys.stdout.write(f"{c.page.url}\t{status}\t{c.keeper}\n")

    from webdb.core.lockwait import wait_for_lock

    rack, scheduler = rack_target(args)
    on_change = show if args.dry_run else None
    if rack is not None:
        from webdb.analysis.onrack import dedup_rack
        from webdb.writer.rack import UpdateFailed

        try:
            counts = wait_for_lock(
                lambda: dedup_rack(
                    rack,
                    args.dry_run,
                    on_change,
                    args.scope,
                    canonical=args.canonical,
                    dask=scheduler,
                    heartbeat_timeout=args.heartbeat_timeout,
                ),
                args.lock_wait,
                "dedup",
                locked=lambda e: isinstance(e, UpdateFailed) and e.kind == "LockedError",
                give_up=lambda e: UpdateFailed(f"dedup waited {args.lock_wait:g}s for the writer lock: {e}", e.result),
            )
        except UpdateFailed as e:
            return rack_failed("dedup", e)
    else:
        db = webdb.open(args.db)
        counts = wait_for_lock(
            lambda: dedup(db, dry_run=args.dry_run, on_change=on_change, scope=args.scope, canonical=args.canonical),
            args.lock_wait,
            "dedup",
        )
    if args.dry_run and args.json:
        return 0  # the JSON lines above are the output
    emit(
        args,
        counts,
        f"{'would mark' if args.dry_run else 'marked'} {counts['duplicate']:,} duplicate(s), "
        f"{'would restore' if args.dry_run else 'restored'} {counts['restored']:,}",
    )
    return 0
