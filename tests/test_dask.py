"""The Dask transport (webdb.writer.daskrun, docs/distributed.md *Dask*): the same section
protocol on a real Dask cluster — a ``distributed.LocalCluster`` whose worker processes each
declare one ``section-J`` resource, every section in its own root — gives byte-identical tables
to the in-process Writer and to the agents' transport; killed workers, a killed scheduler, a
killed coordinator and a misplaced worker leave the db at its old or new state."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from daskutil import start_cluster
from dbutil import batch_a, batch_b
from rackutil import apply_local, committed, gather, local_roots, no_leftovers, split
from test_engine import digests, recorded, same_parts
from waiting import wait_until

import webdb
from webdb.core.lockwait import wait_for_lock
from webdb.writer.daskrun import DaskUnavailable
from webdb.writer.driver import update_dask
from webdb.writer.engine import level_steps
from webdb.writer.rack import Rack, UpdateFailed, create_rack, update

distributed = pytest.importorskip("distributed")

REPLAY = "webdb.writer.inputs:replay_calls"
SETTINGS = {"sync": False, "block_size": 512}
ROOT = Path(__file__).resolve().parent.parent
DASK = shutil.which("dask", path=str(Path(sys.executable).parent)) or "dask"


def rack_of(tmp: Path, k: int, name: str = "hosts.ini") -> tuple[Rack, list[Path]]:
    """A k-section rack db whose section j lives in its own root ``tmp/rJ``."""
    ini, roots = local_roots(tmp, k, name)
    rack = Rack.from_file(ini)
    create_rack(rack, **SETTINGS)
    return rack, roots


@pytest.mark.timeout(600)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_dask_agents_and_writer_write_identical_tables(cluster, k: int, tmp_path: Path) -> None:
    local = webdb.create(str(tmp_path / "w" / "crawl"), sections=k, **SETTINGS)
    rack_d, roots_d = rack_of(tmp_path / "d", k)
    rack_a, roots_a = rack_of(tmp_path / "a", k)
    events: list[dict] = []
    for tag, batch in (("a", batch_a), ("b", batch_b)):
        calls = recorded(batch)
        apply_local(local, calls)
        seen = len(events)
        res = update_dask(
            rack_d,
            cluster.scheduler_address,
            split(calls, [tmp_path] * k, tag),
            input_fn=REPLAY,
            progress=events.append,
        )
        assert res.committed and all(r.ok for r in res.hosts.values()), res.summary()
        assert update(rack_a, split(calls, [tmp_path] * k, tag), input_fn=REPLAY).committed
        d, a = gather(roots_d), gather(roots_a)
        assert digests(local) == digests(d) == digests(a)
        assert same_parts(local.manifest()) == same_parts(d.manifest()) == same_parts(a.manifest())
        # The progress says what the manifest's rows say of the level steps (webdb.writer.engine).
        said = {(e["section"], e["step"], str(level_steps(e))) for e in events[seen:] if e.get("state") == "merged"}
        rows = {(r["section"], st["stage"], str(level_steps(r))) for st in d.manifest().stages for r in st["sections"]}
        assert said == rows
        sent = [[(s["files"], s["bytes"]) for s in m.manifest().distributed["shipped"]] for m in (d, a)]
        assert sent[0] == sent[1]  # the same edit files moved, as task results or ndfs puts
        with d.reader() as r:
            r.check()
    assert [committed(r) for r in roots_d] == [2] * k
    no_leftovers(roots_d)
    merged = {(e["section"], e["step"]) for e in events if e.get("state") == "merged"}
    assert {s for _, s in merged} == {1, 2, 3, 4, 5}
    assert sum(e.get("ev") == "committed" for e in events) == 2 * k


@pytest.mark.timeout(300)
def test_no_worker_for_a_section_is_refused_before_anything_runs(cluster, tmp_path: Path) -> None:
    rack, roots = rack_of(tmp_path, 4)  # the cluster's workers declare section-0..2 only
    with pytest.raises(DaskUnavailable, match=r"declares resource section-3"):
        update_dask(rack, cluster.scheduler_address, {}, input_fn=REPLAY)
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "update", "crawl", "--hosts", str(tmp_path / "hosts.ini"),
         "--dask", cluster.scheduler_address, "--input", REPLAY],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2 and "section-3" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert [committed(r) for r in roots] == [0] * 4


@pytest.mark.timeout(300)
def test_worker_without_the_sections_data_refuses(cluster, tmp_path: Path) -> None:
    rack, roots = rack_of(tmp_path, 2)
    calls = recorded(batch_a)
    assert update_dask(rack, cluster.scheduler_address, split(calls, [tmp_path] * 2, "a"), input_fn=REPLAY).committed
    before = gather(roots).manifest()
    shutil.rmtree(roots[1] / "crawl" / "section-0001")
    with pytest.raises(UpdateFailed) as e:
        update_dask(rack, cluster.scheduler_address, split(calls, [tmp_path] * 2, "b"), input_fn=REPLAY)
    msg = str(e.value)
    assert "section 1" in msg and "worker section-1" in msg and str(roots[1] / "crawl" / "section-0001") in msg, msg
    assert e.value.kind == "BadInput"
    assert [committed(r) for r in roots] == [1, 1]
    assert json.loads((roots[0] / "crawl" / "gen" / "00000001.json").read_text())["tables"] == before.tables


@pytest.mark.timeout(600)
@pytest.mark.parametrize("section", [0, 1])
def test_worker_killed_at_every_stage_reruns_and_completes(section: int, tmp_path: Path) -> None:
    """SIGKILL section's worker once at each step (0..4 before shipping, after stage 5, and
    during its location's commit): each time the nanny restarts it and the task runs again.
    Section 0's worker also holds its location's lock: the restarted one takes it again."""
    k = 2
    rack, roots = rack_of(tmp_path, k)
    flags = tmp_path / "fired"
    flags.mkdir()
    points = [f"dist.s{section}.step{t}.before_ship" for t in range(5)] + [f"dist.s{section}.stage5.done"]
    points.append(f"dist.{rack.section_at[section]}.before_commit")
    faults = ",".join(f"{p}@{flags / p.replace('/', '_')}" for p in points)
    c = start_cluster(k, {"WEBDB_FAULTS": faults})
    try:
        local = webdb.create(str(tmp_path / "w" / "crawl"), sections=k, **SETTINGS)
        calls = recorded(batch_a)
        apply_local(local, calls)
        res = update_dask(rack, c.scheduler_address, split(calls, [tmp_path] * k, "a"), input_fn=REPLAY)
        assert res.committed, res.summary()
    finally:
        c.close()
    assert sorted(os.listdir(flags)) == sorted(p.replace("/", "_") for p in points)  # every kill happened
    assert digests(local) == digests(gather(roots))
    assert [committed(r) for r in roots] == [1, 1]
    with gather(roots).reader() as r:
        r.check()


# ---- a scheduler and workers as `dask` processes -------------------------------------------------


class Procs:
    """`dask scheduler` and `dask worker` processes of one test, killed at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.procs = tmp, []

    def scheduler(self, name: str) -> tuple[subprocess.Popen, str]:
        f = self.tmp / f"{name}.json"
        p = self.start(
            name,
            [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(f)],
        )
        info = wait_until(lambda: f.exists() and f.stat().st_size and json.loads(f.read_text()), 60, "scheduler file")
        return p, info["address"]

    def worker(self, name: str, address: str, j: int, *extra: str, env: dict | None = None) -> subprocess.Popen:
        return self.start(
            name,
            [
                DASK,
                "worker",
                address,
                "--nthreads",
                "1",
                "--no-dashboard",
                "--name",
                name,
                "--resources",
                f"section-{j}=1",
                "--memory-limit",
                "0",
                *extra,
            ],
            env,
        )

    def start(self, name: str, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "wb")
        p = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
        )
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture
def procs(tmp_path: Path):
    p = Procs(tmp_path)
    yield p
    p.close()


