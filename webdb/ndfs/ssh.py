"""Transports to a remote host over ssh: paramiko SFTP, and the system scp/rsync for bulk data.

SFTP connections come from ``webdb.ndfs.connect.ssh_client``, the one connection factory: host
keys always checked against the host's known_hosts file (hosts.ini ``known_hosts``, default
``~/.ssh/known_hosts``) with a reject policy (an unknown or changed key is refused with
HostKeyRejected, never added), ``connect_timeout`` for the TCP connect, banner and
authentication, keepalives, and the ``jump`` host.  The system ``ssh`` runs with
``-F /dev/null`` and the same policy as explicit options (``ssh_options``), so the user's
~/.ssh/config never changes what a transport does.

Every SFTP operation is bounded: ``timeout`` for each wait on the server.  A broken or
timed-out connection raises HostUnreachable and is dropped; the next operation reconnects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import io
import math
import shlex
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import paramiko
from paramiko.sftp import CMD_EXTENDED, CMD_EXTENDED_REPLY

from webdb.ndfs.config import HostConfig
from webdb.ndfs.connect import ssh_client, why
from webdb.ndfs.errors import (
    DiskFull,
    HostKeyRejected,
    HostUnreachable,
    RemoteFileNotFound,
    TransportError,
)
from webdb.ndfs.names import remote_path
from webdb.ndfs.transport import CHUNK, Completion, Transport, sha256_file

T = TypeVar("T")

# Larger than paramiko's 2 MiB default: more data in flight per round trip on fast links.
WINDOW_SIZE = 1 << 26
# Files up to this size are verified by reading them back over SFTP; larger ones by running
# sha256sum on the host (one process start instead of a second transfer).
REREAD_VERIFY_MAX = 1 << 20
# The host's side of the sha256sum check: one shell per connection, one line per file ("S" to
# sync the file first, "N" not to, then its path), one line back ("STATUS OUTPUT").  A new ssh
# session per file costs sshd a fork and a session setup (~90 ms on loopback); a line, a round
# trip and a sha256sum process.
VERIFY_LOOP = (
    'while IFS= read -r l; do p=${l#?}; case $l in S*) sync -- "$p" 2>/dev/null;; esac; '
    'r=$(sha256sum -- "$p" 2>&1); s=$?; printf \'%s %s\\n\' "$s" "$(printf %s "$r" | tr \'\\n\' \' \')"; done'
)
# SubprocessTransport sends files at least this large with scp/rsync, smaller ones over SFTP
# (a process start and a second ssh handshake cost more than a small file).
LARGE_FILE_BYTES = 8 << 20
# What `transport = auto` uses for large files: scp downloads 3-6x faster than paramiko SFTP
# and uploads as fast (bench/bench_transport.py; docs/ndfs.md, "Throughput").
DEFAULT_LARGE_FILE_TOOL: str | None = "scp"
# Lower bound on bulk throughput used to size the subprocess timeout: a hang guard only.
MIN_BULK_RATE = 1 << 20
# Outstanding 32 KiB read requests of an SFTP download.
PREFETCH_REQUESTS = 64


def _is_connection_error(e: BaseException) -> bool:
    return isinstance(e, (EOFError, paramiko.SSHException, socket.timeout, ConnectionError, TimeoutError))


class SFTPTransport(Transport):
    """A host's ndfs root over one paramiko SSH connection (SFTP for files, exec for sha256sum).

    Thread-safe: operations on one transport are serialised by a lock.
    """

    def __init__(self, host: HostConfig, *, window_size: int = WINDOW_SIZE) -> None:
        self.host = host
        self.label = host.name
        self.window_size = window_size
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        self._op_deadline: float | None = None
        self._verifier: paramiko.Channel | None = None  # VERIFY_LOOP's session, opened on first use
        self._verifier_out: paramiko.ChannelFile | None = None

    # -- connection ----------------------------------------------------------------------------

    def _timeout(self, base: float) -> float:
        if self._op_deadline is None:
            return base
        return max(0.05, min(base, self._op_deadline - time.monotonic()))

    @contextlib.contextmanager
    def _deadline(self, deadline: float) -> Iterator[None]:
        with self._lock:
            saved = self._op_deadline
            self._op_deadline = deadline
            try:
                yield
            finally:
                self._op_deadline = saved
                if self._sftp is not None:
                    self._sftp.get_channel().settimeout(self.host.timeout)

    def connect(self) -> paramiko.SFTPClient:
        """Open (or reuse) the connection; raises HostUnreachable or HostKeyRejected."""
        with self._lock:
            if self._sftp is not None and self._client is not None:
                if self._alive():
                    self._sftp.get_channel().settimeout(self._timeout(self.host.timeout))
                    return self._sftp
                self.close()
            self._sftp = self._open()
            return self._sftp

    def _open(self) -> paramiko.SFTPClient:
        h = self.host
        client = ssh_client(h, connect_timeout=self._timeout(h.connect_timeout))
        try:
            transport = client.get_transport()
            assert transport is not None
            sftp = paramiko.SFTPClient.from_transport(transport, window_size=self.window_size)
            assert sftp is not None
            sftp.get_channel().settimeout(self._timeout(h.timeout))
        except (OSError, EOFError, paramiko.SSHException) as e:
            client.close()
            raise HostUnreachable(h.name, "", f"cannot open SFTP on {h.address}:{h.port}: {why(e)}") from None
        self._client = client
        return sftp

    def close(self) -> None:
        with self._lock:
            sftp, client, verifier = self._sftp, self._client, self._verifier
            self._sftp = self._client = self._verifier = self._verifier_out = None
            for c in (verifier, sftp, client):
                if c is not None:
                    with contextlib.suppress(Exception):
                        c.close()

    def _op(self, name: str, fn: Callable[[paramiko.SFTPClient], T]) -> T:
        """Run ``fn`` on a live connection, translating failures into transport errors."""
        with self._lock:
            sftp = self.connect()
            try:
                return fn(sftp)
            except TransportError:
                raise
            except OSError as e:
                if e.errno == errno.ENOENT:
                    raise RemoteFileNotFound(self.label, name, f"no such file under {self.host.root}") from None
                if not _is_connection_error(e) and self._alive():
                    raise TransportError(self.label, name, f"{self._abs(name)}: {e}") from e
                self.close()
                raise HostUnreachable(self.label, name, f"connection to {self._where_host()} lost: {why(e)}") from None
            except (EOFError, paramiko.SSHException) as e:
                self.close()
                raise HostUnreachable(self.label, name, f"connection to {self._where_host()} lost: {why(e)}") from None

    def _where_host(self) -> str:
        return f"{self.host.address}:{self.host.port}"

    def _alive(self) -> bool:
        # The SFTP channel can be closed (the server went away) before the transport's reader
        # thread has seen the end of the stream: either one closed means the connection is lost.
        t = self._client.get_transport() if self._client else None
        ch = self._sftp.get_channel() if self._sftp else None
        return t is not None and t.is_active() and ch is not None and not ch.closed

    def _abs(self, name: str) -> str:
        return remote_path(self.host.root, name)  # every remote path is checked to lie under the root

    def _where(self, name: str) -> str:
        return f"{self.host.name}:{self._abs(name)}"

    # -- primitives ----------------------------------------------------------------------------

    def disk_free(self, name: str = "") -> int:
        def statvfs(sftp: paramiko.SFTPClient) -> int:
            path = self._abs(name)
            while True:
                try:
                    sftp.stat(path)
                    break
                except FileNotFoundError:
                    if path in ("/", self.host.root):
                        raise
                    path = path.rpartition("/")[0] or "/"
            # statvfs@openssh.com has no public paramiko API; the request is 11 uint64 fields.
            t, msg = sftp._request(CMD_EXTENDED, "statvfs@openssh.com", path)
            if t != CMD_EXTENDED_REPLY or msg is None:
                raise TransportError(self.label, name, "server does not answer statvfs@openssh.com")
            fields = [msg.get_int64() for _ in range(11)]
            f_frsize, f_bavail = fields[1], fields[4]
            return f_bavail * f_frsize

        return self._op(name, statvfs)

    def _send_file(self, local_path: str, tmp: str, size: int) -> Completion:
        with open(local_path, "rb") as src:
            return self._op(tmp, lambda sftp: self._sftp_send(sftp, src, tmp))

    def _send_bytes(self, data: bytes, tmp: str) -> Completion:
        return self._op(tmp, lambda sftp: self._sftp_send(sftp, io.BytesIO(data), tmp))

    def _sftp_send(self, sftp: paramiko.SFTPClient, src: io.BufferedIOBase, tmp: str) -> Completion:
        h = hashlib.sha256()
        n = 0
        # "x": a temp name is never shared; pipelined: do not wait for each write's ack.
        path = self._abs(tmp)
        with sftp.open(path, "wx") as dst:
            dst.set_pipelined(True)
            while chunk := src.read(CHUNK):
                h.update(chunk)
                dst.write(chunk)
                n += len(chunk)
            dst.flush()
            if self.durable:
                self._fsync(sftp, dst)
        # paramiko drops the status of pipelined writes still in flight at close, so a write the
        # server refused (a full disk) can go unreported: the size the server holds tells.
        stored = sftp.stat(path).st_size
        if stored != n:
            raise TransportError(self.label, tmp, f"short write: the server stored {stored} of {n} bytes")
        return Completion(n, h.hexdigest())

    def _fsync(self, sftp: paramiko.SFTPClient, f: paramiko.SFTPFile) -> None:
        """Make the written bytes durable before the file is renamed and flagged.

        fsync@openssh.com (OpenSSH >= 6.5) has no public paramiko API; the server handles
        requests in order, so it runs after every pipelined write.  Servers without it are
        tolerated: the rename is then only as durable as the remote filesystem makes it.
        """
        try:
            sftp._request(CMD_EXTENDED, "fsync@openssh.com", f.handle)
        except OSError as e:
            if _is_connection_error(e) or not self._alive():
                raise

    def _digest(self, name: str, size_hint: int) -> Completion:
        if size_hint > REREAD_VERIFY_MAX:
            c = self._remote_sha256(name, size_hint)
            if c is not None:
                return c
        return self._op(name, lambda sftp: self._sftp_recv(sftp, name, None))

    def _remote_sha256(self, name: str, size: int) -> Completion | None:
        """sha256sum on the host; None if the host has no sha256sum (then we read back)."""
        path = self._abs(name)
        if "\n" in path:  # one line per request: such a path is read back instead
            return None

        def run(sftp: paramiko.SFTPClient) -> Completion | None:
            real_size = sftp.stat(path).st_size or 0
            # sync first when the publish is durable: bytes written by scp/rsync are made
            # durable before they are published (SFTP writes had their fsync already).
            request = f"{'S' if self.durable else 'N'}{path}\n".encode()
            budget = self._timeout(self.host.timeout + size / (20 << 20))
            for attempt in range(2):  # a verifier shell that ended is started once more
                ch, out = self._verifier_session()
                ch.settimeout(budget)
                try:
                    ch.sendall(request)
                    line = out.readline()
                except OSError as e:
                    if _is_connection_error(e) or not self._alive():
                        raise
                    line = b""  # the session closed under us: its shell ended
                if line.endswith(b"\n"):
                    break
                self._close_verifier()
                if attempt:
                    raise TransportError(self.label, name, f"sha256sum on {self._where_host()} gave no answer")
            status, _, text = line.decode("utf-8", "replace").rstrip("\n").partition(" ")
            if status == "127":
                return None
            if status != "0":
                raise TransportError(self.label, name, f"sha256sum failed ({status}): {text.strip()}")
            # GNU sha256sum marks a line whose name it had to escape with a leading backslash.
            return Completion(real_size, text.split(" ", 1)[0].lstrip("\\"))

        return self._op(name, run)

    def _verifier_session(self) -> tuple[paramiko.Channel, paramiko.ChannelFile]:
        """The connection's VERIFY_LOOP session (started on first use)."""
        if self._verifier is None or self._verifier_out is None or self._verifier.closed:
            assert self._client is not None
            transport = self._client.get_transport()
            assert transport is not None
            ch = transport.open_session(timeout=self._timeout(self.host.timeout))
            ch.exec_command(VERIFY_LOOP)
            self._verifier, self._verifier_out = ch, ch.makefile("rb")
        return self._verifier, self._verifier_out

    def _close_verifier(self) -> None:
        ch, self._verifier, self._verifier_out = self._verifier, None, None
        if ch is not None:
            with contextlib.suppress(Exception):
                ch.close()

    def _sftp_recv(self, sftp: paramiko.SFTPClient, name: str, dst: io.BufferedIOBase | None) -> Completion:
        h = hashlib.sha256()
        n = 0
        with sftp.open(self._abs(name), "rb") as src:
            # Bounded read-ahead: unbounded prefetch makes paramiko scan a huge buffer map per read
            # (quadratic; 4 MiB/s on 256 MiB).
            src.prefetch(max_concurrent_requests=PREFETCH_REQUESTS)
            while chunk := src.read(CHUNK):
                h.update(chunk)
                n += len(chunk)
                if dst is not None:
                    dst.write(chunk)
        return Completion(n, h.hexdigest())

    def _recv_file(self, name: str, local_path: str) -> Completion:
        with open(local_path, "xb") as dst:
            return self._op(name, lambda sftp: self._sftp_recv(sftp, name, dst))

    def _read_small(self, name: str) -> bytes:
        def read(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(self._abs(name), "rb") as f:
                return f.read()

        return self._op(name, read)

    def _size(self, name: str) -> int | None:
        def size(sftp: paramiko.SFTPClient) -> int | None:
            try:
                return sftp.stat(self._abs(name)).st_size
            except FileNotFoundError:
                return None

        return self._op(name, size)

    def _remove(self, name: str, missing_ok: bool) -> bool:
        def remove(sftp: paramiko.SFTPClient) -> bool:
            try:
                sftp.remove(self._abs(name))
            except FileNotFoundError:
                if not missing_ok:
                    raise
                return False
            return True

        return self._op(name, remove)

    def _rename(self, src: str, dst: str) -> None:
        self._op(src, lambda sftp: sftp.posix_rename(self._abs(src), self._abs(dst)))

    def _makedirs(self, name: str) -> None:
        def mkdirs(sftp: paramiko.SFTPClient) -> None:
            missing = []
            path = self._abs(name)
            while True:
                try:
                    if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):
                        raise TransportError(self.label, name, f"{path} exists and is not a directory")
                    break
                except FileNotFoundError:
                    missing.append(path)
                    path = path.rpartition("/")[0] or "/"
            for p in reversed(missing):
                try:
                    sftp.mkdir(p)
                except OSError as e:
                    # Another writer may have created it meanwhile; only a non-directory is an error,
                    # and the mkdir's own error (permission denied, ...) is the one to report.
                    try:
                        made = stat.S_ISDIR(sftp.stat(p).st_mode or 0)
                    except OSError:
                        made = False
                    if not made:
                        raise e

        self._op(name, mkdirs)

    def _walk(self, prefix: str) -> list[str]:
        def walk(sftp: paramiko.SFTPClient) -> list[str]:
            out: list[str] = []
            stack = [prefix]
            while stack:
                d = stack.pop()
                try:
                    entries = sftp.listdir_attr(self._abs(d))
                except FileNotFoundError:
                    continue
                for a in entries:
                    rel = f"{d}/{a.filename}" if d else a.filename
                    if stat.S_ISDIR(a.st_mode or 0):
                        stack.append(rel)
                    elif stat.S_ISREG(a.st_mode or 0):
                        out.append(rel)
            return out

        return self._op(prefix, walk)

    def _remove_tree(self, prefix: str) -> int:
        def rmtree(sftp: paramiko.SFTPClient) -> int:
            removed = 0
            dirs: list[str] = []
            stack = [self._abs(prefix)]
            while stack:
                d = stack.pop()
                try:
                    entries = sftp.listdir_attr(d)
                except FileNotFoundError:
                    continue
                dirs.append(d)
                for a in entries:
                    p = f"{d}/{a.filename}"
                    if stat.S_ISDIR(a.st_mode or 0):
                        stack.append(p)
                    else:
                        sftp.remove(p)
                        removed += 1
            for d in reversed(dirs):
                sftp.rmdir(d)
            return removed

        return self._op(prefix, rmtree)


