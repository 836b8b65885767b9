"""One driver, every transport (docs/distributed.md §1, *The driver and its transports*): the
same two batches through the in-process Writer, agents on a rack of local roots, agents over
loopback sshd hosts and a Dask cluster write byte-identical tables and the same manifests,
at k = 1, 2, 3; and a rack's export through each is the local export's bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dbutil import batch_a, batch_b
from rackutil import apply_local, gather, local_roots, no_leftovers, split
from sshd import SSHHost
from test_engine import digests, recorded, same_parts

import webdb
from webdb.writer.rack import Rack, create_rack, update

REPLAY = "webdb.writer.inputs:replay_calls"
SETTINGS = {"sync": False, "block_size": 512}

pytest.importorskip("distributed")


def roots_rack(tmp: Path, k: int) -> tuple[Rack, list[Path]]:
    ini, roots = local_roots(tmp, k)
    return Rack.from_file(ini), roots


def ssh_rack(hosts: list[SSHHost], tmp: Path) -> tuple[Rack, list[Path]]:
    tmp.mkdir(parents=True)
    names = ", ".join(h.name for h in hosts)
    ini = "[ndfs]\ndb = crawl\nconnect_timeout = 3\ntimeout = 5\n\n" + "".join(h.ini() for h in hosts)
    (tmp / "hosts.ini").write_text(ini + f"\n[sections]\ncount = {len(hosts)}\nhosts = {names}\n")
    return Rack.from_file(tmp / "hosts.ini"), [h.root for h in hosts]


@pytest.mark.ssh
@pytest.mark.timeout(900)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_transport_writes_the_same_tables_and_manifests(
    k: int, cluster, ssh_hosts: list[SSHHost], tmp_path: Path
) -> None:
    local = webdb.create(str(tmp_path / "w" / "crawl"), sections=k, **SETTINGS)
    racks = {
        "agents": (*roots_rack(tmp_path / "agents", k), None),
        "ssh": (*ssh_rack(ssh_hosts[:k], tmp_path / "ssh"), None),
        "dask": (*roots_rack(tmp_path / "dask", k), cluster.scheduler_address),
    }
    for rack, _, _ in racks.values():
        create_rack(rack, **SETTINGS)
    for tag, batch in (("a", batch_a), ("b", batch_b)):
        calls = recorded(batch)
        apply_local(local, calls)
        dbs = {}
        for name, (rack, roots, dask) in racks.items():
            res = update(rack, split(calls, [tmp_path] * k, f"{tag}-{name}"), input_fn=REPLAY, dask=dask)
            assert res.committed and res.hosts.ok, (name, res.summary())
            dbs[name] = gather(roots)
        for name, db in dbs.items():
            assert digests(db) == digests(local), name
            assert same_parts(db.manifest()) == same_parts(local.manifest()), name
        shipped = {n: [(s["files"], s["bytes"]) for s in db.manifest().distributed["shipped"]] for n, db in dbs.items()}
        assert shipped["agents"] == shipped["ssh"] == shipped["dask"]
    for _, roots, _ in racks.values():
        no_leftovers(roots)


ALL_STATUSES = "unfetched,fetched,retry,gone,redirect_temp,redirect_perm,not_modified,duplicate"


def webdb_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WEBDB_FAULTS="")
    return subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.ssh
@pytest.mark.timeout(900)
@pytest.mark.parametrize("transport", ["agents", "ssh", "dask"])
def test_export_of_a_rack_equals_the_local_export(
    transport: str, cluster, ssh_hosts: list[SSHHost], tmp_path: Path
) -> None:
    """`webdb export --hosts`: each location exports its sections through the driver, this
    machine fetches and joins them: the same bytes as the export of the same db written
    locally, in JSON lines and in Parquet."""
    k = 2
    local = webdb.create(str(tmp_path / "w" / "crawl"), sections=k, **SETTINGS)
    if transport == "ssh":
        rack, roots = ssh_rack(ssh_hosts[:k], tmp_path / "rack")
    else:
        rack, roots = roots_rack(tmp_path / "rack", k)
    dask = ["--dask", cluster.scheduler_address] if transport == "dask" else []
    create_rack(rack, **SETTINGS)
    for tag, batch in (("a", batch_a), ("b", batch_b)):
        calls = recorded(batch)
        apply_local(local, calls)
        assert update(
            rack, split(calls, [tmp_path] * k, tag), input_fn=REPLAY, dask=dask[1] if dask else None
        ).committed
    ini = str(tmp_path / "rack" / "hosts.ini")
    for fmt in ("jsonl", "parquet"):
        want, got = tmp_path / f"want.{fmt}", tmp_path / f"got.{fmt}"
        p = webdb_cli("export", local.path, "--status", ALL_STATUSES, "--format", fmt, "--out", str(want))
        assert p.returncode == 0, p.stderr
        p = webdb_cli(
            "export", "--hosts", ini, "crawl", *dask, "--status", ALL_STATUSES, "--format", fmt, "--out", str(got)
        )
        assert p.returncode == 0, p.stderr
        assert "generation 2" in p.stdout and f"({k} sections)" in p.stdout, p.stdout
        if fmt == "jsonl":
            assert got.read_bytes() == want.read_bytes() and want.stat().st_size > 0
        else:
            import pyarrow.parquet as pq

            assert pq.read_table(got).to_pylist() == pq.read_table(want).to_pylist()
    no_leftovers(roots)
    p = webdb_cli("export", "--hosts", ini, "crawl", "--segments", str(tmp_path), "--out", str(tmp_path / "x"))
    assert p.returncode == 2 and "--segments does not go with --hosts" in p.stderr, p.stderr


def test_hosts_running_the_pure_python_codec_are_named(tmp_path: Path) -> None:
    """A location whose block codec is not compiled (WEBDB_PURE_PYTHON=1 in its agent's
    environment, as on a host without a compiler) is named in the progress and the summary."""
    rack, roots = roots_rack(tmp_path, 2)
    create_rack(rack, **SETTINGS)
    events: list[dict] = []
    calls = recorded(batch_a)
    res = update(
        rack,
        split(calls, [tmp_path] * 2, "a"),
        input_fn=REPLAY,
        env={"WEBDB_PURE_PYTHON": "1"},
        progress=events.append,
    )
    assert res.committed
    [warning] = [e["message"] for e in events if e.get("ev") == "warning"]
    assert "pure-Python block codec" in warning and all(str(r) in warning for r in roots), warning
    assert f"warning: {warning}" in res.summary()
    assert all(r.value["compiled"] is False for r in res.hosts.values())
    assert not [w for w in update(rack, {}, input_fn=REPLAY).warnings if "pure-Python" in w]
