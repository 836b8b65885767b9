"""Helpers for tests of the distributed writer: racks whose sections live in local roots,
inputs split across sections, the same calls applied by one local writer, and one readable
view of a db whose sections live under several roots."""

from __future__ import annotations

import json
from pathlib import Path

from dbutil import snapshot

import webdb
from webdb.writer.inputs import apply_call


def local_roots(tmp: Path, k: int, name: str = "hosts.ini") -> tuple[Path, list[Path]]:
    """A hosts.ini (``tmp/name``) of a k-section rack whose section j lives in its own local root
    ``tmp/rJ`` (made here); returns the ini's path and the roots."""
    roots = [tmp / f"r{j}" for j in range(k)]
    for r in roots:
        r.mkdir(parents=True, exist_ok=True)
    ini = tmp / name
    ini.write_text(
        f"[ndfs]\ndb = crawl\n[sections]\ncount = {k}\n" + "".join(f"{j} = {r}\n" for j, r in enumerate(roots))
    )
    return ini, roots


def apply_local(db: webdb.WebDB, calls: list[str]) -> None:
    """Recorded writer calls (JSON lines) applied to ``db`` in one local batch."""
    with db.writer() as w:
        for c in calls:
            apply_call(w, json.loads(c))


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
