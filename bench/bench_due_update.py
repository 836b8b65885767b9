#!/usr/bin/env python3
"""What the due index costs a round: the same update on a db with the index and on a copy without.

    python bench/bench_due_update.py --data bench/data/n1000000 --work /tmp/due-update

Loads the workload (bench/peer_webdb.py's ``Peer.load``, which builds the due index), copies
the db and commits the copy's manifest without the index (as a db written before it: stage 1
then keeps none), then applies the workload's round.tsv (bench/bench_round.py's segment) to
each.  One JSON line per db: the update's wall time and the CPU seconds of each stage (summed
over the sections, from the manifest's ``stages``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_round import write_round_segment  # noqa: E402
from peer_webdb import Peer  # noqa: E402

import webdb  # noqa: E402
from fetchlist.crawl import update_db  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="workload directory (pages.tsv, links.tsv, round.tsv, meta.json)")
    ap.add_argument("--work", required=True, help="scratch directory (two dbs and their segments)")
    ap.add_argument("--sections", type=int, default=2)
    args = ap.parse_args()
    meta = json.load(open(os.path.join(args.data, "meta.json"), encoding="utf-8"))
    shutil.rmtree(args.work, ignore_errors=True)
    peer = Peer(os.path.join(args.work, "index"), meta, f"sections={args.sections},sync=0")
    peer.load(os.path.join(args.data, "pages.tsv"), os.path.join(args.data, "links.tsv"))
    shutil.copytree(peer.db.path, os.path.join(args.work, "none"))
    bare = webdb.open(os.path.join(args.work, "none"))
    m = bare.manifest()
    for tabs in m.tables:
        tabs.get("pages_by_url", {}).pop("due", None)
    g = m.generation
    bare.commit({k: v for k, v in m.items() if k != "rounds"} | {"generation": g + 1, "parent": g})
    for name, db in (("index", peer.db), ("none", bare)):
        seg = os.path.join(args.work, f"round-{name}")
        write_round_segment(db, os.path.join(args.data, "round.tsv"), seg, 2)
        t = time.monotonic()
        update_db(db, [seg])
        wall = time.monotonic() - t
        cpu = {s["stage"]: round(sum(r["cpu_seconds"] for r in s["sections"]), 2) for s in db.manifest().stages}
        line = {"db": name, "seconds": round(wall, 1), "stage_cpu_seconds": cpu, "load_average": os.getloadavg()[0]}
        print(json.dumps(line), flush=True)
    shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
