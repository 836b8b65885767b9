"""The Dask transport's tasks: the section protocol's steps as functions that run on the Dask
workers (docs/distributed.md, *Dask*).  The coordinator is webdb.writer.daskrun.

Each task is pinned by the coordinator to the one worker that declares the resource
``section-J`` of its section; a location's lock, sync, prepare and commit run on the worker of
its lowest section (its *lead*).  A task:

- refuses to run on a worker whose root lacks its section (``SectionRefused``: section, worker,
  path) — Dask never runs it elsewhere, since no other worker has the resource;
- is idempotent: a stage's rerun (its worker died and the nanny restarted it) reads the same
  inputs, writes the same table file and returns the same edits;
- moves edit files as task results: ``{target: [{name, size, sha256, data}]}``, checked
  against their SHA-256 when the receiving stage writes them into its share group.

The lead keeps the location's writer lock between tasks, in this process (``_LEASES``), for
as long as the coordinator renews it (``renew``, 5 times per heartbeat timeout): a lease not renewed for the
heartbeat timeout is dropped — the batch's files removed unless the manifest was written —
as an SSH agent does when its coordinator falls silent.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass

from webdb.core.dbfiles import write_atomic
from webdb.core.due import index_name
from webdb.core.manifest import Manifest
from webdb.core.marks import marks_name
from webdb.core.sections import Sections, section_path
from webdb.errors import BadInput, CorruptionError, DistributedError, LockedError
from webdb.tables.format import DB_IDENTITY, TABLE_SUFFIX, TMP_DIR
from webdb.util import faults
from webdb.writer import edits
from webdb.writer.engine import run_stages, stage_job, stage_summary
from webdb.writer.executor import LocalExecutor
from webdb.writer.location import Location
from webdb.writer.section import apply_input, outbox_names
from webdb.writer.spec import SectionSpec

__all__ = [
    "SectionRefused",
    "abort_location",
    "commit_location",
    "open_location",
    "pick_out",
    "pick_state",
    "prepare_location",
    "renew",
    "sample_section",
    "stage_section",
    "step_location",
    "step0_section",
    "sync_location_task",
]


class SectionRefused(BadInput):
    """A task reached a worker whose root does not hold its section (a misplaced resource)."""


@dataclass
class _Lease:
    """A location (its writer lock held) kept by this worker process for one batch."""

    batch: str
    loc: Location
    timeout: float
    renewed: float


# db path -> the lease this process holds: the lock must outlive a task (it spans the batch).
_LEASES: dict[str, _Lease] = {}
_GUARD = threading.Lock()
_WATCHDOG: list[threading.Thread] = []


def _worker() -> str:
    """This worker's name and address, for error messages."""
    try:
        from distributed import get_worker

        w = get_worker()
    except (ImportError, ValueError):
        return f"pid {os.getpid()} on {socket.gethostname()}"
    return f"{w.name} ({w.address})" if str(w.name) != w.address else w.address


def _check_section(path: str, j: int) -> None:
    d = section_path(path, j)
    if not os.path.isfile(os.path.join(path, DB_IDENTITY)) or not os.path.isdir(d):
        raise SectionRefused(
            f"section {j}: worker {_worker()} has no {d} (the worker declaring resource section-{j} must run "
            f"where section {j} lives: start it with that location's root)"
        )


def _drop(lease: _Lease, path: str) -> None:
    """Release a lease; remove the batch's files unless its manifest may be committed."""
    try:
        lease.loc.rollback()
    finally:
        lease.loc.release()
        _LEASES.pop(path, None)


def _watch() -> None:
    while True:
        time.sleep(0.5)
        now = time.monotonic()
        with _GUARD:
            for path, lease in list(_LEASES.items()):
                if now - lease.renewed > lease.timeout:
                    _drop(lease, path)


