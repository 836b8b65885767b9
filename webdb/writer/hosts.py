"""Hosts of a rack and the agents started on them (docs/distributed.md, *Processes*): where each
section lives (``Rack``, ``Placement``, from hosts.ini ``[sections]``), and one link per
running agent — a local process, or a command over ssh (fabric) — that carries JSON lines both
ways and is closed at the end (``LocalAgentLink``, ``SSHAgentLink``).  The coordinator is
webdb.writer.coordinator.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import paramiko

from webdb.core.db import WebDB
from webdb.errors import BadInput
from webdb.ndfs import HostConfig, Location, NdfsConfig, load_config
from webdb.ndfs.config import local_config
from webdb.ndfs.connect import fabric_connection
from webdb.ndfs.errors import ConfigError, HostUnreachable
from webdb.ndfs.names import validate_db_name

__all__ = ["Placement", "Rack"]

# What a broken agent link raises: a closed pipe or socket, a closed file, an ssh error.
_LINK_ERRORS = (OSError, EOFError, ValueError, paramiko.SSHException)


@dataclass
class Placement:
    """One agent's location: its label (host name or path), sections, and whether it is master."""

    label: str
    location: Location
    sections: list[int] = field(default_factory=list)
    master: bool = False

    @property
    def root(self) -> str:
        return self.location.host.root if self.location.host else str(self.location.path)


