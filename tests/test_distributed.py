"""The distributed writer against the single-process Writer, locally and over real sshd hosts,
and its failures: a section writer killed at each step, a host stopped or hung mid-stage, a full
disk, an edit file corrupted in transit, the coordinator killed around the commit point.  Every
failure must stop all writers in bounded time with an error naming host and stage, leave the
old generation readable on every host, and a rerun must complete without manual cleanup."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dbutil import batch_a, batch_b, snapshot
from rackutil import assert_state, committed, no_leftovers, split
from sshd import SSHHost

import webdb
from fetchlist.crawl import update_db
from fetchlist.parse import ParseResult
from fetchlist.segment import FetchEntry, FetchRecord, Segment
from webdb import Page, Status
from webdb.writer.coordinator import HOLD_SECONDS
from webdb.writer.inputs import CallRecorder, apply_call
from webdb.writer.rack import Rack, UpdateFailed, create_rack, update

REPLAY = "webdb.writer.inputs:replay_calls"
SETTINGS = {"sync": False, "block_size": 512}
# Heartbeat timeout of the fault tests: far beyond a stall of a loaded machine, so that a healthy
# host never fails on it (failures here are noticed by their events; the hung host by a clock).
HB = 30.0


def recorded(batch) -> list[str]:
    rec = CallRecorder()
    batch(rec)
    return rec.calls


CALLS_A, CALLS_B = recorded(batch_a), recorded(batch_b)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, dict]:
    """Snapshots of the single-process Writer after batch A and after A+B."""
    db = webdb.create(str(tmp_path_factory.mktemp("ref") / "db"), sections=1, **SETTINGS)
    out = {}
    for name, calls in (("a", CALLS_A), ("ab", CALLS_B)):
        with db.writer() as w:
            for c in calls:
                apply_call(w, json.loads(c))
        out[name] = snapshot(db)
    return out


# ---- local mode: k section processes on this machine -----------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_local_update_equals_single_writer(k: int, tmp_path: Path, reference) -> None:
    db = webdb.create(str(tmp_path / "crawl"), sections=k, **SETTINGS)
    rack = Rack.local(db.path)
    assert len(rack.places) == 1 and rack.k == k
    events: list[dict] = []
    r = update(rack, split(CALLS_A, [tmp_path] * k, "a"), input_fn=REPLAY, progress=events.append)
    assert r.committed and r.generation == 1 and r.hosts.ok
    assert snapshot(db) == reference["a"]
    assert len(db.sections().breakpoints) == k - 1  # chosen from every section's sample
    r = update(rack, split(CALLS_B, [tmp_path] * k, "b"), input_fn=REPLAY)
    assert snapshot(db) == reference["ab"]
    with db.reader() as rd:
        rd.check()
    # Per-section progress reached the coordinator: every stage merged somewhere, steps shipped.
    merged = {e["step"] for e in events if e.get("state") == "merged"}
    assert merged == {1, 2, 3, 4, 5}
    assert [s["step"] for s in r.shipped] == [0, 1, 2, 3, 4] and r.shipped[0]["bytes"] > 0
    assert r.manifest.distributed["hosts"] == {str(tmp_path): list(range(k))}
    no_leftovers([tmp_path])


@pytest.mark.timeout(180)  # a killed section must stop the update, not hang it
def test_local_section_killed_then_rerun(tmp_path: Path, reference) -> None:
    db = webdb.create(str(tmp_path / "crawl"), sections=3, **SETTINGS)
    rack = Rack.local(db.path)
    update(rack, split(CALLS_A, [tmp_path] * 3, "a"), input_fn=REPLAY)
    inputs = split(CALLS_B, [tmp_path] * 3, "b")
    with pytest.raises(UpdateFailed, match=r"section 2 writer killed by signal 9.*|failed at stage 3") as e:
        update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB, env={"WEBDB_FAULTS": "dist.s2.step3.before_ship"})
    assert "stage 3" in str(e.value) and not e.value.result.committed
    assert db.committed() == 1 and snapshot(db) == reference["a"]
    update(rack, inputs, input_fn=REPLAY)
    assert snapshot(db) == reference["ab"]
    no_leftovers([tmp_path])


def test_local_update_fails_fast_when_the_db_is_locked(tmp_path: Path) -> None:
    db = webdb.create(str(tmp_path / "crawl"), sections=2, **SETTINGS)
    w = db.writer()
    try:
        with pytest.raises(UpdateFailed, match=rf"{tmp_path}.*LockedError: .*being written by pid {os.getpid()}"):
            update(Rack.local(db.path), {}, input_fn=REPLAY)
    finally:
        w.abort()
    assert update(Rack.local(db.path), {}, input_fn=REPLAY).generation == 1


def test_cli_update_local_and_round_tsv(tmp_path: Path) -> None:
    """`webdb update DB INPUT…` on one machine, with the benchmark workload's round input."""
    db = webdb.create(str(tmp_path / "crawl"), sections=2, **SETTINGS)
    md5 = "0123456789abcdef0123456789abcdef"
    (tmp_path / "round.tsv").write_text(
        f"http://a.example/\t1\t{md5}\t1700000000\thttp://b.example/x\x1fbee\x1ehttp://a.example/y\x1fwhy\n"
        "http://c.example/\t0\t\t1700000000\t\n"
    )
    # The round input lives in bench/ (roundtsv.py); the agents inherit PYTHONPATH.
    env = dict(os.environ, WEBDB_FAULTS="", PYTHONPATH=str(Path(__file__).resolve().parent.parent / "bench"))
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "update", db.path, str(tmp_path / "round.tsv"),
         "--input", "roundtsv:apply_round_tsv", "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["committed"] and out["generation"] == 1
    with db.reader() as r:
        assert r.get_page("http://a.example/").status == webdb.Status.FETCHED
        assert r.get_page("http://c.example/").retries == 1
        assert [lk.anchor for lk in r.inlinks("http://b.example/x")] == ["bee"]
        assert r.num_pages == 4 and r.num_links == 2
        r.check()
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "update", db.path, str(tmp_path / "missing.tsv"),
         "--input", "roundtsv:apply_round_tsv"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert p.returncode == 2  # bad input, as for every command (a failed run is 1)
    assert "nothing committed" in p.stderr and "missing.tsv" in p.stderr and "step 0" in p.stderr
    assert db.committed() == 1


