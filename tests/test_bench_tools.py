"""bench/plot_rounds.py: the steady-state table and plot from driver result lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(os.path.dirname(HERE), "bench", "plot_rounds.py")


def _write(path, rows) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True, timeout=120)


def test_table_and_plot(tmp_path):
    rows = [
        {"peer": "webdb-k2", "N": 1000000, "load_s": 100.0, "rounds_s": [30.0, 34.0, 32.0], "checksum": "abc"},
        {"peer": "webdb-k2", "N": 3000000, "load_s": 300.0, "rounds_s": [40.0, 41.0, 39.0], "checksum": "def"},
        {"peer": "sortmerge", "N": 1000000, "round_s": 14.0, "load_s": 14.0},
        {"peer": "sqlite", "N": 3000000, "error": "OSError: disk full"},
    ]
    res = tmp_path / "steady.jsonl"
    _write(res, rows)
    png = tmp_path / "docs" / "img" / "rounds.png"
    png.parent.mkdir(parents=True)
    p = _run(str(res), "--png", str(png))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # mean 32 at 1M, 40 at 3M: the ratio P2 is judged by
    assert "| webdb-k2 | 1,000,000 | 3 | 100.0 | 32.0 | 30.0 | 32.0 | 1.00x |" in p.stdout
    assert "| webdb-k2 | 3,000,000 | 3 | 300.0 | 40.0 | 40.0 | 39.0 | 1.25x |" in p.stdout
    assert "| sortmerge | 1,000,000 | 1 | 14.0 | 14.0 |" in p.stdout
    assert any(line.startswith("| sqlite | 3,000,000 | failed: OSError: disk full") for line in lines)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(img/rounds.png)" in p.stdout


@pytest.mark.parametrize(
    "bad, why",
    [("{not json", "not a JSON line"), ('{"peer": "x"}', "not a driver result"), ("[1, 2]", "not a driver result")],
)
def test_bad_line_is_named(tmp_path, bad, why):
    res = tmp_path / "steady.jsonl"
    _write(res, [{"peer": "a", "N": 1, "round_s": 1.0}, bad])
    p = _run(str(res))
    assert p.returncode != 0
    assert f"{res}:2: {why}" in p.stderr
    assert "Traceback" not in p.stderr
