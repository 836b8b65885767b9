"""Run batch B on a db in this process (killed by a fault point or by the test).

argv: DB [WORKERS [stop]]; with ``stop`` the child prints ``writing`` once the writer is open
and stops itself (SIGSTOP), so the test can start its kill clock from a known instant.
"""

import os
import signal
import sys

sys.path.insert(0, sys.path[0])

from dbutil import batch_b  # noqa: E402

import webdb  # noqa: E402

if __name__ == "__main__":
    db = webdb.open(sys.argv[1])
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    stop = sys.argv[3:] == ["stop"]
    with db.writer(workers=workers) as w:
        if stop:
            print("writing", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        batch_b(w)
    print("committed")
