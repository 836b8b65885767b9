"""One regression test per defect of the original WebDB (docs/semantics.md, *Defects of the
original, fixed*) that a single host can show, and the invariants the original's own tests checked.

Each test names its defect.  Defect 5 (distributed crash recovery) belongs to the distributed
tests.  Results are also compared with the reference model (tests/model.py).
"""

from __future__ import annotations

import tracemalloc
from dataclasses import replace

import pytest
from model import Model, assert_reader_matches

import webdb
from webdb.core.schedule import FetchResult
from webdb.tables.records import Link, Page, Status, url_md5

M1, M2, M3 = b"\x11" * 16, b"\x88" * 16, b"\xee" * 16


class Pair:
    """A webdb database and the model, fed the same batches."""

    def __init__(self, path, k: int = 1, **settings):
        self.path = path
        self.db = webdb.create(str(path), sections=k, block_size=256, sync=False, **settings)
        self.model = Model(**settings)

    def batch(self, *calls) -> None:
        with self.db.writer() as w:
            for name, *args in calls:
                getattr(w, name)(*args)
                getattr(self.model, name)(*args)
        self.model.commit()

    def reader(self):
        return self.db.reader()

    def check(self) -> None:
        r = self.db.reader()
        try:
            assert_reader_matches(r, self.model)
        finally:
            r.close()


@pytest.fixture(params=[1, 5], ids=["k1", "k5"])
def pair(request, tmp_path):
    return Pair(tmp_path / "db", k=request.param)


def read(db, fn):
    r = db.reader()
    try:
        return fn(r)
    finally:
        r.close()


# ---- defect 1 --------------------------------------------------------------------------------------


def test_defect1_deleting_all_pages_of_a_shared_md5_deletes_its_links(pair):
    a, b, c = "http://a/", "http://b/", "http://c/"
    pair.batch(
        ("add_page", Page(a, md5=M1)),
        ("add_page", Page(b, md5=M1)),
        ("add_page", Page(c, md5=M2)),
        ("add_link", Link(M1, c, "dup")),
        ("add_link", Link(M2, a, "back")),
    )
    assert read(pair.db, lambda r: [link.url for link in r.outlinks(M1)]) == [c]
    pair.batch(("delete_page", a), ("delete_page", b))
    assert read(pair.db, lambda r: (list(r.outlinks(M1)), list(r.inlinks(c)), r.num_links)) == ([], [], 0)
    pair.check()


# ---- defect 2 --------------------------------------------------------------------------------------


def test_defect2_link_only_batch_after_a_page_batch_keeps_the_pages(pair):
    urls = [f"http://a/{i}" for i in range(20)]
    pair.batch(*[("add_page", Page(u, md5=bytes([i * 12]) * 16)) for i, u in enumerate(urls)])
    pair.batch(*[("add_link", Link(bytes([i * 12]) * 16, urls[(i + 1) % 20], str(i))) for i in range(20)])
    assert read(pair.db, lambda r: (r.num_pages, r.num_links, len(list(r.pages())))) == (20, 20, 20)
    pair.check()


def test_defect2_page_only_batch_keeps_the_links(pair):
    pair.batch(("add_page", Page("http://a/", md5=M1)), ("add_page", Page("http://b/")))
    pair.batch(("add_link", Link(M1, "http://b/", "x")))
    pair.batch(("add_page", Page("http://c/")))
    assert read(pair.db, lambda r: [link.anchor for link in r.links_by_md5()]) == ["x"]
    pair.check()


def test_defect2_delete_links_only_batch_is_not_undone_by_a_later_stage(pair):
    """Stage 3 deletes; stages 4–5 then have no edits for LinksByMD5 and must not copy the old one."""
    pair.batch(
        ("add_page", Page("http://a/", md5=M1)),
        ("add_page", Page("http://b/", md5=M2)),
        ("add_link", Link(M1, "http://b/")),
        ("add_link", Link(M2, "http://a/")),
    )
    pair.batch(("delete_links", M1))
    assert read(pair.db, lambda r: [(x.from_id, x.url) for x in r.links_by_md5()]) == [(M2, "http://a/")]
    assert read(pair.db, lambda r: [(x.from_id, x.url) for x in r.links()]) == [(M2, "http://a/")]
    pair.check()


