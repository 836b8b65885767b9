"""The bulk load: the four tables of an empty db built by external sorts of columns (docs/api.md).

One loader for both inputs: ``bulk_load_arrow(db, pages, links)`` takes Arrow columns,
``bulk_load_records`` (``webdb.bulk_load``) takes Page and Link objects, checks each as the writer
checks it and turns them into columns.  Either commits exactly the generation of one writer batch
of the same calls (the first page for a url wins, the last link for a (from_id, url) key wins,
links from an md5 no page carries and links to a url with no page are dropped,
``target_has_outlink`` is recomputed, anchors are cut to ``anchor_max``), in the files
``TableWriter`` writes from those records, byte for byte, and never makes a Python object per
record: pages are sorted by url and by md5, links become the integer ranks of their target's
page and of their from_id's md5 (a hash index of the urls, a binary search of the md5s) and
are sorted by those ranks; every sort runs in runs that fit ``memory_mb``, spilled under the
db's ``tmp/`` and merged a window at a time (``_windows``); blocks are cut and encoded from the
records' fields (``_blockc.gather_blocks`` copies them without the GIL; ``pyarrow.compute``
joins them without the compiled codec).  The phases are ``_Load``'s methods.

Columns its vectorized checks cannot vouch for (a url with a space, a NaN score, ...) raise
``NotColumnar`` before any table is written (a bad link: before the link tables, the page tables
then removed); ``webdb import`` then reads the file as records, which names the bad one.

Memory: the runs and windows within ``memory_mb``, plus about 21 bytes a page (the url hash
index, whether a page has outlinks); everything else per page is a memory-mapped file under
``tmp/`` (the page cache, not this process).  Design and reasons: docs/design.md §4.2.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from webdb.core.due import index_sections
from webdb.core.manifest import Manifest, build, check_counts
from webdb.core.sections import Reservoir, Sections, section_path
from webdb.core.settings import Settings
from webdb.errors import BadInput
from webdb.tables import block as block_codec
from webdb.tables.block import CODECS, seal_block
from webdb.tables.format import TMP_DIR
from webdb.tables.pagecodec import LINK_OUT, PAGE
from webdb.tables.records import PAGE_FIELDS, Link, Page, Status, validate_link, validate_page, validate_url
from webdb.tools.sectionfiles import SectionFiles
from webdb.util import faults

__all__ = [
    "LINK_COLUMNS",
    "PAGE_COLUMNS",
    "NotColumnar",
    "bulk_load_arrow",
    "bulk_load_records",
    "load_manifest",
    "locked_load",
    "md5_array",
    "tsv",
    "unhex16",
]

# The columns bulk_load_arrow reads (``meta`` and ``domain_id`` may be absent: {} and 0).
PAGE_COLUMNS = PAGE_FIELDS
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
_READ_BYTES = 32 << 20  # bytes of a streamed TSV parsed at a time (in parallel blocks of 4 MiB)
_GATHER_BYTES = 16 << 20  # record bytes gathered into blocks at a time
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
    of them (the load then holds a run of them at a time); ``links`` yields
    tables with LINK_COLUMNS (from_id: fixed_size_binary(16), url and anchor: string,
    domain_id: int64 or absent), in call order.  Equal to ``bulk_load`` of the same pages and
    links (module doc).  Raises NotColumnar for input its vectorized checks do not vouch for
    (nothing committed), BadInput for a db holding pages.  ``progress`` gets one line per
    phase.  Cost: O((P + L) log L) in numpy, Arrow and C; memory within ``memory_mb`` plus
    about 21 bytes a page (module doc).
    """
    say = progress or (lambda _msg: None)
    given = [pages] if isinstance(pages, pa.Table) else pages

    def load(db, base: Manifest, s: Settings, tmp: str) -> Manifest:
        return _Load(db, base, s, tmp, say).run(given, links)

    return locked_load(db_or_path, overrides, load)


# ---- the load's frame: an empty db, its lock, the commit -----------------------------------


def _empty(base: Manifest) -> bool:
    return not any(t.get("records") for sec in base.tables for t in sec.values())


def locked_load(db_or_path: Any, overrides: dict, load: Callable[[Any, Manifest, Settings, str], Manifest]) -> Manifest:
    """Run ``load(db, base manifest, settings, tmp dir)`` under the db's lock on an empty db
    and commit the manifest it returns (bulk_load_arrow's and bulk_load's).
    Anything raised leaves the db as it was: the new generation's files are removed."""
    from webdb.core.db import WebDB, open_db

    db = db_or_path if isinstance(db_or_path, WebDB) else open_db(os.fspath(db_or_path))
    t0 = time.monotonic()
    s = db.settings.replace(**overrides)
    lock = db.lock().acquire()
    tmp = os.path.join(db.path, TMP_DIR, f"bulk{os.getpid()}")
    try:
        db.recover()
        base = db.manifest()
        if not _empty(base):
            raise BadInput(f"{db.path}: import needs an empty db; this one holds pages (generation {base.generation})")
        manifest = load(db, base, s, tmp)
        faults.point("bulk.before_commit")
        db.commit(manifest)
        db.recover()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            db.recover()  # the new generation's files, if any: the db stays as it was
        finally:
            lock.release()
        raise
    lock.release()
    manifest.seconds = time.monotonic() - t0
    return manifest


def load_manifest(
    gen: int, base: Manifest, secs: Sections, tables: list[dict], status: list, n_pages: int, n_links: int, bulk: dict
) -> Manifest:
    """The manifest of a bulk load's generation (no stages; ``bulk`` says how it was built),
    its counts checked against the tables written."""
    m = build(
        generation=gen,
        parent=base.generation,
        batch=f"{gen:08d}-import",
        sections=secs,
        tables=tables,
        status=status,
        edits={"pages": n_pages, "links": n_links},
        stages=[],
        bulk=bulk,
    )
    check_counts(m)
    return m


