"""Run batch B on a db in this process (killed by a fault point or by the test)."""

import sys

sys.path.insert(0, sys.path[0])

from dbutil import batch_b  # noqa: E402

import webdb  # noqa: E402

if __name__ == "__main__":
    db = webdb.open(sys.argv[1])
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    with db.writer(workers=workers) as w:
        batch_b(w)
    print("committed")
