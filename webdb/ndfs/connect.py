"""The one way webdb opens an ssh connection: ``ssh_client`` (paramiko) and ``fabric_connection``
(a fabric Connection on the same client).  ndfs's SFTP transport, the rack and deploy use it.

What every connection gets, from the host's ``HostConfig`` (hosts.ini):

- host keys checked against the host's known_hosts file only (``known_hosts``, default
  ``~/.ssh/known_hosts``) with a reject policy: an unknown key or a changed key is refused with
  HostKeyRejected naming the file and the key's fingerprint, never added.  A missing or
  unreadable known_hosts file is refused too.  No ssh config file is read.
- the TCP connect, the banner and authentication bounded by ``connect_timeout``; keepalives
  every ``KEEPALIVE`` seconds, so a dead peer is noticed on an idle connection; TCP_NODELAY,
  as OpenSSH's own client sets it; AES-GCM preferred (``_Transport``).
- ``user``, ``port``, ``key_file`` (else the agent and the default keys);
- ``jump = [user@]host[:port]``: the connection is tunnelled through that host (a
  ``direct-tcpip`` channel, as ``ssh -J``), whose key is checked against the same known_hosts
  file.  Closing the client closes the jump connection too.

Connection problems raise HostUnreachable (refused, timed out, authentication failed) or
HostKeyRejected; both name the host.
"""

from __future__ import annotations

import socket
from typing import Any

import paramiko

from webdb.ndfs.config import HostConfig
from webdb.ndfs.errors import HostKeyRejected, HostUnreachable

__all__ = ["KEEPALIVE", "ssh_client", "fabric_connection", "why"]

KEEPALIVE = 15  # seconds between keepalive messages on an idle connection


class _Reject(paramiko.RejectPolicy):
    """paramiko's RejectPolicy, raising HostKeyRejected naming the file that was consulted."""

    def __init__(self, label: str, known_hosts: str) -> None:
        self.label = label
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise HostKeyRejected(
            self.label,
            "",
            f"host key of {hostname} ({key.get_name()} {key.fingerprint}) is not in "
            f"{self.known_hosts}; refusing to connect",
        )


def why(e: BaseException) -> str:
    """A readable reason even for exceptions with an empty message (socket timeouts)."""
    if isinstance(e, (socket.timeout, TimeoutError)) and not str(e):
        return "no answer (timed out)"
    if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
        return "connection refused"
    return str(e) or type(e).__name__


_GCM = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


class _Transport(paramiko.Transport):
    """paramiko's transport with AES-GCM first: an AEAD cipher needs no separate MAC pass, and
    with AES in hardware a bulk put runs ~20% faster than aes128-ctr + hmac-sha2-256 (paramiko's
    first choice; bench/bench_transport.py).  Every cipher paramiko offers stays on offer."""

    _preferred_ciphers = _GCM + tuple(c for c in paramiko.Transport._preferred_ciphers if c not in _GCM)


