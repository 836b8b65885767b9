"""Table files: round trips against sorted(), lookups, merges, and corruption of every part."""

from __future__ import annotations

import os
import platform
import random
import sys

import pytest

from webdb.errors import CorruptionError
from webdb.tables.block import COMPILED
from webdb.tables.format import FOOTER_SIZE, KIND_PAGES_BY_MD5, KIND_PAGES_BY_URL
from webdb.tables.merge import MergeCursor
from webdb.tables.table import BlockCache, Probe, TableReader, TableWriter


def build(path, keys, block_size=256, codec="lz4"):
    w = TableWriter(str(path), KIND_PAGES_BY_URL, block_size, codec, sync=False)
    for k in keys:
        w.add(k, k[::-1] * 2)
    w.close({"test": True})
    return TableReader(str(path), KIND_PAGES_BY_URL, BlockCache(1 << 20))


def rand_keys(rng, n):
    # Many shared prefixes and keys that are prefixes of others.
    alphabet = [b"a", b"b", b"/", b"\x00", b"\xff", b"http://x/"]
    return sorted({b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(n)})


@pytest.mark.parametrize("codec", ["lz4", "zlib", "none"])
def test_round_trip_and_lookup(tmp_path, codec):
    rng = random.Random(3)
    keys = rand_keys(rng, 3000)
    t = build(tmp_path / "t", keys, codec=codec)
    assert t.count == len(keys) and t.nblocks > 10
    assert [k for k, _ in t.items()] == keys
    for k in rng.sample(keys, 300):
        assert t.get(k) == k[::-1] * 2
    assert t.get(b"zzz") is None and t.get(b"") is None
    lo, hi = keys[100], keys[900]
    assert [k for k, _ in t.items(lo, hi)] == [k for k in keys if lo <= k < hi]
    p = keys[50][:2]
    assert [k for k, _ in t.prefix(p)] == [k for k in keys if k.startswith(p)]


def test_empty_table(tmp_path):
    t = build(tmp_path / "e", [])
    assert t.count == 0 and list(t.items()) == [] and t.get(b"a") is None


def test_writer_rejects_unsorted_and_never_overwrites(tmp_path):
    w = TableWriter(str(tmp_path / "u"), 1, sync=False)
    w.add(b"b", b"")
    with pytest.raises(
        CorruptionError, match="keys out of order.*an input of this merge holds its records out of order"
    ):
        w.add(b"a", b"")
    w.abort()
    build(tmp_path / "x", [b"a"])
    with pytest.raises(FileExistsError):
        TableWriter(str(tmp_path / "x"), 1)


def test_merge_cursor_carries_untouched_blocks_raw(tmp_path):
    rng = random.Random(5)
    keys = [b"k%06d" % i for i in range(0, 20000, 2)]
    old = build(tmp_path / "old", keys, block_size=1024)
    ins = sorted(rng.sample([b"k%06d" % i for i in range(1, 20000, 2)], 20))
    w = TableWriter(str(tmp_path / "new"), KIND_PAGES_BY_URL, 1024, sync=False)
    m = MergeCursor(old, w)
    for k in ins:
        m.copy_until(k)
        assert m.take_until(k + b"\x00") == ([], [])
        w.add(k, b"new")
    m.finish()
    w.close()
    new = TableReader(str(tmp_path / "new"))
    assert [k for k, _ in new.items()] == sorted(keys + ins)
    # Only the blocks an insert falls into (and a few neighbours to refill) were decoded.
    assert m.decoded_blocks <= 3 * len(ins) and m.raw_blocks > old.nblocks - 3 * len(ins)
    # Carried blocks are byte-identical to the old ones (copied, not re-encoded).
    old_blocks = {old.raw_block(i) for i in range(old.nblocks)}
    identical = sum(new.raw_block(i) in old_blocks for i in range(new.nblocks))
    assert identical >= old.nblocks - 3 * len(ins)


