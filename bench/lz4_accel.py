#!/usr/bin/env python3
"""lz4 ``acceleration`` on a db's real table blocks: encode CPU, bytes, decode CPU per value.

    python bench/lz4_accel.py DB [--accel 1,2,4,8,16] [--kinds pbu,pbm,lbm,lbu] [--blocks N] [--repeat 3]

Every block of each table file of the kinds asked (section by section; ``--blocks`` caps the
blocks taken per file) is read and decoded once, then, for each acceleration A, encoded again
as the writer encodes it but with ``lz4.block.compress(raw, mode="fast", acceleration=A)``
(lz4 pieces for PagesByURL and LinksByURL: ``_blockc.seal_pieces`` with that callable; A = 1
is checked to give the writer's bytes) and decoded as a read decodes it (``unpack_block``:
CRC, decompression, offsets; checked equal to the input).  One JSON line per (kind, A):
blocks, raw MiB, stored MiB and their ratio to A = 1's, ``encode_s`` and ``decode_s`` (CPU
seconds, the best of ``--repeat`` passes over the values in turn, so a shared machine's drift
hits them alike).  Needs the compiled codec (``_blockc.seal_pieces`` takes the compressor).
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lz4.block  # noqa: E402

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
    """``block.seal_block`` of ``raw`` with lz4 at acceleration ``accel`` (1: the writer's bytes)."""
    comp = functools.partial(lz4.block.compress, mode="fast", store_size=True, acceleration=accel)
    codec, body = B.CODEC_LZ4_PIECES, None
    if pieces:
        body = B.blockc.seal_pieces(raw, comp, piece_bytes, B.crc32)
    if body is None:
        codec, body = B.CODEC_LZ4, comp(raw)
    return body + B.TRAILER.pack(codec, B.crc32(bytes((codec,)), B.crc32(body)))


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


def cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db")
    ap.add_argument("--accel", default="1,2,4,8,16")
    ap.add_argument("--kinds", default="pbu,pbm")
    ap.add_argument("--blocks", type=int, default=1 << 30, help="most blocks taken per file")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--block-size", type=int, default=32768, help="the db's block_size (sets the piece size)")
    a = ap.parse_args()
    if B.blockc is None:
        sys.exit("lz4_accel.py: needs the compiled block codec (webdb.tables._blockc)")
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
        sealed = {}
        for acc in accels:
            sealed[acc] = [seal(r, pieces, piece_bytes, acc) for r in blocks]
            for r, s in zip(blocks, sealed[acc]):
                if B.unpack_block(s, "bench").raw != r:
                    sys.exit(f"lz4_accel.py: {name}: acceleration {acc} does not round-trip")
                if acc == 1 and s != B.seal_block(r, B.CODEC_LZ4_PIECES if pieces else B.CODEC_LZ4, piece_bytes):
                    sys.exit(f"lz4_accel.py: {name}: acceleration 1 is not the writer's bytes")
        enc = dict.fromkeys(accels, float("inf"))
        dec = dict.fromkeys(accels, float("inf"))
        for _ in range(a.repeat):
            for acc in accels:
                enc[acc] = min(
                    enc[acc], cpu(lambda acc=acc, p=pieces, bl=blocks: [seal(r, p, piece_bytes, acc) for r in bl])
                )
                dec[acc] = min(dec[acc], cpu(lambda ss=sealed[acc]: [B.unpack_block(s, "bench") for s in ss]))
        one = sum(map(len, sealed[1])) if 1 in sealed else None
        for acc in accels:
            stored = sum(map(len, sealed[acc]))
            row = {
                "kind": name,
                "accel": acc,
                "blocks": len(blocks),
                "raw_mib": round(raw_bytes / 2**20, 1),
                "stored_mib": round(stored / 2**20, 1),
                "bytes_vs_a1": round(stored / one, 3) if one else None,
                "encode_s": round(enc[acc], 3),
                "decode_s": round(dec[acc], 3),
                "encode_mb_s": round(raw_bytes / enc[acc] / 1e6),
                "load": round(os.getloadavg()[0], 1),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
