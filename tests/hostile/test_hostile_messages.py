"""Incomplete and ambiguous HTTP messages: a head or a compressed body the connection's end
cut, several Location lines, a Location with backslashes.  An incomplete message is a failed
fetch (RETRY), never a page; several different Location lines are no target; every answer
comes from a raw-socket server on loopback."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest
from hostile_server import HostileServer, answer, raw

from fetchlist.fetch import Fetcher
from fetchlist.robots import ALLOW_ALL, UNREACHABLE
from fetchlist.segment import FetchEntry
from webdb.tables.records import Status

FAST = {
    "politeness_delay": 0.0,
    "threads": 2,
    "progress": False,
    "connect_timeout": 30.0,
    "read_timeout": 30.0,
    "fetch_timeout": 60.0,  # nothing here is slow: a bound no healthy run approaches
    "allow_private_addresses": True,
    "max_host_errors": 0,
}
ROBOTS_OK = answer("200 OK", b"User-agent: *\nDisallow: /private/\n", {"Content-Type": "text/plain"})
# A page whose only link is at its end: a cut body loses it.
TEXT = (
    b"<html><body>"
    + b"".join(b"<p>%d %x</p>" % (i, i * 7919) for i in range(20000))
    + b"<a href='/end'>end</a></body></html>"
)


def _gzip(data: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return z.compress(data) + z.flush()


def _deflate(data: bytes, raw_stream: bool = False) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, -15 if raw_stream else 15)
    return z.compress(data) + z.flush()


GZ = _gzip(TEXT)
HALF = GZ[: len(GZ) // 2]


def _head(status: str = "200 OK", length: int | None = None, **headers: str) -> bytes:
    h = {"Content-Type": "text/html", "Connection": "close", **headers}
    if length is not None:
        h["Content-Length"] = str(length)
    return f"HTTP/1.1 {status}\r\n".encode() + b"".join(
        f"{k.replace('_', '-')}: {v}\r\n".encode() for k, v in h.items()
    )


def _reset_after(data: bytes):
    """Send ``data``, then reset the connection (RST, not FIN)."""

    def route(conn, _req, _srv):
        conn.sendall(data)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return route


def _fetch(routes: dict, urls: list[str], **settings):
    with HostileServer({"/robots.txt": ROBOTS_OK, **routes}) as srv:
        recs = {}
        f = Fetcher(**{**FAST, **settings})
        f.fetch([FetchEntry(srv.url(u)) for u in urls], lambda r: recs.__setitem__(r.url[len(srv.url("")) :], r))
        return recs, f, srv


CUT_HEADS = {
    "after a header line": b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n",
    "inside a header line": b"HTTP/1.1 200 OK\r\nContent-Type: text/ht",
    "after the status line": b"HTTP/1.1 200 OK\r\n",
    "inside the status line": b"HTTP/1.1 200 OK",
    "redirect head": b"HTTP/1.1 301 Moved\r\nLocation: /next\r\n",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(CUT_HEADS))
def test_a_head_cut_by_the_close_is_a_failed_fetch(name):
    recs, f, _ = _fetch({"/p": raw(CUT_HEADS[name])}, ["/p"])
    r = recs["/p"]
    assert r.status == Status.RETRY and r.content is None and r.md5 is None and r.redirect is None
    assert "IncompleteHead" in r.error and "header block" in r.error
    assert f.stats.statuses == {"RETRY": 1}


@pytest.mark.timeout(60)
def test_a_complete_head_without_a_body_is_still_a_page():
    """The blank line ends the head: an empty body read to the close is an empty page."""
    recs, _, _ = _fetch({"/p": raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n")}, ["/p"])
    assert recs["/p"].status == Status.FETCHED and recs["/p"].content == b""


@pytest.mark.timeout(60)
def test_a_robots_txt_head_cut_by_the_close_is_unreachable():
    recs, f, srv = _fetch(
        {"/robots.txt": raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"), "/p": answer(body=TEXT)}, ["/p"]
    )
    assert recs["/p"].status == Status.RETRY and srv.hits["/p"] == 0
    (host,) = f.stats.hosts.values()
    assert host.robots == UNREACHABLE


CUT_BODIES = {
    # the message is complete (its Content-Length is the bytes sent): the gzip stream is not
    "gzip cut, length of the cut": raw(_head(length=len(HALF), Content_Encoding="gzip") + b"\r\n" + HALF),
    "gzip cut, then closed": raw(_head(Content_Encoding="gzip") + b"\r\n" + HALF),
    "gzip cut, then reset": _reset_after(_head(length=len(HALF), Content_Encoding="gzip") + b"\r\n" + HALF),
    "gzip cut, shorter than its length, reset": _reset_after(
        _head(length=len(GZ), Content_Encoding="gzip") + b"\r\n" + HALF
    ),
    "gzip cut, chunked": raw(
        _head(Transfer_Encoding="chunked", Content_Encoding="gzip")
        + b"\r\n"
        + b"%x\r\n" % len(HALF)
        + HALF
        + b"\r\n0\r\n\r\n"
    ),
    "gzip without its trailer": raw(_head(length=len(GZ) - 8, Content_Encoding="gzip") + b"\r\n" + GZ[:-8]),
    "deflate cut": raw(_head(Content_Encoding="deflate") + b"\r\n" + _deflate(TEXT)[:30000]),
    "raw deflate cut": raw(_head(Content_Encoding="deflate") + b"\r\n" + _deflate(TEXT, True)[:30000]),
    "gzip inside gzip, inner cut": raw(_head(Content_Encoding="gzip, gzip") + b"\r\n" + _gzip(HALF)),
    "not gzip at all": raw(_head(Content_Encoding="gzip") + b"\r\n" + b"<html>plain</html>"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(CUT_BODIES))
def test_a_cut_compressed_body_is_a_failed_fetch(name):
    recs, f, _ = _fetch({"/p": CUT_BODIES[name]}, ["/p"])
    r = recs["/p"]
    assert r.status == Status.RETRY and r.content is None and r.md5 is None and r.parse is None
    assert not r.truncated and r.error
    assert f.stats.statuses == {"RETRY": 1}


WHOLE_BODIES = {
    "gzip": (_head(Content_Encoding="gzip"), GZ),
    "x-gzip with length": (_head(length=len(GZ), Content_Encoding="x-gzip"), GZ),
    "deflate (zlib)": (_head(Content_Encoding="deflate"), _deflate(TEXT)),
    "deflate (raw)": (_head(Content_Encoding="deflate"), _deflate(TEXT, True)),
    "two gzip members": (_head(Content_Encoding="gzip"), _gzip(TEXT[:1000]) + _gzip(TEXT[1000:])),
    "gzip, then trailing bytes": (_head(Content_Encoding="gzip"), GZ + b"\r\n"),
    "two gzip members, one per chunk": (
        _head(Transfer_Encoding="chunked", Content_Encoding="gzip"),
        b"".join(b"%x\r\n%s\r\n" % (len(m), m) for m in (_gzip(TEXT[:1000]), _gzip(TEXT[1000:]))) + b"0\r\n\r\n",
    ),
    "deflate inside gzip": (_head(Content_Encoding="deflate, gzip"), _gzip(_deflate(TEXT))),
    "gzip chunked": (
        _head(Transfer_Encoding="chunked", Content_Encoding="gzip"),
        b"".join(b"%x\r\n%s\r\n" % (len(GZ[i : i + 100]), GZ[i : i + 100]) for i in range(0, len(GZ), 100))
        + b"0\r\n\r\n",
    ),
    "unknown coding kept as sent": (_head(Content_Encoding="br"), TEXT),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(WHOLE_BODIES))
def test_a_whole_compressed_body_is_the_page(name):
    head, body = WHOLE_BODIES[name]
    recs, _, srv = _fetch({"/p": raw(head + b"\r\n" + body)}, ["/p"])
    r = recs["/p"]
    assert r.status == Status.FETCHED and r.content == TEXT and not r.truncated and r.error is None
    assert r.parse.outlinks == [(srv.url("/end"), "end")]  # the link at the end is there


@pytest.mark.timeout(60)
def test_a_compressed_body_over_max_content_is_truncated_not_failed():
    recs, _, _ = _fetch({"/p": raw(_head(Content_Encoding="gzip") + b"\r\n" + GZ)}, ["/p"], max_content=1000)
    r = recs["/p"]
    assert r.status == Status.FETCHED and r.truncated and r.content == TEXT[:1000]


@pytest.mark.timeout(60)
def test_a_cut_gzip_robots_txt_is_unreachable():
    rules = _gzip(b"User-agent: *\n" + b"Allow: /a\n" * 2000 + b"Disallow: /p\n")
    route = raw(_head(Content_Encoding="gzip", Content_Type="text/plain") + b"\r\n" + rules[: len(rules) // 2])
    recs, f, srv = _fetch({"/robots.txt": route, "/p": answer(body=TEXT)}, ["/p"])
    assert recs["/p"].status == Status.RETRY and srv.hits["/p"] == 0
    (host,) = f.stats.hosts.values()
    assert host.robots == UNREACHABLE


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "locations, status, target, error",
    [
        ([b"/a", b"file:///etc/passwd"], Status.RETRY, None, "2 different Location headers"),
        ([b"/a", b"/b", b"/c"], Status.RETRY, None, "3 different Location headers"),
        ([b"/a", b"/a"], Status.REDIRECT_TEMP, "/a", None),
        ([b"/a,b"], Status.REDIRECT_TEMP, "/a,b", None),  # one line with a comma is one target
    ],
    ids=["different", "three different", "the same twice", "one with a comma"],
)
def test_several_location_headers_are_never_joined(locations, status, target, error):
    head = b"HTTP/1.1 302 Found\r\n" + b"".join(b"Location: " + v + b"\r\n" for v in locations)
    recs, _, srv = _fetch({"/p": raw(head + b"Content-Length: 0\r\n\r\n")}, ["/p"])
    r = recs["/p"]
    assert r.status == status and r.http_status == 302
    assert r.redirect == (srv.url(target) if target else None)
    assert (r.error is None) if error is None else (error in r.error and "etc/passwd" not in (r.redirect or ""))
    assert "," not in r.headers.get("location", "") or target == "/a,b"


@pytest.mark.timeout(60)
def test_a_robots_txt_with_several_location_headers_is_not_followed():
    moved = raw(b"HTTP/1.1 301 Moved\r\nLocation: /rules.txt\r\nLocation: /other.txt\r\nContent-Length: 0\r\n\r\n")
    recs, f, srv = _fetch({"/robots.txt": moved, "/p": answer(body=TEXT)}, ["/p"])
    assert srv.hits["/rules.txt"] == srv.hits["/other.txt"] == srv.hits["/rules.txt,%20/other.txt"] == 0
    (host,) = f.stats.hosts.values()
    assert host.robots == ALLOW_ALL and recs["/p"].status == Status.FETCHED


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "location, want",
    [
        (b"\\\\other.example\\x", "http://other.example/x"),
        (b"\\x\\y", "{base}/x/y"),
        (b"http:\\\\other.example\\x", "http://other.example/x"),
        (b"/x?q=a\\b", "{base}/x?q=a%5Cb"),  # in the query a backslash is a character
    ],
    ids=["scheme-relative", "path-absolute", "absolute", "in the query"],
)
def test_backslashes_in_location_resolve_as_browsers_do(location, want):
    route = raw(b"HTTP/1.1 301 Moved\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n")
    recs, _, srv = _fetch({"/p": route}, ["/p"])
    assert recs["/p"].status == Status.REDIRECT_PERM
    assert recs["/p"].redirect == want.format(base=srv.url(""))


@pytest.mark.timeout(60)
def test_userinfo_in_a_location_is_dropped():
    route = raw(b"HTTP/1.1 301 Moved\r\nLocation: http://user:secret@other.example/x\r\nContent-Length: 0\r\n\r\n")
    recs, _, _ = _fetch({"/p": route}, ["/p"])
    assert recs["/p"].redirect == "http://other.example/x"


@pytest.mark.timeout(60)
def test_userinfo_in_a_stored_url_sends_no_credentials():
    """A URL that reached a db with userinfo (before normalization dropped it) is fetched
    without an Authorization header, its robots.txt too."""
    with HostileServer({"/robots.txt": ROBOTS_OK, "/p": answer(body=TEXT)}) as srv:
        got = []
        url = srv.url("/p").replace("http://", "http://user:secret@")
        Fetcher(**FAST).fetch([FetchEntry(url)], got.append)
        assert srv.hits == {"/robots.txt": 1, "/p": 1}
        assert not any(b"authorization" in h.lower() for h in srv.requests), srv.requests
    assert got[0].status == Status.FETCHED
