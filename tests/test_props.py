"""Property tests: random batches of writer calls, run against webdb and the reference model.

A hypothesis state machine draws writer calls from a small universe (URLs with shared prefixes
and URLs that are prefixes of others, non-ASCII URLs, a URL that sorts after every other one;
a few md5s, some of them ``url_md5`` of universe URLs, spread over the md5 sections) so that
md5s collide across pages, links dangle and the priority and keep-score rules all fire.  Each
step draws one batch of up to 12 calls and commits it, aborts it (an exception inside the
``with`` block), or reopens the database.  Link sources are drawn mostly from md5s pages hold
now, so links survive.  After every batch every table is compared in full with the model, every point
lookup of the universe is compared, and ``check()`` must pass.  While the batch is open a fresh
reader must still see the previous state, and a reader opened before a commit keeps seeing the
generation it opened.

Sections k = 1, 2 and 5 with 256-byte blocks, so lookups and merges cross block boundaries.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    rule,
    run_state_machine_as_test,
)
from model import FETCH_STATUSES, Model, assert_reader_matches

import webdb
from webdb.schedule import FetchResult
from webdb.tables.records import DAY, Link, Page, Status, url_md5

URLS = [
    "a://before",
    "http://a",
    "http://a/",
    "http://a/b",
    "http://a/b/",
    "http://a/b/c",
    "http://a/bc",
    "http://a/b\u00ff",
    "http://a/\u00e9t\u00e9",
    "http://\u65e5\u672c.jp/",
    "https://a/",
    "zz://after",
]
OTHER_URLS = ["http://a/b/c/d", "http://nowhere/"]  # looked up, never written
MD5S = [
    b"\x00" * 16,
    b"\x3f" + b"\xff" * 15,
    b"\x40" + b"\x00" * 15,
    b"\x80" * 16,
    b"\xff" * 16,
    url_md5("http://a/"),
    url_md5("http://a/b"),
    url_md5("zz://after"),
]

urls = st.sampled_from(URLS)
md5s = st.sampled_from(MD5S)
small_text = st.text(max_size=4)
metas = st.dictionaries(small_text, small_text, max_size=2)
anchors = st.one_of(st.just(""), st.text(max_size=8), st.text(min_size=15, max_size=40))
times = st.integers(0, 2**40)

pages = st.builds(
    Page,
    url=urls,
    md5=st.one_of(md5s, st.just(b"")),  # b"" → url_md5(url), the unfetched md5
    status=st.sampled_from(list(Status)),
    fetch_time=times,
    next_fetch=times,
    retries=st.integers(0, 4),
    fetch_interval=st.sampled_from([1000, DAY, 30 * DAY]),
    num_outlinks=st.integers(0, 2),
    score=st.floats(-10, 10, allow_nan=False),
    next_score=st.floats(-10, 10, allow_nan=False),
    meta=metas,
)
domain_ids = st.integers(-(2**63), 2**63 - 1)


def fetch_results(md5: st.SearchStrategy) -> st.SearchStrategy[FetchResult]:
    @st.composite
    def draw_result(draw) -> FetchResult:
        status = draw(st.sampled_from(sorted(FETCH_STATUSES)))
        return FetchResult(
            url=draw(urls),
            status=status,
            fetch_time=draw(times),
            md5=draw(md5) if status == Status.FETCHED else draw(st.one_of(st.none(), md5)),
            num_outlinks=draw(st.integers(0, 2)),
            meta=draw(st.one_of(st.none(), metas)),
        )

    return draw_result()


def ifn_args(link: st.SearchStrategy[Link]) -> st.SearchStrategy[tuple[Page, Link | None]]:
    """A page and an optional link to it (the link of add_page_if_not_present points to its page)."""

    def with_link(page: Page) -> st.SearchStrategy:
        return st.tuples(st.just(page), st.one_of(st.none(), link.map(lambda x: dataclasses.replace(x, url=page.url))))

    return pages.flatmap(with_link)


def batch_calls(held: list[bytes]) -> st.SearchStrategy[list[tuple[str, tuple]]]:
    """One batch of writer calls.  ``held``: md5s pages hold now; links are drawn mostly from
    them so that they survive the garbage collection of links of content no page carries."""
    md5 = st.sampled_from(sorted(set(MD5S) | set(held)))
    link = st.builds(
        Link, from_id=md5, url=urls, anchor=anchors, domain_id=domain_ids, target_has_outlink=st.booleans()
    )
    call = st.one_of(
        st.tuples(st.just("add_page"), st.tuples(pages)),
        st.tuples(st.just("add_page_with_score"), st.tuples(pages)),
        st.tuples(st.just("add_page_if_not_present"), ifn_args(link)),
        st.tuples(st.just("delete_page"), st.tuples(urls)),
        st.tuples(st.just("apply_fetch"), st.tuples(fetch_results(md5))),
        st.tuples(st.just("add_link"), st.tuples(link)),
        st.tuples(st.just("add_link"), st.tuples(link)),
        st.tuples(st.just("delete_links"), st.tuples(md5)),
    )
    return st.lists(call, max_size=12)


class _Abort(Exception):
    """Raised inside a writer's ``with`` block to abort the batch."""


class WebDBVersusModel(RuleBasedStateMachine):
    """One database and one model fed the same batches.  Subclasses set K and SETTINGS."""

    K = 1
    SETTINGS: dict = {}

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="webdb-props-"))
        self.path = self.tmp / "db"
        self.db = webdb.create(str(self.path), sections=self.K, block_size=256, sync=False, **self.SETTINGS)
        self.model = Model(**self.SETTINGS)

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _matches(self) -> None:
        with self.db.reader() as r:
            assert_reader_matches(r, self.model, URLS + OTHER_URLS, MD5S)

    def _run(self, w, calls) -> None:
        for name, args in calls:
            getattr(w, name)(*copy.deepcopy(args))
            getattr(self.model, name)(*copy.deepcopy(args))
        self._matches()  # nothing of the open batch is visible yet

    @rule(data=st.data())
    def commit(self, data):
        calls = data.draw(batch_calls([p.md5 for p in self.model.pages()]), label="calls")
        before, snapshot = copy.deepcopy(self.model), self.db.reader()
        try:
            with self.db.writer() as w:
                self._run(w, calls)
            self.model.commit()
            self._matches()
            # A reader opened before the commit still reads the generation it opened.
            assert_reader_matches(snapshot, before, URLS + OTHER_URLS, MD5S)
        finally:
            snapshot.close()

    @rule(data=st.data())
    def abort(self, data):
        calls = data.draw(batch_calls([p.md5 for p in self.model.pages()]), label="calls")
        with pytest.raises(_Abort):
            with self.db.writer() as w:
                self._run(w, calls)
                raise _Abort
        self.model.abort()
        self._matches()

    @rule()
    def reopen(self):
        self.db = webdb.open(str(self.path))
        self._matches()


CONFIGS = {
    "k1": (1, {}),
    "k2-adaptive-anchor10": (2, {"adaptive": True, "anchor_max": 10, "min_interval": 2000}),
    "k5-retries1": (5, {"max_retries": 1, "retry_delay": 77}),
}


def machine(name: str) -> type[WebDBVersusModel]:
    k, extra = CONFIGS[name]
    return type(f"WebDBVersusModel_{name}", (WebDBVersusModel,), {"K": k, "SETTINGS": extra})


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_webdb_matches_model(config):
    run_state_machine_as_test(machine(config), settings=_settings(50, 10))


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_webdb_matches_model_long(config):
    run_state_machine_as_test(machine(config), settings=_settings(300, 20))
