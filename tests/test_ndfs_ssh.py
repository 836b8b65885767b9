"""ndfs over real OpenSSH servers on loopback (tests/sshd.py): the transport contract over SFTP,
scp and rsync, host-key checking, corruption in transit, hosts going down, a full remote disk,
and per-host group results."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from sshd import SSHHost, known_hosts_line

from webdb.ndfs import (
    NDFS,
    ChecksumMismatch,
    CompletionTimeout,
    DiskFull,
    HostKeyRejected,
    HostUnreachable,
    JumpHost,
    RemoteFileNotFound,
    SFTPTransport,
    SubprocessTransport,
    Transport,
    TransportError,
    fabric_connection,
    open_transport,
    parse_config,
    ssh_client,
    ssh_options,
)
from webdb.ndfs.config import Location
from webdb.ndfs.connect import KEEPALIVE
from webdb.ndfs.ssh import REREAD_VERIFY_MAX
from webdb.ndfs.transport import Completion, sha256_file

pytestmark = pytest.mark.ssh

KINDS = ["sftp", "scp", "rsync"]


def make(kind: str, host: SSHHost, **cfg: object) -> Transport:
    """A transport of the given kind; scp/rsync with threshold 0 so every file uses the tool."""
    hc = host.host_config(**cfg)
    return SFTPTransport(hc) if kind == "sftp" else SubprocessTransport(hc, kind, threshold=0)


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    p = tmp_path / "payload.bin"
    p.write_bytes(os.urandom(REREAD_VERIFY_MAX + 54321))  # large enough for the sha256sum check
    return p


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", KINDS)
def test_put_get_rename_wait_list_delete(kind: str, ssh_hosts: list[SSHHost], payload: Path, tmp_path: Path) -> None:
    h = ssh_hosts[0]
    with make(kind, h) as t:
        c = t.put(payload, "crawl/section-0000/edits/from-0001")
        assert c.size == payload.stat().st_size
        on_disk = h.root / "crawl/section-0000/edits/from-0001"
        assert on_disk.read_bytes() == payload.read_bytes()
        assert (h.root / "crawl/section-0000/edits/from-0001.completed").exists()
        assert t.wait_complete("crawl/section-0000/edits/from-0001", timeout=2) == c

        assert t.get("crawl/section-0000/edits/from-0001", tmp_path / "back") == c.size
        assert (tmp_path / "back").read_bytes() == payload.read_bytes()

        t.write_text("crawl/section-0000/STAGE", "pbu\n")
        (h.root / "crawl/section-0000/unflagged").write_bytes(b"u")
        assert t.list("crawl") == [
            "crawl/section-0000/STAGE",
            "crawl/section-0000/edits/from-0001",
            "crawl/section-0000/unflagged",
        ]
        assert "crawl/section-0000/unflagged" not in t.list("crawl", complete_only=True)
        assert t.read_text("crawl/section-0000/STAGE") == "pbu\n"

        t.rename("crawl/section-0000/edits/from-0001", "crawl/section-0000/merged/part-0")
        assert not t.exists("crawl/section-0000/edits/from-0001")
        assert t.completion("crawl/section-0000/merged/part-0") == c

        assert t.delete("crawl/section-0000/merged/part-0") is True
        assert t.delete("crawl/section-0000/merged/part-0") is False
        with pytest.raises(RemoteFileNotFound, match=f"{h.name}: crawl/section-0000/merged/part-0"):
            t.get("crawl/section-0000/merged/part-0", tmp_path / "gone")
        assert t.disk_free("crawl/section-0000") > 0
        assert t.remove_tree("crawl") == 3  # STAGE, its flag, unflagged
        assert leftovers(h.root) == []


def test_ssh_options_never_use_the_users_config(ssh_hosts: list[SSHHost], payload: Path) -> None:
    h = ssh_hosts[0]
    opts = ssh_options(h.host_config())
    assert opts[:2] == ["-F", "/dev/null"]
    assert "StrictHostKeyChecking=yes" in opts and f"UserKnownHostsFile={h.known_hosts}" in opts
    # A hostile ~/.ssh/config (HOME is a tmp dir here) would break every login if it were read.
    ssh_dir = Path(os.environ["HOME"]) / ".ssh"
    ssh_dir.mkdir()
    (ssh_dir / "config").write_text("Host *\n  Port 1\n  User nobody\n  StrictHostKeyChecking no\n")
    for kind in KINDS:
        with make(kind, h) as t:
            assert t.put(payload, f"cfg/{kind}").size == payload.stat().st_size


@pytest.mark.parametrize("kind", KINDS)
def test_changed_or_unknown_host_key_is_refused(kind: str, ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    h, other = ssh_hosts[0], ssh_hosts[1]
    wrong = tmp_path / "known_hosts_wrong"
    wrong.write_text(known_hosts_line(h.address, h.port, other.host_key_pub))
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    src = tmp_path / "f"
    src.write_bytes(b"secret")
    for kh, why in ((wrong, "changed|verification failed"), (empty, "not in|verification failed")):
        with make(kind, h, known_hosts=kh) as t:
            with pytest.raises(HostKeyRejected, match=why):
                t.put(src, "hk/f")
            if isinstance(t, SubprocessTransport):
                # The external tool refuses on its own too (it runs with its own ssh).
                with pytest.raises(HostKeyRejected, match="verification failed"):
                    t._run("hk/x", t.command(str(src), f"{h.address}:{h.root}/hk-x"), 6)
    with pytest.raises(HostKeyRejected, match="does not exist"):
        make("sftp", h, known_hosts=tmp_path / "missing").exists("x")
    assert leftovers(h.root) == []


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_corrupted_in_transit_are_detected_and_not_published(
    kind: str, ssh_hosts: list[SSHHost], payload: Path
) -> None:
    h = ssh_hosts[1]
    seen: list[str] = []

    def corrupt(tmp: str) -> None:
        # The remote temp file differs from what was sent, as if a byte flipped on the way.
        seen.append(tmp)
        p = h.root / tmp
        at = min(1000, p.stat().st_size - 1)
        with open(p, "r+b") as f:
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x40]))

    with make(kind, h) as t:
        t.before_verify = corrupt
        with pytest.raises(ChecksumMismatch, match=f"{h.name}: db/g/f: copy differs.*not published"):
            t.put(payload, "db/g/f")
        assert seen and ".ndfs-tmp." in seen[0]
        assert leftovers(h.root) == []
        with pytest.raises(ChecksumMismatch):
            t.put_bytes(b"small file, verified by reading back", "db/g/small")
        assert leftovers(h.root) == []
        t.before_verify = None
        assert t.put(payload, "db/g/f").size == payload.stat().st_size


@pytest.mark.parametrize("durable", [True, False])
def test_one_verifier_shell_checks_every_large_file_and_is_restarted_if_it_ends(
    durable: bool, ssh_hosts: list[SSHHost], payload: Path
) -> None:
    """Files over REREAD_VERIFY_MAX are hashed by one sha256sum loop per connection (a durable
    publish syncs the file first); a loop that ended is started again for the next file."""
    h = ssh_hosts[1]
    want = Completion(payload.stat().st_size, sha256_file(str(payload)).sha256)
    with SFTPTransport(h.host_config()) as t:
        t.durable = durable
        assert t.put(payload, "db/v/a") == want
        first = t._verifier
        assert first is not None and not first.closed
        assert t.put(payload, "db/v/b") == want and t._verifier is first  # the same session
        first.shutdown_write()  # the loop reads the end of its input and exits
        assert first.recv_exit_status() == 0
        assert t.put(payload, "db/v/c") == want and t._verifier is not first
        assert t.completion("db/v/c") == want and (h.root / "db/v/c").read_bytes() == payload.read_bytes()
    assert t._verifier is None  # closed with the connection


@pytest.mark.timeout(120)
def test_wait_complete_is_bounded_when_a_host_is_down_or_hung(ssh_hosts: list[SSHHost]) -> None:
    h = ssh_hosts[2]
    t = SFTPTransport(h.host_config(connect_timeout=5.0, timeout=10.0))
    t.write_text("db/g/present", "x")

    h.stop()
    # The error names the 1 s bound: the wait ended because of it (pytest-timeout bounds a hang).
    with pytest.raises(CompletionTimeout, match=rf"{h.name}: db/g/never: .*after 1s.*(connection|connect)") as e:
        t.wait_complete("db/g/never", timeout=1.0, poll=0.1)
    assert isinstance(e.value, TimeoutError)
    with pytest.raises(HostUnreachable, match="connection refused"):
        t.exists("db/g/present")

    h.start()
    assert t.wait_complete("db/g/present", timeout=5) is not None  # reconnects by itself

    h.pause()  # connections stay open but nothing answers: only timeouts can end the wait
    try:
        with pytest.raises(CompletionTimeout, match=rf"{h.name}: db/g/never: .*after 1s"):
            t.wait_complete("db/g/never", timeout=1.0, poll=0.1)
    finally:
        h.resume()
    assert t.read_text("db/g/present") == "x"
    t.close()


@pytest.mark.timeout(120)
def test_a_closed_sftp_channel_on_a_live_connection_reconnects(ssh_hosts: list[SSHHost]) -> None:
    """A host going away can close the SFTP channel before the connection's reader thread has
    seen the end of the stream; a closed channel is a lost connection, never a file error."""
    h = ssh_hosts[2]
    t = SFTPTransport(h.host_config(connect_timeout=5.0, timeout=10.0))
    t.write_text("db/g/present", "x")
    assert t._sftp is not None and t._client is not None
    live = t._client.get_transport()
    t._sftp.get_channel().close()
    assert live is not None and live.is_active()  # the connection itself still looks alive
    assert t.read_text("db/g/present") == "x"
    assert t._client.get_transport() is not live  # a new connection, not a "Socket is closed" error
    t.close()


@pytest.fixture
def tiny_disk(ssh_hosts: list[SSHHost]) -> Iterator[tuple[SSHHost, str]]:
    """A 1 MiB tmpfs mounted at ``<root>/tiny`` of host 3."""
    h = ssh_hosts[3]
    mnt = h.root / "tiny"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {p.stderr.strip()}")
    try:
        yield h, "tiny"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.mark.parametrize("kind", KINDS)
def test_full_remote_disk_is_a_clear_error_and_publishes_nothing(
    kind: str, tiny_disk: tuple[SSHHost, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, d = tiny_disk
    big = tmp_path / "big"
    big.write_bytes(os.urandom(1536 * 1024))
    t = make(kind, h)
    # Checked before sending: the message says how much is needed and how much is free.
    with pytest.raises(DiskFull, match=rf"{h.name}: tiny/big: needs {big.stat().st_size} bytes, \d+ free"):
        t.put(big, f"{d}/big")
    assert leftovers(h.root) == []

    # Space that vanishes during the copy (another writer): the failed write is recognised too.
    real = t.disk_free
    calls = {"n": 0}

    def lie_once(name: str = "") -> int:
        calls["n"] += 1
        return 1 << 40 if calls["n"] == 1 else real(name)

    monkeypatch.setattr(t, "disk_free", lie_once)
    with pytest.raises(DiskFull, match=rf"{h.name}: tiny/big2: .*(free|No space)"):
        t.put(big, f"{d}/big2")
    assert leftovers(h.root) == []
    monkeypatch.undo()
    assert t.put_bytes(b"fits", f"{d}/small").size == 4  # the disk is usable again
    t.close()


@pytest.mark.parametrize("kind", KINDS)
def test_refused_directory_is_reported_as_such(kind: str, ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    """A directory the host refuses to create (chattr +i parent: EPERM even for root) is named
    with the host's reason, not reported as a missing file."""
    h = ssh_hosts[0]
    locked = h.root / "crawl" / "locked"
    locked.mkdir(parents=True)
    p = subprocess.run(["chattr", "+i", str(locked)], capture_output=True, text=True)
    assert p.returncode == 0, f"chattr +i needs root and ext2/3/4: {p.stderr}"
    try:
        with make(kind, h) as t, pytest.raises(TransportError) as e:
            t.put_bytes(b"x", "crawl/locked/sub/file")
        msg = str(e.value)
        assert h.name in msg and "crawl/locked/sub" in msg and "No such file" not in msg, msg
        assert "denied" in msg.lower() or "not permitted" in msg.lower(), msg
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)


