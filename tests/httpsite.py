"""The test website: real HTTP servers on loopback with every behaviour the fetcher must handle.

``TestSite()`` starts ``fetchlist.demo_site.SiteServer`` on several 127.0.0.x addresses (one
"host" each, one shared port) and fills them:

* ``graph``   — ``/g/<i>.html`` pages with a known link graph (``site.links``), ``/private/``
  disallowed by robots.txt;
* ``slowbot`` — robots.txt with ``Crawl-delay: 0.3``;
* ``broken``  — robots.txt answers 500 (back off this round);
* ``misc``    — robots.txt answers 404 (everything allowed), and ``/s/<code>`` answering with
  that HTTP status, redirects and a redirect loop, a 302 without Location, slow answers, a
  dripping body, a huge body, binary and text files, broken HTML, windows-1251 and
  Shift_JIS pages, an ETag/Last-Modified resource;
* ``down``    — an address nobody listens on (connection refused);
* ``hang``    — robots.txt that answers after 5 s (a read timeout);
* ``redirbot`` — robots.txt redirected (301) to ``/rules.txt``, which disallows ``/no/``.

Every request is logged with its host and server-side start/end times (``site.server.log``);
``intervals`` and ``overlaps`` turn the log into what the politeness tests assert.
"""

from __future__ import annotations

import random

from fetchlist.demo_site import RequestLog, Resource, SiteServer, loopback_ok

HOSTS = {
    "graph": "127.0.0.21",
    "slowbot": "127.0.0.22",
    "broken": "127.0.0.23",
    "misc": "127.0.0.24",
    "hang": "127.0.0.26",
    "redirbot": "127.0.0.27",
}
DOWN = "127.0.0.25"  # no server
GRAPH_PAGES = 12
HUGE = 3 * 1024 * 1024
ETAG = '"v1"'
LAST_MODIFIED = 1_600_000_000
AVAILABLE = all(loopback_ok(h) for h in [*HOSTS.values(), DOWN])


def html(title: str, body: str = "", charset: str = "utf-8") -> bytes:
    return (f'<html><head><meta charset="{charset}"><title>{title}</title></head><body>{body}</body></html>').encode(
        charset
    )


