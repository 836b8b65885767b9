"""The Dask transport of the section protocol (docs/distributed.md, *Dask*): one update run on
an existing Dask cluster instead of agents over SSH.  The tasks are webdb.writer.dasktasks.

Every section's work of every step is one task, pinned to the worker that declares the
resource ``section-J`` (``dask worker --resources section-J=1``); the task graph is the
barrier between stages::

    open/sync (per location, on its lead worker)     lock, hello, roll forward + recover
    step0-section-J        input applied, routed     -> edits for every target
    ship0-section-P-to-T   P's step-0 edits for T    (a task on P's worker: T fetches only its part)
    stage1-section-J       ship0-*-to-J written (SHA-256 checked), stage 1 merged -> edits
    ...                    stage5-section-J: the section's prepared record
    prepare / commit       webdb's two-phase commit, per location, on its lead worker

The coordinator builds the manifest (``batch_record``, as for SSH), writes it everywhere
(prepare), then flips the masters' CURRENT first: the first master's flip is the commit point,
exactly as with SSH, so a failure at any point is recovered by the next update's sync.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout

from webdb import _fault
from webdb.errors import BadInput, WebDBError
from webdb.ndfs import GroupResult
from webdb.sections import Sections
from webdb.settings import resolve
from webdb.writer import dasktasks as T
from webdb.writer.coordinator import HEARTBEAT_TIMEOUT, STAGE_TIMEOUT, batch_record, section_specs
from webdb.writer.engine import choose_sections
from webdb.writer.hosts import Rack
from webdb.writer.inputs import DEFAULT_INPUT
from webdb.writer.results import UpdateResult, _Host, host_results, stopped

__all__ = ["CONNECT_TIMEOUT", "WORKER_TIMEOUT", "DaskUnavailable", "connect", "update_dask"]

# Defaults (seconds): reaching the scheduler; how long a section may have no worker (its
# worker died and its nanny has not brought it back) before the update fails.
CONNECT_TIMEOUT = 10.0
WORKER_TIMEOUT = 60.0


class DaskUnavailable(BadInput):
    """The scheduler cannot be reached, or no worker declares a section's resource."""


