#!/usr/bin/env python3
"""CPU seconds of the scrub: ``TableReader.check_crcs`` over every link-table level file of a db.

    python bench/scrub_crcs.py DB [--repeat 3] [--label L]

What a round's scrub verifies (``_scrub`` in webdb/writer/cascade.py, ``scrub_rounds`` 1): the
CRC of every block of the LinksByMD5 and LinksByURL level files (``section-*/*.lbm``,
``*.lbu``: the base and the delta runs a committed db holds), in one process.  One JSON line
per pass: bytes, blocks, this process's user and system CPU seconds, wall, GB per CPU second,
and the CRC callable webdb chose (``webdb.tables.block.crc32``).  Nothing is written.  Run it
with the version to measure first on PYTHONPATH; the first pass may read from disk, later
passes from the page cache (what a round's scrub finds, the previous round having written or
read the files).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import time

from webdb.tables import block
from webdb.tables.table import TableReader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    files = sorted(
        f for x in ("lbm", "lbu") for f in glob.glob(os.path.join(a.db, "section-*", f"*.{x}")) if os.path.isfile(f)
    )
    if not files:
        raise SystemExit(f"{a.db}: no link-table level files (section-*/*.lbm, *.lbu)")
    crc = f"{getattr(block.crc32, '__module__', None) or ''}.{block.crc32.__name__}".lstrip(".")
    for p in range(a.repeat):
        r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        size = blocks = 0
        for f in files:
            t = TableReader(f)
            try:
                size += t.check_crcs()
                blocks += t.nblocks
            finally:
                t.close()
        r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - w0
        user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
        row = {"label": a.label, "pass": p + 1, "files": len(files), "gb": round(size / 1e9, 3), "blocks": blocks}
        row.update(user_s=round(user, 3), sys_s=round(sys_, 3), cpu_s=round(user + sys_, 3), wall_s=round(wall, 2))
        row.update(gb_per_cpu_s=round(size / 1e9 / max(user + sys_, 1e-9), 2), crc=crc, load=os.getloadavg()[0])
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
