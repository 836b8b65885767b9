"""A table as levels: a base file and delta runs over it, newest first (docs/design.md §4.3).

A stage that keeps levels writes only what it changes — a *delta run*: a table file of the
table's delta kind (``DELTA_KINDS``) whose values carry one op byte, ``PUT`` + value or ``DEL``
alone (a tombstone) — instead of rewriting the whole table.  ``Levels`` is the read view: the
runs merged over the base, the newest record of a key winning, tombstones hiding what is under
them.  ``LevelCursor`` gives a stage the same merge calls as ``MergeCursor`` (the combine
functions of webdb.writer.cascade are unchanged) with the old state read by forward, batched
lookups in every level and the changes written to the new run: a stage costs O(edits ·
log blocks) plus one decode of each block an edit falls in, not a pass over the table.
``compact`` merges the runs into a new base (untouched base blocks copied raw), dropping the
tombstones; ``merge_runs`` merges the runs into one run (the base untouched).  Which of the
two a stage runs after writing its run is ``level_step`` (``level_ratio``, ``level_runs``, and
whether another table of the section got a new base in the same round).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from operator import lt
from typing import TypeVar

from webdb.errors import CorruptionError
from webdb.tables.block import (
    blockc,
    crc32,
    lz4_decompress,
    merge_block,
    merge_run,
    merge_segs,
    merge_sorted,
    range_diff,
    short_levels,
)
from webdb.tables.format import DELTA_KINDS, TABLE_KINDS
from webdb.tables.merge import MergeCursor, Splice
from webdb.tables.table import DAMAGED, SHORT_BLOCKS, TableReader, TableWriter

__all__ = [
    "COMPACT",
    "DEFER_RUNS",
    "DEFER_SLACK",
    "DEL",
    "KEEP",
    "MERGE_RUNS",
    "PUT",
    "LevelCursor",
    "Levels",
    "Seeker",
    "compact",
    "level_step",
    "merge_runs",
    "open_levels",
    "written",
]

T = TypeVar("T")
_span = blockc.span if blockc is not None else None

PUT = b"\x01"
DEL = b"\x00"
_PUT, _DEL = PUT[0], DEL[0]
# Greater than any key (a key is at most 65535 bytes): "nothing left in this file".
_END = b"\xff" * 65536


# What a stage does with a table's levels after writing its run (``level_step``).
KEEP, MERGE_RUNS, COMPACT = "keep", "merge_runs", "compact"
# A merge put off by a round (another table of the section got a new base in it) is put off
# only while the runs hold at most this many times ``level_ratio`` of the base, and number at
# most ``level_runs`` + ``DEFER_RUNS``.
DEFER_SLACK = 1.5
DEFER_RUNS = 1


def level_step(
    base_bytes: int, run_bytes: list[int], ratio: float, max_runs: int, rebased: bool, rounds: int | None = None
) -> str:
    """The levels policy: what a stage does after writing its run (``run_bytes``: every run of
    the table, its own included) over a base of ``base_bytes``.  ``rounds`` is how many rounds
    wrote those runs (default: one a run).  The count bound counts rounds, not files: LinksByMD5
    gets two runs a round (stage 3's and stage 5's flags), and counted as files it passed
    ``max_runs`` every other round at 3M pages, where the base takes longer to reach ``ratio``,
    merging the runs into one (4–6 CPU s a round, both sections) that a smaller db never pays;
    an extra run costs the round's reads far less.

    - when ``rebased`` (another table of the section got a new base in this round) and the runs
      are within ``DEFER_SLACK`` × ``ratio`` of the base and ``max_runs`` + ``DEFER_RUNS`` rounds:
      ``KEEP``; the step they are due comes a round later.  So the two link tables of a section,
      which grow at about the same pace, do not both rewrite their base in one round, and a
      table whose runs pass the count in that round is not merged into a run just before it is
      merged into its base;
    - runs over ``ratio`` of the base: ``COMPACT`` (a new base);
    - runs of more than ``max_runs`` rounds: ``MERGE_RUNS`` (the tiered step; bounds the files a
      lookup reads to the base and the runs of ``max_runs`` rounds, of ``max_runs`` +
      ``DEFER_RUNS`` in a round that put it off: one run a round for LinksByURL, two for
      LinksByMD5);
    - else ``KEEP``.

    Pure: the same sizes give the same step, on every host.  Cost of a round: at most one new
    base per section unless a table outgrew the slack or the count."""
    total = sum(run_bytes)
    count = len(run_bytes) if rounds is None else rounds
    over_count = count > max_runs
    over_size = total > ratio * base_bytes
    if not over_count and not over_size:
        return KEEP
    if rebased and count <= max_runs + DEFER_RUNS and total <= DEFER_SLACK * ratio * base_bytes:
        return KEEP
    return COMPACT if over_size else MERGE_RUNS


def open_levels(
    base: str | None, runs: list[str], table: str, count: int, cache=None, verified: dict[str, bytearray] | None = None
) -> Levels:
    """The view of one table of one section from its files (runs newest first).  ``verified``:
    the blocks its reads verify whole are marked there, a mask per path (``TableReader.track``)."""
    opened: list[TableReader] = []
    try:
        b = TableReader(base, TABLE_KINDS[table], cache, lazy=True) if base else None
        if b is not None:
            opened.append(b)
        rs = []
        for p in runs:
            rs.append(TableReader(p, DELTA_KINDS[table], cache, lazy=True))
            opened.append(rs[-1])
        if verified is not None:
            for t in opened:
                t.track(verified)
    except BaseException:
        for t in opened:
            t.close()
        raise
    return Levels(b, rs, count)


def _op(v: bytes, t: TableReader, key: bytes) -> int:
    op = v[0] if v else -1
    if op != _PUT and op != _DEL:
        raise CorruptionError(f"{t.path}: delta record {key!r:.80}: op byte {op} is neither PUT nor DEL")
    return op


def _tagged(items: Iterator[tuple[bytes, bytes]], i: int) -> Iterator[tuple[bytes, int, bytes]]:
    for k, v in items:
        yield k, i, v


class Seeker:
    """Forward-only point and range reads of one table file, keys asked for in increasing order:
    a block is decoded (keys split out) at most once per pass, blocks no key falls in are
    never read (found by bisecting the in-memory index)."""

    __slots__ = ("t", "bi", "keys", "rb", "decoded", "nxt")

    def __init__(self, t: TableReader):
        self.t, self.bi, self.keys, self.rb, self.decoded = t, 0, None, None, 0
        # A lower bound of the next key of the file after the last range read (_END: none
        # left), so the caller can skip a file with nothing in the next range without a call.
        self.nxt = b""

    def _block(self, b: int):
        if b != self.bi or self.rb is None:
            self.rb = self.t.raw(b, fill_cache=False)
            self.keys = None
            self.bi = b
            self.decoded += 1
        return self.rb

    def _at(self, b: int) -> list[bytes]:
        if b != self.bi or self.keys is None:
            self.keys = self._block(b).keys()
        return self.keys

    def get(self, key: bytes) -> bytes | None:
        t = self.t
        b = bisect_left(t.last_keys, key, self.bi)
        if b == t.nblocks or t.first_keys[b] > key:
            return None
        if _span is not None:
            return self._block(b).get(key)  # compiled: a search of the offsets, no key list
        keys = self._at(b)
        j = bisect_left(keys, key)
        return self.rb.value(j) if keys[j] == key else None

    def range(self, lo: bytes, hi: bytes | None) -> tuple[list[bytes], list[bytes]]:
        """The records with lo <= key < hi (hi None: to the end)."""
        t = self.t
        lk, fk, n = t.last_keys, t.first_keys, t.nblocks
        b = bisect_left(lk, lo, self.bi)
        ks: list[bytes] = []
        vs: list[bytes] = []
        if _span is not None:
            # Compiled: one C call per block searches the block's offsets in place, so the keys of
            # the records no range asks for are never split out.
            while b < n and (hi is None or fk[b] < hi):
                rb = self._block(b)
                k, v, nx = _span(rb.raw, rb.n, lo, hi)
                if k:
                    if ks:
                        ks += k
                        vs += v
                    else:
                        ks, vs = k, v
                if nx is not None:
                    self.nxt = nx
                    return ks, vs
                b += 1
            self.nxt = fk[b] if b < n else _END
            return ks, vs
        while b < n and (hi is None or fk[b] < hi):
            keys = self._at(b)
            j1 = bisect_left(keys, lo)
            j2 = len(keys) if hi is None else bisect_left(keys, hi, j1)
            if j2 > j1:
                if ks:
                    ks += keys[j1:j2]
                    vs += self.rb.values(j1, j2)
                else:
                    ks, vs = keys[j1:j2], self.rb.values(j1, j2)
            if j2 < len(keys):
                self.nxt = keys[j2]
                return ks, vs
            b += 1
        self.nxt = fk[b] if b < n else _END
        return ks, vs


class Levels:
    """One table of one section: ``base`` (a table file or None) under ``runs`` (delta runs,
    newest first).  ``count`` is the number of live records (the manifest's).  Offers what
    readers of a table use: ``get``, ``items``, ``ranges``, ``prefix``, ``chunks``."""

    def __init__(self, base: TableReader | None, runs: list[TableReader], count: int):
        self.base, self.runs, self.count = base, runs, count
        self.path = base.path if base is not None else runs[0].path
        self._newest = runs + ([base] if base is not None else [])  # what a read looks in, in order
        # short_range's arguments for its one C call, made on first use (() : each file's own
        # path).  They hold each file's index bytes, so a file that later loads its index
        # lists keeps that copy too; closing drops them.
        self._short: tuple | None = None

    def files(self) -> list[TableReader]:
        return ([self.base] if self.base is not None else []) + self.runs

    def close(self) -> None:
        self._short = ()
        for t in self.files():
            t.close()

    def get(self, key: bytes) -> bytes | None:
        for r in self.runs:
            v = r.get(key)
            if v is not None:
                return v[1:] if _op(v, r, key) == _PUT else None
        return self.base.get(key) if self.base is not None else None

    def _runs_merged(self, start: bytes | None, stop: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """(key, op + value) of every run, newest first for a key, older versions dropped."""
        if len(self.runs) == 1:
            yield from self.runs[0].items(start, stop)
            return
        its = [_tagged(r.items(start, stop), i) for i, r in enumerate(self.runs)]
        prev = None
        for k, _, v in heapq.merge(*its):
            if k != prev:
                prev = k
                yield k, v

    def _base_chunks(self, start: bytes | None, stop: bytes | None) -> Iterator[tuple[list[bytes], list[bytes]]]:
        t = self.base
        if t is None or not t.nblocks:
            return
        if start is not None and stop is not None:
            yield from t.ranges(start, stop)
            return
        b = 0 if start is None else max(0, bisect_left(t.last_keys, start))
        for i in range(b, t.nblocks):
            if stop is not None and t.first_keys[i] >= stop:
                return
            keys, vals = t.raw(i, fill_cache=False).split()
            if (start is not None and keys[0] < start) or (stop is not None and keys[-1] >= stop):
                lo = 0 if start is None else bisect_left(keys, start)
                hi = len(keys) if stop is None else bisect_left(keys, stop)
                keys, vals = keys[lo:hi], vals[lo:hi]
            yield keys, vals

    def chunks(
        self, start: bytes | None = None, stop: bytes | None = None
    ) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """The live records with start <= key < stop, in order, as (keys, values) lists about
        a base block long: base blocks no run touches are passed on as they are."""
        runs = self._runs_merged(start, stop)
        nxt = next(runs, None)
        for keys, vals in self._base_chunks(start, stop):
            if nxt is None or nxt[0] > keys[-1]:
                yield keys, vals
                continue
            ok: list[bytes] = []
            ov: list[bytes] = []
            i, n = 0, len(keys)
            last = keys[-1]
            while nxt is not None and nxt[0] <= last:
                rk, rv = nxt
                j = bisect_left(keys, rk, i)
                if j > i:
                    ok += keys[i:j]
                    ov += vals[i:j]
                i = j + 1 if j < n and keys[j] == rk else j
                if _op(rv, self.runs[0], rk) == _PUT:
                    ok.append(rk)
                    ov.append(rv[1:])
                nxt = next(runs, None)
            if i < n:
                ok += keys[i:]
                ov += vals[i:]
            if ok:
                yield ok, ov
        tk: list[bytes] = []
        tv: list[bytes] = []
        while nxt is not None:
            if _op(nxt[1], self.runs[0], nxt[0]) == _PUT:
                tk.append(nxt[0])
                tv.append(nxt[1][1:])
                if len(tk) >= 1024:
                    yield tk, tv
                    tk, tv = [], []
            nxt = next(runs, None)
        if tk:
            yield tk, tv

    def items(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        for keys, vals in self.chunks(start, stop):
            yield from zip(keys, vals)

    def ranges(self, start: bytes, stop: bytes) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """``TableReader.ranges`` over the levels: a short range (one URL's inlinks) costs a
        range read per file, each two binary searches in a (cached) block, and no merge when
        no run holds a record in it.  (``short_range`` is the shorter path of a range that
        lies in one block of each file.)"""
        parts: list[tuple[TableReader, tuple[list[bytes], list[bytes]]]] = []
        for t in self._newest:
            if t is self.base and not parts:
                yield from t.ranges(start, stop)  # no run holds a record in range
                return
            ks: list[bytes] = []
            vs: list[bytes] = []
            for k, v in t.ranges(start, stop):
                ks += k
                vs += v
            if ks:
                parts.append((t, (ks, vs)))
        ks, vs = self._merged(parts)
        if ks:
            yield ks, vs

    def short_range(self, start: bytes, stop: bytes) -> tuple[list[bytes], list[bytes]] | None:
        """``TableReader.short_range`` over the levels: the live records with start <= key <
        stop as (keys, values) when they lie in at most ``SHORT_BLOCKS`` blocks of each file, else
        None (read them with ``ranges``).  A file whose index rules the range out (its key
        range, or the gap between two of its blocks) is not read; the others cost a block read
        (one C call, ``unpack_range``) per block the range reaches, and the merge is one C call
        (``merge_sorted``) when compiled — all of it one C call (``short_levels``) when every
        file's index is searched in place."""
        files = self._short
        if files is None:
            files = self._short = self._short_files()
        if files:
            kv = short_levels(files, start, stop, SHORT_BLOCKS)
            if kv is not False:
                return kv
        parts = []
        for t in self._newest:
            kv = t.short_range(start, stop)
            if kv is None:
                return None
            if kv[0]:
                parts.append((t, kv))
        return self._merged(parts)

    def _short_files(self) -> tuple:
        """Each file's ``short_args`` and whether it is a run, newest first; () if a file has none."""
        if blockc is None:
            return ()
        out = []
        for t in self._newest:
            a = t.short_args()
            if a is None:
                return ()
            out.append((*a, t is not self.base))
        return tuple(out)

    def level_seek(self):
        """A compiled ``LevelSeek`` over these files (``_blockc.levelseek``: LevelCursor's reads,
        one C call per range or key), or None when not compiled or a file's index is not kept
        raw."""
        files = self._short
        if files is None:
            files = self._short = self._short_files()
        if not files:
            return None
        marks = tuple(t.verified for t in self._newest)
        if all(m is None for m in marks):
            return blockc.levelseek(files, crc32, lz4_decompress)
        return blockc.levelseek(files, crc32, lz4_decompress, marks)

    def _merged(
        self, parts: list[tuple[TableReader, tuple[list[bytes], list[bytes]]]]
    ) -> tuple[list[bytes], list[bytes]]:
        """The records of ``parts`` ((file, (keys, values)) of files of this view, newest first,
        each sorted) merged: the newest record of a key wins, a run's op applied."""
        if not parts:
            return [], []
        if len(parts) == 1 and parts[0][0] is self.base:
            return parts[0][1]
        r = merge_sorted([(ks, vs, t is not self.base) for t, (ks, vs) in parts])
        if r is not None:
            return r
        # The reference (and the error of a damaged run: merge_sorted declines it).
        d: dict[bytes, bytes] = {}
        for t, (ks, vs) in reversed(parts):  # oldest first, so newer versions overwrite
            if t is self.base:
                d.update(zip(ks, vs))
                continue
            for k, v in zip(ks, vs):
                if _op(v, t, k) == _PUT:
                    d[k] = v[1:]
                else:
                    d.pop(k, None)
        ks = sorted(d)
        return ks, [d[k] for k in ks]

    def prefix(self, p: bytes) -> Iterator[tuple[bytes, bytes]]:
        from webdb.tables.table import prefix_end

        return self.items(p, prefix_end(p))


class LevelCursor:
    """``MergeCursor``'s merge calls over a ``Levels`` view, writing the changes to ``out``
    (a delta run) instead of a new table: a changed or new record as PUT + value, a removed
    one as a tombstone, an unchanged one not at all.  ``live`` is the change in the number of
    live records.  Edits come in increasing key order (as for ``MergeCursor``)."""

    def __init__(self, view: Levels, out: TableWriter):
        self.view, self.out = view, out
        # Newest first; the base last.  Each one read forward as the edits go.
        self._seek = [Seeker(r) for r in view.runs] + ([Seeker(view.base)] if view.base is not None else [])
        # Compiled, the same reads in one call per range or key (blockc.levelseek); on a block
        # or record it finds unsound it is dropped, and the Seekers (from the start: reads are
        # forward, so that only costs a longer search) read on and name the fault.
        self._c = view.level_seek()
        self._c_decoded = 0
        self.live = 0
        self.raw_blocks = self.patched_blocks = 0

    @property
    def decoded_blocks(self) -> int:
        c = self._c.decoded if self._c is not None else 0
        return sum(s.decoded for s in self._seek) + self._c_decoded + c

    def _drop_c(self) -> None:
        self._c_decoded += self._c.decoded
        self._c = None

    def _get(self, key: bytes) -> bytes | None:
        c = self._c
        if c is not None:
            v = c.get(key)
            if v is not False:
                return v
            self._drop_c()
        for s in self._seek:
            v = s.get(key)
            if v is not None:
                if s.t is self.view.base:
                    return v
                return v[1:] if _op(v, s.t, key) == _PUT else None
        return None

    def _range(self, lo: bytes, hi: bytes) -> tuple[list[bytes], list[bytes]]:
        c = self._c
        if c is not None:
            kv = c.range(lo, hi)
            if kv is not False:
                return kv
            self._drop_c()
        found = []
        for s in self._seek:
            if s.nxt >= hi:
                continue  # nothing of this level before hi (ranges come in increasing order)
            kv = s.range(lo, hi)
            if kv[0]:
                found.append((s.t, kv))
        return self.view._merged(found)  # newest first, as the seekers are

    def _put(self, key: bytes, old: bytes | None, new: bytes | None) -> None:
        if new is None:
            if old is not None:
                self.out.add(key, DEL)
                self.live -= 1
        elif old is None:
            self.out.add(key, PUT + new)
            self.live += 1
        elif new != old:
            self.out.add(key, PUT + new)

    def merge_points(self, groups, combine) -> None:
        prev = None
        for key, payload in groups:
            if prev is not None and key <= prev:
                raise CorruptionError(f"{self.out.path}: edits out of order: {key!r:.80} after {prev!r:.80}" + DAMAGED)
            prev = key
            old = self._get(key)
            self._put(key, old, combine(key, old, payload))

    def patch_points(self, groups, combine, in_place) -> None:
        self.merge_points(groups, combine)  # a delta run holds only the changed records anyway

    def put_points(self, recs: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write point changes blind, without reading the levels: ``(key, value)`` as PUT +
        value, ``(key, None)`` as a tombstone, keys increasing.  The caller vouches that each
        value differs from the stored one and that each removed key is stored (a tombstone
        counts as one live record fewer): stage 5, whose edits say so by construction."""
        out_k: list[bytes] = []
        out_v: list[bytes] = []
        dels = 0
        try:
            for k, v in recs:
                out_k.append(k)
                if v is None:
                    out_v.append(DEL)
                    dels += 1
                else:
                    out_v.append(PUT + v)
                if len(out_k) >= 4096:
                    self.out.add_many(out_k, out_v)  # checks the order (keys strictly increasing)
                    out_k.clear()
                    out_v.clear()
            self.out.add_many(out_k, out_v)
        finally:
            self.live -= dels

    def merge_ranges(self, groups, combine, splice=None) -> None:
        """``MergeCursor.merge_ranges`` over the levels.  ``splice(lo, payload)``, if given, is
        asked first: a ``Splice`` it returns is applied without reading the range — each spliced
        key's stored value read as ``_get`` reads it (``_splice``) — and None sends the group to
        ``combine`` with the range's stored records (stage 4: a url without a target notice
        touches a few of its inlinks, and reading all of them was a third of the stage)."""
        # The changes are collected and written a few thousand at a time (``add_many``: one
        # order check in C), not one ``_put`` call per record: this loop is stages 3-4's.
        out_k: list[bytes] = []
        out_v: list[bytes] = []
        live = 0
        try:
            for lo, hi, payload in groups:
                r = splice(lo, payload) if splice is not None else None
                if r is not None:
                    live += self._splice(r, lo, hi, out_k, out_v)
                else:
                    ok, ov = self._range(lo, hi)
                    r = combine(lo, ok, lambda ov=ov: ov, payload)
                    d = range_diff(ok, ov, r, lo, hi, out_k, out_v)  # in C when compiled
                    live += d if d is not None else diff_py(ok, ov, r, lo, hi, out_k, out_v, self.out.path)
                if len(out_k) >= 4096:
                    self.out.add_many(out_k, out_v)
                    out_k.clear()
                    out_v.clear()
            self.out.add_many(out_k, out_v)
        finally:
            self.live += live

    def _splice(self, sp: Splice, lo: bytes, hi: bytes, out_k: list[bytes], out_v: list[bytes]) -> int:
        """A ``Splice`` of range [lo, hi) applied to the levels: the changes appended to
        ``out_k``, ``out_v``; returns the change in live records.  Compiled, one call
        (``LevelSeek.splice``: a point read per spliced key, the range never split into records);
        else, or for a splice it declines or a block it finds unsound, the range read and diffed
        (the reference: ``_range`` and ``diff_py``, which name the fault)."""
        c = self._c
        if c is not None:
            d = c.splice(sp, lo, hi, out_k, out_v)
            if d is False:
                self._drop_c()
            elif d is not None:
                return d
        ok, ov = self._range(lo, hi)
        d = range_diff(ok, ov, sp, lo, hi, out_k, out_v)
        return d if d is not None else diff_py(ok, ov, sp, lo, hi, out_k, out_v, self.out.path)

    def finish(self) -> None:
        pass  # nothing is carried over: what is not in the run is in the levels below it


def diff_py(
    ok: list[bytes], ov: list[bytes], r, lo: bytes, hi: bytes, out_k: list[bytes], out_v: list[bytes], path: str
) -> int:
    """One range's step of ``LevelCursor.merge_ranges``: the changes from the stored records
    (``ok``, ``ov``) to a combine's result ``r`` — a ``Splice`` or the range's new (keys,
    values) — appended to ``out_k``, ``out_v`` as a delta run holds them (PUT + value, DEL for
    a removed key, an unchanged record not at all); returns the change in live records.  The
    reference of ``_blockc.diff`` (``block.range_diff``); ``path`` names the run in errors."""
    ak, av = out_k.append, out_v.append
    live = 0
    if type(r) is Splice:
        old = dict(zip(ok, ov)) if ok else {}
        prev = None
        for k, v in r:
            if k < lo or k >= hi or (prev is not None and k <= prev):
                raise CorruptionError(f"{path}: splice key {k!r:.80} out of order or range" + DAMAGED)
            prev = k
            o = old.get(k)
            if v is None:
                if o is not None:
                    ak(k)
                    av(DEL)
                    live -= 1
            elif o is None:
                ak(k)
                av(PUT + v)
                live += 1
            elif v != o:
                ak(k)
                av(PUT + v)
        return live
    rk, rv = r
    if rk and (rk[0] < lo or rk[-1] >= hi or not all(map(lt, rk, rk[1:]))):
        raise CorruptionError(f"{path}: merged keys out of order or range at {lo!r:.80}" + DAMAGED)
    # Both sides sorted: walk them together, keeping only the differences.
    i = j = 0
    no, nn = len(ok), len(rk)
    while i < no or j < nn:
        if j == nn or (i < no and ok[i] < rk[j]):
            ak(ok[i])
            av(DEL)
            live -= 1
            i += 1
        elif i == no or rk[j] < ok[i]:
            ak(rk[j])
            av(PUT + rv[j])
            live += 1
            j += 1
        else:
            if rv[j] != ov[i]:
                ak(rk[j])
                av(PUT + rv[j])
            i += 1
            j += 1
    return live


def written(
    view: Levels, out: TableWriter, fill: Callable[[], T], before_close: Callable[[], None] | None = None
) -> tuple[T, dict]:
    """``fill()`` writes ``out`` from ``view``; then ``out`` is closed (its ``close()`` info
    returned with ``fill``'s result) or, if anything failed, aborted (the file removed); the
    view is closed either way.  ``before_close`` is the caller's fault point."""
    try:
        r = fill()
        if before_close is not None:
            before_close()
        info = out.close()
    except BaseException:
        out.abort()
        raise
    finally:
        view.close()
    return r, info


def compact(view: Levels, out: TableWriter) -> MergeCursor:
    """Merge every run of ``view`` into its base, written to ``out`` (a table of the base's
    kind), tombstones dropped.  A base block no run touches is copied raw; a touched one is
    merged as a whole with the runs' records in its key range, both read in place
    (``merge_segs``: one C call whose output goes to the writer as a run; else the lists of
    ``merge_block``/``merge_run``, or one dict, newest last, out sorted).  Returns the cursor
    (its block counters); ``out`` is left open for the caller."""
    return _merge(view.base, view.runs, out, True)


def merge_runs(view: Levels, out: TableWriter) -> MergeCursor:
    """Merge the runs of ``view`` into one delta run written to ``out`` (the tiered step: the
    base is not read), tombstones kept — they may hide records of the base.  The oldest run's
    blocks no newer run touches are copied raw."""
    return _merge(view.runs[-1], view.runs[:-1], out, False)


def _merge(base: TableReader | None, runs: list[TableReader], out: TableWriter, apply: bool) -> MergeCursor:
    """``runs`` (newest first) over ``base``, a base block at a time; ``apply``: the ops are
    applied (a base out), else the records are kept with their op bytes (a run out)."""
    cur = MergeCursor(base, out)
    if apply and IN_PLACE and blockc is not None and base is not None and base.nblocks:
        _compact_in_place(base, runs, cur, out)
        cur.finish()
        return cur
    seekers = [Seeker(r) for r in reversed(runs)]  # oldest first: newer records overwrite
    if base is None or not base.nblocks:
        bounds = [(b"", None)]
    else:
        fk = base.first_keys
        bounds = [(fk[s] if s else b"", fk[s + 1] if s + 1 < len(fk) else None) for s in range(len(fk))]
    for lo, ub in bounds:
        found = [(s.t, s.range(lo, ub)) for s in seekers]
        found = [(t, kv) for t, kv in found if kv[0]]
        if not found:
            continue  # untouched: copied raw by the next copy_until
        cur.copy_until(lo, load=False)
        parts = [(ks, vs, True) for _, (ks, vs) in reversed(found)]
        m = None
        if base is None or not base.nblocks:
            ok, ov = [], []
        else:
            end = ub if ub is not None else base.last_keys[-1] + b"\x00"
            rb = cur.take_block(end) if apply else None
            if rb is not None:
                # The base block's records are read in place by the merge (no object each).
                m = merge_block(rb.raw, rb.n, parts, False)
                if m is None:
                    ok, ov = rb.split()
            else:
                ok, ov = cur.take_until(end)
        if m is not None:
            out.add_run(*m)
        else:
            _merge_lists(found, ok, ov, apply, out)
    cur.finish()
    return cur


# False: a compaction reads the runs through ``Seeker.range`` as key and value lists (the
# reference path, which the tests compare the in-place path with byte for byte).
IN_PLACE = True


class _RunBlocks:
    """One delta run read forward by a compaction, a base block's key range at a time: its
    records before a bound as segments (decoded block, count, j0, j1) read in place by
    ``merge_segs``.  Each record is taken once (the base blocks' ranges tile the key space);
    a run block whose first key is past the bound is not read."""

    __slots__ = ("t", "b", "j", "rb")

    def __init__(self, t: TableReader):
        self.t, self.b, self.j, self.rb = t, 0, 0, None

    def take(self, ub: bytes | None, segs: list, owners: list) -> None:
        """Append the segments of the records with key < ``ub`` (None: all) not taken yet to
        ``segs``, and (this run, the block, j0, j1) of each to ``owners``."""
        t = self.t
        fk, lk, nb = t.first_keys, t.last_keys, t.nblocks
        b, j = self.b, self.j
        while b < nb:
            if not j and ub is not None and fk[b] >= ub:
                break
            rb = self.rb
            if rb is None:
                rb = self.rb = t.raw(b, fill_cache=False)
            e = rb.n if ub is None or lk[b] < ub else rb.find(ub)
            if e > j:
                segs.append((rb.raw, rb.n, j, e))
                owners.append((self, rb, j, e))
            if e < rb.n:
                j = e
                break
            b, j, self.rb = b + 1, 0, None
        self.b, self.j = b, j


def _compact_in_place(base: TableReader, runs: list[TableReader], cur: MergeCursor, out: TableWriter) -> None:
    """``_merge`` of a compaction with the runs' blocks read in place: per touched base block one
    C call (``merge_segs``) merges the base block's records and the runs' records in its range,
    none of them made an object.  A block it finds unsound is split into lists and merged by
    the list path, which names the fault."""
    readers = [_RunBlocks(r) for r in runs]  # newest first, as merge_segs takes them
    fk = base.first_keys
    nb = len(fk)
    last = base.last_keys[-1] + b"\x00"
    for s in range(nb):
        ub = fk[s + 1] if s + 1 < nb else None
        segs: list = []
        owners: list = []
        for r in readers:
            r.take(ub, segs, owners)
        if not segs:
            continue  # untouched: copied raw by the next copy_until
        cur.copy_until(fk[s] if s else b"", load=False)
        end = ub if ub is not None else last
        rb = cur.take_block(end)
        m = merge_segs(rb.raw, rb.n, segs) if rb is not None else None
        if m is None:
            ok, ov = rb.split() if rb is not None else cur.take_until(end)
            found = []
            for r in reversed(readers):  # oldest first, as the list path takes them
                ks: list[bytes] = []
                vs: list[bytes] = []
                for o, orb, j0, j1 in owners:
                    if o is r:
                        k, v = orb.split(j0, j1)
                        ks += k
                        vs += v
                if ks:
                    found.append((r.t, (ks, vs)))
            _merge_lists(found, ok, ov, True, out)
        else:
            out.add_run(*m)


def _merge_lists(
    found: list[tuple[TableReader, tuple[list[bytes], list[bytes]]]],
    ok: list[bytes],
    ov: list[bytes],
    apply: bool,
    out: TableWriter,
) -> None:
    """One base block's merge from lists, written to ``out``: ``found`` the runs' (file, (keys,
    values)) in range, oldest first, over the base records ``ok``, ``ov``.  In C when it can
    (``merge_run``: newest first, straight into the writer's run form; the runs' ops applied
    for a base, kept for a run); else a dict, newest last (the reference, which names a bad op
    byte)."""
    parts = [(ks, vs, True) for _, (ks, vs) in reversed(found)]
    m = merge_run(parts + [(ok, ov, False)], not apply)
    if m is not None:
        out.add_run(*m)
        return
    d = dict(zip(ok, ov))
    for t, (ks, vs) in found:
        if not apply:
            for k, v in zip(ks, vs):
                _op(v, t, k)
            d.update(zip(ks, vs))
            continue
        for k, v in zip(ks, vs):
            if v[:1] == PUT:
                d[k] = v[1:]
            elif v == DEL:
                d.pop(k, None)
            else:
                _op(v, t, k)  # raises, naming the run
    if d:
        ks = sorted(d)
        out.add_many(ks, [d[k] for k in ks])


assert set(DELTA_KINDS) == set(TABLE_KINDS)
