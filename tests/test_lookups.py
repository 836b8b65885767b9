"""Point lookups (``Reader.get_page``, ``Reader.inlinks``, ``TableReader.get`` / ``ranges``)
against a full scan: tiny blocks so every key is near a block edge, keys between blocks and
sections, empty tables, a cache too small to hold anything, a new generation after a commit,
corruption found when a block is loaded, and bad URLs still refused by name."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webdb
from webdb import Link, Page, url_md5
from webdb.errors import BadInput, ClosedError, CorruptionError
from webdb.tables.block import COMPILED, encode_block
from webdb.tables.format import CODEC_LZ4, FOOTER_SIZE, KIND_PAGES_BY_URL
from webdb.tables.table import BlockCache, TableReader, TableWriter

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

# Keys with shared prefixes, prefixes of each other, NUL and 0xff bytes: the edges of bytes order.
key_st = st.binary(min_size=0, max_size=6).map(lambda b: bytes(x % 5 * 63 for x in b))


def _table(path, keys: list[bytes], block_size: int, cache: BlockCache | None) -> TableReader:
    w = TableWriter(str(path), KIND_PAGES_BY_URL, block_size, "lz4", sync=False)
    for k in keys:
        w.add(k, b"v" + k[::-1])
    w.close()
    return TableReader(str(path), KIND_PAGES_BY_URL, cache)


def _probes(keys: list[bytes], extra: list[bytes]) -> list[bytes]:
    """Every key, every key with a byte added or dropped (neighbours in bytes order), extras."""
    out = set(extra) | {b"", b"\xff" * 8}
    for k in keys:
        out |= {k, k + b"\x00", k + b"\xff", k[:-1]}
    return sorted(out)


@PROPS
@given(
    keys=st.lists(key_st, unique=True, max_size=120).map(sorted),
    extra=st.lists(key_st, max_size=20),
    block_size=st.sampled_from([64, 100, 300]),
    cache_bytes=st.sampled_from([None, 0, 200, 1 << 20]),
    data=st.data(),
)
def test_get_and_ranges_equal_a_full_scan(tmp_path_factory, keys, extra, block_size, cache_bytes, data):
    path = tmp_path_factory.mktemp("t") / "t"
    cache = None if cache_bytes is None else BlockCache(cache_bytes)
    t = _table(path, keys, block_size, cache)
    try:
        everything = dict(t.items())
        assert list(everything) == keys
        probes = _probes(keys, extra)
        # Twice: the second pass is served from the cache where it holds the blocks.
        for _ in range(2):
            for k in probes:
                assert t.get(k) == everything.get(k), k
        for _ in range(10):
            a, b = sorted(data.draw(st.sampled_from(probes)) for _ in range(2))
            got = [(k, v) for ks, vs in t.ranges(a, b) for k, v in zip(ks, vs)]
            assert got == [(k, v) for k, v in everything.items() if a <= k < b]
    finally:
        t.close()


def test_first_and_last_key_of_every_block(tmp_path):
    keys = [b"k%05d" % i for i in range(0, 4000, 2)]
    t = _table(tmp_path / "t", keys, 64, BlockCache(1 << 20))
    assert t.nblocks > 100
    for b in range(t.nblocks):
        first, last = t.first_keys[b], t.last_keys[b]
        assert t.get(first) == b"v" + first[::-1] and t.get(last) == b"v" + last[::-1]
        # Just after the last key of a block, before the next block's first: absent.
        assert t.get(last + b"\x00") is None and t.get(first[:-1]) is None
    assert t.get(b"k00001") is None and t.get(b"a") is None and t.get(b"z") is None
    t.close()


def test_a_key_between_blocks_reads_no_block(tmp_path):
    keys = [b"k%05d" % i for i in range(0, 400, 2)]
    cache = BlockCache(1 << 20)
    t = _table(tmp_path / "t", keys, 64, cache)
    assert t.get(t.last_keys[3] + b"\x00") is None and cache.bytes == 0
    assert t.get(t.last_keys[3]) is not None and cache.bytes > 0
    held = cache.bytes
    assert t.get(t.last_keys[3]) is not None and cache.bytes == held  # served from the cache
    t.close()


def test_empty_table_lookups(tmp_path):
    t = _table(tmp_path / "e", [], 64, BlockCache(1 << 20))
    assert t.get(b"") is None and t.get(b"a") is None and list(t.ranges(b"", b"\xff")) == []
    t.close()


def test_closed_table_refuses_cached_lookups(tmp_path):
    t = _table(tmp_path / "t", [b"a", b"b"], 64, BlockCache(1 << 20))
    assert t.get(b"a") is not None
    t.close()
    with pytest.raises(ClosedError):
        t.get(b"a")


def test_cache_ids_keep_tables_apart(tmp_path):
    """Two tables in one cache, same block numbers: never served each other's blocks."""
    cache = BlockCache(1 << 20)
    a = _table(tmp_path / "a", [b"x"], 64, cache)
    w = TableWriter(str(tmp_path / "b"), KIND_PAGES_BY_URL, 64, "lz4", sync=False)
    w.add(b"x", b"other")
    w.close()
    b = TableReader(str(tmp_path / "b"), KIND_PAGES_BY_URL, cache)
    assert a.get(b"x") == b"vx" and b.get(b"x") == b"other" and a.get(b"x") == b"vx"
    a.close(), b.close()


def test_corrupt_block_is_found_when_loaded_and_named(tmp_path):
    keys = [b"k%05d" % i for i in range(500)]
    t = _table(tmp_path / "t", keys, 64, BlockCache(1 << 20))
    b = t.nblocks // 2
    off = t.offsets[b] + 2
    with open(tmp_path / "t", "r+b") as f:
        f.seek(off)
        byte = f.read(1)
        f.seek(off)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(CorruptionError, match=rf"{tmp_path / 't'}: block {b} at offset {t.offsets[b]}"):
        t.get(t.first_keys[b])
    with pytest.raises(CorruptionError, match=rf"block {b} "):
        list(t.ranges(t.first_keys[b], t.last_keys[b]))
    assert t.get(t.first_keys[b - 1]) is not None  # the other blocks still read
    t.close()


