"""The bulk load from columns: ``bulk_load``'s tables built a block at a time (docs/api.md).

``bulk_load_arrow(db, pages, links)`` commits exactly the generation ``bulk_load`` commits for
the same pages and links (the first page for a url wins, the last link for a (from_id, url)
key wins, links from an md5 no page carries and links to a url with no page are dropped,
``target_has_outlink`` is recomputed, anchors are cut to ``anchor_max``), but never makes a
Python object per record: pages and links arrive as Arrow columns, every join is a hash
lookup (``index_in``) that turns a link's url and from_id into the rank of its page in url
order and of its md5 in md5 order, both link tables are sorts of those integer ranks (numpy),
and blocks are cut and encoded from the records' fields (``_blockc.gather_blocks`` copies
them without the GIL; ``pyarrow.compute`` joins them without the compiled codec), the same
bytes ``TableWriter`` writes record by record.  The page tables are written by a thread while
the links are read, the two link tables by two threads (copies, compression and checksums
release the GIL).

Input it cannot vouch for with vectorized checks (a url with a space, a NaN score, ...)
raises ``NotColumnar`` before anything is written; the caller then loads the same input
with ``bulk_load``, which accepts it or names the bad record.

Memory: the pages (about 3 times their encoded size) and about 40 bytes a link (two int32
ranks, the anchor's offset, the sort's arrays); the anchors wait in a file under the db's
``tmp/`` (the page cache, not this process).  Design and reasons: docs/design.md §4.2.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from webdb.core.due import index_sections
from webdb.core.manifest import Manifest
from webdb.core.sections import Reservoir, Sections, section_path
from webdb.core.settings import Settings
from webdb.tables import block as block_codec
from webdb.tables.block import CODECS, seal_block
from webdb.tables.pagecodec import LINK_OUT, PAGE
from webdb.tables.records import Status
from webdb.tools.bulk import SectionFiles, load_manifest, locked_load
from webdb.util import faults

__all__ = ["NotColumnar", "bulk_load_arrow", "PAGE_COLUMNS", "LINK_COLUMNS", "md5_array", "tsv", "unhex16"]

# The columns bulk_load_arrow reads (``meta`` and ``domain_id`` may be absent: {} and 0).
PAGE_COLUMNS = (
    "url",
    "md5",
    "status",
    "fetch_time",
    "next_fetch",
    "retries",
    "fetch_interval",
    "num_outlinks",
    "score",
    "next_score",
    "meta",
)
LINK_COLUMNS = ("from_id", "url", "anchor", "domain_id")

# The page value's fixed part as a packed numpy record: the same bytes as PAGE.pack.
_PAGE_DT = np.dtype(
    [
        ("md5", "V16"),
        ("status", "u1"),
        ("fetch_time", "<i8"),
        ("next_fetch", "<i8"),
        ("retries", "<u2"),
        ("fetch_interval", "<u4"),
        ("num_outlinks", "<u4"),
        ("score", "<f8"),
        ("next_score", "<f8"),
    ]
)
assert _PAGE_DT.itemsize == PAGE.size
_STATUSES = np.array(sorted(int(x) for x in Status))
_INT_RANGES = {
    "status": (0, 255),  # and a Status value (checked below)
    "fetch_time": (-(2**63), 2**63 - 1),
    "next_fetch": (-(2**63), 2**63 - 1),
    "retries": (0, 0xFFFF),
    "fetch_interval": (0, 0xFFFFFFFF),
    "num_outlinks": (0, 0xFFFFFFFF),
}
_LOOKUP_ROWS = 1_000_000  # link urls looked up at a time: each lookup builds a hash table of the pages
_READ_BYTES = 32 << 20  # bytes of a streamed TSV parsed at a time (in parallel blocks of 4 MiB)
_BATCH = 1 << 16  # records built and encoded at a time: bounds the memory of the write phase
_SEP = pa.scalar(b"", pa.large_binary())  # binary_join_element_wise: no separator
try:  # glibc's malloc_trim (_release); absent elsewhere
    _malloc_trim: Any = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None
_c = block_codec.blockc  # the compiled codec (gather_blocks, hash_values), None under WEBDB_PURE_PYTHON=1


class NotColumnar(ValueError):
    """Input that the columnar checks do not vouch for; nothing was written.  Load the same
    input with ``bulk_load``: it accepts it or raises BadInput naming the record."""


def bulk_load_arrow(
    db_or_path: Any,
    pages: pa.Table | Iterable[pa.Table],
    links: Iterable[pa.Table | pa.RecordBatch] = (),
    *,
    progress: Callable[[str], None] | None = None,
    **overrides: Any,
) -> Manifest:
    """Load an empty db from Arrow columns and commit one generation; returns its manifest.

    ``pages`` has PAGE_COLUMNS (url: string, md5: fixed_size_binary(16), integers, scores:
    float64, meta: the JSON bytes ``Page.encode_value`` appends, or absent), or yields tables
    of them (the load then holds them only while it encodes the pages); ``links`` yields
    tables with LINK_COLUMNS (from_id: fixed_size_binary(16), url and anchor: string,
    domain_id: int64 or absent), in call order.  Equal to ``bulk_load`` of the same pages and
    links (module doc).  Raises NotColumnar before writing anything for input its vectorized
    checks do not vouch for, BadInput for a db holding pages.  ``progress`` gets one line per
    phase.  Cost: O((P + L) log L) in C; memory about 40 bytes a link (module doc).
    """
    say = progress or (lambda _msg: None)
    given = [pages] if isinstance(pages, pa.Table) else pages

    def load(db, base: Manifest, s: Settings, tmp: str) -> Manifest:
        nonlocal given
        tables, given = list(given), None
        held = [pa.concat_tables(tables) if len(tables) != 1 else tables[0]]
        tables.clear()
        return _load(db, base, s, tmp, held, links, say)

    return locked_load(db_or_path, overrides, load)


# ---- checks ---------------------------------------------------------------------------------


def _check_urls(urls: pa.Array, max_url: int, what: str) -> None:
    """validate_url, conservatively: every url passes it if this returns."""
    if urls.null_count:
        raise NotColumnar(f"{what}: a url is missing")
    if len(urls) == 0:
        return
    if pc.max(pc.binary_length(urls)).as_py() > max_url:
        raise NotColumnar(f"{what}: a url is longer than {max_url} bytes")
    # "://" within the first 32 characters and not at the start: a byte index <= 29 is a
    # character index <= 29; anything else goes to validate_url.
    at = pc.find_substring(urls, "://")
    lo_hi = pc.min_max(at).as_py()
    if lo_hi["min"] < 1 or lo_hi["max"] > 29:
        raise NotColumnar(f"{what}: a url without a scheme in its first characters")
    offs = np.frombuffer(urls.buffers()[1], np.int32)
    data = np.frombuffer(urls.buffers()[2], np.uint8)[offs[urls.offset] : offs[urls.offset + len(urls)]]
    if len(data) and (_c.has_control(data) if _c is not None else data.min() <= 0x20 or (data == 0x7F).any()):
        raise NotColumnar(f"{what}: a url holds a control or space character")


def _column(t: pa.Table, name: str, typ: pa.DataType, what: str) -> pa.Array:
    if name not in t.column_names:
        raise NotColumnar(f"{what}: no column {name!r}")
    c = t.column(name)
    c = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
    if c.null_count:
        raise NotColumnar(f"{what}: column {name!r} has missing values")
    if c.type != typ:
        try:
            c = c.cast(typ)  # safe casts only: out of range raises
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise NotColumnar(f"{what}: column {name!r}: {e}") from None
    return c


def _np(a: pa.Array) -> np.ndarray:
    return a.to_numpy(zero_copy_only=False)


def _fixed_u8(a: pa.Array, width: int) -> np.ndarray:
    """A fixed_size_binary array's bytes as an (n, width) uint8 array (no copy)."""
    buf = np.frombuffer(a.buffers()[1], np.uint8)
    return buf[a.offset * width : (a.offset + len(a)) * width].reshape(len(a), width)


