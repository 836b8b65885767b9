"""lz4's acceleration (setting ``lz4_acceleration``): the block and piece encoders take it, the
compiled and Python piece encoders give the same bytes at any value, every value reads back as
the same records, 1 gives lz4's default bytes, and a db written at 1 opens, updates and checks
under the default with the same contents as a db written at the default throughout."""

from __future__ import annotations

import glob
import json
import os
import random
import zlib

import lz4.block
import pytest
from dbutil import batch_b, make_db, snapshot
from hypothesis import given
from hypothesis import strategies as st

import webdb
from webdb.core.dbfiles import seal
from webdb.core.settings import DEFAULTS
from webdb.errors import BadInput
from webdb.tables import block
from webdb.tables.format import KIND_PAGES_BY_MD5, KIND_PAGES_BY_URL
from webdb.tables.table import TableReader, TableWriter

_key = st.binary(min_size=1, max_size=40)
_records = st.lists(st.tuples(_key, st.binary(max_size=300)), min_size=1, max_size=60, unique_by=lambda r: r[0]).map(
    lambda rs: tuple(map(list, zip(*sorted(rs)))) if rs else ([], [])
)
_accels = st.sampled_from([1, 2, 3, 8, 100, 65537])


def _urls(n: int, seed: int = 3) -> tuple[list[bytes], list[bytes]]:
    """n sorted URL keys with page-like values: what the page tables hold, compressible."""
    rng = random.Random(seed)
    keys = sorted(
        {f"http://host{rng.randrange(50)}.example/dir{rng.randrange(9)}/p{i}.html".encode() for i in range(n)}
    )
    vals = [bytes(rng.randrange(4)) * 8 + rng.randbytes(16) + b"\x00" * 12 for _ in keys]
    return keys, vals


@given(_records, st.sampled_from([16, 100, 4096]))
def test_acceleration_one_is_lz4s_default(recs, piece_bytes):
    """Acceleration 1 is the plain ``lz4.block.compress``: the bytes of every table written
    before the setting existed, and of a db that sets it to 1."""
    raw = block.build_py(*recs)
    assert block.lz4_compressor(1) is lz4.block.compress
    for codec in (block.CODEC_LZ4, block.CODEC_LZ4_PIECES):
        assert block.seal_block(raw, codec, piece_bytes, 1) == block.seal_block(raw, codec, piece_bytes)
    assert lz4.block.compress(raw, mode="fast", acceleration=1) == lz4.block.compress(raw)


@given(_records, st.sampled_from([1, 16, 100, 4096]), _accels)
def test_any_acceleration_reads_back_and_c_equals_python(recs, piece_bytes, accel):
    raw = block.build_py(*recs)
    if block.blockc is not None:
        c = block.blockc.seal_pieces(raw, block.lz4_compressor(accel), piece_bytes, zlib.crc32)
        assert c == block.seal_pieces_py(raw, piece_bytes, accel)
    for codec in (block.CODEC_LZ4, block.CODEC_LZ4_PIECES):
        sealed = block.seal_block(raw, codec, piece_bytes, accel)
        assert block.unpack_block(sealed, "x").raw == raw
        assert block.decode_block(sealed, "x") == (recs[0], recs[1])


def test_acceleration_reaches_lz4_in_blocks_and_pieces():
    """A higher acceleration gives other (larger) bytes for URL-like blocks, in plain lz4 and in
    pieces: the value is passed down, not dropped on the way."""
    keys, vals = _urls(600)
    raw = block.build_py(keys, vals)
    for codec in (block.CODEC_LZ4, block.CODEC_LZ4_PIECES):
        dense = block.seal_block(raw, codec, 4096, 1)
        fast = block.seal_block(raw, codec, 4096, 64)
        assert len(fast) > len(dense)
        assert block.unpack_block(fast, "x").raw == block.unpack_block(dense, "x").raw == raw
    assert block.encode_block(keys, vals, block.CODEC_LZ4, 4096, 64) == block.seal_block(raw, block.CODEC_LZ4, 4096, 64)


@pytest.mark.parametrize("kind", [KIND_PAGES_BY_URL, KIND_PAGES_BY_MD5])
@pytest.mark.parametrize("runs", [False, True])
def test_table_writer_encodes_at_its_acceleration(tmp_path, kind, runs):
    keys, vals = _urls(3000)
    size = {}
    for accel in (1, 64):
        w = TableWriter(str(tmp_path / f"t{accel}"), kind, 8192, "lz4", sync=False, acceleration=accel)
        if runs:
            w.add_run(b"".join(k + v for k, v in zip(keys, vals)), [n for kv in zip(keys, vals) for n in map(len, kv)])
        else:
            w.add_many(keys, vals)
        size[accel] = w.close()["bytes"]
        r = TableReader(str(tmp_path / f"t{accel}"), kind)
        assert [k for k, _ in r.items()] == keys and [r.get(k) for k in keys[::97]] == vals[::97]
        r.close()
    assert size[64] > size[1]


def test_setting_is_bounded():
    assert DEFAULTS.lz4_acceleration == 2
    for bad in (0, -1, 65538, 2.0, True, "2"):
        with pytest.raises(BadInput, match="lz4_acceleration"):
            DEFAULTS.replace(lz4_acceleration=bad)


def _table_bytes(path) -> dict[str, bytes]:
    return {
        os.path.relpath(p, path): open(p, "rb").read()
        for p in sorted(glob.glob(os.path.join(path, "section-*", "*")))
        if p.endswith((".pbu", ".pbm", ".lbu", ".lbm"))
    }


def test_a_db_written_at_one_opens_and_updates_under_the_default(tmp_path):
    """A db whose tables were written at acceleration 1 (lz4's default: every db made before the
    setting) and whose webdb.json does not name the setting opens with the default, updates
    (its new files at the default) and checks, holding what a db written at the default
    throughout holds."""
    old = make_db(tmp_path / "old", lz4_acceleration=1)
    path = str(tmp_path / "old" / "webdb.json")
    ident = json.load(open(path))
    del ident["settings"]["lz4_acceleration"], ident["checksum"]
    with open(path, "wb") as f:
        f.write(seal(ident))
    db = webdb.open(str(tmp_path / "old"))
    assert db.settings.lz4_acceleration == DEFAULTS.lz4_acceleration == 2
    with db.writer() as w:
        batch_b(w)
    with db.reader() as r:
        r.check()
    # The same batches at 1 throughout and at the default throughout: the same records.
    ones = make_db(tmp_path / "ones", lz4_acceleration=1)
    with ones.writer() as w:
        batch_b(w)
    fresh = make_db(tmp_path / "fresh")
    with fresh.writer() as w:
        batch_b(w)
    assert snapshot(db) == snapshot(fresh) == snapshot(ones)
    # The update wrote its files at the default: some are the fresh db's bytes, and none of
    # them the bytes of the db that stayed at 1 (blocks carried unchanged keep their bytes, and
    # the level policy weighs the files' bytes, so not every file is the fresh db's).
    got, at_one, at_two = (_table_bytes(tmp_path / n) for n in ("old", "ones", "fresh"))
    newest = max(name.split("/")[-1][:8] for name in got)
    new = [n for n in got if n.split("/")[-1].startswith(newest)]
    assert any(got[n] == at_two.get(n) for n in new)
    assert all(got[n] != at_one.get(n) for n in new)
    del old
