"""A small generated website and HTTP servers for it on loopback (used by ``webdb demo``).

``SiteServer(hosts)`` runs one ``ThreadingHTTPServer`` per loopback address (``127.0.0.2``,
``127.0.0.3``, ...: several "hosts"), all on the same port, serving ``routes[host][path]`` →
``Resource``, and logs every request (host, path, headers, start and end time).  Unknown paths
answer 404.  ``serve_demo()`` starts servers for the bundled site: ``build_site`` generates it
from a seed (a few hundred pages with real links between sections and hosts, robots.txt rules,
a Crawl-delay, redirects, a redirect loop, a meta refresh, a page with a rel=canonical link and
a duplicate of it, a robots.txt ``Sitemap:`` line naming a sitemap index and a gzip sitemap of
pages nothing links to, 404/410/500 answers, a text and a binary file, a windows-1251 page) and
records its link graph, so a crawl can be checked against it.

Nothing is fetched from outside loopback.
"""

from __future__ import annotations

import email.utils
import gzip
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Hold", "Resource", "RequestLog", "SiteServer", "DemoSite", "build_site", "serve_demo", "DEMO_HOSTS"]

DEMO_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
HTML = "text/html; charset=utf-8"


class Hold:
    """Keeps the requests of a resource in flight until a test lets them go: each request sets
    ``arrived``, then waits for ``release()`` before answering.  A test acts while a request is
    certainly in flight, whatever the machine's load; ``limit`` seconds bound the wait, so a
    hold never released cannot keep a server thread for ever."""

    def __init__(self, limit: float = 300.0) -> None:
        self.arrived = threading.Event()
        self._released = threading.Event()
        self.limit = limit

    def release(self) -> None:
        self._released.set()

    def wait(self) -> None:
        """What the server does with a request to a held resource."""
        self.arrived.set()
        self._released.wait(self.limit)


@dataclass
class Resource:
    """What the server answers for one path.

    ``delay``: seconds before the status line.  ``drip``: seconds between body chunks of
    ``drip_chunk`` bytes (a slow body).  ``etag`` / ``last_modified`` (epoch seconds): answer
    304 to a matching If-None-Match / a not older If-Modified-Since.  ``hold``: answer only once
    the Hold is released.
    """

    status: int = 200
    body: bytes = b""
    content_type: str | None = HTML
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drip: float = 0.0
    drip_chunk: int = 1
    etag: str | None = None
    last_modified: int | None = None
    hold: Hold | None = None


