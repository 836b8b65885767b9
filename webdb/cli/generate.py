"""``webdb generate DB SEGMENTS_DIR``: write the next round's fetchlists as a new segment.

Selects pages due (next fetch <= now + --add-days), not already generated (a mark that expires
after --mark-expiry days if the round never comes back), by score, at most --top-n, at most
--max-per-host / --max-per-domain each; splits them into --fetchers fetchlists by a hash of
the host (or --partition domain).  The segment is created inside SEGMENTS_DIR, named by UTC
time (or --segment NAME); its path is printed on the last line.  Exit code 1: nothing to
generate (no segment written).
"""

from __future__ import annotations

import argparse
import os
import sys

import webdb
from webdb.cli.common import add_json, emit
from webdb.cli.crawlopts import add_generate_args, generate_kwargs


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
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from fetchlist.crawl import new_segment_dir
    from fetchlist.generate import generate

    db = webdb.open(args.db)
    kw = generate_kwargs(args)
    if os.path.exists(args.segments) and not os.path.isdir(args.segments):
        from webdb.errors import BadInput

        raise BadInput(f"{args.segments}: not a directory")
    os.makedirs(args.segments, exist_ok=True)
    seg = os.path.join(args.segments, args.segment) if args.segment else new_segment_dir(args.segments)
    say = None if (args.quiet or args.json) else (lambda m: print(m, file=sys.stderr, flush=True))
    res = generate(db, seg, progress=say, **kw)
    data = {
        "segment": res.segment,
        "selected": res.selected,
        "parts": res.parts,
        "hosts": res.hosts,
        "scanned": res.scanned,
        "eligible": res.eligible,
        "skipped": res.skipped,
        "seconds": {k: round(v, 3) for k, v in res.seconds.items()},
    }
    text = res.summary() + (f"\n{res.segment}" if res.segment else "")
    emit(args, data, text)
    return 0 if res.segment else 1
