"""fetchlist.fetch and fetchlist.robots against the loopback test site (tests/httpsite.py)."""

from __future__ import annotations

import email.utils
import hashlib
import http.server
import io
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
import requests
from httpsite import AVAILABLE, ETAG, GRAPH_PAGES, HOSTS, HUGE, LAST_MODIFIED, TestSite, intervals, overlaps
from test_warc import assert_valid_warc
from waiting import wait_until

from fetchlist.demo_site import Hold
from fetchlist.fetch import Fetcher, status_of
from fetchlist.robots import ALLOW_ALL, fetch_robots
from fetchlist.segment import FetchEntry, Segment
from fetchlist.settings import resolve
from webdb.errors import BadInput
from webdb.tables.records import Page, Status

pytestmark = pytest.mark.skipif(not AVAILABLE, reason="needs 127.0.0.x loopback addresses")

FAST = {
    "politeness_delay": 0.0,
    "threads": 4,
    "progress": False,
    "connect_timeout": 2.0,
    "read_timeout": 2.0,
    "allow_private_addresses": True,
}


@pytest.fixture
def site():
    with TestSite() as s:
        yield s


def run(urls_or_entries, **settings):
    entries = [e if isinstance(e, FetchEntry) else FetchEntry(e) for e in urls_or_entries]
    records = []
    stats = Fetcher(**{**FAST, **settings}).fetch(entries, records.append)
    return {r.url: r for r in records}, stats


def test_status_of_table():
    expected = {
        200: Status.FETCHED,
        204: Status.FETCHED,
        301: Status.REDIRECT_PERM,
        308: Status.REDIRECT_PERM,
        300: Status.REDIRECT_TEMP,
        302: Status.REDIRECT_TEMP,
        303: Status.REDIRECT_TEMP,
        307: Status.REDIRECT_TEMP,
        304: Status.NOT_MODIFIED,
        404: Status.GONE,
        410: Status.GONE,
        400: Status.GONE,
        403: Status.GONE,
        408: Status.RETRY,
        429: Status.RETRY,
        500: Status.RETRY,
        503: Status.RETRY,
        599: Status.RETRY,
        305: Status.RETRY,
        100: Status.RETRY,
    }
    assert {c: status_of(c) for c in expected} == expected


def test_status_mapping_and_redirects_not_followed(site):
    codes = [200, 201, 204, 300, 301, 302, 303, 307, 308, 400, 401, 403, 404, 405, 408, 410, 429, 500, 502, 503, 504]
    urls = [site.url("misc", f"/s/{c}") for c in codes]
    recs, stats = run(urls, max_host_errors=0)
    for c, u in zip(codes, urls):
        r = recs[u]
        assert r.http_status == c and r.status == status_of(c), (c, r)
        if r.status in (Status.REDIRECT_PERM, Status.REDIRECT_TEMP):
            assert r.redirect == site.url("misc", f"/target/{c}?from=x")
        else:
            assert r.redirect is None
        assert (r.md5 is not None) == (r.status == Status.FETCHED)
        assert (r.parse is not None) == (r.status == Status.FETCHED)
    assert recs[urls[0]].content == recs[urls[0]].content and recs[urls[0]].parse.title == "status 200"
    assert recs[site.url("misc", "/s/204")].content == b""
    assert not any(p.startswith("/target/") for p in site.paths("misc"))  # never followed
    assert stats.statuses["REDIRECT_TEMP"] == 4 and stats.statuses["REDIRECT_PERM"] == 2
    assert stats.records == len(codes) and stats.requests == len(codes) + 1  # + robots.txt


