"""``webdb fetch`` beside Scrapy on a real corpus, and a whole crawl round, in one run.

    python bench/bench_fetch_peers.py [--copies 4] [--runs 2] [--round-pages 10000]

The corpus (bench/corpus.py): Debian's Python, PostgreSQL and Django manuals on nginx, 12
loopback hosts, each page on ``--copies`` hosts (4: 9,564 URLs).  Each run, in turn:

- ``webdb fetch --processes 0``: one process, 12 threads (the fetcher's threads parse);
- ``webdb fetch``: the default, 12 threads and one parse worker process per CPU;
- ``scrapy``: bench/scrapy_peer.py, 12 requests in flight, 1 per host, LinkExtractor;

every peer with robots.txt obeyed, no delay, one request per host in flight, one command on
one fetchlist.  Then ``parse()`` alone over the fetched pages in this process gives the parse's
CPU ms per page and the ceiling ``cores * 1000 / parse_ms``.  With ``--round-pages N``, a
whole round on a fresh db: ``webdb crawl --seeds`` of N corpus URLs, one round of generate,
fetch and update (``--top-n N``), with and without worker processes.

CPU seconds: the command's own (getrusage of the child) plus, for ``webdb fetch``, its
workers' (``worker_cpu_seconds`` of its summary).  Prints one JSON line per measurement and
a Markdown table at the end.  Needs ``pip install -e '.[bench]'`` (Scrapy).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))
sys.path.insert(0, here)

from corpus import Corpus  # noqa: E402

from fetchlist.parse import parse  # noqa: E402
from fetchlist.segment import FetchEntry, Segment  # noqa: E402

WEBDB = os.path.join(os.path.dirname(sys.executable), "webdb")
COMMON = ["--threads", "12", "--delay", "0", "--crawl-set", "allow_private_addresses=true"]


def _run(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, its stdout) of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def fetch_webdb(urls: list[str], work: str, processes: int | None) -> dict:
    seg = Segment.create(tempfile.mkdtemp(dir=work))
    seg.write_fetchlist(0, [FetchEntry(u) for u in urls])
    extra = [] if processes is None else ["--processes", str(processes)]
    wall, cpu, out = _run([WEBDB, "fetch", seg.path, *COMMON, *extra, "--json"])
    s = json.loads(out)
    assert s["records"] == len(urls), s
    cpu += s["worker_cpu_seconds"]
    name = "webdb fetch" + ("" if processes is None else f" --processes {processes}")
    return {
        "peer": name,
        "pages": s["records"],
        "fetched": s["statuses"].get("FETCHED", 0),
        "seconds": round(wall, 2),
        "pages_per_s": round(len(urls) / wall, 1),
        "cpu_seconds": round(cpu, 1),
        "cpu_ms_per_page": round(cpu * 1000 / len(urls), 2),
        "processes": s["processes"],
        "segment": seg.path,
    }


def fetch_scrapy(urls: list[str], work: str) -> dict:
    fd, url_file = tempfile.mkstemp(dir=work, suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(urls) + "\n")
    out = os.path.join(work, "scrapy-items.jsonl")
    wall, cpu, stdout = _run([sys.executable, os.path.join(here, "scrapy_peer.py"), url_file, out])
    s = json.loads(stdout.strip().splitlines()[-1])
    assert s["pages"] == len(urls), s
    return {
        "peer": "scrapy",
        "pages": s["pages"],
        "seconds": round(wall, 2),
        "pages_per_s": round(len(urls) / wall, 1),
        "cpu_seconds": round(cpu, 1),
        "cpu_ms_per_page": round(cpu * 1000 / len(urls), 2),
    }


def parse_ms(seg_path: str, limit: int = 3000) -> float:
    pages = []
    for r in Segment.open(seg_path).records(0, content=True):
        if r.content:
            pages.append((r.url, r.content, r.headers.get("content-type")))
        if len(pages) >= limit:
            break
    t = time.process_time()
    for url, content, ctype in pages:
        parse(url, content, ctype)
    return (time.process_time() - t) * 1000 / len(pages)


def crawl_round(urls: list[str], work: str, processes: int | None) -> dict:
    d = tempfile.mkdtemp(dir=work)
    seeds = os.path.join(d, "seeds.txt")
    with open(seeds, "w") as f:
        f.write("\n".join(urls) + "\n")
    extra = [] if processes is None else ["--processes", str(processes)]
    db = os.path.join(d, "crawl.db")
    cmd = [WEBDB, "crawl", db, "--seeds", seeds, "--rounds", "1", "--top-n", str(len(urls))]
    wall, cpu, out = _run([*cmd, *COMMON, *extra, "--json"])
    r = json.loads(out)["rounds"][0]
    return {
        "peer": "webdb crawl, 1 round" + ("" if processes is None else f" --processes {processes}"),
        "pages": r["fetched"],
        "seconds": round(wall, 2),
        "generate_s": r["seconds"]["generate"],
        "fetch_s": r["seconds"]["fetch"],
        "update_s": r["seconds"]["update"],
        "fetch_pages_per_s": round(r["generated"] / r["seconds"]["fetch"], 1),
        "new_urls": r["new_urls"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=4, help="hosts serving each page (default 4)")
    ap.add_argument("--hosts", type=int, default=12)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="only the first N URLs (0: all)")
    ap.add_argument("--round-pages", type=int, default=0, help="also a whole round of N pages (0: none)")
    ap.add_argument("--no-scrapy", action="store_true")
    args = ap.parse_args()
    machine = (
        f"{platform.machine()} {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, load before {os.getloadavg()[0]:.1f}"
    )
    rows = []

    def emit(d: dict) -> None:
        rows.append(d)
        print(json.dumps(d), flush=True)

    with Corpus(args.hosts) as corpus, tempfile.TemporaryDirectory(prefix="bench-fetch-peers-") as work:
        urls = corpus.urls(args.copies)
        if args.limit:
            urls = urls[: args.limit]
        print(json.dumps({"bench": "fetch-peers", "machine": machine, "urls": len(urls)}), flush=True)
        seg = None
        for run in range(args.runs):
            for peer in ("webdb0", "webdb", "scrapy"):
                if peer == "scrapy":
                    if not args.no_scrapy:
                        emit({"run": run, **fetch_scrapy(urls, work)})
                    continue
                d = fetch_webdb(urls, work, 0 if peer == "webdb0" else None)
                seg = d.pop("segment")
                emit({"run": run, **d})
        ms = parse_ms(seg)
        cores = os.cpu_count() or 1
        emit(
            {"peer": "parse() alone", "cpu_ms_per_page": round(ms, 2), "ceiling_pages_per_s": round(cores * 1000 / ms)}
        )
        if args.round_pages:
            round_urls = corpus.urls(max(args.copies, -(-args.round_pages // len(corpus.paths))))[: args.round_pages]
            for procs in (0, None):
                emit(crawl_round(round_urls, work, procs))
    print()
    print("| peer | run | pages | s | pages/s | CPU s | CPU ms/page |")
    print("|---|---|---|---|---|---|---|")
    for d in rows:
        if "run" in d:
            print(
                f"| {d['peer']} | {d['run']} | {d['pages']:,} | {d['seconds']} | {d['pages_per_s']} | "
                f"{d['cpu_seconds']} | {d['cpu_ms_per_page']} |"
            )


if __name__ == "__main__":
    main()
