"""Stages 1 and 2's fast paths against their references, on random inputs: ``_url_groups``
(stage 1's groups, a lone if-new edit as its record) against ``_groups``, ``merge_points`` with
``if_absent`` (a stored key's record left without a call) against the same merge with a
``combine`` that returns the old value, and ``merge_chunk_lists`` against ``sorted``."""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

import pytest

from webdb.errors import CorruptionError
from webdb.tables.format import KIND_EDITS
from webdb.tables.merge import MergeCursor
from webdb.tables.table import TableReader, TableWriter
from webdb.util.sortbuf import merge_chunk_lists
from webdb.writer import cascade, edits


def _edit_files(tmp_path, rng: random.Random, nfiles: int, urls: list[bytes]) -> list[str]:
    """Sorted stage-1 edit files (edits.pack layout) over ``urls``: mostly if-new edits, some
    adds, fetches and deletes, several per url across files."""
    paths, seq = [], 0
    ops = [edits.OP_IF_NEW] * 6 + [edits.OP_ADD, edits.OP_FETCH, edits.OP_DEL, edits.OP_MARK]
    for f in range(nfiles):
        recs = []
        for u in rng.sample(urls, rng.randint(0, len(urls))):
            seq += 1
            val = bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
            recs.append(
                edits.pack(
                    edits.pages_by_url_edit_key(u, rng.choice(ops)), b"\x01\x00\x00" + seq.to_bytes(5, "big"), val
                )
            )
        recs.sort()
        p = os.path.join(tmp_path, f"e{f}.edits")
        w = TableWriter(p, KIND_EDITS, block_size=rng.choice([64, 256, 4096]), sync=False)
        w.add_many(recs, [b""] * len(recs))
        w.close()
        paths.append(p)
    return paths


def _expand(g):
    url, group = g
    return url, [cascade._lone_if_new(group)] if type(group) is bytes else group


def _first_if_new_only(g):
    """A reference group as ``_url_groups`` cuts it: one that starts with an if-new edit keeps
    only that one of its if-new edits."""
    url, group = g
    if group[0][0] == edits.OP_IF_NEW:
        group = group[:1] + [e for e in group[1:] if e[0] != edits.OP_IF_NEW]
    return url, group


@pytest.mark.parametrize("seed", range(40))
def test_url_groups_equal_groups(tmp_path, seed):
    rng = random.Random(seed)
    urls = sorted({bytes(rng.choice(b"abc/.") for _ in range(rng.randint(1, 5))) for _ in range(60)})
    job = SimpleNamespace(inputs=_edit_files(tmp_path, rng, rng.randint(1, 4), urls))
    fast, ref = list(cascade._url_groups(job)), list(cascade._groups(job))
    assert [_expand(g) for g in fast] == [_first_if_new_only(g) for g in ref]
    # A group of if-new edits only is its first record; every other group a list.
    for (_, g), (_, r) in zip(fast, ref):
        assert (type(g) is bytes) == all(e[0] == edits.OP_IF_NEW for e in r)


@pytest.mark.parametrize("seed", range(60))
def test_page_after_applies_the_first_if_new_only(seed):
    """What ``_url_groups`` relies on: the if-new edits after a group's first edit change
    nothing, whatever the page (stored or not) and the rest of the group."""
    from webdb.core.schedule import Schedule
    from webdb.tables.records import Page

    rng = random.Random(seed)
    url = b"http://h%d/p" % rng.randrange(5)
    stored = Page(url.decode(), score=rng.random()).encode_value() if rng.random() < 0.5 else None
    fetch = cascade.encode_fetch(cascade.FetchResult(url.decode(), 1, 10**9 + rng.randrange(99), os.urandom(16), 3))
    page = Page(url.decode(), score=rng.random()).encode_value()
    ifnew = [(edits.OP_IF_NEW, edits.if_new_value(page, os.urandom(16), os.urandom(rng.randrange(4))))]
    ifnew += [(edits.OP_IF_NEW, edits.if_new_value(page[:-1] + b"x")) for _ in range(rng.randint(1, 3))]
    first = [(rng.choice([edits.OP_ADD, edits.OP_DEL]), page)] if rng.random() < 0.3 else []
    tail = [(edits.OP_FETCH, fetch)] if rng.random() < 0.5 else []
    group = first + ifnew + tail
    short = first + (ifnew if first else ifnew[:1]) + tail
    assert cascade._page_after(url, stored, group, Schedule()) == cascade._page_after(url, stored, short, Schedule())


def _merge(tmp_path, name, old: list[tuple[bytes, bytes]], groups, if_absent, bs: int) -> bytes:
    src = os.path.join(tmp_path, "old.pages")
    if not os.path.exists(src):
        w = TableWriter(src, 1, block_size=bs, sync=False)
        w.add_many([k for k, _ in old], [v for _, v in old])
        w.close()
    path = os.path.join(tmp_path, name)
    t = TableReader(src)
    out = TableWriter(path, 1, block_size=bs, sync=False)

    def combine(k, ov, payload):
        if type(payload) is bytes:  # an if-new edit: the old value itself where stored
            return ov if ov is not None else payload
        return payload[0] if payload else None

    cur = MergeCursor(t, out)
    cur.merge_points(groups, combine, if_absent)
    cur.finish()
    out.close()
    t.close()
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("seed", range(40))
def test_merge_points_if_absent_equals_combine(tmp_path, seed):
    rng = random.Random(seed)
    keys = sorted({bytes(rng.randrange(97, 100) for _ in range(rng.randint(1, 6))) for _ in range(300)})
    old = [(k, os.urandom(rng.randint(0, 20))) for k in keys if rng.random() < 0.6]
    groups = []
    for k in keys:
        r = rng.random()
        if r < 0.5:
            groups.append((k, os.urandom(rng.randint(0, 9))))  # if-new: stored keys unchanged
        elif r < 0.7:
            groups.append((k, [os.urandom(rng.randint(0, 9))] if rng.random() < 0.8 else []))
    bs = rng.choice([64, 200, 1024])
    ref = _merge(tmp_path, "ref.pages", old, groups, None, bs)
    assert _merge(tmp_path, "fast.pages", old, groups, bytes, bs) == ref


def test_merge_points_if_absent_still_checks_order(tmp_path):
    old = [(b"a%03d" % i, b"v") for i in range(50)]
    with pytest.raises(CorruptionError, match="edits out of order"):
        _merge(tmp_path, "bad.pages", old, [(b"a010", b"x"), (b"a005", b"y")], bytes, 128)


@pytest.mark.parametrize("seed", range(30))
def test_merge_chunk_lists_sorted_lists(seed):
    rng = random.Random(seed)
    sources, every = [], []
    for s in range(rng.randint(0, 5)):
        recs = sorted({bytes(rng.randrange(3) for _ in range(rng.randint(0, 4))) + bytes((s,)) for _ in range(60)})
        every += recs
        chunks, i = [], 0
        while i < len(recs):
            n = rng.randint(0, 9)
            chunks.append(recs[i : i + n])
            i += n
        sources.append(iter(chunks))
    lists = list(merge_chunk_lists(sources))
    assert all(lists) and all(c == sorted(c) for c in lists)
    assert [r for c in lists for r in c] == sorted(every)
