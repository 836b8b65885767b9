#!/usr/bin/env python3
"""The peer harness's read test on an existing db, without reloading it.

    PYTHONPATH=.:bench python bench/bench_lookups.py --db /tmp/w-lk/db --data bench/data/n1000000 \
        [--repeat 3] [--only getpage|inlinks] [--profile] [--cache-mb 128] [--warm]

Runs ``lookups.txt`` through ``get_page`` and ``inlinks.txt`` through ``inlinks`` exactly as
``bench/driver.py`` does (the calls of bench/peer_webdb.py, a fresh reader each
repeat, so the first pass starts with a cold block cache as in the harness) and prints the
rates (per wall second, and per CPU second of this process: steadier on a shared machine),
the found/inlink counts (compare them before and after a change), the peak RSS, the load
average and which block codec ran (``compiled``: the C extension, or pure Python when it is not
built or ``WEBDB_PURE_PYTHON=1``).  ``--profile`` runs one pass under cProfile and prints the
top functions.  ``--warm`` keeps one reader for every pass: from the second pass on, the rates
of a long-lived reader (each table's index read and the cache filled in the first).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import time

from peer_webdb import Peer

import webdb
from webdb.tables import block


class OpenPeer(Peer):
    """The bench peer over an existing db (no create, no load)."""

    def __init__(self, path: str, cache_mb: int | None):
        self.db = webdb.open(path)
        if cache_mb is not None:
            self.db.settings = self.db.settings.replace(cache_mb=cache_mb)
        self.r = None


def read_list(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def one_pass(peer: Peer, urls: list[str], links: list[str], only: str | None) -> dict:
    out: dict = {}
    if only in (None, "getpage"):
        t, c = time.perf_counter(), time.process_time()
        found = sum(peer.get_page(u) is not None for u in urls)
        s, cs = time.perf_counter() - t, time.process_time() - c
        out.update(getpage_per_s=round(len(urls) / s), getpage_per_cpu_s=round(len(urls) / cs), found=found)
    if only in (None, "inlinks"):
        t, c = time.perf_counter(), time.process_time()
        nin = sum(len(peer.inlinks(u)) for u in links)
        s, cs = time.perf_counter() - t, time.process_time() - c
        out.update(inlinks_per_s=round(len(links) / s), inlinks_per_cpu_s=round(len(links) / cs), inlinks=nin)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True, help="an existing db (driver.py --keep leaves WORK/db)")
    ap.add_argument("--data", required=True, help="the webgraph.py folder with lookups.txt, inlinks.txt")
    ap.add_argument("--repeat", type=int, default=3, help="passes, each with a fresh reader")
    ap.add_argument("--only", choices=("getpage", "inlinks"))
    ap.add_argument("--cache-mb", type=int, help="override the db's cache_mb setting")
    ap.add_argument("--profile", action="store_true", help="one pass under cProfile")
    ap.add_argument("--warm", action="store_true", help="one reader for every pass (not a fresh one each)")
    a = ap.parse_args()
    urls = read_list(os.path.join(a.data, "lookups.txt"))
    links = read_list(os.path.join(a.data, "inlinks.txt"))
    warm = OpenPeer(a.db, a.cache_mb) if a.warm else None
    for i in range(1 if a.profile else a.repeat):
        peer = warm or OpenPeer(a.db, a.cache_mb)
        if a.profile:
            prof = cProfile.Profile()
            prof.enable()
        rec = one_pass(peer, urls, links, a.only)
        if a.profile:
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        if warm is None:
            peer.close()
        rec.update(
            repeat=i,
            peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            load=os.getloadavg()[0],
            compiled=block.COMPILED,
        )
        print(json.dumps(rec), flush=True)
    if warm is not None:
        warm.close()


if __name__ == "__main__":
    main()
