"""Unit tests of the reference model (tests/model.py) against hand-worked examples.

Each example is worked out by hand from docs/semantics.md (the calls, the clarifications and
the defects of the original it fixes), so the model can be trusted as the
oracle of the property tests.
"""

from __future__ import annotations

import pytest
from model import Model

from webdb.core.schedule import FetchResult
from webdb.errors import BadInput
from webdb.tables.records import DAY, DEFAULT_INTERVAL, NEVER, Link, Page, Status, url_md5

A, B, C = "http://a/", "http://b/", "http://c/"
M1, M2, M3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16


def committed(m: Model, *calls) -> Model:
    """Run ``calls`` (name, args...) as one batch and commit it."""
    for name, *args in calls:
        getattr(m, name)(*args)
    m.commit()
    return m


def keys(links):
    return [(link.from_id, link.url) for link in links]


# ---- pages: priorities and the score rule --------------------------------------------------------


def test_add_page_keeps_stored_scores():
    m = committed(Model(), ("add_page_with_score", Page(A, score=5.0, next_score=6.0, num_outlinks=1)))
    committed(m, ("add_page", Page(A, score=9.0, next_score=9.0, num_outlinks=7)))
    p = m.get_page(A)
    assert (p.score, p.next_score, p.num_outlinks) == (5.0, 6.0, 7)


def test_add_page_of_a_new_url_takes_its_scores():
    m = committed(Model(), ("add_page", Page(A, score=3.0, next_score=4.0)))
    assert (m.get_page(A).score, m.get_page(A).next_score) == (3.0, 4.0)


def test_add_page_with_score_replaces_scores():
    m = committed(Model(), ("add_page_with_score", Page(A, score=5.0)))
    committed(m, ("add_page_with_score", Page(A, score=2.0, next_score=0.5)))
    assert (m.get_page(A).score, m.get_page(A).next_score) == (2.0, 0.5)


def test_add_page_if_not_present_never_replaces():
    m = committed(Model(), ("add_page", Page(A, md5=M1, score=5.0)))
    committed(m, ("add_page_if_not_present", Page(A, md5=M2, score=1.0), Link(M1, A, "x")))
    assert m.get_page(A) == Page(A, md5=M1, score=5.0)
    assert m.num_links == 0  # its link is dropped too


def test_add_page_if_not_present_inserts_new_url_with_its_link():
    m = committed(Model(), ("add_page", Page(A, md5=M1)))
    committed(m, ("add_page_if_not_present", Page(B, score=0.5), Link(M1, B, "to b")))
    assert m.get_page(B) == Page(B, score=0.5)
    assert m.links() == [Link(M1, B, "to b")]


def test_priority_add_page_beats_later_and_earlier_calls_of_lower_opcodes():
    m = committed(
        Model(),
        ("delete_page", A),
        ("add_page_if_not_present", Page(A, md5=M3), Link(M3, A)),
        ("add_page_with_score", Page(A, md5=M2)),
        ("add_page", Page(A, md5=M1)),
        ("add_page", Page(A, md5=M2, num_outlinks=9)),
    )
    assert m.get_page(A) == Page(A, md5=M1)  # first add_page wins
    assert m.num_links == 0  # the if-new edit did not win: its link is not added


def test_priority_with_score_beats_if_new_and_delete():
    m = committed(Model(), ("add_page", Page(A, md5=M1, score=7.0)))
    committed(m, ("delete_page", A), ("add_page_with_score", Page(A, md5=M2, score=1.5)), ("delete_page", A))
    assert m.get_page(A) == Page(A, md5=M2, score=1.5)


def test_if_new_beats_delete_and_then_keeps_the_old_page():
    m = committed(Model(), ("add_page", Page(A, md5=M1)))
    committed(m, ("delete_page", A), ("add_page_if_not_present", Page(A, md5=M2)))
    assert m.get_page(A) == Page(A, md5=M1)


def test_first_if_new_wins_and_only_its_link_is_added():
    m = committed(Model(), ("add_page", Page(A, md5=M1)))
    committed(
        m,
        ("add_page_if_not_present", Page(B, md5=M2), Link(M1, B, "first")),
        ("add_page_if_not_present", Page(B, md5=M3), Link(M1, B, "second")),
    )
    assert m.get_page(B).md5 == M2
    assert m.links() == [Link(M1, B, "first")]


