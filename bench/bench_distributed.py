#!/usr/bin/env python3
"""Benchmark of the distributed update: one round of the shared WebDB workload
(bench/webgraph.py) applied by k section writers, locally and over ssh.

    python bench/bench_distributed.py --data bench/data/n1000000 --work /tmp/bench-dist \\
        --local 1,2,4 --ssh 2,4 --single 1,2 --dask 2

For every k it loads the base db once (pages.tsv + links.tsv, one Writer batch, cached in
--work), then per run copies it and times the round (round.tsv cut into k contiguous parts,
part j applied by section j's writer, ``roundtsv:apply_round_tsv``):

- ``single k``: the single-process Writer (``db.writer()``; its stages run k worker processes);
- ``local k``: ``webdb update`` with k local section processes (the embedded default);
- ``ssh k``: k sshd hosts on 127.0.0.2… (tests/sshd.py), one section per host, edits moved
  over ssh (scp for files >= 8 MiB, SFTP below);
- ``dask k``: ``webdb update --dask`` on a ``distributed.LocalCluster`` of k worker processes
  on this machine (worker j declares ``section-j``), the db laid out as for ``local k``; edits
  move as task results.

Reported: wall seconds of the update, the edit bytes shipped per step (and the part that
crossed hosts), the shipping share (per step the slowest section's shipping time, summed, over
the update time), and the counts of the result (all runs must agree).  Results are printed as
a markdown table and written to --work/results.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from peer_webdb import load_tsv  # noqa: E402
from roundtsv import INPUT as ROUND  # noqa: E402
from roundtsv import apply_round_tsv  # noqa: E402

import webdb  # noqa: E402
from webdb.writer.rack import Rack, update  # noqa: E402

# The agents import the round input from here (local ones inherit it, ssh ones get it in env).
AGENT_ENV = {"PYTHONPATH": str(HERE)}


def load(path: Path, data: Path, k: int, sync: bool) -> None:
    """The base db: every page (with its score) and every link of the workload, one batch."""
    db = webdb.create(str(path), sections=k, max_retries=1 << 15, sync=sync)
    load_tsv(db, str(data / "pages.tsv"), str(data / "links.tsv"))


def base_db(work: Path, data: Path, k: int, sync: bool) -> Path:
    path = work / f"base-k{k}" / "crawl"
    if not (path / "CURRENT").exists() or (path / "CURRENT").read_text().split()[0] != "00000001":
        shutil.rmtree(path.parent, ignore_errors=True)
        path.parent.mkdir(parents=True)
        t0 = time.monotonic()
        load(path, data, k, sync)
        print(f"loaded base k={k} in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return path


def parts(work: Path, data: Path, k: int) -> list[Path]:
    """round.tsv cut into k contiguous parts (section j applies part j)."""
    d = work / f"round-k{k}"
    out = [d / f"part-{j}.tsv" for j in range(k)]
    if all(p.exists() for p in out):
        return out
    d.mkdir(parents=True, exist_ok=True)
    lines = (data / "round.tsv").read_bytes().split(b"\n")[:-1]  # not splitlines: 0x1e/0x1f are data
    n = len(lines)
    for j, p in enumerate(out):
        p.write_bytes(b"".join(x + b"\n" for x in lines[j * n // k : (j + 1) * n // k]))
    return out


def counts(db: webdb.WebDB) -> dict:
    m = db.manifest()
    tot = {t: sum(s.get(t, {}).get("records", 0) for s in m.tables) for t in ("pages_by_url", "links_by_md5")}
    fetched = sum(v for s in m.status for st, v in s.items() if st != "0")
    return {"pages": tot["pages_by_url"], "fetched": fetched, "links": tot["links_by_md5"]}


def fresh(src: Path, dst: Path) -> Path:
    shutil.rmtree(dst.parent, ignore_errors=True)
    dst.parent.mkdir(parents=True)
    shutil.copytree(src, dst)
    return dst


def run_single(work: Path, data: Path, k: int, sync: bool) -> dict:
    path = fresh(base_db(work, data, k, sync), work / "run" / "crawl")
    db = webdb.open(str(path))
    t0, c0 = time.monotonic(), time.process_time()
    with db.writer() as w:
        apply_round_tsv(w, [str(data / "round.tsv")])
        c_api = time.process_time() - c0
    seconds = time.monotonic() - t0
    stages = db.manifest().get("stages", [])
    crit = c_api + sum(max((x.get("cpu_seconds", 0.0) for x in st["sections"]), default=0.0) for st in stages)
    return {"mode": "single", "k": k, "seconds": seconds, "critical_cpu": crit, "counts": counts(db)}


def shipped(res) -> dict:
    m = res.manifest
    steps = m.distributed["shipped"]
    ship_s = sum(s["seconds"] for s in steps)

    def slowest(rows: list[dict], key: str) -> float:
        return max((x.get(key, 0.0) for x in rows), default=0.0)

    return {
        "seconds": res.seconds,
        "ship_seconds": ship_s,
        "ship_share": ship_s / res.seconds,
        "bytes_per_step": [s["bytes"] for s in steps],
        "remote_bytes_per_step": [s["remote_bytes"] for s in steps],
        "stage_seconds": [slowest(st["sections"], "seconds") for st in m.stages],
        # CPU on the critical path: the slowest section's step 0 (input, routing) plus, per
        # stage, the slowest section: the update's time when every section has its own core.
        "critical_cpu": slowest(m.distributed["step0"], "cpu_seconds")
        + sum(slowest(st["sections"], "cpu_seconds") for st in m.stages),
        "cpu_seconds": sum(m.distributed["section_cpu_seconds"]),
    }


def fresh_run(work: Path, data: Path, k: int, sync: bool) -> tuple[Path, dict]:
    """A fresh copy of the base db to update, and the update's inputs: part j for section j."""
    path = fresh(base_db(work, data, k, sync), work / "run" / "crawl")
    return path, {j: {"paths": [str(p)]} for j, p in enumerate(parts(work, data, k))}


