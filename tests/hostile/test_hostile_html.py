"""Hostile HTML: lying charsets (WHATWG encoding sniffing: BOM, then header, then meta; UTF-16
in meta means UTF-8), broken and binary content.  ``parse`` never raises."""

from __future__ import annotations

import pytest

from fetchlist.parse import parse, sniff_encoding

BASE = "http://example.com/dir/page.html"
LATIN = "<a href='/caf\u00e9'>caf\u00e9</a>"
CYRILLIC = "<a href='/\u0434\u0430'>\u0434\u0430</a>"
OUT_LATIN = [("http://example.com/caf%C3%A9", "caf\u00e9")]
OUT_CYRILLIC = [("http://example.com/%D0%B4%D0%B0", "\u0434\u0430")]


def _doc(meta: str = "", link: str = LATIN) -> str:
    return f"<html><head>{meta}<title>t</title></head><body>{link}</body></html>"


@pytest.mark.parametrize(
    "data, ctype, want",
    [
        (b"\xef\xbb\xbf" + _doc("<meta charset=windows-1251>").encode(), "text/html; charset=iso-8859-1", "utf-8"),
        (b"\xff\xfe" + _doc().encode("utf-16-le"), "text/html; charset=utf-8", "utf-16-le"),
        (b"\xfe\xff" + _doc().encode("utf-16-be"), "text/html", "utf-16-be"),
        (_doc("<meta charset=windows-1251>", CYRILLIC).encode("koi8-r"), "text/html; charset=koi8-r", "koi8-r"),
        (_doc("<meta charset=windows-1251>", CYRILLIC).encode("cp1251"), "text/html", "cp1251"),
        (_doc("<meta charset=utf-16>").encode(), "text/html", "utf-8"),
        (_doc("<meta charset=utf-16le>").encode(), "text/html", "utf-8"),
        (_doc('<meta http-equiv="Content-Type" content="text/html; charset=UTF-16BE">').encode(), None, "utf-8"),
        (_doc().encode("cp1252"), "text/html; charset=latin-1", "cp1252"),
        (_doc("<meta charset=no-such-charset>").encode(), "text/html; charset=bogus", "utf-8"),
        (_doc().encode("cp1252"), "text/html", "cp1252"),
        (_doc().encode(), "text/html", "utf-8"),
    ],
    ids=[
        "BOM beats header and meta",
        "utf-16le BOM beats header",
        "utf-16be BOM",
        "header beats meta",
        "meta when no header charset",
        "meta utf-16 is utf-8",
        "meta utf-16le is utf-8",
        "http-equiv utf-16be is utf-8",
        "latin-1 label is windows-1252",
        "unknown labels ignored",
        "not utf-8: windows-1252",
        "valid utf-8",
    ],
)
def test_encoding_sniffing_and_outlinks(data, ctype, want):
    assert sniff_encoding(data, ctype)[0] == want
    r = parse(BASE, data, ctype)
    assert r.encoding == want and r.error is None and r.title == "t"
    assert r.outlinks == (OUT_CYRILLIC if want in ("koi8-r", "cp1251") else OUT_LATIN)


@pytest.mark.parametrize(
    "content, ctype, error",
    [
        (b"", "text/html", "empty document"),
        (b"   \n\t", "text/html", "empty document"),
        (bytes(range(256)) * 8, "text/html", "binary content"),
        (b"\x00" * 5000, None, "binary content"),
        (b"%PDF-1.4 ...", "application/pdf", "unsupported content type 'application/pdf'"),
        (b"<div>" * 100_000, "text/html", None),
        (
            b"<html><body><a href='javascript:alert(1)'>x</a><a href='file:///etc/passwd'>y</a></body>",
            "text/html",
            None,
        ),
    ],
    ids=["empty", "blank", "binary", "nul bytes", "pdf", "deep nesting", "hostile hrefs"],
)
def test_hostile_content_never_raises(content, ctype, error):
    r = parse(BASE, content, ctype)
    if error is None:
        assert r.outlinks == []
    else:
        assert r.error == error or (r.error or "").startswith(error)


@pytest.mark.parametrize(
    "href",
    [
        "javascript:alert(1)",
        " JavaScript:alert(1)",
        "file:///etc/passwd",
        "data:text/html,x",
        "vbscript:x",
        "ftp://example.com/",
        "http://exa mple.com/",
        "http://example.com:0/",
        "//[::1/",
    ],
)
def test_unusable_hrefs_give_no_outlink(href):
    r = parse(BASE, f"<html><body><a href='{href}'>x</a><a href='/ok'>ok</a></body></html>".encode(), "text/html")
    assert r.outlinks == [("http://example.com/ok", "ok")]


def test_userinfo_in_hrefs_is_dropped():
    html = b"<a href='http://user:secret@example.org/x'>a</a><a href='//u@example.org/x'>b</a><a href='/y'>c</a>"
    r = parse("http://me:pw@example.com/", html, "text/html")
    assert r.outlinks == [("http://example.org/x", "a"), ("http://example.com/y", "c")]


def test_ip_spellings_in_hrefs_are_canonical():
    html = b"<a href='http://2130706433/'>a</a><a href='http://0x7f.1/'>b</a><a href='http://@example.org/'>c</a>"
    r = parse(BASE, html, "text/html")
    assert r.outlinks == [("http://127.0.0.1/", "a"), ("http://example.org/", "c")]
