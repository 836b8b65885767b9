"""bench/page_merge.py: a page table's merge replayed from two generations, split into its floor."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

from webdb.tables.format import KIND_LINKS_BY_MD5, KIND_PAGES_BY_MD5, KIND_PAGES_BY_URL
from webdb.tables.merge import MergeCursor
from webdb.tables.table import TableReader, TableWriter

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(os.path.dirname(HERE), "bench", "page_merge.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *args, "--repeat", "1"], capture_output=True, text=True, timeout=300)


def _generations(tmp_path, kind: int) -> tuple[str, str, int]:
    """An old table and the table a round's point edits make of it (as stage 1 or 2 does)."""
    rnd = random.Random(7)
    keys = sorted({rnd.randbytes(16) + b"http://h/%d" % i for i in range(3000)})
    old = str(tmp_path / "old")
    w = TableWriter(old, kind, 4096, "lz4", sync=False)
    w.add_many(keys, [rnd.randbytes(rnd.randrange(20, 90)) for _ in keys])
    w.close()
    edits = {k: (None if rnd.random() < 0.3 else rnd.randbytes(40)) for k in rnd.sample(keys, 200)}
    edits.update({rnd.randbytes(16) + b"http://new/%d" % i: rnd.randbytes(50) for i in range(100)})
    new = str(tmp_path / "new")
    cur = MergeCursor(TableReader(old), w := TableWriter(new, kind, 4096, "lz4", sync=False))
    cur.merge_points(iter(sorted(edits.items())), lambda k, ov, v: v)
    cur.finish()
    w.close()
    return old, new, len(edits)  # (every delete names a stored key, every new key has a value)


def test_replay_is_byte_identical_and_split(tmp_path):
    for kind in (KIND_PAGES_BY_MD5, KIND_PAGES_BY_URL):
        (tmp_path / str(kind)).mkdir()
        old, new, changed = _generations(tmp_path / str(kind), kind)
        p = _run(old, new, "--block-size", "4096")
        assert p.returncode == 0, p.stderr
        row = json.loads(p.stdout)
        assert row["edits"] == changed
        assert row["same"] is True
        assert row["merge_decoded_blocks"] > 0 and row["carry_decoded_blocks"] == 0
        for k in ("merge", "sparse", "carry", "decode", "floor"):
            assert row[k] >= 0
        assert not os.path.exists(new + ".replay")


def test_a_table_not_made_by_the_edits_is_not_same(tmp_path):
    old, new, _ = _generations(tmp_path, KIND_PAGES_BY_MD5)
    # The same records as `new`, written in one pass: its blocks are cut elsewhere.
    t = TableReader(new)
    ks, vs = [], []
    for i in range(t.nblocks):
        k, v = t.block(i)
        ks += k
        vs += v
    other = str(tmp_path / "other")
    w = TableWriter(other, KIND_PAGES_BY_MD5, 4096, "lz4", sync=False)
    w.add_many(ks, vs)
    w.close()
    assert open(other, "rb").read() != open(new, "rb").read()
    p = _run(old, other, "--block-size", "4096")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["same"] is False


def test_bad_input_is_named(tmp_path):
    old, new, _ = _generations(tmp_path, KIND_PAGES_BY_MD5)
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a table" * 100)
    p = _run(old, str(junk))
    assert p.returncode == 2
    assert str(junk) in p.stderr and "Traceback" not in p.stderr
    links = str(tmp_path / "links")
    w = TableWriter(links, KIND_LINKS_BY_MD5, 4096, "lz4", sync=False)
    w.add(b"k", b"v")
    w.close()
    p = _run(links, links)
    assert p.returncode == 2
    assert "not the next generation of the page table" in p.stderr and "Traceback" not in p.stderr