@pytest.mark.parametrize("seed", range(6))
def test_patch_points_equals_merge_points(tmp_path, seed):
    """In-place patches (same-length value rewrites) give the table merge_points gives, and
    blocks whose edits are all patches are never split into records."""
    rng = random.Random(seed)
    keys = [b"k%06d" % i for i in range(0, 8000, 2)]
    old = build(tmp_path / "old", keys, block_size=512)
    edits = {}
    for k in rng.sample(keys, 300):  # flips: same length
        edits[k] = ("flip", None)
    for k in rng.sample(keys, rng.choice([0, 3, 30])):  # deletes and length changes
        edits[k] = rng.choice([("del", None), ("set", b"longer value")])
    for i in rng.sample(range(1, 8000, 2), 10):  # absent keys: a flip of nothing is nothing
        edits[b"k%06d" % i] = rng.choice([("flip", None), ("set", b"new")])
    groups = sorted(edits.items())

    def combine(key, old_v, payload):
        op, v = payload
        if op == "flip":
            return None if old_v is None else old_v[:1] + bytes((old_v[1] ^ 1,)) + old_v[2:]
        return None if op == "del" else v

    out = {}
    for how in ("merge", "patch"):
        w = TableWriter(str(tmp_path / how), KIND_PAGES_BY_URL, 512, sync=False)
        m = MergeCursor(TableReader(str(tmp_path / "old")), w)
        if how == "merge":
            m.merge_points(iter(groups), combine)
        else:
            m.patch_points(iter(groups), combine, lambda p: p[0] == "flip")
        m.finish()
        w.close()
        out[how] = list(TableReader(str(tmp_path / how)).items())
        stats = (m.decoded_blocks, m.raw_blocks, m.patched_blocks)
    assert out["patch"] == out["merge"]
    decoded, raw, patched = stats
    assert patched > old.nblocks // 3 and decoded < old.nblocks // 2
    nb = TableReader(str(tmp_path / "patch")).nblocks
    assert old.nblocks - 5 <= nb <= old.nblocks + 5, (nb, old.nblocks)  # no fragmentation


def test_probe_sorted_lookups(tmp_path):
    keys = [b"p%05d" % i for i in range(5000)]
    t = build(tmp_path / "p", keys)
    pr = Probe(t)
    assert pr.get(b"p00010") is not None and pr.get(b"p00010x") is None
    assert pr.has_prefix(b"p0499") and not pr.has_prefix(b"q")


@pytest.mark.parametrize("kind", [KIND_PAGES_BY_URL, KIND_PAGES_BY_MD5])
def test_probe_get_compiled_equals_python(tmp_path, kind):
    """Probe.get through its one-file LevelSeek (compiled; lz4 pieces for PagesByURL) and through
    the Python path give the same values for random increasing keys, present and absent; a key
    below the last one asked hands over to the Python path, which still answers it."""
    rng = random.Random(kind)
    keys = rand_keys(rng, 3000)
    w = TableWriter(str(tmp_path / "t"), kind, 1024, sync=False)
    for k in keys:
        w.add(k, k[::-1] * 2)
    w.close()
    t = TableReader(str(tmp_path / "t"), kind, lazy=True)  # its index kept in place
    c, py = Probe(t), Probe(t)
    assert (c._c is not None) == COMPILED
    py._c = None
    asks = sorted(rng.sample(keys, 400) + [k + b"\x01" for k in rng.sample(keys, 200)] + [b"", b"\xff\xff"])
    for k in asks:
        assert c.get(k) == py.get(k) == (k[::-1] * 2 if k in set(keys) else None)
    if COMPILED:
        read, held = c._c.pieces
        assert (0 < read < held) if kind == KIND_PAGES_BY_URL else held == 0
    assert c.get(keys[5]) == keys[5][::-1] * 2 and c._c is None  # backwards: the Python path
    t.close()


