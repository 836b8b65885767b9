"""Refused by the address policy: a crawl of loopback seeds without ``allow_private_addresses``
says why nothing was fetched, stops, and leaves the pages as they were, so the same crawl run
again with the setting fetches them.  A refusal is the crawl's setting, never the page's end."""

from __future__ import annotations

import time

import pytest
from hostile_server import HostileServer, answer
from hostile_util import cli

import webdb
from fetchlist.crawl import crawl, update_db
from fetchlist.fetch import Fetcher
from fetchlist.generate import generate
from fetchlist.segment import FetchRecord, Segment
from fetchlist.update import REFUSED
from webdb.tables.records import Status

PAGE = b"<html><head><title>ok</title></head><body><a href='/b'>b</a></body></html>"
ROUTES = {
    "/robots.txt": answer("200 OK", b"User-agent: *\n", {"Content-Type": "text/plain"}),
    "/a": answer(body=PAGE),
    "/b": answer(body=b"<html><body>b</body></html>"),
}
QUIET = ["--delay", "0", "--crawl-set", "progress=false"]


def _pages(db: str) -> dict:
    with webdb.open(db).reader() as r:
        return {p.url: p for p in r.pages()}


@pytest.mark.timeout(300)
def test_loopback_seeds_without_the_setting_are_refused_said_and_kept(tmp_path):
    db = str(tmp_path / "db")
    with HostileServer(ROUTES) as srv:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text(srv.url("/a") + "\n")
        out = cli("crawl", db, "--seeds", seeds, "--rounds", "3", *QUIET, timeout=240)
        assert out.returncode == 0, out.stderr
        assert srv.hits == {}  # nothing was requested, not even robots.txt
        lines = out.stdout.splitlines()
        round1 = next(x for x in lines if x.startswith("round 1:"))
        assert ", refused 1 (address policy 1; set allow_private_addresses to fetch them); db" in round1
        assert not any(x.startswith("round 2:") for x in lines)  # the next round would meet the same policy
        assert "in all rounds: refused 1 (address policy 1; set allow_private_addresses" in out.stdout
        assert "stopped after round 1: every URL was refused by the address policy" in out.stdout
        (page,) = _pages(db).values()
        assert page.status == Status.UNFETCHED and page.retries == 0  # not GONE: not final
        assert page.meta.get(REFUSED) == "address policy" and not page.meta.get("gen")

        # The same crawl with the setting fetches the seed at once (the page is still due).
        out = cli("crawl", db, "--rounds", "2", *QUIET, "--crawl-set", "allow_private_addresses=true", timeout=240)
        assert out.returncode == 0, out.stderr
        assert "refused" not in out.stdout
    pages = _pages(db)
    assert pages[srv.url("/a")].status == Status.FETCHED and pages[srv.url("/b")].status == Status.FETCHED
    assert not pages[srv.url("/a")].meta.get(REFUSED)  # a fetch clears the refusal


@pytest.mark.timeout(300)
def test_a_repeated_refusal_waits_retry_delay_and_never_becomes_gone(tmp_path):
    """Hosts that keep resolving to private addresses do not fill every round: from the second
    refusal on the page is put retry_delay ahead; its status and retries never change, however
    often it is refused (more often than max_retries allows failures)."""
    db = str(tmp_path / "db")
    with HostileServer(ROUTES) as srv:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text(srv.url("/a") + "\n")
        url = srv.url("/a")
        fetcher = Fetcher(politeness_delay=0.0, progress=False)
        first = crawl(db, seeds=[str(seeds)], rounds=1, fetcher=fetcher, create_settings={"sync": False})
        assert first.rounds[0].refused == {"address policy": 1}
        assert _pages(db)[url].next_fetch <= time.time()  # first refusal: still due
        for _ in range(5):
            before = time.time()
            again = crawl(db, rounds=1, fetcher=fetcher, generate_options={"add_days": 2})
            assert again.rounds[0].refused == {"address policy": 1}
            page = _pages(db)[url]
            assert page.status == Status.UNFETCHED and page.retries == 0
            assert page.next_fetch >= int(before) + 86400  # retry_delay ahead
        assert crawl(db, rounds=1, fetcher=fetcher).rounds[0].generated == 0  # not due now
        assert srv.hits == {}


@pytest.mark.timeout(120)
def test_a_refusal_recorded_gone_is_not_final_either(tmp_path):
    """A segment may hold the refusal as GONE: update reads it as a refusal all the same."""
    db = str(tmp_path / "db")
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://127.0.0.1:9/x\nhttp://127.0.0.1:9/y\n")
    assert crawl(db, seeds=[str(seeds)], rounds=0, create_settings={"sync": False}).injected["new"] == 2
    seg_dir = str(tmp_path / "seg")
    generate(webdb.open(db), seg_dir)
    seg = Segment.open(seg_dir)
    error = "address policy: 127.0.0.1 resolves to 127.0.0.1 (loopback); set allow_private_addresses to fetch it"
    with seg.writer(0) as w:
        w.write(FetchRecord("http://127.0.0.1:9/x", Status.GONE, int(time.time()), error=error))
        w.write(FetchRecord("http://127.0.0.1:9/y", Status.GONE, int(time.time()), http_status=404))
    counts = update_db(webdb.open(db), [seg_dir])
    assert counts["refused_policy"] == 1 and counts["gone"] == 1
    pages = _pages(db)
    assert pages["http://127.0.0.1:9/x"].status == Status.UNFETCHED and not pages["http://127.0.0.1:9/x"].meta.get(
        "gen"
    )
    assert pages["http://127.0.0.1:9/y"].status == Status.GONE
