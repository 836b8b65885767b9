"""The due index: generate through it equals generate by a full scan, on random dbs.

A hypothesis test draws rounds of a crawl db's life at k = 1..3 sections with small blocks
(so the index spans many blocks and buckets): pages added with tied and extreme scores and
due times in the past, the near future and never; fetches, retries and deletions; generates
that mark pages; rank iterations that rewrite every score; rebalances to another k; delta runs
merged into the base (``level_runs`` 1).  After every round ``check`` (which compares every
section's index with its PagesByURL) passes, and the selection read from the index equals the
scan's for several option sets — the same pages, in the same order, with the same values.  At
the end a real generate through each path, on two copies of the db, writes the same
fetchlists.  Also: a damaged index is reported by ``webdb check``; a db without an index is
scanned and says so; ``rebalance`` gives an older db its index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from dbutil import commit_next
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webdb
from fetchlist.generate import choose, generate
from fetchlist.segment import Segment
from webdb import DAY, NEVER, FetchResult, Link, Page, Status
from webdb.analysis.rank import rank
from webdb.tables.pagecodec import due_order, due_record
from webdb.tools.rebalance import rebalance

NOW = 1_700_000_000
HOSTS = ["a.com", "b.a.com", "c.org", "d.net", "\u65e5\u672c.jp"]
URLS = [f"http://{h}/{p}" for h in HOSTS for p in ("", "x", "x/y", "z?q=1", "\u00e9t\u00e9")]
SCORES = [0.0, -0.0, 0.5, 1.0, 1.0, 2.5, 1e300, -3.0]
DUES = [0, NOW - 3 * DAY, NOW - 1, NOW, NOW + 1, NOW + DAY // 2, NOW + 2 * DAY, NEVER]
OPTIONS = [
    {},
    {"top_n": 3},
    {"top_n": 7, "max_per_host": 2},
    {"top_n": 9, "max_per_domain": 3},
    {"top_n": 5, "max_per_host": 1, "max_per_domain": 2},
    {"min_score": 0.75, "top_n": 6},
    {"add_days": 1, "top_n": 8, "max_per_host": 3},
    {"add_days": 3},
    {"add_days": 1e14, "top_n": 40},  # past NEVER: the last bucket too
]


def md5(i: int) -> bytes:
    return bytes([i + 1]) * 16


page_op = st.tuples(
    st.sampled_from(["add", "add_score", "ifn", "delete"]),
    st.sampled_from(URLS),
    st.sampled_from(SCORES),
    st.sampled_from(DUES),
)
fetch_op = st.tuples(
    st.sampled_from([Status.FETCHED, Status.RETRY, Status.GONE]),
    st.sampled_from(URLS),
    st.integers(0, 3),
    st.lists(st.sampled_from(URLS), max_size=4),
)
GENERATES = [dict(o) for o in OPTIONS[1:]] + [{"top_n": 6, "max_per_host": 2, "mark_expiry": 0}]
round_ = st.one_of(
    st.tuples(st.just("pages"), st.lists(page_op, min_size=1, max_size=12)),
    st.tuples(st.just("fetches"), st.lists(fetch_op, min_size=1, max_size=6)),
    # an update's fetch outcomes: the mark goes (fetchlist.update sets meta["gen"] = "")
    st.tuples(st.just("updates"), st.lists(fetch_op, min_size=1, max_size=6)),
    st.tuples(st.just("generate"), st.sampled_from(GENERATES)),
    # page edits and marks in one batch: the marks apply to the pages as the batch leaves them
    st.tuples(st.just("mixed"), st.tuples(st.lists(page_op, min_size=1, max_size=8), st.sets(st.sampled_from(URLS)))),
    st.tuples(st.just("rank"), st.just(None)),
    st.tuples(st.just("rebalance"), st.integers(1, 3)),
)


def _page_edits(w, ops) -> None:
    for op, url, score, due in ops:
        p = Page(url, score=score, next_score=score, next_fetch=due)
        if op == "add":
            w.add_page(p)
        elif op == "add_score":
            w.add_page_with_score(p)
        elif op == "ifn":
            w.add_page_if_not_present(p)
        else:
            w.delete_page(url)


def _fetches(w, ops, clear_mark: bool) -> None:
    for status, url, c, outs in ops:
        has = status == Status.FETCHED
        meta = {"gen": ""} if clear_mark else None
        w.apply_fetch(FetchResult(url, status, NOW - DAY, md5(c) if has else None, len(outs) if has else 0, meta))
        if has:
            w.add_outlinks(md5(c), [(o, f"to {o}") for o in outs])


def _mark_as_pages(db, marks: dict[str, str]) -> None:
    """The reference of a mark: the page rewritten with ``meta["gen"]`` (an add_page)."""
    with db.writer() as w, db.reader() as r:
        for url, mark in marks.items():
            p = r.get_page(url)
            p.meta["gen"] = mark
            w.add_page(p)


def _apply(db, ref, kind: str, arg, n: int, segs) -> None:
    """One round on ``db`` (marks in its mark tables) and on ``ref``, where a mark is an
    add_page of the marked page: the two must read the same after every round."""
    if kind == "pages":
        for d in (db, ref):
            with d.writer() as w:
                _page_edits(w, arg)
    elif kind in ("fetches", "updates"):
        for d in (db, ref):
            with d.writer() as w:
                _fetches(w, arg, kind == "updates")
    elif kind == "generate":
        opts = dict(arg)
        assert _selections(db, opts, True)[1] == _selections(ref, opts, False)[1]
        res = generate(db, segs / f"g{n}", now=NOW, **opts)
        if res.segment:
            _mark_as_pages(ref, {e.url: e.page.meta["gen"] for part in _fetchlists(res.segment) for e in part})
    elif kind == "mixed":
        ops, urls = arg
        with ref.writer() as w:
            _page_edits(w, ops)
        with ref.reader() as r:
            marks = {u: f"m{n}@{NOW}" for u in sorted(urls) if r.get_page(u) is not None}
        _mark_as_pages(ref, marks)
        with db.writer() as w:
            _page_edits(w, ops)
            for u, mark in marks.items():
                w.mark_generated(u, mark)
    elif kind == "rank":
        rank(db, 1)
        rank(ref, 1)
    else:
        rebalance(db, arg)
        rebalance(ref, arg)


def _selections(db, opts: dict, due_index: bool):
    with db.reader() as r:
        c = choose(
            r,
            now=NOW,
            horizon=NOW + int(opts.get("add_days", 0) * DAY),
            min_score=opts.get("min_score"),
            mark_expiry=opts.get("mark_expiry", 7 * DAY),
            url_filter=None,
            top_n=opts.get("top_n"),
            max_per_host=opts.get("max_per_host"),
            max_per_domain=opts.get("max_per_domain"),
            due_index=due_index,
        )
        return c.via, [(key, url) for key, url, _ in c.chosen]


def _fetchlists(seg_dir) -> list:
    seg = Segment.open(seg_dir)
    return [list(seg.fetchlist(p)) for p in seg.parts()]


def _entries(seg_dir) -> list:
    return [[(e.url, e.page, e.anchors) for e in part] for part in _fetchlists(seg_dir)]


def _same_pages(db, ref) -> None:
    """``db`` reads as ``ref`` through every reader of pages, and both pass check."""
    with db.reader() as ra, ref.reader() as rb:
        assert list(ra.pages()) == list(rb.pages())
        assert list(ra.items("pages_by_md5")) == list(rb.items("pages_by_md5"))
        assert [ra.get_page(u) for u in URLS] == [rb.get_page(u) for u in URLS]
        for p in rb.pages():
            assert list(ra.get_pages(p.md5)) == list(rb.get_pages(p.md5))
        assert ra.check()["due"] == ra.num_pages
        rb.check()


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(k=st.integers(1, 3), rounds=st.lists(round_, min_size=1, max_size=7))
def test_generate_through_the_index_equals_the_full_scan(tmp_path_factory, k, rounds):
    base = tmp_path_factory.mktemp("due")
    segs = base / "segs"
    db = webdb.create(str(base / "db"), sections=k, sync=False, block_size=256, level_runs=1, level_ratio=0.2)
    with db.writer() as w:
        for i, u in enumerate(URLS[::2]):
            w.add_page(Page(u, score=SCORES[i % len(SCORES)], next_fetch=DUES[i % len(DUES)]))
    shutil.copytree(base / "db", base / "ref")
    ref = webdb.open(str(base / "ref"))
    for n, (kind, arg) in enumerate(rounds):
        _apply(db, ref, kind, arg, n, segs)
        _same_pages(db, ref)
        for opts in OPTIONS + [{"top_n": 5, "mark_expiry": 0}]:
            via, got = _selections(db, opts, True)
            assert via == "index"
            assert got == _selections(db, opts, False)[1] == _selections(ref, opts, False)[1], (kind, opts)
    for via in ("index", "scan"):
        shutil.copytree(base / "db", base / via)
    a = generate(webdb.open(str(base / "index")), segs / "a" / "last", now=NOW, top_n=8, max_per_host=2, fetchers=2)
    b = generate(
        webdb.open(str(base / "scan")),
        segs / "b" / "last",
        now=NOW,
        top_n=8,
        max_per_host=2,
        fetchers=2,
        due_index=False,
    )
    assert (a.via, b.via) == ("index", "scan") and a.selected == b.selected
    if a.segment:
        assert _entries(a.segment) == _entries(b.segment)
        # the marks committed are the same too, and the same as marks written into the pages
        _mark_as_pages(ref, {e.url: e.page.meta["gen"] for part in _fetchlists(a.segment) for e in part})
        _same_pages(webdb.open(str(base / "index")), ref)
        _same_pages(webdb.open(str(base / "scan")), ref)


def test_index_records_sort_in_generate_order():
    """Within a bucket the key bytes order pages by score descending, then order_key's tie."""
    from fetchlist.generate import order_key

    recs = []
    for i, s in enumerate([3.0, -1.0, 0.0, -0.0, 2.0, 1e-300, -1e300, 2.0]):
        url = f"http://h{i}.com/".encode()
        k, _ = due_record(url, Page(url.decode(), score=s, next_fetch=NOW).encode_value())
        recs.append(k)
        assert due_order(k)[:2] == order_key(s, url) and due_order(k)[2] == url
    keys = [order_key(due_order(k)[0], due_order(k)[2]) for k in sorted(recs)]
    assert keys == sorted(keys, reverse=True)


