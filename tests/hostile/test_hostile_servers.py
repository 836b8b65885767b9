"""Hostile HTTP servers: dripping, stalling, endless, lying.  Every request has a total deadline
(``fetch_timeout``), robots.txt included; a cut request is RETRY and a failure of its host.

The deadline is 1 s here, the per-read timeout 5 s: a server that sends a byte every 50 ms
never trips the per-read timeout, so only the total deadline can end these tests before
pytest-timeout fails them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import zlib

import pytest
from hostile_server import HostileServer, answer, raw

from fetchlist.fetch import Fetcher
from fetchlist.net import Budget, Watchdog, new_session
from fetchlist.robots import UNREACHABLE
from fetchlist.segment import FetchEntry, Segment
from webdb.tables.records import Page, Status

FAST = {
    "politeness_delay": 0.0,
    "threads": 2,
    "progress": False,
    "connect_timeout": 5.0,
    "read_timeout": 5.0,
    "fetch_timeout": 1.0,
    "allow_private_addresses": True,
    "max_host_errors": 0,
}
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n"
PAGE = b"<html><head><title>ok</title></head><body><a href='/next'>next</a></body></html>"


def drip_route(prefix: bytes = b"", data: bytes = b"", forever: bytes | None = b"x"):
    """Send ``prefix`` at once, then ``data`` and ``forever`` (repeated) a byte every 50 ms."""

    def route(conn, _req, srv):
        conn.sendall(prefix)
        srv.drip(conn, data, forever=forever)

    return route


def _run(routes: dict, urls: list[str], **settings):
    with HostileServer(routes) as srv:
        recs = {}
        f = Fetcher(**{**FAST, **settings})
        f.fetch([FetchEntry(srv.url(u)) for u in urls], lambda r: recs.__setitem__(r.url[len(srv.url("")) :], r))
        return recs, f, srv


ROBOTS_OK = answer("200 OK", b"User-agent: *\nDisallow: /private/\n", {"Content-Type": "text/plain"})

# (name, route) pairs whose page request must end as a timeout
TIMEOUTS = {
    "drip status line": drip_route(data=b"HTTP/1.1 200 OK\r\n", forever=None),
    "drip status line forever": drip_route(data=b"HTTP/1.1 ", forever=b"0"),
    "drip headers": drip_route(b"HTTP/1.1 200 OK\r\n", forever=b"X-Pad: y\r\n"[:1]),
    "endless header": drip_route(b"HTTP/1.1 200 OK\r\nX-Long: ", forever=b"a"),
    "stall before status": drip_route(forever=None),
    "stall after headers": drip_route(HEAD, forever=None),
    "stall mid body": drip_route(HEAD + b"<html>" * 100, forever=None),
    "drip body": drip_route(HEAD, forever=b"a"),
    "never close, no length": drip_route(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>", forever=b" "),
    "drip chunked body": drip_route(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/html\r\n\r\n", forever=b"1\r\na\r\n"
    ),
    "drip redirect headers": drip_route(b"HTTP/1.1 301 Moved\r\nLocation: /x\r\n", forever=b"X"),
    "stall 404 body": drip_route(b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\n", forever=None),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted(TIMEOUTS))
def test_slow_server_is_cut_at_the_total_deadline(name):
    recs, f, _ = _run({"/robots.txt": ROBOTS_OK, "/p": TIMEOUTS[name]}, ["/p"])
    r = recs["/p"]
    if name == "stall 404 body":  # a 404 does not read its body: no deadline needed, GONE
        assert r.status == Status.GONE and r.http_status == 404
        return
    assert r.status == Status.RETRY and r.content is None and r.md5 is None and r.parse is None
    assert r.error == "fetch_timeout exceeded (1s for connect, headers and body)"
    assert f.stats.statuses == {"RETRY": 1}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["drip status line", "drip headers", "stall after headers", "drip body"])
def test_slow_robots_txt_is_unreachable_and_its_site_retried(name):
    recs, f, _ = _run({"/robots.txt": TIMEOUTS[name], "/p": answer(body=PAGE)}, ["/p", "/q"])
    assert {u: r.status for u, r in recs.items()} == {"/p": Status.RETRY, "/q": Status.RETRY}
    assert recs["/p"].error == "robots.txt unreachable: robots.txt: fetch_timeout exceeded"
    (host,) = f.stats.hosts.values()
    assert host.robots == UNREACHABLE and host.requests == 1  # the pages were not requested


@pytest.mark.timeout(30)
def test_endless_fast_body_is_cut_at_max_content():
    def endless(conn, _req, _srv):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        while True:
            conn.sendall(b"a" * 65536)

    recs, _, _ = _run({"/robots.txt": ROBOTS_OK, "/p": endless}, ["/p"], max_content=100_000, fetch_timeout=30.0)
    r = recs["/p"]
    assert r.status == Status.FETCHED and r.truncated and r.content == b"a" * 100_000


@pytest.mark.timeout(30)
def test_timeouts_count_as_host_failures_and_the_host_is_given_up():
    slow = drip_route(forever=None)
    recs, f, srv = _run(
        {"/robots.txt": ROBOTS_OK, "/a": slow, "/b": slow, "/c": slow}, ["/a", "/b", "/c"], max_host_errors=2
    )
    assert [recs[u].status for u in ("/a", "/b", "/c")] == [Status.RETRY] * 3
    assert recs["/c"].error.startswith("host skipped for this round after 2 consecutive")
    assert srv.hits["/c"] == 0 and next(iter(f.stats.hosts.values())).gave_up


@pytest.mark.timeout(30)
def test_a_fast_server_is_not_cut():
    recs, _, _ = _run({"/robots.txt": ROBOTS_OK, "/p": answer(body=PAGE)}, ["/p"])
    assert recs["/p"].status == Status.FETCHED and recs["/p"].content == PAGE
    assert recs["/p"].parse.title == "ok"


@pytest.mark.timeout(30)
def test_robots_redirect_after_a_closed_keepalive_connection():
    """robots.txt answers 301 saying keep-alive, then closes: the redirect makes a new connection."""
    moved = raw(b"HTTP/1.1 301 Moved\r\nLocation: /rules.txt\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n")
    rules = answer("200 OK", b"User-agent: *\nDisallow: /no/\n", {"Content-Type": "text/plain"})
    recs, f, srv = _run(
        {"/robots.txt": moved, "/rules.txt": rules, "/yes": answer(body=PAGE), "/no/x": answer(body=PAGE)},
        ["/yes", "/no/x"],
    )
    assert recs["/yes"].status == Status.FETCHED and recs["/no/x"].status == Status.GONE
    assert recs["/no/x"].error == "denied by robots.txt" and srv.hits["/no/x"] == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "head, status, error",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort", Status.RETRY, "IncompleteRead"),
        (b"garbage\r\n\r\n", Status.RETRY, "BadStatusLine"),
        (b"", Status.RETRY, "RemoteDisconnected"),
        (b"HTTP/1.1 999 Weird\r\nContent-Length: 0\r\n\r\n", Status.RETRY, None),
        (b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n", Status.RETRY, "HTTP 302 without a Location header"),
    ],
    ids=["short body", "no status line", "closed at once", "unknown status", "302 without Location"],
)
def test_lying_servers(head, status, error):
    recs, _, _ = _run({"/robots.txt": ROBOTS_OK, "/p": raw(head)}, ["/p"])
    r = recs["/p"]
    assert r.status == status and r.content is None
    assert (r.error is None) if error is None else (error in r.error)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "location, want",
    [
        ("/caf\xe9".encode("latin-1"), "/caf%E9"),  # not UTF-8: the raw byte, percent-encoded
        ("/café".encode(), "/caf%C3%A9"),
        (b"/a b", "/a%20b"),
        (b"//other.example/x", None),  # absolute, another host: only normalized
    ],
    ids=["latin-1 byte", "utf-8", "space", "protocol-relative"],
)
def test_redirect_location_decoded_as_browsers_do(location, want):
    route = raw(b"HTTP/1.1 301 Moved\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n")
    recs, _, srv = _run({"/robots.txt": ROBOTS_OK, "/p": route}, ["/p"])
    r = recs["/p"]
    assert r.status == Status.REDIRECT_PERM and r.http_status == 301 and r.error is None
    if want is None:
        assert r.redirect == "http://other.example/x"
    else:
        assert r.redirect == srv.url(want)


CHILD = textwrap.dedent(
    """
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from fetchlist.fetch import Fetcher
    from fetchlist.segment import Segment
    seg = Segment.open(sys.argv[1])
    f = Fetcher(politeness_delay=0.0, threads=1, progress=False, fetch_timeout=600.0, read_timeout=600.0,
                allow_private_addresses=True)
    try:
        f.fetch_segment(seg, 0)
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


