"""An external sort of byte records that stays within a memory budget.

Records are ``bytes`` whose byte order is the wanted order (edit records carry a unique
sequence number, docs/format.md *Edit records*), so the in-memory sort is a plain
``list.sort()`` (``sort_records``: in C when the compiled codec is built) and sorted files merge
a block at a time (``merge_chunks``).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate, islice

from webdb.tables import block
from webdb.tables.format import KIND_RUN
from webdb.tables.table import TableReader, TableWriter

# Bytes a record costs in memory beyond its length: bytes header (33), allocator rounding and
# the list slot with over-allocation (measured: ~56 for records of 60-200 bytes).
RECORD_OVERHEAD = 56
# Runs merged at once.  A merge holds one decoded block and one open file per run, so more runs
# than this (a sort of far more data than its budget) are first merged in groups into longer
# runs: the merge's memory and open files stay bounded whatever the number of records.
MAX_MERGE_RUNS = 256


def sort_records(recs: list[bytes]) -> None:
    """``recs.sort()`` for a list of bytes.  With the compiled codec (``_blockc.sort_records``)
    a multikey sort: the records are ordered by 8 bytes at a time read as one integer, past
    the prefix they share (``http://``, a host), so most compares are one integer compare
    instead of a call through bytes' rich compare (measured: half the CPU of list.sort on a
    spill of page edits).
    Cost: O(n log n) compares, 16 bytes per record of scratch while it runs."""
    c = block.blockc
    if c is not None:
        try:
            c.sort_records(recs)
            return
        except TypeError:  # an item that is not bytes (the list is untouched): list.sort's order
            pass
    recs.sort()


class SortBuffer:
    """Collects records; spills a sorted run to ``tmpdir`` whenever ``max_bytes`` is exceeded.

    Cost: O(n log n) compares in C; every record is written and read once more per spill.
    """

    def __init__(self, tmpdir: str, name: str, max_bytes: int, block_size: int = 65536, codec: str = "lz4"):
        self.tmpdir, self.name, self.max_bytes = tmpdir, name, max(1 << 16, max_bytes)
        self.block_size, self.codec = block_size, codec
        self.recs: list[bytes] = []
        self.bytes = 0
        self.count = 0
        self.runs: list[str] = []
        self.spilled = 0  # runs written so far (names them)
        # When set, a spill hands its sorted records to this callable (e.g. to route them into
        # edit files right away) instead of writing a run to merge later.
        self.spill_to: Callable[[list[bytes]], object] | None = None

    def add(self, rec: bytes) -> None:
        self.recs.append(rec)
        self.count += 1
        self.bytes += len(rec) + RECORD_OVERHEAD
        if self.bytes > self.max_bytes:
            self.spill()

    def extend(self, recs: list[bytes]) -> None:
        self.recs.extend(recs)
        self.count += len(recs)
        self.bytes += sum(map(len, recs)) + RECORD_OVERHEAD * len(recs)
        if self.bytes > self.max_bytes:
            self.spill()

    def spill(self) -> None:
        if not self.recs:
            return
        sort_records(self.recs)
        if self.spill_to is not None:
            self.spill_to(self.recs)
            self.recs, self.bytes = [], 0
            return
        self.runs.append(self._write_run([self.recs]))
        self.recs, self.bytes = [], 0

    def _write_run(self, chunks: Iterable[list[bytes]]) -> str:
        """A new run file of sorted records, given as lists in order."""
        os.makedirs(self.tmpdir, exist_ok=True)
        path = os.path.join(self.tmpdir, f"{self.name}.run{self.spilled}")
        self.spilled += 1
        w = TableWriter(path, KIND_RUN, self.block_size, self.codec, sync=False)
        for recs in chunks:
            w.add_many(recs, [b""] * len(recs))
        w.close()
        return path

    def _fold_runs(self, limit: int) -> None:
        """Merge the oldest runs, ``limit`` (at least 2) at a time, into one run each until at
        most ``limit`` runs are left.  Cost: every record of a folded run is written and read once more."""
        size = max(2, limit)  # each fold leaves size - 1 runs fewer
        while len(self.runs) > limit:
            group, rest = self.runs[:size], self.runs[size:]
            merged = merge_chunks([read_chunks(p) for p in group])
            path = self._write_run(_lists(merged, 4096))
            for p in group:
                os.unlink(p)
            self.runs = [*rest, path]

    def sorted(self) -> Iterator[bytes]:
        """All records in order (consumes the buffer)."""
        return iter(self.sorted_records())

    def sorted_records(self) -> Iterable[bytes]:
        """``sorted()``, but the list itself when nothing was spilled to a run (so a consumer
        such as ``write_routed`` can take it whole instead of a chunk at a time)."""
        sort_records(self.recs)
        if not self.runs:
            recs, self.recs = self.recs, []
            return recs
        self._fold_runs(MAX_MERGE_RUNS - 1)  # and the records in memory: at most MAX_MERGE_RUNS
        its: list[Iterable[list[bytes]]] = [read_chunks(p) for p in self.runs]
        if self.recs:
            recs, self.recs = self.recs, []
            its.append(recs[i : i + 4096] for i in range(0, len(recs), 4096))
        return merge_chunks(its)

    def cleanup(self) -> None:
        for p in self.runs:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass  # removed already (a recover of the db's tmp/): nothing left to clean
        self.runs = []


class GroupFeed:
    """Groups of records bound for one ``SortBuffer``, fed as one ``extend`` call per group
    would feed them: the buffer spills after the same groups, so its runs are the same, with a
    bisect per spill instead of a call per group.  ``recs`` hold the groups back to back (group g
    ends before ``recs[ends[g]]``), ``sizes`` are the records' lengths (a list, or a numpy
    integer array: then summed in numpy, no Python int per record).  Two feeds of two buffers
    interleave their spills in call order through ``next_spill``/``spill_next``."""

    def __init__(self, buf: SortBuffer, recs: list[bytes], ends: list[int], sizes: Sequence[int]):
        self.buf, self.recs, self.ends = buf, recs, ends
        if hasattr(sizes, "cumsum"):
            self.cum = (sizes + RECORD_OVERHEAD).cumsum()  # bisect reads it by index
        else:
            self.cum = list(accumulate(map(RECORD_OVERHEAD.__add__, sizes)))
        self.lo = self.base = self.g = 0

    def next_spill(self) -> int | None:
        """The group after which the buffer spills next (None: it does not)."""
        b = self.buf
        over = bisect.bisect_right(self.cum, b.max_bytes - b.bytes + self.base)  # its first record
        g = bisect.bisect_left(self.ends, over + 1, self.g)
        return g if g < len(self.ends) else None

    def _add(self, hi: int) -> None:
        if hi > self.lo:
            b = self.buf
            b.recs += self.recs[self.lo : hi]
            b.count += hi - self.lo
            top = int(self.cum[hi - 1])
            b.bytes += top - self.base
            self.base, self.lo = top, hi

    def spill_next(self, g: int) -> None:
        """Add the groups up to ``g`` (``next_spill``) and spill."""
        self._add(self.ends[g])
        self.buf.spill()
        self.g = g + 1

    def finish(self) -> None:
        """Add the groups left (no spill: ``next_spill`` is None)."""
        self._add(len(self.recs))
        self.g = len(self.ends)


def _lists(recs: Iterator[bytes], n: int) -> Iterator[list[bytes]]:
    """``recs`` as lists of ``n`` records (the last one shorter)."""
    while chunk := list(islice(recs, n)):
        yield chunk


def read_chunks(path: str, kind: int | None = None) -> Iterator[list[bytes]]:
    """The records of a run or edit file (keys only: their values are empty), a block's list
    at a time."""
    t = TableReader(path, kind)
    try:
        for b in range(t.nblocks):
            keys = t.raw(b, fill_cache=False).keys()
            if keys:
                yield keys
    finally:
        t.close()


def read_records(path: str, kind: int | None = None) -> Iterator[bytes]:
    """The records of a run or edit file, in order, one block in memory at a time."""
    for keys in read_chunks(path, kind):
        yield from keys


def merge_chunks(sources: list[Iterable[list[bytes]]]) -> Iterator[bytes]:
    """Merge sorted record streams, each given as sorted lists (chunks), into one sorted stream
    (``merge_chunk_lists``, a record at a time)."""
    for c in merge_chunk_lists(sources):
        yield from c


def merge_chunk_lists(sources: list[Iterable[list[bytes]]]) -> Iterator[list[bytes]]:
    """Merge sorted record streams, each given as sorted lists (chunks), into one sorted stream
    of sorted lists (the records of each list all before the next list's).

    A step takes, from every source, the records up to the smallest last record of the chunks
    at hand (all of that chunk, a binary search in the others) and sorts them together, so the
    merge runs in C (``list.sort`` merges the sorted runs it is given) instead of one heap
    operation per record as ``heapq.merge`` does.  Records are unique (a seq number), so the
    order of equal records does not arise.  Memory: one chunk per source plus one step.
    """
    heads: list[list] = []  # [chunk, position, iterator]
    for src in sources:
        it = iter(src)
        c = next(it, None)
        while c is not None and not c:
            c = next(it, None)
        if c is not None:
            heads.append([c, 0, it])
    while len(heads) > 1:
        bound = min(h[0][-1] for h in heads)
        out: list[bytes] = []
        for h in heads:
            c, p = h[0], h[1]
            j = bisect.bisect_right(c, bound, p)
            if j > p:
                out += c[p:j] if p or j < len(c) else c
                h[1] = j
        out.sort()
        yield out
        live = []
        for h in heads:
            if h[1] == len(h[0]):
                c = next(h[2], None)
                while c is not None and not c:
                    c = next(h[2], None)
                if c is None:
                    continue
                h[0], h[1] = c, 0
            live.append(h)
        heads = live
    if heads:
        c, p, it = heads[0]
        yield c[p:] if p else c
        for c in it:
            if c:
                yield c


def merge_file_chunks(paths: list[str], kind: int | None = None) -> Iterator[list[bytes]]:
    """``merge_files`` as sorted lists of records (a consumer that loops over a list itself
    saves a generator step per record)."""
    if len(paths) == 1:
        return read_chunks(paths[0], kind)
    return merge_chunk_lists([read_chunks(p, kind) for p in paths])


def merge_files(paths: list[str], kind: int | None = None) -> Iterator[bytes]:
    """Merge sorted record files (fast path when there is one)."""
    if len(paths) == 1:
        return read_records(paths[0], kind)
    return merge_chunks([read_chunks(p, kind) for p in paths])
