"""The coordinator of a distributed update (docs/distributed.md): where sections live, agents
started locally or over ssh (fabric), liveness, the two-phase commit, per-host results.

    rack = Rack.from_file("hosts.ini", "crawl")          # or Rack.local("/data/crawl")
    res = update(rack, {0: {"paths": [...]}, 1: {...}})  # raises UpdateFailed, .result per host
    print(res.summary())

One agent runs at every location that holds a section or a master copy: over ssh for a
``[host:*]``, as a local process for a path.  Every location keeps ``<root>/<db>/webdb.json``,
``CURRENT`` and ``gen/``; the master locations (``[group:master]``, else section 0's) flip
CURRENT first, and that flip is the commit point.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webdb import _fault
from webdb.db import WebDB, empty_manifest
from webdb.errors import BadInput, DistributedError, WebDBError
from webdb.ndfs import GroupResult, HostConfig, HostResult, Location, NdfsConfig, load_config, parse_config
from webdb.ndfs.errors import ConfigError, HostKeyRejected, HostUnreachable
from webdb.sections import Sections
from webdb.settings import resolve
from webdb.tables.format import DB_FORMAT_VERSION
from webdb.writer.distributed import HEARTBEAT, PROTOCOL
from webdb.writer.inputs import DEFAULT_INPUT
from webdb.writer.writer import check_counts

__all__ = [
    "Placement",
    "Rack",
    "Session",
    "UpdateFailed",
    "UpdateResult",
    "create_rack",
    "fabric_connection",
    "update",
]

# Defaults of the liveness bounds (seconds); both are options of update().
HEARTBEAT_TIMEOUT = 30.0
STAGE_TIMEOUT = 3600.0


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

    def __init__(self, config: NdfsConfig, db: str | None, ini: str, base_dir: str) -> None:
        self.config = config
        self.db = db or config.db
        if not self.db:
            raise ConfigError(f"{config.source}: no db name given and no [ndfs] db")
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
        root, name = os.path.dirname(path), os.path.basename(path)
        span = "0" if k == 1 else f"0-{k - 1}"
        text = f"[ndfs]\ndb = {name}\n\n[sections]\ncount = {k}\n{span} = {root}\n"
        return cls(parse_config(text, source=f"<local {path}>"), name, text, root)

    def path(self, label: str) -> str:
        """The db directory at a location: ``<root>/<db>``."""
        return os.path.join(self.places[label].root, self.db)


def fabric_connection(host: HostConfig):  # -> fabric.Connection
    """A fabric Connection that reads no ssh config and checks the host key against the host's
    known_hosts only (RejectPolicy; fabric's default would add unknown keys)."""
    import fabric
    import paramiko

    known = str(host.known_hosts_path())
    config = fabric.Config(overrides={"load_ssh_configs": False})
    kw: dict[str, Any] = {
        "allow_agent": host.key_file is None,
        "look_for_keys": host.key_file is None,
        "banner_timeout": host.connect_timeout,
        "auth_timeout": host.connect_timeout,
    }
    if host.key_file:
        kw["key_filename"] = str(host.key_file)
    conn = fabric.Connection(
        host.address,
        user=host.user,
        port=host.port,
        config=config,
        connect_kwargs=kw,
        connect_timeout=host.connect_timeout,
    )
    client = paramiko.SSHClient()
    try:
        client.load_host_keys(known)
    except FileNotFoundError:
        raise HostKeyRejected(
            host.name, "", f"known_hosts file {known} does not exist; cannot verify the host key"
        ) from None
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    conn.client = client
    return conn


def open_connection(host: HostConfig):
    """``fabric_connection`` opened; connection problems become HostUnreachable/HostKeyRejected."""
    import paramiko

    conn = fabric_connection(host)
    try:
        conn.open()
    except paramiko.BadHostKeyException as e:
        known = host.known_hosts_path()
        entry = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        raise HostKeyRejected(
            host.name,
            "",
            f"host key of {host.address}:{host.port} changed: the server offers {e.key.get_name()} "
            f"{e.key.fingerprint}, {known} has {e.expected_key.get_name()} {e.expected_key.fingerprint}; "
            f"refusing to connect (a changed key can be an attack). If the host was legitimately "
            f"reinstalled, check the new fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), "
            f"then: ssh-keygen -f {known} -R '{entry}' && ssh-keyscan -p {host.port} {host.address} >> {known}",
        ) from None
    except paramiko.SSHException as e:
        if "not found in known_hosts" in str(e):
            raise HostKeyRejected(
                host.name,
                "",
                f"host key of {host.address}:{host.port} is not in {host.known_hosts_path()}; refusing to connect",
            ) from None
        raise HostUnreachable(host.name, "", f"ssh to {host.address}:{host.port}: {e}") from None
    except (OSError, EOFError) as e:
        why = str(e) or type(e).__name__
        if "Unable to connect" in why or "refused" in why.lower():
            why = "connection refused"
        raise HostUnreachable(host.name, "", f"cannot connect to {host.address}:{host.port}: {why}") from None
    return conn


# ---- agent links: a started agent, local process or ssh channel ----------------------------------


class _Link:
    """One running agent: JSON lines in, JSON lines out (queued as (label, obj); None at EOF)."""

    def __init__(self, label: str, q: queue.Queue) -> None:
        self.label, self.q = label, q
        self.err: collections.deque[str] = collections.deque(maxlen=40)
        self.last_seen = time.monotonic()
        self.done = False  # finished or failed: no more liveness checks
        self.dead = False  # gone or silent: close without waiting for it
        self.lock = threading.Lock()

    def _pump_lines(self, read: Callable[[], bytes]) -> None:
        buf = b""
        while True:
            try:
                chunk = read()
            except Exception:  # noqa: BLE001 - a broken connection is EOF
                chunk = b""
            if not chunk:
                self.q.put((self.label, None))
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    self.q.put((self.label, json.loads(line)))
                except ValueError:
                    self.err.append(line.decode("utf-8", "replace"))

    def _pump_err(self, read: Callable[[], bytes]) -> None:
        buf = b""
        while True:
            try:
                chunk = read()
            except Exception:  # noqa: BLE001
                return
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            self.err.extend(x.decode("utf-8", "replace") for x in lines if x.strip())

    def send(self, obj: dict) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        with self.lock:
            try:
                self._write(data)
            except Exception:  # noqa: BLE001 - the reader reports the EOF
                pass

    def stderr_tail(self, n: int = 6) -> str:
        lines = [x for x in self.err if x.strip()][-n:]
        return (" | stderr: " + " | ".join(lines)) if lines else ""


class _LocalLink(_Link):
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
        except OSError:
            pass
        try:
            self.p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class _SSHLink(_Link):
    def __init__(self, label: str, q: queue.Queue, spec: dict, env: dict[str, str], host: HostConfig) -> None:
        super().__init__(label, q)
        self.conn = open_connection(host)
        python = host.python or "python3"
        assigns = [f"{k}={v}" for k, v in env.items()]
        cmd = shlex.join(["env", *assigns, python, "-m", "webdb.writer.distributed", "agent"])
        try:
            self.chan = self.conn.client.get_transport().open_session(timeout=host.connect_timeout)
            self.chan.exec_command(f"cd / && exec {cmd}")
        except Exception as e:  # noqa: BLE001 - paramiko raises several kinds
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
        except Exception:  # noqa: BLE001
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and not self.chan.exit_status_ready() and not self.chan.closed:
            time.sleep(0.05)
        self.chan.close()
        self.conn.close()


# ---- results ---------------------------------------------------------------------------------------


class UpdateFailed(DistributedError):
    """The update stopped and committed nothing (unless ``result.committed``); ``result`` has
    every host's outcome."""

    def __init__(self, message: str, result: UpdateResult) -> None:
        super().__init__(message)
        self.result = result

    @property
    def kind(self) -> str | None:
        """Exception class of the first failure as the failing host named it (``BadInput``,
        ``LockedError``, ...), or None (a host went silent or its connection broke)."""
        return self.result.kind


@dataclass
class UpdateResult:
    """What an update did, per host (a GroupResult like ndfs'), per step, and overall."""

    db: str
    hosts: GroupResult
    generation: int | None = None
    batch: str | None = None
    committed: bool = False
    seconds: float = 0.0
    shipped: list[dict] = field(default_factory=list)
    manifest: dict | None = None
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    kind: str | None = None  # exception class of the first failure (see UpdateFailed.kind)

    def summary(self) -> str:
        """A per-host table: result, sections, seconds, records written, bytes shipped."""
        rows = [("host", "sections", "result", "seconds", "records", "shipped", "to other hosts")]
        for label, r in self.hosts.items():
            v = r.value or {}
            state = "ok" if r.ok else ("aborted" if v.get("aborted") else f"FAILED: {r.reason}")
            rows.append(
                (
                    label,
                    ",".join(map(str, v.get("sections", []))) or "-",
                    state,
                    f"{r.seconds:.1f}",
                    f"{v.get('records', 0):,}",
                    _mb(r.bytes),
                    _mb(v.get("remote_bytes", 0)),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(7)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        head = (
            f"generation {self.generation} committed in {self.seconds:.1f}s"
            if self.committed
            else f"NOT committed: {self.error}"
        )
        steps = ", ".join(f"step {s['step']}: {_mb(s['bytes'])}" for s in self.shipped)
        return "\n".join(
            [
                head,
                *lines,
                *([f"edits shipped per step: {steps}"] if steps else []),
                *[f"warning: {w}" for w in self.warnings],
            ]
        )


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} B"


@dataclass
class _Host:
    place: Placement
    link: _Link | None = None
    t0: float = 0.0
    t1: float | None = None
    state: str = "start"
    steps: dict[int, int] = field(default_factory=dict)  # section -> step it is at
    failed_section: int | None = None  # the section whose writer failed, if the agent said
    records: int = 0
    bytes: int = 0
    remote_bytes: int = 0
    error: str | None = None
    events: set[str] = field(default_factory=set)
    hello: dict = field(default_factory=dict)

    def where(self) -> str:
        if self.state in ("prepare", "commit"):
            return "commit" if self.state == "commit" else "commit (prepare)"  # not "stage 5": all stages ran
        if self.failed_section is not None and self.failed_section in self.steps:
            st = self.steps[self.failed_section]
            return f"stage {st}" if st else "step 0 (input and routing)"
        if self.steps:
            lo = min(self.steps.values())
            return f"stage {lo}" if lo else "step 0 (input and routing)"
        return self.state


class _Abort(Exception):
    """Unwinds the coordinator to its abort path, carrying ``_Run.error`` (the first failure)."""


class _Run:
    """One coordinated action over every placement of a rack (update or create)."""

    def __init__(
        self,
        rack: Rack,
        *,
        heartbeat_timeout: float,
        progress: Callable[[dict], None] | None,
        env: dict[str, str] | None,
    ) -> None:
        self.rack = rack
        self.hb_timeout = heartbeat_timeout
        self.progress = progress
        self.env = dict(env or {})
        if os.environ.get("WEBDB_FAULTS") and "WEBDB_FAULTS" not in self.env:
            self.env["WEBDB_FAULTS"] = os.environ["WEBDB_FAULTS"]  # fault injection reaches every agent
        self.q: queue.Queue = queue.Queue()
        self.hosts = {label: _Host(p) for label, p in rack.places.items()}
        self.t0 = time.monotonic()
        self.last_ping = 0.0
        self.error: str | None = None
        self.kind: str | None = None

    # -- agents --------------------------------------------------------------------------------

    def start(self, spec_for: Callable[[Placement], dict]) -> None:
        """Start every agent (connections in parallel); the first failure stops all."""
        errors: dict[str, str] = {}

        def one(h: _Host) -> None:
            h.t0 = time.monotonic()
            spec = {
                "label": h.place.label,
                "root": h.place.root,
                "path": self.rack.path(h.place.label),
                "sections": h.place.sections,
                "heartbeat_timeout": self.hb_timeout,
                **spec_for(h.place),
            }
            try:
                if h.place.location.host is None:
                    h.link = _LocalLink(h.place.label, self.q, spec, self.env)
                else:
                    h.link = _SSHLink(h.place.label, self.q, spec, self.env, h.place.location.host)
            except (WebDBError, OSError) as e:
                errors[h.place.label] = str(e)

        threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in self.hosts.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            for label, e in errors.items():
                self.hosts[label].error = e
            first = next(iter(errors))
            raise self.fail(first, f"cannot start: {errors[first]}")

    def fail(self, label: str, why: str, kind: str | None = None) -> _Abort:
        if self.error is None:
            self.kind = kind
        h = self.hosts[label]
        if h.error is None or why not in h.error:
            h.error = why if h.error is None else h.error
        h.t1 = h.t1 or time.monotonic()
        secs = f" (section{'s' if len(h.place.sections) > 1 else ''} "
        secs += ",".join(map(str, h.place.sections)) + ")" if h.place.sections else ""
        self.error = self.error or f"{label}{secs if h.place.sections else ''} failed at {h.where()}: {h.error}"
        return _Abort(self.error)

    def pump(self, until: Callable[[], bool], on_event: Callable[[str, dict], None]) -> None:
        """Handle agent events until ``until()``; raise _Abort on any failure or silence."""
        while not until():
            now = time.monotonic()
            if now - self.last_ping >= HEARTBEAT:
                self.last_ping = now
                for h in self.hosts.values():
                    if h.link is not None and not h.link.done:
                        h.link.send({"cmd": "ping"})
            try:
                label, obj = self.q.get(timeout=0.1)
            except queue.Empty:
                label = None
            now = time.monotonic()
            if label is not None:
                h = self.hosts[label]
                h.link.last_seen = now
                if obj is None:
                    h.link.dead = True
                    if h.link.done:
                        continue
                    h.link.done = True
                    raise self.fail(label, f"connection lost: agent {h.link.exit_info()}{h.link.stderr_tail()}")
                ev = obj.get("ev")
                if ev == "failed":
                    h.link.done = True
                    if "section" in obj:
                        h.steps[obj["section"]] = obj.get("step", 0)
                        h.failed_section = obj["section"]
                        why = f"section {obj['section']}: {obj['error']}"
                    else:
                        why = obj["error"]
                    raise self.fail(label, why, obj.get("kind"))
                if ev == "aborted":
                    h.link.done = True
                    raise self.fail(label, f"aborted: {obj.get('reason')}")
                if ev != "hb":
                    self.track(h, obj)
                    on_event(label, obj)
                    if self.progress is not None:
                        self.progress({"host": label, **obj})
            for lab, h in self.hosts.items():
                if h.link is not None and not h.link.done and now - h.link.last_seen > self.hb_timeout:
                    h.link.done = h.link.dead = True
                    raise self.fail(lab, f"no heartbeat for {self.hb_timeout:g}s (host down or hung)")

    def track(self, h: _Host, obj: dict) -> None:
        ev = obj.get("ev")
        h.events.add(ev)
        if ev == "hello":
            h.hello = {k: obj[k] for k in ("version", "hostname", "python", "webdb", "pid") if k in obj}
        if ev == "section":
            h.steps[obj["section"]] = obj["step"]
            if obj.get("state") == "merged":
                h.records += obj.get("records", 0)
            elif obj.get("state") == "shipped":
                h.bytes += obj.get("bytes", 0)
                h.remote_bytes += obj.get("remote_bytes", 0)

    def abort(self, reason: str | None = None) -> None:
        """Tell every live agent to stop; give them a moment to clean up, then cut them off."""
        grace = min(10.0, max(2.0, self.hb_timeout))
        live = [h for h in self.hosts.values() if h.link is not None and not h.link.done]
        for h in live:
            h.link.send({"cmd": "abort", "reason": reason or self.error or "aborted"})
        deadline = time.monotonic() + grace
        waiting = {h.place.label for h in live}
        while waiting and time.monotonic() < deadline:
            try:
                label, obj = self.q.get(timeout=0.1)
            except queue.Empty:
                continue
            if obj is None or obj.get("ev") in ("aborted", "failed", "committed"):
                waiting.discard(label)
        self.close()

    def close(self) -> None:
        threads = [
            threading.Thread(target=h.link.close, args=(0.0 if h.link.dead else 5.0,), daemon=True)
            for h in self.hosts.values()
            if h.link
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=15)

    def results(self, what: str) -> GroupResult:
        out = GroupResult(what)
        for label, h in self.hosts.items():
            end = h.t1 or time.monotonic()
            v = {
                "sections": h.place.sections,
                "records": h.records,
                "remote_bytes": h.remote_bytes,
                "master": h.place.master,
                "at": h.where(),
                **h.hello,
            }
            err = DistributedError(h.error) if h.error else None
            if err is None and self.error is not None and h.state != "committed":
                v["aborted"] = True  # it did not fail: another host did, and this one was stopped
                err = DistributedError(f"aborted at {h.where()}: {self.error}")
            out[label] = HostResult(label, err is None, v, err, h.bytes, end - (h.t0 or self.t0))
        return out


# ---- update ----------------------------------------------------------------------------------------


class Session:
    """What a task run inside an update (``update(..., steps=, before_batch=)``) sees between
    the sync and the batch: the rack's committed generation and its manifest, with every
    location's writer lock held, and a request/reply exchange with the agents.

    On an agent a request runs ``steps`` (``"module:function"``): ``fn(ctx, request)`` yields
    reply parts (dicts; keep each under a few MB, a part is one JSON line on the link).
    ``ctx`` has the agent's ``db``, ``path``, ``sections``, the committed ``manifest``, a
    ``scratch`` directory (removed with the batch's other files) and a ``state`` dict kept
    from one request to the next.
    """

    def __init__(self, run: _Run, generation: int, manifest: dict) -> None:
        self._run = run
        self.rack = run.rack
        self.generation, self.manifest = generation, manifest

    def ask(self, request_for: Callable[[Placement], dict | None]) -> dict[str, list[dict]]:
        """Send ``request_for(place)`` to every location (None: not that one) and wait for all
        replies; returns each location's reply parts in order.  Raises on any failure."""
        run = self._run
        parts: dict[str, list[dict]] = {}
        waiting: set[str] = set()
        for label, h in run.hosts.items():
            req = request_for(h.place)
            if req is None:
                continue
            parts[label] = []
            waiting.add(label)
            h.state = str(req.get("op", "step"))
            h.link.send({"cmd": "step", **req})

        def on(label: str, o: dict) -> None:
            if o["ev"] != "reply":
                return
            if o.get("done"):
                waiting.discard(label)
            else:
                parts[label].append({k: v for k, v in o.items() if k != "ev"})

        run.pump(lambda: not waiting, on)
        return parts


def update(
    rack: Rack,
    inputs: dict[int, dict] | None = None,
    *,
    input_fn: str = DEFAULT_INPUT,
    options: dict | None = None,
    settings: dict | None = None,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    stage_timeout: float = STAGE_TIMEOUT,
    progress: Callable[[dict], None] | None = None,
    env: dict[str, str] | None = None,
    steps: str | None = None,
    before_batch: Callable[[Session], tuple[dict[int, dict], str] | None] | None = None,
) -> UpdateResult:
    """Run one batch on every section of ``rack`` and commit it atomically.

    ``inputs[j] = {"paths": [...], "options": {...}}``: what section j's writer applies, through
    ``input_fn`` (``"module:function"``, see webdb.writer.inputs), on its own host.
    ``options`` are passed to every section's input.  Raises UpdateFailed (naming host and
    stage) if anything fails; then nothing is committed and every host keeps its old generation.

    A task that must read the db before deciding its input (generate) passes ``before_batch``:
    called once every location is locked and synced, with a ``Session`` whose requests run
    ``steps`` on the agents; it returns ``(inputs, input_fn)`` for the batch, or None to stop
    without a batch (the agents unlock, nothing is committed, ``committed`` is False).
    Cost: see docs/distributed.md, *Cost*.
    """
    run = _Run(rack, heartbeat_timeout=heartbeat_timeout, progress=progress, env=env)
    res = UpdateResult(rack.db, GroupResult(f"update {rack.db}"))
    try:
        gen0, base, identity = _open(run, steps)
        if before_batch is not None:
            got = before_batch(Session(run, gen0, base))
            if got is None:
                run.abort("nothing to do")
                res.hosts = run.results(f"update {rack.db}")
                res.seconds = time.monotonic() - run.t0
                return res
            inputs, input_fn = got
        _batch(run, res, gen0, base, identity, inputs or {}, input_fn, options or {}, settings or {}, stage_timeout)
    except _Abort:
        run.abort()
        res.hosts = run.results(f"update {rack.db}")
        res.error, res.kind = run.error, run.kind
        res.seconds = time.monotonic() - run.t0
        if res.committed:
            res.warnings.append(run.error)
            return res
        raise UpdateFailed(f"update of {rack.db} stopped, nothing committed: {run.error}", res) from None
    except BaseException:
        run.abort()
        raise
    run.close()
    res.hosts = run.results(f"update {rack.db}")
    res.seconds = time.monotonic() - run.t0
    return res


def _open(run: _Run, steps: str | None) -> tuple[int, dict, dict]:
    """Start the agents (each takes its writer lock), check they agree, sync every location to
    the rack's committed generation.  Returns (generation, its manifest, the db identity)."""
    rack = run.rack
    run.start(lambda p: {"task": "update", "db": rack.db, **({"steps": steps} if steps else {})})
    hello: dict[str, dict] = {}
    run.pump(lambda: len(hello) == len(run.hosts), lambda lab, o: hello.update({lab: o}) if o["ev"] == "hello" else 0)
    for label, h in hello.items():
        if h["protocol"] != PROTOCOL:
            raise run.fail(
                label,
                f"runs webdb {h['version']} (protocol {h['protocol']}), this is protocol "
                f"{PROTOCOL}: deploy the same version everywhere (fab deploy)",
            )
    first = hello[next(iter(hello))]
    for label, h in hello.items():
        if (h["identity"].get("name"), h["identity"].get("created")) != (
            first["identity"].get("name"),
            first["identity"].get("created"),
        ):
            raise run.fail(label, f"its {rack.db} is a different database (created {h['identity'].get('created')})")
    # The rack's committed generation: the newest CURRENT anywhere (a location only flips after
    # the master did, so a newer CURRENT means that commit happened).
    gen0 = max(h["committed"] for h in hello.values())
    base = next(h["manifest"] for h in hello.values() if h["committed"] == gen0)
    secs = Sections.from_json(base["sections"])
    if secs.k != rack.k:
        raise run.fail(next(iter(hello)), f"the db has {secs.k} sections, {rack.config.source} says {rack.k}")
    for h in run.hosts.values():
        h.link.send({"cmd": "sync", "gen": gen0, "manifest": base})
        h.state = "sync"
    synced: set[str] = set()
    run.pump(lambda: len(synced) == len(run.hosts), lambda lab, o: synced.add(lab) if o["ev"] == "synced" else 0)
    return gen0, base, first["identity"]


def _batch(
    run: _Run,
    res: UpdateResult,
    gen0: int,
    base: dict,
    identity: dict,
    inputs: dict,
    input_fn: str,
    options: dict,
    overrides: dict,
    stage_timeout: float,
) -> None:
    rack = run.rack
    settings = resolve(identity.get("settings"), **overrides)
    gen = gen0 + 1
    batch = f"{gen:08d}-{os.urandom(4).hex()}"
    res.generation, res.batch = gen, batch
    for label, h in run.hosts.items():
        p = h.place
        n = max(1, len(p.sections))
        local = dict(settings, memory_mb=max(64, int(settings["memory_mb"]) // n))
        specs = [
            {
                "section": j,
                "k": rack.k,
                "host": label,
                "db": rack.db,
                "path": rack.path(label),
                "root": p.root,
                "local_host": p.location.host.name if p.location.host else None,
                "ini": rack.ini,
                "ini_source": rack.config.source,
                "base_dir": rack.base_dir,
                "batch": batch,
                "gen": gen,
                "sections": base["sections"],
                "settings": local,
                "base": {"tables": base["tables"], "status": base["status"]},
                "input": {
                    "fn": input_fn,
                    "paths": list((inputs.get(j) or {}).get("paths") or []),
                    "options": {**options, **((inputs.get(j) or {}).get("options") or {})},
                },
                "stage_timeout": stage_timeout,
            }
            for j in p.sections
        ]
        h.state = "running"
        h.link.send({"cmd": "run", "sections": specs})

    samples: dict[int, list[str]] = {}
    prepared: dict[int, dict] = {}
    chosen: list[str] | None = None

    def on_run(label: str, o: dict) -> None:
        nonlocal chosen
        if o["ev"] == "sample":
            samples[o["section"]] = o["urls"]
            if len(samples) == rack.k:
                urls = [u.encode("utf-8") for s in samples.values() for u in s]
                chosen = [b.decode("utf-8") for b in Sections.choose(urls, rack.k)]
                for h in run.hosts.values():
                    if h.place.sections:
                        h.link.send({"cmd": "breakpoints", "breakpoints": chosen})
        elif o["ev"] == "prepared":
            prepared[o["section"]] = o["result"]
            if set(run.hosts[label].place.sections) <= set(prepared):
                run.hosts[label].state = "prepared"

    run.pump(lambda: len(prepared) == rack.k, on_run)

    manifest = _manifest(rack, base, gen, batch, prepared)
    check_counts(manifest)
    res.manifest = manifest
    res.shipped = manifest["distributed"]["shipped"]
    for h in run.hosts.values():
        h.state = "prepare"
        h.link.send({"cmd": "prepare", "manifest": manifest})
    ready: set[str] = set()
    run.pump(lambda: len(ready) == len(run.hosts), lambda lab, o: ready.add(lab) if o["ev"] == "ready" else 0)

    # Phase 2: the masters flip CURRENT first; the first master's flip is the commit point.
    committed: set[str] = set()

    def on_commit(label: str, o: dict) -> None:
        if o["ev"] == "committed":
            committed.add(label)
            run.hosts[label].t1 = time.monotonic()
            run.hosts[label].state = "committed"
            run.hosts[label].link.done = True

    masters = [label for label, h in run.hosts.items() if h.place.master]
    _fault.point("dist.coordinator.before_commit")
    for label in masters:
        run.hosts[label].state = "commit"
        run.hosts[label].link.send({"cmd": "commit"})
        run.pump(lambda label=label: label in committed, on_commit)
        res.committed = True
    _fault.point("dist.coordinator.after_master_commit")
    others = [label for label in run.hosts if label not in committed]
    for label in others:
        run.hosts[label].state = "commit"
        run.hosts[label].link.send({"cmd": "commit"})
    while len(committed) < len(run.hosts):
        try:
            run.pump(lambda: len(committed) == len(run.hosts), on_commit)
        except _Abort:
            # Committed already: a location that missed the flip is brought forward by the next
            # update (its sync step); until then its readers see the previous generation.
            bad = [lab for lab in run.hosts if lab not in committed and run.hosts[lab].error]
            for lab in bad:
                res.warnings.append(
                    f"{lab} did not confirm the commit ({run.hosts[lab].error}); the next update brings it forward"
                )
                committed.add(lab)


def _manifest(rack: Rack, base: dict, gen: int, batch: str, prepared: dict[int, dict]) -> dict:
    k = rack.k
    secs = prepared[0]["sections"]
    stages = []
    for s in range(1, 6):
        rows = [
            {x: v for x, v in st.items() if x != "stage"}
            for j in range(k)
            for st in prepared[j]["stages"]
            if st["stage"] == s
        ]
        stages.append({"stage": s, "sections": rows})
    shipped = []
    for step in range(0, 5):
        rows = [x for j in range(k) for x in prepared[j]["shipped"] if x["step"] == step]
        shipped.append(
            {
                "step": step,
                "files": sum(r["files"] for r in rows),
                "bytes": sum(r["bytes"] for r in rows),
                "remote_bytes": sum(r["remote_bytes"] for r in rows),
                "seconds": max((r["seconds"] for r in rows), default=0.0),
            }
        )
    return {
        "generation": gen,
        "parent": base["generation"],
        "batch": batch,
        "committed": time.time(),
        "sections": secs,
        "tables": [prepared[j]["tables"] for j in range(k)],
        "status": [prepared[j]["status"] for j in range(k)],
        "edits": {
            "pages": sum(prepared[j]["api"]["pages"] for j in range(k)),
            "links": sum(prepared[j]["api"]["links"] for j in range(k)),
        },
        "stages": stages,
        "distributed": {
            "hosts": {lab: p.sections for lab, p in rack.places.items()},
            "shipped": shipped,
            "input": {str(j): prepared[j]["input"] for j in range(k)},
            "section_seconds": [prepared[j]["seconds"] for j in range(k)],
            "section_cpu_seconds": [prepared[j]["cpu_seconds"] for j in range(k)],
            "step0": [prepared[j]["step0"] for j in range(k)],
        },
    }


# ---- create ----------------------------------------------------------------------------------------


def create_rack(
    rack: Rack, *, heartbeat_timeout: float = HEARTBEAT_TIMEOUT, env: dict[str, str] | None = None, **settings: Any
) -> GroupResult:
    """Create an empty k-section db on every location of ``rack`` (k = hosts.ini's count):
    identity, generation 0 and CURRENT everywhere, section j's directory where it lives.

    Returns per-host results; raises UpdateFailed if a location failed (rerunning is safe)."""
    resolve(None, **settings)  # unknown or bad settings fail here, before any host is touched
    stored = {k: v for k, v in settings.items() if v is not None}
    ident = {"format": DB_FORMAT_VERSION, "name": rack.db, "created": time.time(), "settings": stored}
    manifest = empty_manifest(Sections(rack.k))
    run = _Run(rack, heartbeat_timeout=heartbeat_timeout, progress=None, env=env)
    created: set[str] = set()

    def on(label: str, o: dict) -> None:
        if o["ev"] == "created":
            created.add(label)
            run.hosts[label].t1 = time.monotonic()
            run.hosts[label].link.done = True

    try:
        run.start(lambda p: {"task": "create", "identity": ident, "manifest": manifest, "k": rack.k})
        for h in run.hosts.values():
            h.state = "create"
        run.pump(lambda: len(created) == len(run.hosts), on)
    except _Abort:
        run.abort()
        res = UpdateResult(rack.db, run.results(f"create {rack.db}"), error=run.error)
        raise UpdateFailed(f"create {rack.db}: {run.error}", res) from None
    run.close()
    return run.results(f"create {rack.db}")


def parse_inputs(rack: Rack, args: list[str], shares: bool = False) -> dict[int, dict]:
    """Map input paths to sections.  ``HOST:PATH`` goes to that host's sections; a bare PATH to
    every location's sections (each location reads its own copy).  The m sections of a location
    split its paths between them: with ``shares`` (an input function that takes ``share``)
    each gets all of them and ``share=[i, m]``, else contiguous runs of whole paths — either way
    in order, so the batch is the one a single writer would make (docs/distributed.md, *Order of
    calls*).  Relative paths are relative to ``<root>/<db>`` there."""
    per_place: dict[str, list[str]] = {label: [] for label in rack.places}
    for a in args:
        host, sep, path = a.partition(":")
        if sep and host in rack.places and not a.startswith("/"):
            per_place[host].append(path)
        elif sep and host and "/" not in host and host not in rack.places:
            raise BadInput(f"input {a!r}: {host!r} is not a location of the rack ({', '.join(rack.places)})")
        else:
            for lst in per_place.values():
                lst.append(a)
    out: dict[int, dict] = {}
    for label, paths in per_place.items():
        secs = rack.places[label].sections
        if not secs:
            continue
        base = rack.path(label)
        full = [p if os.path.isabs(p) else os.path.join(base, p) for p in paths]
        m = len(secs)
        for i, j in enumerate(secs):
            if shares and m > 1:
                out[j] = {"paths": full, "options": {"share": [i, m]}}
            else:
                out[j] = {"paths": full[len(full) * i // m : len(full) * (i + 1) // m]}
    return out