def test_redirect_edge_cases(site):
    urls = {
        k: site.url("misc", p)
        for k, p in [
            ("abs", "/redirect/absolute"),
            ("self", "/redirect/self"),
            ("mailto", "/redirect/mailto"),
            ("none", "/redirect/none"),
            ("loop", "/loop/a"),
        ]
    }
    recs, _ = run(urls.values())
    assert recs[urls["abs"]].redirect == site.url("graph", "/g/0.html")
    assert recs[urls["self"]].redirect == urls["self"]
    assert recs[urls["mailto"]].status == Status.REDIRECT_TEMP and recs[urls["mailto"]].redirect is None
    assert "unusable" in recs[urls["mailto"]].error
    assert recs[urls["none"]].status == Status.RETRY and "Location" in recs[urls["none"]].error
    assert recs[urls["loop"]].redirect == site.url("misc", "/loop/b")
    assert site.paths("misc").count("/loop/a") == 1 and "/loop/b" not in site.paths("misc")
    assert site.paths("graph") == []


def test_politeness_one_connection_per_host(site):
    graph = [site.url("graph", f"/g/{i}.html") for i in range(GRAPH_PAGES)]
    misc = [site.url("misc", f"/s/{c}") for c in (200, 404, 410, 301)] + [site.url("misc", "/text.txt")]
    recs, stats = run(graph + misc, politeness_delay=0.2, threads=4)
    for name in ("graph", "misc"):
        log = site.requests(name)
        assert overlaps(log) == 0
        assert min(intervals(log)) >= 0.2 - 0.002, (name, intervals(log))
        assert len({r.client for r in log}) == len(log)  # a fresh connection each time, never two at once
        assert all(r.headers.get("Connection") == "close" for r in log)
        assert all(r.headers.get("User-Agent") == resolve()["user_agent"] for r in log)
    # the two hosts were fetched at the same time, not one after the other
    assert site.requests("misc")[-1].start < site.requests("graph")[-1].start
    assert site.paths("graph")[0] == "/robots.txt" and site.paths("graph").count("/robots.txt") == 1
    assert all(recs[u].status == Status.FETCHED for u in graph)
    assert stats.hosts["127.0.0.21"].requests == GRAPH_PAGES + 1 and stats.hosts["127.0.0.21"].robots == "parsed"


def test_robots_disallowed_never_requested(site):
    private = [site.url("graph", f"/private/{i}.html") for i in range(3)]
    recs, _ = run(private + [site.url("graph", "/g/1.html")])
    for u in private:
        assert recs[u].status == Status.GONE and recs[u].error == "denied by robots.txt" and recs[u].http_status == 0
    assert not any(p.startswith("/private/") for p in site.paths("graph"))
    assert site.paths("graph") == ["/robots.txt", "/g/1.html"]
    # robots off (a site you own): fetched
    recs, _ = run(private[:1], robots_obey=False)
    assert recs[private[0]].status == Status.FETCHED


def test_crawl_delay_honoured_and_capped(site):
    urls = [site.url("slowbot", f"/p{i}.html") for i in range(4)]
    recs, stats = run(urls, politeness_delay=0.05)
    gaps = intervals(site.requests("slowbot"))
    assert len(gaps) == 4 and min(gaps) >= 0.3 - 0.002, gaps
    assert stats.hosts["127.0.0.22"].delay == 0.3
    site.server.clear_log()
    stats = Fetcher(**{**FAST, "politeness_delay": 0.05, "crawl_delay_cap": 0.1}).fetch(
        [FetchEntry(u) for u in urls], lambda r: None
    )
    gaps = intervals(site.requests("slowbot"))
    assert min(gaps) >= 0.1 - 0.002, gaps
    assert stats.hosts["127.0.0.22"].delay == 0.1


def test_robots_states(site):
    broken = [site.url("broken", f"/p{i}.html") for i in range(3)]
    down = [site.url("down", "/a"), site.url("down", "/b")]
    misc = [site.url("misc", "/s/200")]
    hang = [site.url("hang", "/x")]
    recs, stats = run(broken + down + misc + hang, read_timeout=0.5)
    for u in broken:  # robots.txt 500: back off, nothing requested
        assert recs[u].status == Status.RETRY and "backoff" in recs[u].error
    assert site.paths("broken") == ["/robots.txt"]
    for u in down + hang:  # robots.txt unreachable: retry later
        assert recs[u].status == Status.RETRY and "unreachable" in recs[u].error
    assert stats.hosts["127.0.0.26"].requests == 1  # robots.txt only (logged when its answer ends)
    assert recs[misc[0]].status == Status.FETCHED  # robots.txt 404: everything allowed
    assert stats.hosts["127.0.0.23"].robots == "backoff" and stats.hosts["127.0.0.24"].robots == "allow_all"
    assert stats.hosts["127.0.0.25"].robots == "unreachable"


