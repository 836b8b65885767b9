"""Daily operation from the command line: intermixed options, --lock-wait on every writer
command, `webdb unlock` and its safety check, `crawl --set`, `inject --hosts`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dbutil import batch_a, make_db
from sshd import SSHHost

import webdb
from webdb.cli.crawl import split_settings
from webdb.errors import BadInput
from webdb.writer.inputs import CallRecorder

REPLAY = "webdb.writer.inputs:replay_calls"


def cli(*args: str, check: int | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    if check is not None:
        assert p.returncode == check, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    return p


def calls_file(path: Path) -> Path:
    rec = CallRecorder()
    batch_a(rec, 60)
    path.write_text("".join(c + "\n" for c in rec.calls))
    return path


@pytest.mark.timeout(300)
def test_options_may_stand_between_the_db_and_the_inputs(tmp_path: Path) -> None:
    make_db(tmp_path / "db", sections=2)
    calls = calls_file(tmp_path / "a.jsonl")
    p = cli("update", str(tmp_path / "db"), "--json", str(calls), "--input", REPLAY, "-q", check=0)
    assert json.loads(p.stdout)["committed"]
    p = cli("read", str(tmp_path / "db"), "--stats", "--json", check=0)
    assert json.loads(p.stdout)["pages"] > 0


class Holder:
    """A process holding the db's writer lock until killed: started, then waited on (its
    "locked" line), never slept on."""

    def __init__(self, db: Path) -> None:
        code = (
            f"import sys, webdb\nw = webdb.open({str(db)!r}).writer()\nprint('locked', flush=True)\nsys.stdin.read()\n"
        )
        self.p = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.p.stdout.readline().strip() == "locked"

    def release(self) -> None:
        self.p.stdin.close()  # the writer exits, aborting its batch; the kernel drops the flock
        self.p.wait(timeout=60)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
        self.p.wait(timeout=60)


@pytest.mark.timeout(300)
def test_every_writer_command_waits_for_the_lock_then_names_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db, sections=2)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    calls = calls_file(tmp_path / "a.jsonl")
    h = Holder(db)
    try:
        commands = {
            "update": ["update", str(db), str(calls), "--input", REPLAY],
            "inject": ["inject", str(db), str(seeds)],
            "generate": ["generate", str(db), str(tmp_path / "segs")],
            "rank": ["rank", str(db), "--iterations", "1"],
            "dedup": ["dedup", str(db)],
            "rebalance": ["rebalance", str(db), "--sections", "3"],
            "crawl": ["crawl", str(db), "--seeds", str(seeds), "--rounds", "1"],
        }
        for name, argv in commands.items():
            p = cli(*argv, "--lock-wait", "0.2", check=2)
            err = p.stderr.strip()
            assert len(err.splitlines()) == 1, err
            assert "waited 0.2s for the writer lock" in err and f"pid {h.p.pid} on host" in err, (name, err)
            assert "waited" not in p.stdout and "LockedError" not in p.stdout, (name, p.stdout)  # said once
    finally:
        h.release()
    # The holder gone, the same command goes through.
    cli("update", str(db), str(calls), "--input", REPLAY, "--lock-wait", "0.2", check=0)


@pytest.mark.timeout(300)
def test_update_waits_while_the_lock_is_released(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db, sections=1)
    calls = calls_file(tmp_path / "a.jsonl")
    h = Holder(db)
    p = subprocess.Popen(
        [sys.executable, "-m", "webdb.cli.main", "update", str(db), str(calls), "--input", REPLAY, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    h.release()  # whether the update started waiting before or after this, it must commit
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, out + err
    assert webdb.open(str(db)).reader().__enter__().num_pages > 0


@pytest.mark.timeout(300)
def test_unlock_refuses_a_live_holder_and_removes_a_stuck_one_with_force(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db, sections=1)
    p = cli("unlock", str(db), check=0)
    assert p.stdout.strip() == f"{db}: not locked (no process holds a writer lock)"
    h = Holder(db)
    try:
        h.p.send_signal(signal.SIGSTOP)  # a frozen writer: alive, never finishing
        p = cli("unlock", str(db), "--force", check=2)
        assert f"held by pid {h.p.pid} on host" in p.stderr and "alive on this host (stopped)" in p.stderr
        assert f"kill {h.p.pid}" in p.stderr and (db / "LOCK").exists()
        # A lock whose named holder is not the process holding it (as if written from another
        # host): refused without --force, removed with it, saying what was checked.
        holder = json.loads((db / "LOCK").read_text())
        (db / "LOCK").write_text(json.dumps({**holder, "host": "elsewhere"}))
        p = cli("unlock", str(db), check=2)
        assert "not on this host" in p.stderr and "--force" in p.stderr
        p = cli("unlock", str(db), "--force", check=0)
        assert "removed the lock of pid" in p.stdout and "on host elsewhere" in p.stdout
        assert not (db / "LOCK").exists()
    finally:
        h.kill()
    with webdb.open(str(db)).writer() as w:  # the next writer takes a fresh lock
        w.add_page(webdb.Page("http://b.example/"))


def test_crawl_set_reaches_every_step_that_knows_the_name() -> None:
    writer, fetch, update = split_settings(["max_outlinks=5", "memory_mb=64", "threads=2", "new_score=0.5"])
    assert writer == {"memory_mb": 64}
    assert fetch == {"max_outlinks": 5, "threads": 2}
    assert update == {"max_outlinks": 5, "new_score": 0.5}
    with pytest.raises(BadInput, match=r"--set 'no_such=1': expected NAME=VALUE with NAME a setting of a step: "):
        split_settings(["no_such=1"])
    with pytest.raises(BadInput, match="max_outlinks"):
        split_settings(["max_outlinks=many"])


def test_crawl_rejects_an_unknown_set_and_a_file_as_segments(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    p = cli("crawl", str(tmp_path / "db"), "--seeds", str(seeds), "--set", "nope=1", check=2)
    assert "--set 'nope=1'" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = cli("crawl", str(tmp_path / "db"), "--seeds", str(seeds), "--segments", str(seeds), check=2)
    assert p.stderr.strip() == f"webdb crawl: error: --segments {seeds}: not a directory"


def two_host_rack(ssh_hosts: list[SSHHost], tmp_path: Path) -> tuple[list[SSHHost], Path]:
    """The db ``crawl`` created (sync off) with one section on each of two ssh test hosts;
    returns the hosts and the hosts.ini."""
    hosts = ssh_hosts[:2]
    path = tmp_path / "hosts.ini"
    path.write_text(
        "[ndfs]\ndb = crawl\n" + "".join(h.ini() for h in hosts) + "\n[sections]\ncount = 2\nhosts = h0, h1\n"
    )
    cli("create", "--hosts", str(path), "crawl", "--set", "sync=false", check=0)
    return hosts, path


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_inject_into_a_rack(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    hosts, path = two_host_rack(ssh_hosts, tmp_path)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://s{i}.example.com/\n" for i in range(40)) + "not a url\n")
    p = cli("inject", "--hosts", str(path), "crawl", "--skip-bad", str(seeds), "--json", check=0)
    out = json.loads(p.stdout)
    assert out["urls"] == 40 and out["bad"] == 1 and out["generation"] == 1
    sections = {j: str(h.root / "crawl" / f"section-{j:04d}") for j, h in enumerate(hosts)}
    with webdb.open(str(hosts[0].root / "crawl"), section_dirs=sections).reader() as r:
        pages = [pg.url for pg in r.pages()]
    assert sorted(pages) == sorted(f"http://s{i}.example.com/" for i in range(40))
    assert not list((hosts[0].root / "crawl" / "inject").iterdir())  # the shipped copies are removed


def test_read_stats_scores_intervals_retries_and_status_per_section(tmp_path: Path) -> None:
    from webdb import FetchResult, Status

    db = webdb.create(str(tmp_path / "db"), sections=2, sync=False)
    with db.writer() as w:
        for i in range(10):
            w.add_page_with_score(
                webdb.Page(f"http://h{i}.example/", score=float(i), next_score=float(i), fetch_interval=86400 * (i + 1))
            )
    with db.writer() as w:
        w.apply_fetch(FetchResult("http://h1.example/", Status.FETCHED, 1000, b"m" * 16, 0))
        w.apply_fetch(FetchResult("http://h2.example/", Status.RETRY, 1000))
        w.apply_fetch(FetchResult("http://h3.example/", Status.GONE, 1000))
    p = cli("read", str(tmp_path / "db"), "--stats", "--json", check=0)
    s = json.loads(p.stdout)
    assert s["pages"] == 10 and s["fetched"] == 1 and s["unfetched"] == 7  # fetched: status fetched, one meaning
    assert s["status"] == {"unfetched": 7, "fetched": 1, "retry": 1, "gone": 1}
    assert sum(x["status"].get("unfetched", 0) for x in s["by_section"]) == 7
    assert all(sum(x["status"].values()) == x["pages"] for x in s["by_section"])
    assert s["score"] == {"min": 0.0, "avg": 4.5, "max": 9.0}
    assert s["fetch_interval"]["min"] == 86400 and s["fetch_interval"]["max"] == 864000
    assert s["retries"] == {"0": 9, "1": 1}
    text = cli("read", str(tmp_path / "db"), "--stats", check=0).stdout
    assert "pages 10 (fetched 1, unfetched 7, other statuses 2)" in text
    assert "score min 0, avg 4.5, max 9" in text and "fetch interval min 1 d, avg 5.5 d, max 10 d" in text
    assert "retries 0: 9, 1: 1" in text and "  section 0: " in text
    quick = json.loads(cli("read", str(tmp_path / "db"), "--stats", "--quick", "--json", check=0).stdout)
    assert "score" not in quick and quick["status"] == s["status"]


def test_line_progress_reports_periodically_off_a_terminal() -> None:
    import io

    from webdb.util.progress import LineProgress, is_terminal, progress_bar

    now = [0.0]
    out = io.StringIO()
    bar = LineProgress(100, "scanning pages", "page", out, every=10.0, clock=lambda: now[0])
    for _ in range(100):
        now[0] += 0.25
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "scanning pages: 40/100 page (40%), 10.0s"
    assert len(lines) == 3 and lines[-1] == "scanning pages: 100/100 page (100%), 25.0s"
    quiet = io.StringIO()
    short = LineProgress(5, "x", "rec", quiet, clock=lambda: 0.0)
    short.update(5)
    short.close()
    assert quiet.getvalue() == ""  # shorter than one period: nothing
    assert not is_terminal(io.StringIO()) and isinstance(progress_bar(3, "x", "rec", out=io.StringIO()), LineProgress)


def test_update_prints_a_line_per_stage_and_detail_with_v(tmp_path: Path) -> None:
    make_db(tmp_path / "db", sections=2)
    calls = calls_file(tmp_path / "a.jsonl")
    p = cli("update", str(tmp_path / "db"), str(calls), "--input", REPLAY, check=0)
    lines = p.stderr.strip().splitlines()
    assert [ln.split("s  ", 1)[1].split(" merged in")[0] for ln in lines] == [
        *(f"stage {s}/5" for s in range(1, 6)),
        "committed",
    ], p.stderr
    assert "stage 5/5 merged in 2 of 2 section(s)" in p.stderr
    p = cli("update", str(tmp_path / "db"), "-v", str(calls), "--input", REPLAY, check=0)
    assert "section 0: stage 3/5 merged" in p.stderr and "section 1: step 2 shipped" in p.stderr


def test_update_says_which_stages_compacted_or_merged_runs(tmp_path: Path) -> None:
    calls = calls_file(tmp_path / "a.jsonl")
    make_db(tmp_path / "c", sections=2, level_ratio=0.01)  # every round's run outgrows the base
    p = cli("update", str(tmp_path / "c"), str(calls), "--input", REPLAY, check=0)
    lines = {ln.split("s  ", 1)[1].split(" merged in")[0]: ln for ln in p.stderr.splitlines()}
    assert lines["stage 3/5"].endswith("; runs compacted into a new base in 2 section(s)"), p.stderr
    assert "runs" not in lines["stage 1/5"] and "merged into one run" not in p.stderr
    p = cli("update", str(tmp_path / "c"), "-v", str(calls), "--input", REPLAY, check=0)
    assert re.search(r"section 0: stage 3/5 merged, .*, 1 run\(s\) compacted into a new base\n", p.stderr), p.stderr
    make_db(tmp_path / "m", sections=2, level_ratio=1000.0, level_runs=1)  # two runs are too many
    p = cli("update", str(tmp_path / "m"), str(calls), "--input", REPLAY, check=0)
    lines = {ln.split("s  ", 1)[1].split(" merged in")[0]: ln for ln in p.stderr.splitlines()}
    assert lines["stage 3/5"].endswith("; runs merged into one run in 2 section(s)"), p.stderr
    assert "compacted" not in p.stderr


def test_lock_state_as_fab_check_reports_it(tmp_path: Path) -> None:
    from webdb.tools.deploy import lock_state

    db = tmp_path / "db"
    make_db(db, sections=1)
    assert lock_state(str(tmp_path / "nope")) == "missing" and lock_state(str(db)) == "free"
    h = Holder(db)
    try:
        assert lock_state(str(db)).startswith(f"held by pid {h.p.pid} on ")
    finally:
        h.kill()  # killed: the flock is gone, the holder's name stays in the file
    assert lock_state(str(db)).startswith(f"stale (pid {h.p.pid} on ") and "process gone" in lock_state(str(db))


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_rack_update_names_the_host_and_pid_holding_a_lock(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    hosts, path = two_host_rack(ssh_hosts, tmp_path)
    calls = calls_file(hosts[1].root / "crawl" / "a.jsonl")
    h = Holder(hosts[1].root / "crawl")  # a frozen writer on h1 keeps the rack's lock there
    try:
        h.p.send_signal(signal.SIGSTOP)
        p = cli("update", "--hosts", str(path), "crawl", f"h1:{calls.name}", "--input", REPLAY, "--lock-wait", "0.5")
        assert p.returncode == 2, p.stdout + p.stderr
        err = p.stderr.strip().splitlines()[-1]
        assert err.startswith("webdb update: error: waited 0.5s for the writer lock:")
        assert "h1 (section 1) failed" in err and f"pid {h.p.pid} on host" in err, err
    finally:
        h.kill()


def test_update_progress_draws_one_bar_per_stage_on_a_terminal() -> None:
    import io

    from webdb.cli.update import Progress

    out = io.StringIO()
    prog = Progress(2, out=out, terminal=True)
    for stage in (1, 3):  # stage 2 had nothing to merge: skipped by both sections
        for j in (0, 1):
            prog({"ev": "section", "state": "merged", "host": "h", "section": j, "step": stage, "records": 5,
                  "bytes": 10, "seconds": 0.1})  # fmt: skip
    prog({"ev": "committed", "host": "h"})
    text = out.getvalue()
    assert "stage 1/5" in text and "stage 3/5" in text and "stage 2/5" not in text
    assert "2/2" in text and text.rstrip().endswith("committed")


@pytest.mark.timeout(300)
def test_a_failed_update_says_so_once(tmp_path: Path) -> None:
    """One line on stderr; no NOT-committed line or per-host table on stdout (those are in
    --json, and the table with -v)."""
    db = tmp_path / "db"
    make_db(db, sections=2)
    p = cli("update", str(db), str(tmp_path / "nowhere"), check=2)
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (p.stdout, p.stderr)
    assert "nothing committed" in p.stderr and "nowhere" in p.stderr
    p = cli("update", str(db), str(tmp_path / "nowhere"), "--json", check=2)
    assert json.loads(p.stdout)["committed"] is False and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(300)
def test_update_without_input_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "db"
    make_db(db, sections=2)
    before = webdb.open(str(db)).committed()
    p = cli("update", str(db), check=2)
    assert "no INPUT given" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert webdb.open(str(db)).committed() == before


@pytest.mark.timeout(300)
def test_read_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`webdb read … | head`: the reader went away; no BrokenPipeError, exit 0."""
    db = tmp_path / "db"
    make_db(db, sections=2)
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is written
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "read", str(db), "--dump", "pages"],
        stdout=w,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
    )
    os.close(w)
    assert p.returncode == 0 and p.stderr == "", (p.returncode, p.stderr)


