"""Immutable sorted table files: blocks, sparse index, footer (layout in docs/format.md).

A table is written once, front to back, by ``TableWriter`` and never modified.  ``TableReader``
serves point lookups (index search + one block read), ordered iteration from any key, and the
raw blocks a merge carries over without decoding them (``MergeCursor``).
"""

from __future__ import annotations

import bisect
import ctypes
import json
import mmap
import os
import stat
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from itertools import accumulate, chain
from operator import ge, gt, lt

import lz4.block

from webdb.errors import ClosedError, CorruptionError, DiskFull, is_disk_full
from webdb.tables.block import (
    CODECS,
    COMPILED,
    TAIL_BYTES,
    RawBlock,
    block_crc_ok,
    blockc,
    check_block_crc,
    crc32,
    decode_block,
    encode_block,
    encode_run,
    in_place_block,
    index_entries,
    index_in_place,
    lz4_decompress,
    piece_of,
    piece_raw_block,
    pieces_header,
    pieces_split,
    point_lookup,
    run_cuts,
    short_file,
    unpack_block,
    unpack_piece,
    unpack_range,
)
from webdb.tables.format import (
    BLOCK_TRAILER_SIZE,
    CODEC_LZ4,
    CODEC_LZ4_PIECES,
    CODEC_NONE,
    DELTA_KINDS,
    FOOTER_SIZE,
    KIND_LINKS_BY_URL,
    KIND_PAGES_BY_URL,
    PIECE_BYTES,
    TABLE_MAGIC,
    TABLE_VERSION,
)
from webdb.tables.pagecodec import LINK_FIXED, LINK_OUT

__all__ = ["TableWriter", "TableReader", "BlockCache", "Probe", "CODECS"]

_FOOTER = struct.Struct("<QIQIQB3xI8s")
_U32 = struct.Struct("<I")
_INDEX_VALUE = struct.Struct("<QII")  # block offset, on-disk length (with trailer), record count
# A writer handed keys out of order: what it merges (an old table, a delta run, an edit file)
# holds records out of order, which a crafted block with a sound CRC can; the writer says so
# instead of writing a table out of order (the batch aborts; nothing is committed).
DAMAGED = " (an input of this merge holds its records out of order: damaged; `webdb check` names the file)"
assert _FOOTER.size == FOOTER_SIZE
_BIG = sys.byteorder == "big"
# What a lazy TableReader loads on first use (the ``_OnFirstUse`` attributes of TableReader).
_LOADED = frozenset(("meta", "first_keys", "last_keys", "offsets", "lengths", "counts"))
# Most blocks ``short_range`` reads of one file (more: ``ranges`` streams them, a block at a time).
SHORT_BLOCKS = 4
# The kinds written in lz4 pieces (PagesByURL, LinksByURL and their delta runs), whose lookups
# read a block's piece table first and decompress only the piece a key or range lies in.
PIECES_KINDS = frozenset(
    (KIND_PAGES_BY_URL, DELTA_KINDS["pages_by_url"], KIND_LINKS_BY_URL, DELTA_KINDS["links_by_url"])
)


def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux; Python's ``os`` has none before 3.12), or None."""
    try:
        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f


_SYNC_FILE_RANGE = _sync_file_range() if sys.platform.startswith("linux") else None
_SYNC_FILE_RANGE_WRITE = 2
# A synced writer starts the write-out of its blocks every WRITEBACK_BYTES written, so the fsync
# at close waits for the last stretch only, not for the whole file (a new base is ~850 MB).
WRITEBACK_BYTES = 8 << 20