@pytest.mark.parametrize("kind", [KIND_PAGES_BY_URL, KIND_PAGES_BY_MD5])
def test_probe_has_prefix_compiled_equals_python(tmp_path, kind):
    """Probe.has_prefix through its one-file LevelSeek (a range read, compiled) and through the
    Python path agree on increasing prefixes: keys' prefixes, whole keys, absent ones, prefixes
    of 0xff bytes (no upper bound: the Python path answers, the LevelSeek stays), get asked
    between them; a key or prefix below the end of the last range read (``prefix_end``) hands
    over to the Python path, which still answers it."""
    rng = random.Random(kind + 7)
    keys = rand_keys(rng, 3000)
    w = TableWriter(str(tmp_path / "t"), kind, 1024, sync=False)
    for k in keys:
        w.add(k, k[::-1] * 2)
    w.close()
    t = TableReader(str(tmp_path / "t"), kind, lazy=True)
    c, py = Probe(t), Probe(t)
    assert (c._c is not None) == COMPILED
    py._c = None
    # Distinct prefixes none of which starts with another, each followed by a key above its range.
    asks = sorted({k[: rng.randint(1, len(k))] for k in rng.sample(keys, 500)} | {b"\xff", b"c", b"http://x/zz"})
    asks = [p for i, p in enumerate(asks) if i + 1 == len(asks) or not asks[i + 1].startswith(p)]
    for i, p in enumerate(asks):
        want = any(k.startswith(p) for k in keys)
        assert c.has_prefix(p) == py.has_prefix(p) == want, p
        if i % 7 == 0 and p[-1] != 0xFF:
            after = p[:-1] + bytes((p[-1] + 1,))  # prefix_end(p): no key of the range
            assert c.get(after) == py.get(after)
    assert (c._c is not None) == COMPILED  # every read in order: never handed over
    if COMPILED:
        p = asks[-2]
        assert c.has_prefix(p) == py.has_prefix(p) and c._c is None  # again: the Python path
        c2 = Probe(t)
        assert c2.has_prefix(b"a") and c2.has_prefix(b"ab") == any(k.startswith(b"ab") for k in keys)
        assert c2._c is None  # b"ab" lies in b"a"'s range: the Python path
    t.close()


def test_probe_has_prefix_names_a_damaged_block(tmp_path):
    """A flipped byte in a block the compiled has_prefix reaches: the Python path reads the block
    and its CorruptionError names the file."""
    keys = [b"p%05d" % i for i in range(3000)]
    w = TableWriter(str(tmp_path / "m"), KIND_PAGES_BY_MD5, 1024, sync=False)
    for k in keys:
        w.add(k, k[::-1] * 2)
    w.close()
    t = TableReader(str(tmp_path / "m"), KIND_PAGES_BY_MD5)
    off, first_of_block = t.offsets[3] + 10, t.first_keys[3]
    t.close()
    _flip(tmp_path / "m", off)
    t = TableReader(str(tmp_path / "m"), KIND_PAGES_BY_MD5, lazy=True)
    pr = Probe(t)
    assert pr.has_prefix(keys[0][:4]) and not pr.has_prefix(b"p00000x")
    with pytest.raises(CorruptionError, match="m"):
        pr.has_prefix(first_of_block[:5])
    t.close()


def test_probe_get_names_a_damaged_piece(tmp_path):
    """A flipped byte in a piece the compiled get reaches: the Python path reads the block and its
    CorruptionError names the file."""
    keys = [b"p%05d" % i for i in range(3000)]
    t = build(tmp_path / "p", keys, block_size=4096)
    off = t.offsets[3] + 10
    first_of_block = t.first_keys[3]
    t.close()
    _flip(tmp_path / "p", off)
    t = TableReader(str(tmp_path / "p"), KIND_PAGES_BY_URL, lazy=True)
    pr = Probe(t)
    assert pr._c is not None or not COMPILED
    assert pr.get(keys[0]) == keys[0][::-1] * 2
    with pytest.raises(CorruptionError, match="p"):
        pr.get(first_of_block)
    t.close()


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def test_flipped_data_byte_names_file_and_block(tmp_path):
    keys = [b"key%05d" % i for i in range(3000)]
    t = build(tmp_path / "c", keys)
    off = t.offsets[7] + 3
    t.close()
    _flip(tmp_path / "c", off)
    t = TableReader(str(tmp_path / "c"))
    with pytest.raises(CorruptionError, match=r"c: block 7 at offset \d+: checksum mismatch"):
        list(t.items())


