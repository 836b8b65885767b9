"""The mark table: a generate's marks are kept beside the pages (webdb.core.marks), not in them.

A generate's batch rewrites no page table: PagesByURL, PagesByMD5 and the due index keep their
files and only the sections' mark tables change; every reader shows the marks in the pages'
meta; an update that rewrites a marked page folds its mark in (or clears it) and the entry
goes; a kill -9 at any point of the marks' batch leaves the db as it was (the segment written
before it is harmless: its pages are generated again); ``webdb check`` reports a damaged table.
The hypothesis comparison with marks written into the pages is in tests/test_due.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from dbutil import commit_next

import webdb
from fetchlist.generate import generate
from fetchlist.segment import Segment
from webdb import DAY, FetchResult, Manifest, Page, Status
from webdb.tables.format import KIND_MARKS
from webdb.tables.table import TableReader, TableWriter
from webdb.tools.rebalance import rebalance

NOW = 1_700_000_000
HERE = os.path.dirname(os.path.abspath(__file__))


def _db(path, n: int = 600, k: int = 3) -> webdb.WebDB:
    db = webdb.create(str(path), sections=k, sync=False, block_size=512)
    with db.writer() as w:
        for i in range(n):
            w.add_page(Page(f"http://h{i % 13}.com/{i}", score=float(i % 17), next_fetch=NOW - i))
    return db


def _urls(seg_dir) -> list[str]:
    seg = Segment.open(seg_dir)
    return [e.url for p in seg.parts() for e in seg.fetchlist(p)]


def _page_files(db) -> list:
    """The files of every section's page tables and due index."""
    return [
        (t["pages_by_url"]["file"], t["pages_by_url"]["due"]["file"], t["pages_by_md5"]["file"])
        for t in db.manifest().tables
    ]


def _marks(db) -> dict[str, str]:
    with db.reader() as r:
        return {u.decode(): m for j in range(r.sections.k) for u, m in r.marks(j).items()}


def test_a_generate_rewrites_no_page_table_and_every_reader_shows_its_marks(tmp_path):
    db = _db(tmp_path / "db")
    before = _page_files(db)
    res = generate(db, tmp_path / "s1", now=NOW, top_n=50, max_per_host=5, fetchers=2)
    assert res.selected == 50
    assert _page_files(db) == before  # only the mark tables changed
    m = db.manifest()
    assert sum(t["pages_by_url"].get("marks", {}).get("records", 0) for t in m.tables) == 50
    assert m.stages[0]["sections"] and all(s == {"stage": s["stage"], "sections": []} for s in m.stages[1:])
    urls = set(_urls(tmp_path / "s1"))
    assert _marks(db) == dict.fromkeys(urls, f"s1@{NOW}")
    with db.reader() as r:
        pages = {p.url: p for p in r.pages()}
        assert {u for u, p in pages.items() if p.meta.get("gen")} == urls
        for u in urls:
            p = r.get_page(u)
            assert p.meta == {"gen": f"s1@{NOW}"} and pages[u] == p
            assert p in list(r.get_pages(p.md5))
        by_md5 = [Page.decode(k[16:].decode(), v) for k, v in r.items("pages_by_md5")]
        assert sorted(by_md5, key=lambda p: p.url) == sorted(pages.values(), key=lambda p: p.url)
        assert r.check()["marks"] == 50
    from webdb.tools.export import export_pages

    with db.reader() as r:
        marked = {rec["url"] for rec in export_pages(r, statuses=[Status.UNFETCHED]) if rec["meta"].get("gen")}
    assert marked == urls
    # a second generate skips them and adds its own; the table holds both rounds
    generate(db, tmp_path / "s2", now=NOW, top_n=50, max_per_host=5)
    assert not urls & set(_urls(tmp_path / "s2"))
    assert len(_marks(db)) == 100 and _page_files(db) == before