def test_group_results_report_per_host(ssh_hosts: list[SSHHost], payload: Path, tmp_path: Path) -> None:
    hosts = ssh_hosts[:3]
    ini = "".join(h.ini() for h in hosts)
    ini += "[ndfs]\ndb = crawl\nconnect_timeout = 2\ntimeout = 5\n"
    ini += f"[group:master]\nlocations = h0, h1, h2, {tmp_path / 'nfs'}\n"
    ini += "[sections]\ncount = 3\nhosts = h0, h1, h2\n"
    cfg = parse_config(ini, "cluster.ini")
    with NDFS(cfg) as fs:
        # Section i lives on host i.
        for i, h in enumerate(hosts):
            assert fs.section(i).put(payload, "edits/from-0000").ok
            assert (h.root / f"crawl/section-{i:04d}/edits/from-0000.completed").exists()

        g = fs.group("master")
        hosts[1].stop()
        r = g.put(payload, "db.tar")
        assert set(r) == {"h0", "h1", "h2", str(tmp_path / "nfs")}
        assert set(r.succeeded) == {"h0", "h2", str(tmp_path / "nfs")} and list(r.failed) == ["h1"]
        assert not r.ok and "HostUnreachable" in r["h1"].reason and "127.0.0.3" in r["h1"].reason
        size = payload.stat().st_size
        assert all(x.bytes == size and x.seconds > 0 for x in r.succeeded.values())
        assert r["h1"].bytes == 0 and r["h1"].error is not None
        assert "h1: FAILED HostUnreachable" in str(r)

        w = g.wait_complete("db.tar", timeout=0.5, poll=0.1)
        assert list(w.failed) == ["h1"] and "CompletionTimeout" in w["h1"].reason
        listing = g.list()
        assert listing["h0"].value == ["db.tar"] and not listing["h1"].ok

        hosts[1].start()
        got = g.get("db.tar", tmp_path / "got")
        assert got.ok and list(got) == ["h0"]
        assert g.delete("db.tar").ok
        assert all(v.value is False for v in g.exists("db.tar").values())


