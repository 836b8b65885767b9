"""Real OpenSSH servers on loopback, one per test "host", for the ssh integration tests.

Each host is an ``sshd -D -e`` on its own loopback address (127.0.0.2, 127.0.0.3, ...) and a
free port, with a throwaway host key, its own data root and a log file.  One throwaway user
key and one known_hosts file (holding every host's key under ``[address]:port``) serve all
hosts; the login user is the current user.  Nothing reads or writes the user's ~/.ssh.

``stop()`` kills the server *and* its per-connection children (a host going down: existing
connections break); ``pause()`` freezes them (a hung host: connections stay open, nothing
answers); ``start()`` / ``resume()`` bring the host back on the same address and port.

Used through the fixtures in tests/conftest.py (``ssh_hosts``, ``sshd_cluster``); usable
directly: ``cluster = start_cluster(tmp_dir, k=3)`` ... ``cluster.stop_all()``.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from webdb.ndfs.config import HostConfig

SSHD = "/usr/sbin/sshd"
INSTALL_HINT = "install it with `apt-get install -y openssh-server rsync` (or run `make deps`)"


class SSHDUnavailable(RuntimeError):
    """sshd or ssh-keygen is missing, or a server did not come up; the message says why."""


def require_openssh() -> None:
    """Raise SSHDUnavailable with an install hint unless sshd, ssh-keygen, ssh and scp exist."""
    missing = [p for p in (SSHD,) if not os.access(p, os.X_OK)]
    missing += [t for t in ("ssh-keygen", "ssh", "scp") if shutil.which(t) is None]
    if missing:
        raise SSHDUnavailable(f"the ssh integration tests need {', '.join(missing)}: {INSTALL_HINT}")


def keygen(path: Path, comment: str) -> str:
    """Make an ed25519 key pair without a passphrase; returns the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path.with_suffix(".pub").read_text().strip()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL sshd if the test process dies without stopping it
    (Linux prctl PR_SET_PDEATHSIG), so an aborted run leaves no server behind."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def known_hosts_line(address: str, port: int, public_key: str) -> str:
    """A known_hosts entry; OpenSSH and paramiko write non-22 ports as ``[address]:port``."""
    kind, blob = public_key.split()[:2]
    host = address if port == 22 else f"[{address}]:{port}"
    return f"{host} {kind} {blob}\n"


