"""The speed claims the unit tests used to assert, measured here instead (tests bound hangs with
pytest-timeout and never assert how long something took).

    python bench/bench_claims.py [--only demo,parse_deep,...] [--json]

Each claim is run once and printed with its time and the bound the old assert used:

* ``demo``: ``webdb demo`` with no arguments, start to exit (was ``< 45 s`` in tests/test_demo.py);
* ``parse_deep``: ``parse()`` of 100,000 nested ``<div>`` (was ``< 5 s`` in tests/test_parse.py);
* ``parse_huge``: ``parse()`` of ~9 MB of links with ``max_parse`` 1 MiB (was ``< 10 s``);
* ``fetch_drip``: a body dripping 1 byte per 50 ms against ``fetch_timeout=1`` (was ``< 2 s``
  in tests/test_fetch.py: the fetch must end near its timeout, not when the body ends);
* ``section_killed``: a local 3-section update whose section 2 is killed before step 3 ships,
  until UpdateFailed (was ``< 10 s`` in tests/test_distributed.py).

Numbers depend on the machine and its load: print the load average next to them (done here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def demo() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "webdb.cli.main", "demo"],
            cwd=tmp,
            capture_output=True,
            text=True,
            env={**os.environ, "TMPDIR": tmp},
        )
        took = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"webdb demo failed ({p.returncode}): {p.stderr[-2000:]}")
    return took


def parse_deep() -> float:
    from fetchlist.parse import parse

    depth = 100_000
    data = b"<a href='/first'>first</a>" + b"<div>" * depth + b"<a href='/deep'>deep</a>" + b"</div>" * depth
    t = time.perf_counter()
    parse("http://example.com/", data, "text/html")
    return time.perf_counter() - t


def parse_huge() -> float:
    from fetchlist.parse import parse

    links = b"".join(b'<a href="/p%d">anchor %d</a>\n' % (i, i) for i in range(300_000))
    t = time.perf_counter()
    parse("http://example.com/", b"<html><body>" + links + b"</body></html>", "text/html", max_parse=1 << 20)
    return time.perf_counter() - t


def fetch_drip() -> float:
    from httpsite import TestSite

    from fetchlist.fetch import Fetcher
    from fetchlist.segment import FetchEntry

    site = TestSite()
    try:
        records = []
        Fetcher(
            politeness_delay=0.0, threads=1, progress=False, read_timeout=0.5, fetch_timeout=1.0, robots_obey=False
        ).fetch([FetchEntry(site.url("misc", "/drip"))], records.append)
    finally:
        site.server.close()
    (rec,) = records
    if "fetch_timeout" not in (rec.error or ""):
        raise RuntimeError(f"the drip fetch did not end by fetch_timeout: {rec.error!r}")
    return rec.elapsed


def section_killed() -> float:
    from dbutil import batch_a, batch_b
    from rackutil import split

    import webdb
    from webdb.writer.inputs import CallRecorder
    from webdb.writer.rack import Rack, UpdateFailed, update

    def recorded(batch) -> list[str]:
        rec = CallRecorder()
        batch(rec)
        return rec.calls

    replay = "webdb.writer.inputs:replay_calls"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        db = webdb.create(str(d / "crawl"), sections=3, sync=False, block_size=512)
        rack = Rack.local(db.path)
        update(rack, split(recorded(batch_a), [d] * 3, "a"), input_fn=replay)
        inputs = split(recorded(batch_b), [d] * 3, "b")
        t = time.perf_counter()
        try:
            update(
                rack, inputs, input_fn=replay, heartbeat_timeout=4.0, env={"WEBDB_FAULTS": "dist.s2.step3.before_ship"}
            )
        except UpdateFailed:
            return time.perf_counter() - t
    raise RuntimeError("the update with a killed section committed")


CLAIMS: dict[str, tuple[Callable[[], float], float]] = {
    "demo": (demo, 45.0),
    "parse_deep": (parse_deep, 5.0),
    "parse_huge": (parse_huge, 10.0),
    "fetch_drip": (fetch_drip, 2.0),
    "section_killed": (section_killed, 10.0),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated claim names (default: all)")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of a table")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(CLAIMS)
    unknown = [n for n in names if n not in CLAIMS]
    if unknown:
        ap.error(f"unknown claim(s) {', '.join(unknown)}; known: {', '.join(CLAIMS)}")
    load = os.getloadavg()
    results = {}
    for name in names:
        fn, bound = CLAIMS[name]
        results[name] = {"seconds": round(fn(), 3), "bound": bound}
    if args.json:
        print(json.dumps({"cores": os.cpu_count(), "load": load, "claims": results}))
        return 0
    print(f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for name, r in results.items():
        verdict = "within" if r["seconds"] < r["bound"] else "OVER"
        print(f"{name:15} {r['seconds']:8.2f} s   {verdict} the old bound of {r['bound']:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