def test_an_update_folds_or_clears_the_marks_of_the_pages_it_rewrites(tmp_path):
    db = _db(tmp_path / "db", k=2)
    generate(db, tmp_path / "s1", now=NOW, top_n=40)
    urls = sorted(_urls(tmp_path / "s1"))
    cleared, kept, deleted, rescored = urls[:10], urls[10:20], urls[20:25], urls[25:30]
    with db.writer() as w:
        for u in cleared:  # an update's outcome: fetchlist.update sets meta["gen"] = ""
            w.apply_fetch(FetchResult(u, Status.FETCHED, NOW, b"\x07" * 16, 0, {"gen": ""}))
        for u in kept:  # an outcome that does not clear it: the mark is written into the page
            w.apply_fetch(FetchResult(u, Status.RETRY, NOW))
        for u in deleted:
            w.delete_page(u)
        for u in rescored:
            w.add_page_if_not_present(Page(u, score=99.0))  # present: nothing changes, the mark stays
    left = _marks(db)
    assert sorted(left) == sorted(set(urls) - set(cleared) - set(kept) - set(deleted))
    with db.reader() as r:
        assert all(r.get_page(u).meta["gen"] == "" for u in cleared)  # as update leaves it
        assert all(r.get_page(u).meta["gen"] == f"s1@{NOW}" for u in kept)
        assert all(r.get_page(u) is None for u in deleted)
        assert all(r.get_page(u).meta["gen"] == f"s1@{NOW}" and r.get_page(u).score != 99.0 for u in rescored)
        r.check()
    # the lapsed marks are re-marked by a later generate (mark_expiry passed); the table keeps one per page
    res = generate(db, tmp_path / "s2", now=NOW + 8 * DAY, top_n=1000)
    again = set(_urls(tmp_path / "s2"))
    assert set(left) <= again and set(kept) <= again
    assert all(m == f"s2@{NOW + 8 * DAY}" for u, m in _marks(db).items() if u in again)
    assert set(_marks(db)) == again and res.selected == len(again)  # every marked page was due again
    with db.reader() as r:
        r.check()


def test_rebalance_carries_the_marks_to_the_new_sections(tmp_path):
    db = _db(tmp_path / "db", k=2)
    generate(db, tmp_path / "s1", now=NOW, top_n=60, max_per_host=6)
    with db.reader() as r:
        before = list(r.pages())
    for k in (3, 1):
        rebalance(db, k)
        with db.reader() as r:
            assert list(r.pages()) == before
            assert r.check()["marks"] == 60
    assert len(_marks(db)) == 60


def _check_cli(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "check", str(path)], capture_output=True, text=True, timeout=300
    )


def _marked_db(path) -> tuple[webdb.WebDB, int, str]:
    db = _db(path, k=2)
    generate(db, os.path.join(os.path.dirname(path), "s1"), now=NOW, top_n=80)
    j = next(j for j, t in enumerate(db.manifest().tables) if "marks" in t["pages_by_url"])
    e = db.manifest().tables[j]["pages_by_url"]["marks"]
    return db, j, os.path.join(db.section_dir(j), e["file"])


def _rewrite_marks(db, j: int, records) -> str:
    """Replace section j's mark table by one holding ``records`` (passing every CRC) and commit
    a manifest naming it, as a buggy writer could; returns its path."""
    m = db.manifest()
    e = m.tables[j]["pages_by_url"]["marks"]
    path = os.path.join(db.section_dir(j), e["file"])
    os.unlink(path)
    w = TableWriter(path, KIND_MARKS, 512, "lz4", sync=False)
    for k, v in records:
        w.add(k, v)
    info = w.close()
    e["bytes"], e["records"] = info["bytes"], info["records"]
    commit_next(db, m)
    return path


@pytest.mark.parametrize("damage", ["no page", "empty mark", "count"])
def test_check_reports_a_mark_table_out_of_step(tmp_path, damage):
    db, j, path = _marked_db(tmp_path / "db")
    t = TableReader(path, KIND_MARKS)
    recs = list(t.items())
    t.close()
    if damage == "no page":
        recs.append((recs[-1][0] + b"-ghost", b"x@1"))
    elif damage == "empty mark":
        recs[0] = (recs[0][0], b"")
    path = _rewrite_marks(db, j, recs)
    if damage == "count":
        m = db.manifest()
        m.tables[j]["pages_by_url"]["marks"]["records"] += 1
        commit_next(db, m)
    p = _check_cli(tmp_path / "db")
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert p.stdout.startswith("FAILED: ") and path in p.stdout, p.stdout


def test_check_reports_a_damaged_mark_table_block(tmp_path):
    db, j, path = _marked_db(tmp_path / "db")
    with open(path, "r+b") as f:
        f.seek(10)
        b = f.read(1)
        f.seek(10)
        f.write(bytes([b[0] ^ 0x55]))
    p = _check_cli(tmp_path / "db")
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert p.stdout.startswith("FAILED: ") and path in p.stdout, p.stdout


def test_the_manifest_refuses_a_bad_mark_table_entry(tmp_path):
    db, j, _ = _marked_db(tmp_path / "db")
    m = db.manifest()
    m.tables[j]["pages_by_url"]["marks"]["file"] = "../elsewhere.mrk"
    db.commit(Manifest.from_json(dict(m.to_json(), generation=m.generation + 1, parent=m.generation, rounds=None)))
    with pytest.raises(webdb.CorruptionError, match=r"tables\[\d\]\.pages_by_url\.marks"):
        db.manifest()


def test_mark_generated_refuses_a_bad_mark(tmp_path):
    db = _db(tmp_path / "db", n=5, k=1)
    with db.writer() as w:
        for bad in ("", None, 7, "x" * 2000):
            with pytest.raises(webdb.BadInput):
                w.mark_generated("http://h1.com/1", bad)
        w.abort()