def ssh_options(host: HostConfig) -> list[str]:
    """Options for the system ssh/scp: no config file, strict host-key checking against the
    host's known_hosts only, batch mode (never a prompt), bounded connect and keepalive.

    A ``jump`` host becomes a ProxyCommand running ``ssh -W`` with these same options (not
    ProxyJump: the ssh it starts would not get our -o options, so it would read the user's
    known_hosts and could prompt)."""
    alive = max(1, math.ceil(host.timeout / 3))
    opts = [
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={_quote_opt(str(host.known_hosts_path()))}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "UpdateHostKeys=no",
        "-o",
        f"ConnectTimeout={max(1, math.ceil(host.connect_timeout))}",
        "-o",
        f"ServerAliveInterval={alive}",
        "-o",
        "ServerAliveCountMax=3",
        "-o",
        "LogLevel=ERROR",
        "-o",
        f"User={host.user}",
        "-o",
        f"Port={host.port}",
    ]
    if host.key_file:
        opts += ["-o", "IdentitiesOnly=yes", "-o", f"IdentityFile={_quote_opt(str(host.key_file))}"]
    if host.jump is not None:
        j = host.jump
        hop = dataclasses.replace(host, address=j.address, port=j.port, user=j.user or host.user, jump=None)
        opts += ["-o", "ProxyCommand=" + shlex.join(["ssh", *ssh_options(hop), "-W", "%h:%p", j.address])]
    return opts