@pytest.mark.timeout(300)
def test_create_refuses_zero_sections(tmp_path: Path) -> None:
    p = cli("create", str(tmp_path / "db"), "--sections", "0", check=2)
    assert "--sections" in p.stderr and "expected a whole number >= 1" in p.stderr
    assert not (tmp_path / "db").exists()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("given", ["missing", "empty dir"])
def test_a_failed_inject_leaves_no_db_created(tmp_path: Path, given: str) -> None:
    db = tmp_path / "db"
    if given == "empty dir":
        db.mkdir()
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://ok.example/\nnot a url\n")
    p = cli("inject", str(db), str(seeds), check=2)
    assert f"{seeds}:2" in p.stderr and "created" not in p.stdout, (p.stdout, p.stderr)
    assert (not db.exists()) if given == "missing" else (db.is_dir() and not list(db.iterdir()))
    p = cli("inject", str(db), str(seeds), "--skip-bad", check=0)  # the path is still free to use
    assert "created" in p.stdout


@pytest.mark.timeout(300)
def test_quiet_is_the_same_option_in_every_command_that_has_progress(tmp_path: Path) -> None:
    """-q: no progress lines on stderr; the result still prints, in inject as in update."""
    db = tmp_path / "db"
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://a.example/\n")
    p = cli("inject", "-q", str(db), str(seeds), check=0)
    assert p.stderr == "" and "injected 1 new pages" in p.stdout
    calls = calls_file(tmp_path / "a.jsonl")
    p = cli("update", str(db), str(calls), "--input", REPLAY, "-q", check=0)
    assert p.stderr == "" and "committed" in p.stdout
    p = cli("update", str(db), str(calls), "--input", REPLAY, check=0)
    assert "stage 1/5" in p.stderr


@pytest.mark.timeout(300)
def test_recover_says_what_it_checked(tmp_path: Path) -> None:
    """recover reads no table block: a damaged block is "manifest and table sizes ok" there,
    and it says so; `webdb check` finds the damage."""
    db = tmp_path / "db"
    make_db(db, sections=1)
    table = next(f for f in (db / "section-0000").iterdir() if f.name.endswith(".pbu"))
    data = bytearray(table.read_bytes())
    data[len(data) // 3] ^= 0x40
    table.write_bytes(bytes(data))
    p = cli("recover", str(db), check=0)
    assert "manifest and table sizes ok" in p.stdout and "`webdb check" in p.stdout, p.stdout
    p = cli("check", str(db), check=1)
    assert str(table) in p.stdout + p.stderr