def test_robots_redirected_and_agent_groups(site):
    yes, no = site.url("redirbot", "/yes.html"), site.url("redirbot", "/no/x.html")
    recs, _ = run([yes, no])
    assert recs[yes].status == Status.FETCHED and recs[no].status == Status.GONE
    assert site.paths("redirbot") == ["/robots.txt", "/rules.txt", "/yes.html"]
    # another robots agent falls under "otherbot"'s rules only if it matches that group
    recs, _ = run([yes], robots_agent="otherbot")
    assert recs[yes].status == Status.GONE


def test_robots_too_many_redirects_means_allow_all():
    session = requests.Session()
    adapter_calls = []

    class Loop(requests.adapters.BaseAdapter):
        def send(self, request, **kw):
            adapter_calls.append(request.url)
            r = requests.Response()
            r.status_code, r.url, r.request = 301, request.url, request
            r.headers["Location"] = f"/r{len(adapter_calls)}"
            r.raw = io.BytesIO(b"")
            return r

        def close(self):
            pass

    session.mount("http://", Loop())
    rules = fetch_robots(session, "http://loop.test/x", timeout=(1, 1), max_size=1000)
    assert rules.state == ALLOW_ALL and "too many redirects" in rules.error
    assert len(adapter_calls) == 6  # the request and 5 redirects
    assert rules.allowed("http://loop.test/anything", "webdb-crawler")


def test_robots_cache_and_politeness_across_rounds(site):
    f = Fetcher(**{**FAST, "politeness_delay": 0.1})
    for i in range(2):
        urls = [
            site.url("graph", f"/g/{i}.html"),
            site.url("broken", f"/p{i}.html"),
            site.url("slowbot", f"/p{i}.html"),
        ]
        f.fetch([FetchEntry(u) for u in urls], lambda r: None)
    assert site.paths("graph").count("/robots.txt") == 1  # parsed answers are kept
    assert site.paths("broken").count("/robots.txt") == 2  # a 5xx answer holds for one round only
    assert site.paths("slowbot") == ["/robots.txt", "/p0.html", "/p1.html"]
    assert min(intervals(site.requests("graph"))) >= 0.1 - 0.002  # the delay holds from round to round
    assert min(intervals(site.requests("slowbot"))) >= 0.3 - 0.002  # and so does a cached Crawl-delay


@pytest.mark.timeout(120)
def test_timeouts_and_errors_retry(site):
    urls = {"slow": site.url("misc", "/slow"), "drip": site.url("misc", "/drip"), "down": site.url("down", "/x")}
    recs, _ = run(urls.values(), read_timeout=0.5, fetch_timeout=1.0, robots_obey=False)
    assert recs[urls["slow"]].status == Status.RETRY and "Timeout" in recs[urls["slow"]].error
    assert recs[urls["drip"]].status == Status.RETRY and "fetch_timeout" in recs[urls["drip"]].error
    assert recs[urls["down"]].status == Status.RETRY and "Connection" in recs[urls["down"]].error
    assert all(r.content is None and r.md5 is None for r in recs.values())


def test_host_given_up_after_consecutive_errors(site):
    urls = [site.url("misc", f"/err/{i}") for i in range(6)]
    recs, stats = run(urls, max_host_errors=2, threads=1)
    assert [p for p in site.paths("misc") if p.startswith("/err/")] == ["/err/0", "/err/1"]
    assert all(recs[u].status == Status.RETRY for u in urls)
    assert all("consecutive" in recs[u].error for u in urls[2:])
    assert stats.hosts["127.0.0.24"].gave_up


