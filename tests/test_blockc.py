"""The compiled block codec (webdb/tables/_blockc_src/) against its pure-Python reference.

- hypothesis: on random blocks (empty values, one record, large records, keys that are
  prefixes of others) and on blocks with garbage offsets, every C function returns what the
  Python code of webdb/tables/block.py returns, and both build the same bytes;
- damaged and truncated table files give the same outcomes — the same CorruptionError, naming
  file, block and offset — under the compiled codec and under ``WEBDB_PURE_PYTHON=1``;
- the table, lookup and fuzz tests run again in a child pytest with ``WEBDB_PURE_PYTHON=1``, so
  the fallback passes the same tests (the main run exercises the compiled codec);
- under CI (``CI=true``, as .ci/run sets) the compiled module must be importable: ``make deps``
  installs gcc and the Python headers, so CI always exercises it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import zlib
from array import array
from itertools import accumulate
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webdb.errors import CorruptionError
from webdb.tables import block
from webdb.tables.format import KIND_PAGES_BY_URL
from webdb.tables.table import BlockCache, TableReader, TableWriter

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

try:
    _blockc = importlib.import_module("webdb.tables._blockc")
except ImportError:
    _blockc = None
needs_c = pytest.mark.skipif(_blockc is None, reason="webdb.tables._blockc is not built (no gcc/python3-dev)")


def test_compiled_codec_is_built_under_ci():
    if _blockc is None and not os.environ.get("CI"):
        pytest.skip("not built here; CI (make deps installs gcc and python3-dev) requires it")
    assert _blockc is not None, "CI must build webdb.tables._blockc: `make deps` installs gcc and python3-dev"
    assert block.COMPILED == (os.environ.get("WEBDB_PURE_PYTHON", "") in ("", "0"))


def _env(pure: bool) -> dict[str, str]:
    env = dict(os.environ, WEBDB_PURE_PYTHON="1" if pure else "0")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.timeout(120)
def test_env_selects_the_implementation():
    code = (
        "from webdb.tables import block; "
        "print(block.COMPILED, type(block.unpack_block(block.encode_block([b'k'], [b'v'], 0), 'x')).__name__)"
    )
    for pure, want in (
        (True, "False RawBlock"),
        (False, f"{_blockc is not None} {'_CRawBlock' if _blockc else 'RawBlock'}"),
    ):
        out = subprocess.run([sys.executable, "-c", code], env=_env(pure), capture_output=True, text=True, check=True)
        assert out.stdout.split() == want.split()


# ---- C against Python on random blocks -----------------------------------------------------

_bytes = st.binary(max_size=40) | st.sampled_from([b"", b"a", b"ab", b"a\x00", b"\xff" * 3])
_large = st.binary(min_size=1000, max_size=70000)


@st.composite
def records(draw) -> tuple[list[bytes], list[bytes]]:
    keys = sorted(set(draw(st.lists(_bytes | st.just(b"x" * 3000), max_size=60))))
    vals = [draw(_bytes | _large) if draw(st.integers(0, 20)) == 0 else draw(_bytes) for _ in keys]
    return keys, vals


def _py_block(raw: bytes) -> block.RawBlock:
    """A RawBlock over ``raw`` as unpack_block builds it, without its checks (offsets may be garbage)."""
    n = int.from_bytes(raw[-4:], "little")
    offs = array("I")
    offs.frombytes(raw[len(raw) - 4 - 8 * n : len(raw) - 4])
    if sys.byteorder == "big":
        offs.byteswap()
    return block.RawBlock(raw, offs[:n], offs[n:], n)


def _py_index_entries(raw: bytes, size: int):
    """``block.index_entries``'s Python code over ``raw``."""
    if block.blockc is None:
        return block.index_entries(_py_block(raw), size)
    keys, vals = _py_block(raw).split()
    if vals and min(map(len, vals)) < size:
        return None
    return keys, [v[size:] for v in vals], b"".join([v[:size] for v in vals])


def _same_reads(raw: bytes, probes: list[bytes], ranges: list[tuple[int, int | None]]) -> None:
    py = _py_block(raw)
    n = py.n
    assert _blockc.keys(raw, n) == py.keys()
    assert _blockc.lens(raw, n) == py.lens()
    assert _blockc.split(raw, n) == py.split()
    for k in probes:
        assert _blockc.find(raw, n, k) == py.find(k)
        assert _blockc.get(raw, n, k) == py.get(k)
    for lo, hi in ranges:
        assert _blockc.split(raw, n, lo, hi) == py.split(lo, hi)
        if hi is not None:
            assert _blockc.values(raw, n, lo, hi) == py.values(lo, hi)


@needs_c
@given(records(), st.lists(_bytes, max_size=10), st.data())
def test_c_and_python_agree_on_random_blocks(recs, probes, data):
    keys, vals = recs
    raw = _blockc.build(keys, vals)
    assert raw == block.build_py(keys, vals)
    lens = [len(x) for kv in zip(keys, vals) for x in kv]
    assert _blockc.build_run(b"".join(x for kv in zip(keys, vals) for x in kv), lens) == block.build_run_py(
        b"".join(x for kv in zip(keys, vals) for x in kv), lens
    )
    n = len(keys)
    ranges = [(data.draw(st.integers(0, n)), data.draw(st.none() | st.integers(0, n + 2))) for _ in range(4)]
    _same_reads(raw, keys + probes + [k + b"\x00" for k in keys[:5]], ranges)
    for size in (0, 1, 3, 16):
        assert _blockc.index_entries(raw, n, size) == _py_index_entries(raw, size)
    rb = block.unpack_block(block.encode_block(keys, vals, block.CODECS["lz4"]), "t")
    assert rb.split() == (keys, vals)


@needs_c
@given(st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=24), st.lists(_bytes, max_size=6), st.data())
def test_c_and_python_agree_on_garbage_offsets(body, offsets, probes, data):
    """Offsets out of order or past the end (a crafted block whose total still matches) read
    the same clamped slices in C as in Python, and never outside the block."""
    n = len(offsets) // 2
    raw = body + array("I", offsets[: 2 * n]).tobytes() + n.to_bytes(4, "little")
    ranges = [(data.draw(st.integers(0, n)), data.draw(st.none() | st.integers(0, n + 2))) for _ in range(3)]
    _same_reads(raw, probes, ranges)
    for size in (0, 2, 16):
        assert _blockc.index_entries(raw, n, size) == _py_index_entries(raw, size)