@dataclass
class SSHHost:
    """One sshd: where it listens, how to log in, its data root, and start/stop controls."""

    name: str
    address: str
    port: int
    user: str
    key_path: Path
    known_hosts: Path
    root: Path
    workdir: Path
    host_key_pub: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    paused: bool = False
    # Variables every session on the host gets (sshd SetEnv; PATH too): a host set up
    # differently, e.g. one whose PATH holds no C compiler.  Applied at the next start().
    env: dict[str, str] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.workdir / "sshd.log"

    def _config(self) -> Path:
        conf = self.workdir / "sshd_config"
        conf.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.address}",
                    f"Port {self.port}",
                    f"HostKey {self.workdir / 'host_ed25519'}",
                    f"PidFile {self.workdir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.workdir.parent / 'authorized_keys'}",
                    f"AllowUsers {self.user}",
                    # Throwaway files in a tmp dir: skip the ownership checks and PAM.
                    "StrictModes no",
                    "UsePAM no",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "Subsystem sftp internal-sftp",
                    "UseDNS no",
                    "PrintMotd no",
                    "PrintLastLog no",
                    "X11Forwarding no",
                    "AllowTcpForwarding local",  # a jump host (tests of hosts.ini `jump`)
                    "MaxStartups 100",
                    "MaxSessions 50",
                    "LogLevel INFO",
                    *(f'SetEnv {k}="{v}"' for k, v in self.env.items()),
                    "",
                ]
            )
        )
        return conf

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        """Start sshd (no-op if running) and wait until it answers with an SSH banner."""
        if self.running:
            self.resume()
            return
        if os.geteuid() == 0:
            # Privilege separation needs this directory; Debian creates it only at boot.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        conf = self._config()
        log = open(self.log_path, "ab")
        with log:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SSHDUnavailable(f"sshd for {self.name} exited ({self.process.returncode}): {self.log()[-2000:]}")
            try:
                with socket.create_connection((self.address, self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise SSHDUnavailable(f"sshd for {self.name} did not answer on {self.address}:{self.port} in {timeout}s")

    def _tree(self) -> list[psutil.Process]:
        """The listener and every per-connection process it forked (only those we started)."""
        if self.process is None:
            return []
        try:
            top = psutil.Process(self.process.pid)
            return [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """Take the host down: kill sshd and its connection processes (clients see a reset)."""
        if self.process is None:
            return
        for p in reversed(self._tree()):
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.process.wait(timeout=10)
        self.process = None
        self.paused = False

    def pause(self) -> None:
        """Freeze the host: its processes stop answering but connections stay open."""
        for p in self._tree():
            try:
                p.send_signal(signal.SIGSTOP)
            except psutil.NoSuchProcess:  # a connection process that ended since the listing
                pass
        self.paused = True

    def resume(self) -> None:
        """Undo ``pause``."""
        for p in self._tree():
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess:  # killed meanwhile (the coordinator closed its connection)
                pass
        self.paused = False

    def log(self) -> str:
        """sshd's log so far (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def host_config(self, **overrides: object) -> HostConfig:
        """This host as a webdb.ndfs HostConfig (python = this interpreter, for remote runs)."""
        kw: dict[str, object] = {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "user": self.user,
            "key_file": self.key_path,
            "known_hosts": self.known_hosts,
            "root": str(self.root),
            "python": sys.executable,
            "connect_timeout": 5.0,
            "timeout": 10.0,
        }
        kw.update(overrides)
        return HostConfig(**kw)  # type: ignore[arg-type]

    def ini(self) -> str:
        """This host as a hosts.ini ``[host:NAME]`` section."""
        return (
            f"[host:{self.name}]\naddress = {self.address}\nport = {self.port}\nuser = {self.user}\n"
            f"key_file = {self.key_path}\nknown_hosts = {self.known_hosts}\nroot = {self.root}\n"
            f"python = {sys.executable}\n"
        )

    def fabric_connection(self, **overrides: object):  # -> fabric.Connection
        """An open fabric Connection to this host from webdb's connection factory (no ssh
        config read, the host key checked against our known_hosts with a reject policy)."""
        from webdb.ndfs.connect import fabric_connection

        return fabric_connection(self.host_config(**overrides))


@dataclass
class SSHCluster:
    """k hosts sharing one user key and one known_hosts file."""

    base: Path
    hosts: list[SSHHost]

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __getitem__(self, i: int) -> SSHHost:
        return self.hosts[i]

    def ini(self, extra: str = "") -> str:
        """A hosts.ini text listing every host, followed by ``extra`` (groups, sections)."""
        return "\n".join(h.ini() for h in self.hosts) + "\n" + extra

    def ensure_running(self) -> None:
        for h in self.hosts:
            if h.paused:
                h.resume()
            if not h.running:
                h.start()

    def stop_all(self) -> None:
        for h in self.hosts:
            if h.paused:
                h.resume()
            h.stop()


def start_cluster(base: Path, k: int = 3, first_address: int = 2) -> SSHCluster:
    """Start k sshd hosts ``h0..h{k-1}`` on 127.0.0.{first_address}... under ``base``.

    Raises SSHDUnavailable (with the install hint) if OpenSSH is missing.
    """
    require_openssh()
    base.mkdir(parents=True, exist_ok=True)
    user = pwd.getpwuid(os.getuid()).pw_name
    user_key = base / "id_ed25519"
    (base / "authorized_keys").write_text(keygen(user_key, "webdb-test-user") + "\n")
    known_hosts = base / "known_hosts"
    hosts: list[SSHHost] = []
    for i in range(k):
        address = f"127.0.0.{first_address + i}"
        workdir = base / f"h{i}"
        root = base / f"h{i}-root"
        workdir.mkdir(exist_ok=True)
        root.mkdir(exist_ok=True)
        pub = keygen(workdir / "host_ed25519", f"webdb-test-host-{i}")
        hosts.append(SSHHost(f"h{i}", address, free_port(address), user, user_key, known_hosts, root, workdir, pub))
    cluster = SSHCluster(base, hosts)
    try:
        for h in hosts:
            _start_on_a_free_port(h)
    except BaseException:
        cluster.stop_all()
        raise
    # Written once every port is final: a host keeps its address and port across stop/start.
    known_hosts.write_text("".join(known_hosts_line(h.address, h.port, h.host_key_pub) for h in hosts))
    return cluster


def _start_on_a_free_port(h: SSHHost, attempts: int = 5) -> None:
    """First start: if another process (another xdist worker, another suite) took the port
    between ``free_port`` and sshd's bind, pick a new one."""
    for attempt in range(attempts):
        try:
            h.start()
            return
        except SSHDUnavailable:
            if attempt == attempts - 1 or "Address already in use" not in h.log():
                raise
            h.log_path.unlink()
            h.port = free_port(h.address)
