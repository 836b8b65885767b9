"""The agent transport of the update driver (webdb.writer.driver; docs/distributed.md): one
agent per location (webdb.writer.distributed) started as a local process for a path or over
ssh for a host (webdb.writer.hosts), JSON lines both ways, and the liveness watch: pings,
heartbeats, silence.  Also ``create_rack``, which only agents do.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from webdb.core.dbfiles import identity
from webdb.core.manifest import Manifest
from webdb.core.settings import Settings
from webdb.errors import WebDBError
from webdb.ndfs import GroupResult
from webdb.writer.distributed import HEARTBEAT
from webdb.writer.hosts import LocalAgentLink, Placement, Rack, SSHAgentLink
from webdb.writer.results import Failed, HostRun, UpdateFailed, UpdateResult, failure_line, host_results
from webdb.writer.spec import HEARTBEAT_TIMEOUT, Options, Prepared, SectionSpec

__all__ = ["AgentTransport", "create_rack"]

# The agents' events the operator's progress sees (the driver adds synced, ready, committed).
_PROGRESS = ("started", "section", "prepared")
# How long a failure that names unreachable hosts waits to hear whether one of them is down
# (real seconds, not the liveness clock: a lost connection is heard at once; a hung host is
# named by the reporter's words when its silence takes longer).
HOLD_SECONDS = 10.0
# What an agent's hello reports about itself, kept for the per-host results.
_HELLO = ("version", "hostname", "python", "webdb", "pid", "compiled")


class AgentTransport:
    """The driver's requests as commands to one agent per location, their answers as events."""

    def __init__(self, rack: Rack, opts: Options) -> None:
        self.rack = rack
        self.hb_timeout = opts.heartbeat_timeout
        self.clock = opts.clock  # what silence is measured with (tests move it by hand)
        self.progress = opts.progress
        self.env = opts.env
        self.q: queue.Queue = queue.Queue()
        self.hosts = {label: HostRun(p) for label, p in rack.places.items()}
        self.last_ping = 0.0
        self.ping_n = 0
        # An open liveness round: (ping number, its clock time, the hosts silent when it began).
        self.round: tuple[int, float, list[str]] | None = None
        # A failure held back because it names hosts it could not reach: (reporter, why, kind,
        # those hosts, until when by time.monotonic()).  See ``pump``.
        self.held: tuple[str, str, str | None, list[str], float] | None = None

    # -- agents --------------------------------------------------------------------------------

    def start(self, spec_for: Callable[[Placement], dict]) -> None:
        """Start every agent (connections in parallel); the first failure stops all."""
        errors: dict[str, str] = {}

        def one(h: HostRun) -> None:
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
                    h.link = LocalAgentLink(h.place.label, self.q, spec, self.env)
                else:
                    h.link = SSHAgentLink(h.place.label, self.q, spec, self.env, h.place.location.host)
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

    def fail(self, label: str, why: str, kind: str | None = None) -> Failed:
        h = self.hosts[label]
        if h.link is not None:
            h.link.done = True
        return Failed(why, label=label, kind=kind)

    def pump(self, until: Callable[[], bool], on_event: Callable[[str, dict], None]) -> None:
        """Handle agent events until ``until()``; raise Failed on any failure or silence.

        A failure that says it could not reach other hosts (a section's edits not shipped) is
        held for up to ``HOLD_SECONDS`` (or the heartbeat timeout, if shorter): if one of those
        hosts is heard to be down meanwhile (its connection lost, its silence, its own failure),
        that host is blamed, with the reporter's words beside it; otherwise the reporter is.
        Which of the two the driver hears first is a matter of timing; the host that is down is
        what an operator needs."""
        try:
            self._pump(until, on_event)
        except Failed as f:
            if self.held is None:
                raise
            reporter, why, kind, peers, _ = self.held
            self.held = None
            if f.label == reporter:  # its agent lost or silent since: its own report says why
                raise self.fail(reporter, why, kind) from None
            self.hosts[reporter].error = self.hosts[reporter].error or why
            if f.label in peers:
                f.why = f"{f.why} ({reporter} could not reach it: {why})"
            raise

    def _pump(self, until: Callable[[], bool], on_event: Callable[[str, dict], None]) -> None:
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
                    raise self.fail(label, f"connection lost: agent {h.link.exit_info()}{h.link.stderr_tail()}")
                ev = obj.get("ev")
                if ev == "failed":
                    if "section" in obj:
                        h.steps[obj["section"]] = obj.get("step", 0)
                        h.failed_section = obj["section"]
                        why = f"section {obj['section']}: {obj['error']}"
                    else:
                        why = obj["error"]
                    peers = [p for p in obj.get("unreachable", ()) if p in self.hosts and p != label]
                    if peers and self.held is None:
                        # Its agent waits for the abort and answers pings meanwhile, so the
                        # liveness rounds that may blame a silent peer still have a witness.
                        wait = min(self.hb_timeout, HOLD_SECONDS)
                        self.held = (label, why, obj.get("kind"), peers, time.monotonic() + wait)
                        if self.progress is not None:
                            who = ", ".join(peers)
                            self.progress(
                                {
                                    "host": label,
                                    "ev": "warning",
                                    "message": f"{label} could not reach {who}: up to {wait:g}s to hear whether "
                                    f"{who} {'is' if len(peers) == 1 else 'are'} down before the update stops",
                                }
                            )
                        continue
                    raise self.fail(label, why, obj.get("kind"))
                if ev == "aborted":
                    raise self.fail(label, f"aborted: {obj.get('reason')}")
                if ev == "hb":
                    h.link.answered = max(h.link.answered, obj.get("n", 0))
                else:
                    self.track(h, obj)
                    on_event(label, obj)
                    if self.progress is not None and ev in _PROGRESS:
                        self.progress({"host": label, **obj})
            self.check_liveness(now)
            if self.held is not None and time.monotonic() > self.held[4]:
                reporter, why, kind, _, _ = self.held
                self.held = None
                raise self.fail(reporter, why, kind)

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
            live[lab].link.dead = True
            raise self.fail(lab, f"no heartbeat for {self.hb_timeout:g}s (host down or hung)")

    def track(self, h: HostRun, obj: dict) -> None:
        ev = obj.get("ev")
        h.events.add(ev)
        if ev == "hello":
            h.hello = {k: obj[k] for k in _HELLO if k in obj}
        if ev == "section":
            h.steps[obj["section"]] = obj["step"]
            if obj.get("state") == "merged":
                h.records += obj.get("records", 0)
            elif obj.get("state") == "shipped":
                h.bytes += obj.get("bytes", 0)
                h.remote_bytes += obj.get("remote_bytes", 0)

    # -- the driver's requests ---------------------------------------------------------------

    def open(self, task: dict, probe: dict[str, list[str]]) -> dict[str, dict]:
        self.start(lambda p: {**task, "probe": probe.get(p.label, [])})
        hello: dict[str, dict] = {}
        self.pump(
            lambda: len(hello) == len(self.hosts), lambda lab, o: hello.update({lab: o}) if o["ev"] == "hello" else 0
        )
        return hello

    def sync(self, gen: int, manifest: Manifest) -> None:
        self.send_all({"cmd": "sync", "gen": gen, "manifest": manifest.to_json()}, "sync")
        self.wait_all("synced")

    def ask(self, requests: dict[str, dict]) -> dict[str, list[dict]]:
        parts: dict[str, list[dict]] = {label: [] for label in requests}
        waiting = set(requests)
        for label, req in requests.items():
            self.hosts[label].state = str(req.get("op", "step"))
            self.hosts[label].link.send({"cmd": "step", **req})

        def on(label: str, o: dict) -> None:
            if o["ev"] != "reply":
                return
            if o.get("done"):
                waiting.discard(label)
            else:
                parts[label].append({k: v for k, v in o.items() if k != "ev"})

        self.pump(lambda: not waiting, on)
        return parts

    def run(
        self, specs: dict[str, list[SectionSpec]], breakpoints: Callable[[dict[int, list[str]]], list[str]] | None
    ) -> dict[int, Prepared]:
        for label, lst in specs.items():
            self.hosts[label].link.send({"cmd": "run", "sections": [s.to_json() for s in lst]})
        samples: dict[int, list[str]] = {}
        prepared: dict[int, Prepared] = {}

        def on(label: str, o: dict) -> None:
            if o["ev"] == "sample" and breakpoints is not None:
                samples[o["section"]] = o["urls"]
                if len(samples) == self.rack.k:
                    cmd = {"cmd": "breakpoints", "breakpoints": breakpoints(samples)}
                    for h in self.hosts.values():
                        if h.place.sections:
                            h.link.send(cmd)
            elif o["ev"] == "prepared":
                prepared[o["section"]] = Prepared.from_json(o["result"])

        self.pump(lambda: len(prepared) == self.rack.k, on)
        return prepared

    def prepare(self, manifest: Manifest) -> None:
        self.send_all({"cmd": "prepare", "manifest": manifest.to_json()}, "prepare")
        self.wait_all("ready")

    def commit(self, label: str, manifest: Manifest) -> None:
        h = self.hosts[label]
        if h.link.done:
            raise Failed(h.error or "its agent stopped before the commit", label=label)
        h.link.send({"cmd": "commit"})
        done: set[str] = set()
        self.pump(lambda: label in done, lambda lab, o: done.add(lab) if o["ev"] == "committed" else 0)
        h.link.done = True

    def send_all(self, cmd: dict, state: str) -> None:
        for h in self.hosts.values():
            h.state = state
            h.link.send(cmd)

    def wait_all(self, ev: str) -> None:
        got: set[str] = set()
        self.pump(lambda: len(got) == len(self.hosts), lambda lab, o: got.add(lab) if o["ev"] == ev else 0)

    def abort(self, reason: str) -> None:
        """Tell every agent still connected to stop — the one that failed too: it waits for
        this before its cleanup (``distributed.Agent.await_abort``) — give them a moment to
        clean up, then cut them off."""
        grace = min(10.0, max(2.0, self.hb_timeout))
        live = [h for h in self.hosts.values() if h.link is not None and not h.link.dead]
        for h in live:
            h.link.send({"cmd": "abort", "reason": reason})
        deadline = time.monotonic() + grace
        waiting = {h.place.label for h in live}
        while waiting and time.monotonic() < deadline:
            try:
                label, obj = self.q.get(timeout=0.1)
            except queue.Empty:
                continue
            if obj is None or obj.get("ev") in ("aborted", "failed", "committed"):
                waiting.discard(label)

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


def create_rack(
    rack: Rack, *, heartbeat_timeout: float = HEARTBEAT_TIMEOUT, env: dict[str, str] | None = None, **settings: Any
) -> GroupResult:
    """Create an empty k-section db on every location of ``rack`` (k = hosts.ini's count):
    identity, generation 0 and CURRENT everywhere, section j's directory where it lives.

    Returns per-host results; raises UpdateFailed if a location failed (rerunning is safe)."""
    Settings.from_json(settings)  # unknown or bad settings fail here, before any host is touched
    ident = identity(rack.db, settings)
    run = AgentTransport(rack, Options(heartbeat_timeout, env=dict(env or {})))
    t0 = time.monotonic()
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
    except Failed as e:
        error = failure_line(run.hosts, e)
        run.abort(error)
        run.close()
        res = UpdateResult(rack.db, host_results(f"create {rack.db}", run.hosts, error, t0), error=error)
        raise UpdateFailed(f"create {rack.db}: {error}", res) from None
    run.close()
    return host_results(f"create {rack.db}", run.hosts, None, t0)
