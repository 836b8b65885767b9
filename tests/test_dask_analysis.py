"""``prefixes``, ``dedup`` and ``rank`` with --dask (webdb.analysis.onrack, docs/analysis.md *On a rack
or a Dask cluster*): each section read by a task on its own worker, combined on the
coordinator, gives what the one-process command gives on the same data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dbutil import batch_a, batch_b, md5, snapshot
from rackutil import apply_local, committed, gather, split
from test_dask import REPLAY, SETTINGS, rack_of
from test_engine import recorded

import webdb
from webdb import Page, Status
from webdb.analysis.dedup import dedup
from webdb.analysis.onrack import dedup_rack, prefix_stats_rack, rank_rack
from webdb.analysis.prefixes import prefix_stats
from webdb.analysis.rank import rank
from webdb.writer.driver import update_dask
from webdb.writer.rack import UpdateFailed

pytest.importorskip("distributed")


def with_dups(w) -> None:
    """Fetched pages sharing 12 contents over 5 hosts (scores decide the keeper), some unfetched."""
    for i in range(90):
        u = f"http://h{i % 5}.example/{'x' * (i % 3)}{i}"
        if i % 7 == 0:
            w.add_page_with_score(Page(u, score=float(i % 4)))
        else:
            w.add_page_with_score(Page(u, md5(f"c{i % 12}"), Status.FETCHED, score=float(i % 4)))


def both(tmp: Path, k: int, cluster, batches) -> tuple[webdb.WebDB, object, list[Path]]:
    """The same calls into a local k-section db and into a k-location rack (through Dask)."""
    local = webdb.create(str(tmp / "w" / "crawl"), sections=k, **SETTINGS)
    rack, roots = rack_of(tmp / "d", k)
    for tag, batch in batches:
        calls = recorded(batch)
        apply_local(local, calls)
        assert update_dask(rack, cluster.scheduler_address, split(calls, [tmp] * k, tag), input_fn=REPLAY).committed
    return local, rack, roots


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webdb.cli.main", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_prefixes_on_dask_same_as_local(cluster, k: int, tmp_path: Path) -> None:
    local, rack, roots = both(tmp_path, k, cluster, [("a", batch_a), ("b", batch_b)])
    for depth, min_count in ((1, 1), (2, 1), (3, 4)):
        with local.reader() as r:
            want = list(prefix_stats(r, depth, min_count))
        assert prefix_stats_rack(rack, depth, min_count, dask=cluster.scheduler_address) == want
    assert any(s.prefix == "http://h0.example/" and s.known > 40 for s in want)  # spans sections when k > 1
    with local.reader() as r:
        assert prefix_stats_rack(rack, 2) == list(prefix_stats(r, 2))  # the agents' transport too
    assert [committed(r) for r in roots] == [2] * k  # read only: nothing committed
    if k == 2:
        p = cli("prefixes", "crawl", "--hosts", str(tmp_path / "d" / "hosts.ini"), "--dask",
                cluster.scheduler_address, "--depth", "2", "--json")  # fmt: skip
        assert p.returncode == 0, p.stderr
        with local.reader() as r:
            assert [json.loads(x) for x in p.stdout.splitlines()] == [
                {"domain": s.domain, "prefix": s.prefix, "unfetched": s.unfetched, "fetched": s.fetched, "fit": s.fit}
                for s in prefix_stats(r, 2, 1)
            ]
        # --dask without --hosts: every section in the db directory given (Rack.local)
        q = cli(
            "prefixes", str(tmp_path / "w" / "crawl"), "--dask", cluster.scheduler_address, "--depth", "2", "--json"
        )
        assert q.returncode == 0 and q.stdout == p.stdout, q.stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize("k", [1, 3])
def test_dedup_on_dask_same_as_local(cluster, k: int, tmp_path: Path) -> None:
    local, rack, roots = both(tmp_path, k, cluster, [("a", with_dups)])
    seen_local, seen_rack = [], []
    counts = dedup(local, dry_run=True, on_change=lambda c: seen_local.append((c.page.url, c.status, c.keeper)))
    got = dedup_rack(
        rack, True, lambda c: seen_rack.append((c.page.url, c.status, c.keeper)), dask=cluster.scheduler_address
    )
    assert got == counts and counts["duplicate"] > 30
    assert seen_rack == seen_local
    assert dedup_rack(rack, True) == counts  # the agents' transport too
    assert [committed(r) for r in roots] == [1] * k  # a dry run commits nothing
    assert dedup_rack(rack, dask=cluster.scheduler_address) == dedup(local) == counts
    db = gather(roots)
    assert snapshot(db) == snapshot(local)
    with db.reader() as r:
        r.check()
    assert [committed(r) for r in roots] == [2] * k  # one batch
    assert dedup_rack(rack, dask=cluster.scheduler_address) == {"duplicate": 0, "restored": 0}
    assert [committed(r) for r in roots] == [2] * k  # nothing to change: nothing committed
    p = cli("dedup", "crawl", "--hosts", str(tmp_path / "d" / "hosts.ini"), "--dask", cluster.scheduler_address)
    assert p.returncode == 0 and "marked 0 duplicate(s)" in p.stdout, p.stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize("k", [1, 3])
def test_rank_on_dask_same_as_local(cluster, k: int, tmp_path: Path) -> None:
    local, rack, roots = both(tmp_path, k, cluster, [("a", batch_a), ("b", batch_b)])
    want = rank(local, 2, 0.85)
    got = rank_rack(rack, 2, 0.85, dask=cluster.scheduler_address)
    assert [(x["pages"], x["links"]) for x in got] == [(x["pages"], x["links"]) for x in want]
    assert [x["delta"] for x in got] == pytest.approx([x["delta"] for x in want], rel=1e-12)
    assert [committed(r) for r in roots] == [4] * k  # one batch per iteration
    db = gather(roots)
    assert snapshot(db) == snapshot(local)  # the same scores, bit for bit
    with db.reader() as r:
        r.check()
        assert len({p.score for p in r.pages()}) > 10
    if k == 3:
        assert [x["pages"] for x in rank_rack(rack, 1, 0.85)] == [x["pages"] for x in rank(local, 1, 0.85)]
        assert snapshot(gather(roots)) == snapshot(local)  # the agents' transport too
        p = cli("rank", "crawl", "--hosts", str(tmp_path / "d" / "hosts.ini"), "--dask",
                cluster.scheduler_address, "--iterations", "1", "--json")  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert [x["pages"] for x in json.loads(p.stdout)] == [want[0]["pages"]]
        rank(local, 1, 0.85)
        assert snapshot(gather(roots)) == snapshot(local)


@pytest.mark.timeout(300)
def test_refused_and_unreachable(cluster, tmp_path: Path) -> None:
    rack, roots = rack_of(tmp_path / "four", 4)  # the cluster's workers declare section-0..2 only
    ini4 = str(tmp_path / "four" / "hosts.ini")
    for cmd in ("prefixes", "dedup", "rank"):
        p = cli(cmd, "crawl", "--hosts", ini4, "--dask", cluster.scheduler_address)
        assert p.returncode == 2 and "section-3" in p.stderr and "Traceback" not in p.stderr, p.stderr
        p = cli(cmd, "crawl", "--hosts", ini4, "--dask", "tcp://127.0.0.1:9")
        assert p.returncode == 2 and "tcp://127.0.0.1:9" in p.stderr and "Traceback" not in p.stderr, p.stderr
    _, rack2, roots2 = both(tmp_path / "two", 2, cluster, [("a", with_dups)])
    (roots2[1] / "crawl" / "section-0001").rename(roots2[1] / "crawl" / "moved")  # a worker without its section
    for run in (lambda: prefix_stats_rack(rack2, dask=cluster.scheduler_address),
                lambda: dedup_rack(rack2, dask=cluster.scheduler_address),
                lambda: rank_rack(rack2, 1, dask=cluster.scheduler_address)):  # fmt: skip
        with pytest.raises(UpdateFailed) as e:
            run()
        assert "section 1" in str(e.value) and "section-0001" in str(e.value) and e.value.kind == "BadInput"
    assert [committed(r) for r in roots2] == [1, 1]


def with_canonicals(w) -> None:
    """``with_dups``' contents, all fetched, where a third of the pages name a page of their
    content with a longer URL (on another host) canonical: plain dedup keeps the shortest URL
    (the scores of one content are equal), ``dedup --canonical`` the named page."""
    for i in range(90):
        u = f"http://h{i % 5}.example/{'x' * (i % 3)}{i}"
        named = _named(i % 12)
        meta = {"canonical": named} if i % 3 == 1 and u != named else {}
        w.add_page_with_score(Page(u, md5(f"c{i % 12}"), Status.FETCHED, score=float(i % 4), meta=meta))


def _named(j: int) -> str:
    return f"http://h{(j + 72) % 5}.example/{'x' * (j % 3)}{j + 72}"


@pytest.mark.timeout(600)
def test_dedup_canonical_on_dask_same_as_local(cluster, tmp_path: Path) -> None:
    local, rack, roots = both(tmp_path, 2, cluster, [("a", with_canonicals)])
    for scope in ("global", "host"):
        seen_local: list = []
        seen_rack: list = []
        plain: list = []
        counts = dedup(local, True, lambda c, seen=seen_local: seen.append((c.page.url, c.keeper)), scope, True)
        got = dedup_rack(
            rack,
            True,
            lambda c, seen=seen_rack: seen.append((c.page.url, c.keeper)),
            scope,
            canonical=True,
            dask=cluster.scheduler_address,
        )
        assert got == counts and seen_rack == seen_local and counts["duplicate"] > 20
        dedup(local, True, lambda c, seen=plain: seen.append((c.page.url, c.keeper)), scope)
        assert plain != seen_local  # the canonical pages are kept instead of the shortest URLs
        named = {_named(j) for j in range(12) if j % 3 == 1}
        assert named <= {k for _, k in seen_local} and not named & {k for _, k in plain}
