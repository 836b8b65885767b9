"""The compiled kernels of levels merged a range at a time (webdb/tables/_blockc_src/merge.c) and
of cascade stages 3 and 4 (webdb/writer/_stagesc_src/) against their Python references, on
hypothesis inputs: ``diff`` (a range's changes, ``levels.diff_py``), ``span`` (``Seeker.range``
on one block), ``pack_edits`` (``Emitter.add_many``, ``edits.pack``), ``links_by_url_groups``
/ ``links_by_md5_groups`` (a batch of edit records cut into groups,
``cascade.links_by_url_groups_py`` / ``links_by_md5_groups_py``), ``links_by_md5_adds``,
``links_by_url_splice``, ``LevelSeek.splice`` (a Splice applied by point reads of the levels,
``LevelCursor._range`` and ``diff_py``) and ``merge_ranges``' splice hook, including the input
each declines (None, so the Python code runs and names the fault) and the carry of a group
across batches.  Whole stages with and without the compiled codec are compared by the model
tests under ``WEBDB_PURE_PYTHON=1`` (tests/test_blockc.py runs them in a child pytest)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from bisect import bisect_left

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webdb.errors import CorruptionError
from webdb.tables import block
from webdb.tables.levels import Seeker, diff_py
from webdb.tables.merge import Splice
from webdb.tables.pagecodec import LINK_FLAGS, LINK_OUT
from webdb.tables.table import TableReader, TableWriter
from webdb.writer import cascade, edits, kernels

try:
    _blockc = importlib.import_module("webdb.tables._blockc")
except ImportError:
    _blockc = None
needs_c = pytest.mark.skipif(_blockc is None, reason="webdb.tables._blockc is not built (no gcc/python3-dev)")
try:
    _stagesc = importlib.import_module("webdb.writer._stagesc")
except ImportError:
    _stagesc = None
needs_stages_c = pytest.mark.skipif(_stagesc is None, reason="webdb.writer._stagesc is not built (no gcc/python3-dev)")

_key = st.binary(min_size=0, max_size=6)
_val = st.binary(max_size=5)


def _records(min_size: int = 0):
    return st.dictionaries(_key, _val, min_size=min_size, max_size=30).map(lambda d: sorted(d.items()))


@needs_c
@given(_records(), _records(), st.data())
def test_diff_matches_python(old, new, data):
    ok, ov = [k for k, _ in old], [v for _, v in old]
    lo, hi = b"", b"\xff" * 7
    # A range's new records, and a splice: point edits (None deletes) over some of the keys.
    rk, rv = [k for k, _ in new], [v for _, v in new]
    keys = sorted(set(ok) | set(rk))
    picked = data.draw(st.lists(st.sampled_from(keys), unique=True) if keys else st.just([]))
    sp = Splice((k, data.draw(st.none() | _val)) for k in sorted(picked))
    for r in ((rk, rv), sp, Splice(), ([], [])):
        want_k: list[bytes] = [b"x"]
        want_v: list[bytes] = [b"y"]
        got_k, got_v = list(want_k), list(want_v)
        live = diff_py(ok, ov, r, lo, hi, want_k, want_v, "run")
        assert _blockc.diff(ok, ov, r, lo, hi, got_k, got_v) == live
        assert (got_k, got_v) == (want_k, want_v)


@needs_c
def test_diff_declines_what_python_names():
    ok, ov = [b"b", b"d"], [b"1", b"2"]
    bad = [
        Splice([(b"c", b"1"), (b"c", None)]),  # a key twice
        Splice([(b"a", b"1")]),  # below the range
        Splice([(b"z", b"1")]),  # at or past its end
        Splice([(b"c", 5)]),  # not bytes
        ([b"d", b"c"], [b"1", b"2"]),  # out of order
        ([b"c"], [b"1", b"2"]),  # lengths differ
        ([b"y"], [b"1"]),  # past the end
        [(b"c", b"1")],  # a plain list, not a Splice
    ]
    for r in bad:
        out_k: list[bytes] = []
        out_v: list[bytes] = []
        assert _blockc.diff(ok, ov, r, b"b", b"y", out_k, out_v) is None
        assert out_k == out_v == []
        if (
            type(r) is Splice
            and all(isinstance(v, bytes | None) for _, v in r)
            or type(r) is tuple
            and len(r[0]) == len(r[1])
        ):
            with pytest.raises(CorruptionError, match="run: "):
                diff_py(ok, ov, r, b"b", b"y", out_k, out_v, "run")
    # Stored records out of order (no sound table gives them): declined too.
    assert _blockc.diff([b"d", b"b"], ov, Splice(), b"", b"z", [], []) is None


def _table(tmp_path, recs, block_size):
    p = str(tmp_path / "t.lbu")
    w = TableWriter(p, 7, block_size, "lz4", sync=False)
    for k, v in recs:
        w.add(k, v)
    w.close()
    return TableReader(p, 7)


@needs_c
@settings(max_examples=40, deadline=None)
@given(_records(min_size=1), st.lists(st.tuples(_key, _key), max_size=8), st.sampled_from([64, 256, 4096]))
def test_span_matches_python_reads(tmp_path_factory, recs, ranges, bs):
    t = _table(tmp_path_factory.mktemp("span"), recs, bs)
    try:
        for b in range(t.nblocks):
            rb = t.raw(b)
            keys = rb.keys()
            for lo, hi in ranges + [(b"", None)]:
                j1 = bisect_left(keys, lo)
                j2 = len(keys) if hi is None else max(j1, bisect_left(keys, hi, j1))
                want = (keys[j1:j2], rb.values(j1, j2), keys[j2] if j2 < len(keys) else None)
                assert _blockc.span(rb.raw, rb.n, lo, hi) == want
    finally:
        t.close()


@settings(max_examples=40, deadline=None)
@given(_records(min_size=1), st.lists(st.tuples(_key, _key).map(sorted), max_size=8), st.sampled_from([64, 4096]))
def test_seeker_ranges_are_the_records_in_range(tmp_path_factory, recs, ranges, bs):
    """Forward range reads (compiled: ``span`` per block) give what a scan gives."""
    t = _table(tmp_path_factory.mktemp("seek"), recs, bs)
    try:
        s = Seeker(t)
        last = b""
        for lo, hi in sorted(ranges):
            lo = max(lo, last)
            hi = max(hi, lo)
            want = [(k, v) for k, v in recs if lo <= k < hi]
            ks, vs = s.range(lo, hi)
            assert list(zip(ks, vs)) == want
            nxt = [k for k, _ in recs if k >= hi]
            assert s.nxt <= (nxt[0] if nxt else b"\xff" * 65536)
            last = hi
    finally:
        t.close()


@needs_stages_c
@given(st.lists(st.tuples(_key, _val), max_size=20), st.integers(0, 2**40 - 100), st.binary(min_size=3, max_size=3))
def test_pack_edits_is_edits_pack(kv, n0, prefix):
    keys, vals = [k for k, _ in kv], [v for _, v in kv]
    want = [edits.pack(k, prefix + (n0 + i).to_bytes(5, "big"), v) for i, (k, v) in enumerate(kv, 1)]
    assert _stagesc.pack_edits(keys, vals, prefix, n0) == want
    assert _stagesc.pack_edits(keys, vals, prefix, 2**40) is None  # the counter overflows 5 bytes
    assert _stagesc.pack_edits([b"k" * 65528], [b""], prefix, 0) is None  # edits.pack's u16 overflows


_url = st.binary(min_size=1, max_size=6).map(lambda b: b.replace(b"\x00", b"a"))
_fid = st.binary(min_size=16, max_size=16)


def _links_by_url_records(draw_list):
    """Stage 4's edit records (edits.pack layout), sorted as the producers sort them."""
    recs = []
    for n, (url, kind, fid, op, v) in enumerate(draw_list):
        if kind == 0:
            key, val = edits.links_by_url_notice_key(url), bytes((op % 3,))
        else:
            key, val = url + edits.links_by_url_link_tail(fid, op % 2), v
        recs.append(edits.pack(key, b"\x03\x00\x01" + n.to_bytes(5, "big"), val))
    return sorted(recs)