def _lease(place: dict, batch: str, gen0: int | None = None) -> _Lease:
    """This process's lease of ``place``'s lock for ``batch``, taken again if the worker was
    restarted mid-batch (then the location must still be at ``gen0``)."""
    path = place["path"]
    with _GUARD:
        lease = _LEASES.get(path)
        if lease is not None and lease.batch == batch:
            lease.renewed = time.monotonic()
            return lease
        if lease is not None:
            raise LockedError(
                f"{path} is being written by another update (batch {lease.batch}) on worker {_worker()}; its lease "
                f"ends {lease.timeout - (time.monotonic() - lease.renewed):.0f}s after its coordinator's last word"
            )
        loc = Location(path, place["label"], place["sections"])
        lease = _Lease(batch, loc, float(place["heartbeat_timeout"]), time.monotonic())
        if gen0 is not None:
            cur = loc.db.committed()
            if cur != gen0:
                loc.release()
                raise DistributedError(f"{path}: CURRENT moved from generation {gen0} to {cur} during the update")
            loc.state = "synced"
        _LEASES[path] = lease
        if not _WATCHDOG:
            _WATCHDOG.append(threading.Thread(target=_watch, daemon=True, name="webdb-lease"))
            _WATCHDOG[0].start()
        return lease


# ---- location tasks (on the lead worker) ---------------------------------------------------------


def open_location(place: dict, batch: str) -> dict:
    """Take the location's writer lock; its hello (as an agent's)."""
    _check_section(place["path"], place["sections"][0])
    return _lease(place, batch).loc.hello(place.get("probe") or [], worker=_worker())


def sync_location_task(place: dict, batch: str, gen: int, manifest: dict) -> int:
    """Bring the location to the rack's generation ``gen`` and recover it (once per batch)."""
    return _lease(place, batch).loc.sync(gen, Manifest.from_json(manifest))


def step_location(place: dict, batch: str, gen0: int, manifest: dict, steps: str, request: dict) -> list[dict]:
    """A task's request between sync and batch (docs/distributed.md, *Tasks*); its reply
    parts.  ``ctx.state`` lives with the lease, from one request to the next."""
    loc = _lease(place, batch, gen0).loc
    loc.base = loc.base or Manifest.from_json(manifest)
    return list(loc.step(steps, request))


def prepare_location(place: dict, batch: str, gen0: int, manifest: dict) -> None:
    """Phase 1: the new manifest on disk at this location."""
    _lease(place, batch, gen0).loc.prepare(Manifest.from_json(manifest))


def commit_location(place: dict, batch: str, gen0: int, manifest: dict) -> int:
    """Phase 2: flip CURRENT, remove the batch's leftovers, release the lock."""
    lease = _lease(place, batch, gen0)
    lease.loc.state = "ready"  # a lease taken again after a restart: the manifest is written
    removed = lease.loc.commit(Manifest.from_json(manifest))
    with _GUARD:
        lease.loc.release()
        _LEASES.pop(place["path"], None)
    return removed


def renew(path: str, batch: str) -> bool:
    """The coordinator is alive (``Client.run``, 5 times per heartbeat timeout): keep the lease."""
    return _with_lease(path, batch, lambda lease: setattr(lease, "renewed", time.monotonic()))


def abort_location(path: str, batch: str) -> bool:
    """The update failed: drop the lease (and the batch's files, if before the manifest)."""
    return _with_lease(path, batch, lambda lease: _drop(lease, path))


def _with_lease(path: str, batch: str, fn) -> bool:
    """``fn(lease)`` if this process holds ``path``'s lease for ``batch``; whether it did."""
    with _GUARD:
        lease = _LEASES.get(path)
        if lease is None or lease.batch != batch:
            return False
        fn(lease)
        return True


# ---- section tasks -------------------------------------------------------------------------------