class _Client(paramiko.SSHClient):
    """An SSHClient that connects only the factory's way.  fabric re-opens a closed Connection
    by calling ``client.connect(...)`` with its own arguments: that goes through ``_open``
    again (same checks, same jump), whatever fabric passes."""

    def __init__(self, host: HostConfig, wait: float | None) -> None:
        super().__init__()
        self.host = host
        self.wait = host.connect_timeout if wait is None else wait
        self.jump: _Client | None = None

    def connect(self, *_args: Any, **_kwargs: Any) -> None:  # type: ignore[override]
        self._open()

    def _open(self) -> None:
        h, wait = self.host, self.wait
        known = str(h.known_hosts_path())
        where = f"{h.address}:{h.port}"
        entry = h.address if h.port == 22 else f"[{h.address}]:{h.port}"  # its known_hosts name
        try:
            self.load_host_keys(known)
        except FileNotFoundError:
            raise HostKeyRejected(
                h.name, "", f"known_hosts file {known} does not exist; cannot verify the host key"
            ) from None
        except (OSError, paramiko.SSHException) as e:
            raise HostKeyRejected(h.name, "", f"cannot read known_hosts file {known}: {e}") from None
        self.set_missing_host_key_policy(_Reject(h.name, known))
        sock = None
        try:
            if h.jump is not None:
                sock = self._through_jump()
            super().connect(
                h.address,
                port=h.port,
                username=h.user,
                key_filename=str(h.key_file) if h.key_file else None,
                timeout=wait,
                banner_timeout=wait,
                auth_timeout=wait,
                channel_timeout=wait,
                allow_agent=h.key_file is None,
                look_for_keys=h.key_file is None,
                sock=sock,
                transport_factory=_Transport,
            )
            transport = self.get_transport()
            if transport is None:
                raise paramiko.SSHException("no transport after connect")
            transport.set_keepalive(KEEPALIVE)
            if isinstance(transport.sock, socket.socket):
                # paramiko leaves Nagle on: a small request sent while the last one's ACK is
                # delayed waits ~40 ms, and a publish is a dozen small SFTP requests.
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except HostKeyRejected:
            self.close()
            raise
        except paramiko.BadHostKeyException as e:
            self.close()
            raise HostKeyRejected(
                h.name,
                "",
                f"host key of {where} changed: got {e.key.get_name()} {e.key.fingerprint}, "
                f"{known} has {e.expected_key.get_name()} {e.expected_key.fingerprint}; refusing to connect "
                f"(a changed key can be an attack). If the host was legitimately reinstalled, check the new "
                f"fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then: "
                f"ssh-keygen -f {known} -R '{entry}' && ssh-keyscan -p {h.port} {h.address} >> {known}",
            ) from None
        except paramiko.AuthenticationException as e:
            self.close()
            raise HostUnreachable(h.name, "", f"authentication as {h.user} at {where} failed: {e}") from None
        except (OSError, EOFError, paramiko.SSHException) as e:
            # When paramiko's wait for the handshake ends (connect_timeout) it goes on to
            # authenticate regardless and fails with "No existing session": say what happened.
            t = self.get_transport()
            cause = t.get_exception() if t is not None else None
            reason = why(cause or e)
            if cause is None and t is not None and not t.initial_kex_done:
                reason = f"no SSH handshake within {wait:g}s (timed out)"
            self.close()
            via = f" via jump host {h.jump}" if h.jump is not None else ""
            raise HostUnreachable(h.name, "", f"cannot connect to {where}{via}: {reason}") from None

    def _through_jump(self) -> paramiko.Channel:
        """Connect to the jump host (same key file and known_hosts) and open a tunnel to ours."""
        h = self.host
        j = h.jump
        assert j is not None
        hop = HostConfig(
            name=f"{h.name} (jump {j})",
            address=j.address,
            root="/",
            port=j.port,
            user=j.user or h.user,
            key_file=h.key_file,
            known_hosts=h.known_hosts_path(),
            connect_timeout=h.connect_timeout,
            timeout=h.timeout,
        )
        self.jump = _Client(hop, self.wait)
        self.jump._open()
        transport = self.jump.get_transport()
        assert transport is not None
        return transport.open_channel("direct-tcpip", (h.address, h.port), ("127.0.0.1", 0), timeout=self.wait)

    def close(self) -> None:
        super().close()
        if self.jump is not None:
            self.jump.close()
            self.jump = None


def ssh_client(host: HostConfig, *, connect_timeout: float | None = None) -> paramiko.SSHClient:
    """A connected paramiko client to ``host`` (see the module docstring for what it checks).

    ``connect_timeout`` overrides ``host.connect_timeout`` (a caller with its own deadline).
    Raises HostKeyRejected or HostUnreachable.
    """
    client = _Client(host, connect_timeout)
    client._open()
    return client


def fabric_connection(host: HostConfig, *, connect_timeout: float | None = None):  # -> fabric.Connection
    """An open fabric Connection to ``host`` on an ``ssh_client`` (no ssh config read; fabric's
    own default would add unknown host keys).  Raises HostKeyRejected or HostUnreachable."""
    import fabric

    client = ssh_client(host, connect_timeout=connect_timeout)
    try:
        conn = fabric.Connection(
            host.address,
            user=host.user,
            port=host.port,
            config=fabric.Config(overrides={"load_ssh_configs": False}),
            connect_timeout=host.connect_timeout if connect_timeout is None else connect_timeout,
        )
        conn.client = client
        conn.transport = client.get_transport()  # fabric sees it open: ``open()`` is a no-op
    except BaseException:
        client.close()  # fabric failed to build the Connection: do not leak the ssh session
        raise
    return conn