# ---- records: checked one by one, handed to the load as columns -------------------------------

_RECORD_ROWS = 1 << 16  # records turned into one Arrow table at a time
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_STATUS_SET = frozenset(int(s) for s in Status)


class _Checked:
    """A table of records that ``validate_url``/``validate_page``/``validate_link`` passed: the
    load skips its column checks (they are conservative and could refuse what those accept)."""

    __slots__ = ("table",)

    def __init__(self, table: pa.Table):
        self.table = table


def bulk_load_records(
    db_or_path: Any,
    pages: Iterable[Page],
    links: Iterable[Link],
    progress: Callable[[str], None] | None,
    overrides: dict,
) -> Manifest:
    """``webdb.bulk_load``: each record checked as the writer checks it (BadInput naming the
    first bad one; nothing is committed), turned into columns a table at a time and loaded as
    ``bulk_load_arrow`` loads columns."""
    say = progress or (lambda _msg: None)

    def load(db, base: Manifest, s: Settings, tmp: str) -> Manifest:
        max_url = int(s.max_url_bytes)
        job = _Load(db, base, s, tmp, say)
        job.input = "records"
        return job.run(_page_tables(pages, max_url), _link_tables(links, max_url))

    return locked_load(db_or_path, overrides, load)


def _page_tables(pages: Iterable[Page], max_url: int):
    """The pages as _Checked tables of url (string) and value (Page.encode_value)."""
    urls: list[str] = []
    values: list[bytes] = []
    for page in pages:
        if not isinstance(page, Page):
            raise BadInput(f"expected a webdb.Page, got {type(page).__name__}")
        validate_url(page.url, max_url)
        validate_page(page)
        if page.status not in _STATUS_SET:
            raise BadInput(f"page {page.url!r:.200} has unknown status {page.status!r}")
        urls.append(page.url)
        values.append(page.encode_value())
        if len(urls) >= _RECORD_ROWS:
            yield _Checked(pa.table({"url": pa.array(urls, pa.string()), "value": pa.array(values, pa.large_binary())}))
            urls, values = [], []
    if urls:
        yield _Checked(pa.table({"url": pa.array(urls, pa.string()), "value": pa.array(values, pa.large_binary())}))


def _link_tables(links: Iterable[Link], max_url: int):
    """The links as _Checked tables of LINK_COLUMNS."""
    cols: tuple[list, list, list, list] = ([], [], [], [])
    for link in links:
        if not isinstance(link, Link):
            raise BadInput(f"expected a webdb.Link, got {type(link).__name__}")
        validate_url(link.url, max_url)
        f, d, a = link.from_id, link.domain_id, link.anchor
        # The common case checked inline; anything else gets validate_link's message.
        if (
            type(f) is not bytes
            or len(f) != 16
            or type(d) is not int
            or not _I64_MIN <= d <= _I64_MAX
            or type(a) is not str
            or type(link.target_has_outlink) is not bool
            or not a.isascii()  # a lone surrogate: validate_link names the link
        ):
            validate_link(link)
        for c, v in zip(cols, (f, link.url, a, d)):
            c.append(v)
        if len(cols[0]) >= _RECORD_ROWS:
            yield _link_table(cols)
            cols = ([], [], [], [])
    if cols[0]:
        yield _link_table(cols)


def _link_table(cols: tuple[list, list, list, list]) -> _Checked:
    f, u, a, d = cols
    return _Checked(
        pa.table(
            {
                "from_id": pa.array(f, pa.binary(16)),
                "url": pa.array(u, pa.string()),
                "anchor": pa.array(a, pa.string()),
                "domain_id": pa.array(d, pa.int64()),
            }
        )
    )


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

    def __init__(self, url_sorted: pa.Array, hashes: np.ndarray | None = None):
        self.urls = url_sorted
        h = _url_hashes(url_sorted) if hashes is None else hashes
        small = np.int32 if len(h) < 2**31 else np.int64  # about 20 bytes a page in all
        order = np.argsort(h)
        self.sh = h[order]
        self.order = order.astype(small)
        del order
        self.unique = len(h) < 2 or not bool((self.sh[1:] == self.sh[:-1]).any())
        bits = max(1, len(h).bit_length())
        self.shift = np.uint64(64 - bits)
        self.starts = np.searchsorted(self.sh >> self.shift, np.arange(2**bits + 1, dtype=np.uint64)).astype(small)
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
        return _binary(rows[:n] if idx is None else rows[idx[:n]])
    a = pa.Array.from_buffers(pa.large_binary(), len(offs) - 1, [None, pa.py_buffer(offs), pa.py_buffer(data)])
    return a.slice(0, n) if idx is None else a.take(pa.array(idx[:n]))


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
    for group in _gather_groups(ends, cum):  # the blocks gathered a few MiB at a time
        s0 = s
        raws = gather([_tail(p, s0) for p in parts], klen[s0:], np.array(group, np.int64) - s0)
        for e, raw in zip(group, raws):
            last = len(raw) - 8 * (e - s) - 4 - int(rlen[e - 1])  # where the block's last record starts
            w.add_raw_block(
                seal_block(raw, w.codec, w.piece_bytes), raw[: int(klen[s])], raw[last : last + int(klen[e - 1])], e - s
            )
            s = e
    return ends[-1]


def _gather_groups(ends: list[int], cum: np.ndarray) -> list[list[int]]:
    """The block ends cut into groups of about _GATHER_BYTES of records each."""
    groups: list[list[int]] = [[]]
    start = 0
    for e in ends:
        groups[-1].append(e)
        if int(cum[e - 1]) - start >= _GATHER_BYTES:
            groups.append([])
            start = int(cum[e - 1])
    return [g for g in groups if g]


# ---- sorted runs on disk and their merge -----------------------------------------------------