_links_by_url_edit = st.tuples(
    st.sampled_from([b"a", b"ab", b"b"]) | _url, st.integers(0, 3), _fid, st.integers(0, 5), _val
)


def _cut_all(cut, recs, n):
    """Every group of ``recs`` as ``cascade._batched_groups`` cuts them, n records a batch."""
    out, rest = [], []
    for i in range(0, len(recs) + 1, n):
        new = recs[i : i + n]
        final = i + n > len(recs)
        batch = rest + new
        gs, used = cut(batch, final)
        out += gs
        rest = batch[used:]
        if final:
            assert rest == [] or used == len(batch)
            break
    return out


@given(st.lists(_links_by_url_edit, max_size=40), st.integers(1, 9))
def test_links_by_url_groups_c_and_python_and_batches(drawn, n):
    recs = _links_by_url_records(drawn)
    whole, used = cascade.links_by_url_groups_py(recs, True)
    assert used == len(recs)
    assert _cut_all(cascade.links_by_url_groups_py, recs, n) == whole
    assert [g[2][0] for g in whole] == sorted({r[: r.index(b"\x00")] for r in recs})
    if _stagesc is not None:
        for final in (True, False):
            assert _stagesc.links_by_url_groups(recs, final) == cascade.links_by_url_groups_py(recs, final)
        assert _cut_all(_stagesc.links_by_url_groups, recs, n) == whole


