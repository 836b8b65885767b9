"""The typed manifest (webdb.core.manifest.Manifest): read from its file and written back it is the
same bytes — with keys it does not name, keys an older writer left out, a named key read as
null, and whatever order the fields were set in; ``seconds`` never reaches the file."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from dbutil import batch_b, make_db

import webdb
from webdb.core.dbfiles import seal, validate_manifest
from webdb.core.manifest import Manifest, build, empty
from webdb.core.sections import Sections
from webdb.writer.location import sync_location


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    """A db of 2 sections at generation 2 (parent 1)."""
    db = make_db(tmp_path_factory.mktemp("manifest") / "db")
    with db.writer() as w:
        batch_b(w)
    return db


def raw(db: webdb.WebDB, gen: int) -> bytes:
    with open(db.manifest_path(gen), "rb") as f:
        return f.read()


def test_every_committed_manifest_reads_back_to_its_bytes(crawled, tmp_path):
    fresh = webdb.create(str(tmp_path / "fresh"), sections=3, sync=False)
    for db, gen in ((fresh, 0), (crawled, 1), (crawled, 2)):
        data = raw(db, gen)
        d = json.loads(data)
        m = Manifest.from_json(d)
        assert m.generation == gen and isinstance(m.sections, Sections) and m.extra == {} and m.absent == ()
        assert seal(m.to_json()) == data, gen
        assert db.manifest(gen) == m


def test_write_manifest_of_a_read_manifest_rewrites_the_same_bytes(crawled, tmp_path):
    copy = tmp_path / "db"
    shutil.copytree(crawled.path, copy)
    db = webdb.open(str(copy))
    before = raw(db, 2)
    m = db.manifest(2)
    m.seconds = 1.5  # the caller's: never written
    db.write_manifest(m)
    assert raw(db, 2) == before and b'"seconds": 1.5' not in before


@pytest.mark.parametrize("ordering", ["rounds last", "parent_checksum last"])
def test_the_order_fields_are_set_in_does_not_reach_the_file(crawled, ordering):
    d = json.loads(raw(crawled, 2))
    tail = ["parent_checksum", "rounds"] if ordering == "rounds last" else ["rounds", "parent_checksum"]
    reordered = {k: v for k, v in d.items() if k not in tail} | {k: d[k] for k in tail}
    assert list(reordered)[-2:] == tail
    assert seal(Manifest.from_json(reordered).to_json()) == raw(crawled, 2)


def test_keys_it_does_not_name_and_keys_left_out_survive_a_round_trip(crawled):
    d = json.loads(raw(crawled, 1))
    d.pop("checksum")
    d["future_field"] = {"a": [1, 2]}  # a newer writer's key: validate_manifest allows it
    d["compact"] = None  # a named key read as null stays null
    for gone in ("batch", "committed"):  # an older writer's manifest without them
        d.pop(gone)
    validate_manifest(d, 1, "gen/00000001.json")
    m = Manifest.from_json(d)
    assert m.extra == {"future_field": {"a": [1, 2]}, "compact": None} and m.compact is None
    assert m.absent == ("batch", "committed") and m.batch is None and m.committed is None
    assert m.to_json() == d
    assert seal(m.to_json()) == seal(d)


def test_sync_location_commits_the_rack_manifest_byte_for_byte(crawled, tmp_path):
    """A location that missed a commit is rolled forward with the master's manifest: its
    file is the master's, whatever key order the manifest arrived in."""
    behind = tmp_path / "behind"
    shutil.copytree(crawled.path, behind)
    loc = webdb.open(str(behind))
    loc.recover_to(1)
    assert not (behind / "gen" / "00000002.json").exists()
    for j in (0, 1):  # the batch's tables are there: only the commit was missed
        shutil.copytree(crawled.section_dir(j), loc.section_dir(j), dirs_exist_ok=True)
    master = crawled.manifest(2)
    sync_location(loc, loc.path, [0, 1], 2, Manifest.from_json(master.to_json()))
    assert loc.committed() == 2 and raw(loc, 2) == raw(crawled, 2)


def test_built_manifests_write_only_the_keys_they_set():
    m = empty(Sections(3))
    assert set(m.to_json()) == {"generation", "parent", "batch", "committed", "sections", "tables", "status"}
    b = build(
        generation=1,
        parent=0,
        batch="00000001-x",
        sections=Sections(1),
        tables=[{}],
        status=[{}],
        edits={"pages": 0, "links": 0},
        distributed={"hosts": {}},
    )
    assert list(b.to_json()) == [
        "generation",
        "parent",
        "batch",
        "committed",
        "sections",
        "tables",
        "status",
        "edits",
        "distributed",
    ]
    assert Manifest.from_json(b.to_json()) == replace(b, seconds=None)


def test_sections_no_split_takes_is_a_corruption_error_naming_the_file(crawled, tmp_path):
    """A manifest (unsealed, as an old writer's) whose breakpoint is no UTF-8 text, or whose k
    is beyond what a db may have: CorruptionError naming the file, not a traceback."""
    copy = tmp_path / "db"
    shutil.copytree(crawled.path, copy)
    db = webdb.open(str(copy))
    for n, sections in ((5, {"k": 2, "breakpoints": ["\ud800"]}), (6, {"k": 20000, "breakpoints": []})):
        d = {"generation": n, "parent": None, "sections": sections, "tables": [{}] * sections["k"]}
        d["status"] = [{}] * sections["k"]
        with open(db.manifest_path(n), "w") as f:
            json.dump(d, f)
        with pytest.raises(webdb.CorruptionError, match=rf"{n:08d}\.json: manifest field 'sections'"):
            db.manifest(n)