def test_auto_transport_uses_scp_for_large_files(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    h = ssh_hosts[0]
    t = open_transport(Location(host=h.host_config()))
    assert isinstance(t, SubprocessTransport) and t.tool == "scp"
    assert isinstance(open_transport(Location(host=h.host_config(transport="sftp"))), SFTPTransport)
    big = tmp_path / "big"
    big.write_bytes(os.urandom(t.threshold + 1))
    calls: list[list[str]] = []
    run = t._run
    t._run = lambda name, argv, size: (calls.append(argv), run(name, argv, size))[1]  # type: ignore[method-assign]
    t.put(big, "auto/big")
    t.put_bytes(b"small", "auto/small")
    assert len(calls) == 1 and calls[0][0] == "scp"
    t.get("auto/big", tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == big.read_bytes() and len(calls) == 2
    t.close()


def test_fabric_connection_helper_checks_host_keys(ssh_hosts: list[SSHHost]) -> None:
    h = ssh_hosts[0]
    with h.fabric_connection() as c:
        r = c.run(f"ls {h.root} && echo ok-from-$(hostname)", hide=True, in_stream=False)
        assert r.ok and "ok-from-" in r.stdout


def _fingerprint(public_key_line: str) -> str:
    kind, blob = public_key_line.split()[:2]
    return paramiko.PKey.from_type_string(kind, base64.b64decode(blob)).fingerprint


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["ssh_client", "fabric_connection", "sftp"])
def test_changed_host_key_is_refused_naming_known_hosts_and_fingerprints(
    how: str, ssh_hosts: list[SSHHost], tmp_path: Path
) -> None:
    h, other = ssh_hosts[0], ssh_hosts[1]
    wrong = tmp_path / "known_hosts_changed"
    wrong.write_text(known_hosts_line(h.address, h.port, other.host_key_pub))
    hc = h.host_config(known_hosts=wrong)
    with pytest.raises(HostKeyRejected) as e:
        if how == "ssh_client":
            ssh_client(hc)
        elif how == "fabric_connection":
            fabric_connection(hc)
        else:
            SFTPTransport(hc).exists("x")
    msg = str(e.value)
    assert "changed" in msg and str(wrong) in msg
    assert _fingerprint(h.host_key_pub) in msg  # what the server showed
    assert _fingerprint(other.host_key_pub) in msg  # what known_hosts holds
    assert e.value.host == h.name


@pytest.mark.timeout(120)
def test_factory_applies_keepalive_and_timeouts_on_a_real_connection(ssh_hosts: list[SSHHost]) -> None:
    h = ssh_hosts[0]
    client = ssh_client(h.host_config(connect_timeout=4.0))
    try:
        t = client.get_transport()
        assert t is not None and t.is_active()
        assert t.packetizer._Packetizer__keepalive_interval == KEEPALIVE  # type: ignore[attr-defined]
        assert (t.banner_timeout, t.auth_timeout, t.channel_timeout) == (4.0, 4.0, 4.0)
        assert t.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # no delayed-ACK stalls
        assert t.local_cipher == t.remote_cipher == "aes128-gcm@openssh.com"  # OpenSSH offers it
        _in, out, _err = client.exec_command("echo up", timeout=10)
        assert out.read() == b"up\n"
    finally:
        client.close()
    assert not t.is_active()
    # The fabric Connection runs on a factory client: same transport settings.
    with fabric_connection(h.host_config(connect_timeout=3.0)) as c:
        assert c.is_connected and c.transport is c.client.get_transport()
        assert c.transport.packetizer._Packetizer__keepalive_interval == KEEPALIVE
        assert c.transport.banner_timeout == 3.0
        assert c.run("echo fab", hide=True, in_stream=False).stdout == "fab\n"
    # ndfs's SFTP transport connects through the factory.
    with make("sftp", h) as sftp:
        assert not sftp.exists("nothing-here")
        tr = sftp._client.get_transport()  # type: ignore[union-attr]
        assert tr.packetizer._Packetizer__keepalive_interval == KEEPALIVE
        assert tr.banner_timeout == h.host_config().connect_timeout


@pytest.mark.timeout(60)
def test_a_server_that_never_sends_its_banner_times_out(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(1)  # accepts TCP (the kernel does) and never speaks SSH
    try:
        hc = ssh_hosts[0].host_config(address="127.0.0.1", port=mute.getsockname()[1], connect_timeout=0.5)
        with pytest.raises(HostUnreachable, match=r"127\.0\.0\.1:\d+.*(timed out|banner|Error reading SSH)"):
            ssh_client(hc)
    finally:
        mute.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["sftp", "scp"])
def test_jump_host_tunnels_the_connection(kind: str, ssh_hosts: list[SSHHost], payload: Path, tmp_path: Path) -> None:
    target, hop = ssh_hosts[0], ssh_hosts[1]
    jump = JumpHost(hop.address, hop.port, hop.user)
    with make(kind, target, jump=jump) as t:
        c = t.put(payload, f"jump/{kind}")
        assert t.get(f"jump/{kind}", tmp_path / "back") == c.size
    assert (tmp_path / "back").read_bytes() == payload.read_bytes()
    assert (target.root / f"jump/{kind}").read_bytes() == payload.read_bytes()
    # The jump host really is on the path: with it down the target cannot be reached.
    hop.stop()
    try:
        with make(kind, target, jump=jump) as t:
            with pytest.raises(HostUnreachable, match=f"{hop.address}|{hop.port}"):
                t.put(payload, f"jump/{kind}-2")
    finally:
        hop.start()


def test_missing_sshd_fails_with_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import sshd

    monkeypatch.setattr(sshd, "SSHD", "/nonexistent/sbin/sshd")
    with pytest.raises(sshd.SSHDUnavailable, match="/nonexistent/sbin/sshd.*apt-get install -y openssh-server"):
        sshd.require_openssh()