def _scratch(spec: SectionSpec, what: str) -> str:
    """A fresh scratch directory of one task run (a rerun starts from nothing)."""
    d = os.path.join(spec.path, TMP_DIR, f"s{spec.section:04d}-{what}-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def _enter(spec: SectionSpec) -> None:
    _check_section(spec.path, spec.section)
    if spec.lead:
        _lease(spec.lead, spec.lease, spec.gen - 1)


def sample_section(spec_json: dict) -> list[str]:
    """First batch of a k-section db: section j's URL sample (its input applied, not routed)."""
    spec = SectionSpec.from_json(spec_json)
    _enter(spec)
    tmp = _scratch(spec, "sample")
    secs = spec.sections
    job0 = stage_job(spec.path, spec.batch, spec.gen, secs, spec.settings, tmp, 1)
    got: list[str] = []

    def keep(log) -> Sections:
        got.extend(u.decode("utf-8") for u in log.sample())
        return secs  # not ready: nothing is routed

    try:
        apply_input(spec, job0, secs, tmp, keep)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return got


def step0_section(spec_json: dict, breakpoints: list[str] | None) -> dict:
    """Step 0 of section j: its input applied and routed; the edits for every target."""
    spec = SectionSpec.from_json(spec_json)
    t0, c0 = time.monotonic(), time.process_time()
    _enter(spec)
    j, k = spec.section, spec.k
    secs = spec.sections
    if breakpoints is not None:
        secs = Sections(k, [b.encode("utf-8") for b in breakpoints])
    tmp = _scratch(spec, "step0")
    job0 = stage_job(spec.path, spec.batch, spec.gen, secs, spec.settings, tmp, 1)
    job0.outbox = os.path.join(tmp, "outbox")
    try:
        secs, api, info, step0 = apply_input(spec, job0, secs, tmp, lambda log: secs)
        state = {
            "sections": secs.to_json(),
            "tables": dict(spec.tables[j]) if j < len(spec.tables) else {},
            "status": dict(spec.status[j]) if j < len(spec.status) else {},
            "api": api,
            "input": info,
            "step0": step0,
            "stages": [],
            "shipped": [],
            "listed": [],
            "seconds": 0.0,
            "cpu_seconds": 0.0,
        }
        out = _collect(spec, state, 0, job0.outbox)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _account(state, t0, c0)
    return {"state": state, "out": out, "summary": {"section": j, "step": 0, "shipped": state["shipped"][-1]}}


def stage_section(spec_json: dict, stage: int, prev: dict, incoming: list[list[dict]]) -> dict:
    """Stage ``stage`` of section j: write the edits every producer sent at step stage-1 into
    j's share group (SHA-256 checked), merge the stage's inputs into j's table through the
    engine's stage loop (``run_stages``, this one stage), and return what the stage emitted
    for every target."""
    spec = SectionSpec.from_json(spec_json)
    t0, c0 = time.monotonic(), time.process_time()
    _enter(spec)
    j, k = spec.section, spec.k
    state = copy.deepcopy(prev["state"])
    _receive(spec, state, stage, incoming)
    tmp = _scratch(spec, f"st{stage}")
    secs = Sections.from_json(state["sections"])
    job0 = stage_job(spec.path, spec.batch, spec.gen, secs, spec.settings, tmp, 1)
    ex = _TaskExchange(spec, state, os.path.join(tmp, "outbox"))
    job0.outbox = ex.outbox
    tables: list[dict] = [{} for _ in range(k)]
    status: list[dict] = [{} for _ in range(k)]
    tables[j], status[j] = state["tables"], state["status"]
    try:
        state["stages"].extend(run_stages(job0, [j], tables, status, ex, LocalExecutor(1, tmp), stages=(stage,)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    state["tables"], state["status"] = tables[j], status[j]
    _account(state, t0, c0)
    summary = {
        "section": j,
        "step": stage,
        "merged": ex.summary,
        "shipped": state["shipped"][-1] if stage < 5 else None,
    }
    return {"state": state, "out": ex.out, "summary": summary}


class _TaskExchange:
    """The Exchange of ``engine.run_stages`` in a stage task: the inputs are the files the
    task wrote from its producers' results; publishing a step is collecting its outbox into
    the task's result."""

    def __init__(self, spec: SectionSpec, state: dict, outbox: str) -> None:
        self.spec, self.state, self.outbox = spec, state, outbox
        self.out: dict[int, list[dict]] = {}
        self.summary: dict | None = None

    def inputs(self, stage: int, section: int) -> list[str]:
        files = _inputs(self.spec, self.state, stage)
        if files:
            _forget_output(self.spec, stage)
        return files

    def merged(self, r: dict) -> None:
        self.summary = stage_summary(r)

    def published(self, stage: int) -> None:
        j = self.spec.section
        if stage < 5:
            faults.point(f"dist.s{j}.step{stage}.before_ship")
            self.out = _collect(self.spec, self.state, stage, self.outbox)
        else:
            faults.point(f"dist.s{j}.stage5.done")


def _forget_output(spec: SectionSpec, stage: int) -> None:
    """A rerun of this stage (its worker died after it wrote its table; or Dask recomputes a
    lost result) writes the same table file again: remove the earlier run's.  Table files are
    created exclusively, and only this task writes this name, one task of a section at a time
    (the section's resource); the bytes it writes are the same."""
    suffix = TABLE_SUFFIX[edits.STAGE_TABLE[stage]]
    # The base, and with levels the delta run, its scratch compaction and its merged runs; stage 1
    # also writes the section's due index and mark table.
    names = [f"{spec.gen:08d}-s{stage}{kind}.{suffix}" for kind in ("", "d", "c", "r")]
    if stage == 1:
        names += [index_name(spec.gen, step) for step in ("s1", "s1d", "s1r")] + [marks_name(spec.gen, "s1")]
    for name in names:
        try:
            os.unlink(os.path.join(section_path(spec.path, spec.section), name))
        except FileNotFoundError:
            pass


def pick_out(res: dict, target: int) -> list[dict]:
    """What a step of one producer sent ``target`` (so each consumer fetches only its part)."""
    return res["out"].get(target, [])


def pick_state(res: dict) -> dict:
    """A stage's summary for the coordinator; after stage 5, the section's prepared record."""
    s = res["state"]
    return {**res["summary"], "prepared": {k: v for k, v in s.items() if k != "listed"}}


def _account(state: dict, t0: float, c0: float) -> None:
    state["seconds"] += time.monotonic() - t0
    state["cpu_seconds"] += time.process_time() - c0


def _collect(spec: SectionSpec, state: dict, step: int, outbox: str) -> dict[int, list[dict]]:
    """The files a step left in the outbox, per target, with their size and SHA-256 (the
    step's "shipping": reading them into the task's result)."""
    t0 = time.monotonic()
    out: dict[int, list[dict]] = {}
    files = nbytes = remote = 0
    for t in range(spec.k):
        lst = []
        for name in outbox_names(outbox, t):
            with open(os.path.join(outbox, f"section-{t:04d}", name), "rb") as f:
                data = f.read()
            item = {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "data": data}
            if t != spec.section and faults.armed(f"dist.s{spec.section}.step{step}.corrupt"):
                item["data"] = bytes([data[0] ^ 0x40]) + data[1:]  # as if it flipped in transit
            lst.append(item)
            files += 1
            nbytes += len(data)
            if spec.section_at[t] != spec.host:
                remote += len(data)
        out[t] = lst
    state["shipped"].append(
        {"step": step, "files": files, "bytes": nbytes, "remote_bytes": remote, "seconds": time.monotonic() - t0}
    )
    return out


def _receive(spec: SectionSpec, state: dict, stage: int, incoming: list[list[dict]]) -> None:
    """Write step stage-1's edit files from every producer into this section's share group,
    each checked against the size and SHA-256 its producer computed."""
    home = section_path(spec.path, spec.section)
    for p, files in enumerate(incoming):
        for f in files:
            data = f["data"]
            if len(data) != f["size"] or hashlib.sha256(data).hexdigest() != f["sha256"]:
                raise CorruptionError(
                    f"{spec.host}: section {spec.section}: edit file {f['name']} from section {p} differs from "
                    f"what its producer sent (size {len(data)}, producer size {f['size']} sha256 {f['sha256'][:16]})"
                )
            dest = os.path.join(home, f["name"])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            write_atomic(dest, data, sync=False)  # edits are scratch: a crash discards the batch
            state["listed"].append({k: f[k] for k in ("name", "size", "sha256")})


def _inputs(spec: SectionSpec, state: dict, stage: int) -> list[str]:
    """Local paths of the edit files for ``stage``: every file listed so far for it, each
    still the size its producer sent."""
    home = section_path(spec.path, spec.section)
    prefix = f"edits/{spec.batch}/st{stage}/"
    out = []
    for f in state["listed"]:
        if not f["name"].startswith(prefix):
            continue
        path = os.path.join(home, f["name"])
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise CorruptionError(f"{spec.host}: {path}: incoming edit file is gone ({e.strerror})") from None
        if size != f["size"]:
            raise CorruptionError(f"{spec.host}: {path}: {size} bytes, its producer sent {f['size']}")
        out.append(path)
    return sorted(out)