# ---- the Reader over a db of k sections ------------------------------------------------------


def _db(path, k: int, pages: list[str], links: list[tuple[str, str]], block_size: int = 64, **kw) -> webdb.WebDB:
    db = webdb.create(str(path), sections=k, sync=False, block_size=block_size, **kw)
    with db.writer() as w:
        for u in pages:
            w.add_page(Page(u, fetch_time=len(u)))
        for src, dst in links:
            w.add_link(Link(url_md5(src), dst, f"{src} to {dst}"))
    return db


def _urls(rng: random.Random, n: int) -> list[str]:
    hosts = ["a", "b", "bb", "c", "é", "z"]
    return sorted({f"http://{rng.choice(hosts)}/{rng.randint(0, 60)}" + "/x" * rng.randint(0, 2) for _ in range(n)})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", range(6))
def test_reader_lookups_equal_a_full_scan(tmp_path, seed):
    rng = random.Random(seed)
    k = rng.choice([1, 2, 3, 5])
    urls = _urls(rng, rng.randint(0, 150))
    pages = rng.sample(urls, len(urls) // 2)
    links = [(rng.choice(urls), rng.choice(urls)) for _ in range(rng.randint(0, 400))] if urls else []
    db = _db(tmp_path / "db", k, pages, links, cache_mb=rng.choice([0, 1]))
    with db.reader() as r:
        by_url = {p.url: p for p in r.pages()}
        inl: dict[str, list[Link]] = {}
        for lk in r.links():
            inl.setdefault(lk.url, []).append(lk)
        probes = (
            set(urls)
            | {u + "/" for u in urls}
            | set(r.sections.breakpoints and [b.decode() for b in r.sections.breakpoints])
        )
        probes |= {"http://0/", "http://zz/", "http://a"}
        for _ in range(2):
            for u in sorted(probes):
                assert r.get_page(u) == by_url.get(u), u
                assert list(r.inlinks(u)) == inl.get(u, []), u


def test_new_generation_is_never_served_from_an_old_cache(tmp_path):
    urls = [f"http://h/{i:04d}" for i in range(300)]
    db = _db(tmp_path / "db", 2, urls, [(urls[0], urls[5])])
    old = db.reader()
    assert old.get_page(urls[7]).fetch_time == len(urls[7])  # cached in the old reader
    assert len(list(old.inlinks(urls[5]))) == 1
    with db.writer() as w:
        w.add_page_with_score(Page(urls[7], fetch_time=99, score=2.0))
        w.add_link(Link(url_md5(urls[1]), urls[5], "new"))
        w.add_page(Page("http://h/new"))
    new = db.reader()
    assert new.generation > old.generation
    assert new.get_page(urls[7]).fetch_time == 99 and len(list(new.inlinks(urls[5]))) == 2
    assert new.get_page("http://h/new") is not None
    # The old reader keeps its snapshot (its files stay open), cached or not.
    assert old.get_page(urls[7]).fetch_time == len(urls[7]) and len(list(old.inlinks(urls[5]))) == 1
    assert old.get_page("http://h/new") is None
    old.close(), new.close()


@pytest.mark.parametrize(
    "bad",
    ["", "no scheme", "http://a b/", "http://a/\x00", "http://\ud800/", b"http://a/", None, 7],
)
def test_bad_urls_are_refused_by_name(tmp_path, bad):
    db = _db(tmp_path / "db", 2, ["http://a/"], [("http://a/", "http://a/")])
    with db.reader() as r:
        with pytest.raises(BadInput, match="url"):
            r.get_page(bad)
        with pytest.raises(BadInput, match="url"):
            r.inlinks(bad)  # at the call, not at the first next (compiled or not)
        assert r.get_page("http://a/") is not None and r.get_page("http://absent/") is None
        assert len(list(r.inlinks("http://a/"))) == 1 and list(r.inlinks("http://absent/")) == []


def test_closed_reader_refuses_lookups(tmp_path):
    db = _db(tmp_path / "db", 1, ["http://a/"], [])
    r = db.reader()
    assert r.get_page("http://a/") is not None
    r.close()
    with pytest.raises(ClosedError):
        r.get_page("http://a/")
    with pytest.raises(ClosedError):
        r.inlinks("http://a/")  # at the call, not at the first next


def test_reader_cache_mb_option(tmp_path):
    db = _db(tmp_path / "db", 1, ["http://a/"], [])
    with db.reader(cache_mb=0) as r:
        assert r.get_page("http://a/") is not None
    with pytest.raises(BadInput, match="cache_mb"):
        db.reader(cache_mb=-1)


def test_corrupt_page_block_is_named_by_get_page(tmp_path):
    urls = [f"http://h/{i:04d}" for i in range(200)]
    db = _db(tmp_path / "db", 1, urls, [])
    with db.reader() as r:
        t = r.tables["pages_by_url"][0]
        b = t.nblocks // 2
        url = t.first_keys[b].decode()
        path, off = t.path, t.offsets[b] + 1
    with open(path, "r+b") as f:
        f.seek(off)
        byte = f.read(1)
        f.seek(off)
        f.write(bytes([byte[0] ^ 0x01]))
    with db.reader() as r:
        with pytest.raises(CorruptionError, match=rf"{os.path.basename(path)}: block {b} "):
            r.get_page(url)
        assert r.get_page(urls[0]) is not None


# ---- the index: read in bulk, checked entry by entry only to name a bad one -----------------


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    keys=st.lists(key_st, unique=True, min_size=1, max_size=80).map(sorted),
    edits=st.lists(
        st.tuples(st.booleans(), st.integers(0, 10**6), st.integers(0, 24), st.integers(0, 255)), max_size=3
    ),
)
def test_bulk_index_check_agrees_with_the_entry_by_entry_check(tmp_path_factory, keys, edits):
    """Crafted index entries (a byte changed, a key or entry cut short): the bulk read accepts
    exactly what the entry-by-entry check accepts, with the same offsets, lengths and counts."""
    t = _table(tmp_path_factory.mktemp("t") / "t", keys, 64, None)
    ikeys = list(t.first_keys)
    ivals = [struct.pack("<QII", o, n, c) + last for o, n, c, last in zip(t.offsets, t.lengths, t.counts, t.last_keys)]
    for in_key, which, pos, byte in edits:
        lst = ikeys if in_key else ivals
        i = which % len(lst)
        v = lst[i]
        lst[i] = v[:pos] + bytes([byte]) + v[pos + 1 :] if pos < len(v) else v[: pos % max(1, len(v))]
    from webdb.tables.block import index_entries, unpack_block

    ent = index_entries(unpack_block(encode_block(ikeys, ivals, 0), "index"), struct.calcsize("<QII"))
    bulk = ent is not None and t._index_bulk(*ent, t.data_end)
    got = (list(t.offsets), list(t.lengths), list(t.counts), list(t.last_keys))
    try:
        t._index_each(ikeys, ivals, t.data_end)
        each_ok = True
    except CorruptionError:
        each_ok = False
    assert bulk == each_ok
    if bulk:
        assert got == (t.offsets, t.lengths, t.counts, t.last_keys)
    t.close()