class Rack:
    """Where each section of a distributed db lives, from hosts.ini ``[sections]``.

    Every section has exactly one location (its writer runs there).  ``places`` holds one
    Placement per location, in section order; masters are ``[group:master]``'s locations if
    configured, else section 0's.
    """

    def __init__(self, config: NdfsConfig, db: str | None, ini: str | None, base_dir: str) -> None:
        """``ini``: the hosts.ini text agents parse on their host (relative key paths resolve in
        the deployed config folder there); None for a config built as data (``local``), which
        agents get as JSON."""
        self.config = config
        self.db = db or config.db
        if not self.db:
            raise ConfigError(f"{config.source}: no db name given and no [ndfs] db")
        try:
            validate_db_name(self.db)  # one path component: it can never leave a host's root
        except BadInput as e:
            raise ConfigError(f"{config.source}: {e}") from None
        if not config.sections:
            raise ConfigError(f"{config.source}: no [sections]: say how many sections the db has and where")
        self.k = config.sections
        self.ini, self.base_dir = ini, base_dir
        self.places: dict[str, Placement] = {}
        self.section_at: list[str] = []
        for j in range(self.k):
            locs = config.locations(config.section_group(j))
            if len(locs) != 1:
                raise ConfigError(
                    f"{config.source}: [sections] section {j} has {len(locs)} locations; the "
                    f"distributed writer needs exactly one per section (replicas = 1)"
                )
            p = self._place(locs[0])
            p.sections.append(j)
            self.section_at.append(p.label)
        masters = config.groups.get("master") or config.locations(config.section_group(0))
        for loc in masters:
            self._place(loc).master = True

    def _place(self, loc: Location) -> Placement:
        if loc.label not in self.places:
            self.places[loc.label] = Placement(loc.label, loc)
        return self.places[loc.label]

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], db: str | None = None) -> Rack:
        config = load_config(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return cls(config, db, text, os.path.dirname(os.path.abspath(path)))

    @classmethod
    def local(cls, db_path: str, sections: int | None = None) -> Rack:
        """The embedded default: every section of the db directory ``db_path`` on this machine
        (``sections`` None: the db's own k)."""
        path = os.path.abspath(db_path)
        k = sections or WebDB(path).sections().k
        # Built as data, never as INI text: a comma or newline in the path is just a character.
        return cls(local_config(path, k), os.path.basename(path), None, os.path.dirname(path))

    def path(self, label: str) -> str:
        """The db directory at a location: ``<root>/<db>``."""
        return os.path.join(self.places[label].root, self.db)


# ---- agent links: a started agent, local process or ssh channel ----------------------------------


class AgentLink:
    """One running agent: JSON lines in, JSON lines out (queued as (label, obj); None at EOF)."""

    def __init__(self, label: str, q: queue.Queue) -> None:
        self.label, self.q = label, q
        self.err: collections.deque[str] = collections.deque(maxlen=40)
        self.last_seen = time.monotonic()  # by the coordinator's clock (set when started)
        self.answered = 0  # the newest ping the agent answered
        self.done = False  # finished or failed: no more liveness checks
        self.dead = False  # gone or silent: close without waiting for it
        self.lock = threading.Lock()

    def _chunks(self, read: Callable[[], bytes], what: str) -> Iterator[bytes]:
        """What ``read`` returns until EOF; a broken connection ends it like an EOF, and the
        reason is kept for the error message (``stderr_tail``)."""
        while True:
            try:
                chunk = read()
            except _LINK_ERRORS as e:
                self.err.append(f"{what} failed: {type(e).__name__}: {e}")
                return
            if not chunk:
                return
            yield chunk

    def _pump_lines(self, read: Callable[[], bytes]) -> None:
        buf = b""
        for chunk in self._chunks(read, "reading from the agent"):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    self.q.put((self.label, json.loads(line)))
                except ValueError:
                    self.err.append(line.decode("utf-8", "replace"))
        self.q.put((self.label, None))

    def _pump_err(self, read: Callable[[], bytes]) -> None:
        buf = b""
        for chunk in self._chunks(read, "reading the agent's stderr"):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            self.err.extend(x.decode("utf-8", "replace") for x in lines if x.strip())

    def send(self, obj: dict) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        with self.lock:
            try:
                self._write(data)
            except _LINK_ERRORS as e:
                # The link is broken: its reader sees the EOF and reports the host; keep why.
                self.err.append(f"writing to the agent failed: {type(e).__name__}: {e}")

    def stderr_tail(self, n: int = 6) -> str:
        lines = [x for x in self.err if x.strip()][-n:]
        return (" | stderr: " + " | ".join(lines)) if lines else ""


class LocalAgentLink(AgentLink):
    def __init__(self, label: str, q: queue.Queue, spec: dict, env: dict[str, str]) -> None:
        super().__init__(label, q)
        self.p = subprocess.Popen(
            [sys.executable, "-m", "webdb.writer.distributed", "agent"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
        )
        threading.Thread(target=self._pump_lines, args=(lambda: self.p.stdout.read1(1 << 16),), daemon=True).start()
        threading.Thread(target=self._pump_err, args=(lambda: self.p.stderr.read1(1 << 16),), daemon=True).start()
        self.send(spec)

    def _write(self, data: bytes) -> None:
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def exit_info(self) -> str:
        try:
            code = self.p.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def close(self, grace: float = 5.0) -> None:
        try:
            self.p.stdin.close()
        except OSError as e:  # the agent is gone already (broken pipe): wait() reaps it
            self.err.append(f"closing the agent's input failed: {e}")
        try:
            self.p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class SSHAgentLink(AgentLink):
    def __init__(self, label: str, q: queue.Queue, spec: dict, env: dict[str, str], host: HostConfig) -> None:
        super().__init__(label, q)
        self.conn = fabric_connection(host)
        python = host.python or "python3"
        assigns = [f"{k}={v}" for k, v in env.items()]
        cmd = shlex.join(["env", *assigns, python, "-m", "webdb.writer.distributed", "agent"])
        try:
            self.chan = self.conn.client.get_transport().open_session(timeout=host.connect_timeout)
            self.chan.exec_command(f"cd / && exec {cmd}")
        except _LINK_ERRORS as e:
            self.conn.close()
            raise HostUnreachable(host.name, "", f"cannot start the agent: {e}") from None
        threading.Thread(target=self._pump_lines, args=(lambda: self.chan.recv(1 << 16),), daemon=True).start()
        threading.Thread(target=self._pump_err, args=(lambda: self.chan.recv_stderr(1 << 16),), daemon=True).start()
        self.send(spec)

    def _write(self, data: bytes) -> None:
        self.chan.sendall(data)

    def exit_info(self) -> str:
        if self.chan.exit_status_ready():
            code = self.chan.recv_exit_status()
            return "connection lost" if code == -1 else f"exit status {code}"
        return "connection lost"

    def close(self, grace: float = 5.0) -> None:
        try:
            self.chan.shutdown_write()
        except _LINK_ERRORS as e:
            self.err.append(f"closing the agent's input failed: {type(e).__name__}: {e}")
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and not self.chan.exit_status_ready() and not self.chan.closed:
            time.sleep(0.05)
        self.chan.close()
        self.conn.close()
