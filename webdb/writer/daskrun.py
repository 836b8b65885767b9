"""The Dask transport of the update driver (webdb.writer.driver; docs/distributed.md, *Dask*):
the driver's requests as tasks on an existing Dask cluster.  The tasks are
webdb.writer.dasktasks.

Every section's work of every step is one task, pinned to the worker that declares the
resource ``section-J`` (``dask worker --resources section-J=1``); the task graph is the
barrier between stages::

    open/sync (per location, on its lead worker)     lock, hello, roll forward + recover
    step0-section-J        input applied, routed     -> edits for every target
    ship0-section-P-to-T   P's step-0 edits for T    (a task on P's worker: T fetches only its part)
    stage1-section-J       ship0-*-to-J written (SHA-256 checked), stage 1 merged -> edits
    ...                    stage5-section-J: the section's prepared record
    prepare / commit       per location, on its lead worker, when the driver says

The lead worker holds the location's writer lock between tasks (a lease this transport
renews, 5 times per heartbeat timeout).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace

from webdb.core.manifest import Manifest
from webdb.errors import BadInput, WebDBError
from webdb.writer import dasktasks
from webdb.writer.engine import level_steps
from webdb.writer.hosts import Rack
from webdb.writer.results import Failed, HostRun
from webdb.writer.spec import Options, Prepared, SectionSpec

__all__ = ["CONNECT_TIMEOUT", "WORKER_TIMEOUT", "DaskTransport", "DaskUnavailable", "connect"]

# Defaults (seconds): reaching the scheduler; how long a section may have no worker (its
# worker died and its nanny has not brought it back) before the update fails.
CONNECT_TIMEOUT = 10.0
WORKER_TIMEOUT = 60.0
# The client's own loggers: when the scheduler goes away they print tracebacks and the list of
# cancelled futures; the driver says it in one line instead.
_QUIET = ("distributed.client", "distributed.core", "distributed.comm", "distributed.batched")


class DaskUnavailable(BadInput):
    """The scheduler cannot be reached, or no worker declares a section's resource."""


def _resource(j: int) -> dict[str, float]:
    return {f"section-{j}": 1}


def _leads(rack: Rack) -> dict[str, int]:
    """Location -> its lowest section, whose worker holds the location's lock (its lead)."""
    for label, p in rack.places.items():
        if not p.sections:
            raise DaskUnavailable(
                f"{rack.config.source}: location {label} holds no section: with Dask every location needs a "
                f"section whose worker keeps its copy (drop it from [group:master])"
            )
    return {label: min(p.sections) for label, p in rack.places.items()}