@pytest.mark.parametrize("codec", ["lz4", "none"])
def test_check_crcs_reads_each_slice_once_and_names_the_damaged_block(tmp_path, codec):
    """The scrub (``check_crcs``) maps a slice of the file: the slices of any count cover every
    data byte once, and a flipped byte anywhere in a block (body or codec byte) is named, by
    the slice that holds the block only."""
    rng = random.Random(11)
    keys = [b"key%06d" % i for i in range(6000)]
    path = tmp_path / "s"
    t = build(path, keys, codec=codec)
    data_bytes = t.offsets[-1] + t.lengths[-1]
    assert t.nblocks > 100 and data_bytes > 3 * 4096  # slices start past the first page
    for shares in (1, 3, 7):
        assert sum(t.check_crcs(j, shares) for j in range(shares)) == data_bytes
    damaged = sorted(rng.sample(range(t.nblocks), 3)) + [t.nblocks - 1]
    spots = {b: t.offsets[b] + rng.randrange(t.lengths[b]) for b in damaged}
    t.close()
    for b, off in spots.items():
        _flip(path, off)
        t = TableReader(str(path))
        for shares in (1, 4):
            for j in range(shares):
                lo, hi = t.nblocks * j // shares, t.nblocks * (j + 1) // shares
                if lo <= b < hi:
                    with pytest.raises(CorruptionError, match=rf"s: block {b} at offset {t.offsets[b]}: checksum"):
                        t.check_crcs(j, shares)
                else:
                    t.check_crcs(j, shares)
        t.close()
        _flip(path, off)  # mended for the next block
    t = TableReader(str(path))
    assert t.check_crcs() == data_bytes


def test_check_crcs_names_a_block_cut_off_after_open(tmp_path):
    """A file shortened under an open reader: the scrub names the first block past its end
    rather than touching a page the file no longer has."""
    keys = [b"key%06d" % i for i in range(3000)]
    t = build(tmp_path / "cut", keys)
    cut = t.offsets[-3] + 5
    os.truncate(tmp_path / "cut", cut)
    with pytest.raises(CorruptionError, match=rf"cut: block {t.nblocks - 3} at offset {t.offsets[-3]}: truncated"):
        t.check_crcs()
    t.close()


@pytest.mark.parametrize("where", ["footer-magic", "footer-offsets", "index", "meta"])
def test_flipped_structure_byte_fails_on_open(tmp_path, where):
    keys = [b"key%05d" % i for i in range(3000)]
    t = build(tmp_path / "s", keys)
    size = os.path.getsize(tmp_path / "s")
    off = {
        "footer-magic": size - 3,
        "footer-offsets": size - FOOTER_SIZE + 1,
        "index": t.data_end + 5,
        "meta": size - FOOTER_SIZE - 10,
    }[where]
    t.close()
    _flip(tmp_path / "s", off)
    with pytest.raises(CorruptionError, match=str(tmp_path / "s")):
        TableReader(str(tmp_path / "s"))


@pytest.mark.parametrize("cut", [1, 20, 47, 48, 1000, 5000])
def test_truncated_file_fails_on_open(tmp_path, cut):
    build(tmp_path / "t", [b"key%05d" % i for i in range(3000)]).close()
    size = os.path.getsize(tmp_path / "t")
    os.truncate(tmp_path / "t", size - cut)
    with pytest.raises(CorruptionError, match="truncated|footer|magic|offsets"):
        TableReader(str(tmp_path / "t"))


def test_not_a_table(tmp_path):
    (tmp_path / "n").write_bytes(b"hello" * 100)
    with pytest.raises(CorruptionError, match="not a webdb table"):
        TableReader(str(tmp_path / "n"))