def test_defect2_flag_only_change_reaches_both_link_orders(pair):
    pair.batch(
        ("add_page", Page("http://a/", md5=M1)),
        ("add_page", Page("http://b/", md5=M2)),
        ("add_link", Link(M1, "http://b/")),
    )
    pair.batch(("apply_fetch", FetchResult("http://b/", Status.FETCHED, 5, md5=M2, num_outlinks=3)))
    assert read(pair.db, lambda r: [x.target_has_outlink for x in r.links()]) == [True]
    assert read(pair.db, lambda r: [x.target_has_outlink for x in r.links_by_md5()]) == [True]
    pair.check()


def test_defect2_empty_batch_changes_nothing(pair):
    pair.batch(("add_page", Page("http://a/", md5=M1)), ("add_link", Link(M1, "http://a/")))
    pair.batch()
    assert read(pair.db, lambda r: (r.num_pages, r.num_links)) == (1, 1)
    pair.check()


# ---- defect 3 --------------------------------------------------------------------------------------


def test_defect3_dangling_links_dropped_wherever_the_target_sorts(pair):
    pages = ["http://m/", "http://m/x", "http://p/"]
    pair.batch(*[("add_page", Page(u, md5=M1 if i == 0 else M2)) for i, u in enumerate(pages)])
    targets = [
        "a://first",
        "http://m",
        "http://m/w",
        "http://m/x/",
        "http://n/",
        "http://p/\u00e9",
        "zz://last",
    ]
    pair.batch(*[("add_link", Link(M1, t)) for t in targets + pages])
    assert read(pair.db, lambda r: [x.url for x in r.links()]) == pages
    # The page that sorts last is deleted: its inlinks now dangle after every page.
    pair.batch(("delete_page", "http://p/"))
    assert read(pair.db, lambda r: [x.url for x in r.links()]) == pages[:2]
    assert read(pair.db, lambda r: list(r.inlinks("http://p/"))) == []
    pair.check()


# ---- defect 4 --------------------------------------------------------------------------------------


def test_defect4_stats_after_link_only_and_delete_all_batches(pair):
    urls = [f"http://s/{i:02d}" for i in range(30)]
    pair.batch(*[("add_page", Page(u)) for u in urls])
    pair.batch(*[("add_link", Link(url_md5(u), v)) for u in urls[:5] for v in urls[:10]])
    counts = read(pair.db, lambda r: (r.num_pages, r.num_links, len(list(r.pages())), len(list(r.links()))))
    assert counts == (30, 50, 30, 50)
    pair.batch(("delete_links", url_md5(urls[0])))
    assert read(pair.db, lambda r: (r.num_pages, r.num_links)) == (30, 40)
    pair.batch(*[("delete_page", u) for u in urls])
    assert read(pair.db, lambda r: (r.num_pages, r.num_links)) == (0, 0)
    pair.check()
    reopened = webdb.open(pair.path)
    everything = read(reopened, lambda r: (r.num_pages, r.num_links, list(r.pages()), list(r.links())))
    assert everything == (0, 0, [], [])


# ---- defect 6 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [20_000, pytest.param(200_000, marks=pytest.mark.slow)])
def test_defect6_inlinks_of_a_popular_url_are_streamed(tmp_path, n):
    target = "http://popular/"
    db = webdb.create(str(tmp_path / "db"), sections=1, cache_mb=1, sync=False)
    with db.writer() as w:
        w.add_page(Page(target))
        for i in range(n):
            u = f"http://src{i:06d}/"
            w.add_page(Page(u))
            w.add_link(Link(url_md5(u), target, f"anchor text of link {i}"))
    with db.reader() as r:
        assert r.num_links == n
        tracemalloc.start()
        try:
            it = iter(r.inlinks(target))
            first = next(it)
            first_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            count = 1 + sum(1 for _ in it)
            stream_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            everything = list(r.inlinks(target))
            all_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert first.url == target and count == n == len(everything)
    # The first inlink costs a block, not the inlinks; streaming them all holds a block at a time.
    assert first_peak < all_peak / 20, (first_peak, all_peak)
    assert stream_peak < all_peak / 10, (stream_peak, all_peak)


