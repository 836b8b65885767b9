"""One engine: the same calls through ``Writer`` (the local transport, one process) and through
``webdb update`` on a local rack (one process per section, ndfs share groups) give byte-identical
tables and the same manifest, at k = 1, 2, 3 (one section protocol, two transports)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from dbutil import batch_a, batch_b
from rackutil import split

import webdb
from webdb.core.manifest import Manifest
from webdb.writer.engine import LEVEL_STEPS
from webdb.writer.inputs import CallRecorder, apply_call
from webdb.writer.rack import Rack, update

REPLAY = "webdb.writer.inputs:replay_calls"
SETTINGS = {"sync": False, "block_size": 512}


def recorded(batch) -> list[str]:
    rec = CallRecorder()
    batch(rec)
    return rec.calls


def digests(db: webdb.WebDB) -> list[dict[str, str]]:
    """sha256 of every table file of the committed generation, per section."""
    out = []
    for j, tabs in enumerate(db.manifest().tables):
        d = Path(db.section_dir(j))
        out.append({t: hashlib.sha256((d / e["file"]).read_bytes()).hexdigest() for t, e in tabs.items()})
    return out


def same_parts(m: Manifest) -> dict:
    """What a batch's manifest says independent of timing and transport."""
    keep = ("section", "records", "bytes", "emitted", "decoded_blocks", "raw_blocks", "patched_blocks", *LEVEL_STEPS)
    return {
        "generation": m.generation,
        "parent": m.parent,
        "sections": m.sections,
        "tables": m.tables,
        "status": m.status,
        "edits": m.edits,
        "stages": [
            {"stage": s["stage"], "sections": [{k: r[k] for k in keep if k in r} for r in s["sections"]]}
            for s in m.stages
        ],
    }


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("k", "workers"), [(1, 0), (2, 0), (3, 0), (3, 3)])
def test_writer_and_update_write_identical_tables(k: int, workers: int, tmp_path: Path) -> None:
    """``workers`` 0: a small batch runs in-process; 3: in the local executor's processes."""
    local = webdb.create(str(tmp_path / "w" / "crawl"), sections=k, **SETTINGS)
    rack_db = webdb.create(str(tmp_path / "r" / "crawl"), sections=k, **SETTINGS)
    rack = Rack.local(rack_db.path)
    for tag, calls in (("a", recorded(batch_a)), ("b", recorded(batch_b))):
        with local.writer(workers=workers or None) as w:
            for c in calls:
                apply_call(w, json.loads(c))
        res = update(rack, split(calls, [tmp_path] * k, tag), input_fn=REPLAY)
        assert res.committed
        assert digests(local) == digests(rack_db)
        assert same_parts(local.manifest()) == same_parts(rack_db.manifest())
        assert rack_db.manifest().distributed is not None and local.manifest().distributed is None
    assert len(local.sections().breakpoints) == k - 1
    assert [len(d) for d in digests(local)] == [4] * k  # every section has all four tables