def _db_with_pages(path, n: int = 400, k: int = 2):
    db = webdb.create(str(path), sections=k, sync=False, block_size=512)
    with db.writer() as w:
        for i in range(n):
            w.add_page(Page(f"http://h{i % 9}.com/{i}", score=i % 11, next_fetch=NOW - i))
    return db


def _check_cli(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "check", str(path)], capture_output=True, text=True, timeout=300
    )


def _rewrite_index(db, j: int, records) -> str:
    """Replace section j's due index file by one holding ``records`` (a damage that passes
    every CRC), fixing the manifest's recorded size; returns the file's path."""
    from webdb.tables.format import KIND_DUE

    m = db.manifest()
    e = m.tables[j]["pages_by_url"]["due"]
    path = os.path.join(db.section_dir(j), e["file"])
    info = _replace_file(path, KIND_DUE, records)
    e["bytes"], e["records"] = info["bytes"], info["records"]
    commit_next(db, m)
    return path


def _replace_file(path: str, kind: int, records) -> dict:
    """The table file at ``path`` replaced by one of ``kind`` holding ``records``; its close info."""
    from webdb.tables.table import TableWriter

    os.unlink(path)
    w = TableWriter(path, kind, 512, "lz4", sync=False)
    for k, v in records:
        w.add(k, v)
    return w.close()