@needs_c
def test_c_refuses_what_python_cannot_encode():
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        _blockc.build([b"a", b"b"], [b""])
    with pytest.raises(ValueError, match="odd number"):
        _blockc.build_run(b"abc", [1, 2, 3])
    with pytest.raises(ValueError, match="record count 9 does not fit"):
        _blockc.get(b"\x00" * 8, 9, b"k")
    with pytest.raises(TypeError):
        _blockc.get(bytearray(8), 0, b"k")
    with pytest.raises(TypeError, match="lens must hold ints"):
        _blockc.build_run(b"ab", [1, 1.0])
    for build_run in (_blockc.build_run, block.build_run_py):
        with pytest.raises(OverflowError):
            build_run(b"ab", [-1, 2])  # a negative offset, as array("I") refuses it


@needs_c
def test_c_builds_from_any_bytes_like_item():
    keys, vals = [b"a", b"bb", b"c"], [b"", b"x" * 5, b"yz"]
    want = block.build_py(keys, vals)
    assert _blockc.build([bytearray(k) for k in keys], [memoryview(v) for v in vals]) == want
    assert _blockc.build(tuple(keys), tuple(vals)) == want
    assert _blockc.build_run(bytearray(b"".join(k + v for k, v in zip(keys, vals))), [1, 0, 2, 5, 1, 2]) == (
        block.build_run_py(b"".join(k + v for k, v in zip(keys, vals)), [1, 0, 2, 5, 1, 2])
    )


# ---- the read path of a lookup: unpack_range, merge, links ---------------------------------