def _links_by_md5_records(draw_list):
    recs = []
    for n, (md5, kind, url, v) in enumerate(draw_list):
        key = edits.links_by_md5_del_all_key(md5) if kind == 0 else edits.links_by_md5_add_key(md5, url)
        recs.append(edits.pack(key, b"\x02\x00\x01" + n.to_bytes(5, "big"), b"" if kind == 0 else v))
    return sorted(recs)


_md5 = st.sampled_from([b"\x00" * 16, b"\x01" * 15 + b"\xff", b"\xff" * 16]) | st.binary(min_size=16, max_size=16)
_links_by_md5_edit = st.tuples(_md5, st.integers(0, 3), st.sampled_from([b"u", b"v"]) | _url, _val)


@given(st.lists(_links_by_md5_edit, max_size=40), st.integers(1, 9))
def test_links_by_md5_groups_c_and_python_and_batches(drawn, n):
    recs = _links_by_md5_records(drawn)
    whole, used = cascade.links_by_md5_groups_py(recs, True)
    assert used == len(recs)
    assert _cut_all(cascade.links_by_md5_groups_py, recs, n) == whole
    for md5, end, (_, adds) in whole:
        assert end > md5 and (end == b"\xff" * 17 or not end.startswith(md5))  # prefix_end, or past 0xff..
        assert [u for u, _ in adds] == sorted({u for u, _ in adds})  # one add per url, the last
    if _stagesc is not None:
        for final in (True, False):
            assert _stagesc.links_by_md5_groups(recs, final) == cascade.links_by_md5_groups_py(recs, final)
        assert _cut_all(_stagesc.links_by_md5_groups, recs, n) == whole


@needs_stages_c
def test_groups_decline_records_python_fails_on():
    assert _stagesc.links_by_url_groups([b"no zero byte\x05\x00"], True) is None
    assert _stagesc.links_by_url_groups([b"u\x00"], True) is None  # no tag
    assert _stagesc.links_by_url_groups([b"u\x00\x01short\x09\x00"], True) is None  # no op byte
    with pytest.raises(IndexError):
        cascade.links_by_url_groups_py([b"u\x00\x01short\x09\x00"], True)
    assert _stagesc.links_by_md5_groups([b"0123456789abcde"], True) is None  # shorter than an md5 and tag
    with pytest.raises(IndexError):
        cascade.links_by_md5_groups_py([b"0123456789abcde"], True)
    assert _stagesc.links_by_md5_groups([b"0123456789abcdef\x01u\x00" + b"s" * 8 + b"\x05\x00"], True) is None


def test_pure_python_env_has_no_compiled_helpers():
    if os.environ.get("WEBDB_PURE_PYTHON", "") not in ("", "0"):
        assert block.range_diff([], [], Splice(), b"", b"z", [], []) is None
        assert kernels.pack_edits([], [], b"abc", 0) is None
        assert kernels.links_by_url_groups([], True) is None
        assert kernels.links_by_md5_groups([], True) is None
        assert not kernels.COMPILED and not block.COMPILED


_link = st.binary(max_size=14)


@given(st.dictionaries(_url, _link, max_size=12), st.dictionaries(_url, _link, max_size=12), st.data())
def test_links_by_md5_adds_c_matches_python(stored, added, data):
    md5 = data.draw(_md5)
    ok = [md5 + u for u in sorted(stored)]
    ov = [stored[u] for u in sorted(stored)]
    # Some adds re-add a stored link with only its flag byte changed (not emitted).
    for u in data.draw(st.lists(st.sampled_from(sorted(stored)), max_size=4) if stored else st.just([])):
        v = stored[u]
        added[u] = v[:8] + bytes(((v[8] ^ 1) if len(v) > 8 else 0,)) + v[9:] if len(v) > 8 else v
    adds = sorted(added.items())
    tail = edits.links_by_url_link_tail(md5, edits.OP4_ADD)
    want = cascade.links_by_md5_adds_py(md5, ok, ov, adds, tail)
    assert want[2] == [(md5 + k[: -len(tail)], v) for k, v in zip(want[0], want[1])]
    if _stagesc is not None:
        assert _stagesc.links_by_md5_adds(md5, ok, ov, adds, tail) == want
        assert _stagesc.links_by_md5_adds(md5, ok, ov, adds[::-1], tail) is None or len(adds) < 2
        assert _stagesc.links_by_md5_adds(md5, [b"x" + k for k in ok], ov, adds, tail) is None or not ok


_ledit = st.tuples(st.sampled_from([b"f" * 16, b"g" * 16, b"h" * 16]) | _fid, st.integers(0, 1), st.binary(max_size=12))