@pytest.mark.timeout(60)
def test_ctrl_c_cuts_a_dripping_request_keeps_the_rest_and_resumes(tmp_path):
    """The drip would last 600 s; SIGINT ends the child at once, the two pages before it kept."""
    with HostileServer({"/robots.txt": ROBOTS_OK, "/a": answer(body=PAGE), "/b": answer(body=PAGE)}) as srv:
        srv.routes["/slow"] = drip_route(HEAD)
        seg = Segment.create(tmp_path / "seg")
        urls = [srv.url(p) for p in ("/a", "/b", "/slow")]
        seg.write_fetchlist(0, [FetchEntry(u) for u in urls])
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        proc = subprocess.Popen([sys.executable, "-c", CHILD, seg.path], stderr=subprocess.PIPE, text=True, env=env)
        assert srv.arrived["/slow"].wait(30)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert [r.url for r in seg.fetch_records(0)] == urls[:2]
        seg.check()
        srv.routes["/slow"] = answer(body=PAGE)
        stats = Fetcher(**FAST).fetch_segment(seg, 0)
    assert stats.records == 1 and stats.skipped == 2
    assert [r.url for r in seg.fetch_records(0)] == urls and seg.check()["fetched"] == 3


@pytest.mark.timeout(30)
def test_conditional_get_uses_the_servers_validators(tmp_path):
    """Last-Modified / ETag from the response are sent back; the 304 is counted."""
    etag, lm = '"abc"', "Wed, 21 Oct 2015 07:28:00 GMT"

    def cond(conn, req, srv):
        if f"If-None-Match: {etag}".encode() in req and f"If-Modified-Since: {lm}".encode() in req:
            conn.sendall(b"HTTP/1.1 304 Not Modified\r\nConnection: close\r\n\r\n")
        else:
            answer(body=PAGE, headers={"ETag": etag, "Last-Modified": lm})(conn, req, srv)

    recs, _, _ = _run({"/robots.txt": ROBOTS_OK, "/p": cond}, ["/p"])
    first = recs["/p"]
    assert first.status == Status.FETCHED and first.headers["etag"] == etag and first.headers["last-modified"] == lm
    with HostileServer({"/robots.txt": ROBOTS_OK, "/p": cond}) as srv:
        page = Page(
            srv.url("/p"), status=Status.FETCHED, fetch_time=1_700_000_000, meta={"etag": etag, "last_modified": lm}
        )
        got = []
        f = Fetcher(**FAST)
        f.fetch([FetchEntry(srv.url("/p"), page)], got.append)
    assert got[0].status == Status.NOT_MODIFIED and got[0].http_status == 304
    assert f.stats.statuses == {"NOT_MODIFIED": 1}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "0.0.0.0"])
