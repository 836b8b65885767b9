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

import psutil
import pytest
from dbutil import batch_b, make_db, snapshot
from waiting import wait_until

import webdb

HERE = os.path.dirname(os.path.abspath(__file__))
STAGE_POINTS = [f"stage{s}.{p}" for s in range(1, 6) for p in ("before_table_close", "done")]
POINTS = [
    "close.after_route",
    "stage1.before_emit",
    "stage1.due_run_written",
    "stage1.due_written",
    "stage1.marks_written",
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
    """Run batch B in a child; with ``kill_after``, SIGKILL it that many seconds after the batch
    began (the child stops itself with its writer open; 0 kills it there, before any edit)."""
    env = dict(os.environ, WEBDB_FAULTS=faults)
    argv = [sys.executable, os.path.join(HERE, "crash_child.py"), str(path), str(workers)]
    p = subprocess.Popen(
        argv + (["stop"] if kill_after is not None else []),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if kill_after is not None:
        _wait_stopped(p)
        if kill_after > 0:
            p.send_signal(signal.SIGCONT)
            time.sleep(kill_after)  # the random instant itself; nothing waits on the child here
        p.send_signal(signal.SIGKILL)
    p.communicate(timeout=120)
    return p.returncode


def _wait_stopped(p: subprocess.Popen) -> None:
    """Until crash_child, run with ``stop``, has its writer open and has stopped itself."""
    if p.stdout.readline() != "writing\n":
        _, err = p.communicate(timeout=120)
        raise AssertionError(f"crash_child did not begin the batch (exit {p.returncode}): {err}")
    child = psutil.Process(p.pid)
    wait_until(lambda: child.status() == psutil.STATUS_STOPPED, 60, "crash_child to stop itself")


def batch_seconds(path) -> float:
    """How long batch B takes from the open writer to the exit (to spread random kills over)."""
    p = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "crash_child.py"), str(path), "0", "stop"],
        env=dict(os.environ, WEBDB_FAULTS=""),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_stopped(p)
    t0 = time.monotonic()
    p.send_signal(signal.SIGCONT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return time.monotonic() - t0


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


@pytest.mark.timeout(600)
def test_kill_at_random_instants(states):
    base, old, new = states
    rng = random.Random(7)
    path = base / "random"
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(base / "old", path)
    span = batch_seconds(path)  # a measurement to spread the kills over, not a check
    seen = []
    # The first kill comes while the writer is open and nothing is applied (always the old
    # state); the others are spread over a whole run.
    for delay in [0.0] + [rng.uniform(0.001, span) for _ in range(7)]:
        shutil.rmtree(path)
        shutil.copytree(base / "old", path)
        rc = run_child(path, kill_after=delay)
        assert rc in (-signal.SIGKILL, 0), f"child failed on its own (exit {rc})"
        db = webdb.open(str(path))
        s = snapshot(db)
        assert s == old or s == new
        assert rc == -signal.SIGKILL or s == new, "the child exited 0 without committing"
        seen.append("new" if s == new else "old")
        with db.reader() as r:
            r.check()
        if s == old:  # killed before the commit point: the rerun completes the batch
            assert run_child(path) == 0
            assert snapshot(db) == new
    assert seen[0] == "old", f"a kill with the writer open and nothing applied left the new state: {seen}"


RECOVER_POINTS = ["recover.mark_dropped", "recover.before_current", "recover.after_current", "cleanup.unlinked"]


def run_recover(path, to: int, faults: str = "") -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "webdb.cli.main", "recover", str(path), "--to", str(to)]
    env = dict(os.environ, WEBDB_FAULTS=faults)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("point", RECOVER_POINTS)
def test_kill_during_recover_to_keeps_old_or_new_state(states, point):
    """`webdb recover --to N` rolling back one generation, killed at each of its steps (the
    marks dropped, the flip, the unlinks after it): the db reads as before (generation 2) or
    after (generation 1), check() passes, and running the recover again completes it."""
    base, old, new = states
    path = base / ("r-" + point)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(base / "new", path)
    assert webdb.open(str(path)).committed() == 2
    p = run_recover(path, 1, point)
    assert p.returncode == -signal.SIGKILL, f"fault point {point} was not reached: {p.stderr}"
    db = webdb.open(str(path))
    flipped = point in ("recover.after_current", "cleanup.unlinked")
    assert db.committed() == (1 if flipped else 2)
    assert snapshot(db) == (old if flipped else new)
    with db.reader() as r:
        r.check()
    p = run_recover(path, 1)
    assert p.returncode == 0, p.stderr
    assert snapshot(db) == old
    assert sorted(os.listdir(path / "gen")) == ["00000001.committed", "00000001.json"]
    with db.writer() as w:  # the next writer builds on the rolled-back generation
        batch_b(w)
    assert snapshot(db) == new
