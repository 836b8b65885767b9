#!/usr/bin/env python3
"""Common harness for the WebDB peers: times load and round, measures peak memory, disk size,
the read test (getPage / inlinks) and verifies the final state with per-table checksums.

A peer is a class with: load(pages_tsv, links_tsv), apply_round(round_tsv), get_page(url),
inlinks(url), dump(table) -> iterator of text blocks of canonical lines, close().
Canonical tables (each sorted bytewise, '\\t'-separated, '\\n'-terminated):
  pages_by_url  url md5 status fetch_time retries interval score num_outlinks
  pages_by_md5  md5 url
  links_by_md5  from_md5 to_url anchor
  links_by_url  to_url from_md5 anchor
"""

import argparse
import hashlib
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time

import psutil

TABLES = ("pages_by_url", "pages_by_md5", "links_by_md5", "links_by_url")
DAY = 86400
NEW_PAGE_VALS = ("", 0, None, 0, 2592000, 1.0, 0)  # md5 status fetch_time(=t) retries interval score nout


def read_round(path):
    """Yields (url, ok, md5, t, [(to_url, anchor), ...])."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            url, ok, md5, t, out = line.rstrip("\n").split("\t")
            links = [tuple(link.split("\x1f")) for link in out.split("\x1e")] if out else []
            yield url, ok == "1", md5, int(t), links


class MemMonitor(threading.Thread):
    """Samples the summed anonymous RSS (RssAnon) of this process and all descendants."""

    def __init__(self, period=0.05):
        super().__init__(daemon=True)
        self.period, self.peak_kib, self.stop_ev = period, 0, threading.Event()
        self.me = psutil.Process()

    @staticmethod
    def anon_kib(pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def run(self):
        while not self.stop_ev.is_set():
            try:
                pids = [self.me.pid] + [c.pid for c in self.me.children(recursive=True)]
            except psutil.Error:
                pids = [self.me.pid]
            self.peak_kib = max(self.peak_kib, sum(self.anon_kib(p) for p in pids))
            self.stop_ev.wait(self.period)


def du_bytes(path):
    return int(subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout.split()[0])


class SqlPeer:
    """The reads, dump and close of a peer on a DB-API connection ``self.db`` holding the tables
    pages(url, md5, status, fetch_time, retries, interval, score, num_outlinks) and
    links(from_md5, to_url, anchor).  ``QUERIES``: the query that lists each canonical table in
    order (a peer's own, to name the index that serves it)."""

    QUERIES: dict[str, str] = dict(
        pages_by_url="SELECT url, md5, status, fetch_time, retries, interval, score, num_outlinks"
        " FROM pages ORDER BY url",
        pages_by_md5="SELECT md5, url FROM pages ORDER BY md5, url",
        links_by_md5="SELECT from_md5, to_url, anchor FROM links ORDER BY from_md5, to_url",
        links_by_url="SELECT to_url, from_md5, anchor FROM links ORDER BY to_url, from_md5",
    )

    def get_page(self, url):
        return self.db.execute("SELECT * FROM pages WHERE url = ?", (url,)).fetchone()

    def inlinks(self, url):
        return self.db.execute("SELECT from_md5, anchor FROM links WHERE to_url = ?", (url,)).fetchall()

    def dump(self, table):
        cur = self.db.execute(self.QUERIES[table])
        while rows := cur.fetchmany(100_000):
            yield "".join("\t".join(map(str, r)) + "\n" for r in rows)

    def close(self):
        self.db.close()


def digest(peer):
    res, counts = {}, {}
    for t in TABLES:
        h, n, empty_md5 = hashlib.md5(), 0, 0
        for block in peer.dump(t):
            b = block if isinstance(block, bytes) else block.encode()
            h.update(b)
            n += b.count(b"\n")
            if t == "pages_by_md5":
                empty_md5 += b.count(b"\n\t") + b.startswith(b"\t")
        res[t], counts[t] = h.hexdigest()[:12], n
        if t == "pages_by_md5":
            counts["fetched"] = n - empty_md5
    return res, counts


def read_test(peer, data: str, rec: dict) -> None:
    """The read test: ``get_page`` of every URL of lookups.txt, then ``inlinks`` of every URL of
    inlinks.txt, one call each in this process; rates per wall second and per CPU second of the
    process (steadier on a shared machine), and found/inlinks counts every peer must agree on."""
    urls = open(os.path.join(data, "lookups.txt")).read().split("\n")[:-1]
    t, c = time.perf_counter(), time.process_time()
    found = sum(peer.get_page(u) is not None for u in urls)
    rec["lookup_s"], cpu = time.perf_counter() - t, time.process_time() - c
    rec["lookups_per_s"] = len(urls) / rec["lookup_s"]
    rec["lookups_per_cpu_s"] = len(urls) / cpu
    urls = open(os.path.join(data, "inlinks.txt")).read().split("\n")[:-1]
    t, c = time.perf_counter(), time.process_time()
    nin = sum(len(peer.inlinks(u)) for u in urls)
    rec["inlinks_s"], cpu = time.perf_counter() - t, time.process_time() - c
    rec["inlinks_per_s"] = len(urls) / rec["inlinks_s"]
    rec["inlinks_per_cpu_s"] = len(urls) / cpu
    rec["read_check"] = f"{found}/{nin}"


def reads_only(peer_cls, a, meta: dict) -> dict:
    """``--reads-only``: the read test on the database a ``--keep`` run left in ``--work`` (the
    peer's ``reopen`` if it has one, else its constructor, opens it), in a fresh process."""
    rec = dict(peer=a.peer, N=meta["pages"], F=meta["round"], run=a.run, reads_only=True)
    try:
        peer = (getattr(peer_cls, "reopen", None) or peer_cls)(a.work, meta, a.opt)
        rec["peer"] = peer.name
        read_test(peer, a.data, rec)
        rec["load_avg"] = os.getloadavg()[0]
        peer.close()
    except Exception as e:
        import traceback

        traceback.print_exc()
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    return rec


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", help="module name of the peer (peer_<name>.py)")
    ap.add_argument("--data", required=True, help="folder made by webgraph.py")
    ap.add_argument("--work", required=True, help="scratch folder for the peer's database (wiped)")
    ap.add_argument("--run", type=int, default=1)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the database after the run")
    ap.add_argument("--opt", default="", help="peer option string, e.g. engine=rocksdb")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="apply round.tsv, round-2.tsv .. round-R.tsv (webgraph.py --rounds R) one after the other",
    )
    ap.add_argument(
        "--reads-only",
        action="store_true",
        help="only the read test, on the database a --keep run left in --work (nothing is wiped)",
    )
    return ap.parse_args()