# ---- kill -9 during the marks' batch -------------------------------------------------------------

CHILD = """
import sys
import webdb
from fetchlist.generate import generate
generate(webdb.open(sys.argv[1]), sys.argv[2], now=int(sys.argv[3]), top_n=70, max_per_host=9)
"""
MIXED = """
import sys
import webdb
from webdb import FetchResult, Status
db = webdb.open(sys.argv[1])
with db.writer() as w:
    with db.reader() as r:
        marked = [u.decode() for j in range(r.sections.k) for u in r.marks(j)]
    for u in marked[::2]:
        w.apply_fetch(FetchResult(u, Status.FETCHED, 5, b"\\x09" * 16, 0, {"gen": ""}))
    for u in marked[1::4]:
        w.mark_generated(u, "again@7")
    for i in range(0, 600, 7):
        w.mark_generated(f"http://h{i % 13}.com/{i}", "mixed@7")
"""
MARK_POINTS = [
    "close.after_route",
    "stage1.marks_written",
    "stage1.done",
    "close.after_stage1",
    "commit.before_current",
]


def _snapshot(db) -> dict:
    with db.reader() as r:
        return {"pages": list(r.pages()), "by_md5": list(r.pages_by_md5()), "marks": _marks(db)}


def _run(code: str, args: list[str], faults: str = "") -> int:
    p = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=dict(os.environ, WEBDB_FAULTS=faults),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p.returncode


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    """A db whose sections hold marks (one generate), and its snapshot."""
    base = tmp_path_factory.mktemp("marks-crash")
    db = _db(base / "old")
    generate(db, base / "seg0", now=NOW, top_n=90, max_per_host=9)
    return base, _snapshot(db)


def _copy(base, name: str):
    import shutil

    dst = base / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(base / "old", dst)
    return dst


@pytest.mark.parametrize("point", MARK_POINTS)
def test_kill_during_a_generates_marks_keeps_the_db_and_the_next_generate_gives_the_pages_again(marked, point):
    base, old = marked
    path = _copy(base, "g-" + point)
    seg = base / f"seg-{point}"
    assert _run(CHILD, [str(path), str(seg), str(NOW)], point) == -signal.SIGKILL, f"{point} not reached"
    db = webdb.open(str(path))
    assert _snapshot(db) == old
    with db.reader() as r:
        r.check()
    if point != "close.after_route":  # the segment is written before the marks' batch routes
        assert _urls(seg)
    # the killed generate's pages were never marked: the next one hands them out again
    assert _run(CHILD, [str(path), str(base / f"seg2-{point}"), str(NOW)]) == 0
    got = _urls(base / f"seg2-{point}")
    if os.path.isdir(seg) and os.listdir(seg):
        assert sorted(got) == sorted(_urls(seg))
    assert set(_marks(db)) == set(old["marks"]) | set(got)
    with db.reader() as r:
        r.check()


@pytest.mark.parametrize("point", ["stage1.marks_written", "stage1.done", "stage2.done", "commit.before_current"])
def test_kill_during_a_batch_that_folds_marks_keeps_the_db_then_rerun_completes(marked, point):
    base, old = marked
    want = _copy(base, "want-" + point)
    assert _run(MIXED, [str(want)]) == 0
    new = _snapshot(webdb.open(str(want)))
    assert new != old and new["marks"] != old["marks"]
    path = _copy(base, "m-" + point)
    assert _run(MIXED, [str(path)], point) == -signal.SIGKILL, f"{point} not reached"
    db = webdb.open(str(path))
    assert _snapshot(db) == old
    with db.reader() as r:
        r.check()
    assert _run(MIXED, [str(path)]) == 0
    assert _snapshot(db) == new
    with db.reader() as r:
        r.check()


def test_format_worked_example_of_the_mark_table(tmp_path):
    """docs/format.md §3.2's example: the record written and the page value read."""
    from webdb.core.marks import encode_mark, read_marks, write_marks
    from webdb.tables.pagecodec import PAGE_FIXED, with_mark

    url = "http://a.com/x"
    stored = Page(url, meta={"lang": "en"}).encode_value()
    assert len(stored) == PAGE_FIXED + len(b'{"lang":"en"}') and PAGE_FIXED == 59
    assert encode_mark("seg@12") == bytes.fromhex("736567403132")
    path = str(tmp_path / "00000001-s1.mrk")
    e = write_marks(path, [(url.encode(), encode_mark("seg@12"))], 512, "lz4", False)
    assert e["records"] == 1 and read_marks(path) == {url.encode(): "seg@12"}
    got = with_mark(stored, "seg@12")
    assert got == stored[:PAGE_FIXED] + b'{"gen":"seg@12","lang":"en"}'
    p = Page(url, meta={"lang": "en"})
    p.meta["gen"] = "seg@12"
    assert got == p.encode_value()  # what writing the mark into the page stores
