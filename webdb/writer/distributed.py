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
edits move only as ndfs files.  In a section's share group (``<root>/<db>/section-JJJJ/``):

    edits/B/stS/api-PPPP.edits     API edits of producer P for stage S (step 0)
    edits/B/stS/stT-PPPP.edits     edits stage T of producer P emitted for stage S (step T)
    edits/B/done-stT-from-PPPP     producer P finished step T: the files it sent here (JSON)

each with its ``.completed`` flag.  Step T of a section = its stage T (T = 0: the API calls),
then shipping what it emitted.  Stage S of section j starts when all k producers have
published ``done-st(S-1)`` to j.  Cost per step: the edit bytes emitted, sent once and read
once more by the receiver's ndfs verification; k small marker files per producer.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import get_context
from typing import Any

from webdb import _fault
from webdb.db import WebDB, write_atomic
from webdb.errors import BadInput, CorruptionError, DistributedError, WebDBError
from webdb.ndfs import NDFS, LocalTransport, Transport, parse_config, section_group
from webdb.sections import Sections, section_dirname, section_path
from webdb.tables.format import CURRENT, DB_IDENTITY, GEN_DIR, TMP_DIR
from webdb.writer.cascade import run_stage
from webdb.writer.inputs import resolve
from webdb.writer.writer import EditLog, apply_stage_result, stage_job, stage_summary

__all__ = ["PROTOCOL", "SectionWriter", "StageTimeout", "StepContext", "done_name", "edit_name", "main"]

# 2: the "step" request between sync and run (update(steps=...): generate in a rack), and
# the failure's exception class in "failed" events.
PROTOCOL = 2
# An agent writes a line at least this often (the coordinator's liveness signal), and the
# coordinator pings agents as often.
HEARTBEAT = 1.0
# How often a section looks for the done markers of a step (local stat calls: cheap).
POLL = 0.02
STEPS = range(0, 5)  # steps that emit edits: 0 (API calls) and stages 1..4
STAGES = range(1, 6)
# Where a deployed host keeps its configs (fabfile.py deploy), one folder per config
# (``deploy_dir``): relative key paths of hosts.ini resolve there.
DEPLOY_DIR = ".webdb"


def deploy_dir(root: str, config) -> str:
    """``<root>/.webdb/<name>-<digest>``: where `fab deploy` puts one config on a host, so two
    configs sharing a root never overwrite each other's hosts.ini and keys.  ``name`` is the
    config file's stem; ``digest`` covers its hosts (name, address, port, root) and section
    count, which the coordinator and every agent compute alike from the same text."""
    import hashlib
    import posixpath
    import re

    stem = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.splitext(os.path.basename(config.source))[0]).lstrip(".")
    topo = "".join(f"{n} {h.address} {h.port} {h.root}\n" for n, h in sorted(config.hosts.items()))
    digest = hashlib.sha256(f"{topo}{config.sections}".encode()).hexdigest()[:8]
    return posixpath.join(root, DEPLOY_DIR, f"{stem or 'hosts'}-{digest}")


class StageTimeout(DistributedError, TimeoutError):
    """A section waited longer than ``stage_timeout`` for other sections' edits."""


class Aborted(DistributedError):
    """The agent or coordinator told this process to stop."""


def edit_name(batch: str, stage: int, producer: str) -> str:
    """Group-relative name of an edit file for ``stage`` from ``producer`` (``api-0003``, ``st2-0001``)."""
    return f"edits/{batch}/st{stage}/{producer}.edits"


def done_name(batch: str, step: int, source: int) -> str:
    """Group-relative name of the marker: ``source`` finished step ``step`` (lists its files)."""
    return f"edits/{batch}/done-st{step}-from-{source:04d}"


def error_kind(e: BaseException) -> str:
    """The class name a failure is reported under; BadInput subclasses count as BadInput (the
    CLI maps it to exit code 2)."""
    return "BadInput" if isinstance(e, BadInput) else type(e).__name__


def _armed(name: str) -> bool:
    return name in _fault._FAULTS


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux), so no section outlives its agent."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _config(spec: dict):
    source = spec.get("ini_source", "<hosts.ini>")
    base = spec["base_dir"]
    if spec.get("local_host"):
        deployed = deploy_dir(spec["root"], parse_config(spec["ini"], source=source, base_dir=base))
        if os.path.isdir(deployed):
            base = deployed  # relative key_file/known_hosts paths were pushed here by `fab deploy`
    return parse_config(spec["ini"], source=source, base_dir=base)