class DaskTransport:
    """The driver's requests as tasks, each on the worker of its section or location."""

    def __init__(
        self,
        rack: Rack,
        scheduler: str,
        opts: Options,
        worker_timeout: float = WORKER_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.rack, self.scheduler = rack, scheduler
        self.hb_timeout, self.stage_timeout, self.worker_timeout = (
            opts.heartbeat_timeout,
            opts.stage_timeout,
            worker_timeout,
        )
        self.progress = opts.progress
        self.leads = _leads(rack)  # a location no worker could serve fails before connecting
        self.hosts = {label: HostRun(p) for label, p in rack.places.items()}
        self.nonce = os.urandom(4).hex()
        self.batch = f"open-{self.nonce}"  # the leases' batch id
        self.places = {
            label: {
                "label": label,
                "path": rack.path(label),
                "sections": p.sections,
                "heartbeat_timeout": self.hb_timeout,
            }
            for label, p in rack.places.items()
        }
        self.finished: dict[int, int] = {j: -1 for j in range(rack.k)}  # section -> the last step it finished
        self.missing_since: dict[int, float] = {}
        self.last_renew = 0.0
        self.last_progress = time.monotonic()
        self.steps: str | None = None
        self.gen0, self.base, self.n_ask = 0, None, 0
        self.levels: dict[str, int] = {}
        self.client = connect(scheduler, connect_timeout)
        # After the import of distributed, which sets its loggers' levels from its config.
        self.levels = {name: logging.getLogger(name).level for name in _QUIET}
        for name in _QUIET:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        try:
            self.check_workers()
        except BaseException:
            self.close()
            raise

    def lost(self, why: str) -> Failed:
        return Failed(f"lost the Dask scheduler {self.scheduler} ({why})")

    def stage_of(self, j: int) -> str:
        at = self.finished[j] + 1
        return "step 0 (input and routing)" if at == 0 else f"stage {at}" if at <= 5 else "commit"

    # -- workers and liveness ----------------------------------------------------------------------

    def workers_of(self) -> dict[int, list[str]]:
        """Section -> addresses of the workers declaring its resource (the scheduler's view)."""
        info = self.client.scheduler_info(n_workers=-1)
        out: dict[int, list[str]] = {j: [] for j in range(self.rack.k)}
        for addr, w in info.get("workers", {}).items():
            for name, n in (w.get("resources") or {}).items():
                if name.startswith("section-") and name[8:].isdigit() and int(name[8:]) in out and n >= 1:
                    out[int(name[8:])].append(addr)
        return out

    def check_workers(self) -> None:
        """Before anything runs: exactly one worker declares each section's resource."""
        have = self.workers_of()
        for j, addrs in have.items():
            if not addrs:
                raise DaskUnavailable(
                    f"no worker of the Dask scheduler {self.scheduler} declares resource section-{j} (start one "
                    f"where section {j} lives: dask worker {self.scheduler} --resources section-{j}=1)"
                )
            if len(addrs) > 1:
                raise DaskUnavailable(
                    f"{len(addrs)} workers of the Dask scheduler {self.scheduler} declare resource section-{j} "
                    f"({', '.join(sorted(addrs))}): a section lives at exactly one worker"
                )

    def tick(self) -> None:
        """Between waits: the scheduler is there, every section has its worker (or has had one
        within ``worker_timeout``), something progressed within ``stage_timeout``; renew leases."""
        if self.client.status not in ("running", "connecting"):
            raise self.lost(f"client {self.client.status}")
        now = time.monotonic()
        try:
            have = self.workers_of()
        except (OSError, WebDBError, FutureTimeout) as e:
            raise self.lost(type(e).__name__) from None
        for j, addrs in have.items():
            if addrs:
                self.missing_since.pop(j, None)
                continue
            since = self.missing_since.setdefault(j, now)
            if now - since > self.worker_timeout:
                label = self.rack.section_at[j]
                raise Failed(
                    f"section {j}: no worker declares resource section-{j} on {self.scheduler} for "
                    f"{self.worker_timeout:g}s (its worker was lost at or after {self.stage_of(j)}, the step after "
                    "the last one it reported, and did not come back)",
                    kind="WorkerLost",
                    label=label,
                )
        if now - self.last_progress > self.stage_timeout:
            raise Failed(f"no task finished for {self.stage_timeout:g}s (stage timeout)", kind="StageTimeout")
        if now - self.last_renew >= max(1.0, self.hb_timeout / 5):
            self.last_renew = now
            try:
                for label, j in self.leads.items():
                    if have.get(j):
                        self.client.run(
                            dasktasks.renew, self.rack.path(label), self.batch, workers=have[j], on_error="return"
                        )
            except (OSError, FutureTimeout, TimeoutError) as e:  # CommClosedError is an OSError
                raise self.lost(type(e).__name__) from None

    def wait(self, futures: dict, on_done: Callable[[object, object], None]) -> None:
        """Wait for every future of ``futures`` (key -> future; taken over: the dict is emptied,
        and a future is released once its result is read, so that a task whose result nobody
        needs any more is never run again); ``on_done(key, result)`` for each as it finishes;
        the first task error fails the run, naming what it was."""
        from distributed import wait
        from distributed.client import CancelledError, FuturesCancelledError

        pending = {f: key for key, f in futures.items()}
        futures.clear()  # only ``pending`` holds them: a finished one is released at once
        while pending:
            self.tick()
            try:
                with self.client.as_current():  # wait() finds its client there
                    done, _ = wait(list(pending), timeout=0.5, return_when="FIRST_COMPLETED")
            except (FutureTimeout, TimeoutError):
                continue
            except (FuturesCancelledError, CancelledError) as e:
                raise self.lost(type(e).__name__) from None
            for f in done:
                key = pending.pop(f)
                if f.status == "error":
                    e = f.exception(timeout=5)
                    kind = "BadInput" if isinstance(e, BadInput) else type(e).__name__
                    raise Failed(f"{f.key}: {type(e).__name__}: {e}", kind=kind, label=self.label_of(key))
                if f.status == "cancelled":
                    raise self.lost(f"{f.key} was cancelled")
                try:
                    # Bounded: the result may sit on a worker that just died (then Dask must
                    # compute it again, which ``tick`` watches), so never block here.
                    r = f.result(timeout=1)
                except (FutureTimeout, TimeoutError):
                    pending[f] = key
                    continue
                except (OSError, FuturesCancelledError, CancelledError) as e:
                    # The scheduler died while it sent this result (CommClosedError) or just
                    # before (the client cancels every future: "scheduler-connection-lost").
                    raise self.lost(type(e).__name__) from None
                self.last_progress = time.monotonic()
                on_done(key, r)
                del f  # released: a result the client holds would be recomputed after a worker dies

    def label_of(self, key) -> str | None:
        kind, x = key[0], key[1]
        return x if kind == "loc" else self.rack.section_at[x]

    def event(self, label: str, **ev) -> None:
        if self.progress is not None:
            self.progress({"host": label, **ev})

    def abort(self, reason: str) -> None:
        """Drop the leads' leases (removing the batch's files unless a manifest may be
        committed).  What has not started is dropped by the scheduler when the client closes;
        a task still running finishes, and what it writes the next update's sync removes."""
        if self.client is None or self.client.status != "running":
            return  # the scheduler is gone: the leases expire after the heartbeat timeout
        try:
            have = self.workers_of()
            for label, j in self.leads.items():
                if have.get(j):
                    self.client.run(
                        dasktasks.abort_location, self.rack.path(label), self.batch, workers=have[j], on_error="return"
                    )
        except (OSError, FutureTimeout, TimeoutError, WebDBError):
            pass  # the leases expire on their own after the heartbeat timeout

    def close(self) -> None:
        if self.client is not None:
            self.client.close(timeout=5)
            self.client = None
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)

    # -- the driver's requests ---------------------------------------------------------------

    def per_location(self, name: str, fn, *args, requests: dict | None = None) -> dict:
        """``fn(place, *args)`` on every location's lead (with ``requests``: those it names,
        the request as the last argument)."""
        fs = {}
        for label, place in self.places.items():
            if requests is not None and label not in requests:
                continue
            extra = (requests[label],) if requests is not None else ()
            fs[("loc", label)] = self.client.submit(
                fn,
                place,
                *args,
                *extra,
                key=f"webdb-{name}-{label.strip('/').replace('/', '_')}-{self.nonce}",
                resources=_resource(self.leads[label]),
                retries=0,
            )
        out = {}
        self.wait(fs, lambda key, r: out.__setitem__(key[1], r))
        return out

    def open(self, task: dict, probe: dict[str, list[str]]) -> dict[str, dict]:
        self.steps = task.get("steps")
        for label, place in self.places.items():
            place["probe"] = probe.get(label, [])
        hello = self.per_location("open", dasktasks.open_location, self.batch)
        for label, h in hello.items():
            self.hosts[label].hello = {k: h[k] for k in ("hostname", "python", "webdb", "pid", "worker", "compiled")}
            self.hosts[label].t0 = time.monotonic()
        return hello

    def sync(self, gen: int, manifest: Manifest) -> None:
        self.gen0, self.base = gen, manifest.to_json()
        self.per_location("sync", dasktasks.sync_location_task, self.batch, gen, self.base)

    def ask(self, requests: dict[str, dict]) -> dict[str, list[dict]]:
        self.n_ask += 1
        return self.per_location(
            f"step{self.n_ask}",
            dasktasks.step_location,
            self.batch,
            self.gen0,
            self.base,
            self.steps,
            requests=requests,
        )

    def prepare(self, manifest: Manifest) -> None:
        self.per_location("prepare", dasktasks.prepare_location, self.batch, self.gen0, manifest.to_json())

    def commit(self, label: str, manifest: Manifest) -> None:
        f = self.client.submit(
            dasktasks.commit_location,
            self.places[label],
            self.batch,
            self.gen0,
            manifest.to_json(),
            key=f"webdb-commit-{label.strip('/').replace('/', '_')}-{self.nonce}",
            resources=_resource(self.leads[label]),
            retries=0,
        )
        self.wait({("loc", label): f}, lambda key, r: None)

    def run(
        self, specs: dict[str, list[SectionSpec]], breakpoints: Callable[[dict[int, list[str]]], list[str]] | None
    ) -> dict[int, Prepared]:
        """The whole batch as one graph: the barrier between stages is the dependencies."""
        js = self.task_specs(specs)
        bps = None
        if breakpoints is not None:
            samples: dict[int, list[str]] = {}
            fs = {("sec", j): self.sub(dasktasks.sample_section, j, f"sample-section{j}", js[j]) for j in js}
            self.wait(fs, lambda key, r: samples.__setitem__(key[1], r))
            bps = breakpoints(samples)
        summaries = self.graph(js, bps)
        prepared: dict[int, Prepared] = {}
        ordered = {key: summaries[key] for key in sorted(summaries, key=lambda x: (x[2], x[1]))}
        summaries.clear()  # wait() holds the only references: each is released once read
        self.wait(ordered, lambda key, r: self.on_summary(key, r, prepared))
        return prepared

    def task_specs(self, specs: dict[str, list[SectionSpec]]) -> dict[int, dict]:
        """Every section's spec as its tasks' argument, with what Dask adds: where each section
        is, the batch's lease and, for a location's lead section, the location."""
        js: dict[int, dict] = {}
        for label, lst in specs.items():
            for spec in lst:
                lead = self.places[label] if spec.section == self.leads[label] else None
                js[spec.section] = replace(
                    spec, section_at=list(self.rack.section_at), lease=self.batch, lead=lead
                ).to_json()
        return js

    def sub(self, fn, j: int, name: str, *args):
        key = f"webdb-{name}-{self.nonce}"
        return self.client.submit(fn, *args, key=key, resources=_resource(j), retries=0)

    def graph(self, js: dict[int, dict], bps: list[str] | None) -> dict:
        """Submit step 0 and stages 1..5 of every section; the summaries to wait for."""
        k = self.rack.k
        full = {j: self.sub(dasktasks.step0_section, j, f"step0-section{j}", js[j], bps) for j in range(k)}
        summaries: dict = {}
        for stage in range(1, 6):
            picks = {
                (p, t): self.sub(dasktasks.pick_out, p, f"ship{stage - 1}-section{p}-to{t}", full[p], t)
                for p in range(k)
                for t in range(k)
            }
            for p in range(k):
                summaries[("sec", p, stage - 1)] = self.sub(
                    dasktasks.pick_state, p, f"done{stage - 1}-section{p}", full[p]
                )
            full = {
                j: self.sub(
                    dasktasks.stage_section,
                    j,
                    f"stage{stage}-section{j}",
                    js[j],
                    stage,
                    full[j],
                    [picks[(p, j)] for p in range(k)],
                )
                for j in range(k)
            }
        for j in range(k):
            summaries[("sec", j, 5)] = self.sub(dasktasks.pick_state, j, f"done5-section{j}", full[j])
        return summaries

    def on_summary(self, key, r: dict, prepared: dict[int, Prepared]) -> None:
        _, j, step = key
        label = self.rack.section_at[j]
        h = self.hosts[label]
        self.finished[j] = max(self.finished[j], step)
        h.steps[j] = min(self.finished[j] + 1, 5)  # where it is now
        if r.get("merged"):
            m = r["merged"]
            h.records += m["records"]
            self.event(
                label,
                ev="section",
                section=j,
                step=step,
                state="merged",
                **{x: m[x] for x in ("records", "bytes", "seconds")},
                **level_steps(m),
            )
        if r.get("shipped"):
            s = r["shipped"]
            h.bytes += s["bytes"]
            h.remote_bytes += s["remote_bytes"]
            fields = {x: s[x] for x in ("files", "bytes", "remote_bytes", "seconds")}
            self.event(label, ev="section", section=j, step=step, state="shipped", **fields)
        if step == 5:
            prepared[j] = Prepared.from_json({"section": j, **r["prepared"]})
            self.event(label, ev="prepared", section=j)


def connect(scheduler: str, connect_timeout: float = CONNECT_TIMEOUT):
    """A Dask client of ``scheduler``; DaskUnavailable naming it if it cannot be reached."""
    try:
        from distributed import Client
    except ImportError:
        raise DaskUnavailable("--dask needs the distributed package: pip install 'webdb[dask]'") from None
    try:
        return Client(scheduler, timeout=connect_timeout, set_as_default=False)
    except (OSError, TimeoutError, FutureTimeout) as e:
        raise DaskUnavailable(
            f"cannot reach the Dask scheduler {scheduler} within {connect_timeout:g}s ({type(e).__name__}: {e})"
        ) from None
