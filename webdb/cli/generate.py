"""``webdb generate [--hosts hosts.ini] DB SEGMENTS_DIR``: write the next round's fetchlists as a new segment.

Selects pages due (next fetch <= now + --add-days), not already generated (a mark that expires
after --mark-expiry days if the round never comes back), by score, at most --top-n, at most
--max-per-host / --max-per-domain each; splits them into --fetchers fetchlists by a hash of
the host (or --partition domain).  The segment is created inside SEGMENTS_DIR, named by UTC
time (or --segment NAME); its path is printed on the last line.  It reads each section's due
index as far as the selection needs (a db without one is scanned; --full-scan scans anyway:
the same selection, docs/crawl.md, *Generate*).  Exit code 1: nothing to
generate (no segment written), or a rack generate that failed (nothing marked).

With --hosts (DB is then the db name), every location scans only its own sections and the
coordinator — this process, where the segment is written — merges their selections; top-N
and the caps hold for the whole rack, and the marks commit on every section at once
(docs/crawl.md, *Generate in a rack*).  A per-host summary follows the usual line.  With
--dask tcp://HOST:PORT (or hosts.ini's dask_scheduler) the same runs on a Dask cluster: each
location's requests are tasks on the worker of its lowest section (docs/distributed.md §10).
"""

from __future__ import annotations

import argparse
import os
import sys

import webdb
from webdb.cli.common import add_json, add_quiet, emit, rack_failed
from webdb.cli.crawlopts import add_generate_args, generate_kwargs
from webdb.writer.rack import HEARTBEAT_TIMEOUT


def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="write the next round's fetchlists",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument("segments", metavar="SEGMENTS_DIR", help="directory that holds the segments (created if absent)")
    p.add_argument("--segment", metavar="NAME", help="name of the new segment (default: UTC time YYYYMMDDHHMMSS)")
    add_generate_args(p)
    p.add_argument(
        "--now", type=int, metavar="SECONDS", help="the round's clock, seconds since the epoch (default: now)"
    )
    p.add_argument(
        "--full-scan", action="store_true", help="scan every page instead of reading the due index (same selection)"
    )
    p.add_argument("--hosts", metavar="HOSTS_INI", help="generate over the rack of this hosts.ini (DB: the db name)")
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=HEARTBEAT_TIMEOUT,
        metavar="S",
        help=f"with --hosts: a host silent this long stops the generate (default {HEARTBEAT_TIMEOUT:g})",
    )
    p.add_argument(
        "--dask",
        metavar="tcp://HOST:PORT",
        help="run on this Dask scheduler (default: hosts.ini's dask_scheduler, if any; docs/distributed.md)",
    )
    add_quiet(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from fetchlist.crawl import new_segment_dir
    from fetchlist.generate import generate
    from webdb.errors import BadInput
    from webdb.ndfs.config import check_scheduler_address
    from webdb.writer.rack import Rack, UpdateFailed

    if args.dask:
        try:
            check_scheduler_address(args.dask)
        except ValueError as e:
            raise BadInput(f"--dask: {e}") from None
    rack = args.hosts or args.dask
    target = (
        (Rack.from_file(args.hosts, args.db) if args.hosts else Rack.local(args.db)) if rack else webdb.open(args.db)
    )
    kw = generate_kwargs(args) | {"now": args.now, "due_index": not args.full_scan}
    if os.path.exists(args.segments) and not os.path.isdir(args.segments):
        raise BadInput(f"{args.segments}: not a directory")
    os.makedirs(args.segments, exist_ok=True)
    seg = os.path.join(args.segments, args.segment) if args.segment else new_segment_dir(args.segments)
    say = None if (args.quiet or args.json) else (lambda m: print(m, file=sys.stderr, flush=True))
    if not rack:
        res = generate(target, seg, progress=say, **kw)
    else:
        try:
            hb = args.heartbeat_timeout
            res = generate(target, seg, progress=say, heartbeat_timeout=hb, dask=args.dask, **kw)
        except UpdateFailed as e:
            if args.json:  # the error is one line on stderr; the per-host table only in JSON
                emit(args, {"segment": None, "error": str(e), "kind": e.kind})
            return rack_failed("generate", e)
    data = {
        "segment": res.segment,
        "selected": res.selected,
        "parts": res.parts,
        "hosts": res.hosts,
        "via": res.via,
        "scanned": res.scanned,
        "eligible": res.eligible,
        "skipped": res.skipped,
        "seconds": {k: round(v, 3) for k, v in res.seconds.items()},
    }
    if res.rack is not None:
        data["hosts_result"] = {
            h: {"ok": r.ok, "reason": r.reason, "seconds": r.seconds} for h, r in res.rack.hosts.items()
        }
    rows = res.rack.summary().splitlines()[1:] if res.rack is not None and res.segment else []
    text = "\n".join([res.summary(), *rows, *([res.segment] if res.segment else [])])
    emit(args, data, text)
    return 0 if res.segment else 1