@given(st.lists(_ledit, max_size=10).map(sorted), st.integers(0, 2))
def test_links_by_url_splice_c_matches_python(ledits, state):
    calls: list[bytes] = []

    def state_of(url: bytes) -> int:
        calls.append(url)
        return state

    tail = edits.link_fixup_tail(b"u", edits.OP5_FLAG)
    try:
        want = cascade.links_by_url_splice_py(b"u\x00", b"u", ledits, state_of, tail)
    except IndexError:  # an added value without a flags byte: C declines it
        want = None
    if want is not None and want[1] is not None:
        # Each fix-up carries the value the splice writes for its link (what stage 5 writes to
        # LinksByMD5 blind): the same flag byte in both tables.
        st_, sp, fix, fixv = want
        spliced = dict(sp)
        assert len(fix) == len(fixv) and all(k.endswith(tail) for k in fix)
        assert [spliced[b"u\x00" + k[: -len(tail)]] for k in fix] == fixv
        assert all(v[LINK_FLAGS] == (LINK_OUT if st_ == edits.TARGET_OUT else 0) for v in fixv)
    n_py, calls[:] = len(calls), []
    if _stagesc is None:
        return
    got = _stagesc.links_by_url_splice(b"u\x00", b"u", ledits, state_of, tail)
    if got is None:
        # Declined (an added value without a flags byte) before asking for the target's state,
        # so the Python code that runs instead asks once.
        assert calls == [] and any(op == 1 and len(v) < 9 for _, op, v in ledits)
        return
    assert got == want and len(calls) == n_py <= 1
    if ledits:
        # Another order of the same edits: another last edit per fromID, the reference's result.
        rev = ledits[::-1]
        try:
            want_rev = cascade.links_by_url_splice_py(b"u\x00", b"u", rev, state_of, tail)
        except IndexError:
            want_rev = None
        assert _stagesc.links_by_url_splice(b"u\x00", b"u", rev, state_of, tail) in (None, want_rev)