@pytest.mark.parametrize("seed", range(8))
def test_add_run_cuts_blocks_as_add_many(tmp_path, seed):
    """Records handed over as runs (bytes + lengths, what a merge splices from old blocks) give
    the same file, byte for byte, as the same calls made with add_many and add."""
    rng = random.Random(seed)
    keys = rand_keys(rng, 2000)
    vals = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 5, 40, 300]))) for _ in keys]
    bs = rng.choice([64, 256, 1024, 4096])
    calls, i = [], 0
    while i < len(keys):
        j = min(len(keys), i + rng.choice([1, 2, 7, 30, 200]))
        calls.append((rng.choice(["many", "run", "run", "add"]), i, j))
        i = j
    files = {}
    for how in ("reference", "runs"):
        path = str(tmp_path / how)
        w = TableWriter(path, KIND_PAGES_BY_URL, bs, "lz4", sync=False)
        for op, i, j in calls:
            ks, vs = keys[i:j], vals[i:j]
            if op == "add":
                for k, v in zip(ks, vs):
                    w.add(k, v)
            elif op == "many" or how == "reference":
                w.add_many(ks, vs)
            else:
                lens = [n for k, v in zip(ks, vs) for n in (len(k), len(v))]
                w.add_run(b"".join(k + v for k, v in zip(ks, vs)), lens)
        w.close()
        files[how] = open(path, "rb").read()
    assert files["runs"] == files["reference"]
    assert list(TableReader(str(tmp_path / "runs")).items()) == list(zip(keys, vals))


def test_add_run_checks_order(tmp_path):
    w = TableWriter(str(tmp_path / "o"), KIND_PAGES_BY_URL, 256, sync=False)
    w.add_run(b"bxcy", [1, 1, 1, 1])
    with pytest.raises(CorruptionError, match="keys out of order"):
        w.add_run(b"ax", [1, 1])
    with pytest.raises(CorruptionError, match="absorbed block out of order"):
        w.absorb_run(b"ax", [1, 1])
    with pytest.raises(CorruptionError, match="raw block out of order"):
        w.add_raw_block(b"", b"a", b"a", 1)
    with pytest.raises(CorruptionError, match="keys out of order in add_many"):
        w.add_many([b"d", b"c"], [b"", b""])
    w.abort()


@pytest.mark.parametrize("seed", range(10))
def test_merges_match_a_model(tmp_path, seed):
    """merge_points and merge_ranges (full results and Splices, ranges within and across
    blocks) against a dict, at block sizes from a few records to many."""
    rng = random.Random(seed)
    bs = rng.choice([48, 128, 512, 4096])
    keys = [b"k%05d" % i for i in range(0, 3000, 3)]
    model = {k: b"v" + k for k in keys}
    w = TableWriter(str(tmp_path / "old0"), KIND_PAGES_BY_URL, bs, sync=False)
    w.add_many(keys, [model[k] for k in keys])
    w.close()
    check_merge_points(tmp_path, rng, bs, model)
    check_merge_ranges(tmp_path, rng, bs, model)


def check_merge_points(tmp_path, rng, bs, model):
    """Points: set, delete or keep keys stored or not (the table old0 holds ``model``)."""
    pts = sorted(rng.sample(range(3000), rng.choice([0, 5, 100, 1500])))
    groups = [(b"k%05d" % i, rng.choice(["set", "del", "keep"])) for i in pts]

    def combine_pt(key, v, op):
        return {"set": b"new" * rng.randint(0, 3) + key, "del": None, "keep": v}[op]

    w = TableWriter(str(tmp_path / "pts"), KIND_PAGES_BY_URL, bs, sync=False)
    m = MergeCursor(TableReader(str(tmp_path / "old0")), w)
    want = dict(model)
    results = {}

    def combine_pt_rec(key, v, op):
        r = combine_pt(key, v, op)
        results[key] = r
        return r

    m.merge_points(iter(groups), combine_pt_rec)
    m.finish()
    w.close()
    for k, r in results.items():
        if r is None:
            want.pop(k, None)
        else:
            want[k] = r
    assert list(TableReader(str(tmp_path / "pts")).items()) == sorted(want.items())


