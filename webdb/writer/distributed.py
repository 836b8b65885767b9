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
import sys
import threading
import time
import traceback
from multiprocessing import get_context
from typing import Any

from webdb.core.manifest import Manifest
from webdb.errors import BadInput, DistributedError, WebDBError
from webdb.writer.location import Location, create_local
from webdb.writer.section import DEPLOY_DIR, Aborted, deploy_dir, error_kind, section_main, unreachable_peers
from webdb.writer.spec import SectionSpec

__all__ = ["DEPLOY_DIR", "HEARTBEAT", "Agent", "deploy_dir", "main"]

# An agent writes a line at least this often (the coordinator's liveness signal), and the
# coordinator pings agents as often.
HEARTBEAT = 1.0


class _Reported(Exception):
    """A section writer's failure, forwarded to the coordinator as it came."""


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
        self.loc: Location | None = None  # once its lock is taken

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
        except _Reported as e:
            self.stop_children()
            self.await_abort()
            self.rollback()
            self.send(ev="aborted", reason=str(e))
            return 1
        except Aborted as e:
            self.stop_children()
            self.rollback()
            self.send(ev="aborted", reason=str(e))
            return 1
        except BaseException as e:  # noqa: BLE001 - reported to the coordinator, then exit
            self.stop_children()
            detail = "" if isinstance(e, WebDBError | OSError) else "\n" + traceback.format_exc(limit=8)
            where = {"section": self.dead[0], "step": self.dead[1]} if self.dead else {}
            self.send(
                ev="failed",
                state=self.loc.state if self.loc else "start",
                error=f"{type(e).__name__}: {e}{detail}",
                kind=error_kind(e),
                unreachable=unreachable_peers(e),
                **where,
            )
            self.await_abort()
            self.rollback()
            return 2
        finally:
            if self.loc is not None:
                self.loc.release()

    def rollback(self) -> None:
        if self.loc is not None:
            self.loc.rollback()

    def await_abort(self) -> None:
        """After reporting a failure, and before cleaning up: wait for the coordinator's abort
        (or its going away, or ``hb_timeout``).  The cleanup removes this batch's share-group
        files, which makes the other locations' writers fail too; sent first is not heard
        first (each location has its own connection), so the cause must be heard before any
        consequence can exist."""
        deadline = time.monotonic() + self.hb_timeout
        while time.monotonic() < deadline:
            try:
                self.poll()
            except Aborted:
                return
            except WebDBError:
                continue  # another section writer of this location ending: it was stopped

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
            raise _Reported(f"section {j} failed")
        if msg.get("ev") == "prepared":
            self.prepared.add(j)
        if msg.get("ev") == "section" and "step" in msg:
            self.child_steps[j] = msg["step"]
        self.send(**msg)
        return None

    def update(self) -> int:
        """The location's part of one update, command by command (docs/distributed.md,
        *Control messages*)."""
        self.loc = loc = Location(self.path, self.label, self.spec["sections"])
        self.send(ev="hello", **loc.hello(self.spec.get("probe") or []))
        msg = self.next_command("sync")
        self.send(ev="synced", removed=loc.sync(msg["gen"], Manifest.from_json(msg["manifest"])))
        while True:
            msg = self.next_command("run", "step")
            if msg["cmd"] == "run":
                break
            self.step(msg)
        loc.state = "running"
        self.start_sections(msg["sections"])
        while len(self.prepared) < len(self.children):
            m = self.poll()
            if m is not None and m.get("cmd") == "breakpoints":
                for c in self.conns.values():
                    c.send(m)
        for p in self.children.values():
            p.join(timeout=10)
        loc.state = "sections done"
        manifest = Manifest.from_json(self.next_command("prepare")["manifest"])
        loc.prepare(manifest)
        self.send(ev="ready")
        self.next_command("commit")
        removed = loc.commit(manifest)
        self.send(ev="committed", generation=manifest.generation, removed=removed)
        return 0

    def step(self, msg: dict) -> None:
        """A request of the task between sync and run: relay its reply parts, then ``done``.
        It runs in this thread: heartbeats keep flowing, and the coordinator's pings queued
        meanwhile count as heard."""
        for part in self.loc.step(self.spec.get("steps"), msg):
            self.send(ev="reply", **part)
        self.send(ev="reply", done=True)
        self.last_heard = max(self.last_heard, self.last_read)

    def start_sections(self, specs: list[dict]) -> None:
        # fork: the agent is small and forking costs ~10 ms, spawning ~1 s on a busy 2-core host
        # (a section re-imports everything).  The agent's threads only read pipes.
        ctx = get_context("fork")
        for spec in map(SectionSpec.from_json, specs):
            j = spec.section
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
