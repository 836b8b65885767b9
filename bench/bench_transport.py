"""Throughput of the ndfs transports on loopback: local, paramiko SFTP, scp and rsync.

Starts one throwaway sshd on 127.0.0.2 (tests/sshd.py), writes a random file, and times for
each transport:

- ``send``: the bare copy to a temporary name (what the wire and the tool cost);
- ``put``: the full atomic put (copy + local hash + remote sha256sum + rename + flag);
- ``get``: the full get (copy + hash + check against the flag).

With ``--files N`` each op moves N files of ``--mb`` MiB one after another, as a section
ships a step's edit files: the per-file costs (round trips, the remote check) then show.
Prints one JSON object per line.  Usage::

    python bench/bench_transport.py --mb 256 --repeat 2
    python bench/bench_transport.py --mb 3 --files 20 --only sftp scp

Results and the choice they support are in docs/ndfs.md ("Throughput").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # run from a checkout, installed or not

from sshd import start_cluster  # noqa: E402

from webdb.ndfs.ssh import SFTPTransport, SubprocessTransport  # noqa: E402
from webdb.ndfs.transport import LocalTransport, Transport  # noqa: E402


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cpus, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def write_random(path: Path, mb: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=256, help="file size in MiB (default 256)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per transport; the best is reported")
    ap.add_argument("--only", nargs="*", default=None, help="subset of: local sftp scp rsync")
    ap.add_argument("--files", type=int, default=1, help="files moved one after another per op (default 1)")
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="webdb-bench-"))
    os.environ["HOME"] = str(base / "home")  # never the user's ~/.ssh
    cluster = start_cluster(base / "sshd", k=1)
    host = cluster[0]
    src = base / "src.bin"
    write_random(src, args.mb)
    size = src.stat().st_size
    cfg = host.host_config(timeout=120.0)
    transports: dict[str, Transport] = {
        "local": LocalTransport(base / "local-root", label="local"),
        "sftp": SFTPTransport(cfg),
        "scp": SubprocessTransport(cfg, "scp", threshold=0),
        "rsync": SubprocessTransport(cfg, "rsync", threshold=0),
    }
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    where = machine()
    try:
        for name, t in transports.items():
            if args.only and name not in args.only:
                continue
            t.makedirs("bench")
            best: dict[str, float] = {}
            for i in range(args.repeat):
                tmp = f"bench/raw-{i}"
                got = base / f"got-{name}-{i}"
                n = range(args.files)
                runs = {
                    "send": lambda t=t, tmp=tmp, n=n: [t._send_file(str(src), f"{tmp}-{j}", size) for j in n],
                    "put": lambda t=t, i=i, n=n: [t.put(src, f"bench/put-{i}-{j}") for j in n],
                    "get": lambda t=t, i=i, got=got, n=n: [t.get(f"bench/put-{i}-{j}", got) for j in n],
                }
                for op, fn in runs.items():
                    s = timed(fn)
                    best[op] = min(best.get(op, s), s)
                for j in n:
                    t.delete(f"{tmp}-{j}")
                got.unlink()
            for op, s in best.items():
                rec = {
                    "transport": name,
                    "op": op,
                    "mib": args.mb,
                    "files": args.files,
                    "seconds": round(s, 3),
                    "mib_per_s": round(args.files * size / (1 << 20) / s, 1),
                    "date": when,
                    "machine": where,
                }
                print(json.dumps(rec), flush=True)
            t.remove_tree("bench")
            t.close()
    finally:
        cluster.stop_all()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