def test_damaged_index_of_a_lazy_table_is_named_on_first_use(tmp_path):
    urls = [f"http://h/{i:04d}" for i in range(200)]
    db = _db(tmp_path / "db", 1, urls, [(urls[0], urls[1])])
    with db.reader() as r:
        t = r.tables["links_by_url"][0]
        path, index_at = t.path, t.data_end
    good = open(path, "rb").read()
    with open(path, "r+b") as f:  # a byte of the index block: its checksum fails
        f.seek(index_at + 1)
        f.write(bytes([good[index_at + 1] ^ 0x10]))
    with db.reader() as r:  # opens (the footer is sound): the index is read on first use
        assert r.get_page(urls[0]) is not None
        for _ in range(2):
            with pytest.raises(CorruptionError, match=rf"{os.path.basename(path)}: index block at offset {index_at}"):
                list(r.inlinks(urls[1]))
        with pytest.raises(CorruptionError, match=os.path.basename(path)):
            r.tables["links_by_url"][0].nblocks  # noqa: B018 - the property is what is tested
    with open(path, "r+b") as f:  # the footer's magic: refused by db.reader() itself
        f.write(good)
        f.seek(-8, os.SEEK_END)
        f.write(b"NOTATABL")
    with pytest.raises(CorruptionError, match=rf"{os.path.basename(path)}: not a webdb table"):
        db.reader()
    with open(path, "wb") as f:
        f.write(good)
    r = db.reader()
    t = r.tables["links_by_url"][0]
    r.close()
    with pytest.raises(ClosedError):  # closed before its index was read: not read after
        t.get(b"http://h/0001")


def test_index_damaged_after_the_footer_is_never_half_loaded(tmp_path):
    """An index whose entries fail their check (crafted, checksum intact): the lazy load fails
    on every use, never leaving the first keys behind for a later call to read."""
    keys = [b"k%05d" % i for i in range(300)]
    path = tmp_path / "t"
    t = _table(path, keys, 64, None)
    data = path.read_bytes()
    io, index_len = t.data_end, struct.unpack_from("<QI", data, len(data) - FOOTER_SIZE)[1]
    # The same index with its second entry one byte off, sealed with a valid checksum.
    ivals = [
        struct.pack("<QII", o + (i == 1), n, c) + last
        for i, (o, n, c, last) in enumerate(zip(t.offsets, t.lengths, t.counts, t.last_keys))
    ]
    index = encode_block(list(t.first_keys), ivals, CODEC_LZ4)
    meta = data[io + index_len : len(data) - FOOTER_SIZE]
    footer = bytearray(data[-FOOTER_SIZE:])
    struct.pack_into("<QIQI", footer, 0, io, len(index), io + len(index), len(meta))
    (tmp_path / "t2").write_bytes(data[:io] + index + meta + bytes(footer))
    t.close()
    bad = TableReader(str(tmp_path / "t2"), KIND_PAGES_BY_URL, BlockCache(1 << 20), lazy=True)
    for _ in range(2):
        with pytest.raises(CorruptionError, match=r"t2: index entry 1 "):
            bad.get(keys[5])
        assert "first_keys" not in vars(bad)
    bad.close()


# ---- inlinks over levels (a base and delta runs) ---------------------------------------------


def _levels_round(w, rng: random.Random, urls: list[str], i: int) -> None:
    """New links (some to URLs no link reached before), anchors replaced, every link of some
    sources removed (tombstones over base links), a page deleted (its inlinks go too)."""
    for _ in range(rng.randint(5, 40)):
        w.add_link(Link(url_md5(rng.choice(urls)), rng.choice(urls), f"r{i}"))
    for j in range(rng.randint(1, 3)):
        w.add_page(Page(f"http://new{j}.example/{i}"))
        w.add_link(Link(url_md5(rng.choice(urls)), f"http://new{j}.example/{i}", "fresh"))
    for _ in range(rng.randint(0, 4)):
        w.delete_links(url_md5(rng.choice(urls)))
    if rng.random() < 0.5:
        w.delete_page(rng.choice(urls))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", range(4))
def test_inlinks_over_levels_equal_a_full_scan(tmp_path, seed):
    """Every path of ``Reader.inlinks`` over a table kept as levels — the links in one block of
    each file or a few (``short_range``), in many (``ranges``), a file skipped by its index,
    tombstones of a run hiding base links, links only in a run, a URL with none — gives the
    links a full scan (``Levels.chunks``, another merge) gives, in the same order."""
    rng = random.Random(seed)
    urls = _urls(rng, 120)
    links = [(rng.choice(urls), rng.choice(urls)) for _ in range(500)]
    links += [(u, urls[0]) for u in urls]  # a URL whose links span blocks
    db = _db(tmp_path / "db", rng.choice([1, 2]), urls, links, level_ratio=1000.0, level_runs=4)
    seen: set[str] = set()
    for i in range(5):
        with db.writer() as w:
            _levels_round(w, rng, urls, i)
        assert any(e.get("runs") for tabs in db.manifest().tables for e in [tabs["links_by_url"]])
        with db.reader() as r:
            inl: dict[str, list[Link]] = {}
            for lk in r.links():
                inl.setdefault(lk.url, []).append(lk)
            probes = set(urls) | set(inl) | {u + "/" for u in urls[:20]} | {"http://0/", "http://zz/"}
            for u in sorted(probes):
                assert list(r.inlinks(u)) == inl.get(u, []), u
                seen |= _paths(r, u)
    want = {"one block", "spans", "streamed", "file skipped", "tombstone hides base", "only in a run", "absent"}
    assert want <= seen, want - seen


