#!/usr/bin/env python3
"""CPU of one page-table merge split into what follows the table and what follows the edits.

    python bench/page_merge.py OLD NEW [--repeat 3]

OLD and NEW are two consecutive generations of one section's PagesByURL (``.pbu``) or
PagesByMD5 (``.pbm``) file (copy them out of a db while ``cpu_rounds.py`` runs: a round
removes the older generation once the next one commits).  The records that differ between
them (changed, added, deleted) are replayed as point edits through ``MergeCursor.merge_points``
into a scratch file beside NEW, as stage 1 or 2 merges a round's edits, and the script prints
one JSON line of CPU seconds (best of ``--repeat``):

- ``merge``: the replay (for PagesByMD5 its output is byte-identical to NEW: ``same``);
- ``sparse``: every 20th edit only (per-block costs with few edits per block);
- ``carry``: no edit (every block copied raw, CRC checked);
- ``decode``: every block read, CRC-checked and decompressed (no output);
- ``floor``: ``decode`` plus the encoding of every block as it stands (lz4, lz4 pieces for
  PagesByURL) — what a merge that touches every block cannot avoid without changing bytes.

``merge - floor`` is the Python work per edit and per block.  The scratch file is removed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from webdb.errors import CorruptionError  # noqa: E402
from webdb.tables.block import encode_run  # noqa: E402
from webdb.tables.format import KIND_PAGES_BY_MD5, KIND_PAGES_BY_URL  # noqa: E402
from webdb.tables.merge import MergeCursor  # noqa: E402
from webdb.tables.table import TableReader, TableWriter  # noqa: E402


def _records(t: TableReader):
    for i in range(t.nblocks):
        ks, vs = t.block(i, fill_cache=False)
        yield from zip(ks, vs)


def diff(old: TableReader, new: TableReader) -> list[tuple[bytes, bytes | None]]:
    """The point edits that make ``new`` of ``old``: (key, value), None deleting the key."""
    out: list[tuple[bytes, bytes | None]] = []
    ia, ib = _records(old), _records(new)
    x, y = next(ia, None), next(ib, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            out.append((x[0], None))
            x = next(ia, None)
        elif x is None or y[0] < x[0]:
            out.append(y)
            y = next(ib, None)
        else:
            if x[1] != y[1]:
                out.append(y)
            x, y = next(ia, None), next(ib, None)
    return out


def _sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=32768, help="the db's block_size")
    a = ap.parse_args()
    try:
        old, new = TableReader(a.old), TableReader(a.new)
        if old.kind not in (KIND_PAGES_BY_URL, KIND_PAGES_BY_MD5) or new.kind != old.kind:
            raise CorruptionError(f"{a.new}: not the next generation of the page table {a.old}")
        edits = diff(old, new)
    except (OSError, CorruptionError) as e:
        print(f"page_merge.py: {e}", file=sys.stderr)
        sys.exit(2)
    out_path = a.new + ".replay"
    row: dict = {"file": os.path.basename(a.new), "blocks": old.nblocks, "edits": len(edits)}

    def merge(eds: list) -> tuple[float, MergeCursor]:
        if os.path.exists(out_path):
            os.unlink(out_path)
        c0 = time.process_time()
        w = TableWriter(out_path, old.kind, a.block_size, "lz4", sync=False)
        cur = MergeCursor(old, w)
        cur.merge_points(iter(eds), lambda k, ov, v: v)
        cur.finish()
        w.close()
        return time.process_time() - c0, cur

    try:
        for name, eds in (("merge", edits), ("sparse", edits[::20]), ("carry", [])):
            best, cur = min((merge(eds) for _ in range(a.repeat)), key=lambda r: r[0])
            row[name] = round(best, 3)
            row[name + "_decoded_blocks"] = cur.decoded_blocks
            if name == "merge":
                row["same"] = _sha(out_path) == _sha(a.new)
        w = TableWriter(out_path + ".x", old.kind, a.block_size, "lz4", sync=False)
        w.abort()  # (only its codec and piece size are used)
        for name, enc in (("decode", False), ("floor", True)):
            best = None
            for _ in range(a.repeat):
                c0 = time.process_time()
                for i in range(old.nblocks):
                    rb = old.raw(i, fill_cache=False)
                    if enc:
                        encode_run(rb.raw[: rb.start(rb.n)], rb.lens(), w.codec, w.piece_bytes)
                t = time.process_time() - c0
                best = t if best is None else min(best, t)
            row[name] = round(best, 3)
    finally:
        if os.path.exists(out_path):
            os.unlink(out_path)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