def _binary(u8: np.ndarray) -> pa.Array:
    """Rows of an (n, w) uint8 array as a binary array (one copy)."""
    n, w = u8.shape
    offs = np.arange(0, (n + 1) * w, w, dtype=np.int64)
    return pa.Array.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(np.ascontiguousarray(u8))]
    )


# ---- reading TSV -----------------------------------------------------------------------------


def unhex16(col: pa.Array) -> np.ndarray:
    """Cells of 32 hex digits (a string array) as an (n, 16) uint8 array; NotColumnar for
    any other cell (``bytes.fromhex`` then decides).  ``_blockc.unhex`` when compiled."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(col)
    if not n:
        return np.zeros((0, 16), np.uint8)
    if col.null_count or pc.min_max(pc.binary_length(col)).as_py() != {"min": 32, "max": 32}:
        raise NotColumnar("an md5 that is not 32 hex digits")
    start = int(np.frombuffer(col.buffers()[1], np.int32)[col.offset])
    if _c is not None:  # the same bytes or refusal, in C without the GIL
        raw = _c.unhex(memoryview(col.buffers()[2])[start : start + 32 * n])
        if raw is None:
            raise NotColumnar("an md5 that is not 32 hex digits")
        return np.frombuffer(raw, np.uint8).reshape(n, 16)
    try:
        # One call for the column: its cells are contiguous, 32 characters each.  fromhex skips
        # spaces between digit pairs: a space shows as a short result.
        raw = bytes.fromhex(memoryview(col.buffers()[2])[start : start + 32 * n].tobytes().decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise NotColumnar("an md5 that is not 32 hex digits") from None
    if len(raw) != 16 * n:
        raise NotColumnar("an md5 that is not 32 hex digits")
    return np.frombuffer(raw, np.uint8).reshape(n, 16)


def md5_array(u8: np.ndarray) -> pa.Array:
    """An (n, 16) uint8 array as the fixed_size_binary(16) column ``md5`` / ``from_id``."""
    return pa.Array.from_buffers(pa.binary(16), len(u8), [None, pa.py_buffer(np.ascontiguousarray(u8))])


def tsv(path: str, cols: list[str], types: dict, *, skip: int = 0, stream: bool = False):
    """A TSV file without quoting or escapes, as a table (or, with ``stream``, an iterator of
    tables of about 32 MiB of the file each, so memory stays bounded).  A line with too few or
    too many cells raises NotColumnar; a blank line is a row of empty cells (not skipped: the
    url and md5 checks refuse it), as for a reader that splits each line."""
    from pyarrow import csv

    def opts(block: int) -> dict:
        return dict(
            read_options=csv.ReadOptions(column_names=cols, block_size=block),
            parse_options=csv.ParseOptions(
                delimiter="\t", quote_char=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=csv.ConvertOptions(
                column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )

    def parse(data, block: int = 4 << 20) -> pa.Table:
        try:
            return csv.read_csv(pa.BufferReader(data), **opts(block))
        except pa.ArrowInvalid as e:
            raise NotColumnar(f"{path}: {e}") from None

    def lines() -> tuple[memoryview, int]:
        """The file mapped (page cache, not this process's memory) and where line ``skip``
        starts."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        at = 0
        for _ in range(skip):
            at = mm.find(b"\n", at) + 1 or size
        return memoryview(mm), at

    def windows():
        data, at = lines()
        size = len(data)
        while at < size:
            end = min(at + _READ_BYTES, size)
            # Whole lines only: up to the last newline of the window (a longer line, whole).
            cut = size if end == size else data.obj.rfind(b"\n", at, end) + 1
            if cut <= at:
                cut = data.obj.find(b"\n", end) + 1 or size
            yield data[at:cut]
            at = cut

    def chunks():
        # One window parsed ahead, in a thread (the parser releases the GIL): the caller's work
        # on a chunk overlaps the parsing of the next one.
        with ThreadPoolExecutor(1) as ahead:
            nxt = None
            try:
                for w in windows():
                    cur, nxt = nxt, ahead.submit(parse, w)
                    if cur is not None:
                        yield cur.result()
                if nxt is not None:
                    yield nxt.result()
            finally:
                if nxt is not None:
                    nxt.cancel()

    if stream:
        return chunks()
    data, at = lines()
    if at >= len(data):
        return pa.table({c: pa.array([], t) for c, t in types.items()})
    return parse(data[at:], 16 << 20)


# ---- url lookups ----------------------------------------------------------------------------

_MUL = np.uint64(0x9E3779B97F4A7C15)
_TAIL = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [2**64 - 1], np.uint64)  # low bytes kept