def _quote_opt(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


def _remote_spec(host: HostConfig, path: str) -> str:
    addr = f"[{host.address}]" if ":" in host.address else host.address
    return f"{addr}:{path}"


class SubprocessTransport(SFTPTransport):
    """SFTPTransport that moves large files with the system ``scp`` or ``rsync`` over ``ssh``.

    Control operations (stat, rename, flags, listing, verification) stay on the paramiko
    connection; only the bulk bytes of files of at least ``threshold`` bytes go through the
    external tool, which OpenSSH's C ciphers make several times faster than paramiko (see
    docs/ndfs.md, "Throughput").  The local SHA-256 is computed in a thread while the tool runs.
    """

    def __init__(
        self, host: HostConfig, tool: str = "scp", *, threshold: int = LARGE_FILE_BYTES, window_size: int = WINDOW_SIZE
    ) -> None:
        if tool not in ("scp", "rsync"):
            raise ValueError(f"tool must be scp or rsync, not {tool!r}")
        super().__init__(host, window_size=window_size)
        self.tool = tool
        self.threshold = threshold

    def command(self, src: str, dst: str) -> list[str]:
        """The argv copying ``src`` to ``dst``; remote paths are written ``address:path``."""
        opts = ssh_options(self.host)
        if self.tool == "scp":
            # No -q: it would also silence ssh's "Host key verification failed".
            return ["scp", "-B", *opts, src, dst]
        # -s: remote file names are not word-split by the remote shell.
        ssh = shlex.join(["ssh", *opts])
        return ["rsync", "-s", "--whole-file", "--inplace", "--no-compress", "-q", "-e", ssh, src, dst]

    def _send_file(self, local_path: str, tmp: str, size: int) -> Completion:
        if size < self.threshold:
            return super()._send_file(local_path, tmp, size)
        digest: list[Completion] = []
        hasher = threading.Thread(target=lambda: digest.append(sha256_file(local_path)), daemon=True)
        hasher.start()
        try:
            self._run(tmp, self.command(local_path, _remote_spec(self.host, self._abs(tmp))), size)
        finally:
            hasher.join()
        return digest[0]

    def _recv_file(self, name: str, local_path: str) -> Completion:
        size = self._size(name)
        if size is None:
            raise RemoteFileNotFound(self.label, name, f"no such file under {self.host.root}")
        if size < self.threshold:
            return super()._recv_file(name, local_path)
        self._run(name, self.command(_remote_spec(self.host, self._abs(name)), local_path), size)
        return sha256_file(local_path)

    def _run(self, name: str, argv: list[str], size: int) -> None:
        budget = self._timeout(self.host.connect_timeout + self.host.timeout + size / MIN_BULK_RATE)
        try:
            p = subprocess.run(argv, capture_output=True, timeout=budget, stdin=subprocess.DEVNULL, check=False)
        except FileNotFoundError:
            raise TransportError(self.label, name, f"{argv[0]} is not installed") from None
        except subprocess.TimeoutExpired:
            raise HostUnreachable(self.label, name, f"{self.tool} did not finish in {budget:.0f}s") from None
        if p.returncode == 0:
            return
        err = p.stderr.decode("utf-8", "replace").strip()
        lines = [ln.strip() for ln in err.splitlines() if ln.strip() and not ln.startswith("@")]
        tail = " | ".join(lines[-3:]) or f"exit status {p.returncode}"
        if "Host key verification failed" in err:
            key_lines = [ln for ln in lines if ln.startswith(("Host key", "No ")) and "host key" in ln.lower()]
            raise HostKeyRejected(self.label, name, f"{self.tool}: {' | '.join(key_lines)}")
        if "No space left on device" in err:
            raise DiskFull(self.label, name, f"{self.tool}: {tail}")
        if p.returncode == 255 or "Connection refused" in err or "timed out" in err:
            raise HostUnreachable(self.label, name, f"{self.tool}: {tail}")
        raise TransportError(self.label, name, f"{self.tool} failed: {tail}")


def open_ssh_transport(host: HostConfig, *, default_tool: str | None = None) -> SFTPTransport:
    """The transport a host's ``transport`` key selects; ``auto`` uses ``default_tool`` (see
    ``DEFAULT_LARGE_FILE_TOOL``) for large files when it is installed, else pure SFTP."""
    from shutil import which

    kind = host.transport
    if kind == "sftp":
        return SFTPTransport(host)
    if kind in ("scp", "rsync"):
        return SubprocessTransport(host, kind, threshold=0)
    tool = default_tool or DEFAULT_LARGE_FILE_TOOL
    if tool and which(tool) and which("ssh"):
        return SubprocessTransport(host, tool)
    return SFTPTransport(host)


__all__ = [
    "DEFAULT_LARGE_FILE_TOOL",
    "LARGE_FILE_BYTES",
    "SFTPTransport",
    "SubprocessTransport",
    "open_ssh_transport",
    "ssh_options",
]
