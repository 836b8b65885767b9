"""fetchlist.parse: extraction, charsets, robots directives, and hostile input."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchlist.normalize import WwwRules
from fetchlist.parse import parse

URL = "http://example.com/dir/page.html"

PAGE = b"""<!DOCTYPE html>
<html><head><title>  The
  Title </title>
<style>body { color: red }</style>
<script>var hidden = "script text";</script>
</head><body>
<h1>Heading</h1><p>First   paragraph <b>bold</b>.</p><p>Second</p>
<!-- a comment -->
<template><p>template text</p></template>
<a href="a.html">  Link
   A </a>
<a href="a.html#frag">duplicate</a>
<a href="/b.html"></a>
<a href="/b.html">B later</a>
<a href="c.html"><img src="c.png" alt="Image C"></a>
<a href="d.html" title="Title D"></a>
<a href="javascript:void(0)">js</a> <a href="mailto:x@example.com">mail</a>
<a href="data:text/html,hi">data</a> <a href="tel:+123">tel</a> <a href="ftp://example.com/f">ftp</a>
<a href="http://other.org/x" rel="external NoFollow">nofollow</a>
<a href="#top">self</a> <a href="page.html">self again</a>
<a>no href</a> <a href="   ">blank</a>
<area href="/map.html" alt="Map area">
<iframe src="/frame.html"></iframe>
<a href="HTTP://Other.ORG:80/y/../z?b=1&amp;a=2">Other</a>
</body></html>"""


def test_html_extraction():
    r = parse(URL, PAGE, "text/html; charset=utf-8")
    assert r.error is None
    assert r.md5 == hashlib.md5(PAGE).digest()
    assert r.title == "The Title"
    assert "Heading First paragraph bold. Second" in r.text
    assert "script text" not in r.text and "color" not in r.text and "template" not in r.text
    assert "a comment" not in r.text
    assert r.encoding == "utf-8"
    assert r.outlinks == [
        ("http://example.com/dir/a.html", "Link A"),
        ("http://example.com/b.html", "B later"),  # the first non-empty anchor
        ("http://example.com/dir/c.html", "Image C"),
        ("http://example.com/dir/d.html", "Title D"),
        ("http://example.com/map.html", "Map area"),
        ("http://example.com/frame.html", ""),
        ("http://other.org/z?a=2&b=1", "Other"),
    ]
    assert not r.noindex and not r.nofollow


def test_base_href():
    html = b'<html><head><base href="http://cdn.example.com/base/"></head><body><a href="x">X</a></body></html>'
    r = parse(URL, html, "text/html")
    assert r.base == "http://cdn.example.com/base/"
    assert r.outlinks == [("http://cdn.example.com/base/x", "X")]
    relative = b'<base href="/other/"><a href="x">X</a>'
    assert parse(URL, relative).outlinks == [("http://example.com/other/x", "X")]
    bogus = b'<base href="javascript:alert(1)"><a href="x">X</a>'
    assert parse(URL, bogus).outlinks == [("http://example.com/dir/x", "X")]


def test_max_outlinks_after_dedup():
    links = "".join(f'<a href="/p{i % 150}">{i}</a>' for i in range(1000))
    r = parse(URL, f"<html><body>{links}</body></html>".encode(), "text/html", max_outlinks=100)
    assert len(r.outlinks) == 100
    assert r.outlinks[0] == ("http://example.com/p0", "0")
    assert len({u for u, _ in r.outlinks}) == 100
    assert parse(URL, f"<body>{links}</body>".encode(), max_outlinks=0).outlinks == []


def test_anchor_cut_and_collapsed():
    html = "<a href='/x'>" + "word  \n\t " * 500 + "</a>"
    r = parse(URL, html.encode(), "text/html", max_anchor=20)
    assert r.outlinks == [("http://example.com/x", "word word word word")]


def test_www_rules_applied_to_outlinks():
    w = WwwRules({"example.com": "www"})
    r = parse(URL, b'<a href="/x">x</a><a href="http://www.example.com/y">y</a>', "text/html", www=w)
    assert [u for u, _ in r.outlinks] == ["http://www.example.com/x", "http://www.example.com/y"]


def test_meta_robots():
    def page(meta):
        return f'<html><head><title>T</title>{meta}</head><body>text <a href="/x">x</a></body></html>'.encode()

    r = parse(URL, page('<meta name="robots" content="noindex">'), "text/html")
    assert r.noindex and not r.nofollow and r.title == "" and r.text == "" and r.outlinks
    r = parse(URL, page('<meta name="ROBOTS" content="index, NOFOLLOW">'), "text/html")
    assert r.nofollow and not r.noindex and r.outlinks == [] and r.text == "text x"
    r = parse(URL, page('<meta name="robots" content="none">'), "text/html")
    assert r.noindex and r.nofollow and r.outlinks == [] and r.text == ""
    r = parse(URL, page('<meta name="webdb-crawler" content="nofollow">'), "text/html")
    assert r.nofollow
    r = parse(URL, page('<meta name="otherbot" content="noindex,nofollow">'), "text/html")
    assert not r.noindex and not r.nofollow
    r = parse(URL, page(""), "text/html", robots_header="noindex")
    assert r.noindex and not r.nofollow
    r = parse(URL, page(""), "text/html", robots_header="otherbot: nofollow, webdb-crawler: noindex")
    assert r.noindex and not r.nofollow


def test_charsets():
    ru = "<html><head><title>Новости</title></head><body>Привет, мир</body></html>"
    r = parse(URL, ru.encode("cp1251"), "text/html; charset=windows-1251")
    assert (r.title, r.text, r.encoding) == ("Новости", "Привет, мир", "cp1251")
    meta = '<html><head><meta charset="koi8-r"><title>Новости</title></head><body>тест</body></html>'
    r = parse(URL, meta.encode("koi8_r"), "text/html")
    assert (r.title, r.text) == ("Новости", "тест")
    http_equiv = '<meta http-equiv="Content-Type" content="text/html; charset=shift_jis"><p>日本語</p>'
    assert parse(URL, http_equiv.encode("shift_jis"), None).text == "日本語"
    # the HTTP header wins over the meta tag
    both = '<meta charset="iso-8859-1"><p>Ёлка</p>'.encode("cp1251")
    assert parse(URL, both, "text/html; charset=cp1251").text == "Ёлка"
    # BOM wins over everything
    assert parse(URL, "\ufeff<p>çà</p>".encode("utf-16-le"), "text/html; charset=latin1").text == "çà"
    # undeclared and not UTF-8: windows-1252
    r = parse(URL, "<p>café €</p>".encode("cp1252"), "text/html")
    assert (r.text, r.encoding) == ("café €", "cp1252")
    # undeclared UTF-8 whose last character is cut (a truncated fetch) is still UTF-8
    r = parse(URL, "<p>日本語</p>日".encode()[:-1], "text/html")
    assert r.text.startswith("日本語") and r.encoding == "utf-8"
    # declared UTF-8 but broken bytes: replacement characters, no error
    r = parse(URL, b"<p>ok \xff\xfe bytes</p>", "text/html; charset=utf-8")
    assert r.error is None and r.text.startswith("ok ") and r.text.endswith(" bytes")
    # an unknown charset falls back
    assert parse(URL, b"<p>plain</p>", "text/html; charset=no-such-charset").text == "plain"
    # an XML declaration names the encoding (and lxml never sees a str with a declaration)
    xml = "<?xml version='1.0' encoding='iso-8859-1'?><html><body><p>é</p></body></html>".encode("latin-1")
    assert parse(URL, xml, "application/xhtml+xml").text == "é"


def test_content_types():
    r = parse(URL, b"line one\n\n  line   two", "text/plain; charset=utf-8")
    assert (r.text, r.outlinks, r.error) == ("line one line two", [], None)
    r = parse(URL, b"\x89PNG\r\n\x1a\n\x00\x00", "image/png")
    assert (
        r.error == "unsupported content type 'image/png'"
        and r.md5 == hashlib.md5(b"\x89PNG\r\n\x1a\n\x00\x00").digest()
    )
    assert parse(URL, b"%PDF-1.4 ...", "application/pdf").error.startswith("unsupported")
    assert parse(URL, b"<p>no type</p>", None).text == "no type"


def test_hostile_empty_and_binary():
    for data in (b"", b"   \n\t ", b"\x00"):
        r = parse(URL, data, "text/html")
        assert r.error and r.outlinks == [] and r.md5 == hashlib.md5(data).digest()
    binary = bytes(range(256)) * 64
    r = parse(URL, binary, "text/html")
    assert r.error == "binary content"
    r = parse(URL, b"\x1f\x8b\x08\x00" + bytes(range(200)) * 10, None)  # gzip served as nothing
    assert r.error == "binary content"


def test_hostile_broken_html():
    broken = [
        b"<html><body><p>unclosed <b>bold <i>italic <a href='/x'>link",
        b"<a href='/x'>one<a href='/y'>two</a></a></body></html></html><p>after",
        b'<<<>>><a href="/x"">x</a><a href=\'/y>y</a>',
        b"<table><tr><td><a href=/x>x</td></tr></table></table></table>",
        b"<html><head><title>t",
        b"</html>" * 1000,
        b"<p>" + b"&#xD800;&#0;&#x110000;&#99999999999;&amp" * 100,
        b"<a href='http://[::1'>bad host</a><a href='http://x.com:99999/'>bad port</a><a href='/ok'>ok</a>",
        b'<a href="' + b"/" + b"a" * 100_000 + b'">long url</a><a href="/ok">ok</a>',
        b"<svg><a href='/svg-link'>s</a></svg><math><mi>x</mi></math>",
        b"<!-- unclosed comment <a href='/x'>x</a>",
        b"<script>document.write('<a href=/x>')</script><noscript><a href='/n'>n</a></noscript>",
    ]
    for data in broken:
        r = parse(URL, data, "text/html")
        assert isinstance(r.text, str) and isinstance(r.outlinks, list)
    assert ("http://example.com/ok", "ok") in parse(URL, broken[7], "text/html").outlinks
    assert ("http://example.com/ok", "ok") in parse(URL, broken[8], "text/html").outlinks


@pytest.mark.timeout(120)
def test_hostile_deep_nesting():
    depth = 100_000
    data = b"<div>" * depth + b"<a href='/deep'>deep</a>" + b"</div>" * depth
    r = parse(URL, b"<a href='/first'>first</a>" + data, "text/html")  # its speed: bench/bench_claims.py
    assert r.error and "parse stopped early" in r.error
    assert r.outlinks[0] == ("http://example.com/first", "first")


@pytest.mark.timeout(120)
def test_hostile_huge():
    links = b"".join(b'<a href="/p%d">anchor %d</a>\n' % (i, i) for i in range(300_000))  # ~9 MB
    r = parse(URL, b"<html><body>" + links + b"</body></html>", "text/html", max_parse=1 << 20)
    assert len(r.outlinks) == 100 and r.error is None
    assert len(r.text) <= 100_000
    assert r.md5 == hashlib.md5(b"<html><body>" + links + b"</body></html>").digest()
    big_attr = b'<a title="' + b"x" * 5_000_000 + b'" href="/t">t</a>'
    assert parse(URL, big_attr, "text/html", max_parse=1 << 24).outlinks == [("http://example.com/t", "t")]


def test_non_bytes_and_bad_url_never_raise():
    assert parse(URL, None, "text/html").error == "empty document"
    assert parse(None, b"<a href='/x'>x</a>", "text/html").outlinks == []
    r = parse("not a url", b"<a href='http://abs.org/'>abs</a><a href='/rel'>rel</a>", "text/html")
    assert r.outlinks == [("http://abs.org/", "abs")]
    assert parse(URL, memoryview(b"<p>mv</p>"), "text/html").text == "mv"


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=3000),
    st.sampled_from(
        [None, "text/html", "text/html; charset=utf-16", "text/plain", "text/html; charset=\x00", "image/gif", ";;;"]
    ),
)
def test_random_bytes_never_raise(data, ctype):
    r = parse(URL, data, ctype)
    assert r.md5 == hashlib.md5(data).digest()
    assert all(u.startswith("http") for u, _ in r.outlinks)


tags = st.sampled_from(
    [
        "<a href='/%s'>",
        "</a>",
        "<div>",
        "</div>",
        "<p>",
        "<b>",
        "</b>",
        "<script>",
        "</script>",
        "<!--",
        "-->",
        "<base href='//h%s/'>",
        "<meta charset=%s>",
        "<meta name=robots content=%s>",
        "&#%s;",
        "<table>",
        "<td>",
        "<![CDATA[",
        "]]>",
        "<a href='javascript:%s'>",
        "<title>",
        "</title>",
        "\x00",
        "\ufffd",
        "é",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(tags, st.text(max_size=8)), max_size=60))
def test_random_markup_never_raises(parts):
    html = "".join(t.replace("%s", s) if "%s" in t else t + s for t, s in parts)
    for enc in ("utf-8", "utf-16"):
        r = parse(URL, html.encode(enc, "surrogatepass"), "text/html")
        assert isinstance(r.text, str) and len(r.outlinks) <= 100