# ---- defect 7 --------------------------------------------------------------------------------------


def test_defect7_more_than_32_sections_split_from_the_data(tmp_path):
    """No cap at 32 sections, and URL breakpoints come from the data: 240 URLs of one host,
    which hard-coded breakpoints would put in one section, spread over all 40."""
    p = Pair(tmp_path / "db", k=40)
    urls = [f"http://only.one.host/{i:04d}" for i in range(240)]
    p.batch(*[("add_page", Page(u, md5=bytes([i]) * 16)) for i, u in enumerate(urls)])
    p.batch(*[("add_link", Link(bytes([i]) * 16, urls[(i * 7) % 240])) for i in range(240)])
    p.check()
    with p.reader() as r:
        sizes = [t.count if t is not None else 0 for t in r.tables["pages_by_url"]]
    assert len(sizes) == 40 and sum(sizes) == 240
    assert min(sizes) >= 3 and max(sizes) <= 12, sizes


# ---- defect 8 --------------------------------------------------------------------------------------


def _score_iteration(db) -> list[tuple[str, tuple]]:
    """One link-analysis iteration as add_page_with_score calls: 0.15 + 0.85 * Σ score/n."""
    with db.reader() as r:
        pages = list(r.pages())
        share = {}
        for p in pages:
            out = [x.url for x in r.outlinks(p.md5)]
            for u in out:
                share[u] = share.get(u, 0.0) + p.score / len(out)
    return [("add_page_with_score", replace(p, score=0.15 + 0.85 * share.get(p.url, 0.0))) for p in pages]


def test_defect8_score_batches_merge_across_sections_and_workers(tmp_path):
    """Link analysis writes one add_page_with_score per page.  With k sections and several
    worker processes the per-section edit files must be merged, not concatenated: every
    score lands, and the result equals one section's and the model's.  (Duplicate content in
    every URL section sends stage 2 edits for one md5 section from all k producers.)"""
    urls = [f"http://h{i % 7}/{i:03d}" for i in range(120)]
    md5 = [bytes([0x10 + (i % 3)]) * 16 for i in range(120)]  # three md5s, all in md5 section 0
    load = [("add_page", Page(u, md5=m)) for u, m in zip(urls, md5)]
    targets = {md5[0]: urls[:5], md5[1]: urls[:60], md5[2]: urls[100:]}  # uneven: scores diverge
    links = [("add_link", Link(m, u, "x")) for m, us in targets.items() for u in us]
    dbs = [Pair(tmp_path / "one", k=1), Pair(tmp_path / "many", k=5, workers=2)]
    for p in dbs:
        p.batch(*load)
        p.batch(*links)
        for _ in range(3):
            p.batch(*_score_iteration(p.db))
        p.check()
    one, many = ([(x.url, x.score) for x in read(p.db, lambda r: list(r.pages()))] for p in dbs)
    assert one == many
    assert len({score for _, score in one}) > 1  # the iterations did move the scores