class _Spill:
    """The load's files under its tmp dir: arrays written raw and mapped back (the page cache
    holds them, not this process), binary columns as a data file and int64 offsets."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        os.makedirs(tmp, exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.tmp, name)

    def write(self, name: str, a: np.ndarray) -> None:
        with open(self.path(name), "wb") as f:
            f.write(memoryview(np.ascontiguousarray(a)).cast("B"))

    def array(self, name: str, dtype: Any, width: int = 0) -> np.ndarray:
        """A written array, mapped (an (n, width) uint8 array with ``width``)."""
        p = self.path(name)
        a = np.memmap(p, dtype, "r") if os.path.getsize(p) else np.zeros(0, dtype)
        return a.reshape(-1, width) if width else a

    def write_binary(self, name: str, a: pa.Array) -> None:
        """A binary array's values and offsets (from 0)."""
        offs, data = _offsets_data(a)
        with open(self.path(name + ".data"), "wb") as f:
            f.write(data)
        self.write(name + ".offs", offs - offs[0])

    def binary(self, name: str) -> pa.Array:
        """A written binary column, mapped: a large_binary array."""
        offs = self.array(name + ".offs", np.int64)
        data = self.array(name + ".data", np.uint8)
        return pa.Array.from_buffers(pa.large_binary(), len(offs) - 1, [None, pa.py_buffer(offs), pa.py_buffer(data)])


class _Appender:
    """A binary column written window by window: a data file and its int64 offsets."""

    def __init__(self, spill: _Spill, name: str):
        self.data = open(spill.path(name + ".data"), "wb")
        self.offs = open(spill.path(name + ".offs"), "wb")
        self.end = 0
        self.offs.write(np.zeros(1, np.int64).tobytes())

    def add(self, a: pa.Array) -> None:
        offs, data = _offsets_data(a)
        self.data.write(data)
        self.offs.write((offs[1:] - offs[0] + self.end).astype(np.int64).tobytes())
        self.end += int(offs[-1] - offs[0])

    def close(self) -> None:
        self.data.close()
        self.offs.close()


def _offsets_data(a: pa.Array) -> tuple[np.ndarray, memoryview]:
    """A binary array's offsets (int64, not rebased) and the bytes they span."""
    big = a.type in (pa.large_binary(), pa.large_string())
    offs = np.frombuffer(a.buffers()[1], np.int64 if big else np.int32)[a.offset : a.offset + len(a) + 1]
    offs = offs.astype(np.int64)
    buf = a.buffers()[2]
    data = memoryview(buf)[int(offs[0]) : int(offs[-1])] if buf is not None and len(a) else memoryview(b"")
    return offs, data


class _Run:
    """A sorted run of numeric keys: ``cols`` (equal-length arrays, most significant first)."""

    def __init__(self, cols: list[np.ndarray]):
        self.cols = cols
        self.n = len(cols[0])

    def last(self, e: int) -> tuple:
        return tuple(int(c[e - 1]) for c in self.cols)

    def count_le(self, a: int, e: int, bound: tuple) -> int:
        """How many keys of rows a..e-1 are <= bound (they are sorted: a prefix)."""
        lt = np.zeros(e - a, bool)
        eq = np.ones(e - a, bool)
        for c, b in zip(self.cols, bound):
            x = c[a:e]
            lt |= eq & (x < b)
            eq &= x == b
        return int(np.count_nonzero(lt | eq))


class _UrlRun:
    """A sorted run of urls (a binary array)."""

    def __init__(self, urls: pa.Array):
        self.urls = urls
        self.n = len(urls)

    def last(self, e: int) -> bytes:
        return self.urls[e - 1].as_py()

    def count_le(self, a: int, e: int, bound: bytes) -> int:
        lo, hi = a, e
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.urls[mid].as_py() <= bound:
                lo = mid + 1
            else:
                hi = mid
        return lo - a


def _windows(runs: list, rows: int):
    """The k-way merge of sorted runs a window at a time: yields, per window, the slice
    (start, stop) taken from each run, so that every key of the window is below every key
    left in any run.  Each run offers its next ``rows`` rows; the window holds, from every
    run, its offered keys up to the smallest of the last offered keys of the runs not
    offering their end (that run gives all it offered: each window takes at least one row).
    Keys equal across runs land in the same window; a run holds each key once."""
    pos = [0] * len(runs)
    while any(p < r.n for p, r in zip(pos, runs)):
        ends = [min(r.n, p + rows) for p, r in zip(pos, runs)]
        bound = None
        for r, p, e in zip(runs, pos, ends):
            if p < e < r.n:
                x = r.last(e)
                bound = x if bound is None or x < bound else bound
        if bound is None:
            take = list(zip(pos, ends))
        else:
            take = [(p, p + (r.count_le(p, e, bound) if p < e else 0)) for r, p, e in zip(runs, pos, ends)]
        pos = [b for _, b in take]
        yield take


def _take_binary(arrays: list[pa.Array], take: list[tuple[int, int]]) -> pa.Array:
    """The rows ``take`` of each array, concatenated (large_binary)."""
    parts = [a.slice(lo, hi - lo).cast(pa.large_binary()) for a, (lo, hi) in zip(arrays, take) if hi > lo]
    return pa.concat_arrays(parts) if parts else pa.array([], pa.large_binary())


def _take_np(arrays: list[np.ndarray], take: list[tuple[int, int]]) -> np.ndarray:
    return np.concatenate([a[lo:hi] for a, (lo, hi) in zip(arrays, take)])


def _sections_of(js: np.ndarray):
    """(section, lo, hi) of a window's records, given each record's section (nondecreasing)."""
    if not len(js):
        return
    cut = np.flatnonzero(js[1:] != js[:-1]) + 1
    starts = [0, *cut.tolist()]
    stops = [*cut.tolist(), len(js)]
    for a, b in zip(starts, stops):
        yield int(js[a]), a, b


# ---- a table written window by window ---------------------------------------------------------


