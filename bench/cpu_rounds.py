#!/usr/bin/env python3
"""CPU seconds of each round of a steady-state series (levels on or off), in one process tree.

    python bench/cpu_rounds.py DATA WORK --sections 2 --rounds 4 [--level-ratio 0] [--level-runs R]
        [--label L] [--sync] [--keep]

DATA is a ``webgraph.py --rounds R`` directory (pages.tsv, links.tsv, round.tsv, round-2.tsv…).
The db is bulk-loaded as bench/peer_webdb.py does, then each round is one ``webdb update`` on a
local rack (k section processes); a round's CPU is this process's and every child's user +
system time (``RUSAGE_CHILDREN``: the agents wait for their section processes), so two versions
or settings can be compared on a machine that is not quiet.  One JSON line per round, with the
delta runs the db holds after it and the load average.  Run it with the snapshot first on
PYTHONPATH and from a directory that holds no other ``webdb`` (``python -m`` puts the working
directory first on the agents' path).  Each line also holds step 0's CPU and each stage's CPU
(all sections) and wall (the longest section), from the manifest's stage rows, and of a stage
that built a new base, that rebuild's own CPU and wall (``compact_cpu_wall_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peer_webdb import bulk_load_tsv  # noqa: E402
from roundtsv import INPUT  # noqa: E402

import webdb  # noqa: E402
from webdb.writer.rack import Rack, update  # noqa: E402


def _cpu() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("work", help="scratch directory for the db (wiped)")
    ap.add_argument("--sections", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--level-ratio", type=float, default=None, help="the db's level_ratio (default: webdb's)")
    ap.add_argument("--level-runs", type=int, default=None, help="the db's level_runs (default: webdb's)")
    ap.add_argument("--label", default="")
    ap.add_argument("--keep", action="store_true", help="keep the db in WORK after the last round")
    ap.add_argument("--sync", action="store_true", help="durable rounds (fsync on), as the benchmark's")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    kw = {} if a.level_ratio is None else {"level_ratio": a.level_ratio}
    if a.level_runs is not None:
        kw["level_runs"] = a.level_runs
    db = webdb.create(a.work, sections=a.sections, sync=a.sync, **kw)
    t0 = time.monotonic()
    bulk_load_tsv(db, os.path.join(a.data, "pages.tsv"), os.path.join(a.data, "links.tsv"))
    print(json.dumps({"label": a.label, "load_s": round(time.monotonic() - t0, 1)}), flush=True)
    for r in range(1, a.rounds + 1):
        tsv = os.path.join(a.data, "round.tsv" if r == 1 else f"round-{r}.tsv")
        c0, w0 = _cpu(), time.monotonic()
        shares = {j: {"paths": [tsv], "options": {"share": [j, a.sections]}} for j in range(a.sections)}
        update(Rack.local(a.work), shares, input_fn=INPUT)
        m = db.manifest()
        runs = sum(len(e.get("runs", [])) for t in m.tables for e in t.values())
        row = {"label": a.label, "round": r, "wall_s": round(time.monotonic() - w0, 1), "cpu_s": round(_cpu() - c0, 1)}
        # Each stage's CPU over all sections and its longest section's wall, from the manifest.
        stages = {
            x["stage"]: [
                round(sum(s["cpu_seconds"] for s in x["sections"]), 1),
                round(max(s["seconds"] for s in x["sections"]), 1),
            ]
            for x in m.stages or []
        }
        step0 = round(sum(x["cpu_seconds"] for x in (m.distributed or {}).get("step0", [])), 1)
        # Shipping the edits of each step (the longest section's), summed over the steps.
        ship = round(sum(x["seconds"] for x in (m.distributed or {}).get("shipped", [])), 2)
        # The bytes each link-table stage's scrub checked, over all sections (MB).
        scrub = {
            x["stage"]: round(sum(s.get("scrubbed_bytes", 0) for s in x["sections"]) / 1e6)
            for x in m.stages or []
            if any("scrubbed_bytes" in s for s in x["sections"])
        }
        # A stage that built a new base: that rebuild's CPU (all sections) and wall (the longest).
        rebuilt = {
            x["stage"]: [
                round(sum(s.get("compact_cpu_seconds", 0) for s in x["sections"]), 1),
                round(max(s.get("compact_seconds", 0) for s in x["sections"]), 1),
            ]
            for x in m.stages or []
            if any("compact_seconds" in s for s in x["sections"])
        }
        extra = {"step0_cpu_s": step0, "stages_cpu_wall_s": stages, "compact_cpu_wall_s": rebuilt}
        extra.update(scrub_mb=scrub, ship_s=ship)
        print(json.dumps({**row, "runs": runs, **extra, "load": round(os.getloadavg()[0], 2)}), flush=True)
    if not a.keep:
        shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