@contextlib.contextmanager
def section_cluster(k: int, wait: float = 300) -> Iterator[str]:
    """tests/daskutil.py's cluster of k section workers (the agents' environment); yields the
    scheduler's address once every worker is up (within ``wait`` seconds)."""
    from daskutil import start_cluster

    cluster = start_cluster(k, AGENT_ENV, wait=wait)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def run_local(work: Path, data: Path, k: int, sync: bool) -> dict:
    path, inputs = fresh_run(work, data, k, sync)
    res = update(Rack.local(str(path)), inputs, input_fn=ROUND, env=AGENT_ENV)
    return {"mode": "local", "k": k, **shipped(res), "counts": counts(webdb.open(str(path)))}


def run_dask(work: Path, data: Path, k: int, sync: bool) -> dict:
    from webdb.writer.driver import update_dask

    path, inputs = fresh_run(work, data, k, sync)
    with section_cluster(k) as address:
        res = update_dask(Rack.local(str(path)), address, inputs, input_fn=ROUND)
    return {"mode": "dask", "k": k, **shipped(res), "counts": counts(webdb.open(str(path)))}


def run_ssh(work: Path, data: Path, k: int, sync: bool, cluster) -> dict:
    """One section per host: section j's directory on host j, identity/CURRENT/gen on all."""
    base = base_db(work, data, k, sync)
    hosts = cluster.hosts[:k]
    for j, h in enumerate(hosts):
        for child in h.root.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        dst = h.root / "crawl"
        dst.mkdir()
        for f in ("webdb.json", "CURRENT"):
            shutil.copy(base / f, dst / f)
        shutil.copytree(base / "gen", dst / "gen")
        shutil.copytree(base / f"section-{j:04d}", dst / f"section-{j:04d}")
        shutil.copy(parts(work, data, k)[j], h.root / "round.tsv")
    ini = "".join(h.ini() for h in hosts) + f"\n[sections]\ncount = {k}\nhosts = {', '.join(h.name for h in hosts)}\n"
    (work / "hosts.ini").write_text(ini)
    rack = Rack.from_file(work / "hosts.ini", "crawl")
    inputs = {j: {"paths": [str(h.root / "round.tsv")]} for j, h in enumerate(hosts)}
    res = update(rack, inputs, input_fn=ROUND, env=AGENT_ENV)
    gathered = work / "run" / "crawl"
    shutil.rmtree(gathered.parent, ignore_errors=True)
    gathered.mkdir(parents=True)
    shutil.copy(hosts[0].root / "crawl" / "webdb.json", gathered / "webdb.json")
    shutil.copy(hosts[0].root / "crawl" / "CURRENT", gathered / "CURRENT")
    shutil.copytree(hosts[0].root / "crawl" / "gen", gathered / "gen")
    return {"mode": "ssh", "k": k, **shipped(res), "counts": counts(webdb.open(str(gathered)))}


