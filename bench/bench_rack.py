#!/usr/bin/env python3
"""The rack round: one round of the shared workload (webgraph.py) applied to a k-section db by
k section processes on this machine (``local``), by k loopback sshd hosts (``ssh``) and by a
Dask cluster of k worker processes (``dask``), from the same base db.

    python bench/bench_rack.py --data bench/data/n1000000 --work /tmp/rack --k 3 --repeat 2 --deploy

Per run it reports the update's wall time and where it went, from the batch manifest and the
per-host results (the same fields for every transport):

- ``work``: per step (step 0 = read the input + route; stages 1..5) the mean of the sections'
  times, summed: what the round costs when every section takes the same time;
- ``idle``: the mean over sections of the section's wall time minus its own step times: the
  time a section spends at the barriers, shipping its edits and waiting for the others;
- of that, ``slowest``: per step the slowest section's time minus the mean, summed (the time
  lost to the slowest host), and ``ship``: per step the slowest section's shipping time,
  summed (edits to their share groups, and the done markers);
- ``coordinator``: the update's wall time minus the slowest section's: starting the agents,
  open, identity, sync, breakpoints, prepare and the commit;

and per host: its sections, seconds, step 0 and stage times, bytes shipped (to other hosts).
Every section gets the same memory in every mode (``--section-memory-mb``, default what a
local section gets: the db's ``memory_mb`` divided by k), so the modes spill alike and differ
by their transport only.
Every run's tables are hashed (sha256 of each table file of the committed generation, per
section): the digests must agree across transports and with the local round.

``--deploy`` first runs ``fab deploy``'s code (webdb.tools.deploy.deploy) on the sshd hosts and
runs their agents from the deployed virtualenvs (the block codec built on each host); every
ssh host's codec is read with ``python -m webdb.tools.deploy facts`` and printed.  The machine is
shared: compare the transports of one run, side by side (``--repeat`` interleaves them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from bench_distributed import AGENT_ENV, base_db, counts, fresh_run, parts, section_cluster  # noqa: E402
from roundtsv import INPUT as ROUND  # noqa: E402

import webdb  # noqa: E402
from webdb.writer.rack import Rack, update  # noqa: E402

STEPS = ["step0", "stage1", "stage2", "stage3", "stage4", "stage5"]
HOST_PYTHON = "/usr/bin/python3"  # the sshd hosts' own python, for --deploy's virtualenvs


def table_digests(manifest: dict, section_dir) -> str:
    """sha256 over every table file (and its runs) of the committed generation, per section,
    in section and table order; ``section_dir(j)`` is where section j's files are."""
    h = hashlib.sha256()
    for j, tabs in enumerate(manifest.tables):
        d = Path(section_dir(j))
        for t in sorted(tabs):
            for f in [tabs[t]["file"], *(r["file"] for r in tabs[t].get("runs", []))]:
                with open(d / f, "rb") as fh:
                    h.update(f"{j}/{t}/".encode() + hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()


def breakdown(res) -> dict:
    """Where the update's wall time went (see the module doc), per step and per section."""
    m = res.manifest
    dist = m.distributed
    k = len(dist["section_seconds"])
    per = [[0.0] * len(STEPS) for _ in range(k)]  # per[j][step]
    cpu = [[0.0] * len(STEPS) for _ in range(k)]
    for j, s0 in enumerate(dist["step0"]):
        per[j][0] = s0["input_seconds"] + s0["route_seconds"]
        cpu[j][0] = s0["cpu_seconds"]
    for st in m.stages:
        for row in st["sections"]:
            per[row["section"]][st["stage"]] = row["seconds"]
            cpu[row["section"]][st["stage"]] = row["cpu_seconds"]
    mean = [sum(per[j][s] for j in range(k)) / k for s in range(len(STEPS))]
    worst = [max(per[j][s] for j in range(k)) for s in range(len(STEPS))]
    idle = [dist["section_seconds"][j] - sum(per[j]) for j in range(k)]
    return {
        "seconds": res.seconds,
        "work": sum(mean),
        "work_cpu": sum(map(sum, cpu)) / k,
        "idle": sum(idle) / k,
        "slowest": sum(worst) - sum(mean),
        "ship": sum(s["seconds"] for s in dist["shipped"]),
        "coordinator": res.seconds - max(dist["section_seconds"]),
        "bytes": sum(s["bytes"] for s in dist["shipped"]),
        "remote_bytes": sum(s["remote_bytes"] for s in dist["shipped"]),
        "step_bytes": [[s["bytes"], s["remote_bytes"]] for s in dist["shipped"]],  # steps 0..4
        "step_mean": mean,
        "step_worst": worst,
        "sections": [
            {"section": j, "seconds": dist["section_seconds"][j], "steps": per[j], "cpu": cpu[j]} for j in range(k)
        ],
        "hosts": {
            label: {
                "ok": r.ok,
                "seconds": r.seconds,
                "sections": (r.value or {}).get("sections", []),
                "bytes": r.bytes,
                "remote_bytes": (r.value or {}).get("remote_bytes", 0),
            }
            for label, r in res.hosts.items()
        },
    }


def run_local(work: Path, data: Path, k: int, sync: bool, mem: int) -> dict:
    path, inputs = fresh_run(work, data, k, sync)
    # One location holds the k sections: they share memory_mb.
    res = update(Rack.local(str(path)), inputs, input_fn=ROUND, env=AGENT_ENV, settings={"memory_mb": mem * k})
    db = webdb.open(str(path))
    digest = table_digests(res.manifest, db.section_dir)
    return {"mode": "local", "k": k, **breakdown(res), "digest": digest, "counts": counts(db)}


def run_dask(work: Path, data: Path, k: int, sync: bool, mem: int) -> dict:
    from webdb.writer.driver import update_dask

    path, inputs = fresh_run(work, data, k, sync)
    with section_cluster(k, wait=600) as address:
        res = update_dask(Rack.local(str(path)), address, inputs, input_fn=ROUND, settings={"memory_mb": mem * k})
    db = webdb.open(str(path))
    digest = table_digests(res.manifest, db.section_dir)
    return {"mode": "dask", "k": k, **breakdown(res), "digest": digest, "counts": counts(db)}


class SSHRack:
    """k loopback sshd hosts (tests/sshd.py), optionally deployed with webdb.tools.deploy."""

    def __init__(self, work: Path, k: int, deploy: bool) -> None:
        from sshd import start_cluster

        home = work / "home"
        home.mkdir(exist_ok=True)
        os.environ["HOME"] = str(home)  # the user's ~/.ssh is never read
        os.environ.pop("SSH_AUTH_SOCK", None)
        shutil.rmtree(work / "sshd", ignore_errors=True)
        self.work, self.k = work, k
        self.cluster = start_cluster(work / "sshd", k=k)
        self.hosts = self.cluster.hosts[:k]
        ini = "[ndfs]\ndb = crawl\n\n"
        for h in self.hosts:
            py = f"{h.root}/.webdb/venv/bin/python" if deploy else sys.executable
            ini += h.ini().replace(f"python = {sys.executable}", f"python = {py}")
        ini += f"\n[sections]\ncount = {k}\nhosts = {', '.join(h.name for h in self.hosts)}\n"
        self.ini = work / "hosts.ini"
        self.ini.write_text(ini)
        self.deploy_seconds = None
        if deploy:
            from webdb.tools.deploy import deploy as deploy_hosts
            from webdb.tools.deploy import report

            t0 = time.monotonic()
            res = deploy_hosts(str(self.ini), base_python=HOST_PYTHON)
            self.deploy_seconds = time.monotonic() - t0
            print(report(res), file=sys.stderr)
            res.raise_on_failure()
        self.facts = {h.name: self._facts(h) for h in self.hosts}

    def _facts(self, h) -> dict:
        """The host's webdb as its agents run it (the python hosts.ini names)."""
        from webdb.ndfs import load_config

        py = load_config(str(self.ini)).hosts[h.name].python
        with h.fabric_connection() as c:
            out = c.run(f"{shlex.quote(py)} -m webdb.tools.deploy facts", hide=True, in_stream=False).stdout
        facts = json.loads(out)
        return {"python": py, "codec": facts["codec"], "why": facts["why"], "version": facts["python"]}

    def run(self, data: Path, sync: bool, mem: int) -> dict:
        """One section per host: section j's directory on host j, identity/CURRENT/gen on all."""
        base = base_db(self.work, data, self.k, sync)
        for j, h in enumerate(self.hosts):
            dst = h.root / "crawl"
            shutil.rmtree(dst, ignore_errors=True)  # the db only: the deployed venv stays
            dst.mkdir()
            for f in ("webdb.json", "CURRENT"):
                shutil.copy(base / f, dst / f)
            shutil.copytree(base / "gen", dst / "gen")
            shutil.copytree(base / f"section-{j:04d}", dst / f"section-{j:04d}")
            shutil.copy(parts(self.work, data, self.k)[j], h.root / "round.tsv")
        rack = Rack.from_file(self.ini, "crawl")
        inputs = {j: {"paths": [str(h.root / "round.tsv")]} for j, h in enumerate(self.hosts)}
        res = update(rack, inputs, input_fn=ROUND, env=AGENT_ENV, settings={"memory_mb": mem})  # one per host
        digest = table_digests(res.manifest, lambda j: self.hosts[j].root / "crawl" / f"section-{j:04d}")
        gathered = self.work / "run" / "crawl"
        shutil.rmtree(gathered.parent, ignore_errors=True)
        gathered.mkdir(parents=True)
        for f in ("webdb.json", "CURRENT"):
            shutil.copy(self.hosts[0].root / "crawl" / f, gathered / f)
        shutil.copytree(self.hosts[0].root / "crawl" / "gen", gathered / "gen")
        c = counts(webdb.open(str(gathered)))
        return {"mode": "ssh", "k": self.k, **breakdown(res), "digest": digest, "counts": c, "facts": self.facts}

    def close(self) -> None:
        self.cluster.stop_all()


def table(results: list[dict]) -> str:
    """Markdown: one row per run, then the per-host times of each mode's fastest run."""
    local = min((r["seconds"] for r in results if r["mode"] == "local"), default=None)
    rows = [
        "| run | update s | vs local (best) | work s | idle s | of it: slowest host s | ship s | coordinator s "
        "| shipped MB (to other hosts) | digest |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rel = f"{r['seconds'] / local:.2f}x" if local else ""
        rows.append(
            f"| {r['mode']} k={r['k']} | {r['seconds']:.1f} | {rel} | {r['work']:.1f} | {r['idle']:.1f} "
            f"| {r['slowest']:.1f} | {r['ship']:.1f} | {r['coordinator']:.1f} "
            f"| {r['bytes'] / 1e6:.0f} ({r['remote_bytes'] / 1e6:.0f}) | {r['digest'][:12]} |"
        )
    rows += ["", "MB shipped per step 0–4 (to other hosts), each mode's first run:"]
    for mode in dict.fromkeys(r["mode"] for r in results):
        r = next(x for x in results if x["mode"] == mode)
        per = " / ".join(f"{b / 1e6:.0f} ({rb / 1e6:.0f})" for b, rb in r["step_bytes"])
        rows.append(f"- {mode}: {per}")
    rows += ["", "| run | section | host | section s | " + " | ".join(STEPS) + " |", "|---|---|---|---|" + "---|" * 6]
    for mode in dict.fromkeys(r["mode"] for r in results):
        r = min((x for x in results if x["mode"] == mode), key=lambda x: x["seconds"])
        where = {j: lab for lab, h in r["hosts"].items() for j in h["sections"]}
        for s in r["sections"]:
            steps = " | ".join(f"{t:.1f}" for t in s["steps"])
            rows.append(f"| {mode} | {s['section']} | {where.get(s['section'], '?')} | {s['seconds']:.1f} | {steps} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(HERE / "data" / "n1000000"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "bench-rack"))
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--modes", default="local,ssh,dask")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--deploy", action="store_true", help="run the ssh hosts' agents from fab deploy's venvs")
    ap.add_argument("--nosync", action="store_true", help="sync=False (default: fsync like the peers)")
    ap.add_argument("--section-memory-mb", type=int, default=0, help="each section's memory (default memory_mb/k)")
    a = ap.parse_args()
    data, work = Path(a.data), Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    sync, modes = not a.nosync, a.modes.split(",")
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    meta = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "data": str(data), "k": a.k,
            "sync": sync, "commit": commit.stdout.strip(), "load_before": os.getloadavg(),
            "machine": f"{os.cpu_count()} cpus, {platform.platform()}, Python {platform.python_version()}"}  # fmt: skip
    mem = a.section_memory_mb or int(webdb.open(str(base_db(work, data, a.k, sync))).settings.memory_mb) // a.k
    meta["section_memory_mb"] = mem
    rack = SSHRack(work, a.k, a.deploy) if "ssh" in modes else None
    if rack is not None:
        meta["ssh_hosts"] = rack.facts
        meta["deploy_seconds"] = rack.deploy_seconds
        print(json.dumps(rack.facts), file=sys.stderr)
    results = []
    try:
        for _ in range(a.repeat):
            for mode in modes:
                if mode == "local":
                    results.append(run_local(work, data, a.k, sync, mem))
                elif mode == "dask":
                    results.append(run_dask(work, data, a.k, sync, mem))
                elif mode == "ssh":
                    results.append(rack.run(data, sync, mem))
                short = {x: results[-1][x] for x in ("mode", "seconds", "work", "idle", "slowest", "ship")}
                print(json.dumps(short), file=sys.stderr)
    finally:
        if rack is not None:
            rack.close()
    meta["agree"] = len({(r["digest"], json.dumps(r["counts"], sort_keys=True)) for r in results}) == 1
    meta["load_after"] = os.getloadavg()
    (work / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(json.dumps(meta))
    print(table(results))
    return 0 if meta["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
