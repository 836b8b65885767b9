#!/usr/bin/env python3
"""Time each step of one crawl round on a db of the benchmark workload (100k or 1M pages).

    python bench/bench_round.py --data bench/data/n100000 --work /tmp/bench-round
    python bench/bench_round.py --data bench/data/n1000000 --work /tmp/bench-1m   # the load takes ~10 min

Steps, one JSON line each:

- ``load``: the workload's pages.tsv and links.tsv into a fresh db (bench/peer_webdb.py's
  ``Peer.load``, one batch); skipped with ``--db`` (an existing db, changed by the run).
- ``generate``: ``fetchlist.generate`` at the workload's round time, ``top_n`` = the round size,
  2 fetchlists: scan, selection, inlink anchors, fetchlist write, the mark batch.
- ``fetch``: not run (fetch + parse throughput is bench/bench_fetch.py's).  Instead the
  workload's round.tsv is written as a segment — the round's URLs as the fetchlist (with their
  db pages), their outcomes as fetch and parse records — timed as ``segment``.
- ``update``: ``fetchlist.crawl.update_db`` on that segment: ``apply_segments`` feeding the
  writer (``feed_seconds``), then the cascade and commit (``commit_seconds``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import webdb  # noqa: E402
from fetchlist.crawl import update_db  # noqa: E402
from fetchlist.generate import generate, partition_of  # noqa: E402
from fetchlist.parse import ParseResult  # noqa: E402
from fetchlist.segment import FetchEntry, FetchRecord, Segment  # noqa: E402
from webdb import Page, Status  # noqa: E402


def emit(d: dict) -> None:
    print(json.dumps(d), flush=True)


def write_round_segment(db, round_tsv: str, seg_dir: str, fetchers: int = 2) -> dict:
    """round.tsv (url, ok, md5, time, outlinks) as a segment: fetchlist + fetch/parse records."""
    rows = []
    with open(round_tsv, encoding="utf-8") as f:
        for line in f:
            url, ok, md5, t, out = line[:-1].split("\t")
            rows.append((url, ok == "1", md5, int(t), out))
    seg = Segment.create(seg_dir, synthetic="round.tsv")
    parts: list[list] = [[] for _ in range(fetchers)]
    with db.reader() as r:
        for row in rows:
            page = r.get_page(row[0]) or Page(row[0])
            page.meta["gen"] = "synthetic@0"
            parts[partition_of(row[0], fetchers)].append((row, page))
    outlinks = 0
    for p, items in enumerate(parts):
        seg.write_fetchlist(p, (FetchEntry(row[0], page) for row, page in items))
        with seg.writer(p) as w:
            for (url, ok, md5, t, out), _ in items:
                if ok:
                    links = [tuple(x.split("\x1f")) for x in out.split("\x1e")] if out else []
                    outlinks += len(links)
                    m = bytes.fromhex(md5)
                    w.write(FetchRecord(url, Status.FETCHED, t, 200, md5=m, parse=ParseResult(url, m, outlinks=links)))
                else:
                    w.write(FetchRecord(url, Status.RETRY, t, 503))
    return {"urls": len(rows), "outlinks": outlinks}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="workload directory (pages.tsv, links.tsv, round.tsv, meta.json)")
    ap.add_argument("--work", required=True, help="scratch directory (db and segments)")
    ap.add_argument("--db", help="use this existing db instead of loading one")
    ap.add_argument("--sections", type=int, default=2)
    ap.add_argument("--fetchers", type=int, default=2)
    ap.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a writer setting for the update (JSON value)"
    )
    return ap.parse_args()


def load_step(args: argparse.Namespace, meta: dict, base: dict) -> webdb.WebDB:
    """The workload's db loaded by bench/peer_webdb.py (step ``load``)."""
    from peer_webdb import Peer

    t = time.monotonic()
    peer = Peer(args.work, meta, f"sections={args.sections},sync=0")
    peer.load(os.path.join(args.data, "pages.tsv"), os.path.join(args.data, "links.tsv"))
    db = peer.db
    with db.reader() as r:
        emit(
            {
                **base,
                "step": "load",
                "seconds": round(time.monotonic() - t, 2),
                "pages": r.num_pages,
                "links": r.num_links,
            }
        )
    return db


def generate_step(db, args: argparse.Namespace, meta: dict, base: dict, stamp: str) -> None:
    t = time.monotonic()
    g = generate(
        db, os.path.join(args.work, f"gen-{stamp}"), now=meta["t_round"], top_n=meta["round"], fetchers=args.fetchers
    )
    emit(
        {
            **base,
            "step": "generate",
            "seconds": round(time.monotonic() - t, 2),
            "selected": g.selected,
            "scanned": g.scanned,
            "eligible": g.eligible,
            "parts": g.parts,
            "breakdown": {k: round(v, 2) for k, v in g.seconds.items()},
        }
    )


def update_step(db, seg_dir: str, writer_set: list[str], base: dict) -> None:
    t = time.monotonic()
    with db.reader() as r:
        before = (r.num_pages, r.num_links)
    settings = {k: json.loads(v) for k, _, v in (x.partition("=") for x in writer_set)}
    c = update_db(db, [seg_dir], writer_settings=settings or None)
    took = time.monotonic() - t
    emit(
        {
            **base,
            "step": "update",
            "settings": settings,
            "seconds": round(took, 2),
            "feed_seconds": c["feed_seconds"],
            "commit_seconds": c["commit_seconds"],
            "pages_before": before[0],
            "links_before": before[1],
            "pages": c["pages"],
            "links": c["links"],
            "new_urls": c["new_urls"],
            "fetched": c.get("fetched", 0),
            "changed": c.get("changed", 0),
            "outlinks": c.get("outlinks", 0),
        }
    )


def main() -> None:
    args = parse_args()
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    os.makedirs(args.work, exist_ok=True)
    base = {
        "pages0": meta["pages"],
        "round": meta["round"],
        "sections": args.sections,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    db = webdb.open(args.db) if args.db else load_step(args, meta, base)
    stamp = time.strftime("%H%M%S")
    generate_step(db, args, meta, base, stamp)
    emit({**base, "step": "fetch", "seconds": None, "note": "not run: see bench/bench_fetch.py; synthetic segment"})
    seg_dir = os.path.join(args.work, f"round-{stamp}")
    t = time.monotonic()
    s = write_round_segment(db, os.path.join(args.data, "round.tsv"), seg_dir, args.fetchers)
    emit({**base, "step": "segment", "seconds": round(time.monotonic() - t, 2), **s})
    update_step(db, seg_dir, args.set, base)


if __name__ == "__main__":
    main()