# ---- over ssh: one section writer per host -------------------------------------------------------------


def make_rack(
    hosts: list[SSHHost], tmp: Path, k: int | None = None, on: list[SSHHost] | None = None, extra: str = ""
) -> Rack:
    """hosts.ini for ``hosts``; k sections round-robin on ``on`` (default: all of them)."""
    k = k or len(hosts)
    names = ", ".join(h.name for h in on or hosts)
    ini = "[ndfs]\ndb = crawl\nconnect_timeout = 3\ntimeout = 5\n\n" + "".join(h.ini() for h in hosts)
    ini += f"\n[sections]\ncount = {k}\nhosts = {names}\n{extra}"
    (tmp / "hosts.ini").write_text(ini)
    return Rack.from_file(tmp / "hosts.ini")


@pytest.fixture
def rack2(ssh_hosts: list[SSHHost], tmp_path: Path, reference):
    """Two hosts with batch A committed (generation 1) and batch B's input in place."""
    hosts = ssh_hosts[:2]
    rack = make_rack(hosts, tmp_path)
    create_rack(rack, **SETTINGS)
    update(rack, split(CALLS_A, [h.root for h in hosts], "a"), input_fn=REPLAY)
    return hosts, rack, split(CALLS_B, [h.root for h in hosts], "b")


@pytest.mark.ssh
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_ssh_update_equals_single_writer(k: int, ssh_hosts: list[SSHHost], tmp_path: Path, reference) -> None:
    hosts = ssh_hosts[:k]
    roots = [h.root for h in hosts]
    rack = make_rack(hosts, tmp_path)
    res = create_rack(rack, **SETTINGS)
    assert res.ok and list(res) == [h.name for h in hosts]
    assert committed(roots[-1]) == 0 and (roots[-1] / "crawl" / f"section-{k - 1:04d}").is_dir()
    r = update(rack, split(CALLS_A, roots, "a"), input_fn=REPLAY)
    assert r.hosts.ok and r.committed
    if k > 1:
        assert all(r.hosts[h.name].value["remote_bytes"] > 0 for h in hosts)  # edits crossed hosts
    assert_state(roots, 1, reference["a"])
    r = update(rack, split(CALLS_B, roots, "b"), input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])
    no_leftovers(roots)
    text = r.summary()
    assert "generation 2 committed" in text and all(h.name in text for h in hosts)