def test_max_content_truncates(site):
    url = site.url("misc", "/huge")
    recs, _ = run([url], max_content=100_000)
    r = recs[url]
    assert r.status == Status.FETCHED and r.truncated and len(r.content) == 100_000
    assert r.md5 == hashlib.md5(r.content).digest()
    assert r.parse.text.startswith("huge page")
    recs, _ = run([url], max_content=HUGE + 1000)
    assert not recs[url].truncated and len(recs[url].content) > HUGE - 100


def test_content_types_and_charsets(site):
    paths = [
        "/binary.png",
        "/binary-as-html",
        "/text.txt",
        "/broken.html",
        "/cp1251.html",
        "/sjis.html",
        "/noindex.html",
    ]
    recs, _ = run([site.url("misc", p) for p in paths])
    r = {p: recs[site.url("misc", p)] for p in paths}
    assert r["/binary.png"].content_type == "image/png" and r["/binary.png"].status == Status.FETCHED
    assert r["/binary.png"].parse.error.startswith("unsupported content type")
    assert r["/binary-as-html"].parse.error == "binary content"
    assert r["/text.txt"].parse.text == "plain text file" and r["/text.txt"].content_type == "text/plain"
    assert r["/text.txt"].headers["content-type"] == "text/plain; charset=utf-8"
    assert r["/broken.html"].parse.outlinks == [(site.url("misc", "/g"), "link")]
    assert (r["/cp1251.html"].parse.title, r["/cp1251.html"].parse.text) == ("Новости", "Привет")
    assert (r["/sjis.html"].parse.title, r["/sjis.html"].parse.text) == ("日本", "テスト")
    assert r["/noindex.html"].parse.noindex and r["/noindex.html"].parse.text == ""
    assert r["/noindex.html"].headers["x-robots-tag"] == "noindex"


def test_conditional_requests(site):
    etag_url, lm_url = site.url("misc", "/etag.html"), site.url("misc", "/lastmod.html")
    fetched = Page(etag_url, status=Status.FETCHED, fetch_time=LAST_MODIFIED + 10, meta={"etag": ETAG})
    recs, _ = run([FetchEntry(etag_url, fetched)])
    assert recs[etag_url].status == Status.NOT_MODIFIED and recs[etag_url].http_status == 304
    assert recs[etag_url].content is None and recs[etag_url].parse is None
    req = [r for r in site.requests("misc") if r.path == "/etag.html"][-1]
    assert req.headers["If-None-Match"] == ETAG
    assert "If-Modified-Since" not in req.headers  # no Last-Modified stored: our fetch time is not sent
    # the server's Last-Modified, stored as meta "last_modified", is sent back as is
    lm = email.utils.formatdate(LAST_MODIFIED, usegmt=True)
    older = Page(lm_url, status=Status.FETCHED, meta={"last_modified": email.utils.formatdate(LAST_MODIFIED - 100)})
    newer = Page(lm_url, status=Status.NOT_MODIFIED, meta={"last_modified": lm})
    assert run([FetchEntry(lm_url, older)])[0][lm_url].status == Status.FETCHED
    assert run([FetchEntry(lm_url, newer)])[0][lm_url].status == Status.NOT_MODIFIED
    req = [r for r in site.requests("misc") if r.path == "/lastmod.html"][-1]
    assert req.headers["If-Modified-Since"] == lm
    # never fetched, or conditional off: no conditional headers
    site.server.clear_log()
    run([FetchEntry(etag_url, Page(etag_url))])
    run([FetchEntry(etag_url, fetched)], conditional=False)
    for req in site.requests("misc"):
        assert "If-None-Match" not in req.headers and "If-Modified-Since" not in req.headers
    rec = run([FetchEntry(etag_url, fetched)], conditional=False)[0][etag_url]
    assert rec.status == Status.FETCHED and rec.headers["etag"] == ETAG