# ---- defect 9 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("level_ratio", [0.0, 0.5])
def test_defect9_a_small_batch_carries_untouched_blocks_over(tmp_path, level_ratio):
    """After a batch that touches a handful of records, every table's new file shares all but
    a few of its blocks, byte for byte, with the previous generation's file; with levels, the
    link tables keep their base file and gain a delta run of a few records."""
    db = webdb.create(str(tmp_path / "db"), sections=1, block_size=1024, sync=False, level_ratio=level_ratio)
    urls = [f"http://big/{i:05d}" for i in range(4000)]
    with db.writer() as w:
        for i, u in enumerate(urls):
            w.add_page(Page(u, num_outlinks=1))
            w.add_link(Link(url_md5(u), urls[(i * 7919) % 4000], f"anchor {i}"))
    before = db.reader()
    try:
        with db.writer() as w:
            w.add_page(Page(urls[1234], num_outlinks=0, score=2.0))  # flags of its inlinks change
            w.add_link(Link(url_md5(urls[10]), urls[3000], "new"))
            w.delete_page(urls[2500])
        with db.reader() as after:
            assert after.generation != before.generation
            for table, old_list in before.tables.items():
                old, new = old_list[0], after.tables[table][0]
                if level_ratio and table.startswith("links"):
                    assert new.base.path == old.path
                    assert 1 <= len(new.runs) <= 2 and all(r.count <= 12 for r in new.runs), table
                    continue
                old_blocks = {old.raw_block(i) for i in range(old.nblocks)}
                fresh = [i for i in range(new.nblocks) if new.raw_block(i) not in old_blocks]
                assert old.nblocks > 50, (table, old.nblocks)
                assert len(fresh) <= 12, (table, len(fresh), new.nblocks)
    finally:
        before.close()


# ---- §9 invariants ---------------------------------------------------------------------------------


def test_section9_invariants(pair):
    a, b, c, d = "http://a/", "http://a/b", "http://a/b/", "http://\u00e9/"
    pair.batch(
        ("add_page_with_score", Page(a, md5=M1, score=3.0, next_score=4.0)),
        ("add_page", Page(b, md5=M1)),
        ("add_page", Page(c, md5=M2)),
        ("add_page", Page(d)),
        ("add_link", Link(M1, c)),
        ("add_link", Link(M1, d)),
        ("add_link", Link(M2, a)),
    )
    r = pair.reader()
    pages, by_md5 = list(r.pages()), list(r.pages_by_md5())
    links, links_by_md5 = list(r.links()), list(r.links_by_md5())
    # Counts equal the rows of both orders.
    assert r.num_pages == len(pages) == len(by_md5) == 4
    assert r.num_links == len(links) == len(links_by_md5) == 3
    # Strict key orders.
    ukeys = [p.url.encode() for p in pages]
    assert ukeys == sorted(set(ukeys))
    mkeys = [p.md5 + p.url.encode() for p in by_md5]
    assert mkeys == sorted(set(mkeys))
    lkeys = [x.url.encode() + b"\0" + x.from_id for x in links]
    assert lkeys == sorted(set(lkeys))
    # getPage returns what was added; getPages(md5) every page of the md5; outlinks are current.
    assert r.get_page(d) == Page(d)
    assert [p.url for p in r.get_pages(M1)] == [a, b]
    assert [x.url for x in r.outlinks(M1)] == [c, d]
    r.close()
    # addPage keeps the stored score; addPageWithScore replaces; addPageIfNotPresent never replaces.
    pair.batch(
        ("add_page", Page(a, md5=M1, score=9.0)),
        ("add_page_with_score", Page(c, md5=M2, score=0.25)),
        ("add_page_if_not_present", Page(d, md5=M3, score=8.0)),
    )
    r = pair.reader()
    assert (r.get_page(a).score, r.get_page(a).next_score) == (3.0, 4.0)
    assert r.get_page(c).score == 0.25
    assert r.get_page(d) == Page(d)
    r.close()
    # After a page's md5 changes its old outlinks go, unless another url holds the old md5.
    pair.batch(("apply_fetch", FetchResult(a, Status.FETCHED, 10, md5=M3)))
    assert read(pair.db, lambda r: [x.url for x in r.outlinks(M1)]) == [c, d]
    pair.batch(("apply_fetch", FetchResult(b, Status.FETCHED, 10, md5=M3)))
    assert read(pair.db, lambda r: list(r.outlinks(M1))) == []
    # After deletePage the page and its inlinks are gone.
    pair.batch(("delete_page", a))
    assert read(pair.db, lambda r: (r.get_page(a), list(r.inlinks(a)))) == (None, [])
    pair.check()
