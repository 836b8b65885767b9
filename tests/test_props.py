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
import random
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
from webdb.core.schedule import FetchResult
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


def if_new_args(link: st.SearchStrategy[Link]) -> st.SearchStrategy[tuple[Page, Link | None]]:
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
        st.tuples(st.just("add_page_if_not_present"), if_new_args(link)),
        st.tuples(st.just("delete_page"), st.tuples(urls)),
        st.tuples(st.just("apply_fetch"), st.tuples(fetch_results(md5))),
        st.tuples(st.just("apply_lastmod"), st.tuples(urls, times, times)),
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
            if "level_ratio" in self.SETTINGS:
                r.check()  # every level of every table verified, and the merged view

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
    "k2-adaptive-anchor10": (2, {"adaptive": True, "anchor_max": 10, "min_interval": 2000, "default_interval": 3600}),
    "k5-retries1": (5, {"max_retries": 1, "retry_delay": 77, "default_interval": 7776000}),
    # Levels kept for several batches (never compacted by size, by count after 3 runs), and off.
    "k2-levels": (2, {"level_ratio": 1000.0, "level_runs": 3}),
    "k1-levels-off": (1, {"level_ratio": 0.0}),
    "k3-levels-merged": (3, {"level_ratio": 0.3, "level_runs": 2}),
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
    run_state_machine_as_test(machine(config), settings=_settings(120, 15))


# ---- seeded stress: large batches that spill sorted runs -------------------------------------------


def random_batch(rnd: random.Random, urls: list[str], md5s: list[bytes], held: list[bytes], n: int) -> list:
    """``n`` random writer calls over the given universe (links mostly from ``held`` md5s)."""
    calls: list[tuple[str, tuple]] = []
    sources = (held or md5s) + md5s[:3]
    for _ in range(n):
        op = rnd.choice(
            ["add_page"] * 3 + ["with_score", "if_new", "delete_page", "fetch"] + ["add_link"] * 3 + ["del"]
        )
        url = rnd.choice(urls)
        page = Page(
            url,
            md5=rnd.choice(md5s + [b""]),
            status=rnd.choice(list(Status)),
            num_outlinks=rnd.randrange(3),
            score=rnd.random(),
        )
        link = Link(rnd.choice(sources), rnd.choice(urls), "a" * rnd.randrange(120), rnd.randrange(1 << 40))
        if op == "add_page":
            calls.append(("add_page", (page,)))
        elif op == "with_score":
            calls.append(("add_page_with_score", (page,)))
        elif op == "if_new":
            calls.append(("add_page_if_not_present", (page, rnd.choice([None, dataclasses.replace(link, url=url)]))))
        elif op == "delete_page":
            calls.append(("delete_page", (url,)))
        elif op == "fetch":
            status = rnd.choice(sorted(FETCH_STATUSES))
            md5 = rnd.choice(md5s) if status == Status.FETCHED or rnd.random() < 0.5 else None
            calls.append(("apply_fetch", (FetchResult(url, status, rnd.randrange(1 << 40), md5, rnd.randrange(3)),)))
        elif op == "add_link":
            calls.append(("add_link", (link,)))
        else:
            calls.append(("delete_links", (rnd.choice(sources),)))
    return calls


def stress(tmp: Path, seed: int, k: int, n_urls: int, n_calls: int, batches: int, **extra: object) -> None:
    """Seeded random batches big enough that a 1 MiB writer spills its edits to sorted runs."""
    rnd = random.Random(seed)
    paths = {"/".join(str(rnd.randrange(5)) for _ in range(rnd.randrange(4))) for _ in range(n_urls)}
    urls = sorted(f"http://h{rnd.randrange(20)}/{p}" for p in paths) + ["http://\u00e9/x", "zz://z"]
    md5s = [rnd.randbytes(16) for _ in range(n_urls // 10)] + [url_md5(u) for u in urls[:30]]
    settings = {"memory_mb": 1, "block_size": 512, "default_interval": 5 * DAY, **extra}
    db = webdb.create(str(tmp / f"db-{seed}-{k}"), sections=k, sync=False, **settings)
    m = Model(**settings)
    for _ in range(batches):
        calls = random_batch(rnd, urls, md5s, [p.md5 for p in m.pages()], n_calls)
        with db.writer() as w:
            for name, args in calls:
                getattr(w, name)(*copy.deepcopy(args))
                getattr(m, name)(*copy.deepcopy(args))
        m.commit()
        with db.reader() as r:
            assert_reader_matches(r, m)
            if extra:
                r.check()
    assert m.num_links > 0 and m.num_pages > 0


def test_large_batches_match_model(tmp_path):
    stress(tmp_path, seed=1, k=3, n_urls=1500, n_calls=12000, batches=2)


def test_large_batches_match_model_levels(tmp_path):
    # Runs pile up over four batches (a big ratio), then merge by count (level_runs = 2).
    stress(tmp_path, seed=3, k=2, n_urls=1500, n_calls=8000, batches=4, level_ratio=1000.0, level_runs=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed,k", [(7, 1), (8, 5)])
def test_large_batches_match_model_long(tmp_path, seed, k):
    stress(tmp_path, seed=seed, k=k, n_urls=4000, n_calls=30000, batches=3)
