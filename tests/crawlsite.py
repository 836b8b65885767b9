"""A generated website of a few thousand pages with a known link graph, served from a child
process on loopback, and what a crawl of it must leave in the db after R rounds.

``CrawlSite(hosts, articles, seed)`` builds the routes and the model deterministically from the
bases (``http://host:port``); ``served(...)`` runs the servers in a child process (so the
server does not share the fetcher's GIL) and yields the model built for the same port.

Per host: a home page linking to 8 sections and a deep chain; sections listing most articles;
articles linking to 3 random articles on any host, and sometimes to a 301 or 302 redirect, a
404, a 410, a 500, or (host 0) a page robots.txt disallows.  The chain ``/deep/1 → /deep/2 → …``
makes pages that only later rounds reach.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from fetchlist.demo_site import Resource, SiteServer
from webdb import Status

CRAWL_HOSTS = ("127.0.0.41", "127.0.0.42", "127.0.0.43", "127.0.0.44", "127.0.0.45", "127.0.0.46")


def _html(title: str, links: list[tuple[str, str]]) -> bytes:
    items = "".join(f'<li><a href="{h}">{t}</a></li>' for h, t in links)
    head = f"<!DOCTYPE html><html><head><title>{title}</title></head>"
    return f"{head}<body><h1>{title}</h1><ul>{items}</ul></body></html>".encode()


@dataclass
class CrawlSite:
    """The site: ``routes`` (host → path → Resource) and its model: per absolute URL its kind
    and answer, outlinks of HTML pages (absolute, in document order), redirect targets."""

    bases: list[str]
    articles: int = 500
    seed: int = 3
    routes: dict[str, dict[str, Resource]] = field(default_factory=dict)
    outlinks: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    redirects: dict[str, tuple[int, str]] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    denied: set[str] = field(default_factory=set)
    seeds: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        rnd = random.Random(self.seed)
        n = self.articles
        for hi, base in enumerate(self.bases):
            host = base.split("//")[1].rsplit(":", 1)[0]
            r = self.routes.setdefault(host, {})
            if hi == 0:
                r["/robots.txt"] = Resource(200, b"User-agent: *\nDisallow: /private/\n", "text/plain")
            elif hi == 1:
                r["/robots.txt"] = Resource(404, b"none")
            else:
                r["/robots.txt"] = Resource(200, b"User-agent: *\nAllow: /\n", "text/plain")
            self.seeds.append(base + "/")
            home = [(f"/s{k}/", f"Section {k}") for k in range(8)] + [("/deep/1", "Deep")]
            if hi + 1 < len(self.bases):
                home.append((self.bases[hi + 1] + "/", f"Host {hi + 1}"))
            self._page(base, "/", f"Home {hi}", home)
            for k in range(8):
                listed = [i for i in range(n) if i % 8 == k and i % 10 != 9]  # 10% reached only by links
                self._page(base, f"/s{k}/", f"Section {k} of {hi}", [(f"/a/{i}.html", f"Article {i}") for i in listed])
            for d in range(1, 8):
                self._page(base, f"/deep/{d}", f"Deep {d} of {hi}", [(f"/deep/{d + 1}", f"Deeper {d + 1}")])
            for i in range(n):
                links = [("/", "Home")]
                for _ in range(3):
                    other = rnd.randrange(len(self.bases))
                    t = f"/a/{rnd.randrange(n)}.html"
                    links.append((t if other == hi else self.bases[other] + t, f"See {t}"))
                x = rnd.random()
                if x < 0.03:
                    links.append((f"/r/{i}", "Moved"))
                    self.redirects[base + f"/r/{i}"] = (301, base + f"/a/{rnd.randrange(n)}.html")
                    r[f"/r/{i}"] = Resource(301, b"", None, {"Location": self.redirects[base + f"/r/{i}"][1]})
                elif x < 0.05:
                    links.append((f"/t/{i}", "Elsewhere"))
                    self.redirects[base + f"/t/{i}"] = (302, base + f"/only-by-redirect/{i}.html")
                    r[f"/t/{i}"] = Resource(302, b"", None, {"Location": f"/only-by-redirect/{i}.html"})
                    self._page(base, f"/only-by-redirect/{i}.html", f"Target {i} of {hi}", [("/", "Home")])
                elif x < 0.07:
                    links.append((f"/missing/{i}.html", "Broken"))
                elif x < 0.08:
                    links.append((f"/gone/{i}.html", "Gone"))
                    self._code(base, f"/gone/{i}.html", 410)
                elif x < 0.09:
                    links.append((f"/err/{i}.html", "Error"))
                    self._code(base, f"/err/{i}.html", 500)
                elif x < 0.11 and hi == 0:
                    links.append((f"/private/{i}.html", "Private"))
                    self._page(base, f"/private/{i}.html", f"Private {i}", [("/", "Home")])
                    self.denied.add(base + f"/private/{i}.html")
                self._page(base, f"/a/{i}.html", f"Article {i} of host {hi}", links)

    def _page(self, base: str, path: str, title: str, links: list[tuple[str, str]]) -> None:
        host = base.split("//")[1].rsplit(":", 1)[0]
        self.routes.setdefault(host, {})[path] = Resource(200, _html(title, links))
        out, seen = [], set()
        for href, text in links:
            u = href if "://" in href else base + href
            if u not in seen and u != base + path:  # the parser drops links to the page itself
                seen.add(u)
                out.append((u, text))
        self.outlinks[base + path] = out

    def _code(self, base: str, path: str, code: int) -> None:
        host = base.split("//")[1].rsplit(":", 1)[0]
        self.routes[host][path] = Resource(code, b"<html><body>no</body></html>")
        self.codes[base + path] = code

    # ---- the model of a crawl -----------------------------------------------------------------

    def status(self, url: str) -> Status:
        """What a polite fetch of ``url`` records."""
        if url in self.denied:
            return Status.GONE
        if url in self.redirects:
            return Status.REDIRECT_PERM if self.redirects[url][0] == 301 else Status.REDIRECT_TEMP
        if url in self.outlinks:
            return Status.FETCHED
        code = self.codes.get(url, 404)
        return Status.RETRY if code >= 500 else Status.GONE

    def depths(self) -> dict[str, int]:
        """BFS depth from the seeds: links of fetched HTML pages and redirect targets are edges."""
        depth = {u: 0 for u in self.seeds}
        frontier = list(self.seeds)
        d = 0
        while frontier:
            nxt = []
            for u in frontier:
                st = self.status(u)
                targets = []
                if st == Status.FETCHED:
                    targets = [v for v, _ in self.outlinks[u]]
                elif st in (Status.REDIRECT_PERM, Status.REDIRECT_TEMP):
                    targets = [self.redirects[u][1]]
                for v in targets:
                    if v not in depth:
                        depth[v] = d + 1
                        nxt.append(v)
            frontier, d = nxt, d + 1
        return depth

    def expected(self, rounds: int) -> tuple[dict[str, Status], set[tuple[str, str, str]]]:
        """After ``rounds`` rounds with no top-N: URL → status, and (source, target, anchor) links.

        Round r fetches the pages first seen in round r-1 (depth r-1); what they link to is in
        the db unfetched.  Failed pages are not retried within a few rounds (retry_delay 1 day).
        """
        pages: dict[str, Status] = {}
        links: set[tuple[str, str, str]] = set()
        for u, d in self.depths().items():
            if d > rounds:
                continue
            if d == rounds:
                pages[u] = Status.UNFETCHED
                continue
            pages[u] = st = self.status(u)
            if st == Status.FETCHED:
                links |= {(u, v, a) for v, a in self.outlinks[u]}
        return pages, links


def _serve(hosts: tuple[str, ...], articles: int, seed: int, conn) -> None:
    server = SiteServer(hosts)
    site = CrawlSite([server.base(h) for h in hosts], articles, seed)
    server.routes.update(site.routes)
    conn.send(server.port)
    conn.recv()  # until the parent is done
    server.close()


@contextlib.contextmanager
def served(hosts: tuple[str, ...] = CRAWL_HOSTS, articles: int = 500, seed: int = 3) -> Iterator[CrawlSite]:
    """Serve the site from a child process; yield its model (built for the same port)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(hosts, articles, seed, child), daemon=True)
    proc.start()
    try:
        port = parent.recv()
        yield CrawlSite([f"http://{h}:{port}" for h in hosts], articles, seed)
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