def _paths(r, url: str) -> set[str]:
    """Which of the read paths of ``Reader.inlinks`` ``url`` takes (for the test's coverage)."""
    from webdb.tables.levels import Levels
    from webdb.tables.table import SHORT_BLOCKS

    t = r._links_by_url[r.sections.of_url(url.encode())]
    if not isinstance(t, Levels):
        return set()
    p = url.encode() + b"\x00"
    stop = url.encode() + b"\x01"
    out = set()
    blocks = [b1 - b0 for b0, b1 in (f.blocks_of_range(p, stop) for f in t._newest)]
    if max(blocks) > SHORT_BLOCKS:
        out.add("streamed")
    elif max(blocks) > 1:
        out.add("spans")
    else:
        out.add("one block")
    if 0 in blocks and max(blocks) > 0:
        out.add("file skipped")
    base = [k for ks, _ in t.base.ranges(p, stop) for k in ks] if t.base is not None else []
    live = [k for ks, _ in t.ranges(p, stop) for k in ks]
    if set(base) - set(live):
        out.add("tombstone hides base")
    if live and not base:
        out.add("only in a run")
    if not live:
        out.add("absent")
    short = t.short_range(p, stop)
    if short is not None:
        assert short == ([k for ks, _ in t.ranges(p, stop) for k in ks], [v for _, vs in t.ranges(p, stop) for v in vs])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_short_levels_equal_each_files_path_and_the_model(tmp_path, seed):
    """``Levels.short_range`` in one C call (``short_levels``) gives what each file's own
    ``short_range`` merged gives, and what a dict of the records says: a run's PUT over the
    base, a DEL hiding a base key, keys only in a run, URLs in no file, links across blocks
    and pieces, and None (streamed) for a URL over more than SHORT_BLOCKS blocks."""
    from webdb.tables.format import DELTA_KINDS, KIND_LINKS_BY_URL
    from webdb.tables.levels import DEL, PUT, open_levels
    from webdb.tables.table import SHORT_BLOCKS

    rng = random.Random(seed)
    urls = [b"http://h/%03d" % i for i in range(60)]
    fid = [bytes([i]) * 16 for i in range(40)]
    model: dict[bytes, bytes] = {}
    base = {
        u + b"\x00" + f: b"b%d" % rng.randrange(99) for u in urls[::2] for f in rng.sample(fid, rng.randrange(1, 30))
    }
    model.update(base)
    runs = []
    for r in range(2):  # oldest first
        keys = rng.sample(sorted({u + b"\x00" + f for u in urls for f in fid}), 300)
        ops = {k: (PUT + b"r%d" % r if rng.random() < 0.6 else DEL) for k in keys}
        runs.append(ops)
        for k, v in ops.items():
            if v == DEL:
                model.pop(k, None)
            else:
                model[k] = v[1:]
    paths = [str(tmp_path / "base")] + [str(tmp_path / f"run{r}") for r in range(2)]
    w = TableWriter(paths[0], KIND_LINKS_BY_URL, 256, "lz4", sync=False)
    for k in sorted(base):
        w.add(k, base[k])
    w.close()
    for path, ops in zip(paths[1:], runs):
        w = TableWriter(path, DELTA_KINDS["links_by_url"], 256, "lz4", sync=False)
        for k in sorted(ops):
            w.add(k, ops[k])
        w.close()
    fused = open_levels(paths[0], paths[:0:-1], "links_by_url", len(model))
    each = open_levels(paths[0], paths[:0:-1], "links_by_url", len(model))
    each._short = ()  # each file read by its own short_range
    try:
        seen = set()
        for u in [*urls, b"http://a/", b"http://h/0", b"http://z/"]:
            p, stop = u + b"\x00", u + b"\x01"
            got = fused.short_range(p, stop)
            assert got == each.short_range(p, stop), u
            if got is None:
                seen.add("streamed")
                assert max(b1 - b0 for b0, b1 in (f.blocks_of_range(p, stop) for f in each._newest)) > SHORT_BLOCKS
                continue
            want = sorted((k, v) for k, v in model.items() if p <= k < stop)
            assert list(zip(*got)) == want, u
            seen.add("found" if want else "absent")
        assert COMPILED is bool(fused._short)  # compiled: the one call was taken
        assert {"found", "absent"} <= seen
    finally:
        fused.close()
        each.close()
    assert fused._short == ()


def test_a_bad_op_byte_in_a_run_is_named_on_every_read_path(tmp_path):
    from webdb.tables.format import DELTA_KINDS, KIND_LINKS_BY_URL
    from webdb.tables.levels import PUT, open_levels

    base, run = str(tmp_path / "base"), str(tmp_path / "run")
    w = TableWriter(base, KIND_LINKS_BY_URL, 64, "lz4", sync=False)
    for i in range(40):
        w.add(b"u%02d\x00" % i + b"f" * 16, b"v" * 12)
    w.close()
    w = TableWriter(run, DELTA_KINDS["links_by_url"], 64, "lz4", sync=False)
    w.add(b"u05\x00" + b"g" * 16, PUT + b"v" * 12)
    w.add(b"u07\x00" + b"g" * 16, b"\x07" + b"v" * 12)
    w.close()
    v = open_levels(base, [run], "links_by_url", 41)
    try:
        assert v.short_range(b"u05\x00", b"u05\x01")[0] == [b"u05\x00" + b"f" * 16, b"u05\x00" + b"g" * 16]
        for read in (lambda: v.short_range(b"u07\x00", b"u07\x01"), lambda: list(v.ranges(b"u07\x00", b"u07\x01"))):
            with pytest.raises(CorruptionError, match=f"{run}: delta record .*op byte 7"):
                read()
    finally:
        v.close()


