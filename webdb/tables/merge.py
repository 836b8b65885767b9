"""Merging an old table with edits into a new one: ``MergeCursor`` (docs/design.md §4.1).

Untouched blocks are carried as raw bytes (CRC checked, not decoded); touched blocks are
decompressed and only their keys split out: the runs of records between edits go to the output
as slices of the old block's bytes with their lengths (``TableWriter.add_run``), so only edited
records become objects; blocks whose edits only rewrite a byte are patched in place.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from itertools import chain
from operator import lt

from webdb.errors import CorruptionError
from webdb.tables.block import RawBlock, check_block_crc, seal_block
from webdb.tables.table import DAMAGED, TableReader, TableWriter

__all__ = ["MergeCursor", "Splice"]


class Splice(list):
    """What a ``merge_ranges`` combine may return instead of a range's new records: point edits
    ``(key, value)`` (None deletes the key; a key not stored is inserted) in increasing key
    order, all inside the range.  The old records they do not name are kept unchanged."""

    __slots__ = ()


def _result(r, ok: list[bytes], ov: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """A combine's result as the range's (keys, values), given its old records."""
    if type(r) is not Splice:
        return r
    new = dict(zip(ok, ov))
    for k, v in r:
        if v is None:
            new.pop(k, None)
        else:
            new[k] = v
    ks = sorted(new)
    return ks, [new[k] for k in ks]


def _splice_block(
    path: str,
    r: Splice,
    lo: bytes,
    hi: bytes,
    keys: list[bytes],
    raw: bytes,
    olens: list[int],
    st: list[int],
    pos: int,
    j2: int,
    chunks: list[bytes],
    lens: list[int],
) -> int:
    """A Splice's point edits on the old records ``pos..j2-1`` of a decoded block (its keys,
    ``raw`` bytes, key/value lengths ``olens`` and record starts ``st``): the old records between
    the edited keys appended to ``chunks``/``lens`` as slices of ``raw``, each edit as a new record
    (None: the old record dropped).  Returns the first old record not yet copied: the rest of
    the range is copied with what follows it."""
    p, prev = pos, None
    for k, v in r:
        if k < lo or k >= hi or (prev is not None and k <= prev):
            raise CorruptionError(f"{path}: splice key {k!r:.80} out of order or range" + DAMAGED)
        prev = k
        j = bisect.bisect_left(keys, k, p, j2)
        if j > p:
            chunks.append(raw[st[p] : st[j]])
            lens += olens[2 * p : 2 * j]
        p = j + 1 if j < j2 and keys[j] == k else j
        if v is not None:
            chunks.append(k)
            chunks.append(v)
            lens.append(len(k))
            lens.append(len(v))
    return p


def _replace_in_block(
    path: str,
    rk: list[bytes],
    rv: list[bytes],
    lo: bytes,
    hi: bytes,
    raw: bytes,
    olens: list[int],
    st: list[int],
    pos: int,
    j1: int,
    chunks: list[bytes],
    lens: list[int],
) -> None:
    """A range's new records in place of its old ones: the old records ``pos..j1-1`` before the
    range appended as one slice of ``raw``, then ``rk``/``rv`` (checked: sorted, inside
    [lo, hi))."""
    if j1 > pos:
        chunks.append(raw[st[pos] : st[j1]])
        lens += olens[2 * pos : 2 * j1]
    if rk:
        if rk[0] < lo or rk[-1] >= hi or not all(map(lt, rk, rk[1:])):
            raise CorruptionError(f"{path}: merged keys out of order or range at {lo!r:.80}" + DAMAGED)
        chunks += chain.from_iterable(zip(rk, rv))
        lens += chain.from_iterable(zip(map(len, rk), map(len, rv)))


class MergeCursor:
    """Walks an old table in key order for a merge into ``out``.

    ``copy_until(k)`` moves every old record with key < k to the output: whole blocks that lie
    before k are carried over as raw bytes (checksum verified, not decoded) while the output has
    no partly filled block of its own worth keeping; ``take_until(k)`` hands the records with
    key < k to the caller instead (it decides what to write).  So a merge decodes only the
    blocks its edits touch, and the cost of an untouched block is the cost of copying its bytes.
    """

    def __init__(self, table: TableReader | None, out: TableWriter):
        self.t, self.out = table, out
        self._bi = 0
        self._keys: list[bytes] | None = None  # keys of the current decoded block, if any
        self._rb: RawBlock | None = None  # the current decoded block (values stay in its bytes)
        self._lens: list[int] = []  # its key and value lengths, interleaved
        self._starts: list[int] = []  # offset of each record in it, then the end of its records
        self._pos = 0
        self.decoded_blocks = 0
        self.raw_blocks = 0
        self.patched_blocks = 0

    def _load(self) -> None:
        rb = self._rb = self.t.raw(self._bi)
        self._keys = rb.keys()
        self._lens = rb.lens(self._keys)
        self._starts = [0]
        self._starts.extend(rb.rends)
        self._pos = 0
        self.decoded_blocks += 1

    def _next_block(self) -> None:
        self._keys, self._rb, self._bi = None, None, self._bi + 1
        self._lens, self._starts = [], []

    def copy_until(self, key: bytes | None, load: bool = True) -> None:
        """Move the old records with key < ``key`` to the output (None: all).  ``load`` False:
        a block that holds none of them is left undecoded (``take_block`` may take it whole)
        instead of being decoded as the current block."""
        t, out = self.t, self.out
        if t is None:
            return
        n = t.nblocks
        while self._bi < n:
            if self._keys is None:
                # A run of whole blocks before `key`, raw.  Small pending output is topped up by
                # decoding instead, so repeated batches do not fragment the table.
                j = self._bi
                while j < n and (key is None or t.last_keys[j] < key):
                    j += 1
                if j > self._bi and out.pending_bytes and out.pending_bytes < out.block_size // 2:
                    self.decoded_blocks += 1
                    rb = t.raw(self._bi, fill_cache=False)
                    out.absorb_run(rb.raw[: rb.start(rb.n)], rb.lens())
                    self._bi += 1
                    continue
                if j > self._bi:
                    self._carry(self._bi, j)
                    self._bi = j
                    continue
                if not load and key is not None and t.first_keys[j] >= key:
                    return  # nothing of this block is before key: it stays undecoded
                self._load()
            keys = self._keys
            if key is None:
                hi = len(keys)
            else:
                hi = bisect.bisect_left(keys, key, self._pos)
            if hi > self._pos:
                p, st = self._pos, self._starts
                out.add_run(self._rb.raw[st[p] : st[hi]], self._lens[2 * p : 2 * hi])
            self._pos = hi
            if hi < len(keys):
                return
            self._next_block()

    def _carry(self, i: int, j: int) -> None:
        t, out = self.t, self.out
        # Read a few MiB at a time; verify each block's checksum on the way through.
        while i < j:
            e, size = i, 0
            while e < j and size < (4 << 20):
                size += t.lengths[e]
                e += 1
            data = t.raw_range(i, e)
            pos = 0
            for b in range(i, e):
                blk = data[pos : pos + t.lengths[b]]
                if len(blk) != t.lengths[b]:
                    raise CorruptionError(f"{t.where(b)}: truncated")
                check_block_crc(blk, t.where(b))
                out.add_raw_block(blk, t.first_keys[b], t.last_keys[b], t.counts[b])
                pos += t.lengths[b]
            self.raw_blocks += e - i
            i = e

    def take_block(self, key: bytes) -> RawBlock | None:
        """The next old block, decoded, when all of it lies before ``key`` and none of it was
        consumed (it is then consumed); else None (``take_until`` takes the records)."""
        t, b = self.t, self._bi
        if t is None or self._keys is not None or b >= t.nblocks or t.last_keys[b] >= key:
            return None
        rb = t.raw(b, fill_cache=False)
        self._bi += 1
        self.decoded_blocks += 1
        return rb

    def take_until(self, key: bytes) -> tuple[list[bytes], list[bytes]]:
        """Consume and return the old records with record key < key."""
        t = self.t
        rk: list[bytes] = []
        rv: list[bytes] = []
        if t is None:
            return rk, rv
        while self._bi < t.nblocks:
            if self._keys is None:
                if t.first_keys[self._bi] >= key:
                    break
                self._load()
            keys = self._keys
            hi = bisect.bisect_left(keys, key, self._pos)
            if hi > self._pos:
                rk.extend(keys[self._pos : hi])
                rv.extend(self._rb.values(self._pos, hi))
            self._pos = hi
            if hi < len(keys):
                break
            self._next_block()
        return rk, rv

    def finish(self) -> None:
        self.copy_until(None)

    def merge_points(self, groups: Iterator[tuple[bytes, object]], combine, if_absent: type | None = None) -> None:
        """Apply point edits, a decoded block at a time.

        ``groups`` yields ``(key, payload)`` in strictly increasing key order; for each,
        ``combine(key, old_value_or_None, payload)`` returns the value to write or None to
        write nothing, or the old value object itself to leave the record as it is (it then
        stays inside a slice of the old block's bytes).  All edits that fall inside one old
        block are located by binary search and spliced into one ``add_run`` per block, so the
        cost is a bisect and a call per edit plus slice copies, not a method round trip per edit.
        A payload of type ``if_absent`` is an edit that changes nothing where its key is
        stored: such a key keeps its record and ``combine`` is not called (nor its old value
        split out); an absent one goes to ``combine`` as any other.
        """
        out = self.out
        it = iter(groups)
        held = None
        while True:
            if held is not None:
                g, held = held, None
            else:
                g = next(it, None)
            if g is None:
                return
            key, payload = g
            self.copy_until(key)
            if self._keys is None:  # between two old blocks or past the end: no old record
                v = combine(key, None, payload)
                if v is not None:
                    out.add(key, v)
                continue
            keys, rb, pos = self._keys, self._rb, self._pos
            raw, olens, st = rb.raw, self._lens, self._starts
            last = keys[-1]
            chunks: list[bytes] = []  # the new block: slices of raw and new records, in order
            lens: list[int] = []
            nk = len(keys)
            while True:
                j = bisect.bisect_left(keys, key, pos)
                if j < nk and keys[j] == key:
                    if type(payload) is if_absent:
                        v = ov = None  # stored: nothing changes, the record stays in the run
                    else:
                        ov = rb.value(j)
                        v = combine(key, ov, payload)
                    if v is not ov:  # (the old value itself: the record stays in the run)
                        if j > pos:
                            chunks.append(raw[st[pos] : st[j]])
                            lens += olens[2 * pos : 2 * j]
                        pos = j + 1
                        if v is not None:
                            chunks.append(key)
                            chunks.append(v)
                            lens.append(len(key))
                            lens.append(len(v))
                else:
                    v = combine(key, None, payload)
                    if v is not None:
                        if j > pos:
                            chunks.append(raw[st[pos] : st[j]])
                            lens += olens[2 * pos : 2 * j]
                        pos = j
                        chunks.append(key)
                        chunks.append(v)
                        lens.append(len(key))
                        lens.append(len(v))
                g = next(it, None)
                if g is None or g[0] > last:
                    held = g
                    break
                if g[0] <= key:
                    raise CorruptionError(f"{out.path}: edits out of order: {g[0]!r:.80} after {key!r:.80}" + DAMAGED)
                key, payload = g
            n = len(keys)
            if n > pos:
                chunks.append(raw[st[pos] : st[n]])
                lens += olens[2 * pos : 2 * n]
            out.add_run(b"".join(chunks), lens)
            self._next_block()
            if held is None:
                return

    def patch_points(self, groups: Iterator[tuple[bytes, object]], combine, in_place) -> None:
        """``merge_points`` for edits that mostly rewrite values without changing their length.

        A block all of whose edits satisfy ``in_place(payload)`` is patched in its decompressed
        bytes and compressed again — its records are never split into objects and its offsets
        stay as they are — provided each such edit finds its key and ``combine`` returns a value
        of the old length.  Any other block (an insert, a delete, a length change) goes through
        ``merge_points``.  Same arguments and result as ``merge_points``; ``combine`` may be
        called twice for an edit (it must be a function of its arguments only).
        """
        t, out = self.t, self.out
        if t is None:
            self.merge_points(groups, combine)
            return
        n = t.nblocks
        it = iter(groups)
        g = next(it, None)
        while g is not None:
            b = bisect.bisect_left(t.last_keys, g[0], self._bi)
            batch = [g]
            g = next(it, None)
            if b < n:
                last = t.last_keys[b]
                while g is not None and g[0] <= last:
                    batch.append(g)
                    g = next(it, None)
            if self._keys is None and b < n and out.pending_bytes == 0 and all(in_place(p) for _, p in batch):
                data = self._patched(b, batch, combine)
                if data is not None:
                    if b > self._bi:
                        self._carry(self._bi, b)
                    out.add_raw_block(data, t.first_keys[b], t.last_keys[b], t.counts[b])
                    self._bi = b + 1
                    self.patched_blocks += 1
                    continue
            self.merge_points(batch, combine)
            if out.pending_bytes >= out.block_size // 2:
                out.flush()  # so the next block can be patched (it needs an empty output block)

    def _patched(self, b: int, batch: list[tuple[bytes, object]], combine) -> bytes | None:
        """Block b with ``batch`` applied in place, encoded; None if some edit cannot be."""
        rb = self.t.raw(b, fill_cache=False)
        buf = bytearray(rb.raw)
        kends, rends, n = rb.kends, rb.rends, rb.n
        for key, payload in batch:
            j = rb.find(key)
            if j == n or rb.key(j) != key:
                if combine(key, None, payload) is not None:
                    return None
                continue
            a, e = kends[j], rends[j]
            v = combine(key, rb.raw[a:e], payload)
            if v is None or len(v) != e - a:
                return None
            buf[a:e] = v
        return seal_block(bytes(buf), self.out.codec, self.out.piece_bytes)

    def merge_ranges(self, groups: Iterator[tuple[bytes, bytes, object]], combine) -> None:
        """Apply range edits, a decoded block at a time.

        ``groups`` yields ``(lo, hi, payload)`` with disjoint, increasing ranges [lo, hi);
        ``combine(lo, old_keys, old_values, payload)`` gets the keys of the old records in the
        range and ``old_values()``, which returns their values (split out only if asked for).
        It returns either the (keys, values) to write there instead, sorted and inside the
        range, or a ``Splice``: point edits on the old records, which are otherwise kept as
        they are — as spans of the old block's bytes, never split into records.  A range that
        runs past the end of its block takes the slow path (``take_until`` across blocks).
        """
        out = self.out
        it = iter(groups)
        held = None
        while True:
            if held is not None:
                g, held = held, None
            else:
                g = next(it, None)
            if g is None:
                return
            lo, hi, payload = g
            self.copy_until(lo)
            if self._keys is None:
                if self.t is None or self._bi >= self.t.nblocks or self.t.first_keys[self._bi] >= hi:
                    ok, ov = [], []  # nothing old in the range
                else:
                    ok, ov = self.take_until(hi)
                out.add_many(*_result(combine(lo, ok, lambda ov=ov: ov, payload), ok, ov))
                continue
            keys, rb, pos = self._keys, self._rb, self._pos
            raw, olens, st = rb.raw, self._lens, self._starts
            n = len(keys)
            chunks: list[bytes] = []  # the new block: slices of raw and new records, in order
            lens: list[int] = []
            while True:
                j1 = bisect.bisect_left(keys, lo, pos)
                j2 = bisect.bisect_left(keys, hi, j1)
                if j2 == n:
                    # The range may go on in the next block: finish this block's output, then
                    # collect the range across blocks.
                    if j1 > pos:
                        chunks.append(raw[st[pos] : st[j1]])
                        lens += olens[2 * pos : 2 * j1]
                    out.add_run(b"".join(chunks), lens)
                    self._pos = j1
                    ok, ov = self.take_until(hi)
                    out.add_many(*_result(combine(lo, ok, lambda ov=ov: ov, payload), ok, ov))
                    break
                r = combine(lo, keys[j1:j2], lambda rb=rb, j1=j1, j2=j2: rb.values(j1, j2), payload)
                if type(r) is Splice:
                    pos = _splice_block(out.path, r, lo, hi, keys, raw, olens, st, pos, j2, chunks, lens)
                else:
                    rk, rv = r
                    _replace_in_block(out.path, rk, rv, lo, hi, raw, olens, st, pos, j1, chunks, lens)
                    pos = j2
                g = next(it, None)
                if g is None or g[0] > keys[-1]:
                    held = g
                    if n > pos:
                        chunks.append(raw[st[pos] : st[n]])
                        lens += olens[2 * pos : 2 * n]
                    out.add_run(b"".join(chunks), lens)
                    self._next_block()
                    break
                lo, hi, payload = g
            if held is None and g is None:
                return
