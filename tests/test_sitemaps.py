"""Sitemaps, meta refresh and rel=canonical: the parsers (hostile sitemaps included), the
segment's parse record, the update's writer calls, and a real crawl of the demo site on
loopback (robots.txt Sitemap: line → index → gzip urlset → pages nobody links to)."""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
import time

import pytest

import webdb
from fetchlist.crawl import crawl
from fetchlist.demo_site import DEMO_HOSTS, Resource, SiteServer, loopback_ok, serve_demo
from fetchlist.fetch import Fetcher
from fetchlist.hints import link_canonical, parse_fetched
from fetchlist.parse import ParseResult, parse
from fetchlist.segment import FetchEntry, FetchRecord, Segment, parse_from_json, parse_to_json
from fetchlist.settings import resolve
from fetchlist.sitemaps import (
    CHANGEFREQ,
    RobotsSitemaps,
    SitemapUrl,
    child_quota,
    gunzip_limited,
    parse_lastmod,
    parse_sitemap,
    sitemap_level,
    sitemap_quota,
)
from fetchlist.update import apply_segments
from webdb import DAY, CallRecorder, CorruptionError, Page, Status
from webdb.analysis.dedup import dedup
from webdb.errors import BadInput

SM = "http://a.example/sitemap.xml"
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
loopback = pytest.mark.skipif(not all(map(loopback_ok, DEMO_HOSTS)), reason="needs 127.0.0.x addresses")


def urlset(*entries: str) -> bytes:
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{"".join(entries)}</urlset>'.encode()


def url(loc: str, **hints: str) -> str:
    return f"<url><loc>{loc}</loc>{''.join(f'<{k}>{v}</{k}>' for k, v in hints.items())}</url>"


def index(*locs: str) -> bytes:
    body = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f"<sitemapindex {NS}>{body}</sitemapindex>".encode()


# ---- parsing ------------------------------------------------------------------------------------


def test_urlset_with_hints_normalized_filtered_and_deduplicated():
    data = urlset(
        url("http://a.example/x", lastmod="2024-05-01", changefreq="Daily", priority="0.8"),
        url("HTTP://A.EXAMPLE:80/y#frag", lastmod="2024-05-01T10:00:00+02:00", priority="7"),
        url("http://www.a.example/z", changefreq="sometimes"),
        url("http://a.example/x"),  # a repeat
        url("http://b.example/other-site"),  # not the sitemap's registered domain
        url("javascript:alert(1)"),
        url(""),
    )
    r = parse_sitemap(SM, data)
    assert r.kind == "urlset" and r.error is None and r.sitemaps == []
    assert r.urls == [
        SitemapUrl("http://a.example/x", 1714521600, "daily", 0.8),
        SitemapUrl("http://a.example/y", 1714550400, None, None),  # priority 7 is out of [0, 1]
        SitemapUrl("http://www.a.example/z", None, None, None),
    ]
    assert r.skipped == 4


def test_text_sitemap_index_and_levels():
    r = parse_sitemap(SM, b"http://a.example/t1\r\n\nhttp://a.example/t2\nnot a url\n", "text/plain")
    assert r.kind == "text" and [u.url for u in r.urls] == ["http://a.example/t1", "http://a.example/t2"]
    assert r.skipped == 1
    idx = index("http://a.example/s1.xml.gz", "http://a.example/s2.xml", "http://evil.example/s3.xml")
    r = parse_sitemap(SM, idx, level=1, max_depth=2)
    assert r.kind == "sitemapindex" and r.urls == [] and r.error is None
    assert r.sitemaps == ["http://a.example/s1.xml.gz", "http://a.example/s2.xml"] and r.skipped == 1
    # an index at the deepest level followed has its children ignored, with a reason
    r = parse_sitemap(SM, idx, level=2, max_depth=2)
    assert r.sitemaps == [] and "sitemap_max_depth 2" in r.error
    assert sitemap_level({"sitemap": "2"}) == 2
    assert sitemap_level({}) == sitemap_level({"sitemap": "x"}) == sitemap_level({"sitemap": "99999"}) == 0


def test_lastmod_formats_and_max_age():
    assert parse_lastmod("2024") == 1704067200 and parse_lastmod("2024-02") == 1706745600
    assert parse_lastmod("2024-05-01T00:00:00Z") == parse_lastmod("2024-05-01") == 1714521600
    for bad in ("", "yesterday", "2024-13-01", "99999-01-01", "1969-12-31", "2024-05-01" * 10):
        assert parse_lastmod(bad) is None
    data = urlset(
        url("http://a.example/old", lastmod="2001-01-01"),
        url("http://a.example/new", lastmod="2024-05-01"),
        url("http://a.example/undated"),
    )
    now = parse_lastmod("2024-06-01")
    r = parse_sitemap(SM, data, max_age=365 * DAY, now=now)
    assert [u.url for u in r.urls] == ["http://a.example/new", "http://a.example/undated"] and r.skipped == 1
    assert len(parse_sitemap(SM, data).urls) == 3  # max_age 0: all kept