@dataclass(frozen=True, slots=True)
class RequestLog:
    host: str
    path: str
    method: str
    headers: dict[str, str]
    start: float  # time.monotonic() when the request line was read
    # time.monotonic() when the server began sending the answer (status line and headers): the
    # client cannot have been done with it earlier (it may stop reading after the headers), so
    # ``next.start - end`` never overstates how long the client waited between two requests
    end: float
    status: int
    client: tuple[str, int]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "webdb-testsite/1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:
        start = time.monotonic()
        site: SiteServer = self.server.site
        host = self.server.server_address[0]
        site._begin(host)
        res = site.routes.get(host, {}).get(self.path)
        status = 404
        self._answered = None
        try:
            if res is None:
                res = Resource(404, b"<html><body><h1>Not found</h1></body></html>")
            if res.hold is not None:
                res.hold.wait()
            if res.delay:
                time.sleep(res.delay)
            status = self._answer(res, head)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        finally:
            entry = RequestLog(
                host,
                self.path,
                self.command,
                dict(self.headers.items()),
                start,
                self._answered or time.monotonic(),
                status,
                self.client_address,
            )
            site._end(entry)

    def _answer(self, res: Resource, head: bool) -> int:
        status, body = res.status, res.body
        if status == 200 and self._not_modified(res):
            status, body = 304, b""
        self.send_response(status)
        if res.content_type and status != 304:
            self.send_header("Content-Type", res.content_type)
        for k, v in res.headers.items():
            self.send_header(k, v)
        if res.etag:
            self.send_header("ETag", res.etag)
        if res.last_modified:
            self.send_header("Last-Modified", email.utils.formatdate(res.last_modified, usegmt=True))
        self.send_header("Content-Length", str(len(body)))
        if self.headers.get("Connection", "").lower() == "close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self._answered = time.monotonic()
        self.end_headers()
        if head:
            return status
        step = res.drip_chunk if res.drip else max(1, len(body))
        for i in range(0, len(body), step):
            self.wfile.write(body[i : i + step])
            if res.drip:
                time.sleep(res.drip)
        return status

    def _not_modified(self, res: Resource) -> bool:
        inm = self.headers.get("If-None-Match")
        if res.etag and inm is not None:
            return inm.strip() == res.etag
        ims = self.headers.get("If-Modified-Since")
        if res.last_modified and ims:
            try:
                t = email.utils.parsedate_to_datetime(ims).timestamp()
            except (TypeError, ValueError):
                return False
            return res.last_modified <= t
        return False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class SiteServer:
    """HTTP servers on the loopback addresses ``hosts``, one port shared by all of them.

    ``routes[host][path]`` (path with query, as requested) → Resource; ``log`` lists every
    request.  Use as a context manager, or call ``close()``.
    """

    def __init__(self, hosts: tuple[str, ...] | list[str] = DEMO_HOSTS, port: int = 0) -> None:
        self.hosts = list(hosts)
        self.routes: dict[str, dict[str, Resource]] = {h: {} for h in self.hosts}
        self.log: list[RequestLog] = []
        self._log_cv = threading.Condition()
        self._in_flight = {h: 0 for h in self.hosts}
        self._servers = self._bind(port)
        self.port = self._servers[0].server_address[1]
        self._threads = []
        for srv in self._servers:
            srv.site = self
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            t.start()
            self._threads.append(t)

    def _bind(self, port: int) -> list[_Server]:
        for _ in range(20):
            servers: list[_Server] = []
            try:
                for h in self.hosts:
                    servers.append(_Server((h, port or (servers[0].server_address[1] if servers else 0)), _Handler))
                return servers
            except OSError:
                for srv in servers:
                    srv.server_close()
                if port:
                    raise
        raise OSError(f"no port free on all of {self.hosts}")

    def base(self, host: str) -> str:
        """``http://host:port`` of one of the hosts."""
        return f"http://{host}:{self.port}"

    def _begin(self, host: str) -> None:
        with self._log_cv:
            self._in_flight[host] += 1

    def _end(self, entry: RequestLog) -> None:
        with self._log_cv:
            self.log.append(entry)
            self._in_flight[entry.host] -= 1
            self._log_cv.notify_all()

    def requests_to(self, host: str, wait: float = 10.0) -> list[RequestLog]:
        """The requests one host received, in order of arrival.

        Waits up to ``wait`` seconds for requests still being answered (a request is logged
        when its answer has been written, which may be just after the client has read it).
        """
        with self._log_cv:
            self._log_cv.wait_for(lambda: self._in_flight[host] == 0, wait)
            return sorted((r for r in self.log if r.host == host), key=lambda r: r.start)

    def clear_log(self, wait: float = 10.0) -> None:
        """Forget the requests logged so far (after waiting for the ones still being answered)."""
        with self._log_cv:
            self._log_cv.wait_for(lambda: not any(self._in_flight.values()), wait)
            self.log.clear()

    def close(self) -> None:
        for srv in self._servers:
            srv.shutdown()
            srv.server_close()

    def __enter__(self) -> SiteServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- the bundled demo site ----------------------------------------------------------------------

_WORDS = (
    "crawl web page link anchor index fetch parse segment score host domain news archive "
    "robots delay queue table block merge sort update round seed graph text title"
).split()


