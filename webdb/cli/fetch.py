"""``webdb fetch SEGMENT``: fetch a segment's fetchlists politely (all partitions, or --part N).

A progress bar runs when stderr is a terminal.  Ctrl-C stops taking new URLs, cuts the requests
in flight, saves everything fetched so far and exits 130; running the same command again
resumes (URLs already fetched are skipped).  The requests run in one process (its threads, one
request per host at a time, robots.txt and delays as in docs/crawl.md); the pages are parsed
and their WARC records compressed in --processes worker processes (default one per CPU).
Settings: --threads, --delay, --processes, --crawl-set NAME=VALUE (fetchlist/settings.py).
"""

from __future__ import annotations

import argparse
import os

from webdb.cli.common import add_json, emit
from webdb.cli.crawlopts import add_fetch_args, fetch_settings
from webdb.errors import BadInput


def add_parser(sub) -> None:
    p = sub.add_parser(
        "fetch", help="fetch a segment", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("segment")
    p.add_argument("--part", type=int, action="append", metavar="N", help="only partition N (repeatable)")
    add_fetch_args(p)
    p.add_argument("--hosts-report", type=int, default=10, metavar="N", help="busiest hosts listed (default 10)")
    add_json(p)
    p.set_defaults(run=run)


def _summary(stats, seg_path: str, top: int) -> tuple[dict, str]:
    st = dict(stats.statuses)
    data = {
        "segment": seg_path,
        "entries": stats.entries,
        "skipped": stats.skipped,
        "records": stats.records,
        "requests": stats.requests,
        "content_bytes": stats.content_bytes,
        "statuses": st,
        "elapsed": round(stats.elapsed, 3),
        "pages_per_second": round(stats.pages_per_second, 2),
        "interrupted": stats.interrupted,
        "processes": stats.processes,
        "worker_cpu_seconds": round(stats.worker_cpu_seconds, 3),
        "hosts": {
            h: {
                "requests": x.requests,
                "statuses": dict(x.statuses),
                "robots": x.robots,
                "delay": x.delay,
                "busy_seconds": round(x.busy_seconds, 3),
                "gave_up": x.gave_up,
            }
            for h, x in stats.hosts.items()
        },
    }
    lines = [
        f"fetched {stats.records:,} of {stats.entries:,} URLs ({stats.skipped:,} done before) in "
        f"{stats.elapsed:.1f}s, {stats.requests:,} requests, {stats.content_bytes / 1e6:.1f} MB, "
        f"{stats.pages_per_second:.1f} pages/s, {stats.processes} worker processes",
        "status " + (", ".join(f"{k.lower()} {v:,}" for k, v in sorted(st.items())) or "-"),
    ]
    busiest = sorted(stats.hosts.items(), key=lambda kv: -kv[1].requests)[:top]
    for h, x in busiest:
        lines.append(
            f"  {h}: {x.requests:,} requests, delay {x.delay:g}s, robots {x.robots or '-'}"
            + (", gave up" if x.gave_up else "")
        )
    return data, "\n".join(lines)


def run(args) -> int:
    from fetchlist.crawl import fetch_parts
    from fetchlist.fetch import Fetcher
    from fetchlist.segment import Segment

    if not os.path.isdir(args.segment):
        raise BadInput(f"{args.segment}: no such segment directory")
    seg = Segment.open(args.segment)
    fetcher = Fetcher(fetch_settings(args))
    try:
        stats = fetch_parts(seg, fetcher, args.part)
    except KeyboardInterrupt:
        stats = getattr(fetcher, "stats", None)
        if stats is not None:
            data, text = _summary(stats, seg.path, args.hosts_report)
            emit(args, data, text + f"\ninterrupted: what was fetched is saved; `webdb fetch {args.segment}` resumes")
        raise
    data, text = _summary(stats, seg.path, args.hosts_report)
    emit(args, data, text)
    return 0