@pytest.mark.ssh
def test_ssh_two_sections_per_host_and_master_group(ssh_hosts: list[SSHHost], tmp_path: Path, reference) -> None:
    """4 sections on 2 hosts, and a master location holding no section (a third host)."""
    hosts = ssh_hosts[:3]
    rack = make_rack(hosts, tmp_path, k=4, on=hosts[:2], extra="\n[group:master]\nlocations = h2\n")
    assert {p.label: (p.sections, p.master) for p in rack.places.values()} == {
        "h0": ([0, 2], False), "h1": ([1, 3], False), "h2": ([], True)}  # fmt: skip
    create_rack(rack, **SETTINGS)
    roots = [h.root for h in hosts[:2]]
    update(rack, split(CALLS_A, [roots[0], roots[1], roots[0], roots[1]], "a"), input_fn=REPLAY)
    update(rack, split(CALLS_B, [roots[0], roots[1], roots[0], roots[1]], "b"), input_fn=REPLAY)
    assert committed(hosts[2].root) == 2
    assert_state(roots, 2, reference["ab"])


@pytest.mark.ssh
@pytest.mark.timeout(300)
@pytest.mark.parametrize("step", [0, 1, 2, 3, 4, 5])
def test_ssh_section_writer_killed_at_each_step(step: int, rack2, tmp_path: Path, reference) -> None:
    hosts, rack, inputs = rack2
    roots = [h.root for h in hosts]
    point = f"dist.s1.step{step}.before_ship" if step < 5 else "dist.s1.stage5.done"
    with pytest.raises(UpdateFailed) as e:
        update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB, env={"WEBDB_FAULTS": point})
    msg = str(e.value)
    where = "step 0" if step == 0 else f"stage {step}"
    assert "h1 (section 1)" in msg and where in msg and "killed by signal 9" in msg, msg
    assert not e.value.result.hosts["h1"].ok and "killed" in e.value.result.hosts["h1"].reason
    assert_state(roots, 1, reference["a"])
    update(rack, inputs, input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])
    no_leftovers(roots)


@pytest.mark.ssh
@pytest.mark.timeout(300)
def test_ssh_host_stopped_mid_stage(rack2, tmp_path: Path, reference) -> None:
    hosts, rack, inputs = rack2
    roots = [h.root for h in hosts]

    def stop_at_stage_2(e: dict) -> None:
        if e["host"] == "h1" and e.get("step") == 2 and e.get("state") == "waiting" and hosts[1].running:
            hosts[1].stop()

    with pytest.raises(UpdateFailed) as e:
        update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB, progress=stop_at_stage_2)
    # The stop is asked for when h1 waits at the barrier before stage 2's input; the other
    # sections' edits may reach it before the kill lands, so the report names stage 2 or 3.  h0's
    # section may find h1 unreachable before the coordinator hears h1 go: h1 is blamed either way.
    assert re.search(r"h1 \(section 1\) failed at stage [23]", str(e.value)), str(e.value)
    assert not e.value.result.hosts["h1"].ok and not e.value.result.committed
    hosts[1].start()
    assert_state(roots, 1, reference["a"])
    update(rack, inputs, input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])
    no_leftovers(roots)


@pytest.mark.ssh
@pytest.mark.timeout(300)
def test_ssh_peer_unreachable_while_up_is_named_by_the_reporter(rack2, tmp_path: Path, reference) -> None:
    """h0's section cannot put its stage 1 edits on h1 (a fault refuses them as a refused
    connection would) while h1 stays up and answers the coordinator: the failure, held for a
    verdict on h1, falls back to h0, which names h1; nothing is committed."""
    hosts, rack, inputs = rack2
    roots = [h.root for h in hosts]
    with pytest.raises(UpdateFailed) as e:
        update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB, env={"WEBDB_FAULTS": "dist.s0.step1.unreachable"})
    msg = str(e.value)
    assert re.search(r"h0 \(section 0\) failed at stage 1: .*h1: HostUnreachable: .*connection refused", msg), msg
    res = e.value.result
    assert not res.committed and not res.hosts["h0"].ok and res.hosts["h1"].value.get("aborted"), res.hosts
    assert_state(roots, 1, reference["a"])

    # The same refusal, and h1 stopped once the coordinator holds h0's report (it says so): the
    # host that is down is the one blamed, with the reporter's words beside.
    said: list[str] = []

    def stop_h1(e: dict) -> None:
        if e.get("ev") == "warning" and hosts[1].running:
            said.append(e["message"])
            hosts[1].stop()

    with pytest.raises(UpdateFailed) as e:
        update(
            rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB, progress=stop_h1,
            env={"WEBDB_FAULTS": "dist.s0.step1.unreachable"},
        )  # fmt: skip
    msg = str(e.value)
    blamed = r"h1 \(section 1\) failed at stage [12]: .* \(h0 could not reach it: .*connection refused"
    assert re.search(blamed, msg), msg
    hold = f"up to {HOLD_SECONDS:g}s to hear whether h1 is down before the update stops"
    assert said == [f"h0 could not reach h1: {hold}"], said
    res = e.value.result
    assert not res.committed and not res.hosts["h1"].ok and "connection refused" in res.hosts["h0"].reason
    hosts[1].start()
    assert_state(roots, 1, reference["a"])
    update(rack, inputs, input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])
    no_leftovers(roots)


