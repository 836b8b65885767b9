"""Fetch + parse throughput against the bundled demo site on loopback, politeness off.

The site is served from a separate process (so the server does not share the fetcher's GIL);
the fetcher writes a real segment.  Prints one JSON line:

    python bench/bench_fetch.py [--pages 2000] [--threads 8] [--rounds 3]

``fetch_parse_pages_per_s``: fetch + parse + segment write, best of ``rounds``;
``fetch_only_pages_per_s``: the same with parsing off; ``parse_only_pages_per_s``: ``parse()``
alone over the fetched pages, one thread.  Loopback, CPU bound: the server (Python
http.server) is usually the limit, so this is a lower bound of the fetcher's own speed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fetchlist.demo_site import serve_demo  # noqa: E402
from fetchlist.fetch import Fetcher  # noqa: E402
from fetchlist.parse import parse  # noqa: E402
from fetchlist.segment import FetchEntry, Segment  # noqa: E402


def _serve(pages: int, conn) -> None:
    server, site = serve_demo(pages=pages, crawl_delay=0.0)
    conn.send(sorted(site.graph))
    conn.recv()  # until the parent is done
    server.close()


def _round(urls: list[str], threads: int, parse_on: bool, workdir: str) -> tuple[float, Segment]:
    seg = Segment.create(tempfile.mkdtemp(dir=workdir))
    seg.write_fetchlist(0, [FetchEntry(u) for u in urls])
    f = Fetcher(
        politeness_delay=0.0,
        crawl_delay_cap=0.0,
        threads=threads,
        parse=parse_on,
        progress=False,
        allow_private_addresses=True,  # the demo site is on loopback
    )
    t = time.perf_counter()
    stats = f.fetch_segment(seg, 0)
    elapsed = time.perf_counter() - t
    assert stats.records == len(urls) and stats.statuses.get("FETCHED", 0) > len(urls) // 2, stats
    return elapsed, seg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.Process(target=_serve, args=(args.pages, child), daemon=True)
    proc.start()
    urls = parent.recv()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-fetch-") as work:
            with_parse = [_round(urls, args.threads, True, work) for _ in range(args.rounds)]
            without = [_round(urls, args.threads, False, work)[0] for _ in range(args.rounds)]
            seg = with_parse[0][1]
            pages = [(r.url, r.content, r.headers.get("content-type")) for r in seg.records(0, content=True)]
        t = time.perf_counter()
        for url, content, ctype in pages:
            parse(url, content, ctype)
        parse_s = time.perf_counter() - t
    finally:
        parent.send("done")
        proc.join(5)
    best = min(t for t, _ in with_parse)
    print(
        json.dumps(
            {
                "bench": "fetch",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_implementation()} "
                f"{platform.python_version()}",
                "pages": len(urls),
                "threads": args.threads,
                "rounds": args.rounds,
                "fetch_parse_pages_per_s": round(len(urls) / best, 1),
                "fetch_only_pages_per_s": round(len(urls) / min(without), 1),
                "parse_only_pages_per_s": round(len(pages) / parse_s, 1),
                "avg_page_bytes": round(sum(len(c) for _, c, _ in pages) / max(1, len(pages))),
            }
        )
    )


if __name__ == "__main__":
    main()
