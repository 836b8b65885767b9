"""webdb.util.sortbuf.SortBuffer: the external sort gives ``sorted(records)`` whether it fits in
memory, spills runs, or has more runs than it merges at once (then folded into longer runs)."""

from __future__ import annotations

import os
import random

import pytest

from webdb.util import sortbuf
from webdb.util.sortbuf import SortBuffer


def records(rng: random.Random, n: int) -> list[bytes]:
    """Unique records (a sequence number at the end, as the loaders' are), shared prefixes."""
    return [b"http://h%d.test/%s\x00%08d" % (rng.randrange(9), rng.randbytes(rng.randrange(60)), i) for i in range(n)]


@pytest.mark.parametrize("limit", [2, 3, 5, sortbuf.MAX_MERGE_RUNS])
def test_sorted_with_folded_runs(tmp_path, monkeypatch, limit):
    monkeypatch.setattr(sortbuf, "MAX_MERGE_RUNS", limit)
    recs = records(random.Random(limit), 6000)
    buf = SortBuffer(str(tmp_path), "t", 1, block_size=1024)  # 64 KiB: a run every ~500 records
    for i in range(0, len(recs), 97):
        buf.extend(recs[i : i + 97])
    spilled = len(buf.runs)
    assert spilled > 5
    out = list(buf.sorted())
    assert out == sorted(recs)
    assert len(buf.runs) <= max(1, limit - 1)  # what was merged at the end, with the tail in memory
    # Folding writes new runs only when the runs and the tail outnumber the limit.
    assert (buf.spilled > spilled) == (spilled + 1 > limit)
    buf.cleanup()
    assert os.listdir(tmp_path) == []


def test_sorted_in_memory_and_empty(tmp_path):
    recs = records(random.Random(1), 300)
    buf = SortBuffer(str(tmp_path), "t", 1 << 20)
    buf.extend(recs)
    assert list(buf.sorted()) == sorted(recs) and buf.runs == []
    assert list(SortBuffer(str(tmp_path), "e", 1 << 20).sorted()) == []
