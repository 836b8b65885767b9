"""The per-generation figures each manifest carries (``rounds``, written at commit; the rounds
view of ``webdb serve``): one row per generation with its counts, kept across the commits that
remove older manifests, bounded, and read gracefully from a db whose manifests predate them."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import webdb
from webdb.core import manifest
from webdb.core.sections import Sections
from webdb.serve import views


def _batch(db, urls: list[str], status: int | None = None) -> None:
    with db.writer() as w:
        for u in urls:
            w.add_page(webdb.Page(u, status=status) if status is not None else webdb.Page(u))


def test_every_commit_adds_its_row_and_keeps_the_history(tmp_path):
    db = webdb.create(str(tmp_path / "db"), sections=2, sync=False)
    _batch(db, [f"http://a{i}.example/" for i in range(5)])
    _batch(db, [f"http://b{i}.example/" for i in range(3)], status=int(webdb.Status.FETCHED))
    _batch(db, ["http://a0.example/"])  # nothing new
    m = db.manifest()
    rows = m.rounds
    assert [r["generation"] for r in rows] == [0, 1, 2, 3]  # gen/ keeps 2 manifests; rounds keep all
    assert [r["pages"] for r in rows] == [0, 5, 8, 8]
    assert [r["new_pages"] for r in rows] == [None, 5, 3, 0]
    assert rows[2]["status"] == {"fetched": 3, "unfetched": 5}
    assert rows[-1] == manifest.round_row(m, 8)  # the row of a generation is what its manifest says
    assert all(r["seconds"] is not None and r["bytes"] > 0 for r in rows[1:])
    assert rows[1]["committed"] <= rows[2]["committed"] <= rows[3]["committed"]
    with db.reader() as r:
        d = views.rounds(r)
    assert [x["generation"] for x in d["rounds"]] == [0, 1, 2, 3] and d["rounds"][0]["since_previous"] is None


def test_a_parent_without_rounds_starts_the_history_and_the_view_copes(tmp_path):
    db = webdb.create(str(tmp_path / "db"), sync=False)
    _batch(db, ["http://a.example/"])
    parent = replace(db.manifest(), rounds=None)  # as a writer without rounds wrote it
    child = replace(parent, generation=parent.generation + 1, parent=parent.generation)
    rows = manifest.rounds(child, parent)
    assert [r["generation"] for r in rows] == [1, 2] and rows[0]["new_pages"] is None and rows[1]["new_pages"] == 0
    # The view of a committed manifest with no rows at all: one row, its own.
    old = SimpleNamespace(manifest=parent, generation=parent.generation)
    assert [x["generation"] for x in views.rounds(old)["rounds"]] == [1]


def test_the_history_is_bounded():
    secs = Sections(1, [])
    parent = manifest.empty(secs, generation=manifest.ROUNDS_KEPT + 5)
    parent.rounds = [manifest.round_row(replace(parent, generation=g)) for g in range(manifest.ROUNDS_KEPT + 6)]
    child = replace(parent, generation=parent.generation + 1, parent=parent.generation)
    rows = manifest.rounds(child, parent)
    assert len(rows) == manifest.ROUNDS_KEPT and rows[-1]["generation"] == child.generation