# ---- LinksByURL blocks in lz4 pieces; the index searched in place ------------------------------


def _pieced_db(path, block_size=4096, **settings):
    """A db of one section whose LinksByURL blocks (4 KiB, pieces of 1 KiB; or ``block_size``)
    hold many URLs."""
    urls = [f"http://h/{i:04d}" for i in range(300)]
    links = [(urls[(i * 7) % 300], urls[(i * 13) % 300]) for i in range(3000)]
    db = webdb.create(str(path), sections=1, sync=False, block_size=block_size, **settings)
    with db.writer() as w:
        for u in urls:
            w.add_page(Page(u))
        for src, dst in links:
            w.add_link(Link(url_md5(src), dst, f"from {src}"))
    return db, urls


def _reseal_block(path: str, off: int, length: int, edit) -> None:
    """Block at ``off`` replaced by ``edit(body)`` (same length), its checksum recomputed."""
    import zlib

    data = bytearray(open(path, "rb").read())
    body = bytearray(data[off : off + length - 5])
    edit(body)
    codec = data[off + length - 5]
    data[off : off + length] = bytes(body) + struct.pack("<BI", codec, zlib.crc32(bytes(body) + bytes((codec,))))
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("block_size", [4096, 16384])
def test_inlinks_of_a_pieced_table_equal_a_full_scan_and_damage_is_named(tmp_path, block_size):
    """Blocks in pieces read by every path (the C path of a lazy reader, the index in place, the
    Python lists) as a full scan does; a flipped byte of the header (its checksum) and a crafted
    piece count (checksums recomputed) are CorruptionErrors naming the file and the block's
    offset, on ``inlinks`` and on ``check``; a flipped byte in a piece a lookup does not read is
    found by ``check``, which reads every block whole.  Small blocks (at most 8 KiB on disk) are
    read whole by the C path, larger ones by their tail, then the pieces: both are checked."""
    db, urls = _pieced_db(tmp_path / "db", block_size)
    with db.reader() as r:
        t = r.tables["links_by_url"][0]
        base = t.base if hasattr(t, "base") else t
        path = base.path
        assert {base.raw_block(b)[-5] for b in range(base.nblocks - 1)} == {3}
        inl: dict[str, list[Link]] = {}
        for lk in r.links():
            inl.setdefault(lk.url, []).append(lk)
        offsets, lengths = list(base.offsets), list(base.lengths)
    with db.reader() as r:  # a fresh reader: the index in place (compiled), never the lists
        for u in [*urls, "http://h/", "http://h/9999"]:
            assert list(r.inlinks(u)) == inl.get(u, []), u
        base = r.tables["links_by_url"][0]
        base = getattr(base, "base", base)
        if COMPILED:
            assert base._ix is not None and "first_keys" not in vars(base)
    with db.reader() as r:
        r.check()
    good = open(path, "rb").read()
    b = 2 if block_size == 4096 else 0
    assert (lengths[b] <= 8192) == (block_size == 4096)  # read whole, or its tail then pieces
    u = next(u for u in urls if inl.get(u) and _in_block(db, u, b))
    where = rf"{os.path.basename(path)}: block {b} at offset {offsets[b]}"
    header_byte = offsets[b] + lengths[b] - 5 - 8 - 3  # in the last first key of the header
    middle = offsets[b] + lengths[b] // 2  # in a piece the lookup may not read
    for flip, edit, lookup_sees in (
        (header_byte, None, True),
        (None, _piece_count_changed, True),
        (middle, None, False),
    ):
        data = bytearray(good)
        if flip is not None:
            data[flip] ^= 0x20
        open(path, "wb").write(bytes(data))
        if edit is not None:
            _reseal_block(path, offsets[b], lengths[b], edit)
        with db.reader() as r:
            for _ in range(2):
                if lookup_sees:
                    with pytest.raises(CorruptionError, match=where):
                        list(r.inlinks(u))
            with pytest.raises(CorruptionError, match=where):  # check reads every block whole
                r.check()
    open(path, "wb").write(good)


def test_inlinks_through_a_delta_run_in_pieces(tmp_path):
    """A round's LinksByURL delta run is written in lz4 pieces too: lookups through base and run
    equal a full scan, and a damaged header of a run block is named with the run's file."""
    db, urls = _pieced_db(tmp_path / "db", level_ratio=1000.0)
    with db.writer() as w:
        for i in range(600):
            w.add_link(Link(url_md5(urls[(i * 11) % 300]), urls[(i * 17) % 300], f"round 2 {i}"))
    with db.reader() as r:
        v = r.tables["links_by_url"][0]
        runs = [t for t in v._newest if t is not v.base]
        assert runs, "the batch was not written as a delta run"
        run = runs[0]
        assert {run.raw_block(b)[-5] for b in range(run.nblocks - 1)} == {3}
        inl: dict[str, list[Link]] = {}
        for lk in r.links():
            inl.setdefault(lk.url, []).append(lk)
        path, offsets, lengths = run.path, list(run.offsets), list(run.lengths)
    with db.reader() as r:
        for u in urls:
            assert list(r.inlinks(u)) == inl.get(u, []), u
    data = bytearray(open(path, "rb").read())
    data[offsets[1] + lengths[1] - 5 - 8 - 3] ^= 0x20  # in the header of block 1's pieces
    open(path, "wb").write(bytes(data))
    with db.reader() as r:
        with pytest.raises(CorruptionError, match=rf"{os.path.basename(path)}: block 1 at offset {offsets[1]}"):
            for u in urls:
                list(r.inlinks(u))


def _piece_count_changed(body: bytearray) -> None:
    """The record count of piece 0 in a pieces header, the header's CRC recomputed."""
    import zlib

    hlen = struct.unpack_from("<I", body, len(body) - 8)[0]
    at = len(body) - 8 - hlen
    body[at + 8] ^= 0x01
    struct.pack_into("<I", body, len(body) - 4, zlib.crc32(bytes(body[at : at + hlen])))


