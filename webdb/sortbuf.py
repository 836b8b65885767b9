"""An external sort of byte records that stays within a memory budget.

Records are ``bytes`` whose byte order is the wanted order (edit records carry a unique
sequence number, docs/format.md *Edit records*), so the in-memory sort is a plain
``list.sort()`` and spilled runs merge with ``heapq.merge``.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable, Iterator

from webdb.tables.format import KIND_RUN
from webdb.tables.table import TableReader, TableWriter

# Bytes a record costs in memory beyond its length: bytes header (33), allocator rounding and
# the list slot with over-allocation (measured: ~56 for records of 60-200 bytes).
RECORD_OVERHEAD = 56


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
        self.recs.sort()
        if self.spill_to is not None:
            self.spill_to(self.recs)
            self.recs, self.bytes = [], 0
            return
        os.makedirs(self.tmpdir, exist_ok=True)
        path = os.path.join(self.tmpdir, f"{self.name}.run{len(self.runs)}")
        w = TableWriter(path, KIND_RUN, self.block_size, self.codec, sync=False)
        w.add_many(self.recs, [b""] * len(self.recs))
        w.close()
        self.runs.append(path)
        self.recs, self.bytes = [], 0

    def sorted(self) -> Iterator[bytes]:
        """All records in order (consumes the buffer)."""
        self.recs.sort()
        if not self.runs:
            recs, self.recs = self.recs, []
            return iter(recs)
        its: list[Iterable[bytes]] = [read_records(p) for p in self.runs]
        if self.recs:
            its.append(self.recs)
            self.recs = []
        return heapq.merge(*its)

    def cleanup(self) -> None:
        for p in self.runs:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass  # removed already (a recover of the db's tmp/): nothing left to clean
        self.runs = []


def read_records(path: str, kind: int | None = None) -> Iterator[bytes]:
    """The records of a run or edit file, in order, one block in memory at a time."""
    t = TableReader(path, kind)
    try:
        for b in range(t.nblocks):
            yield from t.block(b)[0]
    finally:
        t.close()


def merge_files(paths: list[str], kind: int | None = None) -> Iterator[bytes]:
    """Merge sorted record files (fast path when there is one)."""
    if len(paths) == 1:
        return read_records(paths[0], kind)
    return heapq.merge(*(read_records(p, kind) for p in paths))
