"""Update (fetchlist.update.apply_segments): the WebDB semantics of the original update tool and Nutch 1.x's
status rules, on segments written by hand (no HTTP), and ``webdb update`` on a segment."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

import webdb
from fetchlist.crawl import update_db
from fetchlist.parse import ParseResult
from fetchlist.segment import FetchEntry, FetchRecord, Segment
from fetchlist.update import apply_segments
from webdb import DAY, NEVER, Page, Status
from webdb.writer.inputs import CallRecorder, replay_calls

WEBDB = [sys.executable, "-m", "webdb.cli.main"]
T = 1_700_000_000
IV = 30 * DAY


def md5(s: str) -> bytes:
    return hashlib.md5(s.encode()).digest()


def fetched(url: str, content: str, links: list[str] = (), t: int = T, etag: str | None = None) -> FetchRecord:
    m = md5(content)
    headers = {"etag": etag} if etag else {}
    return FetchRecord(
        url,
        Status.FETCHED,
        t,
        200,
        headers=headers,
        md5=m,
        parse=ParseResult(url, m, outlinks=[(u, f"to {u}") for u in links]),
    )


def make_segment(path, pages: list[Page], records: list[FetchRecord], parts: int = 1) -> str:
    seg = Segment.create(path)
    for p in range(parts):
        seg.write_fetchlist(p, [FetchEntry(pg.url, pg) for i, pg in enumerate(pages) if i % parts == p])
        with seg.writer(p) as w:
            mine = {pg.url for i, pg in enumerate(pages) if i % parts == p}
            for r in records:
                if r.url in mine:
                    w.write(r)
    return str(path)


def snapshot(db) -> tuple[dict[str, Page], set[tuple[bytes, str, str, int]]]:
    with db.reader() as r:
        r.check()
        return {p.url: p for p in r.pages()}, {(lk.from_id, lk.url, lk.anchor, lk.domain_id) for lk in r.links()}


def outlinks_of(db, url: str) -> set[str]:
    with db.reader() as r:
        p = r.get_page(url)
        return {lk.url for lk in r.outlinks(p.md5)}


@pytest.fixture
def db(tmp_path):
    db = webdb.create(str(tmp_path / "db"), sync=False)
    with db.writer() as w:
        w.add_page(Page("http://a.com/", score=2.0))
        w.add_page(Page("http://a.com/same", md5=md5("same"), status=Status.FETCHED, fetch_time=T - IV, num_outlinks=1))
        w.add_outlinks(md5("same"), [("http://a.com/kept", "kept")], domain_id=webdb.domain_id("a.com"))
        w.add_page(
            Page("http://a.com/changes", md5=md5("v1"), status=Status.FETCHED, fetch_time=T - IV, num_outlinks=1)
        )
        w.add_outlinks(md5("v1"), [("http://a.com/old-target", "old")])
        w.add_page(
            Page("http://a.com/304", md5=md5("304"), status=Status.FETCHED, fetch_time=T - IV, meta={"etag": '"e1"'})
        )
        w.add_outlinks(md5("304"), [("http://b.org/from304", "x")])
        for u in (
            "http://a.com/retry",
            "http://a.com/last-retry",
            "http://a.com/gone",
            "http://a.com/moved",
            "http://a.com/tmp",
        ):
            w.add_page(Page(u))
    with db.writer() as w:  # one retry used up already
        w.apply_fetch(webdb.FetchResult("http://a.com/last-retry", Status.RETRY, T - 10 * DAY))
        w.apply_fetch(webdb.FetchResult("http://a.com/last-retry", Status.RETRY, T - 9 * DAY))
        w.apply_fetch(webdb.FetchResult("http://a.com/last-retry", Status.RETRY, T - 8 * DAY))
    return db


def _as_generated(db) -> list[Page]:
    with db.reader() as r:
        pages = [
            p
            for p in r.pages()
            if p.url.startswith("http://a.com/") and "target" not in p.url and p.url != "http://a.com/kept"
        ]
    for p in pages:
        p.meta["gen"] = f"s@{T - 100}"
    return pages


def test_status_rules_and_link_semantics(tmp_path, db):
    """One record of each status: the counts, then each page and its links."""
    records = [
        fetched("http://a.com/", "home", ["http://a.com/same", "http://b.org/new", "http://a.com/"]),
        fetched("http://a.com/same", "same", ["http://a.com/never-added"]),  # unchanged: links kept as they are
        fetched("http://a.com/changes", "v2", ["http://a.com/new-target"], etag='"v2"'),
        FetchRecord("http://a.com/304", Status.NOT_MODIFIED, T, 304),
        FetchRecord("http://a.com/retry", Status.RETRY, T, 503),
        FetchRecord("http://a.com/last-retry", Status.RETRY, T, 0, error="ConnectTimeout"),
        FetchRecord("http://a.com/gone", Status.GONE, T, 404),
        FetchRecord("http://a.com/moved", Status.REDIRECT_PERM, T, 301, redirect="http://c.net/landing"),
        FetchRecord("http://a.com/tmp", Status.REDIRECT_TEMP, T, 302, redirect="http://a.com/"),
    ]
    seg = make_segment(tmp_path / "seg", _as_generated(db), records)
    with db.writer() as w:
        counts = apply_segments(w, [seg])
    assert {
        k: counts[k]
        for k in (
            "fetched",
            "not_modified",
            "retry",
            "gone",
            "redirect_perm",
            "redirect_temp",
            "changed",
            "unchanged",
            "redirect_targets",
        )
    } == {
        "fetched": 3,
        "not_modified": 1,
        "retry": 2,
        "gone": 1,
        "redirect_perm": 1,
        "redirect_temp": 1,
        "changed": 2,
        "unchanged": 1,
        "redirect_targets": 2,
    }
    pages, links = snapshot(db)
    check_fetched_pages(db, pages, links)
    check_other_statuses(db, pages, links)


def check_fetched_pages(db, pages, links):
    """A page fetched: new, unchanged or changed content, and what happens to its links."""
    home = pages["http://a.com/"]
    assert (home.status, home.md5, home.fetch_time, home.next_fetch, home.retries, home.score) == (
        Status.FETCHED,
        md5("home"),
        T,
        T + IV,
        0,
        2.0,
    )
    assert outlinks_of(db, "http://a.com/") == {"http://a.com/same", "http://b.org/new"}  # not the self-link
    new = pages["http://b.org/new"]
    assert (new.status, new.next_fetch, new.score, new.fetch_interval) == (Status.UNFETCHED, T, 1.0, IV)
    assert (md5("home"), "http://b.org/new", "to http://b.org/new", webdb.domain_id("a.com")) in links
    # unchanged content keeps its links and adds none
    assert outlinks_of(db, "http://a.com/same") == {"http://a.com/kept"} and "http://a.com/never-added" not in pages
    assert pages["http://a.com/same"].next_fetch == T + IV
    # changed content: new outlinks replace the old through the md5 cascade
    ch = pages["http://a.com/changes"]
    assert ch.md5 == md5("v2") and ch.meta["etag"] == '"v2"'
    assert outlinks_of(db, "http://a.com/changes") == {"http://a.com/new-target"}
    assert not any(lk[0] == md5("v1") for lk in links) and "http://a.com/old-target" in pages  # the page stays


def check_other_statuses(db, pages, links):
    """Not modified, retries, gone and redirects; the generate mark cleared on every outcome."""
    nm = pages["http://a.com/304"]
    assert (nm.status, nm.md5, nm.fetch_time, nm.next_fetch, nm.meta["etag"]) == (
        Status.NOT_MODIFIED,
        md5("304"),
        T,
        T + IV,
        '"e1"',
    )
    assert outlinks_of(db, "http://a.com/304") == {"http://b.org/from304"}
    rt = pages["http://a.com/retry"]
    assert (rt.status, rt.retries, rt.next_fetch, rt.fetch_time) == (Status.RETRY, 1, T + DAY, 0)
    lr = pages["http://a.com/last-retry"]
    assert (lr.status, lr.retries, lr.next_fetch) == (Status.GONE, 4, NEVER)  # max_retries 3
    g = pages["http://a.com/gone"]
    assert (g.status, g.next_fetch, g.fetch_time) == (Status.GONE, NEVER, T)
    mv = pages["http://a.com/moved"]
    assert (mv.status, mv.next_fetch, mv.meta["redirect"]) == (Status.REDIRECT_PERM, T + IV, "http://c.net/landing")
    assert pages["http://c.net/landing"].status == Status.UNFETCHED and pages["http://c.net/landing"].next_fetch == T
    assert not any(lk[1] == "http://c.net/landing" for lk in links)  # a redirect is not a link
    assert pages["http://a.com/tmp"].status == Status.REDIRECT_TEMP
    for u in ("http://a.com/", "http://a.com/same", "http://a.com/retry", "http://a.com/moved"):
        assert pages[u].meta["gen"] == ""  # the generate mark is cleared


def test_redirect_meta_is_cleared_when_the_page_answers_again(tmp_path, db):
    seg1 = make_segment(
        tmp_path / "s1",
        _as_generated(db),
        [FetchRecord("http://a.com/moved", Status.REDIRECT_PERM, T, 301, redirect="http://c.net/x")],
    )
    update_db(db, [seg1])
    seg2 = make_segment(tmp_path / "s2", _as_generated(db), [fetched("http://a.com/moved", "back", t=T + 1)])
    update_db(db, [seg2])
    p = snapshot(db)[0]["http://a.com/moved"]
    assert p.status == Status.FETCHED and p.meta["redirect"] == ""


def test_adaptive_schedule_within_bounds(tmp_path, db):
    records = [
        fetched("http://a.com/same", "same"),
        fetched("http://a.com/changes", "v2"),
        FetchRecord("http://a.com/304", Status.NOT_MODIFIED, T, 304),
    ]
    seg = make_segment(tmp_path / "seg", _as_generated(db), records)
    update_db(db, [seg], {"adaptive": True})
    pages = snapshot(db)[0]
    assert pages["http://a.com/same"].fetch_interval == int(IV * 1.2)  # unchanged: longer
    assert pages["http://a.com/changes"].fetch_interval == int(IV * 0.8)  # changed: shorter
    assert pages["http://a.com/304"].fetch_interval == int(IV * 1.2)
    assert pages["http://a.com/changes"].next_fetch == T + int(IV * 0.8)
    for i in range(30):  # bounded by min_interval / max_interval
        seg = make_segment(
            tmp_path / f"s{i}",
            _as_generated(db),
            [fetched("http://a.com/changes", f"v{i + 3}", t=T + i), fetched("http://a.com/same", "same")],
        )
        update_db(db, [seg], {"adaptive": True})
    pages = snapshot(db)[0]
    assert pages["http://a.com/changes"].fetch_interval == DAY
    assert pages["http://a.com/same"].fetch_interval == 365 * DAY


def test_no_additions_keeps_links_to_known_pages_only(tmp_path, db):
    before = set(snapshot(db)[0])
    records = [
        fetched("http://a.com/", "home", ["http://a.com/same", "http://b.org/new"]),
        FetchRecord("http://a.com/moved", Status.REDIRECT_PERM, T, 301, redirect="http://c.net/landing"),
    ]
    seg = make_segment(tmp_path / "seg", _as_generated(db), records)
    c = update_db(db, [seg], no_additions=True)
    pages = snapshot(db)[0]
    assert set(pages) == before and c["new_urls"] == 0
    assert outlinks_of(db, "http://a.com/") == {"http://a.com/same"}


@pytest.mark.parametrize(
    ("opts", "kept"),
    [
        ({}, {"http://a.com/x", "http://sub.a.com/y", "http://b.org/z"}),
        ({"ignore_internal": True}, {"http://sub.a.com/y", "http://b.org/z"}),
        ({"ignore_external": True}, {"http://a.com/x"}),
        ({"ignore_internal": True, "link_mode": "domain"}, {"http://b.org/z"}),
        ({"ignore_external": True, "link_mode": "domain"}, {"http://a.com/x", "http://sub.a.com/y"}),
        ({"max_outlinks": 2}, {"http://a.com/x", "http://sub.a.com/y"}),
    ],
)
def test_internal_external_and_outlink_cap(tmp_path, db, opts, kept):
    seg = make_segment(
        tmp_path / "seg",
        _as_generated(db),
        [fetched("http://a.com/", "home", ["http://a.com/x", "http://sub.a.com/y", "http://b.org/z"])],
    )
    update_db(db, [seg], **opts)
    assert outlinks_of(db, "http://a.com/") == kept
    pages = snapshot(db)[0]
    assert {"http://a.com/x", "http://sub.a.com/y", "http://b.org/z"} & set(pages) == kept


def test_filters_www_rules_and_focus(tmp_path, db):
    (tmp_path / "regex-urlfilter.txt").write_text("-\\.png$\n+.\n")
    (tmp_path / "www.txt").write_text("b.org www\n")
    (tmp_path / "focus.txt").write_text("b.org /news/\\d+\\.html$\n")
    links = ["http://a.com/logo.png", "http://b.org/news/1.html", "http://b.org/about", "http://c.net/news/2.html"]
    seg = make_segment(tmp_path / "seg", _as_generated(db), [fetched("http://a.com/", "home", links)])
    update_db(
        db,
        [seg],
        url_filters=[str(tmp_path / "regex-urlfilter.txt")],
        www_rules=str(tmp_path / "www.txt"),
        focus_rules=str(tmp_path / "focus.txt"),
        fit_score=5.0,
        other_score=0.5,
    )
    pages = snapshot(db)[0]
    assert outlinks_of(db, "http://a.com/") == {
        "http://www.b.org/news/1.html",
        "http://www.b.org/about",
        "http://c.net/news/2.html",
    }
    fit = pages["http://www.b.org/news/1.html"]
    assert (fit.score, fit.meta) == (5.0, {"fit": "1"})
    for u in ("http://www.b.org/about", "http://c.net/news/2.html"):
        assert pages[u].score == 0.5 and "fit" not in pages[u].meta
    # known pages are not re-checked nor re-scored
    seg2 = make_segment(
        tmp_path / "seg2", _as_generated(db), [fetched("http://a.com/same", "same2", ["http://a.com/"])]
    )
    update_db(db, [seg2], focus_rules=str(tmp_path / "focus.txt"), other_score=0.5)
    assert snapshot(db)[0]["http://a.com/"].score == 2.0


def test_several_segments_apply_in_order(tmp_path, db):
    gen = _as_generated(db)
    s1 = make_segment(tmp_path / "s1", gen, [fetched("http://a.com/changes", "v2", ["http://a.com/from-v2"], t=T)])
    s2 = make_segment(
        tmp_path / "s2",
        gen,
        [
            fetched("http://a.com/changes", "v3", ["http://a.com/from-v3"], t=T + 5),
            FetchRecord("http://a.com/retry", Status.RETRY, T + 5, 500),
        ],
        parts=2,
    )
    s3 = make_segment(tmp_path / "s3", gen, [FetchRecord("http://a.com/retry", Status.RETRY, T + 9, 500)])
    c = update_db(db, [s1, s2, s3])
    assert c["segments"] == 3 and c["fetched"] == 2 and c["retry"] == 2
    pages = snapshot(db)[0]
    assert pages["http://a.com/changes"].md5 == md5("v3") and pages["http://a.com/changes"].fetch_time == T + 5
    assert outlinks_of(db, "http://a.com/changes") == {"http://a.com/from-v3"}  # v2's links had no page left
    assert "http://a.com/from-v2" in pages  # but the page it found stays
    assert pages["http://a.com/retry"].retries == 2 and pages["http://a.com/retry"].next_fetch == T + 9 + DAY


def test_any_writer_calls_and_bad_input(tmp_path, db):
    seg = make_segment(tmp_path / "seg", _as_generated(db), [fetched("http://a.com/", "home", ["http://b.org/new"])])
    rec = CallRecorder()
    counts = apply_segments(rec, [seg])
    assert counts["outlinks"] == 1 and len(rec.calls) == 2
    (tmp_path / "calls.jsonl").write_text("".join(c + "\n" for c in rec.calls))
    other = webdb.create(str(tmp_path / "db2"), sync=False)
    with other.writer() as w:
        replay_calls(w, [str(tmp_path / "calls.jsonl")])
    assert set(snapshot(other)[0]) == {"http://a.com/", "http://b.org/new"}
    with pytest.raises(webdb.BadInput, match="not a segment"):
        apply_segments(rec, [str(tmp_path)])
    with pytest.raises(webdb.BadInput, match="nope: no such segment directory"):
        apply_segments(rec, [str(tmp_path / "nope")])
    with pytest.raises(webdb.BadInput, match="unknown update option"):
        apply_segments(rec, [seg], no_additon=True)
    with pytest.raises(webdb.BadInput, match="link_mode"):
        apply_segments(rec, [seg], link_mode="ip")


@pytest.mark.timeout(60)
def test_calls_input_refuses_a_fifo_and_a_too_deep_line(tmp_path):
    """A FIFO among the input files is refused without blocking (the writer lock is held);
    a line nested too deep for the JSON reader is bad input naming file and line."""
    fifo = tmp_path / "calls.fifo"
    os.mkfifo(fifo)
    with pytest.raises(webdb.BadInput, match=f"{fifo}: not a regular file"):
        replay_calls(CallRecorder(), [str(fifo)])
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(b"[" * 200_000 + b"\n")
    with pytest.raises(webdb.BadInput, match=f"{deep}:1: not a JSON writer call"):
        replay_calls(CallRecorder(), [str(deep)])


@pytest.mark.parametrize("m", [1, 2, 3, 5, 40])
def test_shares_are_the_calls_in_order(tmp_path, db, m):
    """share=[j, m] of the same inputs, j = 0..m-1 one after another, makes exactly the calls
    one writer makes on the whole input: line files split at line starts, segments by partition."""
    import random

    from webdb.writer.inputs import share_lines

    rng = random.Random(m)
    files = []
    for f in range(3):
        lines = ["".join(rng.choice("ab\r\x1e\x1fé") for _ in range(rng.randint(0, 30))).encode() for _ in range(50)]
        path = tmp_path / f"f{f}.txt"
        path.write_bytes(b"\n".join(lines) + (b"\n" if f != 1 else b""))  # f1: no final newline
        files.append((str(path), lines))
    paths = [p for p, _ in files]
    whole = [x for _, lines in files for x in lines]
    assert [x for _, _, x in share_lines(paths)] == whole
    assert [x for j in range(m) for _, _, x in share_lines(paths, [j, m])] == whole

    gen = _as_generated(db)
    recs = [fetched(p.url, "new " + p.url, [p.url + "/x", "http://b.org/" + p.url[-3:]]) for p in gen]
    segs = [make_segment(tmp_path / f"s{i}", gen, recs[i::2], parts=3) for i in range(2)]
    one = CallRecorder()
    apply_segments(one, segs)
    parts = CallRecorder()
    for j in range(m):
        apply_segments(parts, segs, share=[j, m])
    assert parts.calls == one.calls and len(one.calls) > 10
    with pytest.raises(webdb.BadInput, match="share"):
        apply_segments(parts, segs, share=[2, 2])


@pytest.mark.parametrize("k", [1, 2])
def test_update_command_applies_segments_like_the_library(tmp_path, db, k):
    if k > 1:  # the same pages in a db of k sections: each section process applies a share
        many = webdb.create(str(tmp_path / f"db{k}"), sections=k, sync=False)
        with db.reader() as r, many.writer() as w:
            for p in r.pages():
                w.add_page_with_score(p)
            for lk in r.links_by_md5():
                w.add_link(lk)
        db = many
    gen = _as_generated(db)
    records = [
        fetched("http://a.com/", "home", ["http://a.com/x", "http://b.org/z"]),
        FetchRecord("http://a.com/gone", Status.GONE, T, 410),
        FetchRecord("http://a.com/moved", Status.REDIRECT_PERM, T, 301, redirect="http://c.net/landing"),
    ]
    seg = make_segment(tmp_path / "seg", gen, records, parts=3)
    twin = webdb.create(str(tmp_path / "twin"), sync=False)
    with db.reader() as r, twin.writer() as w:
        for p in r.pages():
            w.add_page_with_score(p)
        for lk in r.links_by_md5():
            w.add_link(lk)
    out = subprocess.run(
        [*WEBDB, "update", db.path, seg, "--option", "ignore_external=true", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    update_db(twin, [seg], ignore_external=True)
    assert snapshot(db) == snapshot(twin)
    assert outlinks_of(db, "http://a.com/") == {"http://a.com/x"}


def test_every_update_option_is_documented():
    from fetchlist.update import OPTIONS

    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "crawl.md")
    text = open(docs, encoding="utf-8").read()
    table = text[text.index("| option (`apply_segments`") :]
    table = table[: table.index("\n\n")]
    names = {n.strip() for row in table.splitlines()[2:] for n in row.split("|")[1].split(",")}
    assert names == set(OPTIONS)