def time_rounds(peer, a, meta, rec):
    """Load the db, apply round 1 and, with --rounds R, rounds 2..R; meta["expected"] becomes the
    counts after the last round."""
    t = time.perf_counter()
    peer.load(os.path.join(a.data, "pages.tsv"), os.path.join(a.data, "links.tsv"))
    rec["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    peer.apply_round(os.path.join(a.data, "round.tsv"))
    rec["round_s"] = time.perf_counter() - t
    rec["round_rps"] = rec["records"] / rec["round_s"]
    if a.rounds > 1:
        rounds = meta["rounds"][: a.rounds]
        if len(rounds) < a.rounds:
            raise SystemExit(f"{a.data} has {len(rounds)} rounds; regenerate with webgraph.py --rounds {a.rounds}")
        rec["rounds_s"] = [rec["round_s"]]
        for r in rounds[1:]:
            meta["t_round"] = r["t_round"]  # the peers' new pages take the round's fetch time
            t = time.perf_counter()
            peer.apply_round(os.path.join(a.data, f"round-{r['round']}.tsv"))
            rec["rounds_s"].append(time.perf_counter() - t)
        rec["rounds_records"] = sum(r["records"] for r in rounds)
        rec["rounds_mean_s"] = sum(rec["rounds_s"]) / len(rec["rounds_s"])
        meta["expected"] = rounds[-1]["expected"]


def record_memory(mon, rec):
    rec["peak_anon_mib"] = mon.peak_kib / 1024
    ru = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    rec["max_rss_mib"] = ru / 1024


def verify(peer, expected, rec):
    """The per-table digests and whether the counts are the expected ones."""
    t = time.perf_counter()
    dig, counts = digest(peer)
    rec["counts"] = dict(pages=counts["pages_by_url"], fetched=counts["fetched"], links=counts["links_by_md5"])
    rec["consistent"] = (
        counts["pages_by_url"] == counts["pages_by_md5"] == expected["pages"]
        and counts["links_by_md5"] == counts["links_by_url"] == expected["links"]
        and counts["fetched"] == expected["fetched"]
    )
    rec["digest"] = dig
    rec["checksum"] = hashlib.md5(json.dumps(dig, sort_keys=True).encode()).hexdigest()[:12]
    rec["verify_s"] = time.perf_counter() - t


def main(peer_cls=None):
    a = parse_args()
    if peer_cls is None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        mod = importlib.import_module("peer_" + a.peer.split(":")[0])
        peer_cls = mod.Peer
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    if a.reads_only:
        print(json.dumps(reads_only(peer_cls, a, meta)), flush=True)
        return
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    mon = MemMonitor()
    mon.start()
    rec = dict(peer=a.peer, N=meta["pages"], F=meta["round"], run=a.run, records=meta["round_stats"]["records"])
    if os.environ.get("SM_SERIAL") == "1" and a.peer == "sortmerge":
        rec["note"] = "SM_SERIAL=1 (LinksByMD5 and LinksByURL merged one after the other)"
    try:
        peer = peer_cls(a.work, meta, a.opt)
        rec["peer"] = peer.name
        time_rounds(peer, a, meta, rec)
        rec["disk_mib"] = du_bytes(a.work) / 2**20
        read_test(peer, a.data, rec)
        record_memory(mon, rec)
        if not a.no_verify:
            verify(peer, meta["expected"], rec)
        peer.close()
    except Exception as e:  # report the failure as a result row
        import traceback

        traceback.print_exc()
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        mon.stop_ev.set()
        if not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
