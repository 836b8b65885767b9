"""Blocks of a table file: the record layout, codecs, checksum (docs/format.md §1.1).

``encode_block`` / ``unpack_block`` are the one codec of a block; ``RawBlock`` is a decoded,
verified block kept as bytes plus offset arrays (what the lookup cache holds).  Every decode
failure is a CorruptionError naming the file, the block and its offset.

The inner loops (search, split, build) run in C when the optional extension ``_blockc`` is
built (``pip install`` compiles it where gcc and the Python headers exist); the pure-Python
code below is the reference and the fallback, chosen when the extension is missing or when
``WEBDB_PURE_PYTHON=1`` is set (read once, at import).  Both give the same bytes and results.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Callable
from itertools import accumulate, chain
from operator import sub
from types import ModuleType

import lz4.block

from webdb.errors import CorruptionError
from webdb.tables.format import (
    BLOCK_TRAILER_SIZE,
    CODEC_LZ4,
    CODEC_LZ4_PIECES,
    CODEC_NONE,
    CODEC_ZLIB,
    PIECE_BYTES,
)

CODECS = {"none": CODEC_NONE, "zlib": CODEC_ZLIB, "lz4": CODEC_LZ4}
TRAILER = struct.Struct("<BI")  # codec u8, crc32 u32
_CODEC_BYTE = [bytes((c,)) for c in range(256)]  # the codec byte the checksum covers
_BIG = sys.byteorder == "big"

blockc = None
if os.environ.get("WEBDB_PURE_PYTHON", "") in ("", "0"):
    try:
        from webdb.tables import _blockc as blockc
    except ImportError:  # not built (no compiler where it was installed): the Python code
        pass
COMPILED = blockc is not None
"""True when the block codec runs the compiled extension, False when it runs pure Python."""

if blockc is not None:
    # Decompression calls lz4's C function directly rather than through lz4.block.decompress
    # (the same function on the same bytes; _blockc.use_lz4 says why).
    try:
        from lz4.block import _block as _lz4_ext

        blockc.use_lz4(lz4.block.decompress, _lz4_ext.__file__)
    except (ImportError, AttributeError, TypeError):  # another build of lz4: the callable stays
        pass


def same_crc32(fn: Callable[..., int]) -> bool:
    """Whether ``fn`` gives ``zlib.crc32``'s values (a start value too) on data of every length
    up to 64 bytes, at two alignments, and some longer (the reference a faster CRC must meet;
    ``_blockc.use_crc32`` checks its C function against it on more)."""
    data = bytes(range(251)) * 300
    try:
        for n in (*range(65), 127, 128, 129, 255, 256, 257, 1000, 4096, 8191, 70001):
            for at in (0, 1):
                if fn(data[at : at + n]) != zlib.crc32(data[at : at + n]):
                    return False
        return fn(data[:999], 123456789) == zlib.crc32(data[:999], 123456789)
    except Exception:  # a broken build: not this CRC
        return False


def select_crc32(fast: ModuleType | None) -> Callable[..., int]:
    """The CRC-32 every block CRC is computed with: ``fast.crc32`` (python-isal's
    ``isal.isal_zlib``, ISA-L's CRC, 4-8x zlib's speed) if it gives zlib.crc32's values,
    else ``zlib.crc32`` itself (the reference); the values, and so the format, are the same.
    With the compiled codec its C function is registered (``_blockc.use_crc32``: ISA-L's
    ``crc32_gzip_refl``, or zlib's ``crc32_z``), so that the C code computes it without a Python
    call wherever the callable is passed; ``block.crc32`` holds the callable chosen at import."""
    fn = getattr(fast, "crc32", None)
    if fn is None or not same_crc32(fn):
        fn = None
    elif blockc is not None:
        try:
            if not blockc.use_crc32(fn, fast.__file__, ("crc32_gzip_refl",)):
                fn = None
        except (AttributeError, TypeError):  # no such extension file: the zlib path below
            fn = None
    if fn is not None:
        return fn
    if blockc is not None:
        try:
            blockc.use_crc32(zlib.crc32, zlib.__file__, ("crc32_z", "crc32"))
        except (AttributeError, TypeError):  # zlib built into the interpreter: the callable stays
            pass
    return zlib.crc32


try:
    from isal import isal_zlib as _isal_zlib
except ImportError:  # python-isal missing or not built for this platform: zlib's CRC
    _isal_zlib = None
crc32 = select_crc32(_isal_zlib)
"""The CRC-32 callable of every block CRC (``select_crc32``), passed to the compiled functions."""


def _compress(codec: int, raw: bytes) -> bytes:
    if codec == CODEC_LZ4:
        return lz4.block.compress(raw, store_size=True)
    if codec == CODEC_ZLIB:
        return zlib.compress(raw, 1)
    return raw


# Largest uncompressed block a reader accepts.  Writers cut blocks at ``block_size`` (at
# most a few MiB) plus one record or one bulk call; a larger declared size is a crafted or
# damaged block, refused before anything is allocated (a 1 KiB lz4 block could claim 2 GiB).
MAX_BLOCK_BYTES = 64 << 20


# What a lookup reads of a block in lz4 pieces first: its last KiB, the trailer and the header
# (more when the header is longer); TAIL_BYTES in _blockc_src/blockc.h.
TAIL_BYTES = 1024
_U32 = struct.Struct("<I")
_U32X2 = struct.Struct("<II")
_U32X3 = struct.Struct("<III")


def _seal_pieces(raw: bytes, piece_bytes: int = PIECE_BYTES) -> bytes | None:
    """The lz4-pieces body (codec 3, format.md §1.1) of the raw block ``raw``: m =
    len(raw) // piece_bytes pieces of equal shares, cut at the first record boundary where a
    piece's records and offsets reach ceil(len(raw) / m), each piece a block of its own,
    lz4-compressed, then the header (piece table, first keys, its length and CRC); None if
    m < 2 or that gives one piece (``_blockc.seal_pieces`` in Python)."""
    if blockc is not None:
        return blockc.seal_pieces(raw, lz4.block.compress, piece_bytes, crc32)
    return seal_pieces_py(raw, piece_bytes)


def seal_pieces_py(raw: bytes, piece_bytes: int) -> bytes | None:
    """``_seal_pieces`` in Python (the reference the tests compare the C code with)."""
    n = int.from_bytes(raw[-4:], "little")
    m = len(raw) // piece_bytes
    if n < 2 or m < 2:
        return None
    piece_bytes = -(-len(raw) // m)
    kends, rends = _offsets(raw, n)
    cuts, acc, start = [0], 0, 0
    for j in range(n - 1):
        acc += rends[j] - start + 8
        start = rends[j]
        if acc >= piece_bytes:
            cuts.append(j + 1)
            acc = 0
    if len(cuts) < 2:
        return None
    cuts.append(n)
    table, keys, bodies = [], [], []
    for i, (s, e) in enumerate(zip(cuts, cuts[1:])):
        rs = rends[s - 1] if s else 0
        if i:
            keys.append(_U32.pack(kends[s] - rs) + raw[rs : kends[s]])
        offs = array("I", [k - rs for k in kends[s:e]])
        offs.extend(r - rs for r in rends[s:e])
        offs.append(e - s)
        if _BIG:
            offs.byteswap()
        body = lz4.block.compress(raw[rs : rends[e - 1]] + offs.tobytes(), store_size=True)
        table.append(_U32X3.pack(len(body), e - s, crc32(body)))
        bodies.append(body)
    header = b"".join([_U32.pack(len(bodies)), *table, *keys])
    return b"".join([*bodies, header, _U32X2.pack(len(header), crc32(header))])


def pieces_header(tail: bytes | memoryview, body_len: int) -> tuple[bytes, list[tuple[int, int, int]], list[bytes]]:
    """The header of an lz4-pieces body of ``body_len`` bytes from ``tail``, the body's last
    bytes (the whole body, or the tail a lookup reads): the header's bytes, its piece table
    (compressed length, count, CRC of each piece) and the first keys (b"" for piece 0), its CRC
    and every length checked against the body.  ValueError names what is wrong."""
    end = len(tail)
    if end < 12:
        raise ValueError("lz4-pieces body shorter than its header")
    hlen, hcrc = _U32X2.unpack_from(tail, end - 8)
    if hlen > end - 8:
        raise ValueError(f"pieces header of {hlen} bytes does not fit the block's {body_len} bytes")
    header = bytes(tail[end - 8 - hlen : end - 8])
    if crc32(header) != hcrc:
        raise ValueError("pieces header checksum mismatch")
    (m,) = _U32.unpack_from(header, 0) if hlen >= 4 else (0,)
    if m < 1 or 12 * m > hlen - 4:
        raise ValueError(f"piece count {m} does not fit the header's {hlen} bytes")
    tab = [_U32X3.unpack_from(header, 4 + 12 * i) for i in range(m)]
    q, first = 4 + 12 * m, [b""]
    for i in range(1, m):
        if q + 4 > hlen or _U32.unpack_from(header, q)[0] > hlen - q - 4:
            raise ValueError(f"first key of piece {i} runs past the header")
        (kl,) = _U32.unpack_from(header, q)
        first.append(header[q + 4 : q + 4 + kl])
        q += 4 + kl
    if q != hlen or sum(c for c, _, _ in tab) != body_len - 8 - hlen or min(c for c, _, _ in tab) < 4:
        raise ValueError("piece lengths do not match the block's size")
    return header, tab, first


def unpack_piece(piece: bytes | memoryview, i: int, crc: int, count: int, first: bytes) -> tuple[bytes, array, array]:
    """Piece ``i`` of an lz4-pieces body (its compressed bytes, CRC, count and first key as the
    header gives them) checked and decompressed: (raw, key ends, record ends).  ValueError
    names what is wrong."""
    if crc32(piece) != crc:
        raise ValueError(f"piece {i}: checksum mismatch")
    raw = _decompress(CODEC_LZ4, piece)
    n = int.from_bytes(raw[-4:], "little") if len(raw) >= 4 else -1
    if n != count or n < 1 or 8 * n > len(raw) - 4:
        raise ValueError(f"piece {i}: record count does not match the piece table")
    k, r = _offsets(raw, n)
    if r[-1] != len(raw) - 4 - 8 * n:
        raise ValueError(f"piece {i}: offsets do not match its size")
    if i and raw[: k[0]] != first:
        raise ValueError(f"piece {i}: first key does not match the piece table")
    return raw, k, r


def piece_of(header: bytes, key: bytes) -> tuple[int, int, int, int, int, bytes]:
    """In a checked pieces header, the piece that can hold ``key`` (the last whose first key is
    <= key; piece 0 if none is): (its number, its offset in the body, compressed length, count,
    CRC, first key) — what the compiled lookup's ``piece_for`` finds."""
    (m,) = _U32.unpack_from(header, 0)
    q, p, first = 4 + 12 * m, 0, b""
    for i in range(1, m):
        (kl,) = _U32.unpack_from(header, q)
        fk = header[q + 4 : q + 4 + kl]
        if fk > key:
            break
        p, first = i, fk
        q += 4 + kl
    at = sum(_U32.unpack_from(header, 4 + 12 * i)[0] for i in range(p))
    return (p, at, *_U32X3.unpack_from(header, 4 + 12 * p), first)


def piece_raw_block(raw: bytes) -> RawBlock:
    """A piece as a lookup caches it — its raw bytes (whose last u32 is its count), not an object
    the garbage collector tracks — as a RawBlock to search."""
    n = int.from_bytes(raw[-4:], "little")
    if blockc is not None:
        return _CRawBlock(raw, n)
    return RawBlock(raw, *_offsets(raw, n), n)


def unpieces(body: bytes | memoryview) -> bytes:
    """The raw block of an lz4-pieces body: the header's CRC, then every piece checked (its
    CRC, size, count and offsets, its first key against the header) and decompressed, the
    records joined and their offsets moved by where each piece starts.  ValueError names what
    is wrong."""
    _, tab, first = pieces_header(body, len(body))
    records, kends, rends, base, q = [], array("I"), array("I"), 0, 0
    for i, (cl, count, crc) in enumerate(tab):
        raw, k, r = unpack_piece(body[q : q + cl], i, crc, count, first[i])
        q += cl
        records.append(raw[: r[-1]])
        # u32 arithmetic, as the C code: a crafted offset past 2**32 wraps rather than raising.
        kends.extend((x + base) & 0xFFFFFFFF for x in k)
        rends.extend((x + base) & 0xFFFFFFFF for x in r)
        base += r[-1]
    n = len(kends)
    if base + 8 * n + 4 > MAX_BLOCK_BYTES:
        raise ValueError(f"pieces exceed the {MAX_BLOCK_BYTES}-byte block limit")
    kends.extend(rends)
    kends.append(n)
    if _BIG:
        kends.byteswap()
    return b"".join(records) + kends.tobytes()


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == CODEC_LZ4_PIECES:
        return unpieces(data)
    if codec == CODEC_LZ4:
        if len(data) < 4:
            raise ValueError("lz4 body shorter than its size prefix")
        size = int.from_bytes(data[:4], "little")
        if size > MAX_BLOCK_BYTES:
            raise ValueError(f"declared size {size} exceeds the {MAX_BLOCK_BYTES}-byte block limit")
        return lz4.block.decompress(data)
    if codec == CODEC_ZLIB:
        d = zlib.decompressobj()
        raw = d.decompress(data, MAX_BLOCK_BYTES)
        if d.unconsumed_tail:
            raise ValueError(f"inflates past the {MAX_BLOCK_BYTES}-byte block limit")
        if not d.eof:
            raise ValueError("truncated zlib stream")
        return raw
    if codec == CODEC_NONE:
        return data
    raise ValueError(f"unknown codec {codec}")


def encode_block(keys: list[bytes], vals: list[bytes], codec: int, piece_bytes: int = PIECE_BYTES) -> bytes:
    """Records, then n key-end and n record-end offsets (u32 LE), then n; compressed; trailer."""
    return seal_block(blockc.build(keys, vals) if blockc is not None else build_py(keys, vals), codec, piece_bytes)


def build_py(keys: list[bytes], vals: list[bytes]) -> bytes:
    """The uncompressed block of these records (``_blockc.build`` in Python)."""
    n = len(keys)
    ends = list(accumulate(chain.from_iterable(zip(map(len, keys), map(len, vals)))))
    offs = array("I", ends[0::2])
    offs.extend(ends[1::2])
    offs.append(n)
    if _BIG:
        offs.byteswap()
    return b"".join(chain.from_iterable(zip(keys, vals))) + offs.tobytes()


def encode_run(
    data: bytes, lens: list[int], codec: int, piece_bytes: int = PIECE_BYTES
) -> tuple[bytes, bytes, bytes, int]:
    """``encode_block`` of records given as a run: ``data`` holds their keys and values back to
    back, ``lens`` their lengths (key, value, key, value, ...).  Returns the same block bytes as
    ``encode_block`` of those records, with the first key, the last key and the count.  Cost:
    one copy of the bytes and C-level passes over ``lens``; no Python code per record."""
    raw, total = blockc.build_run(data, lens) if blockc is not None else build_run_py(data, lens)
    last = total - lens[-1]
    return seal_block(raw, codec, piece_bytes), data[: lens[0]], data[last - lens[-2] : last], len(lens) >> 1


def build_run_py(data: bytes, lens: list[int]) -> tuple[bytes, int]:
    """``data`` followed by the offsets and count of the records ``lens`` gives, and the sum of
    ``lens`` (``_blockc.build_run`` in Python)."""
    n = len(lens) >> 1
    ends = list(accumulate(lens))
    offs = array("I", ends[0::2])
    offs.extend(ends[1::2])
    offs.append(n)
    if _BIG:
        offs.byteswap()
    return data + offs.tobytes(), ends[-1] if ends else 0


def run_cuts(lens: list[int], size: int, block_size: int) -> list[int]:
    """Where ``TableWriter.add_run`` ends blocks in a run of records with these ``lens`` (key,
    value, key, value, ...) after ``size`` pending bytes: [j, end, j, end, ...], a block ending
    after record j-1 (``end``: its byte offset in the run's data) where its records' lengths
    plus 8 each reach ``block_size``, the next one starting empty; the tail stays pending
    (``_blockc.run_cuts``: no Python code per record)."""
    if blockc is not None:
        return blockc.run_cuts(lens, size, block_size)
    return run_cuts_py(lens, size, block_size)


def run_cuts_py(lens: list[int], size: int, block_size: int) -> list[int]:
    """``run_cuts`` in Python (the reference the tests compare the C code with)."""
    cuts, acc, at = [], size, 0
    for j in range(len(lens) >> 1):
        rec = lens[2 * j] + lens[2 * j + 1]
        at += rec
        acc += rec + 8
        if acc >= block_size:
            cuts += (j + 1, at)
            acc = 0
    return cuts


def seal_block(raw: bytes, codec: int, piece_bytes: int = PIECE_BYTES) -> bytes:
    """An uncompressed block, compressed by ``codec`` and followed by its trailer.  Codec
    lz4-pieces cuts pieces of about ``piece_bytes`` and falls back to plain lz4 for a block
    too small for two."""
    if codec == CODEC_LZ4_PIECES:
        body = _seal_pieces(raw, piece_bytes)
        if body is None:
            codec, body = CODEC_LZ4, _compress(CODEC_LZ4, raw)
    else:
        body = _compress(codec, raw)
    return body + TRAILER.pack(codec, crc32(_CODEC_BYTE[codec], crc32(body)))


class RawBlock:
    """A decompressed, checksum-verified block: its bytes and the offset arrays, without
    splitting it into Python objects.  What the lookup cache holds (about its own size)."""

    __slots__ = ("raw", "_k", "_r", "n")

    def __init__(self, raw: bytes, kends, rends, n: int):
        self.raw, self._k, self._r, self.n = raw, kends, rends, n

    @property
    def kends(self):
        """The n key-end offsets (an array), built on first use when the block came from C."""
        if self._k is None:
            self._k, self._r = _offsets(self.raw, self.n)
        return self._k

    @property
    def rends(self):
        """The n record-end offsets (an array), as ``kends``."""
        if self._r is None:
            self._k, self._r = _offsets(self.raw, self.n)
        return self._r

    def key(self, j: int) -> bytes:
        return self.raw[self._r[j - 1] if j else 0 : self._k[j]]

    def value(self, j: int) -> bytes:
        return self.raw[self._k[j] : self._r[j]]

    def find(self, key: bytes) -> int:
        """Index of the first record with record key >= key (binary search over the raw bytes)."""
        raw, kends, rends = self.raw, self._k, self._r
        lo, hi = 0, self.n
        while lo < hi:
            mid = (lo + hi) >> 1
            if raw[rends[mid - 1] if mid else 0 : kends[mid]] < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def get(self, key: bytes) -> bytes | None:
        """Value of ``key`` or None: ``find`` inlined (a point lookup's inner loop), and only the
        value found is sliced out."""
        raw, kends, rends = self.raw, self._k, self._r
        lo, hi = 0, self.n
        while lo < hi:
            mid = (lo + hi) >> 1
            if raw[rends[mid - 1] if mid else 0 : kends[mid]] < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < self.n and raw[rends[lo - 1] if lo else 0 : kends[lo]] == key:
            return raw[kends[lo] : rends[lo]]
        return None

    def keys(self) -> list[bytes]:
        """Every record key (the values stay in the block's bytes)."""
        raw = self.raw
        starts = [0]
        starts.extend(self._r[:-1])
        return [raw[s:e] for s, e in zip(starts, self._k)]

    def lens(self, keys: list[bytes] | None = None) -> list[int]:
        """Every record's key and value lengths, interleaved (what ``TableWriter.add_run`` takes);
        ``keys`` (from ``keys()``) saves a pass."""
        if keys is None:
            starts = [0]
            starts.extend(self._r[:-1])
            klens = map(sub, self._k, starts)
        else:
            klens = map(len, keys)
        return list(chain.from_iterable(zip(klens, map(sub, self._r, self._k))))

    def start(self, j: int) -> int:
        """Offset of record j's key (j == n: the end of the records)."""
        return self._r[j - 1] if j else 0

    def values(self, lo: int, hi: int) -> list[bytes]:
        """Values of records lo..hi-1."""
        raw = self.raw
        return [raw[s:e] for s, e in zip(self._k[lo:hi], self._r[lo:hi])]

    def split(self, lo: int = 0, hi: int | None = None) -> tuple[list[bytes], list[bytes]]:
        """Records lo..hi-1 as (keys, values) lists."""
        raw = self.raw
        hi = self.n if hi is None else hi
        kends = self._k[lo:hi]
        rends = self._r[lo:hi]
        starts = [self._r[lo - 1] if lo else 0]
        starts.extend(rends[:-1])
        return [raw[s:e] for s, e in zip(starts, kends)], [raw[s:e] for s, e in zip(kends, rends)]


class _CRawBlock(RawBlock):
    """``RawBlock`` whose searches and splits run in the compiled ``_blockc`` (same results).
    Made by ``_blockc.unpack`` from the bytes and the count alone: the offset arrays, which
    only a merge reads, are built on their first use (``kends``, ``rends``)."""

    __slots__ = ()

    def __init__(self, raw: bytes, n: int):
        self.raw, self._k, self._r, self.n = raw, None, None, n

    def key(self, j: int) -> bytes:
        return self.raw[self.rends[j - 1] if j else 0 : self.kends[j]]

    def value(self, j: int) -> bytes:
        return self.raw[self.kends[j] : self.rends[j]]

    def start(self, j: int) -> int:
        return self.rends[j - 1] if j else 0

    def find(self, key: bytes) -> int:
        return blockc.find(self.raw, self.n, key)

    def get(self, key: bytes) -> bytes | None:
        return blockc.get(self.raw, self.n, key)

    def keys(self) -> list[bytes]:
        return blockc.keys(self.raw, self.n)

    def lens(self, keys: list[bytes] | None = None) -> list[int]:
        return blockc.lens(self.raw, self.n)

    def values(self, lo: int, hi: int) -> list[bytes]:
        return blockc.values(self.raw, self.n, lo, hi)

    def split(self, lo: int = 0, hi: int | None = None) -> tuple[list[bytes], list[bytes]]:
        return blockc.split(self.raw, self.n, lo, hi)


def _offsets(raw: bytes, n: int) -> tuple[array, array]:
    """The key-end and record-end offsets of a block of ``n`` records (n checked to fit)."""
    offs = array("I")
    offs.frombytes(raw[len(raw) - 4 - 8 * n : len(raw) - 4])
    if _BIG:
        offs.byteswap()
    return offs[:n], offs[n:]


lz4_decompress = lz4.block.decompress
"""The decompressor the compiled functions call back (passed in: the extension links no lz4)."""


def unpack_block(data: bytes, where: str | Callable[[], str]) -> RawBlock:
    """Verify a block's checksum, decompress it and read its offsets; ``where`` names file and
    block in errors (or gives that name when called: it is needed only for an error).

    With the compiled codec one C call does it all for a sound block (``_blockc.unpack``);
    anything it does not take (a damaged block, the zlib codec) runs the Python code below,
    which raises the CorruptionError naming what is wrong."""
    if blockc is not None:
        r = blockc.unpack(data, crc32, lz4_decompress)
        if r is None and data[-5:-4] == b"\x03":
            r = blockc.unpack_pieces(data, crc32, lz4_decompress)
        if r is not None:
            return _CRawBlock(*r)
    if not isinstance(where, str):
        where = where()
    if len(data) < BLOCK_TRAILER_SIZE:
        raise CorruptionError(f"{where}: truncated block")
    end = len(data) - BLOCK_TRAILER_SIZE
    codec, crc = TRAILER.unpack_from(data, end)
    body = memoryview(data)[:end]  # no copy of the body for the checksum
    if crc32(_CODEC_BYTE[codec], crc32(body)) != crc:
        raise CorruptionError(f"{where}: checksum mismatch")
    try:
        raw = _decompress(codec, body)
    except (ValueError, zlib.error, lz4.block.LZ4BlockError) as e:
        raise CorruptionError(f"{where}: undecodable block ({e})") from None
    if type(raw) is not bytes:
        raw = bytes(raw)  # CODEC_NONE: the body itself
    if len(raw) < 4:
        raise CorruptionError(f"{where}: block of {len(raw)} bytes has no record count")
    n = int.from_bytes(raw[-4:], "little")
    if 8 * n > len(raw) - 4:
        raise CorruptionError(f"{where}: record count {n} does not fit the block's {len(raw)} bytes")
    kends, rends = _offsets(raw, n)
    # Offsets past the end or out of order cannot make a read fail (slices clamp, in C too), so
    # only the total is checked here — per-record order checks would double a lookup's cost;
    # check() verifies key order.
    if n and rends[-1] != len(raw) - 4 - 8 * n:
        raise CorruptionError(f"{where}: block offsets do not match its size")
    if blockc is not None:
        rb = _CRawBlock(raw, n)
        rb._k, rb._r = kends, rends
        return rb
    return RawBlock(raw, kends, rends, n)


def unpack_range(data: bytes, start: bytes, stop: bytes) -> tuple[list[bytes], list[bytes], int] | None:
    """``unpack_block(data).split(find(start), find(stop))`` and the block's record count in one
    C call (``_blockc.unpack_range``): no block object, one call per block of a short lookup.
    None when not compiled or when the block is not sound (``unpack_block`` names the fault)."""
    if blockc is None:
        return None
    if data[-5:-4] == b"\x03":  # lz4 pieces: only the pieces the range reaches
        return blockc.unpack_range_pieces(data, crc32, lz4_decompress, start, stop)
    return blockc.unpack_range(data, crc32, lz4_decompress, start, stop)


def pieces_split(rb: RawBlock, data: bytes, start: bytes, stop: bytes) -> tuple[list[bytes], list[bytes]] | None:
    """The records with start <= key < stop of ``rb``, a sound lz4-pieces block (``data``, its
    bytes on disk), read as ``_blockc.unpack_range_pieces`` reads them: only the pieces whose
    header first keys bracket the range, each searched on its own.  On a sound block that is
    ``rb.split(rb.find(start), rb.find(stop))``; on a crafted one whose keys are out of order
    (its CRCs sound) it is what the compiled read gives.  None if ``data`` is not in pieces."""
    if data[-5:-4] != b"\x03":
        return None
    end = len(data) - BLOCK_TRAILER_SIZE
    hlen = _U32.unpack_from(data, end - 8)[0]
    header = data[end - 8 - hlen : end - 8]
    (m,) = _U32.unpack_from(header, 0)
    counts = [_U32X3.unpack_from(header, 4 + 12 * i)[1] for i in range(m)]
    q, first = 4 + 12 * m, [b""]
    for _ in range(1, m):
        (kl,) = _U32.unpack_from(header, q)
        first.append(header[q + 4 : q + 4 + kl])
        q += 4 + kl
    p0 = p1 = 0
    for i in range(1, m):
        if first[i] <= start:
            p0 = i
        if first[i] < stop:
            p1 = i
    keys: list[bytes] = []
    vals: list[bytes] = []
    at = sum(counts[:p0])
    for i in range(p0, p1 + 1):
        a, b = at, at + counts[i]
        lo = _lower_bound(rb, a, b, start) if i == p0 else a
        hi = _lower_bound(rb, a, b, stop) if i == p1 else b
        if hi > lo:
            k, v = rb.split(lo, hi)
            keys += k
            vals += v
        at = b
    return keys, vals


def _lower_bound(rb: RawBlock, lo: int, hi: int, key: bytes) -> int:
    """The first record in lo..hi-1 of ``rb`` whose key is >= ``key`` (a binary search)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if rb.key(mid) < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def index_in_place(rb: RawBlock, data_end: int, count: int) -> tuple[bytes, int] | None:
    """(raw, n) of a table's index block ``rb`` whose every entry passes the checks of the
    index load (``_blockc.index_check``): what ``short_file`` searches in place, with no list
    of keys built.  None when not compiled or when a check fails (the load then names it)."""
    if blockc is None or not blockc.index_check(rb.raw, rb.n, data_end, count):
        return None
    return rb.raw, rb.n


def in_place_block(ix: tuple[bytes, int]) -> RawBlock:
    """The RawBlock of an index block kept by ``index_in_place``."""
    return _CRawBlock(*ix)


def short_file(ix: tuple[bytes, int], fd: int, start: bytes, stop: bytes, most: int, pieces: bool):
    """``TableReader.short_range`` of a table file in one C call (``_blockc.short_file``): its
    index ``ix`` (``index_in_place``) searched in place, each block read from ``fd`` and
    unpacked — if ``pieces`` (a file written in lz4 pieces), its tail (trailer and header)
    first, then only the pieces the range reaches.  (keys, values); None if the range reaches
    more than ``most`` blocks; False if a block is not sound (the Python path then names it)."""
    return blockc.short_file(ix[0], ix[1], fd, start, stop, most, crc32, lz4_decompress, pieces)


def short_levels(files: tuple, start: bytes, stop: bytes, most: int):
    """``Levels.short_range`` in one C call (``_blockc.short_levels``): ``files`` are each file's
    ``short_file`` arguments (raw index, entries, fd, pieces) and whether it is a delta run,
    newest first; their records in [start, stop) merged as ``merge_sorted`` does.  None if a
    file's range reaches more than ``most`` blocks; False if a block or a record is not sound
    (each file's ``short_range`` then names the fault)."""
    return blockc.short_levels(files, start, stop, most, crc32, lz4_decompress)


def point_lookup(files: tuple, cache: dict | None, put: Callable | None, page: type, link: tuple | None):
    """A ``Lookup`` (``blockc.lookup``): point lookups of a table's levels, one C call each —
    ``get(key)`` as ``Levels.get`` (``TableReader.get`` for one file), ``page(url, key)`` as
    ``Reader.get_page``'s ``Page.decode`` of that value, ``links(url, key)`` as
    ``Reader.inlinks``' short path (``short_levels`` then ``make_links``; None: the links reach
    more blocks, stream them).  ``files`` are (raw index, entries, fd, pieces, run, cache key
    base) of each file, newest first; blocks come from ``cache`` (a BlockCache's dict; a hit is
    moved to its LRU end) or are read, checked and ``put`` there as ``TableReader._read`` does.
    ``link`` is (Link class, LINK_FIXED, LINK_OUT, most blocks per file) for ``links``.  A
    result False: a block, a record or a value is not sound (the caller's Python path names the
    fault).  None when not compiled."""
    if blockc is None:
        return None
    return blockc.lookup(files, cache, put, _CRawBlock, crc32, lz4_decompress, page, json.loads, link)


def index_entries(rb: RawBlock, size: int) -> tuple[list[bytes], list[bytes], bytes] | None:
    """A table index block's entries: (first keys, last keys, the fixed fields) — each value is
    ``size`` bytes of fields then the block's last key; the fields of all entries are returned
    back to back, for arrays.  None if a value is shorter than ``size`` (the caller names it).
    One C pass when compiled (no list of values is built)."""
    if blockc is not None:
        return blockc.index_entries(rb.raw, rb.n, size)
    keys, vals = rb.split()
    if vals and min(map(len, vals)) < size:
        return None
    return keys, [v[size:] for v in vals], b"".join([v[:size] for v in vals])


def merge_sorted(parts: list[tuple[list[bytes], list[bytes], bool]]) -> tuple[list[bytes], list[bytes]] | None:
    """The records of ``parts`` — (keys, values, ops) of the files of a table's levels, newest
    first, each sorted — merged in C (``_blockc.merge``): the newest record of a key wins and,
    where ``ops`` (a delta run: values are an op byte, then the value), a PUT gives its value
    and a DEL hides the key.  None when not compiled, or for input a sound table does not give
    (``Levels._merged`` then runs its Python reference, which names a bad op byte)."""
    return blockc.merge(parts) if blockc is not None else None


def merge_run(parts: list[tuple[list[bytes], list[bytes], bool]], keep_ops: bool) -> tuple[bytes, list[int]] | None:
    """``merge_sorted``'s records as a run for ``TableWriter.add_run``: (keys and values back to
    back, their lengths), so a compaction makes no object per record (``_blockc.merge_run``).
    ``keep_ops``: the newest record of each key as it is, op byte and tombstones kept (runs
    merged into one run); else the ops applied as ``merge_sorted`` does.  None when not
    compiled or where ``merge_sorted`` declines."""
    return blockc.merge_run(parts, keep_ops) if blockc is not None else None


def merge_block(
    raw: bytes, n: int, parts: list[tuple[list[bytes], list[bytes], bool]], keep_ops: bool
) -> tuple[bytes, list[int]] | None:
    """``merge_run(parts + [(keys, values, False)], keep_ops)`` where keys, values are the ``n``
    records of the decoded block ``raw`` (a base block, the oldest level): a compaction's base
    records are read in place and never become objects (``_blockc.merge_block``).  None when
    not compiled, where ``merge_run`` declines, or for a block whose offsets or key order are
    unsound (the caller then splits the block and runs the list path, which names faults)."""
    return blockc.merge_block(raw, n, parts, keep_ops) if blockc is not None else None


def merge_segs(raw: bytes, n: int, segs: list[tuple[bytes, int, int, int]]) -> tuple[bytes, list[int]] | None:
    """``merge_block(raw, n, parts, False)`` where the runs' records are read in place as well:
    ``segs`` are (decoded run block, its count, j0, j1), records j0..j1-1 of the block, newest
    run first, one run's segments in key order (``_blockc.merge_segs``).  A compaction's runs
    then make no object per record either.  None when not compiled, or for a base block or a
    segment whose offsets, key order or op bytes are unsound (the caller splits the blocks and
    runs the list path, which names faults)."""
    return blockc.merge_segs(raw, n, segs) if blockc is not None else None


def range_diff(
    ok: list[bytes], ov: list[bytes], new, lo: bytes, hi: bytes, out_k: list[bytes], out_v: list[bytes]
) -> int | None:
    """One range's step of ``LevelCursor.merge_ranges`` in C (``_blockc.diff``): the changes
    from the stored records (``ok``, ``ov``) to ``new`` (a ``Splice`` or the range's new (keys,
    values)) appended to ``out_k``, ``out_v`` as delta records; returns the change in live
    records.  None, nothing appended, when not compiled or for input it declines (keys out of
    order or range: the Python code names them)."""
    return blockc.diff(ok, ov, new, lo, hi, out_k, out_v) if blockc is not None else None


def make_links(
    keys: list[bytes], vals: list[bytes], plen: int, url: str, cls: type, fixed: int, out: int
) -> list | None:
    """``reader._links`` in C (``_blockc.links``): ``cls(key[plen:], url, anchor, domain_id,
    flags & out != 0)`` of each LinksByURL record.  None when not compiled, or when a value is
    shorter than ``fixed`` (the Python code names the record)."""
    return blockc.links(keys, vals, plen, url, cls, fixed, out) if blockc is not None else None


def decode_block(data: bytes, where: str) -> tuple[list[bytes], list[bytes]]:
    """Inverse of encode_block: the block's (keys, values)."""
    return unpack_block(data, where).split()


def block_crc_ok(data: bytes | memoryview) -> bool:
    """Whether a whole stored block's CRC matches its body and codec byte."""
    if len(data) < BLOCK_TRAILER_SIZE:
        return False
    body = data[:-BLOCK_TRAILER_SIZE]
    codec, crc = TRAILER.unpack_from(data, len(body))
    # The CRC covers the body then the codec byte: continued over it rather than over a copy.
    return crc32(_CODEC_BYTE[codec], crc32(body)) == crc


def check_block_crc(data: bytes | memoryview, where: str) -> None:
    if len(data) < BLOCK_TRAILER_SIZE:
        raise CorruptionError(f"{where}: truncated block")
    if not block_crc_ok(data):
        raise CorruptionError(f"{where}: checksum mismatch")
