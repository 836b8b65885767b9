"""Every public entry point of the Python API validates types and ranges: a wrong call raises
BadInput naming the field (or ClosedError after close) before anything is buffered, and the
batch it belongs to still commits what was valid."""

from __future__ import annotations

import hashlib

import pytest

import webdb
from webdb import BadInput, ClosedError, FetchResult, Link, Page, Status

SRC = hashlib.md5(b"src").digest()


@pytest.fixture
def db(tmp_path):
    return webdb.create(str(tmp_path / "db"), sections=2, sync=False)


def test_call_after_close_or_abort_raises(db):
    w = db.writer()
    w.add_page(Page("http://a.example/"))
    w.close()
    calls = [
        lambda: w.add_page(Page("http://b.example/")),
        lambda: w.add_page_with_score(Page("http://b.example/")),
        lambda: w.add_page_if_not_present(Page("http://b.example/")),
        lambda: w.delete_page("http://a.example/"),
        lambda: w.apply_fetch(FetchResult("http://a.example/", Status.GONE, 5)),
        lambda: w.add_link(Link(SRC, "http://a.example/", "x")),
        lambda: w.delete_links(SRC),
        lambda: w.add_links(SRC, [("http://a.example/", "x")]),
        lambda: w.add_outlinks(SRC, [("http://a.example/", "x")]),
    ]
    for call in calls:
        with pytest.raises(ClosedError, match="closed"):
            call()
    w2 = db.writer()
    w2.abort()
    with pytest.raises(ClosedError):
        w2.add_page(Page("http://c.example/"))
    with db.reader() as r:
        assert [p.url for p in r.pages()] == ["http://a.example/"]


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: Page("http://a.example/", meta=["x"]), "meta"),
        (lambda: Page("http://a.example/", meta={"k": 1}), "meta"),
        (lambda: Page("http://a.example/", meta={"k": "\ud800"}), "meta"),
        (lambda: Page("http://a.example/", retries=70000), "retries"),
        (lambda: Page("http://a.example/", fetch_interval=-1), "fetch_interval"),
        (lambda: Page("http://a.example/", fetch_time=1.5), "fetch_time"),
        (lambda: Page("http://a.example/", next_fetch=2**63), "next_fetch"),
        (lambda: Page("http://a.example/", num_outlinks="3"), "num_outlinks"),
        (lambda: Page("http://a.example/", score="high"), "score"),
        (lambda: Page("http://a.example/", score=float("nan")), "score"),
        (lambda: Page("http://a.example/", md5=b"short"), "md5"),
        (lambda: Page("http://a.example/", status=99), "status"),
    ],
)
def test_bad_page_fields(db, make, field):
    with db.writer() as w:
        for call in (w.add_page, w.add_page_with_score, w.add_page_if_not_present):
            with pytest.raises(BadInput, match=field):
                call(make())
        assert w.count == 0  # nothing buffered
        w.add_page(Page("http://ok.example/"))
    with db.reader() as r:
        assert [p.url for p in r.pages()] == ["http://ok.example/"]


@pytest.mark.parametrize(
    "link, field",
    [
        (Link(SRC, "http://a.example/", "x", domain_id=2**63), "domain_id"),
        (Link(SRC, "http://a.example/", "x", domain_id="7"), "domain_id"),
        (Link(SRC, "http://a.example/", None), "anchor"),
        (Link(SRC, "http://a.example/", b"bytes"), "anchor"),
        (Link(SRC, "http://a.example/", "lone \udc80"), "anchor"),
        (Link(b"short", "http://a.example/", "x"), "from_id"),
        (Link(SRC, "http://a.example/\ud800", "x"), "surrogate"),
    ],
)
def test_bad_links(db, link, field):
    with db.writer() as w:
        with pytest.raises(BadInput, match=field):
            w.add_link(link)
        with pytest.raises(BadInput, match=field):
            w.add_page_if_not_present(Page(link.url if isinstance(link.url, str) else "x://"), link)
        assert w.count == 0


@pytest.mark.parametrize("anchor", [None, b"bytes", 5, "lone \udc80"])
def test_bulk_links_bad_anchor(db, anchor):
    with db.writer() as w:
        for call in (w.add_links, w.add_outlinks):
            with pytest.raises(BadInput, match="anchor"):
                call(SRC, [("http://a.example/", anchor)])
        assert w.count == 0


def test_bulk_links_bad_domain_id(db):
    with db.writer() as w:
        for bad in (2**63, -(2**63) - 1, "3", True):
            with pytest.raises(BadInput, match="domain_id"):
                w.add_links(SRC, [("http://a.example/", "x")], domain_id=bad)
        with pytest.raises(BadInput, match="next_fetch"):
            w.add_outlinks(SRC, [("http://a.example/", "x")], next_fetch="soon")
        assert w.count == 0


@pytest.mark.parametrize(
    "res, field",
    [
        (FetchResult("http://a.example/", Status.GONE, "now"), "fetch_time"),
        (FetchResult("http://a.example/", Status.FETCHED, 5, SRC, -1), "num_outlinks"),
        (FetchResult("http://a.example/", Status.FETCHED, 5, SRC, 0, ["x"]), "meta"),
        (FetchResult("http://a.example/", Status.RETRY, 5, b"abc"), "md5"),
    ],
)
def test_bad_fetch_results(db, res, field):
    with db.writer() as w:
        with pytest.raises(BadInput, match=field):
            w.apply_fetch(res)
        assert w.count == 0


@pytest.mark.parametrize(
    "setting, value",
    [
        ("max_url_bytes", 200000),
        ("block_size", 0),
        ("block_size", True),
        ("memory_mb", "lots"),
        ("cache_mb", -1),
        ("max_retries", 70000),
        ("inc_rate", 3.0),
        ("sync", "yes"),
        ("workers", 1.5),
    ],
)
def test_settings_checked_against_field_widths(tmp_path, db, setting, value):
    with pytest.raises(BadInput, match=setting):
        webdb.create(str(tmp_path / "other"), **{setting: value})
    with pytest.raises(BadInput, match=setting):
        db.writer(**{setting: value})
    assert not (tmp_path / "other").exists() or not list((tmp_path / "other").iterdir())


def test_longest_url_setting_fits_the_format(tmp_path):
    from webdb.core.settings import MAX_URL_LIMIT

    db = webdb.create(str(tmp_path / "db"), max_url_bytes=MAX_URL_LIMIT, sync=False)
    url = "http://a.example/" + "x" * (MAX_URL_LIMIT - 17)
    with db.writer() as w:
        w.add_page(Page(url))
        w.add_outlinks(SRC, [(url, "a")])
        w.add_page(Page("http://src.example/", md5=SRC, status=Status.FETCHED))  # carries the links' source
        with pytest.raises(BadInput, match="too long"):
            w.add_page(Page(url + "y"))
    with db.reader() as r:
        assert r.get_page(url) is not None
        assert [lk.url for lk in r.inlinks(url)] == [url]


def test_closed_reader_raises_clearly(db):
    with db.writer() as w:
        w.add_page(Page("http://a.example/"))
    r = db.reader()
    assert r.get_page("http://a.example/") is not None  # now cached
    r.close()
    for call in (
        lambda: r.get_page("http://a.example/"),
        lambda: list(r.pages()),
        lambda: list(r.inlinks("http://a.example/")),
    ):
        with pytest.raises(ClosedError, match="closed"):
            call()
