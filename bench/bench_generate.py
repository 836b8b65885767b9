#!/usr/bin/env python3
"""Generate through the due index against the full scan, on a db of the benchmark workload.

    python bench/bench_generate.py --data bench/data/n1000000 --work /tmp/bench-gen-1m

Loads the workload's pages.tsv and links.tsv into a fresh db (bench/peer_webdb.py's
``Peer.load``, which builds the due index; ``--db`` uses an existing one, ``--round`` also
applies round.tsv as an update first), then runs ``webdb generate`` as a command (process
start included, as an operator runs it) with the same top-N, per-host cap, fetchers and clock,
once through the due index and once with ``--full-scan``, alternating which goes first, ``--runs``
times.  Before them, the selection alone (``fetchlist.generate.choose``, in this process, no
segment, no marks) is timed both ways in CPU seconds: the part of a generate the index
changes (``--runs 0``: only that).  After each generate the db is put back to the generation
before it (``recover_to``: the marks are undone), so every generate sees the same state.  The two fetchlists of a run
(same segment name, so the same marks) must be byte for byte the same.  One JSON line per
generate, then a summary line ``{"step": "summary", ...}`` with the medians and whether every
pair of fetchlists was identical; exit status 1 if one was not.

``--peer-root DIR`` adds a third generate per run, through the due index with the webdb of
another checkout (``git archive main | tar -x -C DIR``, its C extensions copied in): old and
new code side by side on the same db, the same fetchlists required.  Each generate's CPU
(``os.wait4``: that process's own) and peak resident memory (its ``VmHWM`` at exit) are reported.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import webdb  # noqa: E402
from fetchlist.generate import choose  # noqa: E402


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def emit(d: dict) -> None:
    print(json.dumps(d), flush=True)


# ``webdb`` (webdb.cli.main) that writes its peak resident memory (VmHWM, of this process's own
# address space) to stderr's last line at exit: a child's ru_maxrss counts its parent's memory
# at the fork, and this bench process holds the loaded db's arrays.
_PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            sys.stderr.write('\\nVmHWM ' + line.split()[1] + '\\n')\n"
    "atexit.register(peak)\n"
    "sys.argv = ['webdb'] + sys.argv[1:]\n"
    "runpy.run_module('webdb.cli.main', run_name='__main__')\n"
)


def run_generate(db_path: str, out: str, args, now: int, full_scan: bool, root: str = ROOT) -> dict:
    """``webdb generate`` (the checkout ``root``'s) in a process of its own; its JSON result plus
    the wall time, the CPU time (user + system) of the process, which a shared machine changes
    less than the wall time, and its peak resident memory."""
    import tempfile

    db_path, out = os.path.abspath(db_path), os.path.abspath(out)
    cmd = [sys.executable, "-c", _PEAK, "generate", db_path, out, "--segment", "gen", "--json"]
    cmd += ["--top-n", str(args.top_n), "--max-per-host", str(args.max_per_host), "--fetchers", str(args.fetchers)]
    cmd += ["--now", str(now)] + (["--full-scan"] if full_scan else [])
    # -m puts the working directory first on sys.path: run in ``root`` so that its webdb is the one imported
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    t = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=root)
        out_text = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)  # this child's own usage (RUSAGE_CHILDREN sums them all)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t
        err.seek(0)
        err_text = err.read()
        if p.returncode:
            raise SystemExit(f"webdb generate failed (exit {p.returncode}): {err_text.strip()[-2000:]}")
    peak = [int(x.split()[1]) for x in err_text.splitlines() if x.startswith("VmHWM ")]
    return {
        **json.loads(out_text),
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 2),
        "max_rss_mib": round(peak[-1] / 1024, 1) if peak else None,
    }


def same_fetchlists(a: str, b: str) -> bool:
    """The fetchlist files of two segments, byte for byte."""
    da, db_ = os.path.join(a, "fetchlist"), os.path.join(b, "fetchlist")
    names = sorted(os.listdir(da))
    if names != sorted(os.listdir(db_)):
        return False
    return all(filecmp.cmp(os.path.join(da, n), os.path.join(db_, n), shallow=False) for n in names)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="workload directory (pages.tsv, links.tsv, round.tsv, meta.json)")
    ap.add_argument("--work", required=True, help="scratch directory (db and segments)")
    ap.add_argument("--db", help="use this existing db instead of loading one")
    ap.add_argument("--round", action="store_true", help="apply the workload's round.tsv as an update first")
    ap.add_argument("--sections", type=int, default=2)
    ap.add_argument("--top-n", type=int, default=100_000)
    ap.add_argument("--max-per-host", type=int, default=100)
    ap.add_argument("--fetchers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--peer-root", help="another checkout whose generate runs too, through the index (old vs new)")
    return ap.parse_args()


def prepare_db(args: argparse.Namespace, meta: dict, base: dict):
    """The db to generate from: ``--db``, or the workload loaded (and its round applied)."""
    if args.db:
        db = webdb.open(args.db)
    else:
        from peer_webdb import Peer

        t = time.monotonic()
        peer = Peer(args.work, meta, f"sections={args.sections},sync=0")
        peer.load(os.path.join(args.data, "pages.tsv"), os.path.join(args.data, "links.tsv"))
        db = peer.db
        emit({**base, "step": "load", "seconds": round(time.monotonic() - t, 2)})
    if args.round:
        from bench_round import write_round_segment

        from fetchlist.crawl import update_db

        seg = os.path.join(args.work, "round")
        write_round_segment(db, os.path.join(args.data, "round.tsv"), seg, args.fetchers)
        t = time.monotonic()
        update_db(db, [seg])
        emit({**base, "step": "round", "seconds": round(time.monotonic() - t, 2)})
    return db


def selections(db, args: argparse.Namespace, now: int, pages: int, base: dict) -> dict[str, float]:
    """CPU seconds of the selection alone (``choose``, no segment, no marks), each way."""
    selection = {}
    for via in ("index", "scan"):
        with db.reader() as r:
            c0 = cpu_self()
            c = choose(
                r,
                now=now,
                horizon=now,
                min_score=None,
                mark_expiry=7 * 86400,
                url_filter=None,
                top_n=args.top_n,
                max_per_host=args.max_per_host,
                max_per_domain=None,
                due_index=via == "index",
            )
            selection[via] = round(cpu_self() - c0, 2)
        row = {"step": "selection", "via": c.via, "pages": pages, "cpu_seconds": selection[via], "read": c.scanned}
        emit({**base, **row})
    return selection


def generates(db, args: argparse.Namespace, now: int, pages: int, base: dict) -> tuple[dict[str, list[dict]], bool]:
    """``--runs`` whole generates each way (and ``--peer-root``'s), alternating which goes first,
    each on the same db state; their rows and whether every fetchlist was the same."""
    rows: dict[str, list[dict]] = {"index": [], "scan": []}
    if args.peer_root:
        rows["peer"] = []
    identical = True
    for run in range(1, args.runs + 1):
        order = list(rows) if run % 2 else list(reversed(rows))
        segs = {}
        for via in order:
            gen = db.committed()
            out = os.path.join(args.work, f"run{run}-{via}")
            shutil.rmtree(out, ignore_errors=True)
            root = os.path.abspath(args.peer_root) if via == "peer" else ROOT
            res = run_generate(db.path, out, args, now, via == "scan", root)
            segs[via] = res["segment"]
            rows[via].append(res)
            emit({**base, "step": "generate", "code": via, "via": res["via"], "run": run, "pages": pages, **res})
            lock = db.lock().acquire()
            try:
                db.recover_to(gen)  # the marks undone: the next generate sees the same db
            finally:
                lock.release()
        identical = identical and all(same_fetchlists(segs["index"], segs[v]) for v in segs if v != "index")
        for s in segs.values():
            shutil.rmtree(os.path.dirname(s), ignore_errors=True)
    return rows, identical


def main() -> int:
    args = parse_args()
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    os.makedirs(args.work, exist_ok=True)
    base = {
        "pages0": meta["pages"],
        "sections": args.sections,
        "top_n": args.top_n,
        "max_per_host": args.max_per_host,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "load_average": os.getloadavg()[0],
    }
    db = prepare_db(args, meta, base)
    with db.reader() as r:
        pages = r.num_pages
    now = meta["t_round"]
    selection = selections(db, args, now, pages, base)
    if args.runs == 0:
        return 0
    rows, identical = generates(db, args, now, pages, base)
    med = {via: statistics.median(r["wall_seconds"] for r in rows[via]) for via in rows}
    cpu = {via: statistics.median(r["cpu_seconds"] for r in rows[via]) for via in rows}
    select = {via: statistics.median(r["seconds"]["scan"] for r in rows[via]) for via in rows}
    rss = {via: max(r["max_rss_mib"] for r in rows[via]) for via in rows}
    peer = (
        {"peer_cpu_seconds": cpu["peer"], "peer_seconds": med["peer"], "peer_max_rss_mib": rss["peer"]}
        if "peer" in rows
        else {}
    )
    emit(
        {
            **base,
            "step": "summary",
            "pages": pages,
            "index_seconds": med["index"],
            "scan_seconds": med["scan"],
            "index_cpu_seconds": cpu["index"],
            "scan_cpu_seconds": cpu["scan"],
            "index_selection_cpu": selection["index"],
            "scan_selection_cpu": selection["scan"],
            "index_select_seconds": select["index"],
            "scan_select_seconds": select["scan"],
            "load_average_after": os.getloadavg()[0],
            "index_max_rss_mib": rss["index"],
            "scan_max_rss_mib": rss["scan"],
            **peer,
            "index_read": rows["index"][0]["scanned"],
            "selected": rows["index"][0]["selected"],
            "identical": identical,
        }
    )
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