def wait_workers(address: str, k: int) -> None:
    from distributed import Client

    with Client(address, timeout=30, set_as_default=False) as c:
        c.wait_for_workers(k, timeout=120)


@pytest.mark.timeout(600)
def test_scheduler_killed_fails_cleanly_and_a_rerun_on_a_new_one_completes(
    procs, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    k = 2
    rack, roots = rack_of(tmp_path, k)
    sched, addr = procs.scheduler("sched1")
    for j in range(k):
        procs.worker(f"old-{j}", addr, j)
    wait_workers(addr, k)
    calls = recorded(batch_a)

    def kill_at_stage2(e: dict) -> None:
        if e.get("state") == "merged" and e.get("step") == 2 and sched.poll() is None:
            os.kill(sched.pid, signal.SIGKILL)

    with pytest.raises(UpdateFailed) as e:
        update_dask(
            rack,
            addr,
            split(calls, [tmp_path] * k, "a"),
            input_fn=REPLAY,
            progress=kill_at_stage2,
            heartbeat_timeout=2,
            connect_timeout=2,
        )
    assert "scheduler" in str(e.value) and addr in str(e.value), str(e.value)
    assert "\n" not in str(e.value) and "Futures cancelled" not in str(e.value), str(e.value)
    err = capfd.readouterr().err  # the operator sees the one error line, not the client's logging
    assert "Traceback" not in err and "Futures cancelled" not in err and "distributed.client" not in err, err
    assert [committed(r) for r in roots] == [0, 0]
    # A new scheduler and workers; the old workers still run and hold the leads' leases until
    # the heartbeat timeout passes without the coordinator renewing them.
    _, addr2 = procs.scheduler("sched2")
    for j in range(k):
        procs.worker(f"new-{j}", addr2, j)
    wait_workers(addr2, k)
    res = wait_for_lock(
        lambda: update_dask(rack, addr2, split(calls, [tmp_path] * k, "a"), input_fn=REPLAY),
        60,
        "update",
        lambda x: isinstance(x, UpdateFailed) and x.kind == "LockedError",
    )
    assert res.committed
    local = webdb.create(str(tmp_path / "w" / "crawl"), sections=k, **SETTINGS)
    apply_local(local, calls)
    assert digests(local) == digests(gather(roots))
    no_leftovers(roots)


@pytest.mark.timeout(600)
def test_worker_that_does_not_come_back_fails_naming_the_section(procs, tmp_path: Path) -> None:
    """A worker without a nanny killed at stage 3: nobody declares section-1 any more."""
    k = 2
    rack, roots = rack_of(tmp_path, k)
    _, addr = procs.scheduler("sched")
    procs.worker("w0", addr, 0)
    procs.worker("w1", addr, 1, "--no-nanny", env={"WEBDB_FAULTS": "dist.s1.step3.before_ship"})
    wait_workers(addr, k)
    calls = recorded(batch_a)
    with pytest.raises(UpdateFailed) as e:
        update_dask(rack, addr, split(calls, [tmp_path] * k, "a"), input_fn=REPLAY, worker_timeout=2)
    msg = str(e.value)
    assert "section 1: no worker declares resource section-1" in msg, msg
    # The stage named is the one after the last the worker reported: the reports of the stages
    # before 3 may have died with the worker (on a loaded machine, all of them: then step 0).
    assert re.search(r"lost at or after (stage [123]|step 0),", msg), msg
    assert [committed(r) for r in roots] == [0, 0]
    # The lead (section 0's worker) dropped its lease and removed the batch's files.
    wait_until(lambda: not list((roots[0] / "crawl").glob("section-0000/edits/*")), 60, "section 0 cleaned up")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", ["dist.coordinator.before_commit", "dist.coordinator.after_master_commit"])
def test_coordinator_killed_during_commit_leaves_old_or_new_state(procs, point: str, tmp_path: Path) -> None:
    k = 2
    rack, roots = rack_of(tmp_path, k)
    ini = tmp_path / "hosts.ini"
    _, addr = procs.scheduler("sched")
    for j in range(k):
        procs.worker(f"w{j}", addr, j)
    wait_workers(addr, k)
    calls = tmp_path / "calls.jsonl"
    calls.write_text("".join(c + "\n" for c in recorded(batch_a)))
    cmd = [
        sys.executable,
        "-m",
        "webdb.cli.main",
        "update",
        "crawl",
        str(calls),
        "--hosts",
        str(ini),
        "--dask",
        addr,
        "--input",
        REPLAY,
        "--heartbeat-timeout",
        "2",
        "-q",
    ]
    p = subprocess.run(cmd, env={**os.environ, "WEBDB_FAULTS": point}, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr
    gens = [committed(r) for r in roots]
    assert gens in ([0, 0], [1, 0], [1, 1]), gens  # the master (section 0's root) flips first
    # `webdb check` of the master's copy, every section read where it lives.
    check = [sys.executable, "-m", "webdb.cli.main", "check", str(roots[0] / "crawl"), "--mount", str(tmp_path)]
    c = subprocess.run(check, capture_output=True, text=True)
    assert c.returncode == 0, c.stdout + c.stderr
    p = subprocess.run([*cmd, "--lock-wait", "60"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert [committed(r) for r in roots] == [gens[0] + 1] * k
    with gather(roots).reader() as r:
        r.check()
    no_leftovers(roots)


def test_cli_unreachable_scheduler_exits_2_naming_it(tmp_path: Path) -> None:
    db = webdb.create(str(tmp_path / "crawl"), sections=2, **SETTINGS)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "webdb.cli.main",
            "update",
            db.path,
            "--dask",
            "tcp://127.0.0.1:9",
            "--connect-timeout",
            "1",
            "--input",
            REPLAY,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "tcp://127.0.0.1:9" in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.timeout(600)
def test_cli_scheduler_lost_mid_run_is_one_error_line(procs, tmp_path: Path) -> None:
    """The scheduler dies while the update waits for a section: the operator reads one line
    naming it, not the Dask client's tracebacks and its list of cancelled futures."""
    k = 2
    rack, roots = rack_of(tmp_path, k)
    sched, addr = procs.scheduler("sched")
    flag = tmp_path / "worker-1-died"
    procs.worker("w0", addr, 0)
    # Section 1's worker dies at stage 2 and, without a nanny, stays dead: the run waits.
    procs.worker("w1", addr, 1, "--no-nanny", env={"WEBDB_FAULTS": f"dist.s1.step2.before_ship@{flag}"})
    wait_workers(addr, k)
    calls = tmp_path / "calls.jsonl"
    calls.write_text("".join(c + "\n" for c in recorded(batch_a)))
    p = subprocess.Popen(
        [sys.executable, "-m", "webdb.cli.main", "update", "--hosts", str(tmp_path / "hosts.ini"), "crawl",
         str(calls), "--input", REPLAY, "--dask", addr, "--worker-timeout", "600", "--heartbeat-timeout", "5", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(flag.exists, 300, "section 1's worker to die at stage 2")
        os.kill(sched.pid, signal.SIGKILL)
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("webdb update: error: update of crawl stopped"), err
    assert f"lost the Dask scheduler {addr}" in lines[0], err
    assert [committed(r) for r in roots] == [0, 0]


@pytest.mark.ssh
@pytest.mark.timeout(600)
def test_dask_workers_started_over_ssh_on_the_rack_hosts(ssh_hosts, procs, tmp_path: Path) -> None:
    """`dask worker` processes started over ssh on two loopback hosts, each declaring the
    section whose root it has; hosts.ini names the scheduler, so `webdb update --hosts` runs
    on Dask.  The result is the Writer's given section 0's calls, then section 1's."""
    hosts = ssh_hosts[:2]
    _, addr = procs.scheduler("sched")
    ini = tmp_path / "hosts.ini"
    ini.write_text(
        f"[ndfs]\ndb = crawl\ndask_scheduler = {addr}\n"
        + "".join(h.ini() for h in hosts)
        + f"[sections]\ncount = 2\nhosts = {hosts[0].name}, {hosts[1].name}\n"
    )
    create_rack(Rack.from_file(ini), **SETTINGS)
    calls = recorded(batch_a)
    for h in hosts:
        (h.root / "crawl" / "calls.jsonl").write_text("".join(c + "\n" for c in calls))
    conns = []
    try:
        for j, h in enumerate(hosts):
            conn = h.fabric_connection()
            chan = conn.client.get_transport().open_session()
            worker = [sys.executable, "-m", "distributed.cli.dask_worker", addr, "--nthreads", "1", "--name", h.name,
                      "--resources", f"section-{j}=1", "--no-dashboard", "--memory-limit", "0"]  # fmt: skip
            chan.exec_command(f"cd / && exec {' '.join(worker)}")
            conns.append((conn, chan))
        wait_workers(addr, 2)
        p = subprocess.run(
            [sys.executable, "-m", "webdb.cli.main", "update", "crawl", "calls.jsonl", "--hosts", str(ini),
             "--input", REPLAY, "-q"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert "generation 1 committed" in p.stdout and hosts[0].name in p.stdout, p.stdout
    finally:
        for conn, chan in conns:
            chan.close()
            conn.close()
        for h in hosts:
            h.stop()  # with sshd go the sessions' processes: the workers
    local = webdb.create(str(tmp_path / "w" / "crawl"), sections=2, **SETTINGS)
    apply_local(local, calls + calls)
    roots = [h.root for h in hosts]
    assert digests(local) == digests(gather(roots))
    no_leftovers(roots)


@pytest.mark.timeout(600)
def test_generate_over_dask_selects_and_marks_what_generate_does(cluster, tmp_path: Path) -> None:
    """generate's per-location (given a rack) requests run as tasks on the lead workers: the same
    fetchlists and marks as generate on the whole db."""
    from test_generate_rack import NOW, fetchlists_of, fill_db, pages_and_links, pages_of, renamed

    from fetchlist.generate import generate

    pages, links = pages_and_links(400)
    twin = webdb.create(str(tmp_path / "twin"), sections=3, **SETTINGS)
    rack_db = webdb.create(str(tmp_path / "crawl"), sections=3, **SETTINGS)
    for d in (twin, rack_db):
        fill_db(d, pages, links)
    want = generate(twin, tmp_path / "want0", now=NOW, top_n=60, mark_expiry=0)
    got = generate(
        Rack.local(rack_db.path), tmp_path / "got0", now=NOW, top_n=60, mark_expiry=0, dask=cluster.scheduler_address
    )
    assert want.selected > 0 and got.selected == want.selected
    assert fetchlists_of(tmp_path / "got0") == fetchlists_of(tmp_path / "want0")
    assert (got.scanned, got.eligible, got.skipped) == (want.scanned, want.eligible, want.skipped)
    assert got.rack.committed
    assert pages_of(rack_db) == renamed(pages_of(twin))
    with rack_db.reader() as r:
        r.check()
    no_leftovers([tmp_path])


def test_hosts_ini_dask_scheduler_is_checked_with_file_and_line(tmp_path: Path) -> None:
    from webdb.ndfs import load_config
    from webdb.ndfs.errors import ConfigError

    ini = tmp_path / "hosts.ini"
    ini.write_text("[ndfs]\ndb = crawl\ndask_scheduler = tcp://10.0.0.5:8786\n[sections]\ncount = 1\n0 = /srv\n")
    assert load_config(ini).dask_scheduler == "tcp://10.0.0.5:8786"
    assert Rack.from_file(ini).config.to_json()["dask_scheduler"] == "tcp://10.0.0.5:8786"
    ini.write_text("[ndfs]\ndb = crawl\ndask_scheduler = 10.0.0.5\n")
    with pytest.raises(ConfigError, match=r"hosts.ini:3: \[ndfs\] dask_scheduler: bad Dask scheduler address"):
        load_config(ini)


@pytest.mark.timeout(600)
def test_edit_file_damaged_in_transit_is_refused(tmp_path: Path) -> None:
    """A byte of section 0's step-1 edits flips between its task and the receiving stage: the
    SHA-256 its producer listed does not match, the update fails naming file and producer."""
    k = 2
    rack, roots = rack_of(tmp_path, k)
    c = start_cluster(k, {"WEBDB_FAULTS": "dist.s0.step1.corrupt"})
    try:
        calls = recorded(batch_a)
        with pytest.raises(UpdateFailed) as e:
            update_dask(rack, c.scheduler_address, split(calls, [tmp_path] * k, "a"), input_fn=REPLAY)
    finally:
        c.close()
    msg = str(e.value)
    assert "CorruptionError" in msg and "from section 0 differs from what its producer sent" in msg, msg
    assert e.value.kind == "CorruptionError"
    assert [committed(r) for r in roots] == [0, 0]