class _Sink:
    """One table's records fed in key order a window at a time, a section at a time; blocks
    are cut as TableWriter cuts them (the records after a window's last whole block wait for
    the next window)."""

    def __init__(self, out: _Out):
        self.out = out
        self.j = -1
        self.parts: list[Part] | None = None
        self.klen = np.zeros(0, np.int64)

    def add(self, j: int, parts: list[Part], klen: np.ndarray) -> None:
        if j != self.j:
            self.flush()
            self.j = j
        elif self.parts is not None and len(self.klen):
            parts = [_join(a, b, len(self.klen), len(klen)) for a, b in zip(self.parts, parts)]
            klen = np.concatenate([self.klen, klen])
        done = self.out.write(j, parts, klen, final=False)
        self.parts = [_tail(p, done) for p in parts]
        self.klen = klen[done:]

    def flush(self) -> None:
        if self.parts is not None and len(self.klen):
            self.out.write(self.j, self.parts, self.klen, final=True)
        self.parts, self.klen = None, np.zeros(0, np.int64)

    def close(self) -> None:
        self.flush()
        self.out.close()


def _tail(part: Part, done: int) -> Part:
    """The part's records from ``done`` on."""
    data, offs, w, idx = part
    if idx is not None:
        return data, offs, w, idx[done:]
    if offs is None:
        return data[done:], None, w, None
    return data, offs[done:], w, None


def _join(a: Part, b: Part, na: int, nb: int) -> Part:
    """Part a's na records then part b's nb."""
    if a[3] is not None and b[3] is not None and a[0] is b[0] and a[1] is b[1]:
        return a[0], a[1], a[2], np.concatenate([a[3], b[3]])
    if a[1] is None and b[1] is None:
        rows = [(d if i is None else d[i])[:n] for (d, _, _, i), n in ((a, na), (b, nb))]
        return _fixed(np.concatenate(rows))
    return _var(pa.concat_arrays([_part_array(a, na), _part_array(b, nb)]))


# ---- the load ---------------------------------------------------------------------------------

_RUN_ROWS: int | None = None  # rows of a sorted run (tests: tiny); else from memory_mb
_WINDOW_ROWS: int | None = None  # rows a run offers to a merge window (tests: tiny); else from memory_mb
_PAGE_BYTES = 400  # memory a page takes in a run being sorted or a merge window (columns, value, order)
_LINK_BYTES = 160  # memory a link takes in a run being sorted (ranks, keys, order, domain, anchor twice)
_LINK_WINDOW_BYTES = 128  # memory a link takes in a merge window (keys, order, ranks, anchor twice)