@pytest.mark.parametrize("damage", ["stale", "missing", "extra"])
def test_check_reports_an_index_out_of_step_with_its_pages(tmp_path, damage):
    db = _db_with_pages(tmp_path / "db")
    with db.reader() as r:
        e = r.manifest.tables[0]["pages_by_url"]["due"]
        from webdb.tables.table import TableReader

        t = TableReader(os.path.join(db.section_dir(0), e["file"]))
        recs = list(t.items())
        t.close()
    victim = recs[len(recs) // 2]
    if damage == "stale":  # a page whose index record still has its old due time
        recs[len(recs) // 2] = (victim[0], b"\x00" * 8)
    elif damage == "missing":
        del recs[len(recs) // 2]
    else:
        recs.append((b"\x00\x00\x00\x00" + b"\x01" * 16 + b"http://ghost.com/", b"\x00" * 8))
        recs.sort()
    path = _rewrite_index(db, 0, recs)
    p = _check_cli(tmp_path / "db")
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert p.stdout.startswith("FAILED: ") and path in p.stdout and "due index" in p.stdout, p.stdout


def test_a_damaged_index_block_is_reported_by_check(tmp_path):
    db = _db_with_pages(tmp_path / "db")
    e = db.manifest().tables[1]["pages_by_url"]["due"]
    path = os.path.join(db.section_dir(1), e["file"])
    with open(path, "r+b") as f:
        f.seek(20)
        b = f.read(1)
        f.seek(20)
        f.write(bytes([b[0] ^ 0x55]))
    p = _check_cli(tmp_path / "db")
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert p.stdout.startswith("FAILED: ") and path in p.stdout, p.stdout


def test_a_db_without_an_index_is_scanned_until_rebalance_builds_it(tmp_path):
    db = _db_with_pages(tmp_path / "db")
    m = db.manifest()
    for tabs in m.tables:
        tabs["pages_by_url"].pop("due")  # as a db written before the index
    commit_next(db, m)
    said = []
    res = generate(db, tmp_path / "s1", now=NOW, top_n=20, max_per_host=3, progress=said.append)
    assert res.via == "scan" and res.scanned == 400
    assert sum("no due index" in s for s in said) == 1
    with db.writer() as w:  # a batch keeps it unindexed: stage 1 has no index to merge into
        w.add_page(Page("http://new.com/", score=50.0))
    assert all("due" not in t["pages_by_url"] for t in db.manifest().tables)
    with db.reader() as r:
        r.check()
    rebalance(db, 2)
    res2 = generate(db, tmp_path / "s2", now=NOW, top_n=20, max_per_host=3)
    assert res2.via == "index" and res2.scanned < 400
    assert [e.url for e in Segment.open(tmp_path / "s2").fetchlist()][0] == "http://new.com/"


def test_the_manifest_names_the_index_and_refuses_a_bad_one(tmp_path):
    db = _db_with_pages(tmp_path / "db", n=50, k=1)
    m = db.manifest()
    e = m.tables[0]["pages_by_url"]
    assert e["due"]["records"] == 50 and e["due"]["file"].endswith(".due")
    e["due"]["file"] = "../elsewhere.due"
    commit_next(db, m)
    with pytest.raises(webdb.CorruptionError, match=r"tables\[0\]\.pages_by_url\.due"):
        db.manifest()
    assert json.loads(json.dumps(e))  # plain JSON


def test_anchors_of_the_chosen_pages(tmp_path):
    """Through the index the entries carry the same anchors as through the scan."""
    db = webdb.create(str(tmp_path / "db"), sections=2, sync=False, block_size=256)
    with db.writer() as w:
        for i in range(40):
            w.add_page(Page(f"http://t{i % 4}.com/{i}", score=float(i % 5), next_fetch=NOW))
            src = f"http://s{i}.org/"
            w.add_page(Page(src, md5=md5(i), status=Status.FETCHED, next_fetch=NOW + 9 * DAY))
            w.add_link(Link(md5(i), f"http://t{(i + 1) % 4}.com/{(i + 1) % 40}", f"a{i}", webdb.domain_id(f"s{i}.org")))
    shutil.copytree(tmp_path / "db", tmp_path / "db2")
    # the same segment name in two places: the marks are the same
    a = generate(db, tmp_path / "a" / "seg", now=NOW, top_n=10, max_per_host=3)
    db2 = webdb.open(str(tmp_path / "db2"))
    b = generate(db2, tmp_path / "b" / "seg", now=NOW, top_n=10, max_per_host=3, due_index=False)
    assert (a.via, b.via) == ("index", "scan")
    assert _entries(tmp_path / "a" / "seg") == _entries(tmp_path / "b" / "seg")
    assert any(anchors for part in _entries(tmp_path / "a" / "seg") for _, _, anchors in part)


# ---- delta runs over the index (levels) ----------------------------------------------------------


def _churn(db, r: int, n: int = 40) -> None:
    """A round as a crawl has it: pages fetched (they leave the current bucket), new ones added;
    and the same few pages refetched every round (their record is put again under the same key
    with a new due time, so a key is in several runs)."""
    with db.writer() as w:
        for i in range(r * n, r * n + n):
            w.apply_fetch(FetchResult(f"http://h{i % 9}.com/{i}", Status.FETCHED, NOW, md5(i % 7), 0))
            w.add_page(Page(f"http://n{i % 5}.com/{r}/{i}", score=float(i % 4), next_fetch=NOW - i))
        for i in range(399, 395, -1):
            w.apply_fetch(FetchResult(f"http://h{i % 9}.com/{i}", Status.FETCHED, NOW + 60 * r, md5(i % 7), 0))


def _due_files(db) -> set[str]:
    return {f for j in range(db.manifest().sections.k) for f in os.listdir(db.section_dir(j)) if f.endswith(".due")}


def test_stage1_writes_delta_runs_then_merges_and_compacts_them(tmp_path):
    """Each batch's changes are a run over the index; more than ``level_runs`` runs are merged
    into one, runs over ``level_ratio`` of the base into a new base; after every batch check
    passes, generate through the levels equals the scan, and no merged-away run is left."""
    db = webdb.create(str(tmp_path / "db"), sections=2, sync=False, block_size=256, level_runs=2, level_ratio=0.5)
    with db.writer() as w:
        for i in range(600):
            w.add_page(Page(f"http://h{i % 9}.com/{i}", score=i % 11, next_fetch=NOW - i))
    assert all("runs" not in t["pages_by_url"]["due"] for t in db.manifest().tables)  # a base alone
    seen = set()
    for r in range(10):
        _churn(db, r, n=12)
        m = db.manifest()
        named = set()
        for tabs in m.tables:
            due = tabs["pages_by_url"]["due"]
            runs = due.get("runs", [])
            named |= {due["file"]} | {x["file"] for x in runs}
            assert len(runs) <= 2
            gen = f"{m.generation:08d}-"
            seen |= {x["file"][9:] for x in runs if x["file"].startswith(gen)}
            if due["file"].startswith(gen):
                seen.add("base")
        assert {f for f in _due_files(db) if f.startswith(gen)} <= named  # merged-away runs removed
        with db.reader() as rd:
            assert rd.check()["due"] == rd.num_pages
        for opts in OPTIONS:
            via, got = _selections(db, opts, True)
            assert via == "index" and got == _selections(db, opts, False)[1], opts
    assert {"s1d.due", "s1r.due", "base"} <= seen


def _rewrite_run(db, j: int, fix) -> str:
    """Replace the newest delta run of section j's index by ``fix(records)`` (CRCs all good),
    the manifest's counts fixed; returns the run's path."""
    from webdb.tables.format import KIND_DUE_RUN
    from webdb.tables.table import TableReader

    m = db.manifest()
    e = m.tables[j]["pages_by_url"]["due"]["runs"][0]
    path = os.path.join(db.section_dir(j), e["file"])
    t = TableReader(path, KIND_DUE_RUN)
    recs = fix(list(t.items()))
    t.close()
    info = _replace_file(path, KIND_DUE_RUN, recs)
    e["bytes"], e["entries"] = info["bytes"], info["records"]
    commit_next(db, m)
    return path


def _put_at(recs, i: int, v: bytes):
    return recs[:i] + [(recs[i][0], v)] + recs[i + 1 :]


@pytest.mark.parametrize(
    "damage",
    [
        "stale",  # a put whose value is not its page's
        "lost_tombstone",  # a fetched page's old record shows through
        "bad_op",
    ],
)
def test_check_reports_a_damaged_delta_run(tmp_path, damage):
    db = _db_with_pages(tmp_path / "db", k=1)
    _churn(db, 0)
    from webdb.tables.levels import DEL, PUT

    def fix(recs):
        puts = [i for i, (_, v) in enumerate(recs) if v[:1] == PUT]
        dels = [i for i, (_, v) in enumerate(recs) if v == DEL]
        assert puts and dels
        if damage == "stale":
            return _put_at(recs, puts[0], PUT + b"\x00" * 8)
        if damage == "lost_tombstone":
            return recs[: dels[0]] + recs[dels[0] + 1 :]
        return _put_at(recs, puts[0], b"\x07" + recs[puts[0]][1][1:])

    path = _rewrite_run(db, 0, fix)
    p = _check_cli(tmp_path / "db")
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert p.stdout.startswith("FAILED: ") and ("due index" in p.stdout or path in p.stdout), p.stdout


def test_the_manifest_refuses_a_bad_run_of_the_index(tmp_path):
    db = _db_with_pages(tmp_path / "db", k=1)
    _churn(db, 0, n=5)
    m = db.manifest()
    m.tables[0]["pages_by_url"]["due"]["runs"][0]["file"] = "00000099-s1d.due"
    commit_next(db, m)
    with pytest.raises(webdb.CorruptionError, match=r"tables\[0\]\.pages_by_url\.due"):
        db.manifest()


HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize(
    ("point", "levels"),
    [
        ("stage1.due_run_written", {}),
        ("stage1.due_merged", {"level_ratio": 0.001}),  # every run compacted into a new base
        ("stage1.due_merged", {"level_ratio": 1000.0, "level_runs": 1}),  # runs merged into one
        ("stage1.due_written", {"level_ratio": 0.001}),
    ],
)
def test_a_kill_while_stage1_writes_the_index_keeps_the_old_state(tmp_path, point, levels):
    """Killed after the run is written or after the runs are merged (the merged-away run still
    there): the db reads its old generation, check passes, and the rerun batch commits an index
    that check and generate accept."""
    from dbutil import make_db

    db = make_db(tmp_path / "db", **levels)
    if levels.get("level_runs") == 1:  # a run already there, so batch B's makes two
        _churn(db, 0, n=10)
    gen = db.manifest().generation
    child = [sys.executable, os.path.join(HERE, "crash_child.py"), str(tmp_path / "db"), "0"]
    p = subprocess.run(child, env=dict(os.environ, WEBDB_FAULTS=point), capture_output=True, timeout=300)
    assert p.returncode == -9, p.stderr  # SIGKILL at the point: it was reached
    db = webdb.open(str(tmp_path / "db"))
    assert db.manifest().generation == gen
    with db.reader() as r:
        r.check()
    p = subprocess.run(child, env=dict(os.environ, WEBDB_FAULTS=""), capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert db.manifest().generation == gen + 1
    with db.reader() as r:
        assert r.check()["due"] == r.num_pages
    for opts in OPTIONS[:4]:
        assert _selections(db, opts, True)[1] == _selections(db, opts, False)[1]