def test_caps_on_urls_and_child_sitemaps():
    data = urlset(*(url(f"http://a.example/p{i}") for i in range(100)))
    r = parse_sitemap(SM, data, max_urls=10)
    assert len(r.urls) == 10 and "sitemap_max_urls" in r.error
    r = parse_sitemap(SM, data, max_urls=100)  # exactly the cap: nothing was left out
    assert len(r.urls) == 100 and r.error is None
    text = "".join(f"http://a.example/t{i}\n" for i in range(20)).encode()
    r = parse_sitemap(SM, text, "text/plain", max_urls=5)
    assert len(r.urls) == 5 and r.skipped == 15 and "sitemap_max_urls" in r.error
    r = parse_sitemap(SM, index(*(f"http://a.example/s{i}.xml" for i in range(100))), max_sitemaps=5)
    assert len(r.sitemaps) == 5 and r.skipped == 95


def rss(*items: str, channel_link: str = "http://a.example/") -> bytes:
    body = "".join(f"<item>{i}</item>" for i in items)
    return (
        f'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title><link>{channel_link}</link>'
        f"{body}</channel></rss>"
    ).encode()


def atom(*entries: str) -> bytes:
    body = "".join(f"<entry>{e}</entry>" for e in entries)
    return (
        '<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>'
        f'<link href="http://a.example/feed-home"/>{body}</feed>'
    ).encode()


def test_rss_feed_as_a_sitemap():
    """RSS 2.0: each item's <link> with its <pubDate> as lastmod; the channel's own link is not a URL."""
    data = rss(
        "<title>one</title><link>http://a.example/one</link><pubDate>Wed, 01 May 2024 00:00:00 GMT</pubDate>",
        "<link>http://a.example/two#c</link><pubDate>Thu, 02 May 2024 02:00:00 +0200</pubDate>",
        "<link>http://a.example/three</link><pubDate>not a date</pubDate><description>&lt;b&gt;x</description>",
        "<link>http://b.example/elsewhere</link>",
        "<title>no link</title>",
        channel_link="http://a.example/channel",
    )
    r = parse_sitemap(SM, data)
    assert r.kind == "rss" and r.error is None and r.sitemaps == []
    assert r.urls == [
        SitemapUrl("http://a.example/one", 1714521600),
        SitemapUrl("http://a.example/two", 1714608000),
        SitemapUrl("http://a.example/three"),
    ]
    assert r.skipped == 2
    old = parse_sitemap(SM, data, max_age=DAY, now=parse_lastmod("2024-05-02T12:00:00Z"))
    assert [u.url for u in old.urls] == ["http://a.example/two", "http://a.example/three"]
    capped = parse_sitemap(SM, rss(*(f"<link>http://a.example/i{i}</link>" for i in range(50))), max_urls=7)
    assert len(capped.urls) == 7 and "sitemap_max_urls" in capped.error


def test_atom_feed_as_a_sitemap():
    """Atom 1.0: each entry's alternate <link href> with its <updated>; the feed's own link is not one."""
    data = atom(
        '<link rel="self" href="http://a.example/self"/><link href="http://a.example/a1"/>'
        "<updated>2024-05-01T00:00:00Z</updated>",
        '<link rel="alternate" href="/a2"/><link href="http://a.example/a2-second"/><updated>bad</updated>',
        '<link rel="enclosure" href="http://a.example/file.mp3"/>',
        "<modified>2024-05-01</modified><link href='http://a.example/a3'/>",
    )
    r = parse_sitemap(SM, data)
    assert r.kind == "atom" and r.error is None
    # "/a2" is no absolute URL (a sitemap's URLs are); the enclosure is no page of the feed
    assert r.urls == [SitemapUrl("http://a.example/a1", 1714521600), SitemapUrl("http://a.example/a3", 1714521600)]
    assert r.skipped == 2


def test_hostile_feeds():
    """Feeds are XML like any sitemap: broken, huge, entity bombs and gzip bombs stay bounded."""
    items = [f"<link>http://a.example/p{i}</link>" for i in range(3)]
    cut = rss(*items)[:-40]
    r = parse_sitemap(SM, cut)
    assert r.kind == "rss" and len(r.urls) == 2 and r.error.startswith("bad XML")  # the third item is cut
    laughs = (
        '<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY a "aaaaaaaaaa">'
        + "".join(f'<!ENTITY {c} "{("&" + p + ";") * 10}">' for p, c in zip("abcdefgh", "bcdefghi"))
        + "]><rss><channel><item><link>http://a.example/&i;</link></item></channel></rss>"
    ).encode()
    r = parse_sitemap(SM, laughs)
    assert r.urls == [] and "DOCTYPE" in r.error
    huge = atom(*(f'<link href="http://a.example/e{i}"/>' for i in range(20_000)))
    r = parse_sitemap(SM, huge, max_bytes=100_000)
    assert 0 < len(r.urls) < 2_000 and "more than 100000 bytes" in r.error
    bomb = gzip.compress(b"<rss><channel>" + b" " * (64 << 20), compresslevel=9)
    r = parse_sitemap(SM, bomb, max_bytes=1 << 20)
    assert r.urls == [] and "more than 1048576 bytes" in r.error
    deep = b"<feed><entry>" + b"<x>" * 100_000 + b"</x>" * 100_000 + b"</entry></feed>"
    r = parse_sitemap(SM, deep)
    assert r.urls == [] and "bad XML" in r.error


