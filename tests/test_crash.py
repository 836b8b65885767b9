"""Kill the writer at every fault point and at random instants: the db stays at the old state
(or, past the commit point, the new one), check() passes, and rerunning the batch completes."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from dbutil import batch_b, make_db, snapshot

import webdb

HERE = os.path.dirname(os.path.abspath(__file__))
STAGE_POINTS = [f"stage{s}.{p}" for s in range(1, 6) for p in ("before_table_close", "done")]
POINTS = [
    "close.after_route",
    "stage1.before_emit",
    *STAGE_POINTS,
    *[f"close.after_stage{s}" for s in range(1, 6)],
    "commit.before_current",
]


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """The db after batch A (old) and after A+B (new), built without faults."""
    base = tmp_path_factory.mktemp("crash")
    db = make_db(base / "old")
    old = snapshot(db)
    shutil.copytree(base / "old", base / "new")
    new_db = webdb.open(str(base / "new"))
    with new_db.writer() as w:
        batch_b(w)
    return base, old, snapshot(new_db)


def run_child(path, faults: str = "", workers: int = 0, kill_after: float | None = None) -> int:
    env = dict(os.environ, WEBDB_FAULTS=faults)
    p = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "crash_child.py"), str(path), str(workers)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if kill_after is not None:
        time.sleep(kill_after)
        p.send_signal(signal.SIGKILL)
    p.communicate(timeout=120)
    return p.returncode


def fresh_copy(base, name):
    dst = base / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(base / "old", dst)
    return dst


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_fault_point_keeps_old_state_then_rerun_completes(states, point):
    base, old, new = states
    path = fresh_copy(base, "f-" + point)
    rc = run_child(path, point)
    assert rc == -signal.SIGKILL, f"fault point {point} was not reached"
    db = webdb.open(str(path))
    assert snapshot(db) == old
    with db.reader() as r:
        r.check()
    assert run_child(path) == 0
    assert snapshot(db) == new
    with db.reader() as r:
        r.check()
    # Nothing of the interrupted batch is left behind.
    leftovers = [f for d in os.listdir(path) if d.startswith("section-") for f in os.listdir(path / d)]
    assert not [f for f in leftovers if f == "edits"]


def test_kill_after_commit_point_keeps_new_state(states):
    base, old, new = states
    path = fresh_copy(base, "after-commit")
    assert run_child(path, "commit.after_current") == -signal.SIGKILL
    db = webdb.open(str(path))
    assert snapshot(db) == new
    with db.writer():
        pass  # the next writer cleans up what the killed one left
    assert not os.path.exists(path / "tmp")


@pytest.mark.parametrize("point", ["stage1.done", "stage3.before_table_close", "stage4.done"])
def test_worker_killed_in_parallel_pool_aborts_batch(states, point):
    base, old, new = states
    path = fresh_copy(base, "pool-" + point)
    rc = run_child(path, point, workers=2)
    assert rc != 0
    db = webdb.open(str(path))
    assert snapshot(db) == old
    assert run_child(path, workers=2) == 0
    assert snapshot(db) == new


def test_kill_at_random_instants(states):
    base, old, new = states
    rng = random.Random(7)
    path = base / "random"
    # How long an uninterrupted run takes, to spread kills over it.
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(base / "old", path)
    t0 = time.monotonic()
    assert run_child(path) == 0
    span = time.monotonic() - t0
    seen = set()
    for _ in range(8):
        shutil.rmtree(path)
        shutil.copytree(base / "old", path)
        run_child(path, kill_after=rng.uniform(0.05, span))
        db = webdb.open(str(path))
        s = snapshot(db)
        assert s == old or s == new
        seen.add("new" if s == new else "old")
        with db.reader() as r:
            r.check()
        if s == old:  # killed before the commit point: the rerun completes the batch
            assert run_child(path) == 0
            assert snapshot(db) == new