# ---- the section writer --------------------------------------------------------------------------


class SectionWriter:
    """Runs section j's part of one batch: input, routing, stages 1..5, shipping, markers.

    ``send(event)`` reports to the agent; ``recv(timeout)`` returns the agent's next message
    or None.  ``run()`` returns the prepared record: this section's new tables and status.
    """

    def __init__(self, spec: dict, send, recv):
        self.spec = spec
        self.send, self.recv = send, recv
        self.j, self.k = spec["section"], spec["k"]
        self.batch, self.gen = spec["batch"], spec["gen"]
        self.path = spec["path"]
        self.settings = spec["settings"]
        self.tmp = os.path.join(self.path, TMP_DIR, f"s{self.j:04d}-{os.getpid()}")
        self.outbox = os.path.join(self.tmp, "outbox")
        self.config = _config(spec)
        self.fs = NDFS(self.config, spec["db"], local_host=spec.get("local_host"))
        own = self.fs.section(self.j).transports
        if len(own) != 1:
            raise BadInput(f"section {self.j} has {len(own)} locations; the distributed writer needs exactly one")
        self.own: Transport = next(iter(own.values()))
        self.host = spec["host"]
        self.own_prefix = f"{spec['db']}/{section_dirname(self.j)}/"
        self.tables = [dict(t) for t in spec["base"]["tables"]]
        self.status = [dict(s) for s in spec["base"]["status"]]
        self.listed: list[dict] = []  # files named by the done markers read so far
        self.step = 0
        self.timeout = float(spec.get("stage_timeout") or 0)
        self.shipped: list[dict] = []

    def host_of(self, section: int) -> str:
        return ",".join(loc.label for loc in self.config.locations(section_group(section)))

    def event(self, **kw: Any) -> None:
        self.send({"ev": "section", "section": self.j, "step": self.step, **kw})

    def run(self) -> dict:
        t0, c0 = time.monotonic(), time.process_time()
        os.makedirs(self.tmp, exist_ok=True)
        secs = Sections.from_json(self.spec["sections"])
        # workers=1: the coordinator already gave this section its share of memory_mb.
        job0 = stage_job(self.path, self.batch, self.gen, secs, self.settings, self.tmp, 1)
        job0["outbox"] = self.outbox
        self.event(state="input")
        log = EditLog(self.settings, secs, os.path.join(self.tmp, "api"), producer=self.j)
        if secs.ready:
            log.route_as_you_go(job0)  # a spilled run goes straight into the outbox as edit files
        try:
            inp = self.spec["input"]
            for p in inp.get("paths") or []:
                if not os.path.exists(p):  # bad input (exit code 2), not a failed run
                    raise BadInput(f"{self.host}: input {p}: no such file or directory")
            info = resolve(inp["fn"])(log, list(inp.get("paths") or []), **(inp.get("options") or {}))
            api = {"pages": log._pbu.count, "links": log._lbm.count}
            t_input = time.monotonic() - t0
            if not secs.ready:
                secs = self.breakpoints(log)
                job0["sections"] = secs.to_json()
            _fault.point(f"dist.s{self.j}.step0.before_ship")
            if secs.ready:
                log.route(job0)
        finally:
            log.discard()
        step0 = {
            "input_seconds": t_input,
            "route_seconds": time.monotonic() - t0 - t_input,
            "cpu_seconds": time.process_time() - c0,
        }
        self.ship(0)
        stages = []
        for stage in STAGES:
            self.step = stage
            inputs = self.wait_inputs(stage)
            if inputs:
                self.event(state="merging", files=len(inputs))
                tabs = {
                    t: os.path.join(section_path(self.path, self.j), e["file"]) for t, e in self.tables[self.j].items()
                }
                r = run_stage(dict(job0, stage=stage, section=self.j, inputs=inputs, tables=tabs))
                apply_stage_result(self.tables, self.status, r)
                stages.append({"stage": stage, **stage_summary(r)})
                self.event(state="merged", records=r["records"], bytes=r["bytes"], seconds=r["seconds"])
            if stage < 5:
                _fault.point(f"dist.s{self.j}.step{stage}.before_ship")
                self.ship(stage)
        _fault.point(f"dist.s{self.j}.stage5.done")
        self.fs.close()
        return {
            "section": self.j,
            "tables": self.tables[self.j],
            "status": self.status[self.j],
            "sections": secs.to_json(),
            "api": api,
            "input": info,
            "stages": stages,
            "shipped": self.shipped,
            "step0": step0,
            "seconds": time.monotonic() - t0,
            "cpu_seconds": time.process_time() - c0,
        }

    def breakpoints(self, log: EditLog) -> Sections:
        """First batch of a k-section db: send the URL sample up, get the rack's breakpoints."""
        self.send({"ev": "sample", "section": self.j, "urls": [u.decode("utf-8") for u in log.sample()]})
        self.event(state="breakpoints")
        deadline = time.monotonic() + self.timeout if self.timeout else None
        while True:
            msg = self.recv(1.0)
            if msg is not None and msg.get("cmd") == "breakpoints":
                return Sections(self.k, [b.encode("utf-8") for b in msg["breakpoints"]])
            if deadline is not None and time.monotonic() > deadline:
                raise StageTimeout(f"section {self.j} on {self.host}: no breakpoints after {self.timeout:g}s")

    # -- shipping ----------------------------------------------------------------------------

    def ship(self, step: int) -> None:
        """Send every file the step emitted to its target's share group, then a done marker
        to every section (listing the files, possibly none).  Targets in parallel threads."""
        t0 = time.monotonic()
        self.event(state="shipping")

        def send(t: int) -> dict:
            d = os.path.join(self.outbox, section_dirname(t))
            names = sorted(os.path.relpath(os.path.join(p, f), d) for p, _, fs in os.walk(d) for f in fs)
            group = self.fs.section(t)
            corrupt = _armed(f"dist.s{self.j}.step{step}.corrupt") and t != self.j
            listed, nbytes = [], 0
            for name in names:
                local = os.path.join(d, name)
                if corrupt:
                    for tr in group.transports.values():
                        tr.before_verify = _flip_byte(tr)
                res = group.put(local, name)
                if corrupt:
                    for tr in group.transports.values():
                        tr.before_verify = None
                res.raise_on_failure()
                c = next(iter(res.values())).value
                listed.append({"name": name, "size": c.size, "sha256": c.sha256})
                nbytes += c.size
                os.unlink(local)
            marker = json.dumps({"from": self.j, "step": step, "files": listed})
            group.write_text(done_name(self.batch, step, self.j), marker).raise_on_failure()
            return {
                "to": t,
                "files": len(listed),
                "bytes": nbytes,
                "local": all(isinstance(tr, LocalTransport) for tr in group.transports.values()),
            }

        try:
            with ThreadPoolExecutor(max_workers=min(self.k, 8), thread_name_prefix="ship") as ex:
                sent = list(ex.map(send, range(self.k)))
        except WebDBError as e:
            raise DistributedError(f"shipping step {step} edits: {e}") from e
        rec = {
            "step": step,
            "files": sum(s["files"] for s in sent),
            "bytes": sum(s["bytes"] for s in sent),
            "remote_bytes": sum(s["bytes"] for s in sent if not s["local"]),
            "seconds": time.monotonic() - t0,
        }
        self.shipped.append(rec)
        self.event(state="shipped", **{k: v for k, v in rec.items() if k != "step"})

    # -- receiving ---------------------------------------------------------------------------

    def wait_inputs(self, stage: int) -> list[str]:
        """Wait until every producer has published ``done-st(stage-1)`` here; return the local
        paths of the edit files for ``stage`` they listed, each checked against its flag."""
        step = stage - 1
        self.event(state="waiting")
        missing = set(range(self.k))
        t0 = time.monotonic()
        while missing:
            for p in sorted(missing):
                name = self.own_prefix + done_name(self.batch, step, p)
                if self.own.completion(name) is None:
                    continue
                m = json.loads(self.own.read_text(name))
                self.listed.extend(m["files"])
                missing.discard(p)
            if not missing:
                break
            waited = time.monotonic() - t0
            if self.timeout and waited > self.timeout:
                who = ", ".join(f"section {p} ({self.host_of(p)})" for p in sorted(missing))
                raise StageTimeout(f"stage {stage}: no step-{step} edits from {who} after {self.timeout:g}s")
            msg = self.recv(POLL if waited < 1 else 0.1)
            if msg is not None and msg.get("cmd") == "abort":
                raise Aborted(msg.get("reason", "aborted"))
        prefix = f"edits/{self.batch}/st{stage}/"
        out = []
        base = self.own
        for f in self.listed:
            if not f["name"].startswith(prefix):
                continue
            rel = self.own_prefix + f["name"]
            c = base.completion(rel)
            if c is None or c.size != f["size"] or c.sha256 != f["sha256"]:
                raise CorruptionError(
                    f"{self.host}: {rel}: incoming edit file does not match what its producer "
                    f"sent (flag {c}, marker size {f['size']} sha256 {f['sha256'][:16]})"
                )
            path = os.path.join(section_path(self.path, self.j), f["name"])
            size = os.path.getsize(path)
            if size != f["size"]:
                raise CorruptionError(f"{self.host}: {rel}: {size} bytes, its producer sent {f['size']}")
            out.append(path)
        return sorted(out)


