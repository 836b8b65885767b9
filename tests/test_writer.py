"""Writer behaviour around the semantics: lock, abort, bad input, recovery, corruption of db files."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys

import pytest
from dbutil import make_db, md5, snapshot

import webdb
from webdb import BadInput, FetchResult, Link, LockedError, NotADatabase, Page, Status
from webdb.errors import CorruptionError


def test_second_writer_gets_clear_error_naming_holder(tmp_path):
    db = make_db(tmp_path / "db")
    w = db.writer()
    with pytest.raises(LockedError, match=rf"pid {os.getpid()} on host .+ since \d{{4}}-"):
        db.writer()
    w.abort()
    with db.writer() as w2:
        w2.add_page(Page("http://after.example/"))
    assert webdb.open(str(tmp_path / "db")).reader().get_page("http://after.example/") is not None


def _hold_lock_and_die(path):
    db = webdb.open(path)
    db.writer()
    os._exit(0)  # dies holding the lock: the kernel releases the flock


def test_stale_lock_of_dead_process_is_taken_over(tmp_path):
    db = make_db(tmp_path / "db")
    p = multiprocessing.get_context("fork").Process(target=_hold_lock_and_die, args=(str(tmp_path / "db"),))
    p.start()
    p.join()
    with db.writer() as w:
        assert w.lock.stale is not None and w.lock.stale["pid"] == p.pid


def test_exception_in_with_block_aborts(tmp_path):
    db = make_db(tmp_path / "db")
    before = snapshot(db)
    with pytest.raises(RuntimeError):
        with db.writer() as w:
            w.delete_page("http://h0.example/p0")
            raise RuntimeError("boom")
    assert snapshot(db) == before


def test_readers_see_old_generation_until_commit(tmp_path):
    db = make_db(tmp_path / "db")
    r_old = db.reader()
    n = r_old.num_pages
    with db.writer() as w:
        for i in range(50):
            w.add_page(Page(f"http://more.example/{i}"))
    # The open reader keeps its snapshot (its files stay readable after the commit).
    assert r_old.num_pages == n and len(list(r_old.pages())) == n
    r_old.check()
    with db.reader() as r:
        assert r.num_pages == n + 50
    r_old.close()


@pytest.mark.parametrize(
    "url,why",
    [
        ("no-scheme.example/x", "no scheme"),
        ("http://a.example/\x00nul", "control"),
        ("http://a.example/with space", "space"),
        ("http://a.example/\ud800", "surrogate"),
        ("http://a.example/" + "x" * 100_000, "too long"),
        (b"http://bytes.example/", "must be a str"),
        ("", "no scheme"),
    ],
)
def test_bad_urls_rejected_with_clear_error(tmp_path, url, why):
    db = make_db(tmp_path / "db")
    before = snapshot(db)
    with db.writer() as w:
        with pytest.raises(BadInput, match=why):
            w.add_page(Page(url))
        with pytest.raises(BadInput, match=why):
            w.add_link(Link(md5("x"), url, "a"))
        with pytest.raises(BadInput, match=why):
            w.add_outlinks(md5("content-0"), [(url, "a")])
    assert snapshot(db) == before  # nothing was lost or half-applied


def test_bad_records_rejected(tmp_path):
    db = make_db(tmp_path / "db")
    with db.writer() as w:
        with pytest.raises(BadInput, match="16-byte"):
            w.add_link(Link(b"short", "http://a.example/", "a"))
        with pytest.raises(BadInput, match="16-byte"):
            w.delete_links(b"x")
        with pytest.raises(BadInput, match="out of range|must be a whole number in"):
            w.add_page(Page("http://a.example/", retries=-1))
        with pytest.raises(BadInput, match="needs a 16-byte md5"):
            w.apply_fetch(FetchResult("http://a.example/", Status.FETCHED, 1))
        with pytest.raises(BadInput, match="not a fetch outcome"):
            w.apply_fetch(FetchResult("http://a.example/", Status.UNFETCHED, 1))
        with pytest.raises(BadInput, match="same url"):
            w.add_page_if_not_present(Page("http://a.example/"), Link(md5("x"), "http://b.example/"))
        with pytest.raises(BadInput, match="expected a webdb.Page"):
            w.add_page("http://a.example/")


def test_anchors_empty_huge_and_odd(tmp_path):
    db = make_db(tmp_path / "db", anchor_max=10)
    src = md5("content-0")
    with db.writer() as w:
        w.add_link(Link(src, "http://h1.example/p1", ""))
        w.add_link(Link(src, "http://h2.example/p2", "é" * 100_000))
        w.add_link(Link(src, "http://h3.example/p3", "tab\there\x00nul"))
        with pytest.raises(BadInput, match="anchor must be a str without lone surrogates"):
            w.add_link(Link(src, "http://h4.example/p4", "x\ud800"))  # refused, as in a URL
    with db.reader() as r:
        got = {lk.url: lk.anchor for lk in r.outlinks(src)}
        r.check()
    assert got["http://h1.example/p1"] == ""
    assert got["http://h2.example/p2"] == "é" * 10
    assert got["http://h3.example/p3"] == "tab\there\x00n"  # stored as is, cut at 10 characters
    assert "http://h4.example/p4" not in got


def test_memory_budget_spills_and_result_is_same(tmp_path):
    small = make_db(tmp_path / "small", memory_mb=1)
    big = make_db(tmp_path / "big", memory_mb=512)
    for db in (small, big):
        with db.writer() as w:
            for i in range(20000):
                w.add_outlinks(md5("content-0"), [(f"http://spill.example/{i}", f"a{i}")])
    assert snapshot(small) == snapshot(big)
    assert snapshot(small)["counts"][0] > 20000


def test_corrupt_manifest_current_identity_give_clear_errors(tmp_path):
    path = tmp_path / "db"
    db = make_db(path)
    gen = db.committed()
    (path / "gen" / f"{gen:08d}.json").write_text("{broken")
    with pytest.raises(CorruptionError, match=f"{gen:08d}.json: checksum"):
        db.reader()
    (path / "CURRENT").write_text("garbage")
    with pytest.raises(CorruptionError, match="CURRENT"):
        db.reader()
    (path / "webdb.json").write_text("[")
    with pytest.raises(CorruptionError, match="webdb.json"):
        webdb.open(str(path))
    with pytest.raises(NotADatabase, match="no such database"):
        webdb.open(str(tmp_path / "missing"))


@pytest.mark.parametrize("table", ["pbu", "pbm", "lbm", "lbu"])
def test_flipped_byte_in_table_file_caught_by_check_cli(tmp_path, table):
    path = tmp_path / "db"
    db = make_db(path)
    m = db.manifest()
    name = next(t["file"] for t in m.tables[0].values() if t["file"].endswith(table))
    f = path / "section-0000" / name
    with open(f, "r+b") as fh:
        fh.seek(40)
        b = fh.read(1)
        fh.seek(40)
        fh.write(bytes([b[0] ^ 1]))
    with pytest.raises(CorruptionError, match=name):
        with db.reader() as r:
            r.check()
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "check", str(path), "--json"], capture_output=True, text=True
    )
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert out["ok"] is False and name in out["error"] and "block 0" in out["error"]


def test_truncated_table_file_gives_clear_error_on_open(tmp_path):
    path = tmp_path / "db"
    db = make_db(path)
    name = db.manifest().tables[1]["links_by_url"]["file"]
    f = path / "section-0001" / name
    os.truncate(f, os.path.getsize(f) // 2)
    with pytest.raises(CorruptionError, match=name):
        db.reader()
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "read", str(path), "--stats"], capture_output=True, text=True
    )
    assert p.returncode == 2 and name in p.stderr and "Traceback" not in p.stderr


def test_bulk_calls_equal_the_single_calls(tmp_path):
    """add_links / add_outlinks record exactly the edits of add_link / add_page_if_not_present."""
    src = md5("content-0")
    outs = [("http://h1.example/p1", "one"), ("http://bulk.example/new", "two"), ("http://h2.example/p2", "x" * 300)]
    a, b = make_db(tmp_path / "a"), make_db(tmp_path / "b")
    with a.writer() as w:
        w.add_links(src, outs[:1])
        w.add_outlinks(src, outs[1:], next_fetch=77, score=0.5, fetch_interval=3600)
    with b.writer() as w:
        w.add_link(Link(src, *outs[0]))
        for url, anchor in outs[1:]:
            w.add_link(Link(src, url, anchor))
            w.add_page_if_not_present(Page(url, next_fetch=77, score=0.5, next_score=0.5, fetch_interval=3600))
    assert snapshot(a) == snapshot(b)


@pytest.mark.parametrize("where", ["create", "writer"])
def test_page_created_by_a_fetch_takes_default_interval(tmp_path, where):
    """Every path that creates a page (here: a fetch result for a url with no page) uses the setting."""
    iv = 90 * 86400
    db = webdb.create(str(tmp_path / "db"), sync=False, **({"default_interval": iv} if where == "create" else {}))
    url, out = "http://a.example/", "http://b.example/"
    with db.writer(**({"default_interval": iv} if where == "writer" else {})) as w:
        w.apply_fetch(FetchResult(url, Status.FETCHED, 1000, md5=md5("x")))
        w.add_outlinks(md5("x"), [(out, "b")])
    with db.reader() as r:
        assert r.get_page(url).fetch_interval == iv
        assert r.get_page(url).next_fetch == 1000 + iv
        assert r.get_page(out).fetch_interval == iv