def test_if_new_link_wins_over_add_link_of_the_same_key():
    m = committed(Model(), ("add_page", Page(A, md5=M1)))
    committed(
        m,
        ("add_page_if_not_present", Page(B), Link(M1, B, "ifn")),
        ("add_link", Link(M1, B, "add_link")),
    )
    assert [link.anchor for link in m.links()] == ["ifn"]


def test_delete_page_removes_page_and_its_inlinks():
    m = committed(
        Model(),
        ("add_page", Page(A, md5=M1)),
        ("add_page", Page(B, md5=M2)),
        ("add_link", Link(M1, B)),
        ("add_link", Link(M2, A)),
    )
    assert m.num_links == 2
    committed(m, ("delete_page", B))
    assert m.get_page(B) is None
    assert m.inlinks(B) == []
    assert m.links() == []  # B's inlink dangles; B's outlink lost its last page of M2


def test_abort_discards_the_batch():
    m = committed(Model(), ("add_page", Page(A)))
    m.delete_page(A)
    m.add_page(Page(B))
    m.abort()
    m.commit()
    assert [p.url for p in m.pages()] == [A]


def test_caller_may_reuse_its_objects():
    m = Model()
    p = Page(A, md5=M1)
    m.add_page(p)
    p.md5 = M2
    m.commit()
    assert m.get_page(A).md5 == M1
    m.get_page(A).md5 = M3
    assert m.get_page(A).md5 == M1


# ---- links -----------------------------------------------------------------------------------------


def test_last_add_link_wins_and_anchor_is_truncated_and_flag_recomputed():
    m = Model(anchor_max=5)
    committed(
        m,
        ("add_page", Page(A, md5=M1)),
        ("add_page", Page(B, md5=M2, num_outlinks=3)),
        ("add_link", Link(M1, B, "first", domain_id=1)),
        ("add_link", Link(M1, B, "second anchor", domain_id=2, target_has_outlink=False)),
        ("add_link", Link(M2, A, "x", target_has_outlink=True)),
    )
    assert m.links() == [Link(M2, A, "x", 0, False), Link(M1, B, "secon", 2, True)]


def test_delete_links_applies_before_adds_of_the_same_batch():
    m = committed(
        Model(),
        ("add_page", Page(A, md5=M1)),
        ("add_page", Page(B)),
        ("add_page", Page(C)),
        ("add_link", Link(M1, B, "old")),
    )
    committed(m, ("add_link", Link(M1, C, "new")), ("delete_links", M1))
    assert m.outlinks(M1) == [Link(M1, C, "new")]


def test_md5_change_deletes_old_outlinks():
    m = committed(
        Model(),
        ("add_page", Page(A, md5=M1)),
        ("add_page", Page(B)),
        ("add_link", Link(M1, B)),
    )
    committed(m, ("apply_fetch", FetchResult(A, Status.FETCHED, 1000, md5=M2, num_outlinks=1)))
    assert m.get_page(A).md5 == M2
    assert m.outlinks(M1) == [] and m.num_links == 0


def two_urls_one_md5_linking_c() -> Model:
    """A and B with the same content M1, whose one link goes to C."""
    return committed(
        Model(),
        ("add_page", Page(A, md5=M1)),
        ("add_page", Page(B, md5=M1)),
        ("add_page", Page(C)),
        ("add_link", Link(M1, C)),
    )


def test_md5_change_keeps_links_another_url_holds():
    m = two_urls_one_md5_linking_c()
    committed(m, ("add_page", Page(A, md5=M2)))
    assert keys(m.outlinks(M1)) == [(M1, C)]
    assert [p.url for p in m.get_pages(M1)] == [B]


def test_defect1_deleting_every_page_of_a_multi_page_md5_deletes_its_links():
    m = two_urls_one_md5_linking_c()
    committed(m, ("delete_page", A), ("delete_page", B))
    assert m.links() == [] and m.links_by_md5() == [] and m.num_links == 0


def test_links_from_an_md5_no_page_has_are_dropped():
    m = committed(Model(), ("add_page", Page(A, md5=M1)), ("add_link", Link(M2, A)))
    assert m.num_links == 0


