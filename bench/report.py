#!/usr/bin/env python3
"""Driver result lines (bench/driver.py, one JSON line per run) as markdown: medians over runs,
the round time as a ratio to the sort pipeline's, the checksums and the state checks.

    python bench/report.py bench/data/results.jsonl

``bench/run.py`` calls ``machine()`` and ``peer_table()`` to write its results file.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections import defaultdict
from importlib.metadata import PackageNotFoundError, version
from statistics import median

ORDER = {"sortmerge": 0, "rocksdb": 1, "sqlite": 2, "duckdb": 3}


def sh(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def versions() -> str:
    import sqlite3

    out = [f"Python {platform.python_version()}", f"SQLite {sqlite3.sqlite_version}"]
    for mod in ("duckdb", "rocksdict", "numpy", "pyarrow"):
        try:
            out.append(f"{mod} {version(mod)}")
        except PackageNotFoundError:
            pass
    out.append(sh("sort --version | head -1"))
    out.append("awk: " + sh("awk -W version 2>&1 | head -1"))
    return ", ".join(out)


def machine() -> list[str]:
    """Markdown bullets naming the machine and the software the figures were measured with."""
    mem_gib = int(sh("awk '/MemTotal/ {print $2}' /proc/meminfo") or 0) / 2**20
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    return [
        f"- machine: {os.cpu_count()} CPUs ({cpu}), {mem_gib:.1f} GiB, Linux {platform.release()}, "
        f"load average before the run {os.getloadavg()[0]:.2f}",
        f"- software: {versions()}",
    ]


def _median(rows: list[dict], field: str) -> float:
    return median(r[field] for r in rows)


def peer_table(rows: list[dict]) -> list[str]:
    """The one-round table (medians per peer and scale), the final-state counts and any failures."""
    phys = [r for r in rows if r.get("kind") == "phys"]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("kind") != "phys":
            groups[(r["N"], r["F"], r["peer"])].append(r)
    out = [
        "Medians over runs (run 1 also verifies the final state); times are wall seconds; round records = "
        "fetched pages + their outlinks; peak RSS = peak summed anonymous RSS of the peer's process tree "
        "(sampled every 50 ms, verification excluded); disk = database size after the round(s).",
        "",
        "| peer | N | F | runs | load s | round s | round records/s | round / sort-merge | getPage lookups/s | "
        "inlinks queries/s | peak RSS MiB | disk MiB | checksum | state ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    errors = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], ORDER.get(k[2], 9), k[2])):
        n, f, peer = key
        good = [r for r in groups[key] if "error" not in r]
        errors += [f"{peer} N={n} run {r['run']}: {r['error']}" for r in groups[key] if "error" in r]
        if not good:
            out.append(f"| {peer} | {n:,} | {f:,} | 0 | failed | | | | | | | | | |")
            continue
        sm = [r["round_s"] for r in groups.get((n, f, "sortmerge"), []) if "error" not in r]
        ratio = f"{_median(good, 'round_s') / median(sm):.1f}x" if sm else "-"
        ver = [r for r in good if "checksum" in r]
        ck = ver[0]["checksum"] if ver else "-"
        ok = ("yes" if ver[0]["consistent"] else "NO " + json.dumps(ver[0]["counts"])) if ver else "-"
        out.append(
            f"| {peer} | {n:,} | {f:,} | {len(good)} | {_median(good, 'load_s'):.1f} | "
            f"{_median(good, 'round_s'):.1f} | "
            f"{_median(good, 'round_rps'):,.0f} | {ratio} | {_median(good, 'lookups_per_s'):,.0f} | "
            f"{_median(good, 'inlinks_per_s'):,.0f} | {_median(good, 'peak_anon_mib'):,.0f} | "
            f"{_median(good, 'disk_mib'):,.0f} | {ck} | {ok} |"
        )
    out += ["", "Final-state counts (run 1):", ""]
    for key in sorted(groups):
        for r in groups[key]:
            if "counts" in r:
                out.append(
                    f"- {key[2]} N={key[0]:,}: {r['counts']}, read check (found/inlinks) {r['read_check']}, "
                    f"verify {r['verify_s']:.0f} s"
                )
    if phys:
        p = phys[-1]
        out += [
            "",
            "Physical limits:",
            "",
            f"- disk under the work folder, dd 2 GiB bs=4M: write (conv=fdatasync) {p['dd_write_mib_s']:.0f} MiB/s, "
            f"read (iflag=direct) {p['dd_read_mib_s']:.0f} MiB/s",
            f"- `LC_ALL=C sort -S 1G --parallel=2` of {os.path.basename(p['sort_file'])} ({p['sort_mib']:.0f} MiB, "
            f"{p['sort_lines']:,} lines, from page cache, output to disk): {p['sort_s']:.1f} s = "
            f"{p['sort_mib_s']:.0f} MiB/s = {p['sort_lines_s']:,.0f} lines/s",
        ]
    if errors:
        out += ["", "Failures:", ""] + [f"- {e}" for e in errors]
    return out


def reads_table(rows: list[dict]) -> list[str]:
    """The read table of run.py's ``reads`` suite: per scale and peer, the median getPage and
    inlinks rates per wall second and per CPU second over the passes, and each as a ratio to
    webdb's (webdb / peer: above 1, webdb reads faster), with the read check and the load."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    errors = []
    for r in rows:
        if "error" in r:
            errors.append(f"{r['peer']} N={r['N']:,} pass {r['run']}: {r['error']}")
        else:
            groups[(r["N"], r["peer"])].append(r)
    fields = ("lookups_per_s", "lookups_per_cpu_s", "inlinks_per_s", "inlinks_per_cpu_s")
    out = [
        "Medians over the passes (each a fresh process reading the same keys: 100k getPage, then "
        "10k inlinks); per CPU s = per second of the process's CPU time; webdb / peer = webdb's "
        "median over the peer's (above 1: webdb reads faster).",
        "",
        "| peer | N | passes | getPage/s | per CPU s | webdb / peer | inlinks/s | per CPU s | webdb / peer | "
        "found/inlinks | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, peer in sorted(groups, key=lambda k: (k[0], ORDER.get(k[1].split("-")[0], -1), k[1])):
        good = groups[(n, peer)]
        med = {f: _median(good, f) for f in fields}
        web = [g for (m, p), g in groups.items() if m == n and p.startswith("webdb")]
        ratio = {f: _median(web[0], f) / med[f] for f in fields} if web else {}
        r = {f: f"{ratio[f]:.2f} / {ratio[f.replace('_s', '_cpu_s')]:.2f}" for f in fields[::2]} if web else {}
        out.append(
            f"| {peer} | {n:,} | {len(good)} | {med['lookups_per_s']:,.0f} | {med['lookups_per_cpu_s']:,.0f} | "
            f"{r.get('lookups_per_s', '-')} | {med['inlinks_per_s']:,.0f} | {med['inlinks_per_cpu_s']:,.0f} | "
            f"{r.get('inlinks_per_s', '-')} | {good[0]['read_check']} | "
            f"{min(g['load_avg'] for g in good):.1f}–{max(g['load_avg'] for g in good):.1f} |"
        )
    out += ["", "webdb / peer cells: per wall second / per CPU second."]
    if errors:
        out += ["", "Failures:", ""] + [f"- {e}" for e in errors]
    return out


def json_rows(path: str, ok, need: str) -> list[dict]:
    """The JSON lines of ``path`` (blank lines skipped); a line that is not JSON, or whose
    object ``ok`` refuses, ends the run naming ``path:line`` and what it ``need``s."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not a JSON line ({e.msg})") from None
            if not isinstance(row, dict) or not ok(row):
                raise SystemExit(f"{path}:{n}: not a driver result (needs {need})")
            rows.append(row)
    return rows


def load_rows(path: str) -> list[dict]:
    return json_rows(
        path, lambda r: r.get("kind") == "phys" or {"peer", "N", "F", "run"} <= r.keys(), "peer, N, F and run"
    )


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    path = args[0] if args else "bench/data/results.jsonl"
    print("\n".join(machine() + [""] + peer_table(load_rows(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