def test_address_policy_refuses_loopback_by_default(host):
    with HostileServer({"/robots.txt": ROBOTS_OK, "/p": answer(body=PAGE)}) as srv:
        url = srv.url("/p").replace("127.0.0.1", host)
        got = []
        f = Fetcher(**{**FAST, "allow_private_addresses": False})
        f.fetch([FetchEntry(url)], got.append)
        assert srv.hits == {}  # not even robots.txt was requested
    (r,) = got
    # RETRY, not GONE: the refusal is this crawl's setting; update leaves the page as it was
    assert r.status == Status.RETRY and r.http_status == 0 and r.content is None
    assert r.error.startswith(f"address policy: {host.strip('[]')} resolves to ")
    assert r.error.endswith("; set allow_private_addresses to fetch it")


@pytest.mark.timeout(30)
def test_stalled_tls_handshake_is_cut():
    """An https URL whose server never answers the ClientHello: cut at the deadline."""
    with HostileServer({}) as srv:
        got = []
        f = Fetcher(**{**FAST, "robots_obey": False})
        f.fetch([FetchEntry(srv.url("/p").replace("http://", "https://"))], got.append)
    (r,) = got
    assert r.status == Status.RETRY and r.error == "fetch_timeout exceeded (1s for connect, headers and body)"


@pytest.mark.timeout(30)
def test_connect_that_never_completes_is_cut():
    """A listener whose accept queue is full drops our SYNs: the connect hangs until the deadline."""
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):  # fills the queue
            got = []
            f = Fetcher(**{**FAST, "robots_obey": False, "connect_timeout": 30.0})
            f.fetch([FetchEntry(f"http://127.0.0.1:{port}/p")], got.append)
    (r,) = got
    assert r.status == Status.RETRY and r.error == "fetch_timeout exceeded (1s for connect, headers and body)"