@dataclass
class DemoSite:
    """The generated site: its routes, link graph (HTML page → outlinks) and seed URLs."""

    routes: dict[str, dict[str, Resource]]
    graph: dict[str, list[str]]
    seeds: list[str]
    disallowed: set[str]
    crawl_delay: dict[str, float]
    # URL → (priority, changefreq) of the pages the sitemaps list that nothing links to
    sitemapped: dict[str, tuple[float, str]] = field(default_factory=dict)
    # meta refresh page → its target
    refresh: dict[str, str] = field(default_factory=dict)
    # page → the canonical URL it names
    canonical: dict[str, str] = field(default_factory=dict)

    def reachable(self) -> set[str]:
        """HTML pages a polite crawl from the seeds can fetch (robots.txt obeyed, links, sitemaps
        and meta refreshes followed)."""
        seen, todo = set(), list(self.seeds) + list(self.sitemapped) + list(self.refresh.values())
        while todo:
            u = todo.pop()
            if u in seen or u in self.disallowed or u not in self.graph:
                continue
            seen.add(u)
            todo.extend(self.graph[u])
        return seen


def build_site(bases: list[str], pages: int = 300, seed: int = 1, crawl_delay: float = 0.2) -> DemoSite:
    """Generate the demo site for the servers at ``bases`` (``http://host:port``, one per host).

    Host 0 disallows ``/private/`` in robots.txt; host 1 asks for ``Crawl-delay: crawl_delay``;
    host 2 has no robots.txt (404); the others allow everything.  Each host has a home page,
    four sections, articles linking to neighbours, to other sections and to other hosts, and a
    few broken links, redirects (301, 302, a loop), a 410, a 500, ``/about.txt`` and
    ``/logo.png``.  Host 0 also has ``/moved.html`` (a meta refresh to ``/s1/``) and ``/s0/a0``,
    the same bytes as ``/s0/a0.html``, which names ``/s0/a0.html`` its canonical URL.  The last
    host's robots.txt names ``/sitemap.xml``, an index listing itself (a loop) and
    ``/sitemap-pages.xml.gz``, whose URLs include ``/hidden/h0.html`` … ``h2.html`` (linked from
    nowhere).  Deterministic for a given seed.
    """
    site = _SiteBuilder(bases, pages, seed)
    for hi, base in enumerate(bases):
        site.host(hi, base, crawl_delay)
    return site.result()


