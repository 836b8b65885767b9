"""A section writer: section j's part of one ``webdb update`` batch, in its own process on the
host that holds the section (started by that location's agent, webdb.writer.distributed).

It runs the engine's stage loop (webdb.writer.engine.run_stages) with itself as the transport:
edits go to a local outbox and are shipped to their target's ndfs share group; a stage starts
when every producer's done marker is there.  In a section's share group
(``<root>/<db>/section-JJJJ/``)::

    edits/B/stS/api-PPPP-NNNN.edits  API edits of producer P for stage S (step 0), run N
    edits/B/stS/stT-PPPP-NNNN.edits  edits stage T of producer P emitted for stage S (step T)
    edits/B/done-stT-from-PPPP     producer P finished step T: the files it sent here (JSON)

each with its ``.completed`` flag.  Step T of a section = its stage T (T = 0: the API calls),
then shipping what it emitted.  Stage S of section j starts when all k producers have
published ``done-st(S-1)`` to j.  Cost per step: the edit bytes emitted, sent once and read
once more by the receiver's ndfs verification; k small marker files per producer.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import posixpath
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from webdb.core.sections import Sections, section_dirname, section_path
from webdb.errors import BadInput, CorruptionError, DistributedError, WebDBError
from webdb.ndfs import NDFS, LocalTransport, NdfsConfig, Transport, parse_config, section_group
from webdb.ndfs.errors import HostUnreachable
from webdb.ndfs.group import GroupError
from webdb.tables.format import TMP_DIR
from webdb.util import faults
from webdb.writer.cascade import StageJob
from webdb.writer.engine import level_steps, run_stages, stage_job
from webdb.writer.executor import LocalExecutor
from webdb.writer.inputs import resolve
from webdb.writer.spec import SectionSpec
from webdb.writer.writer import EditLog

__all__ = [
    "DEPLOY_DIR",
    "Aborted",
    "deploy_dir",
    "SectionWriter",
    "StageTimeout",
    "apply_input",
    "done_name",
    "edit_name",
    "outbox_names",
    "section_main",
]

# How often a section looks for the done markers of a step (a few local reads of its own share
# group: cheap even over a long wait).
POLL = 0.02
# Where a deployed host keeps its configs (fabfile.py deploy), one folder per config
# (``deploy_dir``): relative key paths of hosts.ini resolve there.
DEPLOY_DIR = ".webdb"


class StageTimeout(DistributedError, TimeoutError):
    """A section waited longer than ``stage_timeout`` for other sections' edits."""


class Aborted(DistributedError):
    """The agent or coordinator told this process to stop."""


def edit_name(batch: str, stage: int, producer: str) -> str:
    """Group-relative name of an edit file for ``stage`` from ``producer`` (``api-0003-0001``, ``st2-0001-0001``)."""
    return f"edits/{batch}/st{stage}/{producer}.edits"


def done_name(batch: str, step: int, source: int) -> str:
    """Group-relative name of the marker: ``source`` finished step ``step`` (lists its files)."""
    return f"edits/{batch}/done-st{step}-from-{source:04d}"


def error_kind(e: BaseException) -> str:
    """The class name a failure is reported under; BadInput subclasses count as BadInput (the
    CLI maps it to exit code 2)."""
    return "BadInput" if isinstance(e, BadInput) else type(e).__name__