def test_defect3_dangling_links_dropped_whatever_the_target_sorts_as():
    m = committed(
        Model(),
        ("add_page", Page(B, md5=M1)),
        ("add_link", Link(M1, "http://a/")),  # before every page
        ("add_link", Link(M1, "http://b/x")),  # between (B is its prefix)
        ("add_link", Link(M1, "zz://after")),  # after every page
        ("add_link", Link(M1, B)),
    )
    assert keys(m.links()) == [(M1, B)]


def test_target_has_outlink_follows_the_target_page():
    m = committed(
        Model(),
        ("add_page", Page(A, md5=M1)),
        ("add_page", Page(B, md5=M2)),
        ("add_link", Link(M1, B, target_has_outlink=True)),
    )
    assert m.links()[0].target_has_outlink is False
    committed(m, ("apply_fetch", FetchResult(B, Status.FETCHED, 10, md5=M2, num_outlinks=4)))
    assert m.links()[0].target_has_outlink is True
    committed(m, ("add_page", Page(B, md5=M2, num_outlinks=0)))
    assert m.links()[0].target_has_outlink is False


def test_orders_are_encoded_key_orders():
    urls = ["http://a/b/", "http://a/", "http://a/b", "http://a/\u00e9", "http://a/z", "http://a/b\u00ff"]
    m = committed(Model(), *[("add_page", Page(u, md5=M1 if i % 2 else M2)) for i, u in enumerate(urls)])
    by_bytes = sorted(urls, key=lambda u: u.encode())
    assert [p.url for p in m.pages()] == by_bytes
    assert [p.url for p in m.pages_by_md5()] == [u for u in by_bytes if urls.index(u) % 2] + [
        u for u in by_bytes if not urls.index(u) % 2
    ]
    # "http://a/b" (a prefix of "http://a/b/") sorts before it in links too, whatever the from_id.
    committed(m, ("add_link", Link(M2, "http://a/b")), ("add_link", Link(M1, "http://a/b/")))
    assert keys(m.links()) == [(M2, "http://a/b"), (M1, "http://a/b/")]
    committed(m, ("add_link", Link(M1, "http://a/b")))
    assert keys(m.inlinks("http://a/b")) == [(M1, "http://a/b"), (M2, "http://a/b")]
    assert keys(m.links_by_md5()) == [(M1, "http://a/b"), (M1, "http://a/b/"), (M2, "http://a/b")]


# ---- fetch schedule ------------------------------------------------------------------------------


def fetched(m: Model, page: Page | None, *results: FetchResult) -> Page:
    url = results[0].url
    calls = [("add_page_with_score", page)] if page is not None else []
    committed(m, *calls, *[("apply_fetch", r) for r in results])
    return m.get_page(url)


def test_fetch_fetched():
    base = Page(A, retries=2, meta={"a": "1", "b": "2"})
    p = fetched(Model(), base, FetchResult(A, Status.FETCHED, 100, M1, 5, {"b": "3"}))
    iv = DEFAULT_INTERVAL
    assert p == Page(A, M1, Status.FETCHED, 100, 100 + iv, 0, iv, 5, meta={"a": "1", "b": "3"})


def test_fetch_not_modified_keeps_md5_and_outlinks():
    base = Page(A, M1, Status.FETCHED, 50, 60, 1, 10 * DAY, 4)
    p = fetched(Model(), base, FetchResult(A, Status.NOT_MODIFIED, 1000, M2, 9))
    assert p == Page(A, M1, Status.NOT_MODIFIED, 1000, 1000 + 10 * DAY, 0, 10 * DAY, 4)


def test_fetch_retry_then_gone_after_max_retries():
    m = Model(max_retries=2, retry_delay=500)
    base = Page(A, M1, Status.FETCHED, 50, 60, 0, DAY, 3)
    p = fetched(m, base, FetchResult(A, Status.RETRY, 1000))
    assert (p.status, p.retries, p.next_fetch, p.fetch_time, p.md5) == (Status.RETRY, 1, 1500, 50, M1)
    committed(m, ("apply_fetch", FetchResult(A, Status.RETRY, 2000)))
    p = m.get_page(A)
    assert (p.status, p.retries, p.next_fetch) == (Status.RETRY, 2, 2500)
    committed(m, ("apply_fetch", FetchResult(A, Status.RETRY, 3000)))
    p = m.get_page(A)
    assert (p.status, p.retries, p.next_fetch, p.num_outlinks) == (Status.GONE, 3, NEVER, 3)


