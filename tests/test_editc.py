"""Step 0's compiled helpers (``sort_records`` of webdb/tables/_blockc_src/sort.c; ``first_if_new``,
``join_run``, ``link_records``, ``urls_ok`` of webdb/writer/_stagesc_src/edits.c) against their
pure-Python references, on random input (hypothesis): the same lists, the same bytes.
tests/test_columns.py checks whole edit files of both paths."""

from __future__ import annotations

import importlib
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webdb.util import sortbuf
from webdb.writer import columns, edits, kernels, writer
from webdb.writer.cascade import join_run
from webdb.writer.columns import link_records_py

np = pytest.importorskip("numpy")
try:
    _blockc = importlib.import_module("webdb.tables._blockc")
except ImportError:
    _blockc = None
try:
    _stagesc = importlib.import_module("webdb.writer._stagesc")
except ImportError:
    _stagesc = None
pytestmark = pytest.mark.skipif(
    _blockc is None or _stagesc is None,
    reason="webdb.tables._blockc or webdb.writer._stagesc is not built (no gcc/python3-dev)",
)

# Records sharing long prefixes (as URLs do), prefixes of each other, zero bytes, duplicates.
_piece = st.sampled_from([b"", b"\x00", b"\xff", b"http://", b"www.a.com/", b"x" * 9, b"\x00" * 8, b"ab"])
_rec = st.lists(_piece | st.binary(max_size=12), max_size=8).map(b"".join)


@given(st.lists(_rec, max_size=300))
def test_sort_records_equals_list_sort(recs: list[bytes]) -> None:
    got = list(recs)
    _blockc.sort_records(got)
    assert got == sorted(recs)
    got = sorted(recs) + recs[:1]  # sorted but for the last: the sorted-already check stops there
    _blockc.sort_records(got)
    assert got == sorted(recs + recs[:1])


def test_sort_records_of_long_shared_prefixes() -> None:
    """Records alike for 5000 bytes and more: the levels give way to whole compares."""
    base = b"p" * 5000
    recs = [base + bytes([i % 7]) * (i % 40) + bytes([i % 251]) for i in range(3000)]
    recs += [base[: 4090 + i % 20] for i in range(50)]
    got = list(reversed(recs))
    _blockc.sort_records(got)
    assert got == sorted(recs)


def test_sort_records_refuses_what_is_not_bytes() -> None:
    recs = [b"b", bytearray(b"a"), b"c"]
    sortbuf.sort_records(recs)  # the wrapper then sorts as list.sort does
    assert recs == [b"a", b"b", b"c"]
    with pytest.raises(TypeError, match="item 1 is str"):
        _blockc.sort_records([b"a", "b"])
    with pytest.raises(TypeError, match="needs a list"):
        _blockc.sort_records((b"a",))


@st.composite
def edit_records(draw) -> list[bytes]:
    """Sorted edit records (key, seq, value, u16 key length), keys ending in an op code."""
    out = []
    for _ in range(draw(st.integers(0, 60))):
        url = draw(st.sampled_from([b"http://a/", b"http://b/x", b"http://c/"]))
        op = draw(st.sampled_from([edits.OP_IF_NEW, edits.OP_FETCH, edits.OP_ADD, edits.OP_DEL]))
        key = url + b"\x00" + bytes((op,))
        seq = draw(st.integers(0, 1 << 30)).to_bytes(8, "big")
        out.append(key + seq + draw(st.binary(max_size=5)) + (len(key) + 8).to_bytes(2, "little"))
    return sorted(out)


@given(edit_records())
def test_first_if_new_equals_the_python_filter(recs: list[bytes]) -> None:
    assert _stagesc.first_if_new(recs, edits.OP_IF_NEW) == list(writer.first_if_new_only_py(recs))
    assert writer.first_if_new_only(recs) == list(writer.first_if_new_only_py(iter(recs)))


def test_first_if_new_refuses_what_is_not_an_edit_record() -> None:
    with pytest.raises(ValueError, match="item 0 is not an edit record"):
        _stagesc.first_if_new([b"\xff\xff"], edits.OP_IF_NEW)


@given(st.lists(st.binary(max_size=300), max_size=40), st.integers(-3, 45), st.integers(-3, 45))
def test_join_run_equals_join_and_lengths(recs: list[bytes], lo: int, hi: int) -> None:
    lo, hi = max(lo, 0), max(hi, 0)
    part = recs[lo:hi]
    want = (b"".join(part), [x for r in part for x in (len(r), 0)])
    assert _stagesc.join_run(recs, lo, hi) == want
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels, "stagesc", None)
        assert join_run(recs, lo, hi) == want


@st.composite
def link_blocks(draw):
    """A fetch block's outlink columns as _fetch_block hands them over."""
    rows = draw(st.integers(0, 6))
    counts = [draw(st.integers(0, 5)) for _ in range(rows)]
    data = bytearray()
    us, ue, as_, ae = [], [], [], []
    for _ in range(sum(counts)):
        u, a = draw(st.binary(min_size=1, max_size=40)), draw(st.binary(max_size=30))
        us.append(len(data))
        data += u
        ue.append(len(data))
        as_.append(len(data))
        data += a
        ae.append(len(data))
    md5s = [draw(st.binary(min_size=16, max_size=16)) for _ in range(rows)]
    tail = draw(st.binary(min_size=1, max_size=20))
    seqs = [draw(st.integers(0, (1 << 39) - 100)) for _ in range(rows)]
    arr = lambda x: np.asarray(x, np.int64)  # noqa: E731
    return (bytes(data), arr(us), arr(ue), arr(as_), arr(ae), arr(counts), md5s, [tail] * rows, arr(seqs))


@given(link_blocks(), st.binary(min_size=3, max_size=3), st.binary(max_size=20))
def test_link_records_equal_the_python_records(cols, prefix: bytes, link_pre: bytes) -> None:
    args = (*cols, b"\x00\x03" + prefix, b"\x00" + prefix, link_pre)
    assert _stagesc.link_records(*args) == link_records_py(*args)


def test_link_records_refuse_offsets_outside_the_data() -> None:
    a = lambda *x: np.asarray(x, np.int64)  # noqa: E731
    with pytest.raises(ValueError, match="link 0 has offsets outside the data"):
        _stagesc.link_records(b"abc", a(0), a(9), a(0), a(1), a(1), [b"m" * 16], [b"t"], a(5), b"", b"", b"")
    with pytest.raises(ValueError, match="counts must be 1 int64"):
        _stagesc.link_records(b"abc", a(0), a(1), a(0), a(1), array("i", [1]), [b"m" * 16], [b"t"], a(5), b"", b"", b"")


@given(
    st.lists(
        st.sampled_from([b"a", b":", b"/", b"://", b" ", b"\x7f", b"\xc3\xa9", b"http://", b"x" * 30]), max_size=40
    ),
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=8),
    st.integers(0, 40),
)
def test_urls_ok_equals_the_numpy_checks(pieces: list[bytes], slices: list[tuple[int, int]], max_url: int) -> None:
    data = b"".join(pieces)
    starts = [min(a, len(data)) for a, _ in slices]
    us = np.asarray(starts, np.int64)
    ue = np.asarray([min(a + n, len(data)) for a, (_, n) in zip(starts, slices)], np.int64)
    buf = np.frombuffer(data, np.uint8)
    want = columns.link_urls_ok(buf, us, ue, max_url)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels, "stagesc", None)
        assert columns.link_urls_ok(buf, us, ue, max_url) == want
    assert _stagesc.urls_ok(buf, us, ue, max_url) == want