class TestSite:
    """The servers and their content; ``url(name, path)`` builds a URL of a named host."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self.server = SiteServer(list(HOSTS.values()))
        self.port = self.server.port
        self.links: dict[str, list[str]] = {}
        self._graph()
        self._slowbot()
        self._broken()
        self._misc()
        self.server.routes[HOSTS["hang"]]["/robots.txt"] = Resource(200, b"User-agent: *\n", "text/plain", delay=5)
        r = self.server.routes[HOSTS["redirbot"]]
        r["/robots.txt"] = Resource(301, b"", None, {"Location": "/rules.txt"})
        r["/rules.txt"] = Resource(
            200, b"User-agent: otherbot\nDisallow: /\n\nUser-agent: webdb-crawler\nDisallow: /no/\n", "text/plain"
        )
        r["/yes.html"] = Resource(200, html("yes"))

    def url(self, name: str, path: str) -> str:
        host = DOWN if name == "down" else HOSTS[name]
        return f"http://{host}:{self.port}{path}"

    def requests(self, name: str) -> list[RequestLog]:
        return self.server.requests_to(HOSTS[name])

    def paths(self, name: str) -> list[str]:
        return [r.path for r in self.requests(name)]

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> TestSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- content

    def _graph(self) -> None:
        r = self.server.routes[HOSTS["graph"]]
        r["/robots.txt"] = Resource(200, b"User-agent: *\nDisallow: /private/\n", "text/plain")
        rnd = random.Random(7)
        for i in range(GRAPH_PAGES):
            targets = sorted({rnd.randrange(GRAPH_PAGES) for _ in range(3)} - {i})
            links = [f"/g/{t}.html" for t in targets] + [f"/private/{i}.html"]
            body = "".join(f'<a href="{p}">to {p}</a> ' for p in links)
            r[f"/g/{i}.html"] = Resource(200, html(f"Graph {i}", body))
            r[f"/private/{i}.html"] = Resource(200, html(f"Private {i}"))
            self.links[self.url("graph", f"/g/{i}.html")] = [self.url("graph", p) for p in links]

    def _slowbot(self) -> None:
        r = self.server.routes[HOSTS["slowbot"]]
        r["/robots.txt"] = Resource(200, b"User-agent: *\nCrawl-delay: 0.3\n", "text/plain")
        for i in range(4):
            r[f"/p{i}.html"] = Resource(200, html(f"Slowbot {i}"))

    def _broken(self) -> None:
        r = self.server.routes[HOSTS["broken"]]
        r["/robots.txt"] = Resource(500, b"oops", "text/plain")
        for i in range(3):
            r[f"/p{i}.html"] = Resource(200, html(f"Broken {i}"))

    def _misc(self) -> None:
        r = self.server.routes[HOSTS["misc"]]
        r["/robots.txt"] = Resource(404, b"no robots here")
        for code in (200, 201, 204, 400, 401, 403, 404, 405, 408, 410, 429, 500, 502, 503, 504):
            r[f"/s/{code}"] = Resource(code, html(f"status {code}") if code != 204 else b"")
        for code in (300, 301, 302, 303, 307, 308):
            r[f"/s/{code}"] = Resource(code, b"", None, {"Location": f"/target/{code}?from=x#frag"})
        r["/redirect/absolute"] = Resource(301, b"", None, {"Location": self.url("graph", "/g/0.html")})
        r["/redirect/self"] = Resource(302, b"", None, {"Location": "/redirect/self"})
        r["/redirect/mailto"] = Resource(302, b"", None, {"Location": "mailto:someone@example.com"})
        r["/redirect/none"] = Resource(302, b"")
        r["/redirect/example"] = Resource(301, b"", None, {"Location": "HTTP://Example.COM:80/x#top"})
        r["/loop/a"] = Resource(301, b"", None, {"Location": "/loop/b"})
        r["/loop/b"] = Resource(301, b"", None, {"Location": "/loop/a"})
        r["/slow"] = Resource(200, html("slow"), delay=2.0)
        r["/drip"] = Resource(200, b"x" * 200, "text/plain", drip=0.05, drip_chunk=1)
        r["/huge"] = Resource(200, b"<html><body>" + b"<p>huge page</p>\n" * (HUGE // 17) + b"</body></html>")
        r["/binary.png"] = Resource(200, b"\x89PNG\r\n\x1a\n" + random.Random(1).randbytes(5000), "image/png")
        r["/binary-as-html"] = Resource(200, random.Random(2).randbytes(5000), "text/html")
        r["/text.txt"] = Resource(200, b"plain   text\nfile", "text/plain; charset=utf-8")
        r["/broken.html"] = Resource(200, b"<html><body><p>unclosed <a href='/g'>link<div></table>")
        r["/cp1251.html"] = Resource(200, html("Новости", "Привет", "windows-1251"), "text/html; charset=windows-1251")
        r["/sjis.html"] = Resource(200, html("日本", "テスト", "shift_jis"), "text/html")
        r["/etag.html"] = Resource(200, html("etag"), etag=ETAG, last_modified=LAST_MODIFIED)
        r["/lastmod.html"] = Resource(200, html("lastmod"), last_modified=LAST_MODIFIED)
        r["/noindex.html"] = Resource(200, html("secret", '<a href="/x">x</a>'), headers={"X-Robots-Tag": "noindex"})
        for i in range(6):
            r[f"/err/{i}"] = Resource(503, b"busy")


def intervals(log: list[RequestLog]) -> list[float]:
    """Per pair of consecutive requests: next start minus the moment the server began answering
    the previous one (a lower bound of how long the client waited in between)."""
    log = sorted(log, key=lambda r: r.start)
    return [b.start - a.end for a, b in zip(log, log[1:])]


def overlaps(log: list[RequestLog]) -> int:
    """How many requests started before the previous one to the same host was answered."""
    return sum(1 for gap in intervals(log) if gap < 0)