def _in_block(db, url: str, b: int) -> bool:
    with db.reader() as r:
        t = r.tables["links_by_url"][0]
        t = getattr(t, "base", t)
        p = url.encode() + b"\x00"
        return t.blocks_of_range(p, p[:-1] + b"\x01") == (b, b + 1)


# ---- the compiled point lookup (Lookup) against the Python path ------------------------------


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", range(4))
def test_compiled_page_lookup_equals_the_python_path_and_uses_the_cache_alike(tmp_path, seed):
    """``Reader.get_page`` through the compiled ``Lookup`` (one C call) gives what the Python
    path (``TableReader.get`` and ``Page.decode``) gives, for pages added, updated, deleted,
    with meta or without, and URLs in no file; and it leaves the block cache as the Python
    path does: the same blocks, in the same LRU order, of the same bytes."""
    rng = random.Random(seed)
    urls = _urls(rng, 150)
    k = rng.choice([1, 2])
    # 64-byte blocks: whole lz4 blocks (too small for two pieces); 1 KiB: PagesByURL in pieces.
    db = _db(tmp_path / "db", k, urls[::2], [], block_size=rng.choice([64, 1024]), cache_mb=rng.choice([0, 1]))
    for i in range(4):
        with db.writer() as w:
            for u in rng.sample(urls, 30):
                w.add_page_with_score(Page(u, fetch_time=i, score=rng.random(), meta={"r": str(i)} if i % 2 else {}))
            for u in rng.sample(urls, 5):
                w.delete_page(u)
    probes = urls + [u + "/" for u in urls[:30]] + ["http://0/", "http://zz/"]
    rng.shuffle(probes)
    with db.reader() as r:  # a scan caches the first block it reads whole: not in fast or slow
        by_url = {p.url: p for p in r.pages()}
    with db.reader() as fast, db.reader() as slow:
        slow._page_lookups = [None] * k  # the Python path only
        for u in probes + probes[:50]:
            got = fast.get_page(u)
            assert got == slow.get_page(u) == by_url.get(u), u
            assert got is None or type(got) is Page
        assert COMPILED is all(lk is not None for lk in fast._page_lookups)
        assert list(fast._cache._d) == list(slow._cache._d)  # the same blocks, in the same LRU order
        for key, (rb, size) in fast._cache._d.items():
            other, other_size = slow._cache._d[key]
            if type(rb) is bytes:  # a block in pieces: its header or a piece
                assert (rb, size) == (other, other_size)
            else:
                assert (rb.raw, rb.n, size) == (other.raw, other.n, other_size)
    fast.close()
    with pytest.raises(ClosedError):
        fast.get_page(urls[0])


def _pieced_pages(path, values: dict[bytes, bytes], block_size: int, codec: int | None = None) -> None:
    """A PagesByURL table of ``values``; ``codec`` CODEC_LZ4: whole lz4 blocks, as a writer did
    before PagesByURL was written in lz4 pieces."""
    w = TableWriter(str(path), KIND_PAGES_BY_URL, block_size, "lz4", sync=False)
    if codec is not None:
        w.codec = codec
    for k in sorted(values):
        w.add(k, values[k])
    w.close()


@pytest.mark.parametrize("seed", range(4))
def test_a_piece_decoded_alone_equals_its_share_of_the_whole_block(tmp_path, seed):
    """A PagesByURL table in lz4 pieces: each piece decoded alone (its header, CRC, count, first
    key) holds exactly its share of the records of the whole block's decode; point lookups,
    compiled and in Python, with a cache or none, read one piece and give what the whole block
    holds — keys, keys between pieces and between blocks, a value longer than a piece — and fill
    the cache alike, with headers and pieces, never a whole block."""
    from webdb.tables.block import pieces_header, unpack_block, unpack_piece
    from webdb.tables.format import CODEC_LZ4_PIECES
    from webdb.tables.table import lookups

    rng = random.Random(seed)
    keys = sorted({b"http://h%d/%d" % (rng.randrange(9), rng.randrange(3000)) for _ in range(900)})
    values = {k: rng.randbytes(rng.choice([20, 60, 200, 3000 if rng.random() < 0.02 else 90])) for k in keys}
    path = tmp_path / "t.pbu"
    _pieced_pages(path, values, rng.choice([2048, 8192, 32768]))
    t = TableReader(str(path), KIND_PAGES_BY_URL, None)
    pieced = 0
    for b in range(t.nblocks):
        data = t.raw_block(b)
        whole = unpack_block(data, t.where(b))
        records = list(zip(*whole.split()))
        if data[-5] != CODEC_LZ4_PIECES:
            continue
        pieced += 1
        _, tab, first = pieces_header(memoryview(data)[:-5], len(data) - 5)
        at = done = 0
        for i, (length, count, crc) in enumerate(tab):
            raw, _, rends = unpack_piece(data[at : at + length], i, crc, count, first[i])
            assert raw[: rends[-1]] == b"".join(k + v for k, v in records[done : done + count])
            at, done = at + length, done + count
        assert done == whole.n
    assert pieced >= t.nblocks - 1
    t.close()
    probes = keys + [k + b"\x00" for k in keys[::5]] + [k[:-1] for k in keys[::5]] + [b"", b"http://z"]
    rng.shuffle(probes)
    caches = []
    for cache in (BlockCache(1 << 20), BlockCache(1 << 20), None):
        t = TableReader(str(path), KIND_PAGES_BY_URL, cache, lazy=True)
        lk = lookups([(t, False)], cache, Page) if not caches else None
        assert (lk is not None) is (COMPILED and not caches)
        get = lk.get if lk is not None else t.get
        for k in probes:
            assert get(k) == values.get(k), k
        if cache is not None:
            caches.append(cache)
            # Headers and pieces, kept as bytes (nothing the garbage collector tracks), no block.
            assert all(key < 0 and type(v) is bytes and len(v) < 32768 for key, (v, _) in cache._d.items())
        t.close()
    assert list(caches[0]._d) == list(caches[1]._d)