def best(results: list[dict]) -> list[dict]:
    """Per (mode, k) the fastest of the repeats (the machine is shared: other jobs only add)."""
    out: dict[tuple[str, int], dict] = {}
    for r in results:
        key = (r["mode"], r["k"])
        if key not in out or r["seconds"] < out[key]["seconds"]:
            out[key] = {**r, "runs": [x["seconds"] for x in results if (x["mode"], x["k"]) == key]}
    return list(out.values())


def table(results: list[dict]) -> str:
    rows = [
        "| run | k | update s (best of runs) | vs single k=1 | critical-path CPU s | shipped MB per step 0..4 "
        "(to other hosts) | shipping s | share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    results = best(results)
    one = next((r["seconds"] for r in results if r["mode"] == "single" and r["k"] == 1), None)
    for r in results:
        rel = f"{r['seconds'] / one:.2f}x" if one else ""
        runs = ", ".join(f"{x:.1f}" for x in r["runs"])
        head = f"| {r['mode']} | {r['k']} | {r['seconds']:.1f} ({runs}) | {rel} | {r['critical_cpu']:.1f} |"
        if r["mode"] == "single":
            rows.append(head + " | | |")
            continue
        mb = " / ".join(f"{b / 1e6:.0f}" for b in r["bytes_per_step"])
        rmb = " / ".join(f"{b / 1e6:.0f}" for b in r["remote_bytes_per_step"])
        rows.append(f"{head} {mb} ({rmb}) | {r['ship_seconds']:.1f} | {100 * r['ship_share']:.1f}% |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(HERE / "data" / "n100000"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "bench-distributed"))
    ap.add_argument("--single", default="1,2", help="k values of the single-process Writer baseline")
    ap.add_argument("--local", default="1,2,4", help="k values of local section processes")
    ap.add_argument("--ssh", default="2,4", help="k values over ssh (k sshd hosts)")
    ap.add_argument("--dask", default="", help="k values on a local Dask cluster of k workers (e.g. 2)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--nosync", action="store_true", help="sync=False (default: fsync like the peers)")
    a = ap.parse_args()
    data, work = Path(a.data), Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    sync = not a.nosync

    def ks(s: str) -> list[int]:
        return [int(x) for x in s.split(",") if x]

    results = []
    for _ in range(a.repeat):
        for k in ks(a.single):
            results.append(run_single(work, data, k, sync))
            print(json.dumps(results[-1]), file=sys.stderr)
        for k in ks(a.local):
            results.append(run_local(work, data, k, sync))
            print(json.dumps(results[-1]), file=sys.stderr)
        for k in ks(a.dask):
            results.append(run_dask(work, data, k, sync))
            print(json.dumps(results[-1]), file=sys.stderr)
        if ks(a.ssh):
            from sshd import start_cluster

            home = work / "home"
            home.mkdir(exist_ok=True)
            os.environ["HOME"] = str(home)  # the user's ~/.ssh is never read
            os.environ.pop("SSH_AUTH_SOCK", None)
            shutil.rmtree(work / "sshd", ignore_errors=True)
            cluster = start_cluster(work / "sshd", k=max(ks(a.ssh)))
            try:
                for k in ks(a.ssh):
                    results.append(run_ssh(work, data, k, sync, cluster))
                    print(json.dumps(results[-1]), file=sys.stderr)
            finally:
                cluster.stop_all()
    agree = len({json.dumps(r["counts"], sort_keys=True) for r in results}) == 1
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "data": str(data), "sync": sync,
            "machine": f"{os.cpu_count()} cpus, {platform.platform()}, Python {platform.python_version()}",
            "load": os.getloadavg(), "counts_agree": agree}  # fmt: skip
    (work / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(json.dumps(meta))
    print(table(results))
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
