#!/usr/bin/env python3
"""Export rate and peak memory next to ``webdb read --dump`` on a db of the benchmark workload.

    python bench/bench_export.py --data bench/data/n100000 --work /tmp/bench-export
    python bench/bench_export.py --db /tmp/bench-export/db --work /tmp/bench-export   # reuse the db

The workload (``bench/webgraph.py``, as bench/run.py makes it) is loaded into a
fresh db with bench/peer_webdb.py's ``load_tsv`` unless ``--db`` is given.  Then each command
runs in its own process, output to a file in ``--work``, one JSON line each: seconds, pages/s
(records written / seconds; and the db's pages / seconds, the rate at which an indexer
gets through the db) and the process's peak RSS (VmHWM, read by the
process itself at exit):

- ``read --dump pages --format jsonl`` and ``read --dump links --format jsonl``: the two
  streams an indexer had to join itself before ``export``;
- ``export`` (JSONL) and ``export --format parquet``: pages with their anchors, one pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

# Runs one webdb command and reports its own peak RSS on stderr's last line.
CHILD = """
import sys
from webdb.cli.main import main
rc = main(sys.argv[1:])
sys.stdout.flush()
hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print("VmHWM_KiB", hwm.split()[1], file=sys.stderr)
sys.exit(rc)
"""


def run(name: str, argv: list[str], out_path: str | None, base: dict, count=None) -> dict:
    """Run one command; ``count(out_path)`` (default: the db's record count in base) gives the
    records it wrote."""
    t = time.monotonic()
    with open(out_path or os.devnull, "wb") as out:
        p = subprocess.run([sys.executable, "-c", CHILD, *argv], stdout=out, stderr=subprocess.PIPE, text=True)
    took = time.monotonic() - t
    if p.returncode != 0:
        sys.exit(f"{name}: exit {p.returncode}: {p.stderr}")
    hwm = int(p.stderr.strip().splitlines()[-1].split()[1])
    records = count() if count else None
    d = {
        **base,
        "step": name,
        "seconds": round(took, 2),
        "records": records,
        "records_per_second": round(records / took) if records else None,
        "db_pages_per_second": round(base["pages"] / took),
        "peak_mib": round(hwm / 1024, 1),
    }
    print(json.dumps(d), flush=True)
    return d


def count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="workload directory (pages.tsv, links.tsv, meta.json)")
    ap.add_argument("--db", help="an existing db instead of loading --data")
    ap.add_argument("--work", required=True, help="scratch directory (db, outputs)")
    ap.add_argument("--sections", type=int, default=2)
    args = ap.parse_args()
    if not args.db and not args.data:
        ap.error("give --data or --db")
    os.makedirs(args.work, exist_ok=True)
    import webdb

    base = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average": uptime(),
    }
    db_path = args.db or os.path.join(args.work, "db")
    if not args.db:
        from peer_webdb import load_tsv

        t = time.monotonic()
        db = webdb.create(db_path, sections=args.sections, sync=False)
        load_tsv(db, os.path.join(args.data, "pages.tsv"), os.path.join(args.data, "links.tsv"))
        print(json.dumps({**base, "step": "load", "seconds": round(time.monotonic() - t, 2)}), flush=True)
    with webdb.open(db_path).reader() as r:
        pages, links = r.num_pages, r.num_links
    base.update({"sections": webdb.open(db_path).sections().k, "pages": pages, "links": links})
    w = args.work
    dump = os.path.join(w, "dump.jsonl")
    run("read --dump pages", ["read", db_path, "--dump", "pages", "--format", "jsonl"], dump, base, lambda: pages)
    run("read --dump links", ["read", db_path, "--dump", "links", "--format", "jsonl"], dump, base, lambda: links)
    os.unlink(dump)
    out = os.path.join(w, "export.jsonl")
    run("export", ["export", db_path, "--out", out], None, base, lambda: count_lines(out))
    n = count_lines(out)
    pq = os.path.join(w, "export.parquet")
    run("export --format parquet", ["export", db_path, "--format", "parquet", "--out", pq], None, base, lambda: n)


def uptime() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


if __name__ == "__main__":
    main()
