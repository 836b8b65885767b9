"""The update driver: one batch on every section of a rack, whatever carries it
(docs/distributed.md, *The driver and its transports*).

    open        every location takes its writer lock and says hello: protocol, identity,
                committed generation, its manifest, which named inputs it sees
    identity    every location holds the same db (name, created) and speaks this protocol
    generation  the rack's committed generation: the newest CURRENT anywhere (a location
                only flips after a master did, so a newer CURRENT means that commit happened)
    sync        every location rolled forward to that generation and recovered
    [task]      a task's requests between sync and batch (``Session.ask``: generate, rank, ...)
    inputs      each named input given to the sections that read it, once (``place_inputs``)
    run         every section's job on its host: input, routing, stages 1..5 through
                ``engine.run_stages``; a first batch's breakpoints chosen here from samples
    prepare     the batch's manifest (``batch_record``) written at every location
    commit      the masters flip CURRENT first — the first flip is the commit point — then
                the others; one that misses its flip is brought forward by the next sync

A ``Transport`` only carries these requests to the locations and reports back: the agents
(local processes or ssh, webdb.writer.coordinator) or Dask (webdb.writer.daskrun).  Every
failure reaches the driver as one ``Failed``; the driver words it, aborts the run and raises
UpdateFailed (or, past the commit point, returns with a warning).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from webdb.core.manifest import Manifest
from webdb.core.sections import Sections
from webdb.core.settings import Settings
from webdb.errors import BadInput
from webdb.ndfs import GroupResult
from webdb.util import faults
from webdb.writer.engine import batch_manifest, choose_sections
from webdb.writer.hosts import Placement, Rack
from webdb.writer.inputs import DEFAULT_INPUT
from webdb.writer.location import PROTOCOL
from webdb.writer.placing import place_inputs, probe_names
from webdb.writer.results import Failed, HostRun, UpdateResult, failure_line, host_results, stopped
from webdb.writer.spec import HEARTBEAT_TIMEOUT, STAGE_TIMEOUT, Options, Prepared, SectionInput, SectionSpec

__all__ = [
    "PROTOCOL",
    "Failed",
    "Session",
    "Transport",
    "batch_record",
    "section_specs",
    "update",
    "update_dask",
]


class Transport(Protocol):
    """Carries the driver's requests to the locations of a rack and reports back.  Every
    method raises ``Failed`` on any failure (naming the location where it knows it)."""

    hosts: dict[str, HostRun]

    def open(self, task: dict, probe: dict[str, list[str]]) -> dict[str, dict]:
        """Lock every location; its hello (``Location.hello``) by label."""
        ...

    def sync(self, gen: int, manifest: Manifest) -> None:
        """Roll every location forward to ``gen`` and recover it."""
        ...

    def ask(self, requests: dict[str, dict]) -> dict[str, list[dict]]:
        """Run a task's request at each named location; its reply parts."""
        ...

    def run(
        self, specs: dict[str, list[SectionSpec]], breakpoints: Callable[[dict[int, list[str]]], list[str]] | None
    ) -> dict[int, Prepared]:
        """Every section's job; the prepared record of each.  ``breakpoints`` (a first
        batch): called once with every section's URL sample, returns the breakpoints."""
        ...

    def prepare(self, manifest: Manifest) -> None:
        """Write the batch's manifest at every location."""
        ...

    def commit(self, label: str, manifest: Manifest) -> None:
        """Flip ``label``'s CURRENT to the manifest (written there by ``prepare``)."""
        ...

    def abort(self, reason: str) -> None:
        """Stop every location that still runs; each removes the batch's files unless a
        manifest may be committed."""
        ...

    def close(self) -> None:
        """Release every connection."""
        ...


class Session:
    """What a task run inside an update (``update(..., steps=, before_batch=)``) sees between
    the sync and the batch: the rack's committed generation and its manifest, with every
    location's writer lock held, and a request/reply exchange with the locations.

    At a location a request runs ``steps`` (``"module:function"``): ``fn(ctx, request)`` yields
    reply parts (dicts; keep each under a few MB).  ``ctx`` has the location's ``db``, ``path``,
    ``sections``, the committed ``manifest``, a ``scratch`` directory (removed with the batch's
    other files) and a ``state`` dict kept from one request to the next.
    """

    def __init__(
        self, rack: Rack, transport: Transport, generation: int, manifest: Manifest, steps: str | None
    ) -> None:
        self.rack, self._transport, self._steps = rack, transport, steps
        self.generation, self.manifest = generation, manifest

    def ask(self, request_for: Callable[[Placement], dict | None]) -> dict[str, list[dict]]:
        """Send ``request_for(place)`` to every location (None: not that one) and wait for all
        replies; returns each location's reply parts in order.  Raises on any failure."""
        if not self._steps:
            raise BadInput("a step request, but this update names no steps function")
        reqs = {label: request_for(p) for label, p in self.rack.places.items()}
        return self._transport.ask({label: r for label, r in reqs.items() if r is not None})