class _SiteBuilder:
    """The demo site's routes and link graph, host by host; one seeded ``random.Random`` draws
    in a fixed order, so the site is the same for the same seed."""

    def __init__(self, bases: list[str], pages: int, seed: int) -> None:
        self.bases = bases
        self.rnd = random.Random(seed)
        hosts = [b.split("//", 1)[1].rsplit(":", 1)[0] for b in bases]
        per_host = max(8, pages // len(bases))
        self.routes: dict[str, dict[str, Resource]] = {h: {} for h in hosts}
        self.graph: dict[str, list[str]] = {}
        self.disallowed: set[str] = set()
        self.crawl_delays: dict[str, float] = {}
        self.articles = {b: [f"/s{i % 4}/a{i}.html" for i in range(per_host)] for b in bases}
        self.sitemapped: dict[str, tuple[float, str]] = {}
        self.refresh: dict[str, str] = {}
        self.canonical: dict[str, str] = {}

    def result(self) -> DemoSite:
        seeds = [b + "/" for b in self.bases]
        return DemoSite(
            self.routes,
            self.graph,
            seeds,
            self.disallowed,
            self.crawl_delays,
            self.sitemapped,
            self.refresh,
            self.canonical,
        )

    def page(
        self, base: str, path: str, title: str, links: list[tuple[str, str]], charset: str = "utf-8", head: str = ""
    ) -> None:
        """An HTML page of random words and a list of ``links`` (href, text)."""
        rnd = self.rnd
        words = " ".join(rnd.choice(_WORDS) for _ in range(rnd.randint(30, 120)))
        items = "".join(f'<li><a href="{href}">{text}</a></li>' for href, text in links)
        html = (
            f'<!DOCTYPE html><html><head><meta charset="{charset}"><title>{title}</title>{head}</head>'
            f"<body><h1>{title}</h1><p>{words}</p><ul>{items}</ul></body></html>"
        )
        ctype = f"text/html; charset={charset}"
        last_modified = 1_700_000_000 + len(self.graph)
        self.routes[_host(base)][path] = Resource(200, html.encode(charset), ctype, last_modified=last_modified)
        self.graph[base + path] = [_absolute(base, href) for href, _ in links]

    def host(self, hi: int, base: str, crawl_delay: float) -> None:
        """Host ``hi``: robots.txt, home, sections, articles, the odd resources."""
        home_links = self.robots(hi, base, crawl_delay)
        if hi + 1 < len(self.bases):
            home_links.append((self.bases[hi + 1] + "/", f"Next host {hi + 1}"))
        self.page(base, "/", f"Home of host {hi}", home_links)
        arts = self.articles[base]
        for k in range(4):
            self.page(base, f"/s{k}/", f"Section {k}", [(a, f"Article {a}") for a in arts if a.startswith(f"/s{k}/")])
        for i, a in enumerate(arts):
            self.article(hi, base, i, a)
        self.odd_resources(hi, base)

    def robots(self, hi: int, base: str, crawl_delay: float) -> list[tuple[str, str]]:
        """Host ``hi``'s robots.txt (and the private page host 0 disallows); returns the home
        page's links."""
        routes = self.routes[_host(base)]
        home_links = [(f"/s{k}/", f"Section {k}") for k in range(4)]
        home_links += [("/about.txt", "About"), ("/logo.png", "Logo"), ("/old/a1.html", "Old article")]
        home_links += [
            ("/gone.html", "Gone"),
            ("/error.html", "Error"),
            ("/loop/a", "Loop"),
            ("/koi.html", "Кириллица"),
        ]
        if hi == 0:
            home_links += [("/private/secret.html", "Private"), ("/moved.html", "Moved"), ("/s0/a0", "Short")]
            routes["/robots.txt"] = Resource(200, b"User-agent: *\nDisallow: /private/\n", "text/plain")
            self.page(base, "/private/secret.html", "Secret", [("/", "Home")])
            self.disallowed.add(base + "/private/secret.html")
        elif hi == 1:
            routes["/robots.txt"] = Resource(
                200, f"User-agent: *\nCrawl-delay: {crawl_delay}\nDisallow: /nothing-here/\n".encode(), "text/plain"
            )
            self.crawl_delays[base] = crawl_delay
        elif hi > 2 and hi + 1 < len(self.bases):
            routes["/robots.txt"] = Resource(200, b"User-agent: *\nAllow: /\n", "text/plain")
        elif hi > 2:
            robots = f"User-agent: *\nAllow: /\nSitemap: {base}/sitemap.xml\n".encode()
            routes["/robots.txt"] = Resource(200, robots, "text/plain")
        return home_links

    def article(self, hi: int, base: str, i: int, a: str) -> None:
        """Article ``i`` at path ``a``: links home, to its section, its neighbours, three random
        articles anywhere, now and then a broken link."""
        rnd, arts = self.rnd, self.articles[base]
        links = [("/", "Home"), (f"/s{i % 4}/", "Section")]
        links += [(arts[(i + 1) % len(arts)], "Next"), (arts[i - 1], "Previous")]
        for _ in range(3):
            other = rnd.choice(self.bases)
            target = rnd.choice(self.articles[other])
            links.append((target if other == base else other + target, f"See also {target}"))
        if i % 17 == 5:
            links.append((f"/s{i % 4}/missing-{i}.html", "Broken link"))
        head = ""
        if hi == 0 and i == 0:  # the same bytes are served at /s0/a0, which names this one canonical
            head = f'<link rel="canonical" href="{a}">'
            self.canonical[base + "/s0/a0"] = self.canonical[base + a] = base + a
        self.page(base, a, f"Article {i} on host {hi}", links, head=head)
        if head:
            self.routes[_host(base)]["/s0/a0"] = self.routes[_host(base)][a]
            self.graph[base + "/s0/a0"] = self.graph[base + a]

    def odd_resources(self, hi: int, base: str) -> None:
        """Redirects, a loop, a 410, a 500, text, an image, a windows-1251 page; host 0's meta
        refresh; the last host's sitemaps."""
        arts = self.articles[base]
        r = self.routes[_host(base)]
        r["/old/a1.html"] = Resource(301, b"", None, {"Location": f"{base}{arts[1]}"})
        r["/tmp"] = Resource(302, b"", None, {"Location": "/"})
        r["/loop/a"] = Resource(302, b"", None, {"Location": "/loop/b"})
        r["/loop/b"] = Resource(302, b"", None, {"Location": "/loop/a"})
        r["/gone.html"] = Resource(410, b"<html><body>gone</body></html>")
        r["/error.html"] = Resource(500, b"<html><body>server error</body></html>")
        r["/about.txt"] = Resource(200, f"Demo host {hi}: generated pages for webdb.\n".encode(), "text/plain")
        r["/logo.png"] = Resource(
            200, b"\x89PNG\r\n\x1a\n" + bytes(self.rnd.randrange(256) for _ in range(2048)), "image/png"
        )
        self.page(base, "/koi.html", "Кириллица", [("/", "Домой")], charset="windows-1251")
        if hi == 0:
            r["/moved.html"] = Resource(
                200, b'<html><head><meta http-equiv="refresh" content="0; url=/s1/"></head></html>'
            )
            self.refresh[base + "/moved.html"] = base + "/s1/"
        if hi > 2 and hi + 1 == len(self.bases):
            _sitemaps(base, r, arts, self.sitemapped, self.page)


_HIDDEN = ((1.0, "daily"), (0.1, "monthly"), (0.5, "weekly"))


def _sitemaps(base: str, r: dict[str, Resource], arts: list[str], sitemapped: dict, page) -> None:
    """The sitemap index ``/sitemap.xml`` (listing itself and ``/sitemap-pages.xml.gz``) and the
    gzip urlset of three hidden pages and two articles."""
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    index = (
        f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex {ns}>'
        f"<sitemap><loc>{base}/sitemap.xml</loc></sitemap>"
        f"<sitemap><loc>{base}/sitemap-pages.xml.gz</loc><lastmod>2024-05-01</lastmod></sitemap></sitemapindex>"
    )
    urls = []
    for n, (priority, freq) in enumerate(_HIDDEN):
        path = f"/hidden/h{n}.html"
        page(base, path, f"Hidden page {n}", [("/", "Home")])
        sitemapped[base + path] = (priority, freq)
        urls.append(
            f"<url><loc>{base}{path}</loc><lastmod>2024-05-0{n + 1}</lastmod>"
            f"<changefreq>{freq}</changefreq><priority>{priority}</priority></url>"
        )
    urls += [f"<url><loc>{base}{a}</loc></url>" for a in arts[:2]]
    urlset = f'<?xml version="1.0" encoding="UTF-8"?><urlset {ns}>{"".join(urls)}</urlset>'
    r["/sitemap.xml"] = Resource(200, index.encode(), "application/xml")
    r["/sitemap-pages.xml.gz"] = Resource(200, gzip.compress(urlset.encode(), mtime=0), "application/gzip")


def _host(base: str) -> str:
    return base.split("//", 1)[1].rsplit(":", 1)[0]


def _absolute(base: str, href: str) -> str:
    return href if "://" in href else base + href


def serve_demo(
    pages: int = 300, hosts: tuple[str, ...] = DEMO_HOSTS, port: int = 0, seed: int = 1, crawl_delay: float = 0.2
) -> tuple[SiteServer, DemoSite]:
    """Start servers for the demo site; return (server, site).  Close the server when done."""
    server = SiteServer(hosts, port)
    site = build_site([server.base(h) for h in hosts], pages, seed, crawl_delay)
    server.routes.update(site.routes)
    return server, site


def loopback_ok(host: str) -> bool:
    """Whether this machine can bind ``host`` (every 127.x address on Linux; not on macOS)."""
    try:
        with socket.socket() as s:
            s.bind((host, 0))
    except OSError:
        return False
    return True