def unreachable_peers(e: BaseException) -> list[str]:
    """The locations a failure could not reach (a share group's put or marker write), found
    along its cause chain, so that the coordinator can blame a host that is down rather than
    the section that noticed it first."""
    out: list[str] = []
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if isinstance(x, GroupError):
            out += [h for h, r in x.result.failed.items() if isinstance(r.error, HostUnreachable) and h not in out]
        x = x.__cause__ or x.__context__
    return out


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux), so no section outlives its agent."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def deploy_dir(root: str, config) -> str:
    """``<root>/.webdb/<name>-<digest>``: where `fab deploy` puts one config on a host, so two
    configs sharing a root never overwrite each other's hosts.ini and keys.  ``name`` is the
    config file's stem; ``digest`` covers its hosts (name, address, port, root) and section
    count, which the coordinator and every agent compute alike from the same text."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.splitext(os.path.basename(config.source))[0]).lstrip(".")
    topo = "".join(f"{n} {h.address} {h.port} {h.root}\n" for n, h in sorted(config.hosts.items()))
    digest = hashlib.sha256(f"{topo}{config.sections}".encode()).hexdigest()[:8]
    return posixpath.join(root, DEPLOY_DIR, f"{stem or 'hosts'}-{digest}")


def section_config(spec: SectionSpec):
    if spec.ini is None:  # built as data by the coordinator (a local rack): checked again here
        return NdfsConfig.from_json(spec.config)
    source, base = spec.ini_source, spec.base_dir
    if spec.local_host:
        deployed = deploy_dir(spec.root, parse_config(spec.ini, source=source, base_dir=base))
        if os.path.isdir(deployed):
            base = deployed  # relative key_file/known_hosts paths were pushed here by `fab deploy`
    return parse_config(spec.ini, source=source, base_dir=base)


def outbox_names(outbox: str, target: int) -> list[str]:
    """Group-relative names of the edit files a step left in ``outbox`` for section ``target``."""
    d = os.path.join(outbox, section_dirname(target))
    return sorted(os.path.relpath(os.path.join(p, f), d) for p, _, fs in os.walk(d) for f in fs)


def apply_input(
    spec: SectionSpec, job0: StageJob, secs: Sections, tmp: str, breakpoints: Callable[[EditLog], Sections]
) -> tuple[Sections, dict, Any, dict]:
    """Step 0 of section ``spec.section``: apply its input to an ``EditLog`` and route the
    calls into ``job0.outbox``, one edit file (or sorted run) per target section.  A db
    without breakpoints yet asks ``breakpoints(log)`` for them (the URL sample goes up); if
    the answer is still not ready, nothing is routed.  Returns (sections, the API edit
    counts, the input function's info, step 0 timings)."""
    j = spec.section
    t0, c0 = time.monotonic(), time.process_time()
    log = EditLog(spec.settings, secs, os.path.join(tmp, "api"), producer=j)
    if secs.ready:
        log.route_as_you_go(job0)  # a spilled run goes straight into the outbox as edit files
    try:
        inp = spec.input
        for p in inp.paths:
            if not os.path.exists(p):  # bad input (exit code 2), not a failed run
                raise BadInput(f"{spec.host}: input {p}: no such file or directory")
        info = resolve(inp.fn)(log, list(inp.paths), **inp.options)
        api = log.edits
        t_input = time.monotonic() - t0
        if not secs.ready:
            secs = breakpoints(log)
            job0.sections = secs.to_json()
        faults.point(f"dist.s{j}.step0.before_ship")
        if secs.ready:
            log.route(job0)
    finally:
        log.discard()
    step0 = {
        "input_seconds": t_input,
        "route_seconds": time.monotonic() - t0 - t_input,
        "cpu_seconds": time.process_time() - c0,
    }
    return secs, api, info, step0


# ---- the section writer --------------------------------------------------------------------------


class SectionWriter:
    """Runs section j's part of one batch: input, routing, stages 1..5, shipping, markers.

    ``send(event)`` reports to the agent; ``recv(timeout)`` returns the agent's next message
    or None.  ``run()`` returns the prepared record: this section's new tables and status.
    """

    def __init__(self, spec: SectionSpec, send, recv):
        self.spec = spec
        self.send, self.recv = send, recv
        self.j, self.k = spec.section, spec.k
        self.batch, self.gen = spec.batch, spec.gen
        self.path = spec.path
        self.settings = spec.settings
        self.tmp = os.path.join(self.path, TMP_DIR, f"s{self.j:04d}-{os.getpid()}")
        self.outbox = os.path.join(self.tmp, "outbox")
        self.config = section_config(spec)
        # The batch's edits and done markers only: files a crash discards with the batch.
        self.fs = NDFS(self.config, spec.db, local_host=spec.local_host, scratch=True)
        own = self.fs.section(self.j).transports
        if len(own) != 1:
            raise BadInput(f"section {self.j} has {len(own)} locations; the distributed writer needs exactly one")
        self.own: Transport = next(iter(own.values()))
        self.host = spec.host
        self.own_prefix = f"{spec.db}/{section_dirname(self.j)}/"
        self.tables = [dict(t) for t in spec.tables]
        self.status = [dict(s) for s in spec.status]
        self.listed: list[dict] = []  # files named by the done markers read so far
        self.step = 0
        self.timeout = float(spec.stage_timeout or 0)
        self.shipped: list[dict] = []

    def host_of(self, section: int) -> str:
        return ",".join(loc.label for loc in self.config.locations(section_group(section)))

    def event(self, **kw: Any) -> None:
        self.send({"ev": "section", "section": self.j, "step": self.step, **kw})

    def run(self) -> dict:
        t0, c0 = time.monotonic(), time.process_time()
        os.makedirs(self.tmp, exist_ok=True)
        secs = self.spec.sections
        # workers=1: the coordinator already gave this section its share of memory_mb.
        job0 = stage_job(self.path, self.batch, self.gen, secs, self.settings, self.tmp, 1)
        job0.outbox = self.outbox
        self.event(state="input")
        secs, api, info, step0 = apply_input(self.spec, job0, secs, self.tmp, self.breakpoints)
        self.ship(0)
        stages = run_stages(job0, [self.j], self.tables, self.status, self, LocalExecutor(1, self.tmp))
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

    # -- the Exchange of webdb.writer.engine.run_stages: ndfs share groups and done markers --

    def inputs(self, stage: int, section: int) -> list[str]:
        self.step = stage
        files = self.wait_inputs(stage)
        if files:
            self.event(state="merging", files=len(files))
        return files

    def merged(self, r: dict) -> None:
        self.event(state="merged", records=r["records"], bytes=r["bytes"], seconds=r["seconds"], **level_steps(r))

    def published(self, stage: int) -> None:
        if stage < 5:
            faults.point(f"dist.s{self.j}.step{stage}.before_ship")
            self.ship(stage)
        else:
            faults.point(f"dist.s{self.j}.stage5.done")

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
            names = outbox_names(self.outbox, t)
            group = self.fs.section(t)
            corrupt = faults.armed(f"dist.s{self.j}.step{step}.corrupt") and t != self.j
            refused = faults.armed(f"dist.s{self.j}.step{step}.unreachable") and t != self.j
            listed, nbytes = [], 0
            for name in names:
                local = os.path.join(d, name)
                if corrupt or refused:
                    for tr in group.transports.values():
                        tr.before_verify = faults.flip_byte(tr) if corrupt else faults.refuse(tr)
                res = group.put(local, name)
                if corrupt or refused:
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
            msg = self.recv(POLL)  # every wait, long or short: a barrier costs at most POLL more
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


def section_main(spec: SectionSpec, conn) -> None:
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
        faults.point(f"dist.s{spec.section}.prepared")
        conn.send({"ev": "prepared", "section": spec.section, "result": res})
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the process ends
        step = w.step if w is not None else 0
        detail = "" if isinstance(e, WebDBError | OSError) else "\n" + traceback.format_exc(limit=8)
        try:
            conn.send(
                {
                    "ev": "failed",
                    "section": spec.section,
                    "step": step,
                    "error": f"{type(e).__name__}: {e}{detail}",
                    "kind": error_kind(e),
                    "unreachable": unreachable_peers(e),
                }
            )
        except OSError:
            pass  # the agent is gone: it sees this section's pipe close and reports the exit
        os._exit(1)