def update(
    rack: Rack,
    inputs: dict[int, dict] | None = None,
    *,
    names: list[str] | None = None,
    shares: bool = False,
    input_fn: str = DEFAULT_INPUT,
    options: dict | None = None,
    settings: dict | None = None,
    heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
    stage_timeout: float = STAGE_TIMEOUT,
    progress: Callable[[dict], None] | None = None,
    env: dict[str, str] | None = None,
    steps: str | None = None,
    before_batch: Callable[[Session], tuple[dict[int, dict], str] | None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    dask: str | None = None,
    **dask_options: float,
) -> UpdateResult:
    """Run one batch on every section of ``rack`` and commit it atomically.

    The input: ``names`` — paths as an operator types them (``HOST:PATH`` or a bare path,
    relative ones under ``<root>/<db>``), each read once (``place_inputs``); or ``inputs[j] =
    {"paths": [...], "options": {...}}``, what section j applies.  Either way through
    ``input_fn`` (``"module:function"``, webdb.writer.inputs) on the section's own host, with
    ``options``; ``shares``: the input function takes ``share`` (a location's sections split
    one input in ordered shares).  Raises UpdateFailed (naming host and stage) if anything
    fails; then nothing is committed and every location keeps its old generation.

    The transport: the Dask scheduler ``dask`` (default: hosts.ini's ``dask_scheduler``; with
    ``dask_options`` ``worker_timeout`` and ``connect_timeout``), else an agent per location.
    A task that reads the db before deciding its input (generate) passes ``before_batch``:
    called once every location is locked and synced, with a ``Session`` whose requests run
    ``steps``; it returns ``(inputs, input_fn)`` for the batch, or None to stop without one.
    ``clock`` measures silence against ``heartbeat_timeout`` (tests move it by hand).
    Cost: see docs/distributed.md, *Cost*.
    """
    opts = Options(heartbeat_timeout, stage_timeout, progress, dict(env or {}), clock)
    if os.environ.get("WEBDB_FAULTS") and "WEBDB_FAULTS" not in opts.env:
        opts.env["WEBDB_FAULTS"] = os.environ["WEBDB_FAULTS"]  # fault injection reaches every host
    transport = _transport(rack, dask if dask is not None else rack.config.dask_scheduler, opts, dask_options)
    run = _Drive(rack, transport, opts)
    try:
        return run.update(inputs, names, shares, input_fn, options or {}, settings or {}, steps, before_batch)
    finally:
        transport.close()


def update_dask(rack: Rack, scheduler: str, inputs: dict[int, dict] | None = None, **kw) -> UpdateResult:
    """``update`` on the Dask cluster ``scheduler`` (the same batch, manifest and commit; each
    section's steps run as tasks on the worker declaring ``section-J``).  Raises
    DaskUnavailable (before anything is written) if the scheduler cannot be reached or a
    section has no worker."""
    return update(rack, inputs, dask=scheduler, **kw)


def _transport(rack: Rack, scheduler: str | None, opts: Options, dask_options: dict) -> Transport:
    if scheduler:
        from webdb.writer.daskrun import DaskTransport

        return DaskTransport(rack, scheduler, opts, **dask_options)
    if dask_options:
        raise TypeError(f"update: {', '.join(dask_options)} apply only to a Dask run")
    from webdb.writer.coordinator import AgentTransport

    return AgentTransport(rack, opts)


class _Drive:
    """One update over one transport: the phases, in order, and the one failure path."""

    def __init__(self, rack: Rack, transport: Transport, opts: Options) -> None:
        self.rack, self.t, self.opts = rack, transport, opts
        self.res = UpdateResult(rack.db, GroupResult(f"update {rack.db}"))
        self.t0 = time.monotonic()

    def update(self, inputs, names, shares, input_fn, options, overrides, steps, before_batch) -> UpdateResult:
        try:
            gen0, base, identity, seen = self.open(steps, names)
            if before_batch is not None:
                got = before_batch(Session(self.rack, self.t, gen0, base, steps))
                if got is None:  # nothing to do: the locations unlock, nothing is committed
                    self.t.abort("nothing to do")
                    return self.finish()
                inputs, input_fn = got
            elif names is not None:
                inputs = self.place(names, seen, shares)
            settings = Settings.from_json(identity.get("settings")).replace(**overrides)
            self.batch(gen0, base, settings, inputs or {}, input_fn, options)
        except Failed as e:
            error = self.fail(e)
            self.t.abort(error)
            hosts = host_results(f"update {self.rack.db}", self.t.hosts, error, self.t0)
            return stopped(self.res, hosts, error, e.kind, self.t0)
        except BaseException:
            self.t.abort("interrupted")
            raise
        return self.finish()

    def place(self, names: list[str], seen: dict | None, shares: bool = False) -> Any:
        """``place_inputs`` (``seen`` None: ``probe_names``), its BadInput a failed run's."""
        try:
            return probe_names(self.rack, names) if seen is None else place_inputs(self.rack, names, seen, shares)
        except BadInput as e:
            raise Failed(str(e), kind="BadInput") from None

    def finish(self) -> UpdateResult:
        self.res.hosts = host_results(f"update {self.rack.db}", self.t.hosts, None, self.t0)
        self.res.seconds = time.monotonic() - self.t0
        return self.res

    def fail(self, e: Failed) -> str:
        return failure_line(self.t.hosts, e)

    def warn(self, message: str) -> None:
        """A warning in the summary, and at once in the progress."""
        self.res.warnings.append(message)
        if self.opts.progress is not None:
            self.opts.progress({"host": "-", "ev": "warning", "message": message})

    def event(self, label: str, **ev: object) -> None:
        if self.opts.progress is not None:
            self.opts.progress({"host": label, **ev})

    def open(self, steps: str | None, names: list[str] | None) -> tuple[int, Manifest, dict, dict]:
        """Lock every location, check they hold one db, sync them to the rack's committed
        generation.  Returns (generation, its manifest, the identity, inputs seen)."""
        rack = self.rack
        task = {"task": "update", "db": rack.db, **({"steps": steps} if steps else {})}
        hello = self.t.open(task, self.place(names or [], None))
        for label, h in hello.items():
            if h.get("protocol") != PROTOCOL:
                raise Failed(
                    f"runs webdb {h.get('version')} (protocol {h.get('protocol')}), this is protocol "
                    f"{PROTOCOL}: deploy the same version everywhere (fab deploy)",
                    label=label,
                    kind="BadInput",
                )
        first = hello[next(iter(hello))]["identity"]
        for label, h in hello.items():
            if (h["identity"].get("name"), h["identity"].get("created")) != (first.get("name"), first.get("created")):
                why = f"its {rack.db} is a different database (created {h['identity'].get('created')})"
                raise Failed(why, label=label, kind="BadInput")
        slow = [label for label, h in hello.items() if h.get("compiled") is False]
        if slow:
            self.warn(
                f"{', '.join(slow)} run{'s' if len(slow) == 1 else ''} the pure-Python block codec (the C "
                "extensions webdb.tables._blockc and webdb.writer._stagesc are not both importable there): "
                "merges are several times slower; fab deploy builds them on each host"
            )
        gen0 = max(h["committed"] for h in hello.values())
        base = Manifest.from_json(next(h["manifest"] for h in hello.values() if h["committed"] == gen0))
        if base.sections.k != rack.k:
            why = f"the db has {base.sections.k} sections, {rack.config.source} says {rack.k}"
            raise Failed(why, label=next(iter(hello)), kind="BadInput")
        self.t.sync(gen0, base)
        for label, h in self.t.hosts.items():
            h.state = "synced"
            self.event(label, ev="synced")
        return gen0, base, first, {label: h.get("inputs") or {} for label, h in hello.items()}

    def batch(self, gen0: int, base: Manifest, settings: Settings, inputs: dict, input_fn: str, options: dict) -> None:
        rack, res = self.rack, self.res
        gen = gen0 + 1
        res.generation, res.batch = gen, f"{gen:08d}-{os.urandom(4).hex()}"
        specs = {
            label: section_specs(
                rack, label, base, res.batch, gen, settings, inputs, input_fn, options, self.opts.stage_timeout
            )
            for label in rack.places
        }
        for h in self.t.hosts.values():
            h.state = "running"
        ready = base.sections.ready
        prepared = self.t.run(specs, None if ready else self.breakpoints)
        manifest = batch_record(rack, base, gen, res.batch, prepared)
        res.manifest, res.shipped = manifest, manifest.distributed["shipped"]
        for h in self.t.hosts.values():
            h.state = "prepare"
        self.t.prepare(manifest)
        for label in self.t.hosts:
            self.event(label, ev="ready")
        self.commit(manifest)

    def breakpoints(self, samples: dict[int, list[str]]) -> list[str]:
        """A first batch: the rack's breakpoints from every section's URL sample."""
        k = self.rack.k
        return choose_sections(([u.encode("utf-8") for u in samples[j]] for j in range(k)), k).to_json()["breakpoints"]

    def commit(self, manifest: Manifest) -> None:
        """Phase 2: the masters flip CURRENT first; the first master's flip is the commit
        point.  After it, a location that fails to flip is a warning, not a failure: the next
        update's sync brings it forward; until then its readers see the previous generation."""
        masters = [label for label, p in self.rack.places.items() if p.master]
        faults.point("dist.coordinator.before_commit")
        for label in masters:
            self.commit_one(label, manifest)
            self.res.committed = True
        faults.point("dist.coordinator.after_master_commit")
        for label in [x for x in self.rack.places if x not in masters]:
            try:
                self.commit_one(label, manifest)
            except Failed as e:
                self.fail(e)
                late = e.label or label
                self.warn(
                    f"{late} did not confirm the commit ({self.t.hosts[late].error or e.why}); "
                    "the next update brings it forward"
                )

    def commit_one(self, label: str, manifest: Manifest) -> None:
        h = self.t.hosts[label]
        h.state = "commit"
        self.t.commit(label, manifest)
        h.state, h.t1 = "committed", time.monotonic()
        self.event(label, ev="committed", generation=manifest.generation)


def section_specs(
    rack: Rack,
    label: str,
    base: Manifest,
    batch: str,
    gen: int,
    settings: Settings,
    inputs: dict,
    input_fn: str,
    options: dict,
    stage_timeout: float,
) -> list[SectionSpec]:
    """The specs of the section writers at location ``label`` (every transport): what section
    j applies and where, the base tables, and the settings with ``memory_mb`` divided among
    the location's sections."""
    p = rack.places[label]
    n = max(1, len(p.sections))
    local = settings.replace(memory_mb=max(64, int(settings.memory_mb) // n))
    return [
        SectionSpec(
            section=j,
            k=rack.k,
            host=label,
            db=rack.db,
            path=rack.path(label),
            root=p.root,
            local_host=p.location.host.name if p.location.host else None,
            ini=rack.ini,
            config=rack.config.to_json() if rack.ini is None else None,
            ini_source=rack.config.source,
            base_dir=rack.base_dir,
            batch=batch,
            gen=gen,
            sections=base.sections,
            tables=base.tables,
            status=base.status,
            settings=local,
            input=SectionInput(
                fn=input_fn,
                paths=list((inputs.get(j) or {}).get("paths") or []),
                options={**options, **((inputs.get(j) or {}).get("options") or {})},
            ),
            stage_timeout=stage_timeout,
        )
        for j in p.sections
    ]


def batch_record(rack: Rack, base: Manifest, gen: int, batch: str, prepared: dict[int, Prepared]) -> Manifest:
    """The batch's manifest from every section's prepared record (the local writer builds
    the same one, without ``distributed``)."""
    parts = [prepared[j] for j in range(rack.k)]
    shipped = []
    for step in range(0, 5):
        rows = [x for p in parts for x in p.shipped if x["step"] == step]
        shipped.append(
            {
                "step": step,
                "files": sum(r["files"] for r in rows),
                "bytes": sum(r["bytes"] for r in rows),
                "remote_bytes": sum(r["remote_bytes"] for r in rows),
                "seconds": max((r["seconds"] for r in rows), default=0.0),
            }
        )
    return batch_manifest(
        base,
        gen,
        batch,
        Sections.from_json(parts[0].sections),
        [p.tables for p in parts],
        [p.status for p in parts],
        {x: sum(p.api[x] for p in parts) for x in ("pages", "links")},
        [row for p in parts for row in p.stages],
        distributed={
            "hosts": {lab: p.sections for lab, p in rack.places.items()},
            "shipped": shipped,
            "input": {str(p.section): p.input for p in parts},
            "section_seconds": [p.seconds for p in parts],
            "section_cpu_seconds": [p.cpu_seconds for p in parts],
            "step0": [p.step0 for p in parts],
        },
    )