class _Load:
    """One bulk load into an empty db, external: every sort is of runs that fit ``memory_mb``,
    spilled under ``tmp`` and merged a window at a time.  The phases, in order (``run``):

    1. ``sort_pages``: page chunks checked, their values built, sorted by url, spilled;
    2. ``pages_by_url``: the page runs merged (first call for a url wins) into PagesByURL; the
       urls, values, md5s and hashes spilled in url order (a page's rank = its position);
    3. ``pages_by_md5``: the md5s sorted (runs of (md5, rank)) into PagesByMD5 and the set of
       md5s the pages carry;
    4. ``sort_links``: link chunks checked, their from_id and url turned into ranks (the rest
       dropped), each run sorted twice, by (md5 rank, url rank) and by (url rank, md5 rank),
       the last call of a key kept, spilled;
    5. ``link_tables``: the two sets of runs merged at once, in two threads, into LinksByMD5
       (``links_by_md5``) and LinksByURL (``links_by_url``);
    then the due index and the manifest (``finish``).
    """

    def __init__(self, db, base: Manifest, s: Settings, tmp: str, say: Callable[[str], None]):
        self.db, self.base, self.s, self.say = db, base, s, say
        self.gen = base.generation + 1
        self.secs = base.sections
        self.k = self.secs.k
        self.max_url, self.amax = int(s.max_url_bytes), int(s.anchor_max)
        mem = int(s.memory_mb) << 20
        self.page_run_rows = _RUN_ROWS or max(1024, mem // 2 // _PAGE_BYTES)
        self.link_run_rows = _RUN_ROWS or max(1024, mem // 2 // _LINK_BYTES)
        self.window_bytes = mem // 4
        self.spill = _Spill(tmp)
        self.tmp = tmp
        self.phases: dict[str, float] = {}
        self.t_lap = time.monotonic()
        self.tables: list[dict] = [{} for _ in range(self.k)]
        self.status: list[dict] = [{} for _ in range(self.k)]
        self.outs: dict[str, _Out] = {}
        self.n_pages = self.n_links = 0
        self.input = "columns"  # or "records": bulk_load_records, checked record by record first

    def lap(self, name: str, msg: str) -> None:
        t = time.monotonic()
        self.phases[name] = round(t - self.t_lap, 3)
        self.t_lap = t
        self.say(f"{name}: {msg} ({self.phases[name]} s)")

    def window_rows(self, nruns: int, row_bytes: int) -> int:
        return _WINDOW_ROWS or max(1024, self.window_bytes // max(1, nruns) // row_bytes)

    def run(self, pages: Iterable[pa.Table], links: Iterable) -> Manifest:
        try:
            self.sort_pages(pages)
            for j in range(self.k):
                os.makedirs(section_path(self.db.path, j), exist_ok=True)
            self.outs = {
                t: _Out(self.db.path, self.gen, t, self.s, self.tables)
                for t in ("pages_by_url", "pages_by_md5", "links_by_url", "links_by_md5")
            }
            self.pages_by_url()
            faults.point("bulk.after_pages_by_url")
            self.pages_by_md5()
            faults.point("bulk.after_pages_by_md5")
            self.sort_links(links)
            faults.point("bulk.after_read")
            self.link_tables()
            faults.point("bulk.after_links_by_url")
            faults.point("bulk.after_links_by_md5")
        except BaseException:
            for out in self.outs.values():
                out.abort()
            raise
        return self.finish()

    # ---- 1. pages sorted by url, in runs ----

    def sort_pages(self, pages: Iterable) -> None:
        """Check the pages and spill them as runs sorted by url (stable: of equal urls the
        first call first, then only it kept).  Draws the writer's breakpoint sample."""
        sample = None if self.secs.ready else Reservoir(int(self.s.breakpoint_sample))
        drawn: dict[int, bytes] = {}  # the sample's positions -> their urls
        self.page_runs = 0
        held: list[pa.Table] = []
        rows = 0
        checked = False

        def spill_held() -> None:
            t = pa.concat_tables(held) if len(held) > 1 else held[0]
            held.clear()
            for a in range(0, t.num_rows, self.page_run_rows):
                self.spill_page_run(t.slice(a, self.page_run_rows), checked, sample, drawn)

        for t in [pages] if isinstance(pages, pa.Table) else pages:
            checked = isinstance(t, _Checked)
            held.append(t.table if checked else t)
            rows += held[-1].num_rows
            if rows >= self.page_run_rows:
                spill_held()
                rows = 0
        if held:
            spill_held()
        if sample is not None:
            self.secs = Sections(self.k, Sections.choose([drawn[p] for p in sample.items], self.k))
        _release()
        self.lap("sort_pages", f"{self.n_pages} page rows in {self.page_runs} runs")

    def spill_page_run(self, pages: pa.Table, checked: bool, sample: Reservoir | None, drawn: dict) -> None:
        """One run: the chunk's pages checked (unless ``checked``: url and value columns of
        pages checked record by record), sorted by url, the first of equal urls kept."""
        if checked:
            urls, values = (pages.column(c).combine_chunks() for c in ("url", "value"))
        else:
            what = f"pages {self.n_pages + 1}..{self.n_pages + pages.num_rows}"
            urls, values = _page_columns(pages, self.max_url, what)
        n = len(urls)
        if sample is not None and n:
            for p in range(self.n_pages, self.n_pages + n):
                sample.add(p)
            live = set(sample.items)
            mine = [p for p in live if p >= self.n_pages and p not in drawn]
            got = urls.take(pa.array([p - self.n_pages for p in mine], pa.int64())).to_pylist()
            drawn.update(zip(mine, (u.encode("utf-8") for u in got)))
            for p in [p for p in drawn if p not in live]:
                del drawn[p]
        self.n_pages += n
        ubin = urls.cast(pa.binary())
        order = pc.sort_indices(ubin)  # stable: the first call for a url sorts first
        su = ubin.take(order)
        keep = _np(order)
        if n > 1:
            keep = keep[np.concatenate([[True], ~_np(pc.equal(su.slice(1), su.slice(0, n - 1)))])]
        idx = pa.array(keep)
        name = f"pr{self.page_runs}"
        self.spill.write_binary(name + ".url", ubin.take(idx))
        self.spill.write_binary(name + ".val", values.take(idx))
        self.page_runs += 1

    # ---- 2. PagesByURL ----

    def pages_by_url(self) -> None:
        """Merge the page runs (the first call for a url wins: runs are in call order) into
        PagesByURL, counting statuses; spill the pages in url order: urls and values (mapped
        later), md5s, url hashes and whether each page has outlinks (``has_out``)."""
        urls = [self.spill.binary(f"pr{i}.url") for i in range(self.page_runs)]
        vals = [self.spill.binary(f"pr{i}.val") for i in range(self.page_runs)]
        runs = [_UrlRun(u) for u in urls]
        url_bounds = self.secs.key_bounds(True)
        sink = _Sink(self.outs["pages_by_url"])
        url_file, val_file = _Appender(self.spill, "url"), _Appender(self.spill, "val")
        md5_file = open(self.spill.path("md5"), "wb")
        hash_file, has_out = open(self.spill.path("hash"), "wb"), []
        P = 0
        for take in _windows(runs, self.window_rows(len(runs), _PAGE_BYTES)):
            wu, wv = _take_binary(urls, take), _take_binary(vals, take)
            order = pc.sort_indices(wu)  # stable: run order breaks ties (call order)
            su = wu.take(order)
            n = len(su)
            keep = np.ones(n, bool)
            if n > 1:
                keep[1:] = ~_np(pc.equal(su.slice(1), su.slice(0, n - 1)))
            idx = pa.array(_np(order)[keep])
            wu, wv = wu.take(idx), wv.take(idx)
            n = len(wu)
            voffs, _ = _offsets_data(wv)
            vdata = np.frombuffer(wv.buffers()[2], np.uint8)
            fixed = vdata[voffs[:-1, None] + np.arange(PAGE.size)].view(_PAGE_DT).ravel()
            ulen = _np(pc.binary_length(wu)).astype(np.int64)
            js = np.zeros(n, np.int64)
            for b in url_bounds:
                js[_bisect(wu, b) :] += 1
            for j, a, b in _sections_of(js):
                sink.add(j, [_var(wu.slice(a, b - a)), _var(wv.slice(a, b - a))], ulen[a:b])
                c = np.bincount(fixed["status"][a:b], minlength=4)
                sj = self.status[j]
                for i, x in enumerate(c.tolist()):
                    if x:
                        sj[str(i)] = sj.get(str(i), 0) + x
            url_file.add(wu)
            val_file.add(wv)
            md5_file.write(fixed["md5"].tobytes())
            hash_file.write(_url_hashes(wu).tobytes())
            has_out.append((fixed["num_outlinks"] > 0).astype(np.uint8) * LINK_OUT)
            P += n
        sink.close()
        url_file.close()
        val_file.close()
        md5_file.close()
        hash_file.close()
        for i in range(self.page_runs):
            for c in ("url", "val"):
                for x in (".data", ".offs"):
                    os.unlink(self.spill.path(f"pr{i}.{c}{x}"))
        self.P = P
        self.has_out = (np.concatenate(has_out) if has_out else np.zeros(0, np.uint8)).reshape(-1, 1)
        self.url_sorted = self.spill.binary("url")
        self.url_offs = self.spill.array("url.offs", np.int64)
        self.url_cuts = [_bisect(self.url_sorted, b) for b in url_bounds]
        _release()
        self.lap("pages_by_url", f"{P} pages")

    # ---- 3. PagesByMD5 ----

    def pages_by_md5(self) -> None:
        """Sort the pages by (md5, url rank): runs of the url-ordered md5s, merged into
        PagesByMD5; the distinct md5s (sorted) spilled as the md5 set."""
        md5 = self.spill.array("md5", np.uint8, 16)
        P, rr = self.P, self.page_run_rows
        runs = []
        for i, a in enumerate(range(0, P, rr)):
            hi, lo = _md5_words(md5[a : a + rr])
            o = np.lexsort((lo, hi))  # stable: rank order within an md5
            self.spill.write(f"mr{i}.hi", hi[o])
            self.spill.write(f"mr{i}.lo", lo[o])
            self.spill.write(f"mr{i}.rank", (o + a).astype(np.int64))
            runs.append(i)
        runs = [_Run([self.spill.array(f"mr{i}.{c}", dt) for c, dt in _MD5_RUN]) for i in runs]
        b8 = np.array([int.from_bytes(b, "big") for b in _md5_b8(self.secs)], np.uint64)
        sink = _Sink(self.outs["pages_by_md5"])
        url_part = _var(self.url_sorted)
        val_part = _var(self.spill.binary("val"))
        sets = {c: open(self.spill.path(f"set.{c}"), "wb") for c in ("hi", "lo", "rows")}
        prev = None
        for take in _windows(runs, self.window_rows(len(runs), 128)):
            hi, lo, rank = (_take_np([r.cols[c] for r in runs], take) for c in range(3))
            o = np.lexsort((rank, lo, hi))
            hi, lo, rank = hi[o], lo[o], rank[o]
            rows = _md5_rows(hi, lo)
            ulen = self.url_offs[rank + 1] - self.url_offs[rank]
            js = np.searchsorted(b8, hi, "right")
            for j, a, b in _sections_of(js):
                sink.add(j, [_fixed(rows[a:b]), _at(url_part, rank[a:b]), _at(val_part, rank[a:b])], 16 + ulen[a:b])
            new = np.ones(len(hi), bool)
            new[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
            if prev is not None and len(hi) and (int(hi[0]), int(lo[0])) == prev:
                new[0] = False
            if len(hi):
                prev = (int(hi[-1]), int(lo[-1]))
            sets["hi"].write(hi[new].tobytes())
            sets["lo"].write(lo[new].tobytes())
            sets["rows"].write(rows[new].tobytes())
        sink.close()
        for f in sets.values():
            f.close()
        for i in range(len(runs)):
            for c, _ in _MD5_RUN:
                os.unlink(self.spill.path(f"mr{i}.{c}"))
        self.set_hi = self.spill.array("set.hi", np.uint64)
        self.set_lo = self.spill.array("set.lo", np.uint64)
        self.M = len(self.set_hi)
        self.md5_rows = self.spill.array("set.rows", np.uint8, 16)
        self.md5_cuts = np.array([int(np.searchsorted(self.set_hi, x, "left")) for x in b8], np.int64)
        _release()
        self.lap("pages_by_md5", f"{self.M} md5s")

    # ---- 4. links checked, ranked and sorted by (md5 rank, url rank), in runs ----

    def sort_links(self, links: Iterable) -> None:
        """Check each link chunk, turn its from_id into the rank of its md5 in the md5 set and
        its url into the rank of its page (links with either missing are dropped), cut the
        anchors, and spill runs sorted by (md5 rank, url rank), the last call of a key kept."""
        index = _UrlIndex(self.url_sorted, self.spill.array("hash", np.uint64))
        find = index.find if index.unique else self.find_by_arrow  # two pages' urls share a hash
        self.by_hi = self.M < 2 or bool(np.all(self.set_hi[1:] != self.set_hi[:-1]))
        self.link_runs: list[int] = []
        buf: list[tuple] = []
        rows = 0
        for t in links:
            checked = isinstance(t, _Checked)
            t = t.table if checked else t
            if isinstance(t, pa.RecordBatch):
                t = pa.Table.from_batches([t])
            what = f"links {self.n_links + 1}..{self.n_links + t.num_rows}"
            lurl = _column(t, "url", pa.string(), what)
            if not checked:
                _check_urls(lurl, self.max_url, what)
            fid = _column(t, "from_id", pa.binary(16), what)
            anc = _column(t, "anchor", pa.string(), what)
            dom = _column(t, "domain_id", pa.int64(), what) if "domain_id" in t.column_names else None
            self.n_links += t.num_rows
            m = self.md5_ranks(fid)
            u = find(lurl.cast(pa.binary()))
            ok = (u >= 0) & (m >= 0)
            if not ok.all():
                okp = pa.array(ok)
                u, m, anc = u[ok], m[ok], anc.filter(okp)
                dom = None if dom is None else dom.filter(okp)
            if len(anc) and pc.max(pc.binary_length(anc)).as_py() > self.amax:  # bytes >= characters
                anc = pc.utf8_slice_codeunits(anc, 0, self.amax)
            d = None if dom is None else _np(dom)
            buf.append((m, u, None if d is None or not d.any() else d, anc.cast(pa.large_binary())))
            rows += len(u)
            if rows >= self.link_run_rows:
                self.spill_link_run(buf)
                rows = 0
        if buf:
            self.spill_link_run(buf)
        del index
        _release()
        self.lap("sort_links", f"{self.n_links} link rows in {len(self.link_runs)} runs")

    def find_by_arrow(self, urls: pa.Array) -> np.ndarray:
        """The rank of each url's page, -1 for none, by pyarrow's hash lookup (a table of the
        pages' urls built at each call: only when two of their hashes are equal)."""
        return _np(pc.fill_null(pc.index_in(urls, value_set=self.url_sorted.cast(pa.binary())), -1)).astype(np.int32)

    def md5_ranks(self, fid: pa.Array) -> np.ndarray:
        """The rank of each from_id in the md5 set, -1 for an md5 no page carries: a binary
        search of the top 64 bits (the lower ones confirm), or, if two md5s of the set share
        their top 64 bits, a hash lookup."""
        M = self.M
        if not self.by_hi:
            md5_set = pa.Array.from_buffers(pa.binary(16), M, [None, pa.py_buffer(self.md5_rows)])
            return _np(pc.fill_null(pc.index_in(fid, value_set=md5_set), -1)).astype(np.int32)
        h, lw = _md5_words(_fixed_u8(fid, 16))
        if not M or not len(h):
            return np.full(len(h), -1, np.int32)
        # A source's links usually come together: search once per run of equal md5s.
        head = np.ones(len(h), bool)
        head[1:] = (h[1:] != h[:-1]) | (lw[1:] != lw[:-1])
        heads = np.flatnonzero(head)
        h, lw = h[heads], lw[heads]
        pos = np.minimum(np.searchsorted(self.set_hi, h), M - 1)
        r = np.where((self.set_hi[pos] == h) & (self.set_lo[pos] == lw), pos, -1).astype(np.int32)
        return np.repeat(r, np.diff(np.append(heads, len(head))))

    def spill_link_run(self, buf: list[tuple]) -> None:
        """One run of links (m, u, dom, anchor chunks, in call order), spilled twice: sorted by
        (m, u) and by (u, m), the last call of each key kept; each as the key (uint64), the
        domains (if any is not 0) and the anchors."""
        m = np.concatenate([b[0] for b in buf]).astype(np.uint64)
        u = np.concatenate([b[1] for b in buf]).astype(np.uint64)
        dom = None
        if any(b[2] is not None for b in buf):
            dom = np.concatenate([np.zeros(len(b[0]), np.int64) if b[2] is None else b[2] for b in buf])
        anc = pa.concat_arrays([b[3] for b in buf]) if len(buf) > 1 else buf[0][3]
        buf.clear()
        P, M = np.uint64(max(self.P, 1)), np.uint64(max(self.M, 1))
        i = len(self.link_runs)
        for prefix, hi, lo, base in (("lr", m, u, P), ("ur", u, m, M)):
            key = hi * base + lo
            o = _last_of_runs(key.view(np.int64), int(M) * int(P))  # key consumed
            key = hi[o] * base + lo[o]
            self.spill.write(f"{prefix}{i}.key", key)
            if dom is not None:
                self.spill.write(f"{prefix}{i}.dom", dom[o])
            self.spill.write_binary(f"{prefix}{i}.anc", anc.take(pa.array(o)))
            del key, o
        self.link_runs.append(dom is not None)

    def merged_links(self, prefix: str, flags: list[bool]):
        """The link runs merged: yields (keys, domains or None, anchors) a window at a time,
        in key order; of equal keys the one of the latest run (the last call wins)."""
        keys = [self.spill.array(f"{prefix}{i}.key", np.uint64) for i in range(len(flags))]
        doms = [self.spill.array(f"{prefix}{i}.dom", np.int64) if f else None for i, f in enumerate(flags)]
        ancs = [self.spill.binary(f"{prefix}{i}.anc") for i in range(len(flags))]
        runs = [_Run([k]) for k in keys]
        any_dom = any(flags)
        # Two merges run at once (link_tables): each gets half the windows' share.
        for take in _windows(runs, self.window_rows(2 * len(runs), _LINK_WINDOW_BYTES)):
            key = _take_np(keys, take)
            o = np.argsort(key, kind="stable")
            key = key[o]
            if len(key) > 1:
                last = np.ones(len(key), bool)
                last[:-1] = key[1:] != key[:-1]
                o, key = o[last], key[last]
            dom = None
            if any_dom:
                dom = np.concatenate(
                    [np.zeros(hi - lo, np.int64) if d is None else d[lo:hi] for d, (lo, hi) in zip(doms, take)]
                )[o]
            anc = _take_binary(ancs, take).take(pa.array(o))
            yield key, dom, anc
        for i, f in enumerate(flags):
            for x in (".key", ".anc.data", ".anc.offs", *([".dom"] if f else [])):
                os.unlink(self.spill.path(f"{prefix}{i}{x}"))

    def link_value(self, u: np.ndarray, dom: np.ndarray | None, anc: pa.Array) -> list[Part]:
        """domain_id (i64 LE), flags, anchor."""
        zero = _ZERO8, None, 8, np.zeros(len(u), np.int64)
        d = zero if dom is None else _fixed(dom.astype("<i8", copy=False).view(np.uint8).reshape(-1, 8))
        return [d, _fixed(self.has_out, u), _var(anc)]

    # ---- 5. LinksByMD5 and LinksByURL, at once ----

    def link_tables(self) -> None:
        """LinksByMD5 and LinksByURL, each from its own runs, in two threads (the merges'
        numpy and Arrow kernels, the gathers, lz4 and crc32 release the GIL)."""
        seconds: dict[str, float] = {}
        with ThreadPoolExecutor(2) as ex:
            jobs = [ex.submit(_timed, f, seconds) for f in (self.links_by_md5, self.links_by_url)]
            for f in jobs:
                f.result()
        _release()
        self.lap("link_tables", ", ".join(f"{k} {v} s" for k, v in seconds.items()))
        self.phases.update(seconds)

    def links_by_md5(self) -> None:
        """Merge the (md5 rank, url rank) runs into LinksByMD5 (md5, url -> domain, flags,
        anchor)."""
        P = np.uint64(max(self.P, 1))
        sink = _Sink(self.outs["links_by_md5"])
        url_part = _var(self.url_sorted)
        md5_part = _fixed(self.md5_rows)
        for key, dom, anc in self.merged_links("lr", self.link_runs):
            m, u = (key // P).astype(np.int64), (key % P).astype(np.int64)
            ulen = self.url_offs[u + 1] - self.url_offs[u]
            js = np.searchsorted(self.md5_cuts, m, "right")
            for j, a, b in _sections_of(js):
                value = self.link_value(u[a:b], None if dom is None else dom[a:b], anc.slice(a, b - a))
                sink.add(j, [_at(md5_part, m[a:b]), _at(url_part, u[a:b]), *value], 16 + ulen[a:b])
        sink.close()

    def links_by_url(self) -> None:
        """Merge the (url rank, md5 rank) runs into LinksByURL (url, \\0, md5 -> domain, flags,
        anchor)."""
        M = np.uint64(max(self.M, 1))
        sink = _Sink(self.outs["links_by_url"])
        url_part = _var(self.url_sorted)
        md5_part = _fixed(self.md5_rows)
        cuts = np.array(self.url_cuts, np.int64)
        for key, dom, anc in self.merged_links("ur", self.link_runs):
            u, m = (key // M).astype(np.int64), (key % M).astype(np.int64)
            ulen = self.url_offs[u + 1] - self.url_offs[u]
            js = np.searchsorted(cuts, u, "right")
            for j, a, b in _sections_of(js):
                zero = _ZERO1, None, 1, np.zeros(b - a, np.int64)
                parts = [_at(url_part, u[a:b]), zero, _at(md5_part, m[a:b])]
                value = self.link_value(u[a:b], None if dom is None else dom[a:b], anc.slice(a, b - a))
                sink.add(j, parts + value, ulen[a:b] + 17)
        sink.close()

    def finish(self) -> Manifest:
        """The due index of the sections, the manifest; the spilled files removed."""
        self.status = [dict(sorted(sj.items(), key=lambda kv: int(kv[0]))) for sj in self.status]
        self.url_sorted = self.url_offs = self.md5_rows = self.set_hi = self.set_lo = None
        index_sections(self.db.path, self.gen, self.tables, self.s, self.tmp)
        faults.point("bulk.after_due_index")
        m = load_manifest(
            self.gen,
            self.base,
            self.secs,
            self.tables,
            self.status,
            self.n_pages,
            self.n_links,
            {"seconds": self.phases, "input": self.input},
        )
        shutil.rmtree(self.tmp, ignore_errors=True)
        return m


_MD5_RUN = (("hi", np.uint64), ("lo", np.uint64), ("rank", np.int64))
_ZERO8 = np.zeros((1, 8), np.uint8)  # a domain_id of 0
_ZERO1 = np.zeros((1, 1), np.uint8)  # the \0 between a link's url and md5


def _timed(f: Callable[[], None], seconds: dict) -> None:
    """Run ``f``, its seconds into ``seconds`` under its name."""
    t = time.monotonic()
    f()
    seconds[f.__name__] = round(time.monotonic() - t, 3)


def _at(part: Part, idx: np.ndarray) -> Part:
    """A shared part's records ``idx``."""
    return part[0], part[1], part[2], np.ascontiguousarray(idx, np.int64)


def _md5_words(u8: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An (n, 16) uint8 array's rows as two big-endian uint64 words (top, bottom)."""
    w = np.ascontiguousarray(u8).view(">u8").reshape(-1, 2)
    return w[:, 0].astype(np.uint64), w[:, 1].astype(np.uint64)


def _md5_rows(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """The inverse of _md5_words."""
    w = np.empty((len(hi), 2), ">u8")
    w[:, 0], w[:, 1] = hi, lo
    return w.view(np.uint8).reshape(-1, 16)


def _page_columns(pages: pa.Table, max_url: int, what: str) -> tuple[pa.Array, pa.Array]:
    """A page chunk's urls (string) and values (large_binary: the bytes of Page.encode_value),
    checked; NotColumnar for what the checks do not vouch for."""
    urls = _column(pages, "url", pa.string(), what)
    n = len(urls)
    _check_urls(urls, max_url, what)
    md5 = _column(pages, "md5", pa.binary(16), what)
    fixed = np.zeros(n, _PAGE_DT)
    fixed.view(np.uint8).reshape(n, PAGE.size)[:, :16] = _fixed_u8(md5, 16)
    for c, (lo, hi) in _INT_RANGES.items():
        a = _column(pages, c, pa.int64(), what)
        if n:
            mm = pc.min_max(a).as_py()
            if mm["min"] < lo or mm["max"] > hi:
                raise NotColumnar(f"{what}: {c} out of {lo}..{hi}")
        fixed[c] = _np(a)
    if n and not np.isin(fixed["status"], _STATUSES).all():
        raise NotColumnar(f"{what}: a status that is not a Status")
    for c in ("score", "next_score"):
        a = _column(pages, c, pa.float64(), what)
        if n and pc.any(pc.is_nan(a)).as_py():
            raise NotColumnar(f"{what}: {c} is NaN")
        fixed[c] = _np(a)
    values = _binary(fixed.view(np.uint8).reshape(n, PAGE.size))
    meta = _column(pages, "meta", pa.binary(), what) if "meta" in pages.column_names else None
    if meta is not None and n and pc.max(pc.binary_length(meta)).as_py() > 0:
        values = pc.binary_join_element_wise(values, meta.cast(pa.large_binary()), _SEP)
    return urls, values


def _release() -> None:
    """Give freed memory back to the system: Arrow's pool, and glibc's heaps, where thousands of
    chunk-sized arrays freed between live ones would otherwise stay resident (at 3M pages about
    a third of the load's peak)."""
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)


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