class TableWriter:
    """Writes one table file front to back.  Keys must be strictly increasing.

    The file is created with O_EXCL (data files are never overwritten) and fsynced on close
    when ``sync`` is true; a synced writer also starts the write-out of every ``writeback``
    bytes of blocks as it goes (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: it waits for
    nothing and promises nothing — the fsync at close is still what makes the file durable
    and reports a failed write-out), so that fsync is short.  Cost: one pass, O(bytes
    written); memory: one block.
    """

    def __init__(
        self,
        path: str,
        kind: int,
        block_size: int = 32768,
        codec: str = "lz4",
        sync: bool = True,
        writeback: int = WRITEBACK_BYTES,
    ):
        self.path, self.kind, self.block_size, self.sync = path, kind, block_size, sync
        # Where the next write-out starts (bytes before it were handed to the kernel's
        # write-out) and how many stretches were started; never, without sync or the call.
        self._wb_next = writeback if sync and _SYNC_FILE_RANGE is not None and writeback > 0 else None
        self._wb_step, self._wb_from, self.writebacks = writeback, 0, 0
        self.codec = CODECS[codec]
        # PagesByURL and LinksByURL blocks, of the base and of delta runs, in lz4 pieces of a
        # quarter block (at most PIECE_BYTES): a get_page or inlinks lookup decompresses one
        # piece, not the block (format.md §1.1, design.md §2.1).
        self.index_codec = self.codec
        self.piece_bytes = max(1, min(block_size // 4, PIECE_BYTES))
        if self.codec == CODEC_LZ4 and kind in PIECES_KINDS:
            self.codec = CODEC_LZ4_PIECES
        self._f = open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb", buffering=1 << 20)
        self._keys: list[bytes] = []
        self._vals: list[bytes] = []
        # Pending records added as runs (add_run): their bytes and lengths; records added
        # after them as objects wait in _keys/_vals.
        self._chunks: list[bytes] = []
        self._lens: list[int] = []
        self._size = 0
        self._offset = 0
        self._last: bytes | None = None
        self.count = 0
        self.index_keys: list[bytes] = []  # first key of each block
        self.index_vals: list[bytes] = []  # offset, length, count, last key
        self.first_key: bytes | None = None

    def add(self, key: bytes, value: bytes) -> None:
        if self._last is not None and key <= self._last:
            raise CorruptionError(f"{self.path}: keys out of order: {key!r:.80} after {self._last!r:.80}" + DAMAGED)
        self._last = key
        self._keys.append(key)
        self._vals.append(value)
        self._size += len(key) + len(value) + 8
        if self._size >= self.block_size:
            self._flush()

    def add_many(self, keys: list[bytes], vals: list[bytes]) -> None:
        """Append sorted records (faster than ``add`` one by one); blocks are cut at the first
        record boundary past ``block_size``, as with ``add``."""
        if not keys:
            return
        if (self._last is not None and keys[0] <= self._last) or not all(map(lt, keys, keys[1:])):
            raise CorruptionError(f"{self.path}: keys out of order in add_many" + DAMAGED)
        self._last = keys[-1]
        bs = self.block_size
        total = sum(map(len, keys)) + sum(map(len, vals)) + 8 * len(keys)
        if total <= bs:
            # The common case (a merge appends about a block at a time): cut at this call's end
            # once past the block size, so a block holds at most about two block sizes.
            self._keys += keys
            self._vals += vals
            self._size += total
            if self._size >= bs:
                self._flush()
            return
        self._cut_records(keys, vals)

    def _cut_records(self, keys: list[bytes], vals: list[bytes]) -> None:
        """Append records one at a time as far as block cuts go: a block ends at the first record
        boundary where it reaches the block size (the order was checked by the caller)."""
        bs = self.block_size
        sizes = [a + b + 8 for a, b in zip(map(len, keys), map(len, vals))]
        cum = list(accumulate(sizes, initial=self._size))
        i, n = 0, len(keys)
        while i < n:
            j = bisect.bisect_left(cum, cum[i] - self._size + bs, i + 1)
            j = min(j, n)
            self._keys += keys[i:j]
            self._vals += vals[i:j]
            self._size += cum[j] - cum[i]
            i = j
            if self._size >= bs:
                self._flush()

    def add_run(self, data: bytes, lens: list[int]) -> None:
        """``add_many`` of records given as bytes: ``data`` is their keys and values back to
        back, ``lens`` their lengths (key, value, key, value, ...).  Blocks are cut exactly
        where ``add_many`` would cut; a merge hands the runs of untouched records of an old
        block over this way, as one slice of the block's bytes (``MergeCursor``), so no record
        becomes an object.  The caller guarantees the order inside the run; its first key is
        checked against what was written before."""
        if not lens:
            return
        first = data[: lens[0]]
        if self._last is not None and first <= self._last:
            raise CorruptionError(f"{self.path}: keys out of order: {first!r:.80} after {self._last!r:.80}" + DAMAGED)
        self._last = data[len(data) - lens[-1] - lens[-2] : len(data) - lens[-1]]
        n = len(lens) >> 1
        bs = self.block_size
        total = len(data) + 8 * n
        if total <= bs:
            self._put_run(data, lens, total)
            return
        # Cut as _cut_records cuts, the cuts found in one call (no Python code per record).
        i = a = 0
        cuts = run_cuts(lens, self._size, bs)
        for c in range(0, len(cuts), 2):
            j, e = cuts[c], cuts[c + 1]
            self._put_run(data[a:e] if (a or e != len(data)) else data, lens[2 * i : 2 * j], e - a + 8 * (j - i))
            i, a = j, e
        if i < n:
            self._put_run(data[a:] if a else data, lens[2 * i :], len(data) - a + 8 * (n - i))

    def _runify(self) -> None:
        """Pending list records (added before a run) become run bytes."""
        self._chunks.append(b"".join(chain.from_iterable(zip(self._keys, self._vals))))
        self._lens += chain.from_iterable(zip(map(len, self._keys), map(len, self._vals)))
        self._keys, self._vals = [], []

    def _put_run(self, data: bytes, lens: list[int], size: int) -> None:
        if self._keys:
            self._runify()
        self._chunks.append(data)
        self._lens += lens
        self._size += size
        if self._size >= self.block_size:
            self._flush()

    def absorb_run(self, data: bytes, lens: list[int]) -> None:
        """Append a whole decoded old block, given as a run (``add_run``), and cut there (at most
        1.5 block sizes), so the blocks after it line up with the old file again."""
        if not lens:
            self._flush()
            return
        first = data[: lens[0]]
        if self._last is not None and first <= self._last:
            raise CorruptionError(f"{self.path}: absorbed block out of order" + DAMAGED)
        self._last = data[len(data) - lens[-1] - lens[-2] : len(data) - lens[-1]]
        self._put_run(data, lens, 0)
        self._flush()

    @property
    def pending_bytes(self) -> int:
        return self._size

    def add_raw_block(self, data: bytes, first: bytes, last: bytes, count: int) -> None:
        """Append an already encoded block (carried over from another table unchanged)."""
        if self._last is not None and first <= self._last:
            raise CorruptionError(f"{self.path}: raw block out of order" + DAMAGED)
        self._flush()
        self._emit(data, first, last, count)
        self._last = last

    def _emit(self, data: bytes, first: bytes, last: bytes, count: int) -> None:
        self._write(data)
        if self.first_key is None:
            self.first_key = first
        self.index_keys.append(first)
        self.index_vals.append(_INDEX_VALUE.pack(self._offset, len(data), count) + last)
        self._offset += len(data)
        self.count += count
        if self._wb_next is not None and self._offset >= self._wb_next:
            self._writeback()

    def _writeback(self) -> None:
        """Start the kernel's write-out of the whole pages written since the last call (a hint:
        a failure here is left to the fsync at close, which reports any failed write-out).  The
        page the next block continues is left for the next call: written out now, it would be
        dirtied again, and written twice."""
        try:
            self._f.flush()
        except OSError as e:
            raise self._full(e, 0) from None
        f, start, end = _SYNC_FILE_RANGE, self._wb_from, self._offset - self._offset % mmap.PAGESIZE
        if f is not None and end > start and f(self._f.fileno(), start, end - start, _SYNC_FILE_RANGE_WRITE) == 0:
            self.writebacks += 1
        self._wb_from = end
        self._wb_next = self._offset + self._wb_step

    def _write(self, data: bytes) -> None:
        try:
            self._f.write(data)
        except OSError as e:
            raise self._full(e, len(data)) from None

    def _full(self, e: OSError, more: int) -> OSError:
        """A DiskFull for ENOSPC/EDQUOT (the bytes not yet on disk are the least needed)."""
        if not is_disk_full(e):
            return e
        try:
            on_disk = os.fstat(self._f.fileno()).st_size
        except (OSError, ValueError):
            on_disk = 0
        return DiskFull.at(self.path, max(more, self._offset - on_disk + more), e)

    def flush(self) -> None:
        """End the current block here (a merge that wants the next block aligned)."""
        self._flush()

    def _flush(self) -> None:
        if self._chunks:
            if self._keys:
                self._runify()
            self._emit(*encode_run(b"".join(self._chunks), self._lens, self.codec, self.piece_bytes))
            self._chunks, self._lens, self._size = [], [], 0
            return
        if not self._keys:
            return
        data = encode_block(self._keys, self._vals, self.codec, self.piece_bytes)
        self._emit(data, self._keys[0], self._keys[-1], len(self._keys))
        self._keys, self._vals, self._size = [], [], 0

    def close(self, meta: dict | None = None) -> dict:
        """Write index, meta block and footer; returns {records, bytes, first, last}."""
        self._flush()
        index_off = self._offset
        index = encode_block(self.index_keys, self.index_vals, self.index_codec) if self.index_keys else b""
        self._write(index)
        meta_off = index_off + len(index)
        info = dict(
            meta or {},
            records=self.count,
            blocks=len(self.index_keys),
            first=self.first_key.hex() if self.first_key is not None else None,
            last=self._last.hex() if self._last is not None else None,
        )
        mblock = encode_block([b"meta"], [json.dumps(info, sort_keys=True).encode()], CODEC_NONE)
        self._write(mblock)
        self._write(
            _FOOTER.pack(
                index_off, len(index), meta_off, len(mblock), self.count, self.kind, TABLE_VERSION, TABLE_MAGIC
            )
        )
        try:
            self._f.flush()
            if self.sync:
                os.fsync(self._f.fileno())
        except OSError as e:
            raise self._full(e, 0) from None
        self._f.close()
        size = meta_off + len(mblock) + FOOTER_SIZE
        return {"records": self.count, "bytes": size}

    def abort(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass  # the buffered tail could not be written (a full disk): the file goes anyway
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class BlockCache:
    """LRU cache of decompressed, verified blocks (``RawBlock``) — and, of a block in lz4 pieces
    that a point lookup read, its header and pieces (bytes) — bounded by their size in bytes.

    One cache serves the tables of one reader.  Keys are ints: a table's ``new_id()`` plus the
    block number (negative for a header or a piece: ``TableReader._piece``), so a hit is one dict
    lookup (no tuple is built) and tables never share keys.
    Runtime complexity: O(1) per get and put (an OrderedDict kept in use order).
    """

    def __init__(self, max_bytes: int = 128 << 20):
        self.max_bytes, self.bytes = max_bytes, 0
        self._d: OrderedDict = OrderedDict()
        self._ids = 0

    def new_id(self) -> int:
        """The key base of one more table: its blocks are ``new_id() + i`` (fewer than 2**40)."""
        self._ids += 1
        return self._ids << 40

    def get(self, key):
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
        return v

    def put(self, key, value, size: int) -> None:
        if size > self.max_bytes:
            return
        self._d[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, s) = self._d.popitem(last=False)
            self.bytes -= s


class _OnFirstUse:
    """An attribute a lazy ``TableReader`` loads on first use: reading it calls the reader's
    method ``load``, which sets it in the instance.  A non-data descriptor, so once set the
    instance's value is found first and a read costs what a plain attribute does."""

    def __init__(self, load: str):
        self.load = load

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None):
        if obj is None:
            return self
        getattr(obj, self.load)(self.name)
        return obj.__dict__[self.name]


class TableReader:
    """A table file opened for reading.  The index (one entry per block) is held in memory.

    Point lookup: O(log blocks) in memory + one block read and decompress (cached) + a binary
    search inside it.
    """

    # The index lists and the meta block: set by ``_load_index``, at open or (lazy) on first use.
    meta: dict = _OnFirstUse("_load_deferred_index")
    first_keys: list[bytes] = _OnFirstUse("_load_deferred_index")
    last_keys: list[bytes] = _OnFirstUse("_load_deferred_index")
    offsets = _OnFirstUse("_load_deferred_index")
    lengths = _OnFirstUse("_load_deferred_index")
    counts = _OnFirstUse("_load_deferred_index")
    # The index block kept as it is, searched in place by short_range: loaded (with the meta
    # block) on its own while nothing else is, so that a reader doing only short lookups never
    # builds the lists (4 LinksByURL indexes of 18k entries at 1M pages: ~2 ms each against
    # ~10).  None once the lists exist (one copy of an index) or when not compiled.
    _ix = _OnFirstUse("_load_deferred_ix")

    # The blocks this reader verified whole (one byte each, 1: its CRC checked over the whole
    # block, by ``_read``, a raw copy's check or a compiled ``LevelSeek``), when a stage tracks
    # them (``track``) so that its scrub skips them; None: not tracked.
    verified: bytearray | None = None

    def __init__(self, path: str, kind: int | None = None, cache: BlockCache | None = None, lazy: bool = False):
        """Open ``path``: refused at once if missing, not a regular file, truncated, not a table
        or of another kind (the footer), or (unless ``lazy``) with a damaged index or meta
        block.  ``lazy`` defers reading the index and meta block (and their checks) to the
        first use of either: a reader opens every table of a generation (8 at k = 2, ~0.1 s of
        index at 1M pages) and a lookup needs one or two."""
        self.path = path
        self.cache = cache
        # The cache's dict and this table's key base, held here for the lookup fast path.
        self._cd = cache._d if cache is not None else None
        self._cid = cache.new_id() if cache is not None else 0
        try:
            # O_NONBLOCK: a FIFO in a table's place must not hang the open (refused below)
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise CorruptionError(f"{path}: cannot open ({e.strerror})") from None
        try:
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                raise CorruptionError(f"{path}: not a regular file")
            self._load_footer(kind)
            if lazy:
                self._index_wanted = True
            else:
                self._load_index()
        except BaseException:
            os.close(self._fd)
            raise

    def _load_deferred_ix(self, name: str) -> None:
        if "_index_wanted" in self.__dict__:
            self._live()
            self._load_ix()
        else:
            self._ix = None

    def _load_deferred_index(self, name: str) -> None:
        if "_index_wanted" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._live()
        del self._index_wanted
        try:
            self._load_index()
        except BaseException:
            # Damaged: drop what the load set before it failed, so every later use loads
            # (and raises) again rather than reading a half-loaded index.
            for n in _LOADED:
                self.__dict__.pop(n, None)
            self._index_wanted = True
            raise

    def _load(self, kind: int | None) -> None:
        self._load_footer(kind)
        self._load_index()

    def _load_footer(self, kind: int | None) -> None:
        """The footer, checked against the file size, the magic, version and ``kind``: what
        names a truncated, foreign or wrong-kind file on open, even a lazy one."""
        size = os.fstat(self._fd).st_size
        self.file_bytes = size
        if size < FOOTER_SIZE:
            raise CorruptionError(f"{self.path}: truncated (size {size} < footer {FOOTER_SIZE})")
        foot = os.pread(self._fd, FOOTER_SIZE, size - FOOTER_SIZE)
        io, il, mo, ml, count, k, version, magic = _FOOTER.unpack(foot)
        # The footer has no checksum of its own: every field is checked against the others, the
        # file size and the (checksummed) index, so a damaged byte anywhere in it is reported.
        bad = f"{self.path}: corrupt footer at offset {size - FOOTER_SIZE}"
        if magic != TABLE_MAGIC:
            raise CorruptionError(f"{self.path}: not a webdb table (bad magic {magic!r})")
        if version != TABLE_VERSION:
            if TABLE_VERSION < version < 256:
                raise CorruptionError(
                    f"{bad}: version field {version} (a table written by a newer webdb, or a damaged footer)"
                )
            raise CorruptionError(f"{bad}: version field {version} is not a table format version")
        if foot[33:36] != b"\0\0\0":
            raise CorruptionError(f"{bad}: reserved bytes are not zero")
        if kind is not None and k != kind:
            raise CorruptionError(f"{self.path}: table kind {k}, expected {kind} (corrupt footer, or the wrong file)")
        if io + il != mo or mo + ml + FOOTER_SIZE != size:
            raise CorruptionError(f"{bad}: offsets do not match the file size")
        self.kind, self.count, self.data_end = k, count, io
        self._pieces = k in PIECES_KINDS
        self._blocks_at = (il, mo, ml)

    def _load_ix(self) -> None:
        """``_ix``: the index block, checksummed and every entry checked in one C pass, kept
        as it is; and the meta block.  Anything not sound loads the lists, which name it."""
        io, il, count = self.data_end, self._blocks_at[0], self.count
        rb = unpack_block(os.pread(self._fd, il, io), f"{self.path}: index block at offset {io}") if il else None
        ix = index_in_place(rb, io, count) if rb is not None else None
        if ix is None:
            self.first_keys  # noqa: B018 - loads the lists (or raises naming the fault)
            self._ix = None
            return
        self._load_meta()
        self._ix = ix

    def _load_index(self) -> None:
        """The index and meta block (checksummed), every index entry checked."""
        io, il, count = self.data_end, self._blocks_at[0], self.count
        ix = self.__dict__.get("_ix")
        if ix is not None:  # already read and checked: only the lists to build
            rb = in_place_block(ix)
        else:
            rb = unpack_block(os.pread(self._fd, il, io), f"{self.path}: index block at offset {io}") if il else None
        ent = index_entries(rb, _INDEX_VALUE.size) if rb is not None else ([], [], b"")
        if ent is None or not self._index_bulk(*ent, io):
            ikeys, ivals = rb.split() if rb is not None else ([], [])
            self.first_keys = ikeys
            self._index_each(ikeys, ivals, io)
        # One copy of the index in memory: once the lists exist, short_range searches them.
        self._ix = None
        self._load_meta()
        if sum(self.counts) != count:
            raise CorruptionError(f"{self.path}: index counts {sum(self.counts)} != footer count {count}")

    def _load_meta(self) -> None:
        mo, ml = self._blocks_at[1:]
        mk, mv = decode_block(os.pread(self._fd, ml, mo), f"{self.path}: meta block at offset {mo}")
        try:
            self.meta = json.loads(mv[0])
        except (ValueError, IndexError):
            raise CorruptionError(f"{self.path}: meta block at offset {mo} is not JSON") from None
        if not isinstance(self.meta, dict):
            raise CorruptionError(f"{self.path}: meta block at offset {mo} is not a JSON object")

    def _index_bulk(self, ikeys: list[bytes], last_keys: list[bytes], fixed_bytes: bytes, io: int) -> bool:
        """Read the index entries (``index_entries``) into arrays and check them all with
        C-level operations (an index of 20k blocks in a few milliseconds); False if any check
        fails (``_index_each`` then names the first bad entry)."""
        # Entry = offset u64, length u32, count u32 (LE): as u64 pairs, then the second of each
        # pair as two u32.
        fixed = array("Q", fixed_bytes)
        if _BIG:
            fixed.byteswap()
        offsets = fixed[0::2]
        lc = array("I", fixed[1::2].tobytes())
        lengths, counts = lc[0::2], lc[1::2]
        ends = array("Q", accumulate(lengths, initial=0))
        # Blocks back to back from offset 0 to the index, each at least a trailer long, keys
        # in order within and across blocks: what _index_each checks one entry at a time.
        if (
            ends[-1] != io
            or ends[:-1] != offsets
            or (lengths and min(lengths) < BLOCK_TRAILER_SIZE)
            or not all(map(ge, last_keys, ikeys))
            or not all(map(gt, ikeys[1:], last_keys))
        ):
            return False
        self.first_keys, self.offsets, self.lengths, self.counts = ikeys, offsets, lengths, counts
        self.last_keys = last_keys
        return True

    def _index_each(self, ikeys: list[bytes], ivals: list[bytes], io: int) -> None:
        """Check the index entry by entry and raise CorruptionError naming the first bad one."""
        self.offsets = [0] * len(ivals)
        self.lengths = [0] * len(ivals)
        self.counts = [0] * len(ivals)
        self.last_keys: list[bytes] = [b""] * len(ivals)
        pos = 0
        for i, v in enumerate(ivals):
            where = f"{self.path}: index entry {i} (index block at offset {io})"
            if len(v) < _INDEX_VALUE.size:
                raise CorruptionError(f"{where}: {len(v)} bytes, shorter than an entry")
            off, length, n = self.offsets[i], self.lengths[i], self.counts[i] = _INDEX_VALUE.unpack_from(v)
            last = self.last_keys[i] = v[_INDEX_VALUE.size :]
            # Blocks are written back to back from offset 0 to the index.
            if off != pos or length < BLOCK_TRAILER_SIZE or off + length > io:
                raise CorruptionError(f"{where}: block at {off}+{length} is not where the previous block ends ({pos})")
            if last < ikeys[i] or (i and ikeys[i] <= self.last_keys[i - 1]):
                raise CorruptionError(f"{where}: keys out of order with the previous block")
            pos = off + length
        if pos != io:
            raise CorruptionError(f"{self.path}: index covers {pos} bytes, the data blocks end at {io}")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def nblocks(self) -> int:
        return len(self.first_keys)

    def _live(self) -> None:
        if self._fd < 0:
            raise ClosedError(f"{self.path}: read after the reader was closed")

    def raw_block(self, i: int) -> bytes:
        self._live()
        return os.pread(self._fd, self.lengths[i], self.offsets[i])

    def track(self, masks: dict[str, bytearray]) -> None:
        """Note the blocks this reader verifies whole in ``masks[self.path]`` (made on first use,
        shared by every reader of the path that tracks into ``masks``): ``check_crcs`` given
        that mask skips them."""
        ix = self._ix
        n = ix[1] if ix is not None else self.nblocks
        m = masks.setdefault(self.path, bytearray(n))
        if len(m) != n:
            raise CorruptionError(f"{self.path}: {n} blocks, another reader of it saw {len(m)}")
        self.verified = m

    def check_crcs(self, share: int = 0, shares: int = 1, skip: bytearray | None = None) -> int:
        """Verify the CRC of every block of the ``share``-th of ``shares`` contiguous slices of
        the file (over the compressed bytes: nothing is decoded) but those ``skip`` marks (a
        byte per block, nonzero: verified already); CorruptionError naming the block.  Returns
        the bytes read.  The slice is mapped, not read: the CRC runs over the page cache's own
        pages (a scrub reads every kept link-table block each round, ~4 GB at 3M pages, and
        copying them out first cost as much as the CRC); pages of skipped blocks are never
        touched.  With the compiled codec one C call checks each stretch of blocks not skipped
        (``_blockc.crc_blocks``: the registered CRC's C function, no Python call per block);
        the Python loop names a damaged block."""
        n = self.nblocks
        i, end = n * share // shares, n * (share + 1) // shares
        if skip is not None:
            if len(skip) != n:
                raise ValueError(f"{self.path}: a mask of {len(skip)} blocks for {n}")
            # The stretches of blocks not marked, [a, b), within [i, end).
            stretches = []
            a = skip.find(0, i, end)
            while a >= 0:
                b = skip.find(1, a, end)  # a mark is 1 (track's writers set no other value)
                b = end if b < 0 else b
                stretches.append((a, b))
                a = skip.find(0, b, end) if b < end else -1
        else:
            stretches = [(i, end)] if i < end else []
        if not stretches:
            return 0
        self._live()
        offsets, lengths = self.offsets, self.lengths
        i, end = stretches[0][0], stretches[-1][1]
        start, stop = offsets[i], offsets[end - 1] + lengths[end - 1]
        size = os.fstat(self._fd).st_size
        if stop > size:
            b = next(b for b in range(i, end) if offsets[b] + lengths[b] > size)
            raise CorruptionError(f"{self.where(b)}: truncated")
        base = start - start % mmap.ALLOCATIONGRANULARITY
        m = mmap.mmap(self._fd, stop - base, prot=mmap.PROT_READ, offset=base)
        try:
            m.madvise(mmap.MADV_SEQUENTIAL)
            view = memoryview(m)
            try:
                done = 0
                for i, end in stretches:
                    first = i
                    if blockc is not None:
                        lens = lengths[i:end]
                        if not isinstance(lens, array) or lens.itemsize != 4:
                            lens = array("I", lens)
                        bad = blockc.crc_blocks(view[offsets[i] - base :], lens, crc32)
                        if bad is not None:
                            first = end if bad < 0 else i + bad
                    for b in range(first, end):
                        o = offsets[b] - base
                        # No slice outlives its call: the map closes only with no view on it.
                        if not block_crc_ok(view[o : o + lengths[b]]):
                            check_block_crc(bytes(view[o : o + lengths[b]]), self.where(b))  # names it
                    done += offsets[end - 1] + lengths[end - 1] - offsets[i]
            finally:
                view.release()
        finally:
            m.close()
        return done

    def raw_range(self, i: int, j: int) -> bytes:
        """The bytes of blocks i..j-1 (contiguous on disk)."""
        self._live()
        start = self.offsets[i]
        return os.pread(self._fd, self.offsets[j - 1] + self.lengths[j - 1] - start, start)

    def where(self, i: int) -> str:
        return f"{self.path}: block {i} at offset {self.offsets[i]}"

    def raw(self, i: int, fill_cache: bool = True) -> RawBlock:
        """Block i decompressed and verified; cached (LRU, by its size) if ``fill_cache`` —
        scans pass False, as LevelDB iterators do, so one long scan does not evict hot blocks."""
        self._live()
        d = self._cd
        if d is not None:
            hit = d.get(self._cid + i)
            if hit is not None:
                d.move_to_end(self._cid + i)
                return hit[0]
        return self._read(i, fill_cache)

    def _read(self, i: int, fill_cache: bool = True) -> RawBlock:
        """Block i read from the file: checksum, decompression and record count verified."""
        if self._fd < 0:
            self._live()
        data = os.pread(self._fd, self.lengths[i], self.offsets[i])
        if len(data) != self.lengths[i]:
            raise CorruptionError(f"{self.where(i)}: truncated")
        rb = unpack_block(data, lambda: self.where(i))
        if rb.n != self.counts[i]:
            raise CorruptionError(f"{self.where(i)}: holds {rb.n} records, index says {self.counts[i]}")
        if self.verified is not None:
            self.verified[i] = 1
        if fill_cache and self.cache is not None:
            self.cache.put(self._cid + i, rb, len(rb.raw) + 100)
        return rb

    def block(self, i: int, fill_cache: bool = True) -> tuple[list[bytes], list[bytes]]:
        """Block i as (keys, values) lists."""
        return self.raw(i, fill_cache).split()

    def get(self, key: bytes) -> bytes | None:
        """Value of ``key`` or None: a binary search over the in-memory index, then one over the
        block (cached).  A key after the last key of the block it falls in is absent without
        reading a block.  The hot path of every point lookup: kept to a few attribute reads."""
        i = bisect_right(self.first_keys, key) - 1
        if i < 0 or key > self.last_keys[i]:
            return None
        if self._fd < 0:
            self._live()
        if self._pieces:
            rb = self._piece(i, key)
            if rb is not None:
                return rb.get(key)
        d = self._cd
        hit = d.get(self._cid + i) if d is not None else None
        if hit is None:
            return self._read(i).get(key)
        d.move_to_end(self._cid + i)
        return hit[0].get(key)

    def _piece(self, i: int, key: bytes) -> RawBlock | None:
        """The piece of block i that can hold ``key``, through the cache, as the compiled lookup
        reads a block in lz4 pieces (format.md §1.1): the block's header (cached, read from its
        tail on a miss) picks the piece, which is read, checked and decompressed alone (cached
        as its raw bytes).
        Cache keys: ``-(cid + offset)`` for the header, ``-(cid + offset + 1 + at)`` for the
        piece at ``at`` in the body (never a block's ``cid + i``).  None if the block is not in
        pieces or is cached whole (read it as a block); CorruptionError names a damaged header
        or piece."""
        d, off = self._cd, self.offsets[i]
        hk = -(self._cid + off)
        hit = d.get(hk) if d is not None else None
        if hit is not None:
            d.move_to_end(hk)
            header = hit[0]
        elif d is not None and self._cid + i in d:
            return None
        else:
            header = self._header(i)
            if header is None:
                return None
            if self.cache is not None:
                self.cache.put(hk, header, len(header) + 100)
        p, at, length, count, crc, first = piece_of(header, key)
        pk = -(self._cid + off + 1 + at)
        hit = d.get(pk) if d is not None else None
        if hit is not None:
            d.move_to_end(pk)
            return piece_raw_block(hit[0])
        data = os.pread(self._fd, length, off + at)
        if len(data) != length:
            raise CorruptionError(f"{self.where(i)}: truncated")
        try:
            raw = unpack_piece(data, p, crc, count, first)[0]
        except (ValueError, lz4.block.LZ4BlockError) as e:
            raise CorruptionError(f"{self.where(i)}: undecodable block ({e})") from None
        if self.cache is not None:
            self.cache.put(pk, raw, len(raw) + 100)
        return piece_raw_block(raw)

    def _header(self, i: int) -> bytes | None:
        """The pieces header of block i read from its tail (trailer, header) and checked — its
        CRC, the piece table against the block's size, the total count against the index — or
        None if the block is not in pieces."""
        length, off = self.lengths[i], self.offsets[i]
        t = min(length, TAIL_BYTES)
        tail = os.pread(self._fd, t, off + length - t)
        if len(tail) != t:
            raise CorruptionError(f"{self.where(i)}: truncated")
        if t < 13 or tail[-5] != CODEC_LZ4_PIECES:
            return None
        hlen = _U32.unpack_from(tail, t - 13)[0]
        if t < hlen + 13 <= length:  # a header longer than the tail read: read it all
            t = hlen + 13
            tail = os.pread(self._fd, t, off + length - t)
            if len(tail) != t:
                raise CorruptionError(f"{self.where(i)}: truncated")
        try:
            header, tab, _ = pieces_header(memoryview(tail)[:-BLOCK_TRAILER_SIZE], length - BLOCK_TRAILER_SIZE)
        except ValueError as e:
            raise CorruptionError(f"{self.where(i)}: undecodable block ({e})") from None
        n = sum(c for _, c, _ in tab)
        if n != self.counts[i]:
            raise CorruptionError(f"{self.where(i)}: holds {n} records, index says {self.counts[i]}")
        return header

    def items(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with start <= key < stop, in order, one block in memory at a time.
        The first block is searched in place and only its records in range are split out."""
        i = 0 if start is None else max(0, bisect.bisect_right(self.first_keys, start) - 1)
        for b in range(i, self.nblocks):
            if stop is not None and self.first_keys[b] >= stop:
                return
            rb = self.raw(b, fill_cache=b == i)
            lo = 0 if start is None or b != i else rb.find(start)
            if stop is None or self.last_keys[b] < stop:
                yield from zip(*rb.split(lo))
                continue
            j = lo
            while j < rb.n:
                k = rb.key(j)
                if k >= stop:
                    return
                yield k, rb.value(j)
                j += 1
            return

    def ranges(self, start: bytes, stop: bytes) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """Records with start <= key < stop as (keys, values) lists, one block at a time: each
        block is searched for both ends and only the records in range are split out (a short
        range costs two binary searches, not a block split).  Blocks in the cache serve it, but
        a range read does not fill the cache, as LevelDB's iterators with ``fill_cache`` off:
        a scan must not evict the blocks point lookups reuse, and a block read once is freed
        at once (its memory reused by the next read rather than new pages faulted in).

        A file whose index is kept in place (``_ix``: a lazy table's first use was a short
        lookup, compiled) is read through it (``_ranges_in_place``), so that a URL streamed
        by ``inlinks`` does not build the index lists beside the bytes its reader's compiled
        lookups search (at 3M pages ~4x the bytes, for one URL)."""
        ix = self._ix
        if ix is not None:
            return self._ranges_in_place(ix, start, stop)
        return self._ranges_of_lists(start, stop)

    def _ranges_of_lists(self, start: bytes, stop: bytes) -> Iterator[tuple[list[bytes], list[bytes]]]:
        fk, lk = self.first_keys, self.last_keys
        b = bisect_right(fk, start) - 1
        if b < 0:
            b = 0
        elif lk[b] < start:
            b += 1  # start falls between blocks b and b + 1: block b is not read
        first = True
        while b < len(fk) and fk[b] < stop:
            rb = self.raw(b, False)
            lo = rb.find(start) if first else 0
            hi = rb.n if lk[b] < stop else rb.find(stop)
            if lo < hi:
                yield rb.split(lo, hi)
            if hi < rb.n:
                return
            b += 1
            first = False

    def _ranges_in_place(
        self, ix: tuple[bytes, int], start: bytes, stop: bytes
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """``ranges`` with the index searched in place (a RawBlock of its entries: first key,
        then offset, length, count and last key): the same blocks read, checked and split."""
        rb = in_place_block(ix)
        n = rb.n
        j = rb.find(start)
        b = j if j < n and rb.key(j) == start else j - 1  # bisect_right(first keys) - 1
        if b < 0:
            b = 0
        elif rb.value(b)[16:] < start:
            b += 1  # start falls between blocks b and b + 1: block b is not read
        first = True
        while b < n and rb.key(b) < stop:
            v = rb.value(b)
            off, length, count = _INDEX_VALUE.unpack_from(v)
            blk = self._raw_at(b, off, length, count)
            lo = blk.find(start) if first else 0
            hi = blk.n if v[16:] < stop else blk.find(stop)
            if lo < hi:
                yield blk.split(lo, hi)
            if hi < blk.n:
                return
            b += 1
            first = False

    def _raw_at(self, i: int, off: int, length: int, count: int) -> RawBlock:
        """Block i (at ``off``, ``length`` bytes, ``count`` records as the index says) as
        ``raw(i, False)`` gives it, without the index lists."""
        self._live()
        d = self._cd
        if d is not None:
            hit = d.get(self._cid + i)
            if hit is not None:
                d.move_to_end(self._cid + i)
                return hit[0]
        where = f"{self.path}: block {i} at offset {off}"
        data = os.pread(self._fd, length, off)
        if len(data) != length:
            raise CorruptionError(f"{where}: truncated")
        rb = unpack_block(data, where)
        if rb.n != count:
            raise CorruptionError(f"{where}: holds {rb.n} records, index says {count}")
        return rb

    def blocks_of_range(self, start: bytes, stop: bytes) -> tuple[int, int]:
        """The blocks b0..b1-1 that can hold records with start <= key < stop (b0 == b1: none
        can — the range falls before, after or between blocks, nothing to read).  Binary
        searches in memory: the index for ``start``, a few blocks after it for ``stop``."""
        fk = self.first_keys
        b = bisect_right(fk, start) - 1
        if b < 0:
            b = 0
        elif self.last_keys[b] < start:
            b += 1  # start falls after block b's last key
        return b, bisect_left(fk, stop, b, min(b + SHORT_BLOCKS + 1, len(fk)))

    def block_range(self, b: int, start: bytes, stop: bytes) -> tuple[list[bytes], list[bytes]]:
        """The records of block ``b`` with start <= key < stop, as (keys, values): two binary
        searches in the block (one if it ends before ``stop``), then only those split out.  The
        block is read through the cache but does not fill it (as ``ranges``).  Compiled, a block
        read from the file is checked, decompressed, searched and split in one C call."""
        d = self._cd
        if COMPILED and (d is None or self._cid + b not in d):
            if self._fd < 0:
                self._live()
            data = os.pread(self._fd, self.lengths[b], self.offsets[b])
            r = unpack_range(data, start, stop) if len(data) == self.lengths[b] else None
            if r is not None and r[2] == self.counts[b]:
                return r[0], r[1]
            # Not sound: the general path below names what is wrong.
        rb = self.raw(b, False)
        # Both ends searched as the C path searches them (over the whole block; in lz4 pieces,
        # in the pieces the range reaches): a crafted block whose keys are out of order (its
        # CRCs sound) reads the same records compiled or not.
        if not COMPILED and self.kind in PIECES_KINDS:
            r = pieces_split(rb, self.raw_block(b), start, stop)
            if r is not None:
                return r
        return rb.split(rb.find(start), rb.find(stop))

    def blocks_range(self, b0: int, b1: int, start: bytes, stop: bytes) -> tuple[list[bytes], list[bytes]]:
        """``block_range`` of blocks b0..b1-1, as one (keys, values)."""
        if b1 == b0 + 1:
            return self.block_range(b0, start, stop)
        ks: list[bytes] = []
        vs: list[bytes] = []
        for b in range(b0, b1):
            k, v = self.block_range(b, start, stop)
            ks += k
            vs += v
        return ks, vs

    def short_args(self) -> tuple[bytes, int, int, bool] | None:
        """What ``short_file`` reads this file with — its index in place, fd, whether its blocks
        are in pieces — or None when the Python path must (not compiled, an index whose
        lists were loaded, a closed file): for ``Levels.short_range``'s one C call."""
        ix = self._ix
        if ix is None or self._fd < 0:
            return None
        return ix[0], ix[1], self._fd, self.kind in PIECES_KINDS

    def lookup_args(self, run: bool) -> tuple[bytes, int, int, bool, bool, int] | None:
        """What a compiled ``Lookup`` reads this file with (``lookups``): ``short_args``, whether
        it is a delta ``run``, its key base in the cache; None as ``short_args``."""
        a = self.short_args()
        return None if a is None else (*a, run, self._cid)

    def short_range(self, start: bytes, stop: bytes) -> tuple[list[bytes], list[bytes]] | None:
        """The records with start <= key < stop as (keys, values) if they lie in at most
        ``SHORT_BLOCKS`` blocks, else None (read them with ``ranges``, a block at a time): what a
        lookup of a short range (one URL's inlinks) takes before the generator of ``ranges``.
        Compiled, a lazy table's index is searched in place and its blocks read and unpacked
        in one C call (``short_file``); a block that is not sound takes the path below."""
        ix = self._ix
        if ix is not None and self._fd >= 0:
            kv = short_file(ix, self._fd, start, stop, SHORT_BLOCKS, self.kind in PIECES_KINDS)
            if kv is not False:
                return kv
        b0, b1 = self.blocks_of_range(start, stop)
        if b1 - b0 > SHORT_BLOCKS:
            return None
        return self.blocks_range(b0, b1, start, stop) if b1 > b0 else ([], [])

    def prefix(self, p: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Records whose key starts with ``p``."""
        stop = prefix_end(p)
        return self.items(p, stop)

    def keys_blocks(self) -> Iterator[list[bytes]]:
        for b in range(self.nblocks):
            yield self.block(b)[0]


def lookups(files: list[tuple[TableReader, bool]], cache: BlockCache | None, page: type, link: type | None = None):
    """A compiled ``Lookup`` (``block.point_lookup``) of one table's files — (file, whether a
    delta run), newest first, all of one reader's ``cache`` — or None when not compiled or a
    file's index is not kept in place (the Python path, ``TableReader.get``, reads it).  With
    ``link`` (records.Link) it also answers ``links`` (LinksByURL, ``SHORT_BLOCKS`` blocks of
    each file at most).  It holds the files' fds: used only while they are open."""
    args = []
    for t, run in files:
        a = t.lookup_args(run)
        if a is None:
            return None
        args.append(a)
    d, put = (cache._d, cache.put) if cache is not None else (None, None)
    decode = None if link is None else (link, LINK_FIXED, LINK_OUT, SHORT_BLOCKS)
    return point_lookup(tuple(args), d, put, page, decode)


def prefix_end(p: bytes) -> bytes | None:
    """Smallest key greater than every key with prefix p (None: no bound)."""
    p = p.rstrip(b"\xff")
    return p[:-1] + bytes((p[-1] + 1,)) if p else None


class Probe:
    """Forward-only lookups in one table for keys given in increasing order.

    Each block is decompressed at most once per probe pass and only its keys are split out, so
    probing m sorted keys costs O(m log b) comparisons plus one key split per block that holds
    any of them.  Compiled, on a table whose index is kept in place (opened ``lazy``), ``get``
    (and ``has_prefix``) is one call of a one-file ``LevelSeek`` (seek.c): the block's offsets searched in place, no
    keys split out, and of a file in lz4 pieces only the piece a key falls in decompressed; a
    key below the last one asked, or a block or piece it finds unsound, hands over to the
    Python path (which names the fault).
    """

    def __init__(self, table: TableReader | None):
        self.t = table
        self._bi = -1
        self._rb: RawBlock | None = None
        self._keys: list[bytes] = []
        a = table.short_args() if table is not None and blockc is not None else None
        self._c = blockc.levelseek(((*a, False),), crc32, lz4_decompress) if a is not None else None
        self._last = b""

    def ceiling(self, key: bytes) -> tuple[bytes, bytes] | None:
        """The first record with record key >= key, or None."""
        t = self.t
        if t is None or not t.nblocks:
            return None
        keys = self._keys
        if keys and keys[0] <= key <= keys[-1]:
            j = bisect.bisect_left(keys, key)  # in the block at hand (keys come in order)
            return keys[j], self._rb.value(j)
        i = max(bisect.bisect_right(t.first_keys, key) - 1, 0)
        while i < t.nblocks:
            if i != self._bi:
                self._rb = t.raw(i)
                self._keys = self._rb.keys()
                self._bi = i
            j = bisect.bisect_left(self._keys, key)
            if j < len(self._keys):
                return self._keys[j], self._rb.value(j)
            i += 1
        return None

    def get(self, key: bytes) -> bytes | None:
        c = self._c
        if c is not None:
            if key >= self._last:
                self._last = key
                v = c.get(key)
                if v is not False:
                    return v
            self._c = None
        r = self.ceiling(key)
        return r[1] if r is not None and r[0] == key else None

    def has_prefix(self, p: bytes) -> bool:
        """Whether a key starts with ``p``.  Compiled, one range read of the ``LevelSeek``
        (``[p, prefix_end(p))``: the block's offsets searched in place, only that range's
        records split out) instead of the Python path's whole key list of each block.  The
        range read leaves the LevelSeek at its end: a later key or prefix below ``prefix_end(p)``
        (as ``p + b"x"``) is below the last one asked and goes to the Python path."""
        c = self._c
        if c is not None:
            pe = prefix_end(p)
            if pe is not None and p >= self._last:
                self._last = pe
                kv = c.range(p, pe)
                if kv is not False:
                    return bool(kv[0])
                self._c = None  # a block not sound: the Python path reads it and names it
            elif pe is not None:
                self._c = None
        r = self.ceiling(p)
        return r is not None and r[0].startswith(p)