def test_pages_written_in_whole_lz4_blocks_still_read(tmp_path):
    """A PagesByURL file of whole lz4 blocks (codec 2, as written before pieces) reads through
    the lookup of a file in pieces: each block read whole and cached whole, as before."""
    from webdb.tables.table import lookups

    keys = [b"http://h/%04d" % i for i in range(0, 2000, 3)]
    values = {k: b"v" * (len(k) % 7) + k for k in keys}
    path = tmp_path / "old.pbu"
    _pieced_pages(path, values, 4096, CODEC_LZ4)
    for compiled in (True, False):
        cache = BlockCache(1 << 20)
        t = TableReader(str(path), KIND_PAGES_BY_URL, cache, lazy=True)
        assert {t.raw_block(b)[-5] for b in range(t.nblocks)} == {CODEC_LZ4}
        lk = lookups([(t, False)], cache, Page) if compiled else None
        get = lk.get if lk is not None else t.get
        for k in [*keys, b"http://h/0001", b"http://z"]:
            assert get(k) == values.get(k), k
        assert sorted(cache._d) == [t._cid + b for b in range(t.nblocks)]
        t.close()


def test_a_damaged_piece_is_named_by_get_page_and_by_check(tmp_path):
    """A flipped byte inside one piece of a PagesByURL block: ``get_page`` of a URL in that piece
    is a CorruptionError naming the file, the block, its offset and the piece (the compiled
    lookup declines it, the Python path names it); a URL in another piece of the same block
    reads as before (a lookup reads its own piece only); ``check`` reads every block whole and
    names the block."""
    from webdb.tables.block import pieces_header
    from webdb.tables.format import CODEC_LZ4_PIECES

    urls = [f"http://h/{i:04d}" for i in range(400)]
    db = _db(tmp_path / "db", 1, urls, [], block_size=4096)
    with db.reader() as r:
        t = r.tables["pages_by_url"][0]
        b = t.nblocks // 2
        path, off, data = t.path, t.offsets[b], t.raw_block(b)
        assert data[-5] == CODEC_LZ4_PIECES
        _, tab, first = pieces_header(memoryview(data)[:-5], len(data) - 5)
        assert len(tab) >= 3
        keys = [k for k in t.block(b)[0]]
        in_piece_1 = next(k for k in keys if first[1] <= k < first[2]).decode()
        in_piece_0 = keys[0].decode()
        want = r.get_page(in_piece_0)
    flip = off + tab[0][0] + tab[1][0] // 2  # the middle of piece 1's compressed bytes
    with open(path, "r+b") as f:
        f.seek(flip)
        byte = f.read(1)
        f.seek(flip)
        f.write(bytes([byte[0] ^ 0x01]))
    where = rf"{os.path.basename(path)}: block {b} at offset {off}: undecodable block \(piece 1: checksum mismatch\)"
    with db.reader() as r:
        for _ in range(2):
            with pytest.raises(CorruptionError, match=where):
                r.get_page(in_piece_1)
            assert r.get_page(in_piece_0) == want
        if COMPILED:
            assert r._page_lookups[0].page(in_piece_1, in_piece_1.encode()) is False
        with pytest.raises(CorruptionError, match=rf"{os.path.basename(path)}: block {b} at offset {off}"):
            r.check()


def test_compiled_lookup_declines_what_is_not_sound_and_the_python_path_names_it(tmp_path):
    """A delta record whose op byte is neither PUT nor DEL, and a page value too short to decode:
    the ``Lookup`` answers False (no exception of its own), and ``get_page`` then names the
    fault through the Python path; sound keys around them read as ``Levels.get`` says.  (Not
    compiled: no Lookup, and the Python path alone names them.)"""
    from webdb.core.reader import Reader
    from webdb.tables.format import DELTA_KINDS
    from webdb.tables.levels import DEL, PUT, open_levels
    from webdb.tables.table import lookups

    base, run = str(tmp_path / "base"), str(tmp_path / "run")
    page = Page("http://h/00").encode_value()
    w = TableWriter(base, KIND_PAGES_BY_URL, 128, "lz4", sync=False)
    for i in range(40):
        w.add(b"http://h/%02d" % i, page if i != 9 else page[:20])
    w.close()
    w = TableWriter(run, DELTA_KINDS["pages_by_url"], 128, "lz4", sync=False)
    w.add(b"http://h/05", PUT + page)
    w.add(b"http://h/06", DEL)
    w.add(b"http://h/07", b"\x07" + page)
    w.add(b"http://h/50", PUT + page)
    w.close()
    cache = BlockCache(1 << 20)
    v = open_levels(base, [run], "pages_by_url", 40, cache)
    try:
        lk = lookups([(v.runs[0], True), (v.base, False)], cache, Page)
        assert (lk is not None) is COMPILED
        for i in (0, 5, 6, 8, 39, 50, 60):
            key = b"http://h/%02d" % i
            want = None if v.get(key) is None else Page.decode(key.decode(), v.get(key))
            assert lk is None or (lk.get(key) == v.get(key) and lk.page(key.decode(), key) == want), key
        assert lk is None or (lk.get(b"http://h/07") is False and lk.page("http://h/09", b"http://h/09") is False)
        with pytest.raises(CorruptionError, match="op byte 7"):
            v.get(b"http://h/07")
        # The reader's path: get_page over these levels names the run and the value.
        r = Reader.__new__(Reader)
        r.db, r.closed, r._url_bounds, r._cache = None, False, [], cache
        r._pages_by_url, r._page_lookups = [v], [lk]
        r._marks, r._any_marks = [None], False  # no mark table
        with pytest.raises(CorruptionError, match=f"{run}: delta record .*op byte 7"):
            r.get_page("http://h/07")
        with pytest.raises(CorruptionError, match="undecodable value"):
            r.get_page("http://h/09")
        assert r.get_page("http://h/05") == Page.decode("http://h/05", page)
    finally:
        v.close()