@needs_c
@given(records(), st.lists(_bytes, min_size=2, max_size=6), st.sampled_from(["none", "lz4", "zlib"]))
def test_c_unpack_range_equals_unpack_split(recs, probes, codec):
    keys, vals = recs
    data = block.encode_block(keys, vals, block.CODECS[codec])
    py = _py_block(block.build_py(keys, vals))
    got = _blockc.unpack(data, zlib.crc32, block.lz4_decompress)
    if codec == "zlib":
        assert got is None  # left to the Python code
        return
    assert got == (py.raw, py.n)
    for a, b in zip(probes, probes[1:]):
        want = py.split(py.find(a), py.find(b))
        assert _blockc.unpack_range(data, zlib.crc32, block.lz4_decompress, a, b) == (*want, py.n)
        assert block.unpack_range(data, a, b) == (*want, py.n)
    # A damaged block is declined (unpack_block then names the fault), never misread.
    for i in range(0, len(data), max(1, len(data) // 7)):
        bad = bytearray(data)
        bad[i] ^= 0x10
        assert _blockc.unpack(bytes(bad), zlib.crc32, block.lz4_decompress) is None
        assert _blockc.unpack_range(bytes(bad), zlib.crc32, block.lz4_decompress, b"", b"\xff") is None
    assert _blockc.unpack(data[:-1], zlib.crc32, block.lz4_decompress) is None
    assert _blockc.unpack(b"", zlib.crc32, block.lz4_decompress) is None


def _lz4_called(v):
    """lz4.block.decompress called as a Python callable (the C code calls LZ4 directly only for
    that very function object)."""
    import lz4.block

    return lz4.block.decompress(v)


@needs_c
def test_lz4_is_called_directly_where_the_package_exports_it():
    import lz4.block
    from lz4.block import _block

    assert _blockc.use_lz4(lz4.block.decompress, _block.__file__) is True
    assert _blockc.use_lz4(lz4.block.decompress, "/nonexistent/lz4.so") is False  # the call stays as it was


@needs_c
@given(records(), st.data())
def test_direct_lz4_gives_what_the_callable_gives(recs, data):
    """The direct call of LZ4_decompress_safe (block.py's default) and lz4.block.decompress as a
    Python callable agree on every block: sound ones (the same raw bytes), and lz4 streams that
    are cut, extended, or whose size header lies, resealed with a good checksum (both decline,
    so the Python code names the fault)."""
    import lz4.block

    keys, vals = recs
    raw = block.build_py(keys, vals)
    c = lz4.block.compress(raw, store_size=True)
    size = int.from_bytes(c[:4], "little")
    cut = data.draw(st.integers(0, len(c)))
    bodies = [
        c,
        c[:cut],
        c + data.draw(st.binary(max_size=8)),
        (size + data.draw(st.integers(1, 70000))).to_bytes(4, "little") + c[4:],
        max(size - 1, 0).to_bytes(4, "little") + c[4:],
        (0x80000000 | size).to_bytes(4, "little") + c[4:],
        data.draw(st.binary(max_size=40)),
    ]
    for body in bodies:
        sealed = _resealed(body, block.CODEC_LZ4)
        want = _blockc.unpack(sealed, zlib.crc32, _lz4_called)
        assert _blockc.unpack(sealed, zlib.crc32, lz4.block.decompress) == want
        for a, b in ((b"", b"\xff"), (keys[0], keys[-1]) if keys else (b"a", b"b")):
            assert _blockc.unpack_range(sealed, zlib.crc32, lz4.block.decompress, a, b) == _blockc.unpack_range(
                sealed, zlib.crc32, _lz4_called, a, b
            )
    body = _blockc.seal_pieces(raw, lz4.block.compress, 16, zlib.crc32)
    if body is not None:  # lz4 pieces: the same, piece by piece
        i = data.draw(st.integers(0, len(body) - 1))
        for b in (body, body[:i] + bytes([body[i] ^ 0x10]) + body[i + 1 :]):
            sealed = _resealed(b)
            want = _blockc.unpack_pieces(sealed, zlib.crc32, _lz4_called)
            assert _blockc.unpack_pieces(sealed, zlib.crc32, lz4.block.decompress) == want
            got = _blockc.unpack_range_pieces(sealed, zlib.crc32, lz4.block.decompress, b"", b"\xff")
            assert got == _blockc.unpack_range_pieces(sealed, zlib.crc32, _lz4_called, b"", b"\xff")


_level = st.dictionaries(st.binary(max_size=3), st.binary(max_size=5), max_size=12)


@needs_c
@given(st.lists(st.tuples(_level, st.booleans(), st.lists(st.booleans(), min_size=12, max_size=12)), max_size=5))
def test_c_merge_equals_a_dict_model(levels):
    """Newest first; a level with ops holds PUT + value or DEL (chosen by the booleans)."""
    parts, model = [], {}
    for recs, ops, dels in levels:
        ks = sorted(recs)
        vs = [(b"\x00" if d else b"\x01" + recs[k]) if ops else recs[k] for k, d in zip(ks, dels)]
        parts.append((ks, vs, ops))
    for ks, vs, ops in reversed(parts):  # oldest first, newer versions overwrite
        for k, v in zip(ks, vs):
            if not ops:
                model[k] = v
            elif v[:1] == b"\x01":
                model[k] = v[1:]
            else:
                model.pop(k, None)
    want = sorted(model)
    assert _blockc.merge(parts) == (want, [model[k] for k in want])
    assert block.merge_sorted(parts) == (want, [model[k] for k in want])
    # As a run for TableWriter.add_run: the same records, keys and values back to back.
    assert block.merge_run(parts, False) == _as_run(want, [model[k] for k in want])
    kept: dict[bytes, bytes] = {}  # runs merged into a run: the newest record as it is
    for ks, vs, _ops in reversed(parts):
        kept.update(zip(ks, vs))
    assert block.merge_run(parts, True) == _as_run(sorted(kept), [kept[k] for k in sorted(kept)])


@needs_c
@given(
    st.lists(st.tuples(_level, st.booleans(), st.lists(st.booleans(), min_size=12, max_size=12)), max_size=4),
    _level,
    st.booleans(),
)
def test_c_merge_block_equals_merge_run_of_the_split_block(levels, base, keep):
    """A compaction's base block read in place gives merge_run's run of the block's records."""
    parts = []
    for recs, ops, dels in levels:
        ks = sorted(recs)
        vs = [(b"\x00" if d else b"\x01" + recs[k]) if ops else recs[k] for k, d in zip(ks, dels)]
        parts.append((ks, vs, ops))
    bk = sorted(base)
    bv = [base[k] for k in bk]
    raw = _blockc.build(bk, bv)
    assert _blockc.merge_block(raw, len(bk), parts, keep) == _blockc.merge_run(parts + [(bk, bv, False)], keep)
    assert block.merge_block(raw, len(bk), parts, keep) == block.merge_run(parts + [(bk, bv, False)], keep)


@needs_c
def test_c_merge_block_declines_an_unsound_block():
    good = _blockc.build([b"a", b"b"], [b"1", b"2"])
    assert _blockc.merge_block(good, 2, [([b"a"], [b"\x00"], True)], False) == (b"b2", [1, 1])
    unsorted = _blockc.build([b"b", b"a"], [b"1", b"2"])
    assert _blockc.merge_block(unsorted, 2, [], False) is None  # keys out of order
    dup = _blockc.build([b"a", b"a"], [b"1", b"2"])
    assert _blockc.merge_block(dup, 2, [], False) is None
    bad = bytearray(good)
    bad[-12:-8] = (200).to_bytes(4, "little")  # a record end past the records
    assert _blockc.merge_block(bytes(bad), 2, [], False) is None
    assert _blockc.merge_block(good, 2, [([b"a"], [b"\x02x"], True)], False) is None  # a bad op byte
    assert _blockc.merge_block(good, 2, [([b"a"], [b"1"], False)] * 64, False) is None  # too many levels
    with pytest.raises(ValueError):
        _blockc.merge_block(good, 3, [], False)  # more records than the block holds


@needs_c
@given(
    st.lists(st.tuples(_level, st.lists(st.booleans(), min_size=12, max_size=12), st.integers(1, 4)), max_size=4),
    _level,
)
def test_c_merge_segs_equals_merge_block_of_the_split_runs(levels, base):
    """A compaction's runs read in place, each as segments of its blocks (newest run first, a
    run's blocks cut where it likes), give merge_block's run of the same records as lists."""
    parts, segs = [], []
    for recs, dels, per in levels:
        ks = sorted(recs)
        vs = [b"\x00" if d else b"\x01" + recs[k] for k, d in zip(ks, dels)]
        parts.append((ks, vs, True))
        for a in range(0, len(ks), per):  # blocks of `per` records, each one segment, or two
            bk, bv = ks[a : a + per], vs[a : a + per]
            raw = _blockc.build(bk, bv)
            mid = len(bk) // 2
            segs += [(raw, len(bk), 0, mid), (raw, len(bk), mid, len(bk))] if mid else [(raw, len(bk), 0, len(bk))]
    bk = sorted(base)
    bv = [base[k] for k in bk]
    raw = _blockc.build(bk, bv)
    want = _blockc.merge_block(raw, len(bk), parts, False)
    assert _blockc.merge_segs(raw, len(bk), segs) == want
    assert block.merge_segs(raw, len(bk), segs) == want


@needs_c
def test_c_merge_segs_declines_an_unsound_segment():
    good = _blockc.build([b"a", b"b"], [b"1", b"2"])
    run = _blockc.build([b"a", b"c"], [b"\x00", b"\x013"])
    assert _blockc.merge_segs(good, 2, [(run, 2, 0, 2)]) == (b"b2c3", [1, 1, 1, 1])
    assert _blockc.merge_segs(good, 2, [(run, 2, 1, 2)]) == (b"a1b2c3", [1, 1, 1, 1, 1, 1])  # j0 = 1
    assert _blockc.merge_segs(good, 2, [(run, 2, 1, 1)]) == (b"a1b2", [1, 1, 1, 1])  # empty
    bad_op = _blockc.build([b"a"], [b"\x02x"])
    assert _blockc.merge_segs(good, 2, [(bad_op, 1, 0, 1)]) is None
    no_op = _blockc.build([b"a"], [b""])
    assert _blockc.merge_segs(good, 2, [(no_op, 1, 0, 1)]) is None
    unsorted = _blockc.build([b"c", b"a"], [b"\x011", b"\x012"])
    assert _blockc.merge_segs(good, 2, [(unsorted, 2, 0, 2)]) is None  # keys out of order
    assert _blockc.merge_segs(good, 2, [(unsorted, 2, 0, 1)]) == (b"a1b2c1", [1, 1, 1, 1, 1, 1])  # one record
    bad = bytearray(run)
    bad[-8:-4] = (200).to_bytes(4, "little")  # a record end past the records
    assert _blockc.merge_segs(good, 2, [(bytes(bad), 2, 0, 2)]) is None
    assert _blockc.merge_segs(good, 2, [(run, 2, 0, 3)]) is None  # past the block's records
    assert _blockc.merge_segs(good, 2, [(run, 2, 2, 1)]) is None  # j1 < j0
    assert _blockc.merge_segs(good, 2, [(run, 2, 0)]) is None  # not a segment
    assert _blockc.merge_segs(good, 2, [(bytearray(run), 2, 0, 2)]) is None
    assert _blockc.merge_segs(_blockc.build([b"b", b"a"], [b"1", b"2"]), 2, []) is None  # an unsound base
    with pytest.raises(ValueError):
        _blockc.merge_segs(good, 3, [])  # more records than the block holds


def _as_run(keys: list[bytes], vals: list[bytes]) -> tuple[bytes, list[int]]:
    return b"".join(k + v for k, v in zip(keys, vals)), [n for k, v in zip(keys, vals) for n in (len(k), len(v))]


@needs_c
def test_c_merge_declines_what_a_sound_table_does_not_give():
    assert _blockc.merge([([b"a"], [b"\x02x"], True)]) is None  # an unknown op byte
    assert _blockc.merge([([b"a"], [b""], True)]) is None  # no op byte
    assert _blockc.merge([([b"b", b"a"], [b"1", b"2"], False)]) is None  # out of order
    assert _blockc.merge([([b"a"], [b"1", b"2"], False)]) is None  # lengths differ
    assert _blockc.merge([([b"a"], ["1"], False)]) is None  # not bytes
    assert _blockc.merge([([b"a"], [b"1"], False)] * 65) is None  # more levels than it takes
    assert _blockc.merge([]) == ([], [])
    for keep in (False, True):  # merge_run declines the same input
        assert _blockc.merge_run([([b"a"], [b"\x02x"], True)], keep) is None
        assert _blockc.merge_run([([b"b", b"a"], [b"1", b"2"], False)], keep) is None
        assert _blockc.merge_run([([b"a"], [b"1"], False)] * 65, keep) is None
        assert _blockc.merge_run([], keep) == (b"", [])


@needs_c
@given(
    st.lists(
        st.tuples(st.binary(max_size=20), st.integers(-(2**63), 2**63 - 1), st.integers(0, 255), st.binary(max_size=30))
    )
)
def test_c_links_equal_link_decode(recs):
    from webdb.tables.pagecodec import LINK, LINK_FIXED, LINK_OUT
    from webdb.tables.records import Link

    url = "http://é.example/a"
    p = url.encode() + b"\x00"
    keys = [p + f for f, *_ in recs]
    vals = [LINK.pack(d, f) + a for _, d, f, a in recs]
    want = [Link.decode(k[len(p) :], url, v) for k, v in zip(keys, vals)]
    assert _blockc.links(keys, vals, len(p), url, Link, LINK_FIXED, LINK_OUT) == want
    assert _blockc.links([b"x"], [b"\x00" * 8], 2, url, Link, LINK_FIXED, LINK_OUT) is None  # short value
    assert _blockc.links([b"x"], [b"\x00" * 9], 5, url, Link, LINK_FIXED, LINK_OUT) == [Link(b"", url)]


def test_c_links_fills_slots_only_of_a_plain_slots_dataclass():
    """Link's slots are filled without its __init__; a class whose __init__ does more (a
    subclass, a __post_init__, no slots) is called, so each gets what its constructor makes."""
    from dataclasses import dataclass

    from webdb.tables.pagecodec import LINK, LINK_FIXED, LINK_OUT
    from webdb.tables.records import Link

    url = "http://a.example/"
    p = url.encode() + b"\x00"
    keys, vals = [p + b"f" * 16], [LINK.pack(-5, LINK_OUT) + "ä".encode()]
    (got,) = _blockc.links(keys, vals, len(p), url, Link, LINK_FIXED, LINK_OUT)
    assert type(got) is Link and got == Link(b"f" * 16, url, "ä", -5, True)
    got.anchor = "b"  # an ordinary, mutable instance
    assert repr(got) == repr(Link(b"f" * 16, url, "b", -5, True))

    class Sub(Link):
        __slots__ = ("extra",)

        def __init__(self, *a):
            super().__init__(*a)
            self.extra = len(a)

    @dataclass(slots=True)
    class Post:
        from_id: bytes
        url: str
        anchor: str
        domain_id: int
        target_has_outlink: bool

        def __post_init__(self):
            self.anchor = self.anchor.upper()

    @dataclass
    class NoSlots:
        from_id: bytes
        url: str
        anchor: str
        domain_id: int
        target_has_outlink: bool

    assert _blockc.links(keys, vals, len(p), url, Sub, LINK_FIXED, LINK_OUT)[0].extra == 5
    assert _blockc.links(keys, vals, len(p), url, Post, LINK_FIXED, LINK_OUT)[0].anchor == "Ä"
    assert _blockc.links(keys, vals, len(p), url, NoSlots, LINK_FIXED, LINK_OUT)[0] == NoSlots(
        b"f" * 16, url, "ä", -5, True
    )


# ---- damaged files: the same error in both implementations ---------------------------------


def _write(path: Path, codec: str, n: int = 400) -> list[bytes]:
    keys = [b"key%05d" % i for i in range(n)]
    w = TableWriter(str(path), KIND_PAGES_BY_URL, 512, codec, sync=False)
    for k in keys:
        w.add(k, k[::-1] * (1 + int(k[-1:]) % 3))
    w.close({})
    return keys


def _reseal(path: Path, i: int, edit) -> None:
    """Replace block i of a codec-none table by ``edit(raw)``, its checksum recomputed."""
    t = TableReader(str(path))
    off, length = t.offsets[i], t.lengths[i]
    t.close()
    data = path.read_bytes()
    raw = edit(bytearray(data[off : off + length - block.BLOCK_TRAILER_SIZE]))
    assert len(raw) == length - block.BLOCK_TRAILER_SIZE
    trailer = block.TRAILER.pack(0, zlib.crc32(bytes(raw) + b"\x00"))
    path.write_bytes(data[:off] + bytes(raw) + trailer + data[off + length :])


def _damaged(tmp: Path) -> list[tuple[str, str | None]]:
    """(table file, truncate-after-open target size or None) of each kind of damage."""
    out = []
    p = tmp / "flip-lz4"
    _write(p, "lz4")
    t = TableReader(str(p))
    off = t.offsets[3] + 2
    t.close()
    b = bytearray(p.read_bytes())
    b[off] ^= 0x40
    p.write_bytes(bytes(b))
    out.append((str(p), None))

    def count(raw):  # a record count larger than the block
        raw[-4:] = (1 << 30).to_bytes(4, "little")
        return raw

    def total(raw):  # the last record end moved off the end of the records
        n = int.from_bytes(raw[-4:], "little")
        at = len(raw) - 8
        raw[at : at + 4] = (int.from_bytes(raw[at : at + 4], "little") + 1).to_bytes(4, "little")
        assert n
        return raw

    def disorder(raw):  # key ends out of order and past the end: the total still matches
        n = int.from_bytes(raw[-4:], "little")
        base = len(raw) - 4 - 8 * n
        raw[base : base + 4] = (len(raw) + 50).to_bytes(4, "little")
        raw[base + 8 : base + 12] = (0).to_bytes(4, "little")
        return raw

    def short(raw):
        raw[:] = raw[:3] + bytes(len(raw) - 3)
        raw[-4:] = bytes(4)
        return raw

    for name, edit in (("count", count), ("total", total), ("disorder", disorder), ("zero", short)):
        p = tmp / f"none-{name}"
        _write(p, "none")
        _reseal(p, 2, edit)
        out.append((str(p), None))
    p = tmp / "truncated-after-open"
    _write(p, "lz4")
    out.append((str(p), "half"))
    return out


_READS = [
    lambda t: list(t.items()),
    lambda t: [t.get(b"key%05d" % i) for i in range(0, 400, 7)],
    lambda t: [t.get(b"key%05d" % i) for i in range(399, 0, -13)],
    lambda t: [list(t.ranges(b"key%05d" % i, b"key%05d" % (i + 9))) for i in range(0, 400, 11)],
    lambda t: [t.short_range(b"key%05d" % i, b"key%05d" % (i + 3)) for i in range(0, 400, 5)],
    lambda t: list(t.items(b"key00150", b"key00260")),
]


def _outcome(op, t: TableReader) -> list[str]:
    from webdb.errors import WebDBError

    try:
        return ["ok", repr(op(t))]
    except WebDBError as e:
        return [type(e).__name__, str(e)]


def child(spec: str) -> None:
    """Read every damaged file of ``spec`` (JSON) every way a lookup can and print the outcomes."""
    res = []
    for path, cut in json.loads(spec):
        t = TableReader(path, KIND_PAGES_BY_URL, BlockCache(1 << 20))
        if cut:
            os.truncate(path, t.offsets[t.nblocks // 2])
        res.append([_outcome(op, t) for op in _READS])
    print(json.dumps(res))


@pytest.mark.timeout(300)
def test_damaged_blocks_give_the_same_errors_in_both(tmp_path):
    runs = {}
    for pure in (False, True):
        d = tmp_path / ("pure" if pure else "c")
        d.mkdir()
        files = _damaged(d)
        code = f"import test_blockc; test_blockc.child({json.dumps(json.dumps(files))})"
        out = subprocess.run([sys.executable, "-c", code], env=_env(pure), capture_output=True, text=True, check=True)
        runs[pure] = json.loads(out.stdout.replace(str(d), "DIR"))
    assert runs[False] == runs[True]
    errors = [o for f in runs[True] for o in f if o[0] != "ok"]
    assert {o[0] for o in errors} == {"CorruptionError"}
    want = {
        "flip-lz4": "block 3 at offset \\d+: checksum mismatch",
        "none-count": "block 2 at offset \\d+: record count 1073741824 does not fit",
        "none-total": "block 2 at offset \\d+: block offsets do not match its size",
        "none-disorder": None,  # no error: out-of-order offsets read clamped slices (check() finds it)
        "none-zero": "block 2 at offset \\d+: holds 0 records, index says",
        "truncated-after-open": "block \\d+ at offset \\d+: truncated",
    }
    for f, (name, pattern) in zip(runs[True], want.items()):
        errs = [o[1] for o in f if o[0] != "ok"]
        if pattern is None:
            assert not errs, (name, errs)
        else:
            assert errs and all(re.fullmatch(f"DIR/{name}: {pattern}.*", e) for e in errs), (name, errs)


# ---- the fallback passes the same tests ----------------------------------------------------


@pytest.mark.timeout(900)
def test_pure_python_fallback_passes_the_table_and_lookup_tests(tmp_path):
    """tests/test_tables.py, test_lookups.py and test_fuzz_tables.py (fewer examples, not the
    slow long fuzz: that one guards the C code, and runs in the main suite), in a child pytest
    with WEBDB_PURE_PYTHON=1."""
    env = _env(True)
    env["WEBDB_FUZZ_EXAMPLES"] = "25"
    files = ["tests/test_tables.py", "tests/test_lookups.py", "tests/test_fuzz_tables.py"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "not slow"]
    out = subprocess.run(
        [*cmd, f"--basetemp={tmp_path / 'pt'}", *files], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout


# ---- lz4 pieces (codec 3): a block's records in separately decodable pieces ------------------


def _resealed(body: bytes, codec: int = 3) -> bytes:
    return body + block.TRAILER.pack(codec, zlib.crc32(body + bytes((codec,))))


@needs_c
@given(records(), st.sampled_from([1, 16, 100, 4096]), st.lists(_bytes, min_size=2, max_size=6), st.data())
def test_c_and_python_agree_on_lz4_pieces(recs, piece_bytes, probes, data):
    """The same pieces built by C and Python; a whole-block read gives the raw block of the
    records (as plain lz4 does); a range read gives what the whole block's split gives; any
    damage is declined by C and named by the Python code."""
    import lz4.block

    keys, vals = recs
    raw = block.build_py(keys, vals)
    body = _blockc.seal_pieces(raw, lz4.block.compress, piece_bytes, zlib.crc32)
    assert body == block.seal_pieces_py(raw, piece_bytes)
    sealed = block.seal_block(raw, block.CODEC_LZ4_PIECES, piece_bytes)
    if body is None:  # one piece: plain lz4
        assert sealed == block.seal_block(raw, block.CODEC_LZ4)
        return
    assert sealed == _resealed(body) and block.unpieces(body) == raw
    py = _py_block(raw)
    assert _blockc.unpack_pieces(sealed, zlib.crc32, block.lz4_decompress) == (raw, py.n)
    assert block.unpack_block(sealed, "x").raw == raw
    for a, b in zip(probes, probes[1:]):
        want = (*py.split(py.find(a), py.find(b)), py.n)
        assert _blockc.unpack_range_pieces(sealed, zlib.crc32, block.lz4_decompress, a, b) == want
        assert block.unpack_range(sealed, a, b) == want
    # A flipped byte: the checksum; a crafted piece table or piece (checksum recomputed): the
    # pieces' own checks.  C declines both, the Python code names them.
    i = data.draw(st.integers(0, len(body) - 1))
    bad = bytearray(sealed)
    bad[i] ^= 0x10
    assert _blockc.unpack_pieces(bytes(bad), zlib.crc32, block.lz4_decompress) is None
    everything = (b"", keys[-1] + b"\x00")  # a range read reads (and checks) only the pieces it reaches
    assert _blockc.unpack_range_pieces(bytes(bad), zlib.crc32, block.lz4_decompress, *everything) is None
    with pytest.raises(CorruptionError, match="^blk 7: checksum mismatch"):
        block.unpack_block(bytes(bad), "blk 7")
    crafted = _resealed(bytes(body[:i]) + bytes([body[i] ^ 0x10]) + bytes(body[i + 1 :]))
    c = _blockc.unpack_pieces(crafted, zlib.crc32, block.lz4_decompress)
    try:
        py_raw = block.unpieces(crafted[:-5])
    except (ValueError, lz4.block.LZ4BlockError):
        py_raw = None
    if py_raw is None:
        assert c is None
        with pytest.raises(CorruptionError, match="^blk 7: undecodable block"):
            block.unpack_block(crafted, "blk 7")
    else:  # a changed byte of a record (keys or values): a sound block of other records
        assert c == (py_raw, int.from_bytes(py_raw[-4:], "little"))


@needs_c
def test_pieces_of_a_links_by_url_table(tmp_path):
    """LinksByURL tables are written in pieces of a quarter block (other kinds, and a block too
    small for two pieces, in plain lz4), and a file of plain lz4 blocks (written before the
    pieces) reads the same."""
    from webdb.tables.format import CODEC_LZ4, CODEC_LZ4_PIECES, KIND_LINKS_BY_URL

    keys = [b"http://h/%03d\x00" % (i // 7) + b"%016d" % i for i in range(3000)]
    files = {}
    for name, old in (("new", False), ("old", True)):
        w = TableWriter(str(tmp_path / name), KIND_LINKS_BY_URL, 4096, "lz4", sync=False)
        if old:
            w.codec = CODEC_LZ4
        for k in keys:
            w.add(k, b"\x01" * 9 + k[-5:])
        w.close()
        files[name] = TableReader(str(tmp_path / name), KIND_LINKS_BY_URL, None, lazy=True)
    new, old = files["new"], files["old"]
    codecs = {t: [t.raw_block(b)[-5] for b in range(t.nblocks)] for t in (new, old)}
    assert set(codecs[new][:-1]) == {CODEC_LZ4_PIECES} and set(codecs[old]) == {CODEC_LZ4}
    for u in range(0, 430, 3):
        p = b"http://h/%03d\x00" % u
        stop = p[:-1] + b"\x01"
        want = [(k, v) for k, v in old.items() if p <= k < stop]
        for t in (new, old):
            kv = t.short_range(p, stop)
            assert list(zip(*kv)) == want
    assert list(new.items()) == list(old.items())
    for t in (new, old):
        t.close()


# ---- crafted blocks whose CRC is sound: keys out of order, offsets past 2**32 ------------------


@needs_c
@given(
    st.lists(_bytes, min_size=1, max_size=40),
    st.lists(_bytes, min_size=2, max_size=6),
    st.sampled_from(["none", "lz4"]),
)
def test_c_and_python_ranges_agree_on_keys_out_of_order(keys, probes, codec):
    """A block whose keys are not in order (a crafted one: its CRC is sound) reads the same
    records through the compiled range read as through the Python code's two searches."""
    vals = [bytes([i % 256]) for i in range(len(keys))]
    raw = block.build_py(keys, vals)
    py = _py_block(raw)
    data = block.encode_block(keys, vals, block.CODECS[codec])
    for a, b in zip(probes, probes[1:]):
        want = (*py.split(py.find(a), py.find(b)), py.n)
        assert _blockc.unpack_range(data, zlib.crc32, block.lz4_decompress, a, b) == want
        assert block.unpack_range(data, a, b) == want


@needs_c
@given(
    st.lists(_bytes, min_size=2, max_size=40),
    st.lists(_bytes, min_size=2, max_size=6),
    st.sampled_from([1, 16, 64]),
)
def test_c_and_python_piece_ranges_agree_on_keys_out_of_order(keys, probes, piece_bytes):
    """The same for a block in lz4 pieces: the Python code (``pieces_split``) reads the pieces
    the header brackets, each searched on its own, as the compiled range read does."""
    vals = [bytes([i % 256]) for i in range(len(keys))]
    raw = block.build_py(keys, vals)
    sealed = block.seal_block(raw, block.CODEC_LZ4_PIECES, piece_bytes)
    if sealed[-5] != block.CODEC_LZ4_PIECES:
        return  # one piece: plain lz4, as above
    py = _py_block(raw)
    for a, b in zip(probes, probes[1:]):
        c = _blockc.unpack_range_pieces(sealed, zlib.crc32, block.lz4_decompress, a, b)
        if c is None:
            continue  # declined (the whole-block read then names what is wrong)
        assert c == (*block.pieces_split(py, sealed, a, b), py.n)
    if list(keys) == sorted(set(keys)):
        for a, b in zip(probes, probes[1:]):
            assert block.pieces_split(py, sealed, a, b) == py.split(py.find(a), py.find(b))


@needs_c
def test_c_and_python_agree_on_a_piece_offset_past_two_to_the_32():
    """A crafted piece whose key-end offset, moved by where the piece starts, passes 2**32:
    both wrap it (u32), the Python code no longer raises OverflowError."""
    import lz4.block

    raws = [block.build_py([b"a", b"b"], [b"1", b"2"]), bytearray(block.build_py([b"c", b"d"], [b"3", b"4"]))]
    n = 2
    struct_at = len(raws[1]) - 4 - 8 * n + 4  # key end of record 1 of piece 1
    raws[1][struct_at : struct_at + 4] = (0xFFFFFFF0).to_bytes(4, "little")
    pieces = [lz4.block.compress(bytes(r), store_size=True) for r in raws]
    header = b"".join(
        [
            (2).to_bytes(4, "little"),
            *[
                len(p).to_bytes(4, "little") + n.to_bytes(4, "little") + zlib.crc32(p).to_bytes(4, "little")
                for p in pieces
            ],
            (1).to_bytes(4, "little") + b"c",
        ]
    )
    body = b"".join([*pieces, header, len(header).to_bytes(4, "little"), zlib.crc32(header).to_bytes(4, "little")])
    sealed = _resealed(body)
    py_raw = block.unpieces(body)
    assert _blockc.unpack_pieces(sealed, zlib.crc32, block.lz4_decompress) == (py_raw, 4)


def _crc_choices() -> list[tuple[str, object, str, tuple[str, ...]]]:
    """(label, callable, its extension file, C names) of each CRC-32 webdb can register:
    python-isal's (ISA-L) and zlib's."""
    from isal import isal_zlib

    return [
        ("isal", isal_zlib.crc32, isal_zlib.__file__, ("crc32_gzip_refl",)),
        ("zlib", zlib.crc32, zlib.__file__, ("crc32_z", "crc32")),
    ]


@pytest.fixture
def crc_restored():
    """Whatever a test registers, the CRC block.py chose at import is registered again after it."""
    yield
    assert block.select_crc32(block._isal_zlib) is block.crc32


def test_block_crc32_is_isal_and_gives_zlibs_values():
    """The CRC-32 of every block CRC is python-isal's (a runtime dependency) and gives
    zlib.crc32's values, with or without a start value, on data of every length up to 1100
    bytes at every alignment mod 16 and on long data: the format is zlib's CRC, whichever
    computes it."""
    import random

    from isal import isal_zlib

    assert block.crc32 is isal_zlib.crc32
    rnd = random.Random(5)
    data = rnd.randbytes((1 << 20) + 64)
    for n in (*range(1101), 4095, 4096, 4097, 32768 + 5, 65536, 65537, (1 << 20) + 3):
        at = n % 16
        piece = data[at : at + n]
        assert block.crc32(piece) == zlib.crc32(piece), n
        start = rnd.getrandbits(32)
        assert block.crc32(piece, start) == zlib.crc32(piece, start), n
        assert block.crc32(memoryview(data)[at : at + n]) == zlib.crc32(piece), n


def test_a_crc_that_differs_from_zlibs_is_not_chosen():
    """select_crc32 takes a candidate's crc32 only when it gives zlib.crc32's values and, with
    the compiled codec, its C function is found: one that is off on some length, raises, is
    missing or has no C function leaves zlib.crc32 (and registers it)."""
    import types

    def off_on_long(d, v=0):
        return zlib.crc32(d, v) ^ (len(d) > 4096)

    def raises(d, v=0):
        raise ValueError("broken build")

    try:
        for fn in (off_on_long, raises):
            assert not block.same_crc32(fn)
            fake = types.ModuleType("fake_isal_zlib")
            fake.crc32 = fn
            fake.__file__ = zlib.__file__
            assert block.select_crc32(fake) is zlib.crc32
        assert block.select_crc32(types.ModuleType("no_crc32")) is zlib.crc32
        assert block.select_crc32(None) is zlib.crc32
        # zlib's values through Python, no C function to register (compiled): zlib's then.
        from lz4.block import _block as lz4_ext

        no_c = types.ModuleType("no_c_function")
        no_c.crc32 = lambda d, v=0: zlib.crc32(d, v)
        no_c.__file__ = lz4_ext.__file__
        assert block.select_crc32(no_c) is (zlib.crc32 if block.blockc is not None else no_c.crc32)
    finally:
        assert block.select_crc32(block._isal_zlib) is block.crc32


@needs_c
@pytest.mark.parametrize("which", ["isal", "zlib"])
def test_crc32_in_c_is_zlibs(which, crc_restored):
    """The CRC-32 the registered C function (ISA-L's ``crc32_gzip_refl`` or zlib's ``crc32_z``,
    ``use_crc32``) computes where its callable is passed gives zlib.crc32's values: pieces
    sealed by C (whose CRCs it computes) equal the Python reference's (zlib.crc32's) for pieces
    of every length from a few bytes to tens of KiB, whole blocks it checks unpack, and a block
    damaged anywhere is declined.  A callable that is not zlib's CRC is refused."""
    import random

    import lz4.block

    label, fn, path, names = next(c for c in _crc_choices() if c[0] == which)
    assert _blockc.use_crc32(fn, path, names) is True
    rnd = random.Random(7)
    for size in (1, 15, 16, 31, 32, 33, 47, 48, 63, 64, 65, 100, 1000, 4096, 40_000):
        keys = [b"k%06d" % i for i in range(40)]
        vals = [rnd.randbytes(rnd.randrange(size + 1)) for _ in keys]
        raw = block.build_py(keys, vals)
        whole = _resealed(lz4.block.compress(raw), 2)
        assert _blockc.unpack(whole, fn, block.lz4_decompress) == (raw, len(keys))
        bad = bytearray(whole)
        bad[rnd.randrange(len(whole))] ^= 1
        assert _blockc.unpack(bytes(bad), fn, block.lz4_decompress) is None
        for piece_bytes in (16, 100, 4096):
            body = _blockc.seal_pieces(raw, lz4.block.compress, piece_bytes, fn)
            assert body == block.seal_pieces_py(raw, piece_bytes)
            if body is not None:
                sealed = _resealed(body)
                assert _blockc.unpack_pieces(sealed, fn, block.lz4_decompress)[0] == raw
                bad = bytearray(sealed)
                bad[rnd.randrange(len(body))] ^= 1
                assert _blockc.unpack_pieces(bytes(bad), fn, block.lz4_decompress) is None
    assert _blockc.use_crc32(lambda d: fn(d) ^ 1, path, names) is False
    with pytest.raises(ValueError, match="no known prototype for the C function crc32c"):
        _blockc.use_crc32(fn, path, ("crc32c",))


@needs_c
@pytest.mark.parametrize("which", ["isal", "zlib"])
def test_crc32_is_the_c_function_when_found_else_the_callable(which, tmp_path, crc_restored):
    """A callable registered with ``use_crc32`` is not called by the reads once its C function
    is found through its extension (ISA-L's through python-isal's, zlib's through Python's
    zlib); where the path has no such function (lz4's extension, the other CRC's extension
    under these names) or is not a loaded library, nothing is registered (False) and the
    callable is called for every CRC, with the same results."""
    import lz4.block
    from lz4.block import _block as lz4_ext

    label, fn, path, names = next(c for c in _crc_choices() if c[0] == which)
    other = next(c for c in _crc_choices() if c[0] != which)[2]
    calls = []

    def crc(data):
        calls.append(len(data))
        return fn(data)

    keys = [b"k%06d" % i for i in range(200)]
    raw = block.build_py(keys, [k * 9 for k in keys])
    pieced = _resealed(_blockc.seal_pieces(raw, lz4.block.compress, 1024, zlib.crc32))
    whole = _resealed(lz4.block.compress(raw), 2)

    def reads():
        calls.clear()
        assert _blockc.unpack_pieces(pieced, crc, block.lz4_decompress)[0] == raw
        assert _blockc.unpack(whole, crc, block.lz4_decompress) == (raw, len(keys))
        return len(calls)

    assert _blockc.use_crc32(crc, path, names) is True
    assert reads() == 0
    for where in (lz4_ext.__file__, other, str(tmp_path / "not-loaded.so")):
        assert _blockc.use_crc32(crc, where, names) is False
        assert reads() >= 3  # the block, the piece header and at least one piece


@needs_c
@pytest.mark.parametrize("which", ["isal", "zlib"])
def test_crc_blocks_names_the_first_damaged_block(which, crc_restored):
    """``crc_blocks`` (the scrub's loop) checks blocks laid back to back against
    ``block_crc_ok``: -1 when all match; with bytes flipped anywhere (body, codec byte, CRC),
    the first damaged block; a length past the data or shorter than a trailer is damage too;
    None, having checked nothing, for a callable that is not the registered one."""
    import random

    label, fn, path, names = next(c for c in _crc_choices() if c[0] == which)
    assert _blockc.use_crc32(fn, path, names) is True
    rnd = random.Random(3)
    blocks = [block.seal_block(rnd.randbytes(rnd.randrange(200)) + b"\0\0\0\0", rnd.choice([0, 2])) for _ in range(300)]
    blocks += [block.seal_block(rnd.randbytes(70_000) + b"\0\0\0\0", 0)]
    data = b"".join(blocks)
    lens = array("I", map(len, blocks))
    assert _blockc.crc_blocks(data, lens, fn) == -1
    assert _blockc.crc_blocks(memoryview(data)[len(blocks[0]) :], lens[1:], fn) == -1
    ends = list(accumulate(lens))
    for _ in range(40):
        at = rnd.randrange(len(data))
        bad = bytearray(data)
        bad[at] ^= 1 << rnd.randrange(8)
        first = next(b for b, e in enumerate(ends) if at < e)
        assert not block.block_crc_ok(bytes(bad[ends[first] - lens[first] : ends[first]]))
        assert _blockc.crc_blocks(bytes(bad), lens, fn) == first
    assert _blockc.crc_blocks(data[:-1], lens, fn) == len(blocks) - 1
    assert _blockc.crc_blocks(data, array("I", [*lens[:5], 4, *lens[6:]]), fn) == 5
    assert _blockc.crc_blocks(data, lens, lambda d: fn(d)) is None


_NO_ISAL = {
    "missing": "sys.modules['isal'] = None",
    "broken": (
        "import types; m = types.ModuleType('isal.isal_zlib'); m.crc32 = lambda d, v=0: zlib.crc32(d, v) ^ 1; "
        "m.__file__ = '/nonexistent/isal_zlib.so'; p = types.ModuleType('isal'); p.isal_zlib = m; "
        "sys.modules['isal'] = p; sys.modules['isal.isal_zlib'] = m"
    ),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("isal", sorted(_NO_ISAL))
def test_without_isal_crcs_are_zlibs_and_tables_the_same(tmp_path, isal, pure):
    """Where python-isal is missing or gives other values, block.py falls back to zlib.crc32:
    the table a writer seals is byte for byte the one written with ISA-L's CRC, its reads and
    scrub pass, and a damaged block is named by the scrub and the read, as with ISA-L's."""
    keys = [b"key%06d" % i for i in range(4000)]
    child = (
        "import sys, zlib\n"
        f"{_NO_ISAL[isal]}\n"
        "from webdb.tables import block\n"
        "from webdb.tables.format import KIND_PAGES_BY_URL\n"
        "from webdb.tables.table import TableReader, TableWriter\n"
        "assert block.crc32 is zlib.crc32, block.crc32\n"
        "path, codec = sys.argv[1], sys.argv[2]\n"
        "w = TableWriter(path, KIND_PAGES_BY_URL, 4096, codec, sync=False)\n"
        "for k in (b'key%06d' % i for i in range(4000)):\n"
        "    w.add(k, k[::-1] * 2)\n"
        "w.close({'test': True})\n"
        "t = TableReader(path, KIND_PAGES_BY_URL)\n"
        "assert t.check_crcs() == t.offsets[-1] + t.lengths[-1]\n"
        "assert [k for k, _ in t.items()] == [b'key%06d' % i for i in range(4000)]\n"
        "with open(path, 'r+b') as f:\n"
        "    f.seek(t.offsets[7] + 3)\n"
        "    b = f.read(1)\n"
        "    f.seek(t.offsets[7] + 3)\n"
        "    f.write(bytes([b[0] ^ 1]))\n"
        "for read in (t.check_crcs, lambda: list(t.items())):\n"
        "    try:\n"
        "        read()\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    for codec in ("lz4", "zlib", "none"):  # lz4: in pieces (PagesByURL)
        mine = tmp_path / f"isal-{codec}"
        w = TableWriter(str(mine), KIND_PAGES_BY_URL, 4096, codec, sync=False)
        for k in keys:
            w.add(k, k[::-1] * 2)
        w.close({"test": True})
        theirs = tmp_path / f"{isal}-{codec}"
        out = subprocess.run(
            [sys.executable, "-c", child, str(theirs), codec], env=_env(pure), capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        t = TableReader(str(mine), KIND_PAGES_BY_URL)
        at = rf"{re.escape(str(theirs))}: block 7 at offset {t.offsets[7]}: checksum mismatch"
        assert re.fullmatch(rf"CorruptionError {at}\nCorruptionError {at}\n", out.stdout), out.stdout
        t.close()
        damaged = bytearray(mine.read_bytes())
        damaged[TableReader(str(mine), KIND_PAGES_BY_URL).offsets[7] + 3] ^= 1
        assert theirs.read_bytes() == bytes(damaged)


@given(
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 300)), max_size=60),
    st.integers(0, 2000),
    st.integers(1, 3000),
)
def test_run_cuts_c_equals_python(recs, size, block_size):
    lens = [n for kv in recs for n in kv]
    want = block.run_cuts_py(lens, size, block_size)
    assert block.run_cuts(lens, size, block_size) == want
    if _blockc is not None:
        assert _blockc.run_cuts(lens, size, block_size) == want


@given(
    st.lists(st.lists(st.binary(min_size=1, max_size=30), max_size=40), max_size=6),
    st.sampled_from([16, 64, 300, 4096]),
)
def test_add_run_cuts_blocks_where_add_many_does(tmp_path_factory, chunks, block_size):
    """Records given as runs (add_run) and as lists (add_many) give the same file."""
    d = tmp_path_factory.mktemp("cuts")
    keys = sorted({b"%06d" % i + v for i, c in enumerate(chunks) for v in c})
    vals = [k[::-1] * (len(k) % 3) for k in keys]
    files = []
    for how in ("run", "many"):
        w = TableWriter(str(d / how), 3, block_size=block_size, sync=False)
        for i in range(0, len(keys), 7):
            ks, vs = keys[i : i + 7], vals[i : i + 7]
            if how == "run":
                lens = [n for k, v in zip(ks, vs) for n in (len(k), len(v))]
                w.add_run(b"".join(k + v for k, v in zip(ks, vs)), lens)
            else:
                w.add_many(ks, vs)
        w.close()
        files.append((d / how).read_bytes())
    assert files[0] == files[1]