def test_fetch_gone():
    p = fetched(Model(), Page(A, M1, retries=2), FetchResult(A, Status.GONE, 77, M2))
    assert p == Page(A, M1, Status.GONE, 77, NEVER, 2)


@pytest.mark.parametrize("status", [Status.REDIRECT_TEMP, Status.REDIRECT_PERM])
def test_fetch_redirect(status):
    p = fetched(Model(), Page(A, M1, retries=2, fetch_interval=300), FetchResult(A, status, 1000, M2))
    assert p == Page(A, M1, status, 1000, 1300, 0, 300)


def test_fetch_of_an_absent_url_starts_from_a_new_page():
    p = fetched(Model(default_interval=1234), None, FetchResult(A, Status.REDIRECT_PERM, 10))
    assert p == Page(A, url_md5(A), Status.REDIRECT_PERM, 10, 10 + 1234, 0, 1234)


def test_fetches_apply_in_call_order_after_the_winning_page_call():
    m = committed(Model(), ("add_page", Page(A, score=4.0)))
    committed(
        m,
        ("apply_fetch", FetchResult(A, Status.RETRY, 10)),
        ("add_page", Page(A, retries=5, score=1.0)),
        ("apply_fetch", FetchResult(A, Status.FETCHED, 20, M1, 2)),
    )
    p = m.get_page(A)
    assert (p.retries, p.md5, p.fetch_time, p.score, p.status) == (0, M1, 20, 4.0, Status.FETCHED)


def test_fetch_after_delete_of_the_same_batch_recreates_the_page():
    m = committed(Model(), ("add_page", Page(A, md5=M1, score=3.0)))
    committed(m, ("delete_page", A), ("apply_fetch", FetchResult(A, Status.GONE, 5)))
    assert m.get_page(A) == Page(A, status=Status.GONE, fetch_time=5, next_fetch=NEVER)


def test_adaptive_interval():
    m = Model(adaptive=True, min_interval=100, max_interval=1000, inc_rate=0.5, dec_rate=0.5)
    p = fetched(m, Page(A, M1, fetch_interval=600), FetchResult(A, Status.FETCHED, 0, M1))
    assert (p.fetch_interval, p.next_fetch) == (900, 900)  # same md5: grows
    committed(m, ("apply_fetch", FetchResult(A, Status.NOT_MODIFIED, 1)))
    assert m.get_page(A).fetch_interval == 1000  # clamped to max_interval
    committed(m, *[("apply_fetch", FetchResult(A, Status.FETCHED, 2, md)) for md in (M2, M3, M1)])
    p = m.get_page(A)
    assert (p.fetch_interval, p.next_fetch) == (125, 127)  # 1000 → 500 → 250 → 125 (changed md5s)
    committed(m, ("apply_fetch", FetchResult(A, Status.FETCHED, 3, M3)))
    assert m.get_page(A).fetch_interval == 100  # clamped to min_interval


def test_not_adaptive_keeps_interval():
    p = fetched(Model(), Page(A, M1, fetch_interval=600), FetchResult(A, Status.FETCHED, 0, M2))
    assert p.fetch_interval == 600


def test_bad_fetch_results_rejected():
    m = Model()
    with pytest.raises(BadInput):
        m.apply_fetch(FetchResult(A, Status.FETCHED, 0))
    with pytest.raises(BadInput):
        m.apply_fetch(FetchResult(A, Status.UNFETCHED, 0))


def test_fetch_md5_change_in_a_batch_with_new_outlinks():
    """The update tool's pattern: fetch gives new content, its outlinks are added in the same batch."""
    old = Link(url_md5(A), B, "old")
    m = committed(Model(), ("add_page", Page(A)), ("add_page", Page(B)), ("add_link", old))
    committed(
        m,
        ("apply_fetch", FetchResult(A, Status.FETCHED, 1, M1, 2)),
        ("add_link", Link(M1, B, "new")),
        ("add_page_if_not_present", Page(C), Link(M1, C, "c")),
    )
    assert m.links_by_md5() == [Link(M1, B, "new"), Link(M1, C, "c")]
    assert m.num_pages == 3
