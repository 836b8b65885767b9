"""What an update or create did: per host (a GroupResult like ndfs'), per step, overall; the
exception that carries it (``UpdateFailed``); and the per-host state the coordinator keeps
while it runs (``HostRun``: where a host is, for the labels of ``UpdateResult.summary``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from webdb.core.manifest import Manifest
from webdb.errors import DistributedError
from webdb.ndfs import GroupResult, HostResult
from webdb.writer.hosts import AgentLink, Placement

__all__ = ["Failed", "UpdateFailed", "UpdateResult", "failure_line", "host_results", "stopped"]


class Failed(Exception):
    """The one failure of a run, whatever the transport: ``why`` it stopped, the location it
    concerns (``label``, None: the run as a whole) and the exception class a host named
    (``kind``: ``BadInput``, ``LockedError``, ...; None: a host went silent or was lost)."""

    def __init__(self, why: str, *, label: str | None = None, kind: str | None = None) -> None:
        super().__init__(why)
        self.why, self.label, self.kind = why, label, kind


class UpdateFailed(DistributedError):
    """The update stopped and committed nothing (unless ``result.committed``); ``result`` has
    every host's outcome."""

    def __init__(self, message: str, result: UpdateResult) -> None:
        super().__init__(message)
        self.result = result

    @property
    def kind(self) -> str | None:
        """Exception class of the first failure as the failing host named it (``BadInput``,
        ``LockedError``, ...), or None (a host went silent or its connection broke)."""
        return self.result.kind


@dataclass
class UpdateResult:
    """What an update did, per host (a GroupResult like ndfs'), per step, and overall."""

    db: str
    hosts: GroupResult
    generation: int | None = None
    batch: str | None = None
    committed: bool = False
    seconds: float = 0.0
    shipped: list[dict] = field(default_factory=list)
    manifest: Manifest | None = None
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    kind: str | None = None  # exception class of the first failure (see UpdateFailed.kind)

    def summary(self) -> str:
        """A per-host table: result, sections, seconds, records written, bytes shipped."""
        rows = [("host", "sections", "result", "seconds", "records", "shipped", "to other hosts")]
        for label, r in self.hosts.items():
            v = r.value or {}
            state = "ok" if r.ok else ("aborted" if v.get("aborted") else f"FAILED: {r.reason}")
            rows.append(
                (
                    label,
                    ",".join(map(str, v.get("sections", []))) or "-",
                    state,
                    f"{r.seconds:.1f}",
                    f"{v.get('records', 0):,}",
                    _mb(r.bytes),
                    _mb(v.get("remote_bytes", 0)),
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(7)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        head = (
            f"generation {self.generation} committed in {self.seconds:.1f}s"
            if self.committed
            else f"NOT committed: {self.error}"
        )
        steps = ", ".join(f"step {s['step']}: {_mb(s['bytes'])}" for s in self.shipped)
        return "\n".join(
            [
                head,
                *lines,
                *([f"edits shipped per step: {steps}"] if steps else []),
                *[f"warning: {w}" for w in self.warnings],
            ]
        )


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} B"


@dataclass
class HostRun:
    place: Placement
    link: AgentLink | None = None
    t0: float = 0.0
    t1: float | None = None
    state: str = "start"
    steps: dict[int, int] = field(default_factory=dict)  # section -> step it is at
    failed_section: int | None = None  # the section whose writer failed, if the agent said
    records: int = 0
    bytes: int = 0
    remote_bytes: int = 0
    error: str | None = None
    events: set[str] = field(default_factory=set)
    hello: dict = field(default_factory=dict)

    def where(self) -> str:
        if self.state in ("prepare", "commit"):
            return "commit" if self.state == "commit" else "commit (prepare)"  # not "stage 5": all stages ran
        if self.failed_section is not None and self.failed_section in self.steps:
            st = self.steps[self.failed_section]
            return f"stage {st}" if st else "step 0 (input and routing)"
        if self.steps:
            lo = min(self.steps.values())
            return f"stage {lo}" if lo else "step 0 (input and routing)"
        return self.state


def failure_line(hosts: dict[str, HostRun], e: Failed) -> str:
    """A run's error line, in the same words for every transport: ``LABEL (sections S) failed
    at STAGE: WHY``, or ``WHY`` when no one location is to blame.  Marks the host failed."""
    if e.label is None or e.label not in hosts:
        return e.why
    h = hosts[e.label]
    h.error = h.error or e.why
    h.t1 = h.t1 or time.monotonic()
    s = h.place.sections
    secs = f" (section{'s' if len(s) > 1 else ''} {','.join(map(str, s))})" if s else ""
    return f"{e.label}{secs} failed at {h.where()}: {h.error}"


def host_results(what: str, hosts: dict[str, HostRun], error: str | None, t0: float) -> GroupResult:
    """Every location's outcome of a run (any transport): ok, or why it failed or was stopped."""
    out = GroupResult(what)
    for label, h in hosts.items():
        end = h.t1 or time.monotonic()
        v = {
            "sections": h.place.sections,
            "records": h.records,
            "remote_bytes": h.remote_bytes,
            "master": h.place.master,
            "at": h.where(),
            **h.hello,
        }
        err = DistributedError(h.error) if h.error else None
        if err is None and error is not None and h.state != "committed":
            v["aborted"] = True  # it did not fail: another host did, and this one was stopped
            err = DistributedError(f"aborted at {h.where()}: {error}")
        out[label] = HostResult(label, err is None, v, err, h.bytes, end - (h.t0 or t0))
    return out


def stopped(res: UpdateResult, hosts: GroupResult, error: str, kind: str | None, t0: float) -> UpdateResult:
    """The outcome of a run stopped by ``error`` (any transport): returned with the error as a
    warning when the commit point had already passed, else raised as UpdateFailed."""
    res.hosts = hosts
    res.error, res.kind = error, kind
    res.seconds = time.monotonic() - t0
    if res.committed:
        res.warnings.append(error)
        return res
    raise UpdateFailed(f"update of {res.db} stopped, nothing committed: {error}", res) from None