def _url_hashes(urls: pa.Array) -> np.ndarray:
    """A 64-bit hash of each value's bytes, 8 bytes at a time (multiply-xor, then a final mix);
    ``_blockc.hash_values`` when compiled (the same hashes)."""
    n = len(urls)
    big = urls.type in (pa.large_binary(), pa.large_string())
    offs = np.frombuffer(urls.buffers()[1], np.int64 if big else np.int32)[urls.offset : urls.offset + n + 1]
    offs = offs.astype(np.int64)
    c_hash = getattr(_c, "hash_values", None)
    if c_hash is not None and n:  # the same hashes, one pass in C without the GIL
        return np.frombuffer(c_hash(urls.buffers()[2] or b"", offs), np.uint64)
    lens = np.diff(offs)
    h = lens.astype(np.uint64) * _MUL
    if not n:
        return h
    pad = np.zeros(int(offs[-1] - offs[0]) + 8, np.uint8)
    if urls.buffers()[2] is not None:
        pad[:-8] = np.frombuffer(urls.buffers()[2], np.uint8)[offs[0] : offs[-1]]
    # The 8 bytes at any offset, as one little-endian word (a view with a 1-byte stride).
    word = np.ndarray(shape=(len(pad) - 7,), dtype="<u8", buffer=pad, strides=(1,))
    starts = offs[:-1] - offs[0]
    live = np.flatnonzero(lens > 0)
    k = 0
    while len(live):
        w = word[starts[live] + k] & _TAIL[np.minimum(lens[live] - k, 8)]
        h[live] = (h[live] ^ w) * _MUL
        k += 8
        live = live[lens[live] > k]
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    return h


class _UrlIndex:
    """url -> rank in the pages' sorted urls: their hashes sorted and bucketed by the top bits
    (about one page a bucket), every hit confirmed by comparing the bytes.  Built once (a
    pyarrow ``index_in`` builds its table at every call).  ``unique`` is False when two pages'
    hashes are equal: then it cannot be used."""

    def __init__(self, url_sorted: pa.Array):
        self.urls = url_sorted
        h = _url_hashes(url_sorted)
        self.order = np.argsort(h)
        self.sh = h[self.order]
        self.unique = len(h) < 2 or not bool((self.sh[1:] == self.sh[:-1]).any())
        bits = max(1, len(h).bit_length())
        self.shift = np.uint64(64 - bits)
        self.starts = np.searchsorted(self.sh >> self.shift, np.arange(2**bits + 1, dtype=np.uint64))
        self.most = int(np.diff(self.starts).max()) if len(h) else 0

    def find(self, urls: pa.Array) -> np.ndarray:
        """The rank of each url's page, -1 for a url no page has (int32)."""
        n = len(urls)
        out = np.full(n, -1, np.int32)
        if not n or not len(self.sh):
            return out
        hq = _url_hashes(urls)
        lo = self.starts[(hq >> self.shift).astype(np.int64)]
        span = self.starts[(hq >> self.shift).astype(np.int64) + 1] - lo
        pos = np.full(n, -1, np.int64)
        for j in range(self.most):
            rows = np.flatnonzero(span > j)
            if not len(rows):
                break
            hit = rows[self.sh[lo[rows] + j] == hq[rows]]
            pos[hit] = lo[hit] + j
        rows = np.flatnonzero(pos >= 0)
        cand = self.order[pos[rows]]
        mine = urls if len(rows) == n else urls.take(pa.array(rows))  # usually every url hits
        same = _np(pc.equal(self.urls.take(pa.array(cand)), mine))
        out[rows[same]] = cand[same]
        return out


# ---- blocks ---------------------------------------------------------------------------------