def test_duplicate_and_invalid_entries(site):
    u = site.url("misc", "/s/200")
    records = []
    stats = Fetcher(**FAST).fetch(
        [FetchEntry(u), FetchEntry(u), FetchEntry("ftp://x/"), FetchEntry("nonsense")], records.append
    )
    assert [r.url for r in records].count(u) == 1 and stats.entries == 3
    bad = [r for r in records if r.url != u]
    assert len(bad) == 2 and all(r.status == Status.GONE and "http" in r.error for r in bad)


def test_www_rules_setting_applies_to_redirects(site, tmp_path):
    rules = tmp_path / "www.txt"
    rules.write_text("example.com www\n")
    url = site.url("misc", "/redirect/example")
    assert run([url])[0][url].redirect == "http://example.com/x"
    assert run([url], www_rules=str(rules))[0][url].redirect == "http://www.example.com/x"


def test_progress_bar_and_empty_input(site, capsys):
    Fetcher(**{**FAST, "progress": True}).fetch([FetchEntry(site.url("misc", "/s/200"))], lambda r: None)
    assert "0/1 [" in capsys.readouterr().err  # tqdm drew its bar (and cleared it at the end)
    stats = Fetcher(**FAST).fetch([], lambda r: None)
    assert (stats.entries, stats.records, stats.requests) == (0, 0, 0)


def test_domain_queue_mode_and_settings_errors():
    f = Fetcher(queue_mode="domain", progress=False)
    assert f._queue_key("http://a.news.example.co.uk/x") == "example.co.uk"
    assert Fetcher(progress=False)._queue_key("http://a.news.example.co.uk/x") == "a.news.example.co.uk"
    with pytest.raises(BadInput, match="unknown crawl setting"):
        Fetcher(threadz=3)
    with pytest.raises(BadInput, match="threads"):
        Fetcher(threads=0)
    with pytest.raises(BadInput, match="politeness_delay"):
        Fetcher(politeness_delay=-1)


def test_fetch_segment_and_outcomes(site, tmp_path):
    seg = Segment.create(tmp_path / "seg")
    graph = [site.url("graph", f"/g/{i}.html") for i in range(GRAPH_PAGES)]
    extra = [site.url("misc", "/s/301"), site.url("misc", "/s/404"), site.url("graph", "/private/0.html")]
    seg.write_fetchlist(0, [FetchEntry(u, Page(u), [f"anchor {i}"]) for i, u in enumerate(graph + extra)])
    stats = Fetcher(**FAST).fetch_segment(seg, 0)
    assert stats.records == len(graph) + len(extra)
    assert seg.check()["fetched"] == len(graph) + len(extra)
    out = {o.result.url: o for o in seg.outcomes(0)}
    for u in graph:
        o = out[u]
        assert o.result.status == Status.FETCHED and len(o.result.md5) == 16
        expected = site.links[u]
        assert [x for x, _ in o.outlinks] == expected and o.result.num_outlinks == len(expected)
    assert out[extra[0]].redirect == site.url("misc", "/target/301?from=x")
    assert out[extra[0]].result.status == Status.REDIRECT_PERM and out[extra[0]].result.md5 is None
    assert out[extra[1]].result.status == Status.GONE and out[extra[2]].result.status == Status.GONE
    # a second run on the same partition has nothing left to do
    again = Fetcher(**FAST).fetch_segment(seg, 0)
    assert again.records == 0 and again.skipped == len(graph) + len(extra)


CHILD = textwrap.dedent(
    """
    import signal
    import sys
    from fetchlist.fetch import Fetcher
    # a parent started in the background may ignore SIGINT, and children inherit that
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from fetchlist.segment import Segment
    seg = Segment.open(sys.argv[1])
    try:
        # timeouts longer than any wait of the test: a held request ends by its signal
        Fetcher(
            politeness_delay=float(sys.argv[2]), threads=2, progress=False, allow_private_addresses=True,
            read_timeout=600, fetch_timeout=600,
        ).fetch_segment(seg, 0)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    print("done", flush=True)
    """
)


