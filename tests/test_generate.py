"""Generate: eligibility, top-N and per-host/per-domain caps (against a brute-force greedy
selection), partitions, interleaving, inlink anchors, generate marks and their expiry, and
non-overlap of concurrent generates (two processes at once)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest

import webdb
from fetchlist.generate import MARK, generate, host_key, order_key, partition_of
from fetchlist.normalize import registered_domain
from fetchlist.segment import FetchRecord, Segment
from fetchlist.update import apply_segments
from webdb import DAY, NEVER, Link, Page, Status
from webdb.errors import BadInput

WEBDB = [sys.executable, "-m", "webdb.cli.main"]
NOW = 1_700_000_000


def _pages(n: int, hosts: int = 20, seed: int = 1) -> list[Page]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        h = i % hosts
        host = f"h{h}.d{h % 5}.com" if h % 7 else f"www.d{h % 5}.org"
        nf = rnd.choice([0, NOW - DAY, NOW, NOW + DAY // 2, NOW + 3 * DAY, NEVER])
        score = rnd.choice([0.5, 1.0, 1.0, 1.5, 2.0, 3.0]) + (i % 3) * 0.01
        status = Status.GONE if nf == NEVER else Status.UNFETCHED
        out.append(Page(f"http://{host}/p/{i}.html", status=status, next_fetch=nf, score=score, next_score=score))
    return out


def _db(path, pages: list[Page], sections: int = 2):
    db = webdb.create(str(path), sections=sections, sync=False)
    with db.writer() as w:
        for p in pages:
            w.add_page_with_score(p)
    return db


def _greedy(pages, *, now=NOW, top_n=None, max_per_host=None, max_per_domain=None, min_score=None, add_days=0):
    el = [p for p in pages if p.next_fetch <= now + add_days * DAY and (min_score is None or p.score >= min_score)]
    el.sort(key=lambda p: order_key(p.score, p.url), reverse=True)
    hosts: dict[str, int] = {}
    doms: dict[str, int] = {}
    out = []
    for p in el:
        if top_n is not None and len(out) >= top_n:
            break
        h = host_key(p.url)
        d = registered_domain(h)
        if (max_per_host is not None and hosts.get(h, 0) >= max_per_host) or (
            max_per_domain is not None and doms.get(d, 0) >= max_per_domain
        ):
            continue
        hosts[h] = hosts.get(h, 0) + 1
        doms[d] = doms.get(d, 0) + 1
        out.append(p.url)
    return out


def _urls(seg_dir) -> list[str]:
    return [e.url for e in Segment.open(seg_dir).fetchlist()]


@pytest.fixture(scope="module")
def pages():
    return _pages(3000)


@pytest.fixture(scope="module")
def db(tmp_path_factory, pages):
    return _db(tmp_path_factory.mktemp("gen") / "db", pages)


@pytest.mark.parametrize(
    "opts",
    [
        {},
        {"top_n": 100},
        {"max_per_host": 7},
        {"max_per_domain": 15},
        {"top_n": 60, "max_per_host": 5},
        {"top_n": 80, "max_per_domain": 20},
        {"top_n": 90, "max_per_host": 4, "max_per_domain": 9},
        {"max_per_host": 30, "max_per_domain": 50},
        {"min_score": 1.5, "top_n": 500},
        {"add_days": 1},
        {"add_days": 5, "top_n": 2000},
    ],
)
@pytest.mark.parametrize("due_index", [True, False], ids=["index", "scan"])
def test_selection_is_the_greedy_by_score_under_the_caps(tmp_path, db, pages, opts, due_index):
    # mark_expiry=0: the marks of one generate do not hide pages from the next
    res = generate(db, tmp_path / "seg", now=NOW, mark_expiry=0, due_index=due_index, **opts)
    want = _greedy(pages, **opts)
    got = _urls(tmp_path / "seg")
    assert sorted(got) == sorted(want) and res.selected == len(want)
    assert res.via == ("index" if due_index else "scan")
    eligible = len(_greedy(pages, **{k: v for k, v in opts.items() if k in ("min_score", "add_days")}))
    if due_index:  # the index is read in selection order: as far as the selection needs
        assert res.selected <= res.eligible <= eligible and res.scanned < len(pages)
    else:  # the scan reads every page
        assert res.scanned == len(pages) and res.eligible == eligible
    assert res.skipped["capped"] == res.eligible - res.selected
    with db.reader() as r:
        assert all(r.get_page(u).meta[MARK] == f"seg@{NOW}" for u in got)


def test_rack_options_given_with_a_db_are_refused(tmp_path, db):
    """One entry for a db and a rack: what only a rack does is refused for a db, naming it,
    before anything is written or locked."""
    with pytest.raises(BadInput, match=r"heartbeat_timeout, dask apply to a rack only"):
        generate(db, tmp_path / "seg", now=NOW, heartbeat_timeout=5, dask="tcp://127.0.0.1:1")
    assert not (tmp_path / "seg").exists()
    with pytest.raises(TypeError, match="no_such_option"):
        generate(db, tmp_path / "seg", now=NOW, no_such_option=1)


def test_partitions_by_host_and_interleaving(tmp_path, db, pages):
    res = generate(db, tmp_path / "seg", now=NOW, mark_expiry=0, fetchers=3, max_per_host=40)
    seg = Segment.open(tmp_path / "seg")
    assert seg.parts() == [0, 1, 2] and sum(res.parts) == res.selected
    score = {p.url: p.score for p in pages}
    part_of_host: dict[str, int] = {}
    for part in range(3):
        entries = list(seg.fetchlist(part))
        assert len(entries) == res.parts[part]
        hosts = [host_key(e.url) for e in entries]
        for e, h in zip(entries, hosts):
            assert partition_of(e.url, 3) == part and part_of_host.setdefault(h, part) == part
        k = len(set(hosts))
        assert len(set(hosts[:k])) == k  # every host's best comes before any host's second
        for h in set(hosts):  # within a host, best first
            keys = [order_key(score[e.url], e.url) for e in entries if host_key(e.url) == h]
            assert keys == sorted(keys, reverse=True)
    assert len(part_of_host) == res.hosts and len(set(part_of_host.values())) == 3
    by_domain = generate(db, tmp_path / "seg2", now=NOW, mark_expiry=0, fetchers=2, partition="domain")
    assert by_domain.selected == res.eligible
    seg2 = Segment.open(tmp_path / "seg2")
    for part in (0, 1):
        assert {partition_of(e.url, 2, "domain") for e in seg2.fetchlist(part)} <= {part}


def test_entries_carry_the_page_and_one_anchor_per_source_domain(tmp_path):
    db = webdb.create(str(tmp_path / "db"), sync=False)
    target = "http://t.example.com/x"
    with db.writer() as w:
        w.add_page(Page(target, score=2.0, meta={"lang": "en"}))
        for i, (host, anchor) in enumerate(
            [
                ("a.com", "Alpha"),
                ("a.com", "Alpha two"),
                ("b.org", "Beta"),
                ("c.net", "Alpha"),
                ("d.net", ""),
                ("e.net", "Echo"),
            ]
        ):
            src = f"http://{host}/{i}"
            md5 = bytes([i + 1]) * 16
            w.add_page(Page(src, md5=md5, status=Status.FETCHED, next_fetch=NOW + 10 * DAY))
            w.add_link(Link(md5, target, anchor, webdb.domain_id(host)))
    generate(db, tmp_path / "seg", now=NOW, max_anchors=10)
    (e,) = list(Segment.open(tmp_path / "seg").fetchlist())
    assert e.url == target and e.page.score == 2.0 and e.page.meta["lang"] == "en"
    assert e.page.meta[MARK] == f"seg@{NOW}"  # the page as stored once the mark committed
    assert e.anchors in (["Alpha", "Beta", "Echo"], ["Alpha two", "Beta", "Echo"])  # a.com once; c.net's repeats
    db2 = webdb.create(str(tmp_path / "db2"), sync=False)
    with db2.writer() as w:
        w.add_page(Page(target))
        for i in range(30):
            md5 = bytes([i + 1]) * 16
            w.add_page(Page(f"http://s{i}.com/", md5=md5, status=Status.FETCHED, next_fetch=NOW + DAY))
            w.add_link(Link(md5, target, f"anchor {i}", webdb.domain_id(f"s{i}.com")))
    generate(db2, tmp_path / "seg2", now=NOW, max_anchors=4)
    assert len(next(Segment.open(tmp_path / "seg2").fetchlist()).anchors) == 4


def test_marks_hide_pages_until_updated_or_expired(tmp_path, pages):
    db = _db(tmp_path / "db", pages[:600])
    a = generate(db, tmp_path / "a", now=NOW, top_n=50)
    b = generate(db, tmp_path / "b", now=NOW + 60, top_n=1000)
    ua, ub = set(_urls(tmp_path / "a")), set(_urls(tmp_path / "b"))
    assert a.selected == 50 and len(ua) == 50 and not ua & ub and b.eligible == len(_greedy(pages[:600])) - 50
    assert b.skipped["marked"] == 50
    # nothing left until the marks expire; then all of them come back
    assert generate(db, tmp_path / "c", now=NOW + 120).segment is None and not os.path.exists(tmp_path / "c")
    d = generate(db, tmp_path / "d", now=NOW + 7 * DAY + 60)
    assert set(_urls(tmp_path / "d")) >= ua
    # an update clears the mark of what came back; the rest stays marked
    seg = Segment.open(tmp_path / "a")
    fetched = sorted(ua)[:20]
    with seg.writer(0) as sw:
        for u in fetched:
            sw.write(FetchRecord(u, Status.RETRY, NOW + 30, error="test"))
    with db.writer() as w:
        counts = apply_segments(w, [tmp_path / "a"])
    assert counts["retry"] == 20
    with db.reader() as r:
        for u in ua:
            p = r.get_page(u)
            if u in fetched:
                assert p.meta[MARK] == "" and p.status == Status.RETRY and p.next_fetch == NOW + 30 + DAY
            else:
                assert p.meta[MARK] == f"d@{NOW + 7 * DAY + 60}"
    assert generate(db, tmp_path / "e", now=NOW + 2 * DAY).selected == len(fetched)
    assert set(_urls(tmp_path / "e")) == set(fetched)  # due again (retry delay), unmarked; d's still out
    assert d.selected


def test_concurrent_generates_never_hand_out_the_same_url(tmp_path):
    db = _db(tmp_path / "db", _pages(30000, hosts=300, seed=9), sections=2)
    with db.reader() as r:
        due = sum(1 for p in r.pages() if p.next_fetch <= time.time())
    procs = [
        subprocess.Popen(
            [
                *WEBDB,
                "generate",
                db.path,
                str(tmp_path / "segs"),
                "--segment",
                name,
                "--top-n",
                "4000",
                "--max-per-host",
                "30",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("one", "two", "three")
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    lists = [_urls(tmp_path / "segs" / name) for name in ("one", "two", "three")]
    everything = [u for lst in lists for u in lst]
    assert len(everything) == len(set(everything))  # disjoint
    assert all(len(lst) == 4000 for lst in lists) and len(everything) <= due
    with db.reader() as r:
        marks = {p.url: p.meta.get(MARK, "") for p in r.pages()}
    for name, lst in zip(("one", "two", "three"), lists):
        assert all(marks[u].startswith(f"{name}@") for u in lst)


def test_a_held_writer_lock_makes_generate_wait_then_fail_clearly(tmp_path, pages):
    db = _db(tmp_path / "db", pages[:100], sections=1)
    w = db.writer()
    try:
        out = subprocess.run(
            [*WEBDB, "generate", db.path, str(tmp_path / "segs"), "--lock-wait", "0.5"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2 and "generate waited 0.5s for the writer lock" in out.stderr
        assert f"pid {os.getpid()}" in out.stderr and "Traceback" not in out.stderr
    finally:
        w.abort()
    assert os.listdir(tmp_path / "segs") == []


def test_generate_command(tmp_path, pages):
    db = _db(tmp_path / "db", pages[:200], sections=1)
    out = subprocess.run(
        [*WEBDB, "generate", db.path, str(tmp_path / "segs"), "--top-n", "10", "--fetchers", "2"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    seg = out.stdout.splitlines()[-1]
    assert out.stdout.startswith("generated 10 URLs from ") and os.path.dirname(seg) == str(tmp_path / "segs")
    assert len(_urls(seg)) == 10 and Segment.open(seg).info["urls"] == 10
    out = subprocess.run(
        [*WEBDB, "generate", db.path, str(tmp_path / "segs"), "--min-score", "100"], capture_output=True, text=True
    )
    assert out.returncode == 1 and out.stdout.startswith("nothing to generate") and "low_score" in out.stdout
    os.makedirs(tmp_path / "segs" / "taken")
    open(tmp_path / "segs" / "taken" / "x", "w").close()
    for args, msg in [
        (["--segment", "taken"], "taken: exists and is not an empty directory"),
        (["--top-n", "0"], "argument --top-n: expected a whole number >= 1"),
        (["--filter", str(tmp_path / "nofilter.txt")], "nofilter.txt: cannot read filter file"),
    ]:
        out = subprocess.run(
            [*WEBDB, "generate", db.path, str(tmp_path / "segs"), *args], capture_output=True, text=True
        )
        assert out.returncode == 2 and msg in out.stderr and "Traceback" not in out.stderr, out.stderr
    out = subprocess.run([*WEBDB, "generate", str(tmp_path), str(tmp_path / "segs")], capture_output=True, text=True)
    assert out.returncode == 2 and "not a webdb database" in out.stderr


def test_url_filter_applies_at_generate(tmp_path, pages):
    from fetchlist.filters import UrlFilter

    db = _db(tmp_path / "db", pages[:300], sections=1)
    rules = tmp_path / "regex-urlfilter.txt"
    rules.write_text("-^http://h1\\.\n+.\n")
    res = generate(db, tmp_path / "seg", now=NOW, url_filter=UrlFilter.from_files([rules]))
    got = _urls(tmp_path / "seg")
    assert got and not any(u.startswith("http://h1.") for u in got)
    assert res.skipped["filtered"] == len(
        [p for p in pages[:300] if p.url.startswith("http://h1.") and p.next_fetch <= NOW]
    )
