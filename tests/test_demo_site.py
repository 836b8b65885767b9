"""fetchlist.demo_site: the bundled site is served, crawlable, and matches its recorded graph."""

from __future__ import annotations

import pytest
import requests

from fetchlist.demo_site import DEMO_HOSTS, build_site, loopback_ok, serve_demo
from fetchlist.fetch import Fetcher
from fetchlist.segment import FetchEntry, Segment
from webdb.tables.records import Page, Status

pytestmark = pytest.mark.skipif(not all(map(loopback_ok, DEMO_HOSTS)), reason="needs 127.0.0.x addresses")


def test_build_site_is_deterministic():
    bases = ["http://127.0.0.2:9", "http://127.0.0.3:9", "http://127.0.0.4:9", "http://127.0.0.5:9"]
    a, b = build_site(bases, 300, seed=5), build_site(bases, 300, seed=5)
    assert a.graph == b.graph and a.seeds == b.seeds
    assert 300 <= len(a.graph) <= 360
    assert build_site(bases, 300, seed=6).graph != a.graph
    assert a.disallowed == {"http://127.0.0.2:9/private/secret.html"}
    reach = a.reachable()
    assert a.disallowed.isdisjoint(reach) and len(reach) >= 0.95 * (len(a.graph) - 1)


def test_served_and_crawled_to_completion(tmp_path):
    server, site = serve_demo(pages=60, crawl_delay=0.05)
    with server:
        r = requests.get(site.seeds[0], timeout=5)
        assert r.status_code == 200 and "Home of host 0" in r.text
        assert requests.get(server.base(DEMO_HOSTS[0]) + "/robots.txt", timeout=5).text.startswith("User-agent")
        fetcher = Fetcher(politeness_delay=0.0, threads=4, progress=False, allow_private_addresses=True)
        known, frontier, statuses = set(site.seeds), [FetchEntry(u) for u in site.seeds], {}
        for rnd in range(12):
            if not frontier:
                break
            seg = Segment.create(tmp_path / f"seg{rnd}")
            seg.write_fetchlist(0, frontier)
            fetcher.fetch_segment(seg, 0)
            level = {e.url: int(e.page.meta.get("sitemap", 0)) for e in seg.fetchlist(0)}
            frontier = []
            for o in seg.outcomes(0):
                statuses[o.result.url] = o.result.status
                p = o.record.parse
                found = [(x, 0) for x, _ in o.outlinks] + ([(o.redirect, 0)] if o.redirect else [])
                if p is not None:  # sitemaps (robots.txt, an index's children) and their URLs
                    found += [(x, level[o.result.url] + 1) for x in p.sitemaps]
                    found += [(x.url, 0) for x in p.sitemap_urls]
                for u, lv in found:
                    if u not in known:
                        known.add(u)
                        frontier.append(FetchEntry(u, Page(u, meta={"sitemap": str(lv)} if lv else {})))
        assert not frontier
        fetched_html = {u for u, s in statuses.items() if s == Status.FETCHED and u in site.graph}
        assert fetched_html == site.reachable()
        private = next(iter(site.disallowed))
        assert statuses[private] == Status.GONE
        assert server.log and all("/private/" not in r.path for r in server.log)
        base0 = server.base(DEMO_HOSTS[0])
        assert statuses[base0 + "/old/a1.html"] == Status.REDIRECT_PERM
        assert statuses[base0 + "/loop/a"] == statuses[base0 + "/loop/b"] == Status.REDIRECT_TEMP
        assert statuses[base0 + "/gone.html"] == Status.GONE and statuses[base0 + "/error.html"] == Status.RETRY
        assert statuses[base0 + "/moved.html"] == Status.REDIRECT_PERM  # a meta refresh
        assert statuses[base0 + "/logo.png"] == Status.FETCHED and statuses[base0 + "/koi.html"] == Status.FETCHED
        gaps = [
            b.start - a.end for a, b in zip(server.requests_to(DEMO_HOSTS[1]), server.requests_to(DEMO_HOSTS[1])[1:])
        ]
        assert site.crawl_delay == {server.base(DEMO_HOSTS[1]): 0.05}
        assert min(gaps) >= 0.05 - 0.002  # host 1 asks for a Crawl-delay
