"""Helpers for tests of the distributed writer: inputs split across sections, and one
readable view of a db whose sections live under several roots."""

from __future__ import annotations

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


def gather(roots: list[Path], db: str = "crawl") -> webdb.WebDB:
    """The rack db read in place: the first root's identity/CURRENT/gen, each section from the
    root that holds it (``webdb.open(..., section_dirs=)``, what ``webdb read --section-dir`` does)."""
    dirs = {
        int(d.name[len("section-") :]): str(d) for r in roots for d in (r / db).glob("section-*") if any(d.iterdir())
    }
    return webdb.open(str(roots[0] / db), section_dirs=dirs)


def committed(root: Path, db: str = "crawl") -> int:
    return int((root / db / "CURRENT").read_text().split()[0])


def assert_state(roots: list[Path], gen: int, expect: dict) -> None:
    """Every location is at generation ``gen``; together they hold ``expect`` and pass check()."""
    assert [committed(r) for r in roots] == [gen] * len(roots)
    db = gather(roots)
    assert snapshot(db) == expect
    with db.reader() as r:
        r.check()


def no_leftovers(roots: list[Path], db: str = "crawl") -> None:
    for r in roots:
        left = [p for p in (r / db).rglob("*") if {"edits", "tmp"} & set(p.relative_to(r / db).parts)]
        assert left == [], left