def _gzip_bomb(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    block = b"\0" * (1 << 20)
    return b"".join(z.compress(block) for _ in range(size >> 20)) + z.flush()


@pytest.mark.timeout(60)
def test_gzip_bomb_is_cut_at_max_content():
    bomb = _gzip_bomb(1 << 30)  # 1 GiB of zeros in about 1 MiB
    headers = {"Content-Encoding": "gzip", "Content-Type": "text/plain"}
    recs, _, _ = _run({"/robots.txt": ROBOTS_OK, "/p": answer(body=bomb, headers=headers)}, ["/p"], fetch_timeout=30.0)
    r = recs["/p"]
    assert r.status == Status.FETCHED and r.truncated and r.content == b"\0" * 1024 * 1024


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 200_000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(200)) + b"\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n",
    ],
    ids=["header line of 200 KB", "200 headers", "bad chunk size"],
)
def test_malformed_heads_are_retry(head):
    recs, _, _ = _run({"/robots.txt": ROBOTS_OK, "/p": raw(head)}, ["/p"])
    r = recs["/p"]
    assert r.status == Status.RETRY and r.content is None and r.error


@pytest.mark.timeout(30)
def test_invalid_content_length_reads_to_the_close():
    """http.client ignores a Content-Length it cannot use and reads until the server closes."""
    recs, _, _ = _run(
        {"/robots.txt": ROBOTS_OK, "/p": raw(b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nbody")}, ["/p"]
    )
    assert recs["/p"].status == Status.FETCHED and recs["/p"].content == b"body"


@pytest.mark.timeout(30)
def test_watchdog_abort_cuts_requests_in_flight_and_those_started_after():
    """abort_all (Ctrl-C) cuts a dripping request now and any request begun before reset."""
    with HostileServer({"/slow": drip_route(HEAD)}) as srv:
        w = Watchdog()
        first = Budget(time.monotonic() + 600, allow_private=True)
        done = threading.Event()

        def request():
            w.start(first)  # the budget of the thread that makes the request
            try:
                with new_session().get(srv.url("/slow"), stream=True, timeout=(600, 600)) as resp:
                    resp.raw.read()
            except Exception:  # cut: the socket was shut down under the read
                pass
            finally:
                w.finish(first)
                done.set()

        t = threading.Thread(target=request)
        t.start()
        assert srv.arrived["/slow"].wait(10)
        w.abort_all()
        assert done.wait(10) and first.aborted and not first.expired
        t.join()
        assert w.start(Budget(time.monotonic() + 600)).aborted  # started during the interrupt
        w.reset()
        assert not w.start(Budget(time.monotonic() + 600)).cut


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "robots, delay, allowed",
    [
        (b"User-agent: *\nCrawl-delay: nan\nDisallow: /no", 0.0, False),
        (b"User-agent: *\nCrawl-delay: -5\nDisallow: /no", 0.0, False),
        (b"User-agent: *\nCrawl-delay: 1e308\n", 0.5, True),
        (b"\x00\xff\xfe garbage \x80\x81\nDisallow: /no", 0.0, True),
        (b"User-agent: *\n" + b"Allow: /x\n" * 200_000 + b"Disallow: /no\n", 0.0, True),  # cut at 500 KiB
    ],
    ids=["nan delay", "negative delay", "huge delay capped", "binary garbage", "2 MB robots.txt"],
)
def test_hostile_robots_content(robots, delay, allowed):
    route = answer("200 OK", robots, {"Content-Type": "text/plain"})
    # What is tested is the content, not a deadline: a bound no healthy run approaches, so that a
    # 2 MB answer read on a loaded machine is not cut (then robots.txt would be unreachable).
    recs, f, _ = _run(
        {"/robots.txt": route, "/no": answer(body=PAGE)}, ["/no"], crawl_delay_cap=0.5, fetch_timeout=240.0
    )
    (host,) = f.stats.hosts.values()
    assert host.robots == "parsed" and host.delay == delay
    assert (recs["/no"].status == Status.FETCHED) == allowed


def test_watchdog_memory_is_bounded_by_requests_in_flight():
    """A long crawl finishes millions of requests: finished budgets do not pile up."""
    w = Watchdog()
    held = [w.start(Budget(time.monotonic() + 600)) for _ in range(10)]
    for _ in range(20_000):
        w.finish(w.start(Budget(time.monotonic() + 600)))
    assert len(w._heap) <= 2 * len(held) + 1025
    assert not any(b.cut for b in held)
