"""Bulk load (webdb.bulk_load, ``webdb import``): the imported db equals the db the writer
builds from the same calls (every table byte for byte), refuses a non-empty db, names bad input,
and a kill at any point leaves the empty db."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webdb
from webdb import Link, Page, Status

TABLES = ("pages_by_url", "pages_by_md5", "links_by_md5", "links_by_url")
# Tiny blocks and the smallest sort budget (64 KiB a buffer): every sort spills, every table has
# many blocks.
TINY = {"block_size": 256, "memory_mb": 1}


def raw(db) -> dict:
    with db.reader() as r:
        return {t: list(r.items(t)) for t in TABLES}


def md5(s: str) -> bytes:
    return hashlib.md5(s.encode()).digest()


def random_calls(rng: random.Random, n: int) -> tuple[list[Page], list[Link]]:
    """Pages with duplicates (different values for the same url), fetched ones with content md5s
    shared between pages, links from page md5s, from unknown md5s and to absent urls, with
    duplicate keys."""
    urls = [f"http://h{rng.randrange(5)}.example/{rng.randrange(n)}" for _ in range(n)]
    contents = [md5(f"c{i}") for i in range(max(1, n // 4))]
    pages = []
    for u in urls:
        if rng.random() < 0.5:
            pages.append(
                Page(
                    u,
                    md5=rng.choice(contents),
                    status=Status.FETCHED,
                    fetch_time=rng.randrange(10**6),
                    num_outlinks=rng.choice((0, 0, 3)),
                    score=rng.random(),
                    meta={"k": str(rng.randrange(3))} if rng.random() < 0.2 else {},
                )
            )
        else:
            pages.append(Page(u, score=rng.random()))
    froms = [p.md5 for p in pages] + [md5("nobody")]
    targets = urls + ["http://absent.example/x", "http://h1.example/zz"]
    links = [
        Link(
            rng.choice(froms),
            rng.choice(targets),
            "anchor " * rng.randrange(30),
            rng.randrange(-5, 5),
            rng.random() < 0.5,
        )
        for _ in range(n * 3)
    ]
    return pages, links


def by_writer(path, k: int, pages, links, **s) -> webdb.WebDB:
    db = webdb.create(str(path), sections=k, **s)
    with db.writer() as w:
        for p in pages:
            w.add_page_with_score(p)
        for link in links:
            w.add_link(link)
    return db


def by_import(path, k: int, pages, links, **s) -> webdb.WebDB:
    db = webdb.create(str(path), sections=k, **s)
    webdb.bulk_load(db, iter(pages), iter(links))
    return db


@pytest.mark.timeout(600)
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("seed", [1, 2])
def test_import_equals_the_writer(tmp_path, k, seed):
    pages, links = random_calls(random.Random(seed * 10 + k), 400)
    a = by_writer(tmp_path / "w", k, pages, links, **TINY)
    b = by_import(tmp_path / "b", k, pages, links, **TINY)
    ra, rb = raw(a), raw(b)
    assert ra == rb
    assert ra["links_by_url"] and ra["pages_by_md5"]
    with b.reader() as r:
        info = r.check()
        assert r.generation == 1
    with a.reader() as r:
        assert info["status"] == r.check()["status"]
    # Same pages, same reservoir: the same breakpoints as the writer chose.
    assert a.manifest().sections == b.manifest().sections


_url = st.builds(lambda h, p: f"http://{h}.test/{p}", st.sampled_from("abc"), st.text("xy/é", max_size=4))
_md5 = st.sampled_from([md5(str(i)) for i in range(4)])
_page = st.builds(
    Page,
    _url,
    md5=_md5,
    status=st.sampled_from([Status.UNFETCHED, Status.FETCHED]),
    num_outlinks=st.integers(0, 2),
    score=st.floats(0, 10),
)
_link = st.builds(Link, _md5, _url, st.text(max_size=3), st.integers(-2, 2))


@pytest.mark.timeout(900)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pages=st.lists(_page, max_size=30), links=st.lists(_link, max_size=60), k=st.integers(1, 3))
def test_import_equals_the_writer_props(tmp_path_factory, pages, links, k):
    base = tmp_path_factory.mktemp("p")
    a = by_writer(base / "w", k, pages, links, block_size=64, anchor_max=2)
    b = by_import(base / "b", k, pages, links, block_size=64, anchor_max=2)
    assert raw(a) == raw(b)
    with b.reader() as r:
        r.check()


def test_refuses_a_db_with_pages(tmp_path):
    db = webdb.create(str(tmp_path / "db"))
    with db.writer() as w:
        w.add_page(Page("http://a.test/"))
    before = raw(db)
    with pytest.raises(webdb.BadInput, match="empty db"):
        webdb.bulk_load(db, [Page("http://b.test/")], [])
    assert raw(db) == before and db.manifest().generation == 1


def test_bad_input_commits_nothing(tmp_path):
    db = webdb.create(str(tmp_path / "db"), sections=2)
    with pytest.raises(webdb.BadInput, match="no scheme"):
        webdb.bulk_load(db, [Page("http://a.test/"), Page("nourl")], [])
    with pytest.raises(webdb.BadInput, match="from_id"):
        webdb.bulk_load(db, [Page("http://a.test/")], [Link(b"short", "http://a.test/")])
    good = Page("http://a.test/").md5
    for bad, what in [
        (Link(good, "http://a.test/", "x" * 200 + "\ud800"), "anchor"),
        (Link(good, "http://a.test/", "x", 2**63), "domain_id"),
        (Link(good, "http://a.test/", "x", 0, 1), "target_has_outlink"),
    ]:
        with pytest.raises(webdb.BadInput, match=what):
            webdb.bulk_load(db, [Page("http://a.test/")], [bad])
    assert db.manifest().generation == 0
    leftovers = [f for _, _, fs in os.walk(db.path) for f in fs if f.endswith((".pbu", ".lbu", ".pbm", ".lbm"))]
    assert leftovers == []
    webdb.bulk_load(db, [Page("http://a.test/")], [])
    with db.reader() as r:
        assert r.num_pages == 1


KILL_POINTS = [
    "bulk.after_read",
    "bulk.after_pages_by_url",
    "bulk.after_pages_by_md5",
    "bulk.after_links_by_url",
    "bulk.after_links_by_md5",
    "bulk.before_commit",
    "commit.before_current",
]

CHILD = """
import random, sys
sys.path.insert(0, {tests!r})
import webdb
from test_import import random_calls
pages, links = random_calls(random.Random(7), 200)
webdb.bulk_load(sys.argv[1], pages, links, block_size=256, memory_mb=1)
"""


def killed_load(tmp_path, point: str, child: str):
    """A new 2-section db after ``child`` (code with a ``{tests}`` slot, loading argv[1]) was
    killed at fault ``point``: still at generation 0 with empty tables."""
    db = webdb.create(str(tmp_path / "db"), sections=2)
    code = child.format(tests=os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, WEBDB_FAULTS=point)
    p = subprocess.run([sys.executable, "-c", code, db.path], env=env, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    db = webdb.open(db.path)
    assert db.manifest().generation == 0
    assert all(not v for v in raw(db).values())
    return db


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_leaves_the_empty_db(tmp_path, point):
    db = killed_load(tmp_path, point, CHILD)
    # The next import cleans up what the killed one left and completes.
    pages, links = random_calls(random.Random(7), 200)
    webdb.bulk_load(db, pages, links, block_size=256, memory_mb=1)
    with db.reader() as r:
        r.check()
    ref = by_writer(tmp_path / "ref", 2, pages, links, block_size=256, memory_mb=1)
    assert raw(db) == raw(ref)
    names = {f for _, _, fs in os.walk(db.path) for f in fs if f.endswith((".pbu", ".lbu", ".pbm", ".lbm"))}
    assert all(f.startswith("00000001-s0.") for f in names)


def _cli(capsys, *argv) -> tuple[int, str, str]:
    from webdb.cli.main import main

    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fmt", ["tsv", "jsonl"])
def test_cli_import_of_a_dump_rebuilds_the_db(tmp_path, capsys, fmt):
    pages, links = random_calls(random.Random(5), 200)
    pages.append(Page("http://odd.test/a\u2028b\\c", meta={"t": "tab\there"}))
    links.append(Link(pages[-1].md5, pages[0].url, "new\nline\\x00 \x01"))
    a = by_writer(tmp_path / "a", 2, pages, links, block_size=256)
    for t in ("pages", "links"):
        rc, out, _ = _cli(capsys, "read", a.path, "--dump", t, "--format", fmt)
        assert rc == 0
        (tmp_path / f"{t}.{fmt}").write_text(out, encoding="utf-8")
    b = webdb.create(str(tmp_path / "b"), sections=3, block_size=256)
    rc, out, err = _cli(
        capsys,
        "import",
        b.path,
        "--pages",
        tmp_path / f"pages.{fmt}",
        "--links",
        tmp_path / f"links.{fmt}",
        "--format",
        fmt,
        "--memory-mb",
        "1",
    )
    assert rc == 0, err
    assert "imported" in out
    assert raw(b) == raw(a)
    # Not empty any more: refused, exit 2.
    rc, _, err = _cli(capsys, "import", b.path, "--pages", tmp_path / f"pages.{fmt}")
    assert rc == 2 and "empty db" in err


@pytest.mark.parametrize(
    "text, where, what",
    [
        ("#url\tmd5\n", ":1:", "header"),
        (
            "HEADER\nhttp://a.test/\t" + "0" * 32 + "\tfetched\t0\t0\t0\t1\t0\t1.0\t1.0\t\n"
            "nourl\t" + "0" * 32 + "\tfetched\t0\t0\t0\t1\t0\t1.0\t1.0\t\n",
            ":3:",
            "no scheme",
        ),
        ("HEADER\nhttp://a.test/\t" + "0" * 31 + "\tfetched\t0\t0\t0\t1\t0\t1.0\t1.0\t\n", ":2:", "md5"),
        ("HEADER\nhttp://a.test/\t" + "0" * 32 + "\tdone\t0\t0\t0\t1\t0\t1.0\t1.0\t\n", ":2:", "status"),
        ("HEADER\nhttp://a.test/\t" + "0" * 32 + "\tfetched\tx\t0\t0\t1\t0\t1.0\t1.0\t\n", ":2:", "invalid literal"),
        ("HEADER\nhttp://a.test/\t" + "0" * 32 + "\tfetched\t0\t0\t0\t1\t0\t1.0\n", ":2:", "cells"),
        ("HEADER\nhttp://a.test/\t" + "0" * 32 + "\tfetched\t0\t0\t0\t1\t0\t1.0\t1.0\t{x\n", ":2:", "Expecting"),
    ],
)
def test_cli_bad_input_names_file_and_line(tmp_path, capsys, text, where, what):
    from webdb.cli.read import PAGE_COLS

    db = webdb.create(str(tmp_path / "db"))
    f = tmp_path / "pages.tsv"
    f.write_text(text.replace("HEADER", "#" + "\t".join(PAGE_COLS)), encoding="utf-8")
    rc, out, err = _cli(capsys, "import", db.path, "--pages", f)
    assert rc == 2
    assert f"{f}{where}" in err and what in err and "Traceback" not in err
    assert db.manifest().generation == 0
    rc, _, err = _cli(capsys, "import", db.path, "--pages", tmp_path / "missing.tsv")
    assert rc == 2 and "missing.tsv" in err
    (tmp_path / "bin.jsonl").write_bytes(b'{"url": "\xff"}\n')
    rc, _, err = _cli(capsys, "import", db.path, "--pages", tmp_path / "bin.jsonl", "--format", "jsonl")
    assert rc == 2 and "bin.jsonl:" in err
