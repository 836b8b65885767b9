#!/usr/bin/env python3
"""lz4 ``acceleration`` on a db's real table blocks: encode CPU, bytes, decode CPU per value.

    python bench/lz4_accel.py DB [--accel 1,2,4,8,16] [--kinds pbu,pbm,lbm,lbu] [--blocks N] [--repeat 3]

Every block of each table file of the kinds asked (section by section; ``--blocks`` caps the
blocks taken per file) is read and decoded once, then, for each acceleration A, encoded again
as the writer encodes it (``block.seal_block`` at acceleration A: ``lz4.block.compress(raw,
mode="fast", acceleration=A)``, in lz4 pieces for PagesByURL and LinksByURL) and the
results decoded as a read decodes them (``unpack_block``: CRC, decompression, offsets).  One
JSON line per (kind, A): blocks, raw MiB, stored MiB, ``encode_s`` and ``decode_s`` (CPU
seconds, best of ``--repeat``), and the ratio of stored bytes to A = 1's.  The decoded raw
bytes are checked equal to the input for every A.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from webdb.errors import CorruptionError  # noqa: E402
from webdb.tables import block as B  # noqa: E402
from webdb.tables.format import (  # noqa: E402
    KIND_LINKS_BY_MD5,
    KIND_LINKS_BY_URL,
    KIND_PAGES_BY_MD5,
    KIND_PAGES_BY_URL,
)
from webdb.tables.table import PIECES_KINDS, TableReader  # noqa: E402

KINDS = {"pbu": KIND_PAGES_BY_URL, "pbm": KIND_PAGES_BY_MD5, "lbm": KIND_LINKS_BY_MD5, "lbu": KIND_LINKS_BY_URL}


def seal(raw: bytes, pieces: bool, piece_bytes: int, accel: int) -> bytes:
    """The stored block the writer makes of ``raw`` with lz4 at acceleration ``accel``."""
    return B.seal_block(raw, B.CODEC_LZ4_PIECES if pieces else B.CODEC_LZ4, piece_bytes, accel)


def files_of(db: str, kind: int) -> list[str]:
    out = []
    for p in sorted(glob.glob(os.path.join(db, "section-*", "**", "*"), recursive=True)):
        if not os.path.isfile(p) or p.endswith((".json", ".committed")):
            continue
        try:
            t = TableReader(p, lazy=True)
        except (CorruptionError, OSError):  # not a table file (manifests, locks), or one being written
            continue
        if t.kind == kind:
            out.append(p)
        t.close()
    return out


def raws(path: str, most: int) -> list[bytes]:
    t = TableReader(path)
    try:
        return [t.raw(i, fill_cache=False).raw for i in range(min(t.nblocks, most))]
    finally:
        t.close()


def best(fn, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        out = min(out, time.process_time() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db")
    ap.add_argument("--accel", default="1,2,4,8,16")
    ap.add_argument("--kinds", default="pbu,pbm")
    ap.add_argument("--blocks", type=int, default=1 << 30, help="most blocks taken per file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=32768, help="the db's block_size (sets the piece size)")
    a = ap.parse_args()
    accels = [int(x) for x in a.accel.split(",")]
    piece_bytes = max(1, min(a.block_size // 4, B.PIECE_BYTES))
    for name in a.kinds.split(","):
        kind = KINDS[name]
        pieces = kind in PIECES_KINDS
        blocks = [r for p in files_of(a.db, kind) for r in raws(p, a.blocks)]
        if not blocks:
            print(json.dumps({"kind": name, "blocks": 0}), flush=True)
            continue
        raw_bytes = sum(map(len, blocks))
        base = None
        for acc in accels:
            sealed = [seal(r, pieces, piece_bytes, acc) for r in blocks]
            for r, s in zip(blocks, sealed):
                if B.unpack_block(s, "bench").raw != r:
                    raise SystemExit(f"{name}: acceleration {acc} does not round-trip")
            enc = best(lambda acc=acc, p=pieces, bl=blocks: [seal(r, p, piece_bytes, acc) for r in bl], a.repeat)
            dec = best(lambda sealed=sealed: [B.unpack_block(s, "bench") for s in sealed], a.repeat)
            stored = sum(map(len, sealed))
            base = base or stored
            row = {
                "kind": name,
                "accel": acc,
                "blocks": len(blocks),
                "raw_mib": round(raw_bytes / 2**20, 1),
                "stored_mib": round(stored / 2**20, 1),
                "bytes_vs_a1": round(stored / base, 3),
                "encode_s": round(enc, 3),
                "decode_s": round(dec, 3),
                "encode_mb_s": round(raw_bytes / enc / 1e6),
                "load": round(os.getloadavg()[0], 1),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