@pytest.mark.timeout(900)
def test_pure_python_stages_pass_the_level_tests(tmp_path):
    """tests/test_levels.py (stages 3-5 over levels: model, crash, compaction) and this file in a
    child pytest with WEBDB_PURE_PYTHON=1, so the Python references run whole stages too."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, WEBDB_PURE_PYTHON="1")
    env["PYTHONPATH"] = os.pathsep.join([root, os.path.join(root, "tests"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "not slow"]
    files = ["tests/test_levels.py", "tests/test_stages_c.py::test_pure_python_env_has_no_compiled_helpers"]
    out = subprocess.run(
        [*cmd, f"--basetemp={tmp_path / 'pt'}", *files], cwd=root, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout


# ---- levelseek: LevelCursor's reads of a table's levels in one C call (seek.c) ---------------


def _level_files(tmp, table: str, base: dict, runs: list[dict], block_size: int) -> tuple[str, list[str]]:
    """A base and delta runs (newest first) of ``table`` with these records (a run's value is
    None for a tombstone)."""
    from webdb.tables.format import DELTA_KINDS, TABLE_KINDS
    from webdb.tables.levels import DEL, PUT

    def write(path, kind, recs):
        w = TableWriter(str(path), kind, block_size=block_size, sync=False)
        for k, v in recs:
            w.add(k, v)
        w.close()
        return str(path)

    b = write(tmp / "base", TABLE_KINDS[table], sorted(base.items()))
    rs = [
        write(tmp / f"run{i}", DELTA_KINDS[table], [(k, DEL if v is None else PUT + v) for k, v in sorted(r.items())])
        for i, r in enumerate(runs)
    ]
    return b, rs


_lkey = st.integers(0, 299).map(lambda i: b"k%03d" % i)
_lval = st.binary(max_size=12)


@needs_c
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["links_by_md5", "links_by_url"]),
    st.dictionaries(_lkey, _lval, max_size=200),
    st.lists(st.dictionaries(_lkey, st.none() | _lval, max_size=80), max_size=3),
    st.sampled_from([64, 256, 4096]),
    st.lists(st.tuples(_lkey, st.integers(0, 12), st.booleans()), max_size=40),
)
def test_levelseek_reads_as_the_seekers(tmp_path_factory, table, base, runs, block_size, asks):
    """The same answers, block reads and places as the Python Seekers, for ranges and keys asked
    in increasing order, on tiny blocks (lz4 pieces for links_by_url) and runs with tombstones."""
    from webdb.tables.levels import LevelCursor, open_levels

    tmp = tmp_path_factory.mktemp("seek")
    b, rs = _level_files(tmp, table, base, runs, block_size)
    model = dict(base)
    for r in reversed(runs):  # oldest first
        for k, v in r.items():
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
    views = [open_levels(b, rs, table, len(model)) for _ in range(2)]
    c, py = (LevelCursor(v, TableWriter(str(tmp / f"out{i}"), 13, sync=False)) for i, v in enumerate(views))
    # (An empty file has no index block to search in place: the Seekers read such a view.)
    assert (c._c is not None) == bool(base and all(runs))
    py._c = None
    # Increasing, disjoint asks: a range [k, k + width) (width 0: a point get of k).
    prev = b""
    for k, width, _ in sorted(asks):
        if k < prev:
            continue
        if width == 0:
            got, want = c._get(k), py._get(k)
            assert got == want == model.get(k)
            prev = k + b"\x00"
        else:
            hi = b"k%03d" % (int(k[1:]) + width)
            got, want = c._range(k, hi), py._range(k, hi)
            inside = [x for x in sorted(model) if k <= x < hi]
            assert got == want == (inside, [model[x] for x in inside])
            prev = hi
        assert c.decoded_blocks == py.decoded_blocks
    for cur in (c, py):
        cur.out.close()
    for v in views:
        v.close()


@needs_c
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 700), min_size=1, max_size=60), st.integers(0, 2**32 - 1))
def test_levelseek_search_from_the_block_at_hand_any_distance(tmp_path_factory, gaps, seed):
    """Keys asked at every distance from the block at hand (the same block, the next, a jump
    over hundreds of blocks, past the last key), in a base and runs of hundreds of tiny blocks:
    the same answers, block reads and places as the Python Seekers (which bisect the rest of the
    index), for point reads, ranges and splices."""
    import random

    from webdb.tables.levels import LevelCursor, open_levels
    from webdb.tables.merge import Splice

    rnd = random.Random(seed)
    tmp = tmp_path_factory.mktemp("gallop")
    key = b"u%05d".__mod__
    base = {key(i): b"v%d" % i for i in range(0, 6000, 2)}
    runs = [{key(i): (None if i % 3 == 0 else b"r%d" % i) for i in range(j, 6000, 7 + 4 * j)} for j in range(2)]
    b, rs = _level_files(tmp, "links_by_url", base, runs, 64)
    model = dict(base)
    for r in reversed(runs):
        for k, v in r.items():
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
    views = [open_levels(b, rs, "links_by_url", len(model)) for _ in range(3)]
    c, py, cs = (LevelCursor(v, TableWriter(str(tmp / f"out{i}"), 13, sync=False)) for i, v in enumerate(views))
    assert c._c is not None and views[0].base.nblocks > 300
    py._c = None
    i = 0
    for g in gaps:
        i += g
        k, k1 = key(i), key(i + 1)
        how = rnd.randrange(3)
        if how == 0:
            assert c._get(k) == py._get(k) == model.get(k)
        elif how == 1:
            hi = key(i + 3)
            inside = [x for x in sorted(model) if k <= x < hi]
            assert c._range(k, hi) == py._range(k, hi) == (inside, [model[x] for x in inside])
            i += 2
        else:
            # (A splice reads points where the Python path reads the range: other blocks, so
            # cs, a third cursor, splices, and its changes are checked against the model.)
            out_k: list[bytes] = []
            out_v: list[bytes] = []
            live = cs._splice(Splice([(k, b"new"), (k1, None)]), k, key(i + 2), out_k, out_v)
            want = [(k, b"\x01new")] if model.get(k) != b"new" else []
            want += [(k1, b"\x00")] if k1 in model else []
            assert list(zip(out_k, out_v)) == want
            assert live == (k not in model) - (k1 in model)
            assert cs._c is not None
        i += 2
        assert c.decoded_blocks == py.decoded_blocks
        assert c._c is not None
    for cur in (c, py, cs):
        cur.out.close()
    for v in views:
        v.close()


@needs_c
@pytest.mark.parametrize("table", ["links_by_md5", "links_by_url"])
def test_levelseek_point_read_below_the_last_in_its_block(tmp_path, table):
    """A point read searches a block from where the last one in it ended; a key below that one
    (the same block: its index search stays there) is still found, in a whole block and in a
    block held in lz4 pieces."""
    from webdb.tables.levels import open_levels

    base = {b"k%04d" % i: b"v%d" % i + b"x" * 20 for i in range(0, 400, 2)}
    b, _ = _level_files(tmp_path, table, base, [], 4096)
    view = open_levels(b, [], table, len(base))
    c = view.level_seek()
    t = view.base
    assert t.nblocks >= 2
    keys = sorted(base)
    for blk in range(t.nblocks):  # in each block: its last key, then its first, then a middle one
        inside = [k for k in keys if t.first_keys[blk] <= k <= t.last_keys[blk]]
        assert len(inside) > 20
        for k in (inside[-1], inside[0], inside[len(inside) // 2], inside[3]):
            assert c.get(k) == base[k]
            assert c.get(k + b"\x00") is None
    view.close()


@needs_c
def test_levelseek_leaves_a_damaged_run_to_the_python_path(tmp_path):
    """A block the C reads find unsound (here: a flipped byte) is read again by the Seekers,
    whose CorruptionError names the run; a delta record whose op byte is neither PUT nor DEL
    likewise."""
    from webdb.errors import CorruptionError
    from webdb.tables.levels import LevelCursor, open_levels

    base = {b"k%03d" % i: b"v%d" % i for i in range(0, 300, 2)}
    b, rs = _level_files(tmp_path, "links_by_md5", base, [{b"k%03d" % i: b"r" for i in range(0, 300, 3)}], 64)
    data = bytearray(open(rs[0], "rb").read())
    data[30] ^= 0xFF
    open(rs[0], "wb").write(bytes(data))
    view = open_levels(b, rs, "links_by_md5", 0)
    cur = LevelCursor(view, TableWriter(str(tmp_path / "out"), 13, sync=False))
    assert cur._c is not None
    with pytest.raises(CorruptionError, match="run0"):
        cur._range(b"k000", b"k010")
    assert cur._c is None
    view.close()

    bad = TableWriter(str(tmp_path / "bad"), 13, block_size=64, sync=False)
    bad.add(b"k004", b"\x07x")
    bad.close()
    for ask in ("get", "range"):
        view = open_levels(b, [str(tmp_path / "bad")], "links_by_md5", 0)
        cur = LevelCursor(view, TableWriter(str(tmp_path / f"out-{ask}"), 13, sync=False))
        with pytest.raises(CorruptionError, match="bad"):
            cur._get(b"k004") if ask == "get" else cur._range(b"k000", b"k010")
        view.close()


@needs_c
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["links_by_md5", "links_by_url"]),
    st.dictionaries(_lkey, _lval, max_size=200),
    st.lists(st.dictionaries(_lkey, st.none() | _lval, max_size=80), max_size=3),
    st.sampled_from([64, 256, 4096]),
    st.lists(
        st.tuples(st.integers(0, 299), st.integers(1, 12), st.sampled_from(["splice", "range", "get"])), max_size=30
    ),
    st.data(),
)
def test_levelseek_splice_is_the_range_diffed(tmp_path_factory, table, base, runs, block_size, asks, data):
    """``LevelSeek.splice`` (a Splice applied by point reads, the range never read) appends the
    changes and returns the live count that reading the range and diffing it does (the Python
    Seekers and ``diff_py``), interleaved with ranges and keys asked in increasing order."""
    from webdb.tables.levels import LevelCursor, open_levels

    tmp = tmp_path_factory.mktemp("splice")
    b, rs = _level_files(tmp, table, base, runs, block_size)
    views = [open_levels(b, rs, table, 0) for _ in range(2)]
    c, py = (LevelCursor(v, TableWriter(str(tmp / f"out{i}"), 13, sync=False)) for i, v in enumerate(views))
    assert (c._c is not None) == bool(base and all(runs))
    py._c = None
    prev = 0
    ck: list[bytes] = []
    cv: list[bytes] = []
    pk: list[bytes] = []
    pv: list[bytes] = []
    for i, width, ask in sorted(asks):
        if i < prev:
            continue
        lo, hi = b"k%03d" % i, b"k%03d" % (i + width)
        prev = i + width
        if ask == "get":
            assert c._get(lo) == py._get(lo)
        elif ask == "range":
            assert c._range(lo, hi) == py._range(lo, hi)
        else:
            picked = sorted(set(data.draw(st.lists(st.integers(i, i + width - 1), max_size=width))))
            sp = Splice((b"k%03d" % j, data.draw(st.none() | _lval)) for j in picked)
            assert c._splice(sp, lo, hi, ck, cv) == py._splice(sp, lo, hi, pk, pv)
            assert (ck, cv) == (pk, pv)
    assert (c._c is not None) == bool(base and all(runs))  # a sound view: never dropped
    for cur in (c, py):
        cur.out.close()
    for v in views:
        v.close()


@needs_c
@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(_lkey, _lval, max_size=200),
    st.lists(st.dictionaries(_lkey, st.none() | _lval, max_size=80), max_size=3),
    st.sampled_from([64, 4096]),
    st.lists(st.tuples(st.integers(0, 299), st.integers(1, 12), st.booleans()), max_size=30),
    st.data(),
)
def test_merge_ranges_splice_hook_writes_what_combine_writes(tmp_path_factory, base, runs, block_size, asks, data):
    """``LevelCursor.merge_ranges`` with a ``splice`` hook (the Splice applied by
    ``LevelSeek.splice``, the range not read) writes the run and live count that the same Splice
    returned by ``combine`` writes on the Python path (Seekers, ``diff_py``); groups the hook
    passes on (None) go to ``combine`` with their range."""
    from webdb.tables.levels import LevelCursor, open_levels

    tmp = tmp_path_factory.mktemp("hook")
    b, rs = _level_files(tmp, "links_by_url", base, runs, block_size)
    groups, prev = [], 0
    for i, width, hooked in sorted(asks):
        if i < prev:
            continue
        prev = i + width
        picked = sorted(set(data.draw(st.lists(st.integers(i, i + width - 1), max_size=width))))
        sp = Splice((b"k%03d" % j, data.draw(st.none() | _lval)) for j in picked)
        groups.append((b"k%03d" % i, b"k%03d" % (i + width), (hooked, sp)))
    seen = []

    def combine(lo, ok, old_values, payload):
        seen.append(lo)
        return payload[1]

    outs = []
    for hook in (True, False):
        view = open_levels(b, rs, "links_by_url", 0)
        out = TableWriter(str(tmp / f"out{hook}"), 13, sync=False)
        cur = LevelCursor(view, out)
        if hook:
            cur.merge_ranges(iter(groups), combine, lambda lo, payload: payload[1] if payload[0] else None)
        else:
            cur._c = None
            cur.merge_ranges(iter(groups), combine)
        out.close()
        view.close()
        t = TableReader(out.path)
        outs.append((list(t.items()), cur.live))
        t.close()
    assert outs[0] == outs[1]
    assert seen == [lo for lo, _, (h, _) in groups if not h] + [lo for lo, _, _ in groups]


@needs_c
def test_levelseek_splice_declines_and_leaves_damage_to_the_python_path(tmp_path):
    """A splice out of order or range is declined (None, nothing read or appended) and the
    Python diff names it; a spliced key in a damaged block of a run gives False with nothing
    appended (the records of keys before it taken back), and the Seekers' CorruptionError names
    the run."""
    from webdb.tables.levels import LevelCursor, open_levels

    base = {b"k%03d" % i: b"v%d" % i for i in range(0, 300, 2)}
    b, rs = _level_files(tmp_path, "links_by_md5", base, [{b"k%03d" % i: b"r" for i in range(0, 300, 3)}], 64)
    view = open_levels(b, rs, "links_by_md5", 0)
    cur = LevelCursor(view, TableWriter(str(tmp_path / "out"), 13, sync=False))
    ok, ov = [b"x"], [b"y"]
    for sp in (Splice([(b"k005", b"a"), (b"k003", b"b")]), Splice([(b"k001", b"a"), (b"k400", None)])):
        assert cur._c.splice(sp, b"k000", b"k300", ok, ov) is None
        assert (ok, ov) == ([b"x"], [b"y"])
        with pytest.raises(CorruptionError, match="out"):
            cur._splice(sp, b"k000", b"k300", [], [])
    view.close()

    t = TableReader(rs[0])
    off = t.offsets[1]  # the run's second block: keys after its first block's
    first1 = t.first_keys[1]
    t.close()
    data = bytearray(open(rs[0], "rb").read())
    data[off + 3] ^= 0xFF
    open(rs[0], "wb").write(bytes(data))
    view = open_levels(b, rs, "links_by_md5", 0)
    cur = LevelCursor(view, TableWriter(str(tmp_path / "out2"), 13, sync=False))
    sp = Splice([(b"k000", b"new"), (first1, None)])  # k000: in the run's first block, sound
    out_k, out_v = [b"x"], [b"y"]
    assert cur._c.splice(sp, b"k000", first1 + b"\x00", out_k, out_v) is False
    assert (out_k, out_v) == ([b"x"], [b"y"])
    with pytest.raises(CorruptionError, match="run0"):
        cur._splice(sp, b"k000", first1 + b"\x00", out_k, out_v)
    assert cur._c is None
    view.close()


def _piece_spans(path: str, b: int) -> tuple[int, list[tuple[int, int]], list[bytes]]:
    """Block b of a table file in lz4 pieces: its offset in the file, each piece's (start, end)
    in the block's bytes and the pieces' first keys (b"" for piece 0)."""
    t = TableReader(path)
    off, length = t.offsets[b], t.lengths[b]
    t.close()
    with open(path, "rb") as f:
        data = f.read()[off : off + length]
    assert data[-5] == 3  # codec 3
    _, tab, first = block.pieces_header(data[:-5], len(data) - 5)
    at, spans = 0, []
    for cl, _, _ in tab:
        spans.append((at, at + cl))
        at += cl
    return off, spans, first


def _pieces_base(tmp, n: int = 600) -> tuple[str, dict]:
    """A LinksByURL base of n records in blocks of 4 KiB: lz4 pieces of 1 KiB."""
    base = {b"u%04d" % i: b"v" * 20 + b"%d" % i for i in range(n)}
    b, _ = _level_files(tmp, "links_by_url", base, [], 4096)
    return b, base


@needs_c
def test_levelseek_decompresses_only_the_pieces_a_read_reaches(tmp_path):
    """Ranges and keys far apart in a base held in lz4 pieces decompress a piece each, not the
    block, with the records and places of the Python Seekers (which decode whole blocks)."""
    from webdb.tables.levels import LevelCursor, open_levels

    b, base = _pieces_base(tmp_path)
    _, spans, first = _piece_spans(b, 0)
    assert len(spans) >= 3
    views = [open_levels(b, [], "links_by_url", len(base)) for _ in range(2)]
    c, py = (LevelCursor(v, TableWriter(str(tmp_path / f"out{i}"), 13, sync=False)) for i, v in enumerate(views))
    py._c = None
    keys = sorted(base)
    # A range across a piece boundary reads both pieces and stops where the next piece starts.
    lo = max(k for k in keys if k < first[1])
    want = ([lo, first[1]], [base[lo], base[first[1]]])
    assert c._range(lo, first[1] + b"\x00") == py._range(lo, first[1] + b"\x00") == want
    assert c._c.pieces[0] == 2
    for i in range(len(keys) // 2, len(keys) - 2, 97):
        lo, hi = keys[i], keys[i + 2]
        assert c._range(lo, hi) == py._range(lo, hi) == (keys[i : i + 2], [base[k] for k in keys[i : i + 2]])
        assert c._get(keys[i + 2]) == py._get(keys[i + 2]) == base[keys[i + 2]]
        assert c.decoded_blocks == py.decoded_blocks
    read, held = c._c.pieces
    assert 0 < read < held and read <= 2 + 2 * (c.decoded_blocks - 1)
    for cur in (c, py):
        cur.out.close()
    for v in views:
        v.close()


@needs_c
@pytest.mark.parametrize("ask", ["range", "get"])
def test_levelseek_damaged_piece_is_named_when_read_and_untouched_otherwise(tmp_path, ask):
    """A flipped byte in one piece of a base block: a read that reaches the piece is left to the
    Python path, whose CorruptionError names the file (as for a whole block); a read of the
    block's other pieces decompresses only those, whose checksums hold, and gets their records
    (as a lookup's ``short_range`` does)."""
    from webdb.tables.levels import LevelCursor, open_levels

    b, base = _pieces_base(tmp_path)
    off, spans, first = _piece_spans(b, 0)
    s, e = spans[1]
    with open(b, "rb") as f:
        data = bytearray(f.read())
    data[off + (s + e) // 2] ^= 0xFF
    with open(b, "wb") as f:
        f.write(bytes(data))
    keys = sorted(base)
    view = open_levels(b, [], "links_by_url", len(base))
    cur = LevelCursor(view, TableWriter(str(tmp_path / "out"), 13, sync=False))
    assert cur._c is not None
    assert cur._range(keys[0], keys[1]) == ([keys[0]], [base[keys[0]]])  # piece 0: sound
    assert cur._c is not None and cur._c.pieces[0] == 1
    with pytest.raises(CorruptionError, match="base"):
        cur._range(first[1], first[1] + b"\x00") if ask == "range" else cur._get(first[1])
    assert cur._c is None
    cur.out.close()
    view.close()


@given(
    st.lists(st.tuples(_key, _val), max_size=20),
    st.integers(0, 2**39),
    st.binary(min_size=3, max_size=3),
    st.binary(min_size=16, max_size=16),
    st.sampled_from([edits.OP_IF_NEW, edits.OP_FETCH, edits.OP_LASTMOD]),
)
def test_record_builders_are_edits_pack(kv, n0, prefix, md5, op):
    """Every shortcut of edits.py that builds records (the hot loops' one call per edit) makes
    ``edits.pack``'s bytes, with the C ``pack_edits`` and without it."""
    keys, vals = [k for k, _ in kv], [v for _, v in kv]
    seq = lambda i: prefix + (n0 + i).to_bytes(5, "big")  # noqa: E731
    want = [edits.pack(k, seq(i), v) for i, (k, v) in enumerate(kv, 1)]
    assert edits.pack_many(keys, vals, prefix, n0) == want
    assert [edits.pack_at(k, prefix, n0 + i, v) for i, (k, v) in enumerate(kv, 1)] == want
    pure = edits.pack_edits
    try:
        edits.pack_edits = lambda *a: None  # as without the compiled codec
        assert edits.pack_many(keys, vals, prefix, n0) == want
    finally:
        edits.pack_edits = pure
    for i, (url, v) in enumerate(kv, 1):
        assert edits.pages_by_url_record(url, op, prefix, n0 + i, v) == edits.pack(
            edits.pages_by_url_edit_key(url, op), seq(i), v
        )
        assert edits.links_by_md5_add_record(md5, url, prefix, n0 + i, v) == edits.pack(
            edits.links_by_md5_add_key(md5, url), seq(i), v
        )
    pp, lp = edits.outlink_seq_prefixes(prefix)
    assert (
        pp == edits.pages_by_url_edit_key(b"", edits.OP_IF_NEW) + prefix
        and lp == edits.links_by_md5_add_key(b"", b"")[-1:] + prefix
    )