# A field of every record of a batch, as ``_blockc.gather_blocks`` takes it: (data, offs, width,
# idx).  Record i's bytes are data[offs[r]:offs[r+1]] (offs: int64), or data[r*w:(r+1)*w] without
# offs, for r = idx[i] (int64), or r = i without idx.
Part = tuple[Any, "np.ndarray | None", int, "np.ndarray | None"]


def _var(a: pa.Array, idx: np.ndarray | None = None) -> Part:
    """The part of a binary or string array's values (idx: the row of each record)."""
    big = a.type in (pa.large_binary(), pa.large_string())
    offs = np.frombuffer(a.buffers()[1], np.int64 if big else np.int32)[a.offset : a.offset + len(a) + 1]
    data = a.buffers()[2]
    return (data if data is not None else b"", offs.astype(np.int64, copy=False), 0, _idx(idx))


def _fixed(u8: np.ndarray, idx: np.ndarray | None = None) -> Part:
    """The part of an (n, w) uint8 array's rows (a contiguous array: not copied)."""
    return (np.ascontiguousarray(u8), None, u8.shape[1], _idx(idx))


def _idx(idx: np.ndarray | None) -> np.ndarray | None:
    return None if idx is None else np.ascontiguousarray(idx, np.int64)


def _part_lens(part: Part, n: int) -> np.ndarray:
    data, offs, w, idx = part
    if offs is None:
        return np.full(n, w, np.int64)
    return offs[1 : n + 1] - offs[:n] if idx is None else offs[idx + 1] - offs[idx]


def _part_array(part: Part, n: int) -> pa.Array:
    """The part's bytes of records 0..n-1 as a binary array (the pure-Python path)."""
    data, offs, w, idx = part
    if offs is None:
        rows = np.frombuffer(data, np.uint8).reshape(-1, w)
        return _binary(rows[:n] if idx is None else rows[idx])
    a = pa.Array.from_buffers(pa.large_binary(), len(offs) - 1, [None, pa.py_buffer(offs), pa.py_buffer(data)])
    return a.slice(0, n) if idx is None else a.take(pa.array(idx))


def _gather_py(parts: list[Part], klen: np.ndarray, ends: np.ndarray) -> list[bytes]:
    """``_blockc.gather_blocks`` in pyarrow and numpy: the same blocks."""
    n = int(ends[-1]) if len(ends) else 0
    rec = pc.binary_join_element_wise(*(_part_array(p, n) for p in parts), _SEP) if len(parts) > 1 else None
    rec = _part_array(parts[0], n) if rec is None else rec
    offs = np.frombuffer(rec.buffers()[1], np.int64)[rec.offset : rec.offset + n + 1]
    data = memoryview(rec.buffers()[2] or b"")
    out, s = [], 0
    for e in ends.tolist():  # records s..e-1
        first = offs[s]
        rel_k = (offs[s:e] + klen[s:e] - first).astype("<u4")
        rel_r = (offs[s + 1 : e + 1] - first).astype("<u4")
        out.append(
            b"".join((data[int(first) : int(offs[e])], rel_k.tobytes(), rel_r.tobytes(), (e - s).to_bytes(4, "little")))
        )
        s = e
    return out


def _gatherer() -> Callable[[list[Part], np.ndarray, np.ndarray], list[bytes]]:
    """The compiled ``gather_blocks`` (the copies without the GIL: the two writer threads run at
    once), or its pyarrow equivalent under WEBDB_PURE_PYTHON=1 or without the extension."""
    return getattr(_c, "gather_blocks", None) or _gather_py


class _Out(SectionFiles):
    """One table's files: sorted records are split at the section bounds, cut into blocks by
    TableWriter's rule and handed to it encoded."""

    def __init__(self, root: str, gen: int, table: str, s: Settings, tables: list[dict]):
        super().__init__(root, gen, table, s, tables)
        self.bs = int(s.block_size)
        self.codec = CODECS[s.codec]
        self.gather = _gatherer()

    def write(self, j: int, parts: list[Part], klen: np.ndarray, final: bool) -> int:
        """Append whole blocks of records (their parts and key lengths) to section j; returns
        how many records they hold (all of them if ``final``)."""
        return _encode(self.writer(j), parts, klen, self.bs, self.codec, final, self.gather)


def _encode(w, parts: list[Part], klen: np.ndarray, bs: int, codec: int, final: bool, gather) -> int:
    """Cut the records into blocks where the running size (record + 8 bytes of offsets) first
    reaches ``bs`` (TableWriter.add's rule), encode them as encode_block does and append
    them; returns how many records the blocks hold (the rest wait for more unless ``final``)."""
    n = len(klen)
    if n == 0:
        return 0
    rlen = sum(_part_lens(p, n) for p in parts)
    cum = np.cumsum(rlen + 8)
    # The cuts first (one search a block), then the blocks in one call.
    ends: list[int] = []
    s, before = 0, 0
    while s < n:
        e = int(np.searchsorted(cum, before + bs, "left"))
        if e >= n:
            if not final:
                break
            e = n - 1
        ends.append(e + 1)
        before = int(cum[e])
        s = e + 1
    if not ends:
        return 0
    klen = np.ascontiguousarray(klen, np.int64)
    s = 0
    for e, raw in zip(ends, gather(parts, klen, np.array(ends, np.int64))):
        last = len(raw) - 8 * (e - s) - 4 - int(rlen[e - 1])  # where the block's last record starts
        w.add_raw_block(
            seal_block(raw, w.codec, w.piece_bytes), raw[: int(klen[s])], raw[last : last + int(klen[e - 1])], e - s
        )
        s = e
    return ends[-1]


class _Halted(Exception):
    """The load failed in another thread: this one stops writing."""


