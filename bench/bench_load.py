#!/usr/bin/env python3
"""The bulk load alone: wall and CPU seconds, the peak anonymous memory of the whole load and
of each phase, and a digest of the table files written (the same digest: the same files).

    python bench/bench_load.py --data bench/data/n1000000 --work /tmp/load [--memory-mb 512]
        [--src TREE]

``--src`` loads with the webdb of another tree (a ``git archive`` of an older commit with its
codec built in place: ``python setup.py build_ext --inplace``), to compare two loaders side by
side on the same machine.  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def tables_digest(root: str) -> str:
    """sha256 of the table files, in path order (the first 16 hex digits)."""
    h = hashlib.sha256()
    for d, dirs, fs in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(fs):
            if f.endswith((".pbu", ".pbm", ".lbu", ".lbm")):
                with open(os.path.join(d, f), "rb") as fh:
                    for b in iter(lambda: fh.read(1 << 24), b""):
                        h.update(b)
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a bench/webgraph.py folder (pages.tsv, links.tsv)")
    ap.add_argument("--work", required=True, help="scratch folder for the db (removed afterwards)")
    ap.add_argument("--memory-mb", type=int, default=None, help="the load's budget (default: the db's, 512)")
    ap.add_argument("--src", default=None, help="import webdb from this tree instead of this checkout's")
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    if a.src:
        sys.path.insert(0, os.path.abspath(a.src))
    from driver import MemMonitor
    from peer_webdb import arrow_links, arrow_pages

    import webdb
    from webdb.tools.bulkarrow import bulk_load_arrow

    db_path = os.path.join(a.work, "db")
    shutil.rmtree(db_path, ignore_errors=True)
    db = webdb.create(db_path)
    over = {} if a.memory_mb is None else {"memory_mb": a.memory_mb}
    mon = MemMonitor()
    mon.start()
    peaks: dict[str, int] = {}

    def say(msg: str) -> None:  # the peak of each phase, then the next phase's from zero
        peaks[msg.split(":")[0]] = round(mon.peak_kib / 1024)
        mon.peak_kib = 0

    t, c = time.perf_counter(), time.process_time()
    pages, links = os.path.join(a.data, "pages.tsv"), os.path.join(a.data, "links.tsv")
    m = bulk_load_arrow(db, arrow_pages(pages), arrow_links(links), progress=say, **over)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    mon.stop_ev.set()
    mon.join()
    rec = {
        "data": os.path.basename(os.path.normpath(a.data)),
        "src": webdb.__file__,
        "load_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_anon_mib": max([*peaks.values(), round(mon.peak_kib / 1024)]),
        "phase_peak_mib": peaks,
        "phase_s": m.bulk.get("seconds"),
        "tables": tables_digest(db_path),
        "loadavg": round(os.getloadavg()[0], 1),
    }
    shutil.rmtree(db_path, ignore_errors=True)
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