def _child(seg_path, delay):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(seg_path), str(delay)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_records(seg, n, proc, hold, limit=120.0):
    def saved() -> bool:
        assert proc.poll() is None, proc.communicate()
        return hold.arrived.is_set() and sum(1 for _ in seg.fetch_records(0)) >= n

    wait_until(saved, limit, f"{n} fetch records in {seg.path} and the held request in flight")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupt_and_crash_keep_fetched_records(site, tmp_path, sig):
    seg = Segment.create(tmp_path / "seg")
    urls = [site.url("graph", f"/g/{i}.html") for i in range(GRAPH_PAGES)]
    urls += [site.url("slowbot", f"/p{i}.html") for i in range(4)]
    seg.write_fetchlist(0, [FetchEntry(u) for u in urls])
    # The graph host's queue is fetched in order and its request for /g/6.html held open: the
    # signal lands mid-fetch, after /g/0-5 and slowbot's four pages, whatever the load.
    held = 6
    hold = site.server.routes[HOSTS["graph"]][f"/g/{held}.html"].hold = Hold()
    before = urls[:held] + urls[GRAPH_PAGES:]
    proc = _child(seg.path, 0.0)
    try:
        _wait_records(seg, len(before), proc, hold)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        hold.release()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "interrupted" in out, (proc.returncode, out, err)
    else:
        assert proc.returncode == -signal.SIGKILL
    kept = list(seg.records(0, content=True))
    assert sorted(r.url for r in kept) == sorted(before)
    assert seg.check()["fetched"] == len(kept)
    assert assert_valid_warc(seg) == len(kept)  # an exchange in flight is cut when the writer reopens
    for r in kept:
        assert r.status == Status.FETCHED and r.parse is not None and len(r.content) > 0
    served = {f"http://{r.host}:{site.port}{r.path}" for n in ("graph", "slowbot") for r in site.requests(n)}
    served.discard(site.url("graph", "/robots.txt"))
    served.discard(site.url("slowbot", "/robots.txt"))
    assert served == {*before, urls[held]}  # the page in flight is lost, nothing else
    # resume: only the missing URLs are fetched, nothing twice in the segment
    stats = Fetcher(**FAST).fetch_segment(seg, 0)
    assert stats.skipped == len(kept) and stats.records == len(urls) - len(kept)
    assert seg.check()["fetched"] == len(urls)
    assert sorted(r.url for r in seg.fetch_records(0)) == sorted(urls)
    assert assert_valid_warc(seg) == sum(r.status == Status.FETCHED for r in seg.fetch_records(0))


def test_sink_failure_stops_the_run(site):
    def sink(r):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        Fetcher(**FAST).fetch([FetchEntry(site.url("misc", "/s/200"))], sink)


class _Proxy(http.server.BaseHTTPRequestHandler):
    """A forward proxy that answers every request itself, naming the URL it was asked for."""

    def do_GET(self) -> None:
        body = f"<html><body>proxied {self.path} as {self.headers.get('User-Agent')}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.timeout(60)
def test_trust_env_takes_the_proxy_from_the_environment(monkeypatch):
    """With trust_env, HTTP_PROXY carries page requests (as requests would); without, they go direct."""
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        for name in ("http_proxy", "HTTP_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.server_address[1]}")
        target = "http://127.0.0.1:1/page"  # nothing listens there: only the proxy can answer
        recs, _ = run([target], robots_obey=False, trust_env=True)
        r = recs[target]
        assert r.status == Status.FETCHED and r.content.startswith(b"<html><body>proxied http://127.0.0.1:1/page as ")
        assert ("Accept-Encoding", "gzip, deflate") in r.request_headers
        recs, _ = run([target], robots_obey=False, trust_env=False)
        assert recs[target].status == Status.RETRY and "Connection" in recs[target].error
        recs, _ = run([target], robots_obey=False, trust_env=True, allow_private_addresses=False)
        assert recs[target].error.startswith("address policy: 127.0.0.1 resolves to")  # the proxy's address
    finally:
        proxy.shutdown()
        proxy.server_close()