def _write_sorted(
    out: _Out,
    n: int,
    cuts: list[int],
    make: Callable[[int, int], tuple[list[Part], np.ndarray]],
    halt: threading.Event | None = None,
) -> None:
    """Records 0..n-1 (their parts made by ``make(lo, hi)`` a batch at a time), section j
    holding cuts[j]..cuts[j+1]-1.  A batch's records after its last whole block are made again
    at the start of the next batch (at most a block's worth).  Raises _Halted once ``halt`` is
    set."""
    bounds = [0, *cuts, n]
    for j in range(len(bounds) - 1):
        a, hi = bounds[j], bounds[j + 1]
        size = _BATCH
        while a < hi:
            if halt is not None and halt.is_set():
                raise _Halted
            b = min(hi, a + size)
            done = out.write(j, *make(a, b), final=b == hi)
            size = _BATCH if done else 2 * size  # a batch smaller than a block: take more
            a += done


# ---- the load -------------------------------------------------------------------------------


def _load(
    db, base: Manifest, s: Settings, tmp: str, held: list, links: Iterable, say: Callable[[str], None]
) -> Manifest:
    """``held`` holds the pages table: emptied once the page columns are encoded."""
    gen = base.generation + 1
    secs = base.sections
    k = secs.k
    max_url, amax = int(s.max_url_bytes), int(s.anchor_max)
    phases: dict[str, float] = {}
    t_lap = [time.monotonic()]

    def lap(name: str, msg: str) -> None:
        t = time.monotonic()
        phases[name] = round(t - t_lap[0], 3)
        t_lap[0] = t
        say(f"{name}: {msg} ({phases[name]} s)")

    # ---- pages: checks, the first page of each url, values ------------------------------------
    what = "pages"
    pages = held.pop()
    urls = _column(pages, "url", pa.string(), what)
    n_pages = len(urls)
    _check_urls(urls, max_url, what)
    md5 = _column(pages, "md5", pa.binary(16), what)
    ints = {}
    for c, (lo, hi) in _INT_RANGES.items():
        a = _column(pages, c, pa.int64(), what)
        if n_pages:
            mm = pc.min_max(a).as_py()
            if mm["min"] < lo or mm["max"] > hi:
                raise NotColumnar(f"{what}: {c} out of {lo}..{hi}")
        ints[c] = _np(a)
    if n_pages and not np.isin(ints["status"], _STATUSES).all():
        raise NotColumnar(f"{what}: a status that is not a Status")
    scores = {}
    for c in ("score", "next_score"):
        a = _column(pages, c, pa.float64(), what)
        if n_pages and pc.any(pc.is_nan(a)).as_py():
            raise NotColumnar(f"{what}: {c} is NaN")
        scores[c] = _np(a)
    meta = _column(pages, "meta", pa.binary(), what) if "meta" in pages.column_names else None
    if meta is not None and (not n_pages or pc.max(pc.binary_length(meta)).as_py() == 0):
        meta = None
    if not secs.ready:
        secs = Sections(k, Sections.choose(_reservoir(urls, int(s.breakpoint_sample)), k))
    ubin = urls.cast(pa.binary())
    order = pc.sort_indices(ubin)  # stable: the first call for a url sorts first
    su = ubin.take(order)
    if n_pages > 1:
        first = np.concatenate([[True], ~_np(pc.equal(su.slice(1), su.slice(0, n_pages - 1)))])
        keep = _np(order)[first]
    else:
        keep = _np(order)
    url_sorted = ubin.take(pa.array(keep))  # the stored pages' urls, in key order
    P = len(keep)
    fixed = np.zeros(P, _PAGE_DT)
    raw = fixed.view(np.uint8).reshape(P, PAGE.size)
    md5_u8 = _fixed_u8(md5, 16)[keep]
    raw[:, :16] = md5_u8
    for c in _INT_RANGES:
        fixed[c] = ints[c][keep]
    for c in scores:
        fixed[c] = scores[c][keep]
    values = _binary(raw)
    if meta is not None:
        values = pc.binary_join_element_wise(values, meta.take(pa.array(keep)).cast(pa.large_binary()), _SEP)
    has_out = (fixed["num_outlinks"] > 0).astype(np.uint8) * LINK_OUT
    status_b = fixed["status"].copy()
    del su, order, ints, scores, fixed, raw, urls, ubin, meta, md5, pages
    _release()
    lap("read_pages", f"{n_pages} page rows, {P} pages")

    url_bounds = secs.key_bounds(True)
    url_cuts = [_bisect(url_sorted, b) for b in url_bounds]  # first page rank of sections 1..k-1
    # md5 order: a stable sort by md5 of the url-ordered pages is (md5, url) order.
    hi = md5_u8[:, :8].copy().view(">u8").ravel().astype(np.uint64)
    lo = md5_u8[:, 8:].copy().view(">u8").ravel().astype(np.uint64)
    morder = np.lexsort((lo, hi))
    hs, ls = hi[morder], lo[morder]
    new = np.ones(P, bool)
    if P > 1:
        new[1:] = (hs[1:] != hs[:-1]) | (ls[1:] != ls[:-1])
    md5_set_u8 = md5_u8[morder][new]  # the md5s pages carry, sorted, once each
    M = len(md5_set_u8)
    md5_set = pa.Array.from_buffers(pa.binary(16), M, [None, pa.py_buffer(np.ascontiguousarray(md5_set_u8))])
    md5_hi_set = hs[new]
    md5_cuts_set = [
        int(np.searchsorted(md5_hi_set, np.uint64(int.from_bytes(b, "big")), "left")) for b in _md5_b8(secs)
    ]
    md5_cuts_pages = [int(np.searchsorted(hs, np.uint64(int.from_bytes(b, "big")), "left")) for b in _md5_b8(secs)]

    for j in range(k):
        os.makedirs(section_path(db.path, j), exist_ok=True)
    tables: list[dict] = [{} for _ in range(k)]
    status: list[dict] = [{} for _ in range(k)]
    outs = {
        t: _Out(db.path, gen, t, s, tables) for t in ("pages_by_url", "pages_by_md5", "links_by_url", "links_by_md5")
    }
    ubytes = url_sorted  # (the parts take int32 offsets as they are: no large_binary copy)
    ulen = _np(pc.binary_length(ubytes)).astype(np.int64)

    upart = _var(ubytes)
    # What only the page tables need, dropped once they are written.
    pg = {"values": values, "md5": md5_u8, "morder": morder, "status": status_b}
    del values, md5_u8, morder, status_b
    md5_set_rows = md5_set_u8.reshape(-1, 16)
    out_rows = has_out.reshape(-1, 1)
    zero9 = np.zeros((1, 9), np.uint8)  # the \0 before a link's md5, or a domain_id of 0

    def pages_tables() -> None:
        values, md5_rows, morder, status_b = pg["values"], pg["md5"], pg["morder"], pg["status"]
        vpart = _var(values)

        def pbu(a: int, b: int):
            return [_var(ubytes.slice(a, b - a)), _var(values.slice(a, b - a))], ulen[a:b]

        _write_sorted(outs["pages_by_url"], P, url_cuts, pbu, halt)
        bounds = [0, *url_cuts, P]
        for j in range(len(bounds) - 1):  # no url breakpoints yet (no page): section 0 only
            c = np.bincount(status_b[bounds[j] : bounds[j + 1]], minlength=4)
            if bounds[j + 1] > bounds[j]:
                status[j] = {str(i): int(x) for i, x in enumerate(c) if x}
        faults.point("bulk.after_pages_by_url")

        def pbm(a: int, b: int):
            idx = morder[a:b].astype(np.int64)
            return [_fixed(md5_rows, idx), (*upart[:3], idx), (*vpart[:3], idx)], 16 + ulen[idx]

        _write_sorted(outs["pages_by_md5"], P, md5_cuts_pages, pbm, halt)
        faults.point("bulk.after_pages_by_md5")

    # The page tables need no link: written while the links are read (the parser and the url
    # lookups leave a core idle part of the time).
    halt = threading.Event()
    pages_pool = ThreadPoolExecutor(1)
    f_pages = pages_pool.submit(_in_order, [pages_tables], phases)
    try:
        # ---- links: checks, ranks of their pages and md5s; the others are dropped -----------------
        # md5 -> rank: a binary search of the top 64 bits (the lower ones confirm); if two page md5s
        # share their top 64 bits, a hash lookup instead.
        md5_lo_set = ls[new]
        del hi, lo, hs, ls
        by_hi = M < 2 or bool(np.all(md5_hi_set[1:] != md5_hi_set[:-1]))

        def md5_ranks(fid: pa.Array) -> np.ndarray:
            if not by_hi:
                return _np(pc.fill_null(pc.index_in(fid, value_set=md5_set), -1)).astype(np.int32)
            u8 = _fixed_u8(fid, 16)
            h = u8[:, :8].copy().view(">u8").ravel().astype(np.uint64)
            lw = u8[:, 8:].copy().view(">u8").ravel().astype(np.uint64)
            if not M or not len(h):
                return np.full(len(h), -1, np.int32)
            # A source's links usually come together: search once per run of equal md5s.
            head = np.ones(len(h), bool)
            head[1:] = (h[1:] != h[:-1]) | (lw[1:] != lw[:-1])
            heads = np.flatnonzero(head)
            h, lw = h[heads], lw[heads]
            pos = np.minimum(np.searchsorted(md5_hi_set, h), M - 1)
            r = np.where((md5_hi_set[pos] == h) & (md5_lo_set[pos] == lw), pos, -1).astype(np.int32)
            return np.repeat(r, np.diff(np.append(heads, len(head))))

        os.makedirs(tmp, exist_ok=True)
        anchor_path = os.path.join(tmp, "anchors")
        af = open(anchor_path, "wb")
        us, ms, alens, doms = [], [], [], []
        n_links = 0
        any_dom = False
        group: list[tuple] = []  # chunks whose urls are looked up in one call (a lookup builds a hash table)

        def run_group(group: list[tuple]) -> None:
            nonlocal any_dom
            if url_index is not None:
                u_all = np.concatenate([url_index.find(g[0]) for g in group])
            else:
                # One call over the chunks: the hash table of the pages' urls is built once.
                found = pc.index_in(pa.chunked_array([g[0] for g in group], pa.binary()), value_set=url_sorted)
                u_all = _np(pc.fill_null(found, -1)).astype(np.int32)
            at = 0
            for _lurl, m, anc, dom in group:
                u = u_all[at : at + len(m)]
                at += len(m)
                ok = (u >= 0) & (m >= 0)
                if not ok.all():
                    okp = pa.array(ok)
                    u, m, anc = u[ok], m[ok], anc.filter(okp)
                    dom = None if dom is None else dom.filter(okp)
                us.append(u)
                ms.append(m)
                if len(anc) and pc.max(pc.binary_length(anc)).as_py() > amax:  # bytes >= characters
                    anc = pc.utf8_slice_codeunits(anc, 0, amax)
                offs = np.frombuffer(anc.buffers()[1], np.int32)[anc.offset : anc.offset + len(anc) + 1]
                af.write(memoryview(anc.buffers()[2])[int(offs[0]) : int(offs[-1])])
                alens.append(np.diff(offs))
                d = np.zeros(len(u), np.int64) if dom is None else _np(dom)
                any_dom = any_dom or bool(d.any())
                doms.append(None if dom is None else d)

        url_index = _UrlIndex(url_sorted)
        if not url_index.unique:
            url_index = None  # two pages' urls share a hash: pyarrow's lookups instead
        rows = 0
        pool = ThreadPoolExecutor(1)  # lookups of one group while the next is parsed
        pending = None

        def lookup_group() -> None:
            nonlocal pending, group
            if pending is not None:
                pending.result()
            batch, group = group, []
            pending = pool.submit(run_group, batch)

        try:
            for t in links:
                if isinstance(t, pa.RecordBatch):
                    t = pa.Table.from_batches([t])
                what = f"links {n_links + 1}..{n_links + t.num_rows}"
                lurl = _column(t, "url", pa.string(), what)
                _check_urls(lurl, max_url, what)
                fid = _column(t, "from_id", pa.binary(16), what)
                anc = _column(t, "anchor", pa.string(), what)
                dom = _column(t, "domain_id", pa.int64(), what) if "domain_id" in t.column_names else None
                n_links += t.num_rows
                group.append((lurl.cast(pa.binary()), md5_ranks(fid), anc, dom))
                rows += t.num_rows
                if rows >= (_LOOKUP_ROWS if url_index is None else 1):
                    lookup_group()
                    rows = 0
            if group:
                lookup_group()
            if pending is not None:
                pending.result()
        finally:
            pool.shutdown()  # after a failure too: no thread writes into tmp once this returns
            af.close()
        url_index = None  # its tables are not needed any more
        dom_all = None
        if any_dom:
            dom_all = np.concatenate([np.zeros(len(u), np.int64) if d is None else d for u, d in zip(us, doms)])
        doms.clear()
        # The chunks' arrays moved into whole-load arrays one chunk at a time, each freed once
        # copied: never all of them twice.
        n_kept = sum(len(u) for u in us)
        lu, lm = np.empty(n_kept, np.int32), np.empty(n_kept, np.int32)
        aoffs = np.zeros(n_kept + 1, np.int64)
        at = 0
        for i in range(len(us)):
            u, m, al = us[i], ms[i], alens[i]
            us[i] = ms[i] = alens[i] = None
            e = at + len(u)
            lu[at:e], lm[at:e] = u, m
            np.cumsum(al, dtype=np.int64, out=aoffs[at + 1 : e + 1])
            aoffs[at + 1 : e + 1] += aoffs[at]
            at = e
        u = m = al = None
        us.clear()
        ms.clear()
        alens.clear()
        adata = np.memmap(anchor_path, np.uint8, "r") if aoffs[-1] else np.zeros(0, np.uint8)
        # The anchors stay in the file (the page cache), out of the process's own memory.
        anchor = pa.Array.from_buffers(pa.large_binary(), len(lu), [None, pa.py_buffer(aoffs), pa.py_buffer(adata)])
        _release()  # the parser's buffers and the chunks' arrays, before the sorts
        faults.point("bulk.after_read")
        lap("read_links", f"{n_links} link rows")
        # The page tables were written while the links were read (at 1M pages, in about a third
        # of the time): their columns go before the sorts.
        f_pages.result()
        pages_pool.shutdown()
        pg.clear()

        dom_rows = None if dom_all is None else dom_all.astype("<i8", copy=False).view(np.uint8).reshape(-1, 8)
        # ---- the link keys, last call wins: sort (md5 rank, url rank) stably, keep the last --
        key = lm.astype(np.int64)
        key *= max(P, 1)
        key += lu
        om = _last_of_runs(key, max(M, 1) * max(P, 1))  # links in links_by_md5 order (key consumed)
        del key
        _release()
        lap("sort_links", f"{len(om)} links kept")

        def link_value(sel: np.ndarray, ur: np.ndarray) -> list[Part]:
            """domain_id (i64 LE), flags, anchor."""
            dom = _fixed(zero9[:, :8], np.zeros(len(sel), np.int64)) if dom_rows is None else _fixed(dom_rows, sel)
            return [dom, _fixed(out_rows, ur), _var(anchor, sel)]

        def links_by_md5() -> None:
            cuts = [_first_at_least(lm, om, c) for c in md5_cuts_set]

            def make(a: int, b: int):
                sel = om[a:b].astype(np.int64)
                u_ = lu[sel].astype(np.int64)
                return [_fixed(md5_set_rows, lm[sel]), (*upart[:3], u_), *link_value(sel, u_)], 16 + ulen[u_]

            _write_sorted(outs["links_by_md5"], len(om), cuts, make)

        def links_by_url() -> None:
            # (md5, url) order sorted stably by url is (url, md5) order.
            ou = om[_stable_argsort(lu[om], max(P, 1))]
            cuts = [_first_at_least(lu, ou, c) for c in url_cuts]

            def make(a: int, b: int):
                sel = ou[a:b].astype(np.int64)
                u_ = lu[sel].astype(np.int64)
                parts = [
                    (*upart[:3], u_),
                    _fixed(zero9[:, :1], np.zeros(b - a, np.int64)),
                    _fixed(md5_set_rows, lm[sel]),
                ]
                return parts + link_value(sel, u_), ulen[u_] + 17

            _write_sorted(outs["links_by_url"], len(ou), cuts, make)

        with ThreadPoolExecutor(2) as ex:
            f_url = ex.submit(_in_order, [links_by_url], phases)
            f_md5 = ex.submit(_in_order, [links_by_md5], phases)
            f_md5.result()
            f_url.result()
        faults.point("bulk.after_links_by_url")
        for out in outs.values():
            out.close()
        faults.point("bulk.after_links_by_md5")
        lap("write", "tables written")
    except BaseException:
        halt.set()
        pages_pool.shutdown()  # no thread writes into the tables' files once they are aborted
        for out in outs.values():
            out.abort()
        raise
    index_sections(db.path, gen, tables, s, tmp)
    faults.point("bulk.after_due_index")
    m = load_manifest(gen, base, secs, tables, status, n_pages, n_links, {"seconds": phases, "columnar": True})
    shutil.rmtree(tmp, ignore_errors=True)
    return m