# ---- hostile sitemaps --------------------------------------------------------------------------


def test_huge_sitemap_is_cut_at_max_bytes():
    entry = url("http://a.example/p")
    data = urlset(*(url(f"http://a.example/p{i}") for i in range(20_000)))
    assert len(data) > 500_000
    r = parse_sitemap(SM, data, max_bytes=100_000)
    assert 0 < len(r.urls) < 100_000 // len(entry) and "more than 100000 bytes" in r.error
    assert "bad XML" in r.error  # the cut document ends in the middle


def test_gzip_bomb_stops_at_max_bytes():
    bomb = gzip.compress(b"<urlset>" + b" " * (256 << 20), compresslevel=9)  # 256 MiB of spaces, ~250 KiB
    assert len(bomb) < 1 << 20
    out, err = gunzip_limited(bomb, 1 << 20)
    assert len(out) == 1 << 20 and "more than 1048576 bytes once decompressed" in err
    r = parse_sitemap(SM, bomb, max_bytes=1 << 20)
    assert r.urls == [] and "more than 1048576 bytes" in r.error


def test_gzip_sitemaps_multi_member_truncated_and_damaged():
    a = gzip.compress(urlset(url("http://a.example/1"))[:60])
    b = gzip.compress(urlset(url("http://a.example/1"))[60:])
    r = parse_sitemap(SM, a + b)  # two members make one document
    assert [u.url for u in r.urls] == ["http://a.example/1"] and r.error is None
    whole = gzip.compress(urlset(url("http://a.example/1"), url("http://a.example/2")))
    r = parse_sitemap(SM, whole[: len(whole) // 2])
    assert "truncated gzip data" in r.error or "bad XML" in r.error
    damaged = whole[:20] + bytes(b ^ 0xFF for b in whole[20:40]) + whole[40:]
    r = parse_sitemap(SM, damaged)
    assert r.error is not None and ("gzip" in r.error or "XML" in r.error)
    assert gunzip_limited(b"\x1f\x8b\x08\x00garbage", 100)[1] is not None


def test_bad_xml_gives_what_came_before():
    data = urlset(url("http://a.example/1"), url("http://a.example/2"))[:-30] + b"<url><loc>http://a.example/3<"
    r = parse_sitemap(SM, data)
    assert [u.url for u in r.urls] == ["http://a.example/1"] and r.error.startswith("bad XML")
    for junk in (b"", b"\x00\xff" * 1000, b"<html><body>not a sitemap</body></html>", b"<<<>>>", b"<?xml?>"):
        r = parse_sitemap(SM, junk)
        assert r.urls == [] and r.sitemaps == [] and r.error is not None
    deep = b"<urlset>" + b"<url>" * 100_000 + b"</url>" * 100_000 + b"</urlset>"
    r = parse_sitemap(SM, deep)
    assert r.urls == [] and "bad XML" in r.error


def test_entities_are_never_expanded_nor_fetched(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    laughs = (
        '<?xml version="1.0"?><!DOCTYPE u [<!ENTITY a "aaaaaaaaaa">'
        + "".join(f'<!ENTITY {c} "{("&" + p + ";") * 10}">' for p, c in zip("abcdefgh", "bcdefghi"))
        + "]><urlset><url><loc>http://a.example/&i;</loc></url></urlset>"
    ).encode()
    xxe = (
        f'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY e SYSTEM "file://{secret}">]>'
        "<urlset><url><loc>http://a.example/&e;</loc></url></urlset>"
    ).encode()
    external_dtd = f'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "file://{secret}"><urlset/>'.encode()
    for data in (laughs, xxe, external_dtd):
        r = parse_sitemap(SM, data)
        assert r.urls == [] and r.error is not None and "SECRET" not in json.dumps(r.error)
        assert "DOCTYPE" in r.error or "XML" in r.error


def test_index_loops_end_in_the_db():
    """An index listing itself and a child that lists the index: each sitemap enters the db once."""
    rec = CallRecorder()
    p = Page("http://a.example/sitemap.xml", meta={"sitemap": "1"})
    seg_calls = _apply_parse(rec, p, sitemaps=["http://a.example/sitemap.xml", "http://a.example/child.xml"])
    assert [c["page"]["url"] for c in seg_calls if c["call"] == "add_page_if_not_present"] == [
        "http://a.example/child.xml"
    ]
    assert seg_calls[-1]["page"]["meta"] == {"sitemap": "2"}


# ---- the parse record and the update -------------------------------------------------------------


def _apply_parse(rec, page: Page, **parse_fields) -> list[dict]:
    """Apply one FETCHED record of ``page`` with a parse record carrying ``parse_fields``."""
    with tempfile.TemporaryDirectory() as d:
        seg = Segment.create(f"{d}/seg")
        seg.write_fetchlist(0, [FetchEntry(page.url, page)])
        with seg.writer(0) as w:
            md5 = hashlib.md5(b"x").digest()
            r = FetchRecord(page.url, Status.FETCHED, 1_700_000_000, 200, {}, "text/html", md5, b"x")
            r.parse = ParseResult(page.url, md5, **parse_fields)
            w.write(r)
        apply_segments(rec, [seg.path], new_score=1.0)
    return [json.loads(c) for c in rec.calls]


def test_parse_record_round_trip_and_checks():
    p = parse("http://a.example/p", b'<html><head><link rel="canonical" href="/c"></head><body>x</body></html>')
    p.sitemaps = ["http://a.example/sitemap.xml"]
    p.sitemap_urls = [SitemapUrl("http://a.example/q", 1714521600, "daily", 0.5), SitemapUrl("http://a.example/r")]
    d = parse_to_json(p)
    assert d["canonical"] == "http://a.example/c" and d["sitemaps"] == ["http://a.example/sitemap.xml"]
    assert d["sitemap_urls"] == [
        ["http://a.example/q", 1714521600, "daily", 0.5],
        ["http://a.example/r", None, None, None],
    ]
    back = parse_from_json(json.loads(json.dumps(d)))
    assert (back.canonical, back.sitemaps, back.sitemap_urls) == (p.canonical, p.sitemaps, p.sitemap_urls)
    plain = parse_to_json(parse("http://a.example/", b"<html><body>x</body></html>"))
    assert not {"canonical", "sitemaps", "sitemap_urls"} & set(plain)  # optional: absent when empty
    for bad in (
        [["http://a.example/q", "yesterday", None, None]],
        [["http://a.example/q", None, "sometimes", None]],
        [["http://a.example/q", None, None, 2.0]],
        [["http://a.example/q", None, None]],
        ["http://a.example/q"],
    ):
        with pytest.raises(CorruptionError, match=r"x:1: sitemap_urls\[0\]"):
            parse_from_json({**d, "sitemap_urls": bad}, "x:1")
    with pytest.raises(CorruptionError, match="canonical"):
        parse_from_json({**d, "canonical": 5}, "x:1")
    p.sitemap_quota = (500, 3)
    d = parse_to_json(p)
    assert d["sitemap_quota"] == [500, 3] and parse_from_json(json.loads(json.dumps(d))).sitemap_quota == (500, 3)
    assert "sitemap_quota" not in plain
    for bad in ([1], [1, -1], [1, 2.0], [True, 1], "1 2"):
        with pytest.raises(CorruptionError, match="x:1: .*sitemap_quota"):
            parse_from_json({**d, "sitemap_quota": bad}, "x:1")


def test_quota_split_and_children_in_the_db():
    """An index's share of the tree is split among its children, and the update records it."""
    assert child_quota((1000, 50), 20) == (50, 1) and child_quota((50, 1), 1) == (50, 0)
    assert child_quota((7, 2), 3) == (2, 0)
    assert sitemap_quota({"sitemap_quota": "50 1"}) == (50, 1)
    for meta in ({}, {"sitemap_quota": "x 1"}, {"sitemap_quota": "1"}, {"sitemap_quota": "-1 2"}, None):
        assert sitemap_quota(meta) is None
    rec = CallRecorder()
    p = Page("http://a.example/sitemap.xml", meta={"sitemap": "1", "sitemap_quota": "100 4"})
    children = ["http://a.example/c1.xml", "http://a.example/c2.xml"]
    calls = _apply_parse(rec, p, sitemaps=children, sitemap_quota=child_quota((100, 4), 2))
    added = [c["page"] for c in calls if c["call"] == "add_page_if_not_present"]
    assert [(a["url"], a["meta"]) for a in added] == [(u, {"sitemap": "2", "sitemap_quota": "50 1"}) for u in children]
    # parsed under its quota: an index whose share is 1 sitemap lists one, a urlset 3 URLs
    s = resolve(None)
    r = FetchRecord(p.url, Status.FETCHED, 1_700_000_000, 200, {"content-type": "text/xml"}, "text/xml")
    r.content, r.sitemap_level, r.sitemap_quota = index(*children), 1, (100, 1)
    assert parse_fetched(r, s, None).sitemaps == children[:1]
    assert parse_fetched(r, s, None).sitemap_quota == (100, 0)
    r.content, r.sitemap_quota = urlset(*(url(f"http://a.example/u{i}") for i in range(10))), (3, 0)
    got = parse_fetched(r, s, None)
    assert len(got.sitemap_urls) == 3 and got.sitemap_quota is None
    # the message names the limit that cut the sitemap short: the tree's share here, the
    # per-file setting when that is the smaller one
    assert got.error == "more URLs than this sitemap's share of sitemap_tree_max_urls (3); the rest is ignored"
    r.sitemap_quota = (1000, 0)
    got = parse_fetched(r, {**s, "sitemap_max_urls": 4}, None)
    assert got.error == "more URLs than sitemap_max_urls (4); the rest is ignored"


def test_update_adds_sitemap_urls_scored_by_priority_and_changefreq():
    rec = CallRecorder()
    urls = [
        SitemapUrl("http://a.example/hi", 1714521600, "daily", 1.0),
        SitemapUrl("http://a.example/lo", None, "yearly", 0.1),
        SitemapUrl("http://a.example/plain"),
        SitemapUrl("javascript:x"),
        SitemapUrl("http://a.example/sitemap.xml"),  # itself
    ]
    calls = _apply_parse(rec, Page("http://a.example/sitemap.xml", meta={"sitemap": "1"}), sitemap_urls=urls)
    added = {c["page"]["url"]: c["page"] for c in calls if c["call"] == "add_page_if_not_present"}
    assert set(added) == {"http://a.example/hi", "http://a.example/lo", "http://a.example/plain"}
    assert (added["http://a.example/hi"]["score"], added["http://a.example/hi"]["fetch_interval"]) == (2.0, DAY)
    hints = [(c["url"], c["lastmod"], c["due"]) for c in calls if c["call"] == "apply_lastmod"]
    assert hints == [("http://a.example/hi", 1714521600, 1_700_000_000)]  # only a URL with a lastmod
    lo = added["http://a.example/lo"]
    assert lo["score"] == pytest.approx(0.2) and lo["fetch_interval"] == CHANGEFREQ["yearly"]
    assert added["http://a.example/plain"]["score"] == 1.0
    assert all(p["next_fetch"] == 1_700_000_000 and p["meta"] == {} for p in added.values())
    assert not any(c["call"] in ("add_outlinks", "add_link", "add_links") for c in calls)  # no links from a sitemap
    rec = CallRecorder()  # a page that is not a sitemap lists no URLs (a segment may come from anywhere)
    calls = _apply_parse(rec, Page("http://a.example/page"), sitemap_urls=urls)
    assert [c["call"] for c in calls] == ["apply_fetch"]


def test_lastmod_hint_in_the_db_as_in_the_model(tmp_path):
    """``apply_lastmod`` through the real writer and the reference model (docs/semantics.md)."""
    from model import Model

    fetched = {"status": Status.FETCHED, "fetch_time": 1000, "next_fetch": 9000, "md5": hashlib.md5(b"c").digest()}
    old = [
        Page("http://a.example/changed", **fetched),  # fetched before the lastmod: due earlier
        Page("http://a.example/older", **fetched),  # lastmod before the fetch: nothing
        Page("http://a.example/gone", status=Status.GONE, fetch_time=1000, next_fetch=webdb.NEVER),
        Page("http://a.example/soon", **{**fetched, "next_fetch": 3000}),  # due before `due` already
        Page("http://a.example/refetched", **fetched),  # fetched again in the same batch: the fetch wins
    ]
    calls = [
        ("apply_lastmod", "http://a.example/changed", 2000, 5000),
        ("apply_lastmod", "http://a.example/older", 500, 5000),
        ("apply_lastmod", "http://a.example/gone", 2000, 5000),
        ("apply_lastmod", "http://a.example/soon", 2000, 5000),
        ("apply_lastmod", "http://a.example/absent", 2000, 5000),
        ("apply_lastmod", "http://a.example/refetched", 2000, 5000),
    ]
    refetch = webdb.FetchResult("http://a.example/refetched", Status.FETCHED, 2500, hashlib.md5(b"d").digest())
    db = webdb.create(str(tmp_path / "db"))
    model = Model()
    for target in (db, model):
        w = db.writer() if target is db else model
        for p in old:
            w.add_page_with_score(p)
        if target is db:
            w.close()
            w = db.writer()
        else:
            model.commit()
        for name, *args in calls:
            getattr(w, name)(*args)
        w.apply_fetch(refetch)
        if target is db:
            w.close()
        else:
            model.commit()
    with db.reader() as r:
        got = {p.url: p.next_fetch for p in r.pages()}
    assert got == {p.url: p.next_fetch for p in model.pages()}
    assert got["http://a.example/changed"] == 5000
    assert got["http://a.example/older"] == got["http://a.example/soon"] + 6000 == 9000
    assert got["http://a.example/gone"] == webdb.NEVER and "http://a.example/absent" not in got
    assert got["http://a.example/refetched"] == 2500 + webdb.DEFAULT_INTERVAL
    # through the update: a sitemap names the known page with a lastmod after its fetch
    with db.writer() as w:
        w.add_page_with_score(Page("http://a.example/known", **{**fetched, "next_fetch": 2_000_000_000}))
    with tempfile.TemporaryDirectory() as d:
        seg = Segment.create(f"{d}/seg")
        sm = Page("http://a.example/sitemap.xml", meta={"sitemap": "1"})
        seg.write_fetchlist(0, [FetchEntry(sm.url, sm)])
        with seg.writer(0) as sw:
            md5 = hashlib.md5(b"x").digest()
            r = FetchRecord(sm.url, Status.FETCHED, 1_700_000_000, 200, {}, "application/xml", md5, b"x")
            r.parse = ParseResult(sm.url, md5, sitemap_urls=[SitemapUrl("http://a.example/known", 1_600_000_000)])
            sw.write(r)
        with db.writer() as w:
            apply_segments(w, [seg.path])
    with db.reader() as r:
        assert r.get_page("http://a.example/known").next_fetch == 1_700_000_000  # due when the sitemap said so
    with pytest.raises(BadInput, match="lastmod must be whole seconds"):
        with db.writer() as w:
            w.apply_lastmod("http://a.example/changed", -1, 5000)


def test_update_records_canonical_in_page_meta():
    rec = CallRecorder()
    calls = _apply_parse(rec, Page("http://a.example/p?utm=1"), canonical="http://a.example/p")
    fetch = next(c for c in calls if c["call"] == "apply_fetch")
    assert fetch["result"]["meta"]["canonical"] == "http://a.example/p"
    rec = CallRecorder()  # the page no longer names one: cleared
    calls = _apply_parse(rec, Page("http://a.example/p?utm=1", meta={"canonical": "http://a.example/p"}))
    assert next(c for c in calls if c["call"] == "apply_fetch")["result"]["meta"]["canonical"] == ""
    rec = CallRecorder()  # its own URL: nothing to record
    calls = _apply_parse(rec, Page("http://a.example/p"), canonical="http://a.example/p")
    assert "canonical" not in (next(c for c in calls if c["call"] == "apply_fetch")["result"]["meta"] or {})


# ---- canonical and meta refresh in the parser -------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "refresh", "delay"),
    [
        ('<meta http-equiv="refresh" content="0; url=/new">', "http://a.example/new", 0),
        ("<meta http-equiv=REFRESH content=\"3;URL='/q?x=1'\">", "http://a.example/q?x=1", 3),
        ('<meta http-equiv="refresh" content="0, http://b.example/">', "http://b.example/", 0),
        ('<meta http-equiv="refresh" content="5">', None, 0),  # a reload, no target
        ('<meta http-equiv="refresh" content="0; url=/p">', None, 0),  # the page itself
        ('<meta http-equiv="refresh" content="0; url=javascript:alert(1)">', None, 0),
        ('<meta http-equiv="refresh" content="soon; url=/new">', None, 0),
        ('<meta http-equiv="refresh" content="99999999999999; url=/new">', "http://a.example/new", 999_999_999),
    ],
)
def test_meta_refresh_parsed(head, refresh, delay):
    p = parse("http://a.example/p", f"<html><head>{head}</head><body>x</body></html>".encode())
    assert (p.refresh, p.refresh_delay) == (refresh, delay)


def test_canonical_link_element_and_header():
    base = '<html><head><base href="http://a.example/dir/"><link rel="alternate canonical" href="c?b=2&a=1">'
    p = parse("http://a.example/p", (base + "</head><body>x</body></html>").encode())
    assert p.canonical == "http://a.example/dir/c?a=1&b=2"
    assert parse("http://a.example/p", b'<link rel="canonical" href="mailto:x@y">').canonical is None
    assert parse("http://a.example/p", b"<html><body>x</body></html>").canonical is None
    headers = [("Link", '<https://a.example/x>; rel="preload", </canon>; rel="canonical"'), ("X", "y")]
    assert link_canonical(headers, "http://a.example/p") == "http://a.example/canon"
    assert link_canonical([("link", "<javascript:1>; rel=canonical")], "http://a.example/p") is None
    assert link_canonical([("link", "garbage")], "http://a.example/p") is None


def test_robots_sitemaps_wait_for_their_site():
    from protego import Protego

    from fetchlist.robots import PARSED, RobotsRules

    text = "User-agent: *\nDisallow:\n" + "".join(f"Sitemap: http://a.example/s{i}.xml\n" for i in range(9))
    rs = RobotsSitemaps(max_sitemaps=3)
    rs.found("http://a.example/x", RobotsRules(PARSED, 200, Protego.parse(text)))
    assert rs.take("http://b.example/") == []
    assert rs.take("http://a.example/y") == [f"http://a.example/s{i}.xml" for i in range(3)]
    assert rs.take("http://a.example/y") == []


def test_settings_validated():
    assert resolve()["sitemap_max_depth"] == 2 and resolve()["meta_refresh"] is True
    for bad in (
        {"sitemap_max_depth": 0},
        {"sitemap_max_urls": -1},
        {"sitemaps": "yes"},
        {"meta_refresh_max_delay": "x"},
    ):
        with pytest.raises(BadInput):
            resolve(**bad)


# ---- on loopback -----------------------------------------------------------------------------------


@loopback
def test_fetcher_meta_refresh_is_a_redirect_and_header_canonical(tmp_path):
    refresh = b'<html><head><meta http-equiv="refresh" content="0; url=/target"></head><body>bye</body></html>'
    slow = b'<html><head><meta http-equiv="refresh" content="2; url=/target"></head></html>'
    late = b'<html><head><meta http-equiv="refresh" content="600; url=/target"></head><body>x</body></html>'
    with SiteServer(["127.0.0.2"]) as server:
        base = server.base("127.0.0.2")
        server.routes["127.0.0.2"] = {
            "/robots.txt": Resource(200, b"User-agent: *\nDisallow:\n", "text/plain"),
            "/r0": Resource(200, refresh),
            "/r2": Resource(200, slow),
            "/late": Resource(200, late),
            "/to-private": Resource(200, b'<meta http-equiv="refresh" content="0; url=http://127.0.0.9/">'),
            "/pdf": Resource(200, b"%PDF-1.4 ...", "application/pdf", {"Link": f'<{base}/doc>; rel="canonical"'}),
            "/loop-a": Resource(200, b'<meta http-equiv="refresh" content="0; url=/loop-b">'),
            "/loop-b": Resource(200, b'<meta http-equiv="refresh" content="0; url=/loop-a">'),
        }
        seg = Segment.create(tmp_path / "seg")
        paths = ("/r0", "/r2", "/late", "/to-private", "/pdf", "/loop-a")
        seg.write_fetchlist(0, [FetchEntry(base + p) for p in paths])
        Fetcher(politeness_delay=0.0, progress=False, allow_private_addresses=True).fetch_segment(seg, 0)
        got = {r.url: r for r in seg.records(0)}
        assert seg.check()["responses"] == 2  # /late and /pdf: the refreshes have no content of their own
    r0, r2 = got[base + "/r0"], got[base + "/r2"]
    assert (r0.status, r0.http_status, r0.redirect) == (Status.REDIRECT_PERM, 200, base + "/target")
    assert (r2.status, r2.redirect) == (Status.REDIRECT_TEMP, base + "/target")
    assert r0.parse is None and r0.content_ref is None
    assert got[base + "/late"].status == Status.FETCHED and got[base + "/late"].content_ref is not None
    # the target is not requested now: like an HTTP redirect it is fetched in a later round
    assert [x.path for x in server.log if x.path == "/target"] == []
    assert got[base + "/to-private"].redirect == "http://127.0.0.9/"
    # a refresh loop costs one request per hop and round, as an HTTP redirect loop does
    assert got[base + "/loop-a"].redirect == base + "/loop-b"
    assert [x.path for x in server.log if x.path.startswith("/loop")] == ["/loop-a"]
    assert got[base + "/pdf"].parse.canonical == base + "/doc"
    outcomes = {o.result.url: o for o in seg.outcomes(0)}
    assert outcomes[base + "/r0"].redirect == base + "/target"
    # the address policy meets a refresh target when it is requested, as for an HTTP redirect
    recs = []
    Fetcher(politeness_delay=0.0, progress=False).fetch([FetchEntry("http://127.0.0.9/")], recs.append)
    assert recs[0].status == Status.RETRY and "address policy" in recs[0].error


@loopback
def test_crawl_reads_sitemaps_follows_meta_refresh_records_canonical(tmp_path):
    server, site = serve_demo(pages=60, crawl_delay=0.01)
    with server:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(site.seeds) + "\n")
        fetch = {"politeness_delay": 0.0, "threads": 4, "progress": False, "allow_private_addresses": True}
        res = crawl(str(tmp_path / "db"), seeds=[str(seeds)], rounds=5, fetch_settings=fetch, sections=2)
    assert len(res.rounds) >= 4
    db = webdb.open(str(tmp_path / "db"))
    with db.reader() as r:
        pages = {p.url: p for p in r.pages()}
    last = server.base(DEMO_HOSTS[-1])
    # robots.txt names the index (level 1); the index names the gzip urlset (level 2) and itself
    assert pages[last + "/sitemap.xml"].meta["sitemap"] == "1"
    assert pages[last + "/sitemap-pages.xml.gz"].meta["sitemap"] == "2"
    assert pages[last + "/sitemap.xml"].status == pages[last + "/sitemap-pages.xml.gz"].status == Status.FETCHED
    assert sum(x.path == "/sitemap.xml" for x in server.log) == 1  # the loop: fetched once
    # the pages only the sitemap lists were injected with their priority and changefreq, then fetched
    for u, (priority, freq) in site.sitemapped.items():
        p = pages[u]
        assert p.status == Status.FETCHED and p.score == pytest.approx(2 * priority)
        assert p.fetch_interval == CHANGEFREQ[freq]
    fetched = {u for u, p in pages.items() if p.status == Status.FETCHED and u in site.graph}
    assert fetched == site.reachable()
    # the meta refresh is a permanent redirect to its target, which was fetched
    base0 = server.base(DEMO_HOSTS[0])
    moved = pages[base0 + "/moved.html"]
    assert moved.status == Status.REDIRECT_PERM and moved.meta["redirect"] == base0 + "/s1/"
    # the canonical is recorded with the page that names another URL; dedup --canonical keeps it
    short, canon = pages[base0 + "/s0/a0"], pages[base0 + "/s0/a0.html"]
    assert short.meta["canonical"] == canon.url and "canonical" not in canon.meta and short.md5 == canon.md5
    plain = [c.page.url for c in _dedup_changes(db, canonical=False)]
    assert base0 + "/s0/a0.html" in plain  # the shorter URL wins without --canonical
    assert dedup(db, canonical=True) == {"duplicate": 1, "restored": 0}
    with db.reader() as r:
        assert r.get_page(base0 + "/s0/a0").status == Status.DUPLICATE
        assert r.get_page(base0 + "/s0/a0.html").status == Status.FETCHED


def _dedup_changes(db, canonical: bool) -> list:
    changes = []
    dedup(db, dry_run=True, on_change=changes.append, canonical=canonical)
    return changes


@loopback
def test_sitemap_max_age_drops_old_lastmods(tmp_path):
    server, site = serve_demo(pages=40, crawl_delay=0.01)
    hidden = sorted(site.sitemapped)  # lastmod 2024-05-01, -02, -03
    max_age = time.time() - parse_lastmod("2024-05-02") + 3600
    with server:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text(server.base(DEMO_HOSTS[-1]) + "/sitemap.xml\tsitemap=1\n")  # a seed naming a sitemap
        fetch = {
            "politeness_delay": 0.0,
            "progress": False,
            "allow_private_addresses": True,
            "sitemap_max_age": max_age,
        }
        crawl(str(tmp_path / "db"), seeds=[str(seeds)], rounds=3, fetch_settings=fetch)
    with webdb.open(str(tmp_path / "db")).reader() as r:
        pages = {p.url: p for p in r.pages()}
    assert pages[server.base(DEMO_HOSTS[-1]) + "/sitemap-pages.xml.gz"].meta["sitemap"] == "2"
    assert hidden[0] not in pages and {hidden[1], hidden[2]} <= set(pages)


def test_dedup_canonical_keeper_and_scope(tmp_path):
    md5 = hashlib.md5(b"same content").digest()
    db = webdb.create(str(tmp_path / "db"))
    with db.writer() as w:
        for url, score, meta in (
            ("http://a.example/x", 1.0, {}),  # named canonical by the others
            ("http://a.example/x?utm=1", 5.0, {"canonical": "http://a.example/x"}),
            ("http://b.example/copy", 9.0, {"canonical": "http://a.example/x"}),  # another host's copy
            ("http://c.example/y", 8.0, {"canonical": ""}),  # a cleared canonical is none
        ):
            w.add_page(Page(url, md5=md5, status=Status.FETCHED, fetch_time=1, score=score, meta=meta))

    def kept(**kw) -> dict[str, str]:
        changes = []
        dedup(db, dry_run=True, on_change=changes.append, **kw)
        return {c.page.url: c.keeper for c in changes}

    # without --canonical the best score wins (the shorter URL among equals)
    assert set(kept(scope="global").values()) == {"http://b.example/copy"}
    # with it the page others name canonical is kept, whatever its score
    assert kept(scope="global", canonical=True) == {
        "http://a.example/x?utm=1": "http://a.example/x",
        "http://b.example/copy": "http://a.example/x",
        "http://c.example/y": "http://a.example/x",
    }
    # per host: b.example's copy competes in a.example's group (its canonical's host)
    assert kept(scope="host") == {"http://a.example/x": "http://a.example/x?utm=1"}  # the best score
    assert kept(scope="host", canonical=True) == {
        "http://a.example/x?utm=1": "http://a.example/x",
        "http://b.example/copy": "http://a.example/x",
    }


@loopback
def test_a_hostile_sitemap_tree_stays_within_its_quota(tmp_path):
    """robots.txt names 20 indexes of 20 sitemaps of 500 URLs each (200,000 URLs, 420 sitemaps
    by the per-file caps alone): the whole tree gives at most sitemap_tree_max_urls URLs and
    sitemap_tree_max_sitemaps sitemaps."""
    host = "127.0.0.2"
    with SiteServer([host]) as server:
        base = server.base(host)
        routes = server.routes[host]
        robots = "User-agent: *\nDisallow:\n" + "".join(f"Sitemap: {base}/i{i}.xml\n" for i in range(20))
        routes["/robots.txt"] = Resource(200, robots.encode(), "text/plain")
        routes["/"] = Resource(200, b"<html><body>home</body></html>")
        for i in range(20):
            routes[f"/i{i}.xml"] = Resource(200, index(*(f"{base}/s{i}-{j}.xml" for j in range(20))), "text/xml")
            for j in range(20):
                body = urlset(*(url(f"{base}/p{i}-{j}-{k}") for k in range(500)))
                routes[f"/s{i}-{j}.xml"] = Resource(200, body, "text/xml")
        seeds = tmp_path / "seeds.txt"
        seeds.write_text(base + "/\n")
        fetch = {
            "politeness_delay": 0.0,
            "threads": 2,
            "progress": False,
            "allow_private_addresses": True,
            "sitemap_tree_max_urls": 1000,
            "sitemap_tree_max_sitemaps": 50,
        }
        crawl(str(tmp_path / "db"), seeds=[str(seeds)], rounds=4, fetch_settings=fetch)
    with webdb.open(str(tmp_path / "db")).reader() as r:
        pages = list(r.pages())
    sitemaps = [p for p in pages if "sitemap" in p.meta]
    listed = [p for p in pages if "/p" in p.url]
    assert 20 < len(sitemaps) <= 50  # 20 indexes, then 30 // 20 = 1 child each
    assert {p.meta["sitemap_quota"] for p in sitemaps if p.meta["sitemap"] == "1"} == {"50 1"}
    assert {p.meta["sitemap_quota"] for p in sitemaps if p.meta["sitemap"] == "2"} == {"50 0"}
    assert 0 < len(listed) <= 1000
    fetched_urlsets = [p for p in sitemaps if p.meta["sitemap"] == "2" and p.status == Status.FETCHED]
    assert fetched_urlsets and len(listed) <= 50 * len(fetched_urlsets)
