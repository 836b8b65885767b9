"""Crafted db files: hypothesis mutates every file type — a table's data blocks (compressed
bytes and, with codec none, its record layout), index, meta block and footer; the manifest,
CURRENT and webdb.json — recomputing the checksums so the mutation reaches the decoders.
Each mutated file is read in a forked child under a 512 MiB address-space limit: it must end
in a clear error naming the file (CorruptionError / NotADatabase / BadInput) or a read that
completes — never another exception, a MemoryError, or a hang."""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import traceback
import zlib

import pytest
from dbutil import make_db
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import webdb
from webdb.core.db import current_line, seal, seal_checksum
from webdb.errors import BadInput, WebDBError
from webdb.tables.format import CODEC_LZ4, CODEC_LZ4_PIECES, FOOTER_SIZE, KIND_PAGES_BY_URL
from webdb.tables.merge import MergeCursor
from webdb.tables.records import validate_url
from webdb.tables.table import Probe, TableReader, TableWriter

LIMIT = 512 << 20
EXAMPLES = int(os.environ.get("WEBDB_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Values that stress length and count fields: zero, one, the u32/u64 edges, sizes near a block.
INTERESTING = [0, 1, 2, 4, 5, 7, 8, 0x7F, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


def in_child(fn, timeout: float = 60) -> tuple[str, str]:
    """Run fn() in a forked child limited to LIMIT bytes of address space: ("ok"|"clear"|
    "other", message).  A child that does not answer within ``timeout`` is a hang."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        out = "other:?"
        try:
            os.close(r)
            resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))
            try:
                fn()
                out = "ok:"
            except WebDBError as e:
                out = f"clear:{e}"
            except BaseException:
                out = "other:" + traceback.format_exc()
            os.write(w, out.encode("utf-8", "replace")[:60000])
        finally:
            os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        return "other", "hang: no answer within the time bound"
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    kind, _, msg = data.decode().partition(":")
    return kind, msg


def assert_clear(result: tuple[str, str], name: str) -> None:
    kind, msg = result
    assert kind in ("ok", "clear"), msg
    if kind == "clear":
        assert name in msg, msg


# ---- table files ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """A small PagesByURL table per codec: several blocks, so index and carry paths run.  "lz4"
    writes its blocks in lz4 pieces (codec 3); "lz4-blocks" as whole lz4 blocks (codec 2), as a
    writer did before PagesByURL was written in pieces."""
    d = tmp_path_factory.mktemp("fuzz")
    out = {}
    for codec in ("none", "lz4", "zlib", "lz4-blocks"):
        p = str(d / f"t-{codec}.pbu")
        w = TableWriter(p, KIND_PAGES_BY_URL, block_size=200, codec=codec.removesuffix("-blocks"), sync=False)
        if codec == "lz4-blocks":
            w.codec = CODEC_LZ4
        for i in sorted(range(60), key=lambda i: (i % 5, i)):
            w.add(f"http://h{i % 5}.example/{i:04d}".encode(), bytes(range(i % 40)))
        w.close()
        out[codec] = open(p, "rb").read()
    return out


def block_spans(path: str) -> list[tuple[int, int]]:
    t = TableReader(path)
    try:
        return list(zip(t.offsets, t.lengths))
    finally:
        t.close()


def reseal(data: bytearray, off: int, length: int) -> None:
    """Recompute the CRC of the block at [off, off+length)."""
    end = off + length
    body = bytes(data[off : end - 5])
    codec = data[end - 5]
    struct.pack_into("<I", data, end - 4, zlib.crc32(body + bytes((codec,))))


edit_ops = st.lists(
    st.one_of(
        st.tuples(st.just("byte"), st.integers(0, 1 << 20), st.integers(0, 255)),
        st.tuples(st.just("u32"), st.integers(0, 1 << 20), st.sampled_from(INTERESTING)),
        st.tuples(st.just("tail_u32"), st.integers(0, 64), st.sampled_from(INTERESTING)),
    ),
    min_size=1,
    max_size=6,
)


def apply_ops(data: bytearray, off: int, length: int, ops) -> None:
    """Apply ops inside [off, off+length) (positions taken modulo the span)."""
    if length <= 0:
        return
    for op, pos, val in ops:
        if op == "byte":
            data[off + pos % length] = val
        elif length >= 4:
            p = off + (pos % (length - 3)) if op == "u32" else off + max(0, length - 4 - 4 * (pos % 16))
            struct.pack_into("<I", data, p, val)


def read_everything(path: str, tmp: str) -> None:
    t = TableReader(path, KIND_PAGES_BY_URL)
    try:
        # Point lookups first: in lz4 pieces they read a block's header and one piece, not the
        # block a whole read checks.
        for i in range(0, 60, 7):
            t.get(f"http://h{i % 5}.example/{i:04d}".encode())
        for b in range(t.nblocks):
            t.block(b)
        keys = [k for k, _ in t.items()]
        for k in keys[:20]:
            t.get(k)
        t.get(b"http://zz")
        Probe(t).ceiling(b"http://h2")
        pr = Probe(t)  # compiled: a forward LevelSeek, a piece at a time
        for i in range(0, 60, 7):
            pr.get(f"http://h{i % 5}.example/{i:04d}".encode())
        # A merge that carries every block raw (CRC verified) and re-cuts none.
        out = TableWriter(os.path.join(tmp, f"merge-{os.getpid()}.pbu"), KIND_PAGES_BY_URL, sync=False)
        MergeCursor(t, out).finish()
        out.abort()
    finally:
        t.close()


def fuzz_table(tables, tmp_path, codec: str, region: str, which: int, ops) -> None:
    data = bytearray(tables[codec])
    p = str(tmp_path / f"m-{codec}-{region}.pbu")
    with open(p, "wb") as f:
        f.write(data)
    io, il, mo, ml = struct.unpack_from("<QIQI", data, len(data) - FOOTER_SIZE)
    if region == "data":
        spans = block_spans(p)
        off, length = spans[which % len(spans)]
        # with lz4, ops near the start hit the 4-byte uncompressed-size prefix (the bomb field)
        apply_ops(data, off, length - 5, ops)
        reseal(data, off, length)
    elif region == "index":
        apply_ops(data, io, il - 5, ops)
        reseal(data, io, il)
    elif region == "meta":
        apply_ops(data, mo, ml - 5, ops)
        reseal(data, mo, ml)
    else:
        apply_ops(data, len(data) - FOOTER_SIZE, FOOTER_SIZE, ops)
    with open(p, "wb") as f:
        f.write(data)
    assert_clear(in_child(lambda: read_everything(p, str(tmp_path))), p)


@pytest.mark.parametrize("region", ["data", "index", "meta", "footer"])
@FUZZ
@given(codec=st.sampled_from(["none", "lz4", "zlib", "lz4-blocks"]), which=st.integers(0, 100), ops=edit_ops)
def test_mutated_table_file(tables, tmp_path, region, codec, which, ops):
    fuzz_table(tables, tmp_path, codec, region, which, ops)


def test_lz4_bomb_is_refused_before_allocating(tables, tmp_path):
    """A block whose lz4 size prefix claims 2 GiB: refused, not allocated."""
    data = bytearray(tables["lz4-blocks"])
    p = str(tmp_path / "bomb.pbu")
    open(p, "wb").write(data)
    off, length = block_spans(p)[0]
    struct.pack_into("<I", data, off, 0x7FFFFFFF)
    reseal(data, off, length)
    open(p, "wb").write(data)
    kind, msg = in_child(lambda: read_everything(p, str(tmp_path)))
    assert kind == "clear" and "block 0 at offset 0" in msg and "exceeds" in msg, msg


def test_lz4_bomb_in_a_piece_is_refused_before_allocating(tables, tmp_path):
    """The same in lz4 pieces: piece 0's size prefix claims 2 GiB, and every checksum over it (the
    piece's, the header's, the block's) is made to match: refused by a point lookup (which reads
    that piece alone) and by a whole-block read, not allocated."""
    data = bytearray(tables["lz4"])
    p = str(tmp_path / "bomb.pbu")
    open(p, "wb").write(data)
    off, length = block_spans(p)[0]
    end = off + length - 5
    assert data[end] == CODEC_LZ4_PIECES
    (hlen,) = struct.unpack_from("<I", data, end - 8)
    h = end - 8 - hlen
    (first_len,) = struct.unpack_from("<I", data, h + 4)
    struct.pack_into("<I", data, off, 0x7FFFFFFF)
    struct.pack_into("<I", data, h + 12, zlib.crc32(bytes(data[off : off + first_len])))
    struct.pack_into("<I", data, end - 4, zlib.crc32(bytes(data[h : end - 8])))
    reseal(data, off, length)
    open(p, "wb").write(data)
    key = TableReader(p, KIND_PAGES_BY_URL).first_keys[0]

    def lookup() -> None:
        TableReader(p, KIND_PAGES_BY_URL).get(key)

    for read in (lookup, lambda: read_everything(p, str(tmp_path))):
        kind, msg = in_child(read)
        assert kind == "clear" and "block 0 at offset 0" in msg and "exceeds" in msg, msg


def test_footer_flip_says_corrupt_not_newer_version(tables, tmp_path):
    data = bytearray(tables["none"])
    p = str(tmp_path / "foot.pbu")
    for i in range(FOOTER_SIZE):
        d = bytearray(data)
        d[len(d) - FOOTER_SIZE + i] ^= 0x40
        open(p, "wb").write(d)
        kind, msg = in_child(lambda: read_everything(p, str(tmp_path)))
        assert kind == "clear" and p in msg, (i, msg)
        assert "corrupt" in msg or "bad magic" in msg, (i, msg)


# ---- the db's small files ------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzzdb")
    make_db(base / "db", sections=2)
    return base / "db"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["00000001-s1.pbu", "../x", "pages_by_url", "/etc/passwd", "section-0000"]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=6,
)


def nodes(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from nodes(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from nodes(v, (*path, i))


def mutate_json(obj, which: int, action: str, value):
    paths = list(nodes(obj))[1:]
    if not paths:
        return value
    path = paths[which % len(paths)]
    parent = obj
    for p in path[:-1]:
        parent = parent[p]
    if action == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[str(value)[:10]] = value
    else:
        parent[path[-1]] = value
    return obj


def use_db(path: str) -> None:
    db = webdb.open(path)
    with db.reader() as r:
        list(r.pages())
        r.get_page("http://h1.example/p1")
        r.check()
    db.writer().abort()


def fuzz_small(small_db, tmp_path, kind: str, which: int, action: str, value) -> None:
    d = tmp_path / f"db-{kind}"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(small_db, d)
    db = webdb.open(str(d))
    gen = db.committed()
    if kind == "manifest":
        f = d / "gen" / f"{gen:08d}.json"
        m = json.loads(f.read_bytes())
        m.pop("checksum")
        data = seal(mutate_json(m, which, action, value))
        f.write_bytes(data)
        (d / "CURRENT").write_bytes(current_line(gen, seal_checksum(data)[0]))
    elif kind == "identity":
        f = d / "webdb.json"
        m = json.loads(f.read_bytes())
        m.pop("checksum")
        f.write_bytes(seal(mutate_json(m, which, action, value)))
    else:
        f = d / "CURRENT"
        n = which if action == "add" else gen
        cs = seal_checksum((d / "gen" / f"{gen:08d}.json").read_bytes())[0] if action != "delete" else "0" * 8
        f.write_bytes(current_line(n % 10**8, cs))
    assert_clear(in_child(lambda: use_db(str(d))), str(d))


@pytest.mark.parametrize("kind", ["manifest", "identity", "CURRENT"])
@FUZZ
@given(which=st.integers(0, 10**6), action=st.sampled_from(["set", "delete", "add"]), value=json_values)
def test_mutated_small_file(small_db, tmp_path, kind, which, action, value):
    fuzz_small(small_db, tmp_path, kind, which, action, value)


def read_db(path: str) -> None:
    db = webdb.open(path)
    with db.reader() as r:
        for p in r.pages():
            try:
                validate_url(p.url)
            except BadInput:
                continue  # a crafted key: not a URL one may look up (the lookup says so)
            r.get_page(p.url)
            list(r.inlinks(p.url))
            list(r.get_pages(p.md5))
            list(r.outlinks(p.md5))
        list(r.links())
        list(r.links_by_md5())
        list(r.pages_by_md5())
        r.check()  # reports what it finds, never fails on it


@pytest.fixture(scope="module")
def none_db(tmp_path_factory):
    """A db with codec none, so mutations reach the records (values, keys, offsets)."""
    base = tmp_path_factory.mktemp("fuzznone")
    make_db(base / "db", sections=1, codec="none")
    return base / "db"


@FUZZ
@given(table=st.sampled_from(["pbu", "pbm", "lbm", "lbu"]), which=st.integers(0, 1000), ops=edit_ops)
def test_mutated_records_read_through_the_api(none_db, tmp_path, table, which, ops):
    """Records decoded into Page/Link (short values, bad UTF-8, bad meta JSON), and `check`
    of them: a clear error."""
    d = tmp_path / "db"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(none_db, d)
    sec = d / "section-0000"
    f = next(p for p in sec.iterdir() if p.suffix == "." + table)
    data = bytearray(f.read_bytes())
    spans = block_spans(str(f))
    off, length = spans[which % len(spans)]
    apply_ops(data, off, length - 5, ops)
    reseal(data, off, length)
    f.write_bytes(data)
    assert_clear(in_child(lambda: read_db(str(d))), str(d))


@pytest.mark.slow
@pytest.mark.parametrize("region", ["data", "index", "meta", "footer"])
@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(codec=st.sampled_from(["none", "lz4", "zlib", "lz4-blocks"]), which=st.integers(0, 100), ops=edit_ops)
def test_mutated_table_file_long(tables, tmp_path, region, codec, which, ops):
    fuzz_table(tables, tmp_path, codec, region, which, ops)


# ---- crafted records that pass their CRC: `webdb check` reports them ----------------------------


def _records(body: bytes) -> tuple[int, list[int], list[int]]:
    """(n, key ends, record ends) of an uncompressed block (docs/format.md §1.1)."""
    (n,) = struct.unpack_from("<I", body, len(body) - 4)
    ends = struct.unpack_from(f"<{2 * n}I", body, len(body) - 4 - 8 * n)
    return n, list(ends[:n]), list(ends[n:])


def _craft(db_path, table: str, change) -> str:
    """Apply ``change(body, n, key_ends, rec_ends, at)`` to a middle record of the first block of
    a codec-none table file, keeping the file's size, and reseal the block; return the file."""
    f = next(p for p in (db_path / "section-0000").iterdir() if p.suffix == "." + table)
    data = bytearray(f.read_bytes())
    off, length = block_spans(str(f))[0]
    body = bytearray(data[off : off + length - 5])
    n, kends, rends = _records(bytes(body))
    assert n >= 3
    change(body, n, kends, rends, n // 2)
    data[off : off + length - 5] = body
    reseal(data, off, length)
    f.write_bytes(data)
    return str(f)


def _key_without_separator(body, n, kends, rends, i):
    body[kends[i] - 17] = 0x01  # the 0x00 between url and fromID


def _short_value(body, n, kends, rends, i):
    # The key takes all but 5 bytes of the record: a value shorter than its fixed fields.
    struct.pack_into("<I", body, len(body) - 4 - 8 * n + 4 * i, rends[i] - 5)


@pytest.mark.parametrize(
    "table, change, reason",
    [
        ("lbu", _key_without_separator, "has a key that is not of its table's layout"),
        ("pbu", _short_value, "has a value of 5 bytes, shorter than its 59 bytes of fixed fields"),
        ("pbm", _short_value, "has a value of 5 bytes, shorter than its 59 bytes"),
        ("lbm", _short_value, "has a value of 5 bytes, shorter than its 9 bytes"),
    ],
)
def test_check_reports_a_crafted_record_that_passes_its_crc(none_db, tmp_path, table, change, reason):
    d = tmp_path / "db"
    shutil.copytree(none_db, d)
    path = _craft(d, table, change)
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "check", str(d)], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr, (p.returncode, p.stderr)
    assert p.stdout.startswith("FAILED: ") and path in p.stdout and reason in p.stdout, p.stdout
