#!/usr/bin/env python3
"""Steady-state results (driver result lines) as a markdown table and a plot.

    python bench/plot_rounds.py bench/data/results.jsonl --png docs/img/rounds.png

``bench/run.py --rounds R`` calls ``table`` and ``plot``. One result line is one ``driver.py
--rounds R`` run: a peer at one scale N, with its ``rounds_s`` (seconds of each round, in order).
The table gives per peer and N the load, the mean round, the first and last round and the ratio of
the mean to the same peer's mean at the smallest N (how a round's cost follows the db's size); the
plot has round time against round number (left) and mean round time against db size (right). Rows
with an error are listed, never dropped.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from report import json_rows


def load_rows(path: str) -> list[dict]:
    return json_rows(path, lambda r: {"peer", "N"} <= r.keys(), "peer and N")


def _series(row: dict) -> list[float]:
    return row.get("rounds_s") or ([row["round_s"]] if "round_s" in row else [])


def table(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r and _series(r)]
    base: dict[str, float] = {}
    for r in sorted(ok, key=lambda r: r["N"]):
        s = _series(r)
        base.setdefault(r["peer"], sum(s) / len(s))
    out = [
        "| peer | N | rounds | load s | mean round s | first | last | mean / smallest N | peak MiB | checksum |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(ok, key=lambda r: (r["peer"], r["N"])):
        s = _series(r)
        mean = sum(s) / len(s)
        out.append(
            f"| {r['peer']} | {r['N']:,} | {len(s)} | {r.get('load_s', 0):.1f} | {mean:.1f} | {s[0]:.1f} | "
            f"{s[-1]:.1f} | {mean / base[r['peer']]:.2f}x | {r.get('peak_anon_mib', 0):,.0f} | "
            f"{r.get('checksum', '-')} |"
        )
    for r in rows:
        if "error" in r:
            out.append(f"| {r['peer']} | {r['N']:,} | failed: {r['error']} |")
    return "\n".join(out)


def plot(rows: list[dict], png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ok = [r for r in rows if "error" not in r and _series(r)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    by_peer: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in sorted(ok, key=lambda r: (r["peer"], r["N"])):
        s = _series(r)
        left.plot(range(1, len(s) + 1), s, marker="o", label=f"{r['peer']} N={r['N']:,}")
        by_peer[r["peer"]].append((r["N"], sum(s) / len(s)))
    for peer, pts in by_peer.items():
        right.plot([n for n, _ in pts], [m for _, m in pts], marker="o", label=peer)
    left.set(xlabel="round", ylabel="round time (s)", title="Round time, round by round")
    right.set(xlabel="pages in the db (N)", ylabel="mean round time (s)", title="Mean round against db size")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_xscale("log")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="driver result lines, e.g. bench/data/results.jsonl from bench/run.py")
    ap.add_argument("--png", help="write the plot here (matplotlib)")
    a = ap.parse_args(argv)
    rows = load_rows(a.results)
    if not rows:
        print(f"{a.results}: no results", file=sys.stderr)
        return 2
    print(table(rows))
    if a.png:
        plot(rows, a.png)
        print(f"\n![round time against round number and db size]({a.png.split('docs/', 1)[-1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
