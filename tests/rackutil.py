"""Helpers for tests of the distributed writer: inputs split across sections, and one
readable view of a db whose sections live under several roots."""

from __future__ import annotations

import shutil
from pathlib import Path

from dbutil import snapshot

import webdb


def split(calls: list[str], dirs: list[Path], tag: str) -> dict[int, dict]:
    """Section j applies the j-th contiguous slice of ``calls``, from a file in ``dirs[j]``: the
    concatenation in section order is the original order (docs/distributed.md)."""
    k, n = len(dirs), len(calls)
    out = {}
    for j, d in enumerate(dirs):
        p = d / f"{tag}-{j}.jsonl"
        p.write_text("".join(c + "\n" for c in calls[j * n // k : (j + 1) * n // k]))
        out[j] = {"paths": [str(p)]}
    return out


def gather(roots: list[Path], dest: Path, db: str = "crawl") -> webdb.WebDB:
    """One readable copy of a rack db: the first root's identity/CURRENT/gen, every root's
    section directories (a test-side view; the lead's multi-root Reader does this in place)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    src = roots[0] / db
    for f in ("webdb.json", "CURRENT"):
        shutil.copy(src / f, dest / f)
    shutil.copytree(src / "gen", dest / "gen")
    for r in roots:
        for d in sorted((r / db).glob("section-*")):
            shutil.copytree(d, dest / d.name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("edits"))
    return webdb.open(str(dest))


def committed(root: Path, db: str = "crawl") -> int:
    return int((root / db / "CURRENT").read_text())


def assert_state(roots: list[Path], tmp: Path, gen: int, expect: dict) -> None:
    """Every location is at generation ``gen``; together they hold ``expect`` and pass check()."""
    assert [committed(r) for r in roots] == [gen] * len(roots)
    db = gather(roots, tmp / "gathered")
    assert snapshot(db) == expect
    with db.reader() as r:
        r.check()


def no_leftovers(roots: list[Path], db: str = "crawl") -> None:
    for r in roots:
        left = [p for p in (r / db).rglob("*") if {"edits", "tmp"} & set(p.relative_to(r / db).parts)]
        assert left == [], left
