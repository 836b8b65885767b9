"""The distributed writer: one section writer per section, on the host that holds the section,
exchanging edit files through ndfs share groups stage by stage (docs/distributed.md).

Processes of one update::

    coordinator          webdb update (webdb.writer.rack): starts agents, watches them, commits
      agent              one per location (a host over ssh, or a local path):
                         ``python -m webdb.writer.distributed agent``; holds the location's
                         writer lock, syncs + recovers its db copy, runs its section writers,
                         relays their events, writes the manifest and flips CURRENT when told
        section writer   one per section (a spawned child of the agent): ``SectionWriter``

Control messages are JSON lines on the agent's stdin/stdout (the ssh channel, or a pipe);
edits move only as ndfs files (webdb.writer.section).  This module is the agent process.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from multiprocessing import get_context
from typing import Any

from webdb import _fault
from webdb.db import WebDB, init_location
from webdb.errors import BadInput, DistributedError, WebDBError
from webdb.manifest import table_files
from webdb.sections import Sections, section_path
from webdb.tables.format import DB_IDENTITY, TMP_DIR
from webdb.writer.inputs import resolve
from webdb.writer.section import DEPLOY_DIR, Aborted, deploy_dir, error_kind, section_main

__all__ = ["DEPLOY_DIR", "HEARTBEAT", "PROTOCOL", "Agent", "StepContext", "deploy_dir", "main", "sync_location"]

# 2: the "step" request between sync and run (update(steps=...): generate in a rack), and
# the failure's exception class in "failed" events.  3: pings are numbered and answered at
# once by an "hb" with the number (the coordinator's liveness rounds).
PROTOCOL = 3
# An agent writes a line at least this often (the coordinator's liveness signal), and the
# coordinator pings agents as often.
HEARTBEAT = 1.0


# ---- the agent -----------------------------------------------------------------------------------


class Agent:
    """One location's process: lock, sync, recover, run its sections, write the manifest,
    flip CURRENT.  Reads commands from ``inp`` (bytes lines), writes events to ``out``."""

    def __init__(self, spec: dict, inp, out):
        self.spec = spec
        self.inp, self.out = inp, out
        self.label = spec["label"]
        self.path = spec["path"]
        self.hb_timeout = float(spec.get("heartbeat_timeout") or 30)
        self.q: queue.Queue = queue.Queue()
        self.out_lock = threading.Lock()
        self.last_sent = 0.0
        self.last_heard = self.last_read = time.monotonic()
        self.children: dict[int, Any] = {}
        self.conns: dict[int, Any] = {}
        self.prepared: set[int] = set()
        self.child_steps: dict[int, int] = {}  # section -> the last step its writer reported
        self.dead: tuple[int, int] | None = None  # (section, step) of a writer that died
        self.lock = None
        self.db: WebDB | None = None
        self.state = "start"
        self.manifest: dict | None = None
        self.base: dict | None = None  # the committed manifest after sync
        self.ctx: StepContext | None = None

    def send(self, **ev: Any) -> None:
        line = (json.dumps(ev, separators=(",", ":")) + "\n").encode()
        with self.out_lock:
            try:
                self.out.write(line)
                self.out.flush()
            except (OSError, ValueError):
                self.q.put(("coord", None))  # nobody listens any more
            self.last_sent = time.monotonic()

    def _read_stdin(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self.inp, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.q.put(("coord", None))
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    self.last_read = time.monotonic()
                    msg = json.loads(line)
                    if msg.get("cmd") == "ping":
                        # Answered here, not by the main thread, which may be busy (a recover,
                        # a commit, a step): the coordinator's liveness round counts answers.
                        self.send(ev="hb", n=msg.get("n", 0))
                    self.q.put(("coord", msg))

    def _read_child(self, j: int, conn) -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                self.q.put(("section", j, None))
                return
            self.q.put(("section", j, msg))

    def _heartbeat(self) -> None:
        # A thread, so that a long recover() or commit on a big db never looks like silence.
        while True:
            time.sleep(HEARTBEAT / 2)
            if time.monotonic() - self.last_sent >= HEARTBEAT:
                self.send(ev="hb")

    def run(self) -> int:
        threading.Thread(target=self._read_stdin, daemon=True, name="stdin").start()
        threading.Thread(target=self._heartbeat, daemon=True, name="heartbeat").start()
        task = self.spec["task"]
        try:
            if task == "create":
                self.send(ev="created", **create_local(self.spec))
                return 0
            if task != "update":
                raise BadInput(f"unknown agent task {task!r}")
            return self.update()
        except Aborted as e:
            self.stop_children()
            self.rollback()
            self.send(ev="aborted", reason=str(e))
            return 1
        except BaseException as e:  # noqa: BLE001 - reported to the coordinator, then exit
            self.stop_children()
            # Report before cleaning up: the cleanup makes other writers fail too, and the
            # coordinator must hear about the cause first.
            detail = "" if isinstance(e, WebDBError | OSError) else "\n" + traceback.format_exc(limit=8)
            where = {"section": self.dead[0], "step": self.dead[1]} if self.dead else {}
            self.send(
                ev="failed", state=self.state, error=f"{type(e).__name__}: {e}{detail}", kind=error_kind(e), **where
            )
            self.rollback()
            return 2
        finally:
            if self.lock is not None:
                self.lock.release()

    def rollback(self) -> None:
        """After an abort: undo this batch's files, unless a commit may have happened (then
        the next update decides from the master's CURRENT)."""
        if self.db is not None and self.lock is not None and self.state in ("synced", "running", "sections done"):
            try:
                self.db.recover()
            except (OSError, WebDBError) as e:
                # The failure was reported already; what is left here the next update's
                # recover removes (it runs before any batch).  Say so on stderr, which the
                # coordinator keeps for its error messages.
                print(f"{self.label}: cleanup after the abort failed ({e}); the next update does it", file=sys.stderr)

    def next_command(self, *want: str) -> dict:
        """Block until the coordinator sends one of ``want`` (pings keep us alive; section
        events are forwarded; any failure raises)."""
        while True:
            msg = self.poll()
            if msg is not None and msg.get("cmd") in want:
                return msg

    def poll(self, timeout: float = 0.2) -> dict | None:
        """Handle one queued item; return a coordinator command other than ping, or None."""
        now = time.monotonic()
        if now - self.last_heard > self.hb_timeout:
            raise Aborted(f"no word from the coordinator for {self.hb_timeout:g}s")
        try:
            item = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item[0] == "coord":
            msg = item[1]
            if msg is None:
                raise Aborted("the coordinator went away (connection closed)")
            self.last_heard = time.monotonic()
            if msg.get("cmd") == "abort":
                raise Aborted(msg.get("reason", "aborted by the coordinator"))
            if msg.get("cmd") == "ping":
                return None
            return msg
        _, j, msg = item
        if msg is None:
            p = self.children.get(j)
            if j in self.prepared:
                return None
            code = None
            if p is not None:
                p.join(timeout=2)
                code = p.exitcode
            why = f"killed by signal {-code}" if code is not None and code < 0 else f"exited ({code})"
            self.dead = (j, self.child_steps.get(j, 0))
            raise DistributedError(f"section {j} writer {why}")
        if msg.get("ev") == "failed":
            self.send(**msg)
            raise Aborted(f"section {j} failed")
        if msg.get("ev") == "prepared":
            self.prepared.add(j)
        if msg.get("ev") == "section" and "step" in msg:
            self.child_steps[j] = msg["step"]
        self.send(**msg)
        return None

    def update(self) -> int:
        self.db = WebDB(self.path)
        self.lock = self.db.lock().acquire()
        cur = self.db.committed()
        with open(os.path.join(self.path, DB_IDENTITY), "rb") as f:
            identity = json.loads(f.read())
        man = self.db.manifest(cur)
        self.send(
            ev="hello",
            protocol=PROTOCOL,
            version=_version(),
            hostname=socket.gethostname(),
            pid=os.getpid(),
            committed=cur,
            manifest=man,
            identity=identity,
            stale_lock=self.lock.stale,
            python=sys.executable,
            webdb=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        msg = self.next_command("sync")
        removed = self.sync(msg["gen"], msg["manifest"])
        self.state = "synced"
        self.send(ev="synced", removed=len(removed))
        self.base = msg["manifest"]
        while True:
            msg = self.next_command("run", "step")
            if msg["cmd"] == "run":
                break
            self.step(msg)
        self.state = "running"
        self.start_sections(msg["sections"])
        while len(self.prepared) < len(self.children):
            m = self.poll()
            if m is not None and m.get("cmd") == "breakpoints":
                for c in self.conns.values():
                    c.send(m)
        for p in self.children.values():
            p.join(timeout=10)
        self.state = "sections done"
        msg = self.next_command("prepare")
        self.manifest = msg["manifest"]
        _fault.point(f"dist.{self.label}.before_ready")
        # Phase 1: the new manifest is on disk everywhere before any CURRENT moves.
        self.db.write_manifest(self.manifest)
        self.state = "ready"
        self.send(ev="ready")
        self.next_command("commit")
        _fault.point(f"dist.{self.label}.before_commit")
        self.state = "committing"
        self.db.commit(self.manifest)
        self.state = "committed"
        removed = self.db.recover()
        self.send(ev="committed", generation=self.manifest["generation"], removed=len(removed))
        return 0

    def step(self, msg: dict) -> None:
        """A request of the task between sync and run (docs/distributed.md, *Tasks*): run the
        spec's ``steps`` function, relay its reply parts, then ``done``.  It runs in this thread:
        heartbeats keep flowing, and the coordinator's pings queued meanwhile count as heard."""
        if not self.spec.get("steps"):
            raise BadInput("a step request, but this update names no steps function")
        if self.ctx is None:
            scratch = os.path.join(self.path, TMP_DIR, "task")
            os.makedirs(scratch, exist_ok=True)
            self.ctx = StepContext(self.db, self.path, list(self.spec["sections"]), self.base, scratch)
        for part in resolve(self.spec["steps"])(self.ctx, msg):
            self.send(ev="reply", **part)
        self.send(ev="reply", done=True)
        self.last_heard = max(self.last_heard, self.last_read)

    def sync(self, gen: int, manifest: dict) -> list[str]:
        return sync_location(self.db, self.path, self.spec["sections"], gen, manifest)

    def start_sections(self, specs: list[dict]) -> None:
        # fork: the agent is small and forking costs ~10 ms, spawning ~1 s on a busy 2-core host
        # (a section re-imports everything).  The agent's threads only read pipes.
        ctx = get_context("fork")
        for spec in specs:
            j = spec["section"]
            parent, child = ctx.Pipe()
            p = ctx.Process(target=section_main, args=(spec, child), name=f"webdb-section-{j}", daemon=False)
            p.start()
            child.close()
            self.children[j], self.conns[j] = p, parent
            self.send(ev="started", section=j, pid=p.pid)
            threading.Thread(target=self._read_child, args=(j, parent), daemon=True, name=f"section-{j}").start()

    def stop_children(self) -> None:
        for p in self.children.values():
            if p.is_alive():
                p.kill()
        for p in self.children.values():
            p.join(timeout=5)


class StepContext:
    """What a task's steps function sees on an agent: the location's db copy (synced, locked),
    its sections, the rack's committed manifest, a scratch directory under ``tmp/`` (removed
    by the commit's or the abort's recover) and ``state`` kept across requests."""

    def __init__(self, db: WebDB, path: str, sections: list[int], manifest: dict, scratch: str) -> None:
        self.db, self.path, self.sections, self.manifest, self.scratch = db, path, sections, manifest, scratch
        self.state: dict[str, Any] = {}


def sync_location(db: WebDB, path: str, sections: list[int], gen: int, manifest: dict) -> list[str]:
    """Bring a location's copy to the rack's committed generation ``gen`` (roll forward if a
    commit never reached it), then recover: remove whatever an interrupted batch left.  Checks
    that the tables of ``sections`` (those living here) named by ``manifest`` are present.
    Every transport's agent runs it, with the location's writer lock held."""
    cur = db.committed()
    if cur > gen:
        raise WebDBError(f"{path}: CURRENT is generation {cur}, newer than the rack's {gen}")
    if cur < gen:
        db.commit(manifest)
    removed = db.recover()
    for j in sections:
        d = section_path(path, j)
        os.makedirs(d, exist_ok=True)
        for t, e in manifest["tables"][j].items():
            for f, _ in table_files(e):
                if not os.path.exists(os.path.join(d, f)):
                    raise WebDBError(f"{d}: {t} file {f} of generation {gen} is missing (section {j} must live here)")
    return removed


def create_local(spec: dict) -> dict:
    """Create this location's copy of a rack db (``init_location``: identity, generation 0, the
    directories of its sections).

    Idempotent: a copy with the same name and k that never committed a batch is re-created."""
    path = spec["path"]
    if os.path.exists(os.path.join(path, DB_IDENTITY)):
        try:
            db = WebDB(path)
            empty = db.committed() == 0 and db.manifest()["sections"]["k"] == spec["k"]
            same = db.identity.get("name") == spec["identity"]["name"]
        except WebDBError as e:
            raise BadInput(f"{path}: a database already exists there and cannot be read ({e})") from None
        if not (empty and same):
            raise BadInput(f"{path}: a database already exists there (remove it or pick another name)")
    init_location(path, spec["identity"], spec["sections"], Sections(spec["k"]))
    return {"path": path, "sections": spec["sections"]}


def _version() -> str:
    from webdb import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    """``python -m webdb.writer.distributed agent``: the first stdin line is the agent's spec."""
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["agent"]:
        print("usage: python -m webdb.writer.distributed agent  (started by webdb update)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            return 3
        line += chunk
    spec = json.loads(line)
    return Agent(spec, 0, sys.stdout.buffer).run()


if __name__ == "__main__":
    sys.exit(main())