def check_merge_ranges(tmp_path, rng, bs, model):
    """Ranges of 1..60 keys: rewritten whole, spliced, or emptied (the table old0 holds ``model``)."""
    from webdb.tables.merge import Splice

    cur = rng.randrange(0, 30)
    ranges = []
    while cur < 3000:
        width = rng.choice([1, 2, 10, 60])
        ranges.append((cur, cur + width, rng.choice(["full", "splice", "splice", "empty"])))
        cur += width + rng.choice([0, 1, 5, 200])
    want = dict(model)

    def random_edits(lo_i, hi_i):
        edits = []
        for i in range(lo_i, hi_i):
            k = b"k%05d" % i
            c = rng.random()
            if c < 0.3:
                edits.append((k, b"n%d" % i))
            elif c < 0.5:
                edits.append((k, None))
        return edits

    def combine_rng(lo, ok, old_values, how):
        ov = old_values()
        assert ok == sorted(k for k in model if lo <= k < hi_of[lo]) and ov == [model[k] for k in ok]
        if how == "empty":
            for k in ok:
                del want[k]
            return [], []
        edits = random_edits(int(lo[1:]), int(hi_of[lo][1:]))
        for k, v in edits:
            if v is None:
                want.pop(k, None)
            else:
                want[k] = v
        if how == "splice":
            return Splice(edits)
        new = {k: model[k] for k in ok}
        for k, v in edits:
            if v is None:
                new.pop(k, None)
            else:
                new[k] = v
        ks = sorted(new)
        return ks, [new[k] for k in ks]

    hi_of = {b"k%05d" % a: b"k%05d" % b for a, b, _ in ranges}
    w = TableWriter(str(tmp_path / "rng"), KIND_PAGES_BY_URL, bs, sync=False)
    m = MergeCursor(TableReader(str(tmp_path / "old0")), w)
    m.merge_ranges(((b"k%05d" % a, b"k%05d" % b, how) for a, b, how in ranges), combine_rng)
    m.finish()
    w.close()
    new = TableReader(str(tmp_path / "rng"))
    assert list(new.items()) == sorted(want.items())
    assert new.count == len(want)


def test_merge_chunks_equals_sorted():
    from webdb.util.sortbuf import merge_chunks

    rng = random.Random(7)
    for _ in range(300):
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
        assert list(merge_chunks(sources)) == sorted(every)


def _dirty_pages(fd: int, length: int) -> int | None:
    """Dirty page-cache pages of the first ``length`` bytes of ``fd`` (Linux ``cachestat``,
    6.5 and later), or None where the kernel has no such call."""
    import ctypes

    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recent")]

    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    r, st = Range(0, length), Stat()
    if ctypes.CDLL(None, use_errno=True).syscall(451, fd, ctypes.byref(r), ctypes.byref(st), 0) != 0:
        return None
    return st.dirty


def test_a_synced_writer_starts_the_write_out_as_it_goes(tmp_path):
    """A synced writer hands every ``writeback`` bytes of blocks to the kernel's write-out
    before close (none of them is left dirty), and writes the same bytes as one that does
    not; an unsynced writer starts none."""
    rng = random.Random(5)
    keys = sorted({rng.randbytes(12) for _ in range(40000)})
    vals = [rng.randbytes(rng.randint(20, 80)) for _ in keys]

    def write(name, sync, step):
        w = TableWriter(str(tmp_path / name), KIND_PAGES_BY_MD5, 4096, "lz4", sync=sync, writeback=step)
        w.add_many(keys, vals)
        w.flush()
        return w

    step = 256 << 10
    w = write("wb", True, step)
    assert w.writebacks >= w._offset // step - 1 >= 5
    dirty = _dirty_pages(w._f.fileno(), w._wb_from)
    assert dirty in (None, 0), dirty
    w.close()
    plain = write("plain", True, 0)
    assert plain.writebacks == 0
    plain.close()
    off = write("off", False, step)
    assert off.writebacks == 0
    off.close()
    data = (tmp_path / "wb").read_bytes()
    assert data == (tmp_path / "plain").read_bytes() == (tmp_path / "off").read_bytes()
    t = TableReader(str(tmp_path / "wb"), KIND_PAGES_BY_MD5)
    assert [k for k, _ in t.items()] == keys
