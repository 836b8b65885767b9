"""bench/bench_rack.py on a tiny workload: the round through local sections, sshd hosts and a
Dask cluster ends with the same digests, and the report has every mode and section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "bench_rack.py"
MD5 = ["%032x" % (i * 7919) for i in range(1, 40)]


def workload(d: Path, n: int = 36) -> Path:
    """pages.tsv, links.tsv and round.tsv in webgraph.py's layout (bench/roundtsv.py)."""
    d.mkdir()
    urls = [f"http://h{i % 5}.example/p{i}" for i in range(n)]
    pages, links, rnd = [], [], []
    for i, u in enumerate(urls):
        fetched = i % 3 == 0
        md5, outlinks = (MD5[i], 2) if fetched else ("", 0)
        pages.append(f"{u}\t{md5}\t{int(fetched)}\t1716500000\t0\t2592000\t1.0\t{outlinks}")
        if fetched:
            links += [f"{MD5[i]}\t{urls[(i + 1) % n]}\tnext", f"{MD5[i]}\t{urls[(i + 7) % n]}\tmore"]
    for i, u in enumerate(urls[:12]):
        if i == 5:
            rnd.append(f"{u}\t0\t\t1717200000\t")  # a failed fetch
            continue
        out = "\x1e".join(f"{t}\x1fanchor {j}" for j, t in enumerate([urls[(i + 3) % n], f"http://new.example/{i}"]))
        rnd.append(f"{u}\t1\t{MD5[i + 1]}\t1717200000\t{out}")
    for name, rows in (("pages.tsv", pages), ("links.tsv", links), ("round.tsv", rnd)):
        (d / name).write_text("".join(r + "\n" for r in rows))
    return d


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_rack_agrees_across_transports(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    data = workload(tmp_path / "data")
    work = tmp_path / "work"
    env = dict(os.environ, WEBDB_FAULTS="")
    p = subprocess.run(
        [sys.executable, str(BENCH), "--data", str(data), "--work", str(work), "--nosync"],
        capture_output=True, text=True, timeout=800, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    out = json.loads((work / "results.json").read_text())
    assert out["meta"]["agree"] and out["meta"]["section_memory_mb"] > 0
    assert {h["codec"] for h in out["meta"]["ssh_hosts"].values()} == {"compiled"}
    runs = out["results"]
    assert [r["mode"] for r in runs] == ["local", "ssh", "dask"]
    assert len({r["digest"] for r in runs}) == 1 and runs[0]["counts"]["pages"] > 36
    for r in runs:
        assert len(r["sections"]) == 3 and all(len(s["steps"]) == 6 for s in r["sections"])
        assert r["bytes"] > 0 and r["work"] > 0 and r["idle"] >= 0
        assert len(r["step_bytes"]) == 5 and sum(b for b, _ in r["step_bytes"]) == r["bytes"]
        assert sum(rb for _, rb in r["step_bytes"]) == r["remote_bytes"]
    assert runs[1]["remote_bytes"] > 0 and sorted(runs[1]["hosts"]) == ["h0", "h1", "h2"]
    for row in ("| local k=3 |", "| ssh k=3 |", "| dask k=3 |", "| ssh | 2 | h2 |", "\n- ssh: "):
        assert row in p.stdout, p.stdout
