"""Rebalance to other section counts keeps every record; readers over a mount of host roots."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from dbutil import batch_b, make_db, snapshot

import webdb
from webdb.errors import CorruptionError


@pytest.mark.parametrize("k_from,k_to", [(1, 3), (2, 1), (2, 5), (5, 2)])
def test_rebalance_keeps_all_and_evens_sections(tmp_path, k_from, k_to):
    db = make_db(tmp_path / "db", sections=k_from)
    before = snapshot(db)
    m = db.rebalance(k_to)
    assert m.sections.k == k_to
    assert snapshot(db) == before
    with db.reader() as r:
        r.check()
        pages = [t.get("pages_by_url", {}).get("records", 0) for t in r.manifest.tables]
    assert max(pages) - min(pages) <= 1  # exact quantiles: equal page counts
    # A batch after the rebalance works on the new split.
    with db.writer() as w:
        batch_b(w)
    with db.reader() as r:
        r.check()
        assert r.sections.k == k_to


def test_rebalance_cli_and_unused_files_removed(tmp_path):
    path = tmp_path / "db"
    make_db(path, sections=2)
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "rebalance", str(path), "--sections", "3", "--json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["from"] == 2 and out["to"] == 3 and out["raw_blocks"] > 0
    # A second rebalance: files of two generations back are gone.
    subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "rebalance", str(path), "--sections", "2"],
        check=True,
        capture_output=True,
    )
    gens = {f.split("-")[0] for d in os.listdir(path) if d.startswith("section-") for f in os.listdir(path / d)}
    assert len(gens) <= 2
    bad = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "rebalance", str(path), "--sections", "0"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "sections must be" in bad.stderr


def test_reader_over_a_mount_of_host_roots(tmp_path):
    """Sections spread over per-host roots (as a rack leaves them) read as one db from a mount."""
    src = make_db(tmp_path / "crawl", sections=3)
    want = snapshot(src)
    mount = tmp_path / "mnt"
    for j, host in enumerate(["alpha", "beta", "gamma"]):
        d = mount / host / "crawl"
        d.mkdir(parents=True)
        shutil.copytree(tmp_path / "crawl" / f"section-{j:04d}", d / f"section-{j:04d}")
    meta = tmp_path / "meta" / "crawl"  # identity, CURRENT and gen/ (any host's copy)
    meta.mkdir(parents=True)
    for f in ("webdb.json", "CURRENT"):
        shutil.copy(tmp_path / "crawl" / f, meta / f)
    shutil.copytree(tmp_path / "crawl" / "gen", meta / "gen")
    db = webdb.open(str(meta), mount=str(mount))
    assert snapshot(db) == want
    with db.reader() as r:
        r.check()
        assert r.get_page("http://h3.example/p3") is not None
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "read", str(meta), "--mount", str(mount), "--stats", "--json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["pages"] == want["counts"][0]
    # One section given explicitly, the rest from the mount; a missing one is a clear error.
    db2 = webdb.open(str(meta), section_dirs={0: str(mount / "alpha" / "crawl" / "section-0000")}, mount=str(mount))
    assert snapshot(db2) == want
    shutil.rmtree(mount / "gamma")
    with pytest.raises(CorruptionError, match="missing table file"):
        webdb.open(str(meta), mount=str(mount)).reader()