class _Failed(Exception):
    """Unwinds to the abort path; the message names section, stage or location."""

    def __init__(self, message: str, kind: str | None = None, label: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.label = kind, label


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


class _DaskRun:
    def __init__(
        self,
        rack: Rack,
        scheduler: str,
        client,
        hb_timeout: float,
        stage_timeout: float,
        worker_timeout: float,
        progress: Callable[[dict], None] | None,
    ) -> None:
        self.rack, self.scheduler, self.client = rack, scheduler, client
        self.hb_timeout, self.stage_timeout, self.worker_timeout = hb_timeout, stage_timeout, worker_timeout
        self.progress = progress
        self.hosts = {label: _Host(p) for label, p in rack.places.items()}
        self.t0 = time.monotonic()
        self.batch = ""
        self.leads = _leads(rack)
        self.missing_since: dict[int, float] = {}
        self.last_renew = 0.0
        self.last_progress = time.monotonic()
        self.error: str | None = None

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

    def tick(self, stage_of: Callable[[int], str]) -> None:
        """Between waits: the scheduler is there, every section has its worker (or has had one
        within ``worker_timeout``), something progressed within ``stage_timeout``; renew leases."""
        if self.client.status not in ("running", "connecting"):
            raise _Failed(f"lost the Dask scheduler {self.scheduler} (client {self.client.status})")
        now = time.monotonic()
        try:
            have = self.workers_of()
        except (OSError, WebDBError, FutureTimeout) as e:
            raise _Failed(f"lost the Dask scheduler {self.scheduler}: {type(e).__name__}: {e}") from None
        for j, addrs in have.items():
            if addrs:
                self.missing_since.pop(j, None)
                continue
            since = self.missing_since.setdefault(j, now)
            if now - since > self.worker_timeout:
                label = self.rack.section_at[j]
                raise _Failed(
                    f"section {j}: no worker declares resource section-{j} on {self.scheduler} for "
                    f"{self.worker_timeout:g}s (its worker was lost at or after {stage_of(j)}, the step after "
                    "the last one it reported, and did not come back)",
                    "WorkerLost",
                    label,
                )
        if now - self.last_progress > self.stage_timeout:
            raise _Failed(f"no task finished for {self.stage_timeout:g}s (stage timeout)", "StageTimeout")
        if self.batch and now - self.last_renew >= max(1.0, self.hb_timeout / 5):
            self.last_renew = now
            for label, j in self.leads.items():
                addrs = have.get(j) or []
                if addrs:
                    self.client.run(T.renew, self.rack.path(label), self.batch, workers=addrs, on_error="return")

    def wait(self, futures: dict, on_done: Callable[[object, object], None], stage_of: Callable[[int], str]) -> None:
        """Wait for every future of ``futures`` (key -> future; taken over: the dict is emptied,
        and a future is released once its result is read, so that a task whose result nobody
        needs any more is never run again); ``on_done(key, result)`` for each as it finishes;
        the first task error fails the run, naming what it was."""
        from distributed import wait
        from distributed.client import CancelledError, FuturesCancelledError

        pending = {f: key for key, f in futures.items()}
        futures.clear()  # only ``pending`` holds them: a finished one is released at once
        while pending:
            self.tick(stage_of)
            try:
                with self.client.as_current():  # wait() finds its client there
                    done, _ = wait(list(pending), timeout=0.5, return_when="FIRST_COMPLETED")
            except (FutureTimeout, TimeoutError):
                continue
            except (FuturesCancelledError, CancelledError) as e:
                why = str(e).strip().splitlines()
                raise _Failed(
                    f"lost the Dask scheduler {self.scheduler} ({why[0] if why else type(e).__name__})"
                ) from None
            for f in done:
                key = pending.pop(f)
                if f.status == "error":
                    e = f.exception(timeout=5)
                    kind = "BadInput" if isinstance(e, BadInput) else type(e).__name__
                    raise _Failed(f"{f.key}: {type(e).__name__}: {e}", kind, self.label_of(key))
                if f.status == "cancelled":
                    raise _Failed(f"{f.key} was cancelled: lost the Dask scheduler {self.scheduler}?")
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
                    why = str(e).strip().splitlines()
                    raise _Failed(
                        f"lost the Dask scheduler {self.scheduler} ({why[0] if why else type(e).__name__})"
                    ) from None
                self.last_progress = time.monotonic()
                on_done(key, r)
                del f  # released: a result the client holds would be recomputed after a worker dies

    def label_of(self, key) -> str | None:
        kind, x = key[0], key[1]
        return x if kind == "loc" else self.rack.section_at[x]

    def event(self, label: str, **ev) -> None:
        if self.progress is not None:
            self.progress({"host": label, **ev})

    def abort(self) -> None:
        """Drop the leads' leases (removing the batch's files unless a manifest may be
        committed).  What has not started is dropped by the scheduler when the client closes;
        a task still running finishes, and what it writes the next update's sync removes."""
        if self.client.status != "running" or not self.batch:
            return  # the scheduler is gone: the leases expire after the heartbeat timeout
        try:
            have = self.workers_of()
            for label, j in self.leads.items():
                if have.get(j):
                    self.client.run(
                        T.abort_location, self.rack.path(label), self.batch, workers=have[j], on_error="return"
                    )
        except (OSError, FutureTimeout, TimeoutError, WebDBError) as e:
            # The leases expire on their own after the heartbeat timeout.
            self.error = f"{self.error} (abort: {type(e).__name__}: {e})"


class DaskSession:
    """``coordinator.Session`` on Dask: between sync and batch, with every location locked,
    ``ask`` runs the update's ``steps`` function on each chosen location's lead worker."""

    def __init__(self, run: _DaskRun, generation: int, manifest: dict, places: dict, per_location, steps) -> None:
        self.rack = run.rack
        self.generation, self.manifest = generation, manifest
        self._run, self._places, self._per_location, self._steps = run, places, per_location, steps
        self._n = 0

    def ask(self, request_for: Callable) -> dict[str, list[dict]]:
        """Send ``request_for(place)`` to every location (None: not that one); their reply parts."""
        if not self._steps:
            raise BadInput("a step request, but this update names no steps function")
        self._n += 1
        reqs = {label: request_for(self.rack.places[label]) for label in self._places}
        chosen = {label: r for label, r in reqs.items() if r is not None}
        return self._per_location(
            f"step{self._n}",
            T.step_location,
            self._run.batch,
            self.generation,
            self.manifest,
            self._steps,
            requests=chosen,
        )


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


def update_dask(
    rack: Rack,
    scheduler: str,
    inputs: dict[int, dict] | None = None,
    *,
    input_fn: str = DEFAULT_INPUT,
    options: dict | None = None,
    settings: dict | None = None,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    stage_timeout: float = STAGE_TIMEOUT,
    worker_timeout: float = WORKER_TIMEOUT,
    connect_timeout: float = CONNECT_TIMEOUT,
    progress: Callable[[dict], None] | None = None,
    steps: str | None = None,
    before_batch: Callable[[DaskSession], tuple[dict[int, dict], str] | None] | None = None,
) -> UpdateResult:
    """``webdb.writer.rack.update`` on a Dask cluster: the same batch, manifest and commit;
    each section's steps run as tasks on the worker declaring ``section-J``.

    Raises DaskUnavailable (before anything is written) if the scheduler cannot be reached or a
    section has no worker; UpdateFailed (naming section, stage or location) if the run fails —
    then nothing is committed and the next update recovers every location.
    ``worker_timeout``: how long a section may be without its worker (a nanny restarting it).
    ``steps`` / ``before_batch``: a task that reads the db first (generate), as for ``update``;
    its requests run as tasks on each location's lead worker."""
    _leads(rack)  # a location no worker could serve fails before connecting
    client = connect(scheduler, connect_timeout)
    run = _DaskRun(rack, scheduler, client, heartbeat_timeout, stage_timeout, worker_timeout, progress)
    res = UpdateResult(rack.db, GroupResult(f"update {rack.db}"))
    try:
        run.check_workers()
        _run(run, res, inputs or {}, input_fn, options or {}, settings or {}, stage_timeout, steps, before_batch)
    except _Failed as e:
        run.error = str(e)
        if e.label is not None and e.label in run.hosts:
            run.hosts[e.label].error = str(e)
        run.abort()
        return stopped(res, host_results(f"update {rack.db}", run.hosts, run.error, run.t0), run.error, e.kind, run.t0)
    except BaseException:
        run.abort()
        raise
    finally:
        client.close(timeout=5)
    res.hosts = host_results(f"update {rack.db}", run.hosts, None, run.t0)
    res.seconds = time.monotonic() - run.t0
    return res


def _run(
    run: _DaskRun,
    res: UpdateResult,
    inputs: dict,
    input_fn: str,
    options: dict,
    overrides: dict,
    stage_timeout: float,
    steps: str | None = None,
    before_batch: Callable | None = None,
) -> None:
    rack, client = run.rack, run.client
    nonce = os.urandom(4).hex()
    places = {
        label: {
            "label": label,
            "path": rack.path(label),
            "sections": p.sections,
            "heartbeat_timeout": run.hb_timeout,
        }
        for label, p in rack.places.items()
    }
    run.batch = f"open-{nonce}"
    finished: dict[int, int] = {j: -1 for j in range(rack.k)}  # section -> the last step it finished

    def stage_of(j: int) -> str:
        at = finished[j] + 1
        return "step 0 (input and routing)" if at == 0 else f"stage {at}" if at <= 5 else "commit"

    def per_location(name: str, fn, *args, requests: dict | None = None) -> dict:
        """``fn(place, *args)`` on every location's lead (with ``requests``: those it names,
        the request as the last argument)."""
        fs = {}
        for label, place in places.items():
            if requests is not None and label not in requests:
                continue
            j = run.leads[label]
            extra = (requests[label],) if requests is not None else ()
            f = client.submit(
                fn,
                place,
                *args,
                *extra,
                key=f"webdb-{name}-{label.strip('/').replace('/', '_')}-{nonce}",
                resources=_resource(j),
                retries=0,
            )
            fs[("loc", label)] = f
        out = {}
        run.wait(fs, lambda key, r: out.__setitem__(key[1], r), stage_of)
        return out

    # Open: every lead takes its location's lock (the lease lives under the batch id below).
    gen_probe = per_location("open", T.open_location, run.batch)
    for label, h in gen_probe.items():
        run.hosts[label].hello = {k: h[k] for k in ("hostname", "python", "webdb", "pid", "worker")}
        run.hosts[label].t0 = time.monotonic()
    first = next(iter(gen_probe.values()))
    for label, h in gen_probe.items():
        if (h["identity"].get("name"), h["identity"].get("created")) != (
            first["identity"].get("name"),
            first["identity"].get("created"),
        ):
            raise _Failed(f"{label}: its {rack.db} is a different database", "BadInput", label)
    gen0 = max(h["committed"] for h in gen_probe.values())
    base = next(h["manifest"] for h in gen_probe.values() if h["committed"] == gen0)
    if Sections.from_json(base["sections"]).k != rack.k:
        raise _Failed(f"the db has {base['sections']['k']} sections, {rack.config.source} says {rack.k}", "BadInput")
    per_location("sync", T.sync_location_task, run.batch, gen0, base)
    for label in places:
        run.hosts[label].state = "synced"
        run.event(label, ev="synced")

    if before_batch is not None:
        got = before_batch(DaskSession(run, gen0, base, places, per_location, steps))
        if got is None:  # nothing to do: unlock, remove what the task left, commit nothing
            run.abort()
            return
        inputs, input_fn = got
    settings = resolve(first["identity"].get("settings"), **overrides)
    gen = gen0 + 1
    batch = run.batch  # the leases' batch id; the edit files' batch names the generation
    edits_batch = f"{gen:08d}-{nonce}"
    res.generation, res.batch = gen, edits_batch
    specs: dict[int, dict] = {}
    for label in places:
        for spec in section_specs(
            rack, label, base, edits_batch, gen, settings, inputs, input_fn, options, stage_timeout
        ):
            spec["section_at"] = rack.section_at
            if spec["section"] == run.leads[label]:
                spec["lead"] = places[label]
            specs[spec["section"]] = spec
        run.hosts[label].state = "running"
    for spec in specs.values():
        spec["lease"] = batch

    def sub(fn, j: int, name: str, *args):
        return client.submit(fn, *args, key=f"webdb-{name}-{edits_batch}", resources=_resource(j), retries=0)

    bps = None
    if not Sections.from_json(base["sections"]).ready:
        samples: dict[int, list[str]] = {}
        fs = {("sec", j): sub(T.sample_section, j, f"sample-section{j}", specs[j]) for j in range(rack.k)}
        run.wait(fs, lambda key, r: samples.__setitem__(key[1], r), stage_of)
        secs = choose_sections(([u.encode("utf-8") for u in samples[j]] for j in range(rack.k)), rack.k)
        bps = secs.to_json()["breakpoints"]

    # The whole batch as one graph: the barrier between stages is the dependencies.
    k = rack.k
    full = {j: sub(T.step0_section, j, f"step0-section{j}", specs[j], bps) for j in range(k)}
    summaries: dict = {}
    for stage in range(1, 6):
        picks = {
            (p, t): sub(T.pick_out, p, f"ship{stage - 1}-section{p}-to{t}", full[p], t)
            for p in range(k)
            for t in range(k)
        }
        for p in range(k):
            summaries[("sec", p, stage - 1)] = sub(T.pick_state, p, f"done{stage - 1}-section{p}", full[p])
        full = {
            j: sub(
                T.stage_section,
                j,
                f"stage{stage}-section{j}",
                specs[j],
                stage,
                full[j],
                [picks[(p, j)] for p in range(k)],
            )
            for j in range(k)
        }
    for j in range(k):
        summaries[("sec", j, 5)] = sub(T.pick_state, j, f"done5-section{j}", full[j])
    del full, picks

    prepared: dict[int, dict] = {}

    def on_summary(key, r: dict) -> None:
        _, j, step = key
        label = rack.section_at[j]
        h = run.hosts[label]
        finished[j] = max(finished[j], step)
        h.steps[j] = min(finished[j] + 1, 5)  # where it is now
        if r.get("merged"):
            m = r["merged"]
            h.records += m["records"]
            run.event(
                label,
                ev="section",
                section=j,
                step=step,
                state="merged",
                records=m["records"],
                bytes=m["bytes"],
                seconds=m["seconds"],
            )
        if r.get("shipped"):
            s = r["shipped"]
            h.bytes += s["bytes"]
            h.remote_bytes += s["remote_bytes"]
            run.event(
                label,
                ev="section",
                section=j,
                step=step,
                state="shipped",
                **{x: s[x] for x in ("files", "bytes", "remote_bytes", "seconds")},
            )
        if step == 5:
            prepared[j] = {"section": j, **r["prepared"]}
            run.event(label, ev="prepared", section=j)

    ordered = {key: summaries[key] for key in sorted(summaries, key=lambda x: (x[2], x[1]))}
    summaries.clear()  # wait() holds the only references: each is released once read
    run.wait(ordered, on_summary, stage_of)

    manifest = batch_record(rack, base, gen, edits_batch, prepared)
    res.manifest = manifest
    res.shipped = manifest["distributed"]["shipped"]
    for label in places:
        run.hosts[label].state = "prepare"
    per_location("prepare", T.prepare_location, batch, gen0, manifest)
    for label in places:
        run.event(label, ev="ready")

    # Phase 2: the masters flip CURRENT first; the first master's flip is the commit point.
    _fault.point("dist.coordinator.before_commit")
    masters = [label for label, p in rack.places.items() if p.master]
    for label in masters:
        _commit_one(run, places[label], batch, gen0, manifest, stage_of, nonce)
        res.committed = True
    _fault.point("dist.coordinator.after_master_commit")
    for label in [x for x in places if x not in masters]:
        try:
            _commit_one(run, places[label], batch, gen0, manifest, stage_of, nonce)
        except _Failed as e:
            # Committed already: the next update's sync brings this location forward.
            run.hosts[label].error = str(e)
            res.warnings.append(f"{label} did not confirm the commit ({e}); the next update brings it forward")


def _commit_one(run: _DaskRun, place: dict, batch: str, gen0: int, manifest: dict, stage_of, nonce: str) -> None:
    label = place["label"]
    h = run.hosts[label]
    h.state = "commit"
    f = run.client.submit(
        T.commit_location,
        place,
        batch,
        gen0,
        manifest,
        key=f"webdb-commit-{label.strip('/').replace('/', '_')}-{nonce}",
        resources=_resource(run.leads[label]),
        retries=0,
    )
    run.wait({("loc", label): f}, lambda key, r: None, stage_of)
    h.state = "committed"
    h.t1 = time.monotonic()
    run.event(label, ev="committed", generation=manifest["generation"])