@pytest.mark.parametrize("seed", range(6))
def test_compiled_lookup_over_levels_equals_levels_get_and_the_model(tmp_path, seed):
    """``Lookup.get`` over a base and delta runs (newest first) gives what ``Levels.get`` and a
    dict of the records give — a run's PUT over the base, a DEL hiding a base key, keys only in
    a run, keys in no file, keys between blocks — and fills the cache as ``Levels.get`` does."""
    from webdb.tables.format import DELTA_KINDS
    from webdb.tables.levels import DEL, PUT, open_levels
    from webdb.tables.table import lookups

    rng = random.Random(seed)
    keys = sorted({b"http://h/%03d" % rng.randrange(400) for _ in range(300)})
    model = {k: b"base" + k for k in rng.sample(keys, len(keys) // 2)}
    paths = [str(tmp_path / "base")]
    w = TableWriter(paths[0], KIND_PAGES_BY_URL, rng.choice([64, 256]), "lz4", sync=False)
    for k in sorted(model):
        w.add(k, model[k])
    w.close()
    for r in range(rng.randint(1, 3)):  # oldest first
        ops = {k: PUT + b"r%d" % r + k if rng.random() < 0.6 else DEL for k in rng.sample(keys, 60)}
        paths.append(str(tmp_path / f"run{r}"))
        w = TableWriter(paths[-1], DELTA_KINDS["pages_by_url"], 128, "lz4", sync=False)
        for k in sorted(ops):
            w.add(k, ops[k])
        w.close()
        for k, v in ops.items():
            if v == DEL:
                model.pop(k, None)
            else:
                model[k] = v[1:]
    fast_cache, slow_cache = BlockCache(rng.choice([300, 1 << 20])), BlockCache(0)
    fast = open_levels(paths[0], paths[:0:-1], "pages_by_url", len(model), fast_cache)
    slow = open_levels(paths[0], paths[:0:-1], "pages_by_url", len(model), slow_cache)
    slow_cache.max_bytes = fast_cache.max_bytes
    try:
        lk = lookups([(t, True) for t in fast.runs] + [(fast.base, False)], fast_cache, Page)
        assert (lk is not None) is COMPILED
        get = lk.get if lk is not None else fast.get  # not compiled: the Python path against the model
        probes = keys + [k + b"\x00" for k in keys[::7]] + [b"", b"http://a", b"http://z"]
        rng.shuffle(probes)
        for k in probes:
            assert get(k) == slow.get(k) == model.get(k), k
        assert list(fast_cache._d) == list(slow_cache._d)
    finally:
        fast.close()
        slow.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", range(3))
def test_compiled_links_equal_the_python_path(tmp_path, seed):
    """``Reader.inlinks`` through ``Lookup.links`` (the levels' short path, the merge and the
    Links in one C call) gives what the Python path (``short_range`` or ``ranges``, then
    ``_links``) gives over levels in lz4 pieces: links in a run, in the base, hidden by
    tombstones, spanning blocks, streamed, and none."""
    rng = random.Random(seed)
    urls = _urls(rng, 120)
    links = [(rng.choice(urls), rng.choice(urls)) for _ in range(600)] + [(u, urls[0]) for u in urls]
    db = webdb.create(str(tmp_path / "db"), sections=rng.choice([1, 2]), sync=False, block_size=1024)
    db.settings = db.settings.replace(level_ratio=1000.0, level_runs=4)
    with db.writer() as w:
        for u in urls:
            w.add_page(Page(u))
        for src, dst in links:
            w.add_link(Link(url_md5(src), dst, f"{src} to {dst}"))
    for i in range(3):
        with db.writer() as w:
            _levels_round(w, rng, urls, i)
    with db.reader() as r:
        probes = urls + [f"http://new0.example/{i}" for i in range(3)] + ["http://0/", "http://zz/"]
        for u in probes:
            t = r._links_by_url[r.sections.of_url(u.encode())]
            assert list(r.inlinks(u)) == list(r._inlinks(u, u.encode(), t)), u
        assert COMPILED is all(lk is not None for lk in r._link_lookups)


@pytest.mark.timeout(300)
def test_a_streamed_url_builds_no_index_lists(tmp_path):
    """A URL whose links reach more than SHORT_BLOCKS blocks is streamed by ``ranges``; compiled,
    a file whose index is kept in place is read through it, so its index lists (several times
    the bytes) are never built beside the bytes the compiled lookups search.  The links equal
    the list path's (a fresh reader made to build them) and a full scan's; a damaged block is
    named alike."""
    rng = random.Random(7)
    urls = _urls(rng, 1900)
    popular = urls[0]
    db = webdb.create(str(tmp_path / "db"), sections=1, sync=False, block_size=1024)
    db.settings = db.settings.replace(level_ratio=1000.0, level_runs=4)
    with db.writer() as w:
        for u in urls:
            w.add_page(Page(u))
        for u in urls[:1500]:
            w.add_link(Link(url_md5(u), popular, f"from {u}"))
        for i in range(300):
            w.add_link(Link(url_md5(rng.choice(urls)), rng.choice(urls[1:]), f"other {i}"))
    with db.writer() as w:  # a delta run over the base
        for u in urls[1500:]:
            w.add_link(Link(url_md5(u), popular, f"round 2 {u}"))
    with db.reader() as r:
        want = [lk for lk in r.links() if lk.url == popular]
    assert len(want) > 500
    with db.reader() as r:
        p = popular.encode() + b"\x00"
        assert r.tables["links_by_url"][0].short_range(p, p[:-1] + b"\x01") is None  # streamed
        got = list(r.inlinks(popular))
        files = _link_files(r)
        built = ["first_keys" in f.__dict__ for f in files]
    with db.reader() as r:
        for f in _link_files(r):
            f.first_keys  # noqa: B018 - the list path
        by_lists = list(r.inlinks(popular))
    assert got == want == by_lists
    assert built == [not COMPILED] * len(files)


def _link_files(r) -> list[TableReader]:
    """The files of a reader's LinksByURL tables: each section's runs and base, or its one file."""
    return [f for t in r.tables["links_by_url"] for f in ([t] if isinstance(t, TableReader) else [*t.runs, t.base])]
