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
    # mean 32 at 1M, 40 at 3M: the ratio to the smallest N
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


# ---- bench/run.py: the workload and the peers from the repo alone -------------------------------

RUN = os.path.join(os.path.dirname(HERE), "bench", "run.py")
GEN = os.path.join(os.path.dirname(HERE), "bench", "webgraph.py")
# The checksums of the original peers (the sort pipeline and SQLite, as they stood before they came
# into bench/) on the workload N=2000, F=200, seed 42, after round 1 and after round 2: the
# generator and the peers in bench/ must keep making these.
CHECKSUM_ROUND1 = "1fbf8940ee12"
CHECKSUM_ROUND2 = "55edf6a2c223"


def _bench(tmp_path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, RUN, "--data", str(tmp_path / "data"), "--out", str(tmp_path / "results.md"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("rounds, checksum", [(1, CHECKSUM_ROUND1), (2, CHECKSUM_ROUND2)])
def test_run_from_the_repo_digests_agree(tmp_path, rounds, checksum):
    p = _bench(tmp_path, "--pages", "2000", "--rounds", str(rounds), "--peers", "webdb,sortmerge,sqlite")
    assert p.returncode == 0, p.stderr + (tmp_path / "data" / "errors.log").read_text()
    rows = [json.loads(line) for line in (tmp_path / "data" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["peer"].split("-")[0] for r in rows) == ["sortmerge", "sqlite", "webdb"]
    for r in rows:
        assert "error" not in r, r
        assert r["consistent"], r
        assert r["checksum"] == checksum, r
        assert r["read_check"] == rows[0]["read_check"]
    results = (tmp_path / "results.md").read_text()
    assert "| sortmerge | 2,000 | 200 | 1 |" in results
    assert checksum in results
    assert ("Rounds in a row" in results) == (rounds > 1)


@pytest.mark.timeout(900)
def test_generate_suite_compares_the_due_index_with_the_scan(tmp_path):
    p = _bench(tmp_path, "--pages", "2000", "--suites", "generate")
    assert p.returncode == 0, p.stderr
    results = (tmp_path / "results.md").read_text()
    row = next(line for line in results.splitlines() if line.startswith("| 2,000 |"))
    assert "## Generate: the due index against the full scan" in results and row.endswith("| yes |"), results
    assert not (tmp_path / "data" / "generate-n2000").exists()  # the suite's db is deleted


def test_reads_suite_builds_once_and_reads_every_peers_database(tmp_path):
    """``--suites reads``: each peer's database built once (kept, marked built), then passes of
    the read test alone, interleaved, every peer reading the same keys with the same counts; a
    second invocation reuses the databases (no build) and adds its passes."""
    args = ["--pages", "2000", "--suites", "reads", "--peers", "webdb,sortmerge,sqlite", "--runs", "2"]
    p = _bench(tmp_path, *args)
    assert p.returncode == 0, p.stderr + (tmp_path / "data" / "errors.log").read_text()
    assert p.stderr.count(": build") == 3
    rows = [json.loads(line) for line in (tmp_path / "data" / "reads.jsonl").read_text().splitlines()]
    assert [r["peer"].split("-")[0] for r in rows] == ["webdb", "sortmerge", "sqlite"] * 2
    assert all(r["reads_only"] and "error" not in r for r in rows), rows
    assert len({r["read_check"] for r in rows}) == 1
    results = (tmp_path / "results.md").read_text()
    assert "| sortmerge | 2,000 | 2 |" in results and "webdb / peer" in results
    for peer in ("webdb", "sortmerge", "sqlite"):
        assert (tmp_path / "data" / "reads" / f"{peer}-n2000" / ".built").exists()
    p = _bench(tmp_path, *args[:-1], "1")
    assert p.returncode == 0 and ": build" not in p.stderr, p.stderr


def test_generator_is_seeded(tmp_path):
    def gen(out, seed):
        cmd = [sys.executable, GEN, "--pages", "500", "--round", "50", "--seed", str(seed), "--out", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
        return {f: (out / f).read_bytes() for f in ("pages.tsv", "links.tsv", "round.tsv", "lookups.txt")}

    a, b, c = gen(tmp_path / "a", 7), gen(tmp_path / "b", 7), gen(tmp_path / "c", 8)
    assert a == b
    assert a["pages.tsv"] != c["pages.tsv"]
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    assert meta["init"]["pages"] == 500 and meta["round"] == 50
    assert len(a["pages.tsv"].splitlines()) == 500


@pytest.mark.parametrize(
    "args, why",
    [
        (["--peers", "webdb,oracle"], "--peers: unknown peer oracle"),
        (["--pages", "0"], "0: expected a positive number"),
        (["--suites", "nope"], "--suites: expected some of peers, generate, reads"),
    ],
)
def test_run_bad_arguments(tmp_path, args, why):
    p = _bench(tmp_path, *args)
    assert p.returncode == 2
    assert why in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "results.md").exists()


def test_report_names_a_bad_line(tmp_path):
    res = tmp_path / "results.jsonl"
    _write(res, [{"peer": "sqlite", "N": 10, "F": 1, "run": 1, "error": "OSError: disk full"}, '{"peer": "x"}'])
    report = os.path.join(os.path.dirname(HERE), "bench", "report.py")
    p = subprocess.run([sys.executable, report, str(res)], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert f"{res}:2: not a driver result" in p.stderr
    assert "Traceback" not in p.stderr
    res.write_text(res.read_text().splitlines()[0] + "\n")
    p = subprocess.run([sys.executable, report, str(res)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "| sqlite | 10 | 1 | 0 | failed |" in p.stdout
    assert "- sqlite N=10 run 1: OSError: disk full" in p.stdout
