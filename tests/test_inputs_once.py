"""An input named once is applied once (webdb.writer.placing, docs/distributed.md *Inputs*):
on a rack whose roots are paths of one machine, on loopback sshd hosts that see the same
file, and on a Dask cluster; a name that is the same file at some locations only, or named
twice, is refused with how to name it, before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dbutil import batch_a
from rackutil import apply_local, committed, gather, local_roots, no_leftovers
from sshd import SSHHost
from test_engine import digests, recorded

import webdb
from webdb.writer.rack import Rack, UpdateFailed, create_rack, update

REPLAY = "webdb.writer.inputs:replay_calls"
SETTINGS = {"sync": False, "block_size": 512}
ROOT = Path(__file__).resolve().parent.parent
ROUND = (
    "http://a.example/\t1\t0123456789abcdef0123456789abcdef\t1700000000\thttp://b.example/x\x1fbee\n"
    "http://c.example/\t0\t\t1700000000\t\n"
)


def path_rack(tmp: Path, k: int) -> tuple[Path, list[Path]]:
    """A k-section rack whose section j lives under its own local root ``tmp/rJ``."""
    ini, roots = local_roots(tmp, k)
    create_rack(Rack.from_file(ini), **SETTINGS)
    return ini, roots


def local_twin(tmp: Path, k: int, calls: list[str]) -> webdb.WebDB:
    db = webdb.create(str(tmp / "twin" / "crawl"), sections=k, **SETTINGS)
    apply_local(db, calls)
    return db


def calls_file(path: Path, calls: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(c + "\n" for c in calls))
    return path


def applied(res) -> int:
    """How many calls the batch's sections applied together."""
    return sum(x["calls"] for x in res.manifest.distributed["input"].values())


def test_failed_fetch_on_a_local_path_rack_counts_one_retry(tmp_path: Path) -> None:
    """`webdb update --hosts` with one absolute input on three roots of one machine: the
    failed fetch is applied once (retries 1, as after a local update), not once per root."""
    ini, roots = path_rack(tmp_path, 3)
    (tmp_path / "round.tsv").write_text(ROUND)
    env = dict(os.environ, WEBDB_FAULTS="", PYTHONPATH=str(ROOT / "bench"))
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "update", "--hosts", str(ini), "crawl",
         str(tmp_path / "round.tsv"), "--input", "roundtsv:apply_round_tsv", "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["committed"]
    with gather(roots).reader() as r:
        assert r.get_page("http://c.example/").retries == 1
        assert r.num_pages == 3 and r.num_links == 1
        r.check()
    no_leftovers(roots)


@pytest.mark.parametrize("k", [2, 3])
def test_one_file_seen_by_every_root_is_split_between_the_sections(k: int, tmp_path: Path) -> None:
    ini, roots = path_rack(tmp_path, k)
    calls = recorded(batch_a)
    f = calls_file(tmp_path / "in" / "a.jsonl", calls)
    res = update(Rack.from_file(ini), names=[str(f)], shares=True, input_fn=REPLAY)
    assert res.committed and applied(res) == len(calls)
    assert all(x["calls"] > 0 for x in res.manifest.distributed["input"].values())  # split, not one reader
    assert digests(gather(roots)) == digests(local_twin(tmp_path, k, calls))


def test_each_roots_own_copy_is_read_there(tmp_path: Path) -> None:
    """A relative name is a different file under every root: each location reads its own."""
    ini, roots = path_rack(tmp_path, 2)
    calls = recorded(batch_a)
    half = len(calls) // 2
    for r, part in zip(roots, (calls[:half], calls[half:]), strict=True):
        calls_file(r / "crawl" / "in" / "a.jsonl", part)
    res = update(Rack.from_file(ini), names=["in/a.jsonl"], input_fn=REPLAY)
    assert res.committed and applied(res) == len(calls)
    assert digests(gather(roots)) == digests(local_twin(tmp_path, 2, calls))


def test_a_file_shared_by_some_roots_only_is_refused(tmp_path: Path) -> None:
    ini, roots = path_rack(tmp_path, 3)
    calls = recorded(batch_a)
    own = calls_file(roots[0] / "crawl" / "in" / "a.jsonl", calls)
    (roots[1] / "crawl" / "in").mkdir(parents=True)
    (roots[1] / "crawl" / "in" / "a.jsonl").symlink_to(own)  # r0 and r1 see one file
    calls_file(roots[2] / "crawl" / "in" / "a.jsonl", calls[:3])  # r2 its own
    with pytest.raises(UpdateFailed) as e:
        update(Rack.from_file(ini), names=["in/a.jsonl"], input_fn=REPLAY)
    msg = str(e.value)
    assert e.value.kind == "BadInput" and "in/a.jsonl" in msg and "HOST:PATH" in msg, msg
    assert str(roots[0]) in msg and str(roots[2]) in msg, msg
    assert [committed(r) for r in roots] == [0, 0, 0]
    no_leftovers(roots)


def make_ssh_rack(hosts: list[SSHHost], tmp: Path) -> Rack:
    names = ", ".join(h.name for h in hosts)
    ini = "[ndfs]\ndb = crawl\nconnect_timeout = 3\ntimeout = 5\n\n" + "".join(h.ini() for h in hosts)
    (tmp / "hosts.ini").write_text(ini + f"\n[sections]\ncount = {len(hosts)}\nhosts = {names}\n")
    rack = Rack.from_file(tmp / "hosts.ini")
    create_rack(rack, **SETTINGS)
    return rack


@pytest.mark.ssh
def test_sshd_hosts_that_see_one_file_read_it_once(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    hosts = ssh_hosts[:2]
    rack = make_ssh_rack(hosts, tmp_path)
    calls = recorded(batch_a)
    f = calls_file(tmp_path / "in" / "a.jsonl", calls)  # every loopback host sees this path
    res = update(rack, names=[str(f)], shares=True, input_fn=REPLAY)
    assert res.committed and applied(res) == len(calls)
    roots = [h.root for h in hosts]
    assert digests(gather(roots)) == digests(local_twin(tmp_path, 2, calls))
    # The same file named for two hosts would be read twice: refused, nothing written.
    with pytest.raises(UpdateFailed) as e:
        update(rack, names=[f"{h.name}:{f}" for h in hosts], input_fn=REPLAY)
    msg = str(e.value)
    assert e.value.kind == "BadInput" and "the same file" in msg and "name it once" in msg, msg
    assert [committed(r) for r in roots] == [1, 1]


@pytest.mark.timeout(600)
def test_dask_workers_that_see_one_file_read_it_once(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from daskutil import start_cluster

    cluster = start_cluster(2)
    try:
        ini, roots = path_rack(tmp_path, 2)
        calls = recorded(batch_a)
        f = calls_file(tmp_path / "in" / "a.jsonl", calls)
        res = update(Rack.from_file(ini), names=[str(f)], shares=True, input_fn=REPLAY, dask=cluster.scheduler_address)
        assert res.committed and applied(res) == len(calls)
        assert digests(gather(roots)) == digests(local_twin(tmp_path, 2, calls))
    finally:
        cluster.close()