def wait_unlocked(path: Path, timeout: float) -> None:
    """Until no process holds the writer lock of a db copy (a resumed agent gives up on its own)."""
    deadline = time.monotonic() + timeout
    with open(path, "a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                return
            except OSError:
                assert time.monotonic() < deadline, f"{path} still locked"
                time.sleep(0.1)


class ManualClock:
    """The coordinator's liveness clock (``update(clock=)``), moved only by the test: a healthy
    host never times out however loaded the machine is, and a hung one exactly when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.ssh
@pytest.mark.timeout(300)
def test_ssh_host_hung_mid_stage(rack2, tmp_path: Path, reference) -> None:
    """A frozen host (SIGSTOP: connections open, nothing answers) is the original's endless
    wait; here it stops the update once the heartbeat timeout has passed without a word from
    it while the other host still answers."""
    hosts, rack, inputs = rack2
    roots = [h.root for h in hosts]
    timeout = 600.0  # far beyond any stall of a loaded machine: only the clock below reaches it
    clock = ManualClock()

    def pause_at_stage_3(e: dict) -> None:
        if e["host"] == "h1" and e.get("step") == 3 and e.get("state") == "waiting" and not hosts[1].paused:
            hosts[1].pause()
            clock.now += timeout + 1

    try:
        # The coordinator's liveness round names h1 - or, first on a loaded machine, h0's shipment
        # to the frozen h1 runs into its ssh timeout, naming h1's address (at stage 3, or at 4 when
        # h0 ran ahead before h1 froze): both stop the update with the hung host named, nothing
        # committed.
        hung = (
            rf"h1 \(section 1\) failed at stage 3: no heartbeat for {timeout:g}s"
            rf"|h0 \(section 0\) failed at stage [34]: .*h1: HostUnreachable: "
            rf".*{re.escape(hosts[1].address)}:{hosts[1].port}"
        )
        with pytest.raises(UpdateFailed, match=hung):
            update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=timeout, progress=pause_at_stage_3, clock=clock)
    finally:
        hosts[1].resume()
    wait_unlocked(roots[1] / "crawl" / "LOCK", 60)
    assert_state(roots, 1, reference["a"])
    update(rack, inputs, input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])


@pytest.mark.ssh
def test_ssh_edit_file_corrupted_in_transit(rack2, tmp_path: Path, reference) -> None:
    hosts, rack, inputs = rack2
    roots = [h.root for h in hosts]
    with pytest.raises(UpdateFailed, match=r"h0 \(section 0\) failed at stage 1: .*ChecksumMismatch.*h1") as e:
        update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB, env={"WEBDB_FAULTS": "dist.s0.step1.corrupt"})
    assert "not published" in str(e.value)
    assert_state(roots, 1, reference["a"])
    update(rack, inputs, input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])


@pytest.fixture
def small_disk(ssh_hosts: list[SSHHost]):
    """Host 1's data root on a 4 MiB tmpfs."""
    root = ssh_hosts[1].root
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(root)], capture_output=True, text=True)
    assert p.returncode == 0, f"mounting a tmpfs needs root: {p.stderr}"
    try:
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=True)


@pytest.mark.ssh
def test_ssh_full_disk_on_one_host(ssh_hosts: list[SSHHost], small_disk: Path, tmp_path: Path, reference) -> None:
    hosts = ssh_hosts[:2]
    roots = [h.root for h in hosts]
    rack = make_rack(hosts, tmp_path)
    create_rack(rack, **SETTINGS)
    update(rack, split(CALLS_A, roots, "a"), input_fn=REPLAY)
    inputs = split(CALLS_B, roots, "b")
    filler = small_disk / "filler"
    free = shutil.disk_usage(small_disk).free
    filler.write_bytes(b"\0" * max(0, free - 24 * 1024))  # leave 24 KiB: less than one stage needs
    with pytest.raises(UpdateFailed, match=r"h1.*(DiskFull|No space left)") as e:
        update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB)
    assert "stage" in str(e.value) or "step 0" in str(e.value)
    filler.unlink()
    assert_state(roots, 1, reference["a"])
    update(rack, inputs, input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])