def _flip_byte(t: Transport):
    """Fault injection (``dist.sJ.stepT.corrupt``): change one byte of a put's temporary file at
    the destination after it was sent, as if it flipped in transit; the put's verify must catch it."""

    def corrupt(tmp: str) -> None:
        if isinstance(t, LocalTransport):
            with open(t.root / tmp, "r+b") as f:
                b = f.read(1)
                f.seek(0)
                f.write(bytes([b[0] ^ 0x40]))
            return
        sftp = t.connect()  # SFTPTransport and subclasses
        with sftp.open(f"{t.host.root}/{tmp}", "r+b") as f:
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 0x40]))

    return corrupt


def section_main(spec: dict, conn) -> None:
    """Entry point of a section writer process (spawned by its agent)."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent decides; ^C reaches the coordinator
    os.dup2(2, 1)  # the agent's stdout carries its JSON lines: a stray print must not land there
    inbox: list[dict] = []

    def recv(timeout: float) -> dict | None:
        if inbox:
            return inbox.pop(0)
        if conn.poll(timeout):
            return conn.recv()
        return None

    w = None
    try:
        w = SectionWriter(spec, conn.send, recv)
        res = w.run()
        _fault.point(f"dist.s{spec['section']}.prepared")
        conn.send({"ev": "prepared", "section": spec["section"], "result": res})
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the process ends
        step = w.step if w is not None else 0
        detail = "" if isinstance(e, WebDBError | OSError) else "\n" + traceback.format_exc(limit=8)
        try:
            conn.send(
                {
                    "ev": "failed",
                    "section": spec["section"],
                    "step": step,
                    "error": f"{type(e).__name__}: {e}{detail}",
                    "kind": error_kind(e),
                }
            )
        except OSError:
            pass  # the agent is gone: it sees this section's pipe close and reports the exit
        os._exit(1)


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
                    self.q.put(("coord", json.loads(line)))

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
            except (OSError, WebDBError):
                pass

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
        write_atomic(
            self.db.manifest_path(self.manifest["generation"]),
            json.dumps(self.manifest, indent=1, sort_keys=True).encode(),
            self.db.settings["sync"],
        )
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
        """Bring this copy to the rack's committed generation ``gen`` (roll forward if a commit
        never reached us), then recover: remove whatever an interrupted batch left."""
        cur = self.db.committed()
        if cur > gen:
            raise WebDBError(f"{self.path}: CURRENT is generation {cur}, newer than the rack's {gen}")
        if cur < gen:
            self.db.commit(manifest)
        removed = self.db.recover()
        for j in self.spec["sections"]:
            d = section_path(self.path, j)
            os.makedirs(d, exist_ok=True)
            for t, e in manifest["tables"][j].items():
                if not os.path.exists(os.path.join(d, e["file"])):
                    raise WebDBError(
                        f"{d}: {t} file {e['file']} of generation {gen} is missing (section {j} must live here)"
                    )
        return removed

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


def create_local(spec: dict) -> dict:
    """Create this location's copy of a rack db: identity, generation 0, its section dirs.

    Idempotent: a copy with the same name and k that never committed a batch is re-created."""
    path = spec["path"]
    ident = os.path.join(path, DB_IDENTITY)
    if os.path.exists(ident):
        try:
            db = WebDB(path)
            empty = db.committed() == 0 and db.manifest()["sections"]["k"] == spec["k"]
        except WebDBError:
            empty = False
        if not empty or db.identity.get("name") != spec["identity"]["name"]:
            raise BadInput(f"{path}: a database already exists there (remove it or pick another name)")
    os.makedirs(os.path.join(path, GEN_DIR), exist_ok=True)
    for j in spec["sections"]:
        os.makedirs(section_path(path, j), exist_ok=True)
    sync = spec["identity"]["settings"].get("sync", True)
    write_atomic(ident, json.dumps(spec["identity"], indent=1).encode(), sync)
    write_atomic(
        os.path.join(path, GEN_DIR, "00000000.json"),
        json.dumps(spec["manifest"], indent=1, sort_keys=True).encode(),
        sync,
    )
    write_atomic(os.path.join(path, CURRENT), b"00000000\n", sync)
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
