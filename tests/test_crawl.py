"""The crawl loop against real HTTP servers on loopback: a 4-round crawl of a generated site of a
few thousand pages must leave exactly the pages, statuses and links reachable within 4 rounds;
``webdb crawl`` and ``webdb fetch`` (partitions, resume, Ctrl-C) as commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from crawlsite import CRAWL_HOSTS, served
from waiting import sigint_default, wait_until

import webdb
from fetchlist.crawl import crawl, fetch_parts
from fetchlist.demo_site import Resource, SiteServer, loopback_ok
from fetchlist.fetch import Fetcher
from fetchlist.segment import FetchEntry, Segment
from webdb import Status

pytestmark = pytest.mark.skipif(not all(map(loopback_ok, CRAWL_HOSTS)), reason="needs 127.0.0.x addresses")

WEBDB = [sys.executable, "-m", "webdb.cli.main"]
LOOPBACK = ["--crawl-set", "allow_private_addresses=true"]  # our test sites are on 127.0.0.x


def _db_graph(path: str) -> tuple[dict[str, webdb.Page], set[tuple[str, str, str]]]:
    with webdb.open(path).reader() as r:
        r.check()
        pages = {p.url: p for p in r.pages()}
        by_md5: dict[bytes, list[str]] = {}
        for p in pages.values():
            by_md5.setdefault(p.md5, []).append(p.url)
        links = {(src, lk.url, lk.anchor) for lk in r.links() for src in by_md5[lk.from_id]}
    return pages, links


def test_four_rounds_equal_the_reachable_graph(tmp_path):
    with served(articles=500) as site:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("".join(u + "\n" for u in site.seeds))
        fetcher = Fetcher(
            politeness_delay=0.0, threads=8, max_host_errors=0, progress=False, allow_private_addresses=True
        )
        t0 = int(time.time())
        res = crawl(
            str(tmp_path / "db"),
            seeds=[str(seeds)],
            rounds=4,
            sections=2,
            fetcher=fetcher,
            create_settings={"sync": False},
        )
        t1 = int(time.time()) + 1
    assert len(site.outlinks) > 3000
    want_pages, want_links = site.expected(4)
    pages, links = _db_graph(str(tmp_path / "db"))
    assert {u: p.status for u, p in pages.items()} == want_pages
    assert links == want_links
    # the frontier after 4 rounds: pages at depth 4, due, never fetched; deeper pages absent
    depth = site.depths()
    assert {u for u, p in pages.items() if p.status == Status.UNFETCHED} == {u for u, d in depth.items() if d == 4}
    assert any(d > 4 for d in depth.values())
    for u, p in pages.items():
        if p.status == Status.RETRY:
            assert p.retries == 1 and t0 + webdb.DAY <= p.next_fetch <= t1 + webdb.DAY
        elif p.status == Status.GONE:
            assert p.next_fetch == webdb.NEVER
        elif p.status in (Status.REDIRECT_PERM, Status.REDIRECT_TEMP):
            assert p.meta["redirect"] == site.redirects[u][1]
        elif p.status == Status.FETCHED:
            assert t0 <= p.fetch_time <= t1 and p.next_fetch == p.fetch_time + 30 * webdb.DAY
            assert p.num_outlinks == len(site.outlinks[u])
        if p.status != Status.UNFETCHED:
            assert p.meta.get("gen", "") == ""  # the generate mark was cleared by the update
    # per-round summaries: round r generated the pages first seen in round r-1
    by_depth = [sum(1 for d in depth.values() if d == r) for r in range(5)]
    assert [rs.generated for rs in res.rounds] == by_depth[:4]
    assert [rs.new_urls for rs in res.rounds] == by_depth[1:5]
    last = res.rounds[-1]
    assert (last.pages, last.links) == (len(want_pages), len(want_links))
    assert sum(rs.fetched + rs.redirects + rs.failed for rs in res.rounds) == sum(
        1 for s in want_pages.values() if s != Status.UNFETCHED
    )
    assert all(set(rs.seconds) == {"generate", "fetch", "update"} for rs in res.rounds)


def test_crawl_command_with_top_n_and_host_cap(tmp_path):
    with served(hosts=CRAWL_HOSTS[:3], articles=40, seed=5) as site:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("".join(u + "\n" for u in site.seeds))
        out = subprocess.run(
            [
                *WEBDB,
                "crawl",
                str(tmp_path / "db"),
                "--seeds",
                str(seeds),
                "--rounds",
                "3",
                "--top-n",
                "20",
                "--max-per-host",
                "8",
                "--fetchers",
                "2",
                "--delay",
                "0",
                "--sections",
                "2",
                *LOOPBACK,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:3]] == ["round 1", "round 2", "round 3"]
    assert "generated 3," in lines[0] and "generated 20," in lines[1]  # 3 hosts x 8 > 20: top-N binds
    assert "injected 3 new of 3 seed URLs; 3 round(s)" in lines[3] and f"segments in {tmp_path}/db.segments" in lines[3]
    segs = sorted(os.listdir(tmp_path / "db.segments"))
    assert len(segs) == 3
    for name in segs:
        entries = list(Segment.open(tmp_path / "db.segments" / name).fetchlist())
        assert len(entries) <= 20
        per_host: dict[str, int] = {}
        for e in entries:
            h = e.url.split("/")[2]
            per_host[h] = per_host.get(h, 0) + 1
        assert max(per_host.values()) <= 8


def test_crawl_command_bad_input(tmp_path):
    out = subprocess.run(
        [*WEBDB, "crawl", str(tmp_path / "db"), "--seeds", str(tmp_path / "nope.txt")], capture_output=True, text=True
    )
    assert out.returncode == 2 and "nope.txt: no such seed file" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "db").exists()


@pytest.fixture
def slow_site():
    hosts = CRAWL_HOSTS[:2]
    with SiteServer(hosts) as server:
        for h in hosts:
            server.routes[h]["/robots.txt"] = Resource(404, b"")
            for i in range(12):
                server.routes[h][f"/p{i}.html"] = Resource(
                    200, f"<html><body>page {i} of {h}</body></html>".encode(), delay=0.15
                )
        yield server


def _segment(path, server, parts: int) -> Segment:
    seg = Segment.create(path)
    urls = [server.base(h) + f"/p{i}.html" for h in server.hosts for i in range(12)]
    for p in range(parts):
        seg.write_fetchlist(p, [FetchEntry(u) for j, u in enumerate(urls) if j // 12 == p % len(server.hosts)])
    return seg


def test_fetch_command_parts_and_resume(tmp_path, slow_site):
    seg = _segment(tmp_path / "seg", slow_site, 2)
    out = subprocess.run(
        [*WEBDB, "fetch", seg.path, *LOOPBACK, "--part", "1", "--delay", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [r.url for r in seg.fetch_records(0)] == [] and len(list(seg.fetch_records(1))) == 12
    out = subprocess.run(
        [*WEBDB, "fetch", seg.path, *LOOPBACK, "--delay", "0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "fetched 12 of 12 URLs (12 done before)" in out.stdout and "status fetched 12" in out.stdout
    assert len(list(seg.fetch_records())) == 24 and seg.check()["fetched"] == 24
    out = subprocess.run([*WEBDB, "fetch", seg.path, *LOOPBACK, "--part", "7"], capture_output=True, text=True)
    assert out.returncode == 2 and "no partition 7" in out.stderr
    out = subprocess.run([*WEBDB, "fetch", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2 and f"{tmp_path}: not a segment" in out.stderr and "Traceback" not in out.stderr


def test_fetch_command_ctrl_c_saves_and_resumes(tmp_path, slow_site):
    seg = _segment(tmp_path / "seg", slow_site, 1)
    fetch_file = os.path.join(seg.path, "fetch", "part-00000.jsonl")
    proc = subprocess.Popen(
        [*WEBDB, "fetch", seg.path, *LOOPBACK, "--threads", "1", "--delay", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,  # Ctrl-C must reach it even if the suite runs in the background
    )

    def three_saved() -> bool:
        assert proc.poll() is None, proc.communicate()
        return os.path.exists(fetch_file) and open(fetch_file).read().count("\n") >= 3

    wait_until(three_saved, 60, f"3 fetch records in {fetch_file}")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    saved = [r.url for r in seg.fetch_records(0)]
    assert 3 <= len(saved) < 12
    assert "interrupted: what was fetched is saved" in out and "Traceback" not in err
    out = subprocess.run(
        [*WEBDB, "fetch", seg.path, *LOOPBACK, "--delay", "0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    urls = [r.url for r in seg.fetch_records(0)]
    assert urls[: len(saved)] == saved and len(urls) == len(set(urls)) == 12


def test_fetch_parts_routes_each_record_to_its_partition(tmp_path, slow_site):
    seg = _segment(tmp_path / "seg", slow_site, 2)
    stats = fetch_parts(seg, Fetcher(politeness_delay=0.0, threads=4, progress=False, allow_private_addresses=True))
    assert stats.records == 24
    for p in (0, 1):
        assert {r.url for r in seg.fetch_records(p)} == {e.url for e in seg.fetchlist(p)}


def test_operations_doc_crawling_steps_run(tmp_path):
    """The step-by-step commands of docs/operations.md, *Crawling*, run as written."""
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "operations.md")
    text = open(docs, encoding="utf-8").read()
    section = text[text.index("## Crawling") :]
    block = section.split("```")[3]  # the second code block
    commands = [ln.split("#")[0].strip() for ln in block.strip().splitlines()]
    assert [c.split()[:2] for c in commands] == [
        ["webdb", "inject"],
        ["webdb", "generate"],
        ["webdb", "fetch"],
        ["webdb", "update"],
    ]
    with served(hosts=CRAWL_HOSTS[:2], articles=10, seed=2) as site:
        (tmp_path / "seeds.txt").write_text("".join(u + "\n" for u in site.seeds))
        for c in commands:
            # the doc crawls the open web; our site is on loopback, which the address policy refuses
            args = [*c.split()[1:], *(LOOPBACK if c.split()[1] == "fetch" else ())]
            out = subprocess.run([*WEBDB, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120)
            assert out.returncode == 0, (c, out.stderr)
    pages, links = _db_graph(str(tmp_path / "crawl.db"))
    want_pages, want_links = site.expected(1)
    assert {u: p.status for u, p in pages.items()} == want_pages and links == want_links


class _InterruptedFetcher(Fetcher):
    """Fetches half of the entries, then acts as if Ctrl-C was pressed."""

    def fetch(self, entries, sink):
        entries = list(entries)
        super().fetch(entries[: len(entries) // 2], sink)
        raise KeyboardInterrupt


def test_ctrl_c_in_a_crawl_keeps_what_was_fetched(tmp_path):
    with served(hosts=CRAWL_HOSTS[:2], articles=10, seed=2) as site:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("".join(u + "\n" for u in site.seeds))
        crawl(
            str(tmp_path / "db"),
            seeds=[str(seeds)],
            rounds=1,
            fetcher=Fetcher(politeness_delay=0.0, allow_private_addresses=True),
        )
        with pytest.raises(KeyboardInterrupt):
            crawl(
                str(tmp_path / "db"),
                rounds=1,
                fetcher=_InterruptedFetcher(politeness_delay=0.0, threads=1, allow_private_addresses=True),
            )
    first, seg = sorted(os.listdir(tmp_path / "db.segments"))
    fetched = {r.url for r in Segment.open(tmp_path / "db.segments" / seg).fetch_records()}
    listed = {e.url for e in Segment.open(tmp_path / "db.segments" / seg).fetchlist()}
    assert fetched and fetched < listed
    pages, _ = _db_graph(str(tmp_path / "db"))
    for u in listed:
        assert (pages[u].status != Status.UNFETCHED) == (u in fetched)
        assert (pages[u].meta["gen"] == "") == (u in fetched)  # the rest stays marked until it expires