@pytest.mark.ssh
def test_ssh_permission_denied_on_one_host(rack2, reference) -> None:
    """Root ignores modes, so the section directory is made immutable (chattr +i): creating
    anything in it fails with EPERM, as a wrongly owned directory would for a normal user."""
    hosts, rack, inputs = rack2
    roots = [h.root for h in hosts]
    sec = roots[1] / "crawl" / "section-0001"
    p = subprocess.run(["chattr", "+i", str(sec)], capture_output=True, text=True)
    assert p.returncode == 0, f"chattr +i needs root and ext2/3/4: {p.stderr}"
    try:
        # h1's own writer sees EPERM, h0's SFTP put into h1 the refused mkdir: either way the
        # cause, host, stage and file are named.
        with pytest.raises(UpdateFailed) as e:
            update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB)
        msg = str(e.value)
        assert re.search(r"h[01] \(section [01]\) failed at step 0", msg), msg
        assert "h1: " in msg and "section-0001" in msg and re.search("not permitted|[Pp]ermission denied", msg), msg
    finally:
        subprocess.run(["chattr", "-i", str(sec)], check=True)
    assert_state(roots, 1, reference["a"])
    update(rack, inputs, input_fn=REPLAY)
    assert_state(roots, 2, reference["ab"])


def cli(args: list[str], faults: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, WEBDB_FAULTS=faults)
    return subprocess.run([sys.executable, "-m", "webdb.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)  # fmt: skip


@pytest.mark.ssh
@pytest.mark.parametrize("point", ["dist.coordinator.before_commit", "dist.coordinator.after_master_commit"])
def test_ssh_coordinator_killed_around_the_commit_point(point: str, rack2, tmp_path: Path, reference) -> None:
    """Before the master's CURRENT flips nothing is committed; after it, the batch is, and the
    next update brings the other host forward before it starts."""
    hosts, rack, inputs = rack2
    roots = [h.root for h in hosts]
    args = ["update", "--hosts", str(tmp_path / "hosts.ini"), "--input", REPLAY, "--heartbeat-timeout", "4", "crawl"]
    p = cli([*args, *(f"{h.name}:{inputs[j]['paths'][0]}" for j, h in enumerate(hosts))], faults=point)
    assert p.returncode == -9, p.stderr
    after = point.endswith("after_master_commit")
    for r in roots:  # every host's agent gives up on its own once the coordinator is gone
        wait_unlocked(r / "crawl" / "LOCK", HB + 10)
    assert [committed(r) for r in roots] == ([2, 1] if after else [1, 1])
    p = cli(args)  # an empty batch: brings every host to the rack's generation, then commits
    assert p.returncode == 0, p.stderr
    assert "generation 3 committed" in p.stdout if after else "generation 2 committed" in p.stdout
    assert_state(roots, 3 if after else 2, reference["ab"] if after else reference["a"])
    no_leftovers(roots)


@pytest.mark.ssh
def test_ssh_cli_create_update_progress_and_errors(ssh_hosts: list[SSHHost], tmp_path: Path, reference) -> None:
    hosts = ssh_hosts[:2]
    roots = [h.root for h in hosts]
    make_rack(hosts, tmp_path)
    ini = str(tmp_path / "hosts.ini")
    p = cli(["create", "--hosts", ini, "crawl", "--set", "sync=false", "--set", "block_size=512"])
    assert p.returncode == 0 and "created crawl with 2 section(s) on h0 (0), h1 (1)" in p.stdout, p.stderr
    p = cli(["create", "--hosts", ini, "crawl", "--sections", "3"])
    assert p.returncode == 2 and "--sections 3 but" in p.stderr
    assert cli(["create", "--hosts", ini, "crawl"]).returncode == 0  # still empty: created again
    inputs = split(CALLS_A, roots, "a")
    # A bare relative path is read on every host, relative to <root>/<db> there.
    for j, h in enumerate(hosts):
        shutil.move(inputs[j]["paths"][0], h.root / "crawl" / "round-a.jsonl")
    p = cli(["update", "--hosts", ini, "crawl", "round-a.jsonl", "--input", REPLAY, "-v"])
    assert p.returncode == 0, p.stderr
    assert "h1  section 1: stage 3/5 merged" in p.stderr and "to other hosts" in p.stderr
    assert p.stdout.startswith("generation 1 committed") and "h0    0" in p.stdout
    assert_state(roots, 1, reference["a"])
    p = cli(["update", "--hosts", ini, "crawl", "h1:nowhere.jsonl", "--input", REPLAY])
    assert p.returncode == 2 and "nothing committed" in p.stderr and "h1 (section 1)" in p.stderr
    assert "nowhere.jsonl" in p.stderr and p.stdout == ""  # said once, on stderr
    p = cli(["create", "--hosts", ini, "crawl"])
    assert p.returncode == 2, p.stderr
    assert re.search(
        r"h[01] \(section [01]\) failed at create: BadInput: .*/crawl: a database already exists", p.stderr
    )
    p = cli(["update", "--hosts", ini, "crawl", "h9:x", "--input", REPLAY])
    assert p.returncode == 2 and "'h9' is not a location" in p.stderr
    p = cli(["update", "--hosts", ini, "crawl", "x", "--input", "nosuch.mod:fn"])
    assert p.returncode == 2 and "module 'nosuch' is not installed" in p.stderr


# ---- the crawl loop's segments: the default input ---------------------------------------------------

T = 1_700_000_000


def make_segment(path: Path, lo: int, hi: int) -> str:
    """Fetch output for pages lo..hi-1 of batch A's hosts: fetched (with outlinks, some to new
    URLs), failed and gone pages, written as a crawl round would."""
    seg = Segment.create(path)
    urls = [f"http://h{i % 7}.example/p{i}" for i in range(lo, hi)]
    seg.write_fetchlist(0, [FetchEntry(u, Page(u)) for u in urls])
    with seg.writer(0) as w:
        for i, u in zip(range(lo, hi), urls):
            if i % 5 == 4:
                w.write(FetchRecord(u, Status.RETRY, T, 503))
            elif i % 11 == 10:
                w.write(FetchRecord(u, Status.GONE, T, 404))
            else:
                m = hashlib.md5(f"seg {i}".encode()).digest()
                outs = [(f"http://h{(i * j) % 7}.example/p{(i * j) % 300}", f"a{j}") for j in range(1, 4)]
                outs.append((f"http://new{i % 13}.example/", "new"))
                w.write(FetchRecord(u, Status.FETCHED, T, 200, md5=m, parse=ParseResult(u, m, outlinks=outs)))
    return str(path)


def test_local_update_of_segments_equals_the_crawl_loops_update(tmp_path: Path) -> None:
    """`webdb update DB SEG…` with the default input (fetchlist.update.apply_segments), the
    segments dealt to 3 local sections, against fetchlist.crawl.update_db in one process."""
    db = webdb.create(str(tmp_path / "crawl"), sections=3, **SETTINGS)
    twin = webdb.create(str(tmp_path / "twin"), **SETTINGS)
    for d in (db, twin):
        with d.writer() as w:
            batch_a(w)
    segs = [make_segment(tmp_path / f"seg{j}", 100 * j, 100 * j + 100) for j in range(3)]
    p = cli(["update", db.path, *segs, "--option", "ignore_external=false", "-q"])
    assert p.returncode == 0, p.stderr
    assert "generation 2 committed" in p.stdout
    update_db(twin, segs, ignore_external=False)
    assert snapshot(db) == snapshot(twin)
    with db.reader() as r:
        r.check()


@pytest.mark.ssh
def test_ssh_update_of_segments_living_on_each_host(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    """Each host applies the fetch output that lives on it (``HOST:PATH``)."""
    hosts = ssh_hosts[:2]
    roots = [h.root for h in hosts]
    rack = make_rack(hosts, tmp_path)
    create_rack(rack, **SETTINGS)
    update(rack, split(CALLS_A, roots, "a"), input_fn=REPLAY)
    twin = webdb.create(str(tmp_path / "twin"), **SETTINGS)
    with twin.writer() as w:
        batch_a(w)
    segs = [make_segment(h.root / "crawl" / "segments" / "r1", 150 * j, 150 * j + 150) for j, h in enumerate(hosts)]
    p = cli(["update", "--hosts", str(tmp_path / "hosts.ini"), "crawl", "h0:segments/r1", "h1:segments/r1", "-q"])
    assert p.returncode == 0, p.stderr
    update_db(twin, segs)
    assert_state(roots, 2, snapshot(twin))
