"""Errors of a rack that say what happened: a host stopped because another failed is shown
"aborted" (not "ok"), a failure after the five stages is labelled "commit" (not "stage 5"),
and a changed host key names the known_hosts file, both fingerprints and the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dbutil import batch_a
from rackutil import committed, split
from sshd import SSHHost

from webdb.writer.inputs import CallRecorder
from webdb.writer.rack import Rack, UpdateFailed, create_rack, update

REPLAY = "webdb.writer.inputs:replay_calls"
HB = 30.0  # a healthy host beats every second; a loaded machine may stall it for seconds


def calls() -> list[str]:
    rec = CallRecorder()
    batch_a(rec, 80)
    return rec.calls


def two_location_rack(tmp_path: Path) -> tuple[Rack, list[Path]]:
    """Two local locations (two agents, section 0's is the master): a rack without ssh."""
    roots = [tmp_path / "a", tmp_path / "b"]
    for r in roots:
        r.mkdir()
    ini = tmp_path / "hosts.ini"
    ini.write_text(f"[ndfs]\ndb = crawl\n\n[sections]\ncount = 2\n0 = {roots[0]}\n1 = {roots[1]}\n")
    rack = Rack.from_file(ini)
    create_rack(rack, sync=False, block_size=512)
    return rack, roots


@pytest.mark.timeout(300)
def test_a_host_stopped_by_another_hosts_failure_is_shown_aborted(tmp_path: Path) -> None:
    rack, roots = two_location_rack(tmp_path)
    inputs = split(calls(), roots, "a")
    with pytest.raises(UpdateFailed) as e:
        update(rack, inputs, input_fn=REPLAY, heartbeat_timeout=HB, env={"WEBDB_FAULTS": "dist.s1.step2.before_ship"})
    res = e.value.result
    a, b = str(roots[0]), str(roots[1])
    assert not res.hosts[b].ok and "killed" in res.hosts[b].reason
    assert not res.hosts[a].ok and res.hosts[a].value["aborted"], res.hosts[a]
    assert "aborted at" in res.hosts[a].reason and f"{b} (section 1) failed at stage 2" in res.hosts[a].reason
    rows = {line.split()[0]: line for line in res.summary().splitlines() if line.startswith(str(tmp_path))}
    assert re.search(r"\s+0\s+aborted\s", rows[a]), res.summary()
    assert "FAILED" in rows[b] and " ok " not in res.summary()
    assert committed(roots[0]) == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("fault", "label"), [("before_ready", "commit (prepare)"), ("before_commit", "commit")])
def test_a_failure_after_the_stages_is_labelled_commit(tmp_path: Path, fault: str, label: str) -> None:
    rack, roots = two_location_rack(tmp_path)
    master = str(roots[0])
    with pytest.raises(UpdateFailed) as e:
        update(
            rack,
            split(calls(), roots, "a"),
            input_fn=REPLAY,
            heartbeat_timeout=HB,
            env={"WEBDB_FAULTS": f"dist.{master}.{fault}"},
        )
    msg = str(e.value)
    assert f"{master} (section 0) failed at {label}:" in msg and "stage 5" not in msg, msg
    assert e.value.result.hosts[str(roots[1])].value["aborted"]
    assert committed(roots[0]) == 0 and committed(roots[1]) == 0
    update(rack, split(calls(), roots, "b"), input_fn=REPLAY)  # the same update runs again
    assert committed(roots[0]) == 1


@pytest.mark.ssh
@pytest.mark.timeout(300)
def test_a_changed_host_key_names_known_hosts_fingerprints_and_the_fix(ssh_hosts: list[SSHHost], tmp_path: Path):
    from sshd import keygen

    from webdb.ndfs import parse_config
    from webdb.ndfs.connect import fabric_connection
    from webdb.ndfs.errors import HostKeyRejected

    h = ssh_hosts[0]
    other = keygen(tmp_path / "other_host_key", "another-host").split()
    known = tmp_path / "known_hosts"
    known.write_text(f"[{h.address}]:{h.port} {other[0]} {other[1]}\n")
    ini = h.ini().replace(f"known_hosts = {h.known_hosts}", f"known_hosts = {known}")
    host = parse_config(ini).hosts[h.name]
    with pytest.raises(HostKeyRejected) as e:
        fabric_connection(host)  # the rack's and deploy's one way to connect
    msg = str(e.value)
    assert f"host key of {h.address}:{h.port} changed" in msg
    assert re.search(
        r"changed: got ssh-ed25519 SHA256:\S+, " + re.escape(str(known)) + r" has ssh-ed25519 SHA256:", msg
    )
    assert f"ssh-keygen -f {known} -R '[{h.address}]:{h.port}'" in msg
    assert f"ssh-keyscan -p {h.port} {h.address} >> {known}" in msg
