"""The coordinator of a distributed update (docs/distributed.md): starts one agent per
location (webdb.writer.hosts), watches their liveness, chooses the first batch's breakpoints,
builds the batch's manifest (webdb.writer.engine.batch_manifest) and runs the two-phase commit.
Results: webdb.writer.results.  Public entry points are re-exported by webdb.writer.rack.

Over 500 lines on purpose: one state machine (the run's event pump, its liveness checks and the
phases that drive it) that reads best in one place.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from webdb import _fault
from webdb.db import identity
from webdb.errors import BadInput, WebDBError
from webdb.ndfs import GroupResult
from webdb.sections import Sections
from webdb.settings import resolve
from webdb.writer.distributed import HEARTBEAT, PROTOCOL
from webdb.writer.engine import batch_manifest, choose_sections
from webdb.writer.hosts import Placement, Rack, _LocalLink, _SSHLink
from webdb.writer.inputs import DEFAULT_INPUT
from webdb.writer.results import UpdateFailed, UpdateResult, _Host, host_results, stopped

__all__ = [
    "HEARTBEAT_TIMEOUT",
    "STAGE_TIMEOUT",
    "Session",
    "batch_record",
    "create_rack",
    "parse_inputs",
    "section_specs",
    "update",
]

# Defaults of the liveness bounds (seconds); both are options of update().
HEARTBEAT_TIMEOUT = 30.0
STAGE_TIMEOUT = 3600.0


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rack = rack
        self.hb_timeout = heartbeat_timeout
        self.clock = clock  # what silence is measured with (tests move it by hand)
        self.progress = progress
        self.env = dict(env or {})
        if os.environ.get("WEBDB_FAULTS") and "WEBDB_FAULTS" not in self.env:
            self.env["WEBDB_FAULTS"] = os.environ["WEBDB_FAULTS"]  # fault injection reaches every agent
        self.q: queue.Queue = queue.Queue()
        self.hosts = {label: _Host(p) for label, p in rack.places.items()}
        self.t0 = time.monotonic()
        self.last_ping = 0.0
        self.ping_n = 0
        # An open liveness round: (ping number, its clock time, the hosts silent when it began).
        self.round: tuple[int, float, list[str]] | None = None
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
                return
            h.link.last_seen = self.clock()

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
            if time.monotonic() - self.last_ping >= HEARTBEAT:
                self.ping()  # keeps the agents' own coordinator-silence check quiet
            try:
                label, obj = self.q.get(timeout=0.1)
            except queue.Empty:
                label = None
            now = self.clock()
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
                if ev == "hb":
                    h.link.answered = max(h.link.answered, obj.get("n", 0))
                else:
                    self.track(h, obj)
                    on_event(label, obj)
                    if self.progress is not None:
                        self.progress({"host": label, **obj})
            self.check_liveness(now)

    def ping(self) -> int:
        """Ping every live agent; each answers with an ``hb`` carrying the ping's number."""
        self.last_ping = time.monotonic()
        self.ping_n += 1
        for h in self.hosts.values():
            if h.link is not None and not h.link.done:
                h.link.send({"cmd": "ping", "n": self.ping_n})
        return self.ping_n

    def check_liveness(self, now: float) -> None:
        """A host silent for ``hb_timeout`` (by ``clock``) fails the run, once a ping round
        shows that the others still answer: a round opens with a ping to all; a host silent at
        its start that has not answered it fails as soon as another host has, or when nobody
        has for 3 heartbeats.  So a coordinator that was itself stalled (a loaded machine, a
        suspended laptop) does not blame a healthy host; messages a hung host sent before it
        froze do not count as answers."""
        live = {lab: h for lab, h in self.hosts.items() if h.link is not None and not h.link.done}
        if self.round is None:
            silent = [lab for lab, h in live.items() if now - h.link.last_seen > self.hb_timeout]
            if silent:
                self.round = (self.ping(), now, silent)
            return
        n, start, suspects = self.round
        missing = [lab for lab in suspects if lab in live and live[lab].link.answered < n]
        if not missing:
            self.round = None
            return
        if any(h.link.answered >= n for h in live.values()) or now - start > 3 * HEARTBEAT:
            lab = min(missing, key=lambda x: live[x].link.last_seen)  # the longest silent
            live[lab].link.done = live[lab].link.dead = True
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
        return host_results(what, self.hosts, self.error, self.t0)


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
    clock: Callable[[], float] = time.monotonic,
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
    ``clock`` measures the agents' silence against ``heartbeat_timeout`` (docs/distributed.md,
    *Failures*); tests pass one they move by hand.  Cost: see docs/distributed.md, *Cost*.
    """
    run = _Run(rack, heartbeat_timeout=heartbeat_timeout, progress=progress, env=env, clock=clock)
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
        return stopped(res, run.results(f"update {rack.db}"), run.error, run.kind, run.t0)
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
        specs = section_specs(rack, label, base, batch, gen, settings, inputs, input_fn, options, stage_timeout)
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
                secs = choose_sections(([u.encode("utf-8") for u in s] for s in samples.values()), rack.k)
                chosen = secs.to_json()["breakpoints"]
                for h in run.hosts.values():
                    if h.place.sections:
                        h.link.send({"cmd": "breakpoints", "breakpoints": chosen})
        elif o["ev"] == "prepared":
            prepared[o["section"]] = o["result"]
            if set(run.hosts[label].place.sections) <= set(prepared):
                run.hosts[label].state = "prepared"

    run.pump(lambda: len(prepared) == rack.k, on_run)

    manifest = batch_record(rack, base, gen, batch, prepared)
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


def section_specs(
    rack: Rack,
    label: str,
    base: dict,
    batch: str,
    gen: int,
    settings: dict,
    inputs: dict,
    input_fn: str,
    options: dict,
    stage_timeout: float,
) -> list[dict]:
    """The specs of the section writers at location ``label`` (every transport): what section
    j applies and where, the base tables, and the settings with ``memory_mb`` divided among
    the location's sections."""
    p = rack.places[label]
    n = max(1, len(p.sections))
    local = dict(settings, memory_mb=max(64, int(settings["memory_mb"]) // n))
    return [
        {
            "section": j,
            "k": rack.k,
            "host": label,
            "db": rack.db,
            "path": rack.path(label),
            "root": p.root,
            "local_host": p.location.host.name if p.location.host else None,
            **({"ini": rack.ini} if rack.ini is not None else {"config": rack.config.to_json()}),
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


def batch_record(rack: Rack, base: dict, gen: int, batch: str, prepared: dict[int, dict]) -> dict:
    """The batch's manifest from every section's prepared record (the local writer builds
    the same one, without ``distributed``)."""
    k = rack.k
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
    return batch_manifest(
        base,
        gen,
        batch,
        Sections.from_json(prepared[0]["sections"]),
        [prepared[j]["tables"] for j in range(k)],
        [prepared[j]["status"] for j in range(k)],
        {x: sum(prepared[j]["api"][x] for j in range(k)) for x in ("pages", "links")},
        [row for j in range(k) for row in prepared[j]["stages"]],
        distributed={
            "hosts": {lab: p.sections for lab, p in rack.places.items()},
            "shipped": shipped,
            "input": {str(j): prepared[j]["input"] for j in range(k)},
            "section_seconds": [prepared[j]["seconds"] for j in range(k)],
            "section_cpu_seconds": [prepared[j]["cpu_seconds"] for j in range(k)],
            "step0": [prepared[j]["step0"] for j in range(k)],
        },
    )


def create_rack(
    rack: Rack, *, heartbeat_timeout: float = HEARTBEAT_TIMEOUT, env: dict[str, str] | None = None, **settings: Any
) -> GroupResult:
    """Create an empty k-section db on every location of ``rack`` (k = hosts.ini's count):
    identity, generation 0 and CURRENT everywhere, section j's directory where it lives.

    Returns per-host results; raises UpdateFailed if a location failed (rerunning is safe)."""
    resolve(None, **settings)  # unknown or bad settings fail here, before any host is touched
    ident = identity(rack.db, settings)
    run = _Run(rack, heartbeat_timeout=heartbeat_timeout, progress=None, env=env)
    created: set[str] = set()

    def on(label: str, o: dict) -> None:
        if o["ev"] == "created":
            created.add(label)
            run.hosts[label].t1 = time.monotonic()
            run.hosts[label].link.done = True

    try:
        run.start(lambda p: {"task": "create", "identity": ident, "k": rack.k})
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