def _release() -> None:
    """Give freed memory back to the system: Arrow's pool, and glibc's heaps, where thousands of
    chunk-sized arrays freed between live ones would otherwise stay resident (at 3M pages about
    a third of the load's peak)."""
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _in_order(fns: list[Callable[[], None]], seconds: dict) -> None:
    """Run ``fns`` one after the other, each one's time into ``seconds`` (the manifest's)."""
    for f in fns:
        t = time.monotonic()
        f()
        seconds[f"write.{f.__name__}"] = round(time.monotonic() - t, 3)


def _md5_b8(secs: Sections) -> list[bytes]:
    return [secs.md5_bounds(j) for j in range(1, secs.k)]


def _stable_argsort(key: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of keys in 0..bound-1.  When a key and its position
    fit in 64 bits, they are packed into one uint64 and sorted by numpy's default sort (SIMD
    on x86, ~3x faster than the stable merge sort at 11M links); the positions come out in
    stable order because they break the ties.  Else the merge sort."""
    n = len(key)
    bits = max(1, (n - 1).bit_length())
    if bound << bits > 1 << 64:
        return np.argsort(key, kind="stable")
    k = key.astype(np.uint64)
    _pack_positions(k, bits)
    k.sort()
    k &= np.uint64((1 << bits) - 1)
    return k.view(np.int64)


_STEP = 1 << 22  # elements of an L-long array handled at a time: no extra L-long temporary


def _pack_positions(k: np.ndarray, bits: int) -> None:
    """k = k << bits | position, in place (uint64), a slice at a time."""
    k <<= np.uint64(bits)
    for a in range(0, len(k), _STEP):
        b = min(len(k), a + _STEP)
        k[a:b] |= np.arange(a, b, dtype=np.uint64)


def _last_of_runs(key: np.ndarray, bound: int) -> np.ndarray:
    """The positions of ``np.argsort(key, kind="stable")`` that end a run of equal keys (the
    last call of each key), as int32 (int64 past 2^31 keys); keys in 0..bound-1, int64.  Sorts
    ``key``'s own buffer when key and position pack into 64 bits (``key`` is then consumed):
    one L-long array of uint64 and the bool marks, where an argsort and a gather of the sorted
    keys would hold three."""
    n = len(key)
    dt = np.int32 if n < 2**31 else np.int64
    if n == 0:
        return np.zeros(0, dt)
    bits = max(1, (n - 1).bit_length())
    last = np.ones(n, bool)
    if bound << bits > 1 << 64:
        o = np.argsort(key, kind="stable")
        for a in range(0, n - 1, _STEP):
            b = min(n - 1, a + _STEP)
            ks = key[o[a : b + 1]]
            last[a:b] = ks[1:] != ks[:-1]
        return o[last].astype(dt)
    k = key.view(np.uint64)
    _pack_positions(k, bits)
    k.sort()
    sh = np.uint64(bits)
    for a in range(0, n - 1, _STEP):
        b = min(n - 1, a + _STEP)
        last[a:b] = (k[a + 1 : b + 1] >> sh) != (k[a:b] >> sh)
    out = np.empty(int(np.count_nonzero(last)), dt)
    mask, at = np.uint64((1 << bits) - 1), 0
    for a in range(0, n, _STEP):
        b = min(n, a + _STEP)
        kept = k[a:b][last[a:b]] & mask
        out[at : at + len(kept)] = kept
        at += len(kept)
    return out


def _first_at_least(ranks: np.ndarray, order: np.ndarray, x: int) -> int:
    """First position p with ranks[order[p]] >= x (``ranks[order]`` is sorted)."""
    lo, hi = 0, len(order)
    while lo < hi:
        mid = (lo + hi) >> 1
        if ranks[order[mid]] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _bisect(sorted_bin: pa.Array, key: bytes) -> int:
    """Number of elements of a sorted binary array below ``key``."""
    lo, hi = 0, len(sorted_bin)
    while lo < hi:
        mid = (lo + hi) >> 1
        if sorted_bin[mid].as_py() < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _reservoir(urls: pa.Array, nsample: int) -> list[bytes]:
    """The writer's breakpoint sample: the same reservoir (seed, draws) over the page calls,
    drawn over their positions."""
    sample = Reservoir(nsample)
    for p in range(len(urls)):
        sample.add(p)
    idx = sample.items
    return [b.encode("utf-8") for b in urls.take(pa.array(idx, pa.int64())).to_pylist()] if idx else []
