#!/usr/bin/env python3
"""The benchmark in one command: the workload, webdb and its peers side by side, one results file.

    python bench/run.py --pages 100000                    # N=100k, F=10k, one round, every peer
    python bench/run.py --pages 1000000 --runs 3          # N=1M, F=100k, medians of three runs
    python bench/run.py --pages 1000000,3000000 --round 100000 --rounds 10 --peers webdb,sortmerge,sqlite \
        --png docs/img/rounds.png                         # 10 rounds in a row at two scales, and the plot
    make bench N=100000                                   # the same as the first, from a fresh clone

Steps, for each N of ``--pages`` in turn: ``webgraph.py`` writes the seeded workload into
``--data`` (cached per N, F, rounds and seed); every peer runs ``driver.py`` in its own process,
``--runs`` times, runs interleaved across peers (run 1 also hashes the four tables); then the
results file is written (default ``bench/results.md``, git-ignored: the committed figures are
the tables of docs/performance.md).

Peers (``--peers``, comma-separated; ``name:opt`` passes ``--opt opt`` to the driver, e.g.
``webdb:round=writer`` or ``webdb:sections=1``): ``webdb`` (bench/peer_webdb.py), ``sortmerge``
(GNU sort/join/awk, bench/sortmerge.sh), ``rocksdb`` (rocksdict), ``sqlite`` (the standard
library's sqlite3), ``duckdb``.  A peer whose Python module is not installed is skipped and
named in the results (``pip install -e '.[bench]'`` installs them all).

Suites: ``SUITES`` maps a name to a function that runs one benchmark and returns its section
of the results file (markdown lines); ``--suites`` picks them (default: all).  ``peers`` is the
update benchmark above; ``generate`` times ``webdb generate`` through the due index against
the full scan (bench/bench_generate.py).  A new benchmark joins the one command as one more entry.

Exit status 0 when every verified peer ends with the same checksum and the counts the generator
expects, 1 when one does not (the results file says which), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import plot_rounds  # noqa: E402
import report  # noqa: E402

PEERS = ("webdb", "sortmerge", "rocksdb", "sqlite", "duckdb")
# The Python module each peer needs beyond the standard library and the test extra.
NEEDS = {"webdb": "webdb", "rocksdb": "rocksdict", "duckdb": "duckdb"}


def positive(s: str) -> int:
    n = int(s)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{s}: expected a positive number")
    return n


def scales(s: str) -> list[int]:
    return [positive(x) for x in s.split(",")]


def workload(a: argparse.Namespace, n: int) -> str:
    """The data folder for (N, F, rounds, seed), generated unless it is there already."""
    f = a.round or max(1, n // 10)
    name = f"n{n}" if a.rounds == 1 else f"r{a.rounds}-n{n}-f{f}"
    if f != n // 10 and a.rounds == 1:
        name += f"-f{f}"
    if a.seed != 42:
        name += f"-s{a.seed}"
    out = os.path.join(a.data, name)
    if not os.path.exists(os.path.join(out, "meta.json")):
        cmd = [sys.executable, os.path.join(HERE, "webgraph.py"), "--pages", str(n), "--round", str(f)]
        cmd += ["--seed", str(a.seed), "--rounds", str(a.rounds), "--out", out]
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode:
            why = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
            print(f"run.py: the workload N={n}, F={f} into {out}: {why}", file=sys.stderr)
            sys.exit(2)
    return out


def run_peer(spec: str, data: str, work: str, run: int, rounds: int, log: str, more: list[str] = ()) -> dict:
    """One ``driver.py`` run of a peer (``more``: further driver options): its result line (with
    ``error`` if the run failed)."""
    name, _, opt = spec.partition(":")
    env = dict(os.environ)
    # The update's section processes import bench/roundtsv.py and the checkout's webdb.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, HERE, env.get("PYTHONPATH")]))
    cmd = [sys.executable, os.path.join(HERE, "driver.py"), "--peer", name, "--opt", opt, "--data", data]
    cmd += ["--work", work, "--run", str(run), "--rounds", str(rounds)]
    if run > 1:
        cmd.append("--no-verify")
    cmd += more
    with open(log, "a", encoding="utf-8") as err:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    lines = p.stdout.strip().splitlines()
    try:
        rec = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        meta = json.load(open(os.path.join(data, "meta.json"), encoding="utf-8"))
        rec = dict(peer=name, N=meta["pages"], F=meta["round"], run=run, error=f"exit {p.returncode}, see {log}")
    if opt and rec["peer"] == name:  # webdb names its options itself (webdb-k1, webdb-k2-writer)
        rec["peer"] += f" ({opt})"
    return rec


def peers_suite(a: argparse.Namespace) -> tuple[list[str], bool]:
    """The update benchmark: load, one round (or ``--rounds``), the read test, the digests, at
    each scale of ``--pages`` in turn."""
    needs = {s: NEEDS.get(s.partition(":")[0]) for s in a.peers}
    missing = {s for s, mod in needs.items() if mod and importlib.util.find_spec(mod) is None}
    if "sortmerge" in [s.partition(":")[0] for s in a.peers] and not shutil.which("join"):
        missing.add("sortmerge")
    peers = [s for s in a.peers if s not in missing]
    rows: list[dict] = []
    lines = [f"## Update: load, {a.rounds} round(s) in a row, reads (seed {a.seed})", ""]
    with open(os.path.join(a.data, "results.jsonl"), "w", encoding="utf-8") as out:
        for n in a.pages:
            data = workload(a, n)
            meta = json.load(open(os.path.join(data, "meta.json"), encoding="utf-8"))
            lines.append(
                f"- N = {n:,}: {meta['init']['links']:,} links, {meta['hosts']:,} hosts; round 1: "
                f"{meta['round']:,} pages fetched, {meta['round_stats']['records']:,} records; "
                f"expected after the last round: {(meta.get('rounds') or [meta])[-1]['expected']}"
            )
            if a.phys and n == a.pages[-1]:
                cmd = ["bash", os.path.join(HERE, "physlimits.sh"), os.path.join(a.data, "phys"), f"{data}/links.tsv"]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode == 0:
                    rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
            for run in range(1, a.runs + 1):
                for spec in peers:
                    print(f"{time.strftime('%H:%M:%S')} {spec} N={n} run {run}", file=sys.stderr, flush=True)
                    work, log = os.path.join(a.data, "work"), os.path.join(a.data, "errors.log")
                    rec = run_peer(spec, data, work, run, a.rounds, log)
                    rows.append(rec)
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
    lines += [""] + report.peer_table(rows)
    driver_rows = [r for r in rows if r.get("kind") != "phys"]
    if a.rounds > 1:
        lines += ["", "Rounds in a row:", "", plot_rounds.table(driver_rows)]
        if a.png:
            plot_rounds.plot(driver_rows, a.png)
    if missing:
        lines += ["", "Skipped (not installed; `pip install -e '.[bench]'`): " + ", ".join(sorted(missing))]
    ok = not any("error" in r for r in driver_rows)
    for n in a.pages:
        verified = [r for r in driver_rows if "checksum" in r and r["N"] == n]
        if len({r["checksum"] for r in verified}) > 1 or not all(r["consistent"] for r in verified):
            ok = False
            detail = ", ".join(f"{r['peer']} {r['checksum']} (state ok: {r['consistent']})" for r in verified)
            lines += ["", f"**At N = {n:,} the verified peers do not agree**: {detail}"]
    return lines, ok


def generate_suite(a: argparse.Namespace) -> tuple[list[str], bool]:
    """Generate through the due index against the full scan (bench/bench_generate.py): the same
    top-N (100k) and per-host cap (100) at each scale of ``--pages``, ``webdb generate`` as a
    command, both ways on the same db state, their fetchlists compared byte for byte.  The db
    of each scale is deleted afterwards (it takes disk)."""
    lines = ["## Generate: the due index against the full scan (top-N 100,000, 100 per host, 2 fetchlists)", ""]
    head = "| N | selection CPU: index / scan | generate: index wall (CPU) | generate: scan wall (CPU) |"
    head += " index CPU vs smallest N | peak memory: index / scan | records read | selected | same fetchlists |"
    lines += [head]
    lines += ["|---|---|---|---|---|---|---|---|---|"]
    ok = True
    first = None
    for n in a.pages:
        data = workload(a, n)
        work = os.path.join(a.data, f"generate-n{n}")
        shutil.rmtree(work, ignore_errors=True)
        cmd = [sys.executable, os.path.join(HERE, "bench_generate.py"), "--data", data, "--work", work]
        cmd += ["--runs", str(max(2, a.runs))]
        print(f"{time.strftime('%H:%M:%S')} generate N={n}", file=sys.stderr, flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        shutil.rmtree(work, ignore_errors=True)
        rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        s = next((r for r in rows if r.get("step") == "summary"), None)
        if s is None:
            lines.append(f"| {n:,} | failed (exit {p.returncode}) | | | | | | | |")
            ok = False
            continue
        first = first or s["index_cpu_seconds"]
        ok = ok and s["identical"]
        lines.append(
            f"| {n:,} | {s['index_selection_cpu']:.2f} s / {s['scan_selection_cpu']:.2f} s | "
            f"{s['index_seconds']:.2f} s ({s['index_cpu_seconds']:.2f}) | "
            f"{s['scan_seconds']:.2f} s ({s['scan_cpu_seconds']:.2f}) | "
            f"{s['index_cpu_seconds'] / max(first, 1e-9):.2f}x | "
            f"{s['index_max_rss_mib']:,.0f} / {s['scan_max_rss_mib']:,.0f} MiB | "
            f"{s['index_read']:,} | {s['selected']:,} | {'yes' if s['identical'] else '**no**'} |"
        )
    return lines, ok


def reads_suite(a: argparse.Namespace) -> tuple[list[str], bool]:
    """The read test alone, every peer on its own database of each scale, passes interleaved:
    each peer's database is built once (load and one round, ``driver.py --keep`` into
    ``DATA/reads/PEER-nN``; kept and reused by later runs), then ``--runs`` passes of
    ``driver.py --reads-only`` take the peers in turn, each pass a fresh process reading the same
    keys.  On a shared machine the passes of all peers see about the same load, so the ratios
    to webdb mean more than the rates."""
    needs = {s: NEEDS.get(s.partition(":")[0]) for s in a.peers}
    peers = [s for s in a.peers if needs[s] is None or importlib.util.find_spec(needs[s]) is not None]
    rows: list[dict] = []
    ok = True
    for n in a.pages:
        data = workload(a, n)
        for spec in peers:
            work = os.path.join(a.data, "reads", f"{spec.replace(':', '-')}-n{n}")
            if not os.path.exists(os.path.join(work, ".built")):
                print(f"{time.strftime('%H:%M:%S')} {spec} N={n}: build", file=sys.stderr, flush=True)
                rec = run_peer(spec, data, work, 1, 1, os.path.join(a.data, "errors.log"), ["--keep", "--no-verify"])
                if "error" in rec:
                    rows.append(rec)
                    ok = False
                    continue
                open(os.path.join(work, ".built"), "w").close()
        for run in range(1, a.runs + 1):
            for spec in peers:
                work = os.path.join(a.data, "reads", f"{spec.replace(':', '-')}-n{n}")
                if not os.path.exists(os.path.join(work, ".built")):
                    continue
                print(f"{time.strftime('%H:%M:%S')} {spec} N={n} reads, pass {run}", file=sys.stderr, flush=True)
                rows.append(run_peer(spec, data, work, run, 1, os.path.join(a.data, "errors.log"), ["--reads-only"]))
    with open(os.path.join(a.data, "reads.jsonl"), "w", encoding="utf-8") as out:
        out.writelines(json.dumps(r) + "\n" for r in rows)
    ok = ok and not any("error" in r for r in rows)
    for n in a.pages:
        if len({r["read_check"] for r in rows if r["N"] == n and "read_check" in r}) > 1:
            ok = False
    head = [f"## Reads: getPage and inlinks, every peer on its own database (seed {a.seed})", ""]
    return head + report.reads_table(rows), ok


SUITES: dict[str, Callable[[argparse.Namespace], tuple[list[str], bool]]] = {
    "peers": peers_suite,
    "generate": generate_suite,
    "reads": reads_suite,
}


def commit() -> str:
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if p.returncode:
        # Not a clone: a `git archive` of one commit fills bench/COMMIT in (.gitattributes).
        try:
            with open(os.path.join(ROOT, "bench", "COMMIT")) as f:
                stamp = f.read().strip()
        except OSError:
            stamp = ""
        return stamp if stamp and not stamp.startswith("$") else "unknown"
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True)
    return p.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--pages", type=scales, default=[100_000], help="N, pages in the initial db; several: 1000000,3000000"
    )
    ap.add_argument("--round", type=positive, help="F, pages fetched per round (default N/10)")
    ap.add_argument("--rounds", type=positive, default=1, help="rounds in a row (default 1)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--runs", type=positive, default=1, help="runs of each peer (default 1; medians are reported)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated (default {','.join(PEERS)})")
    ap.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated (default {','.join(SUITES)})")
    ap.add_argument("--data", default=os.path.join(HERE, "data"), help="workload and scratch (default bench/data)")
    ap.add_argument("--out", default=os.path.join(HERE, "results.md"), help="results file (default bench/results.md)")
    ap.add_argument("--png", help="with --rounds > 1: the plot of round times (matplotlib)")
    ap.add_argument("--phys", action="store_true", help="also measure dd and sort throughput (writes 2 GiB)")
    a = ap.parse_args(argv)
    a.peers = [p for p in a.peers.split(",") if p]
    unknown = [p for p in a.peers if p.partition(":")[0] not in PEERS]
    suites = [s for s in a.suites.split(",") if s]
    if unknown or not a.peers:
        ap.error(f"--peers: unknown peer {', '.join(unknown) or '(none)'}; expected some of {', '.join(PEERS)}")
    if [s for s in suites if s not in SUITES] or not suites:
        ap.error(f"--suites: expected some of {', '.join(SUITES)}")
    try:
        os.makedirs(a.data, exist_ok=True)
    except OSError as e:
        ap.error(f"--data {a.data}: {e.strerror}")
    lines = [
        "# webdb benchmark results",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}",
        *report.machine(),
        f"- command: bench/run.py {' '.join(argv if argv is not None else sys.argv[1:])}",
        "",
    ]
    ok = True
    for s in suites:
        section, good = SUITES[s](a)
        lines += section + [""]
        ok &= good
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip("\n") + "\n")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
