"""Share groups: one operation on every location of a group, with a result per location.

Like fabric's ``GroupResult``, every group operation returns a ``GroupResult``: a dict from
location label (host name, or the local path) to ``HostResult`` (ok or the error, the value,
bytes moved, seconds), with ``.succeeded`` and ``.failed``.  A group operation never raises for
one host's failure; call ``.raise_on_failure()`` when every location must succeed.

``NDFS`` is one machine's view of the namespace: the parsed hosts.ini, the db name, which host
it runs on (whose groups it reaches through the local filesystem), and one cached transport per
location.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from webdb.errors import DistributedError, WebDBError
from webdb.ndfs.config import Location, NdfsConfig
from webdb.ndfs.errors import ConfigError
from webdb.ndfs.names import NutchFile, validate_component, validate_prefix
from webdb.ndfs.ssh import open_ssh_transport
from webdb.ndfs.transport import LocalTransport, Transport


@dataclass(frozen=True)
class HostResult:
    """The outcome of one group operation at one location."""

    host: str
    ok: bool
    value: Any = None
    error: BaseException | None = None
    bytes: int = 0
    seconds: float = 0.0

    @property
    def reason(self) -> str:
        """Why it failed ("" if it succeeded)."""
        return "" if self.ok else f"{type(self.error).__name__}: {self.error}"

    def __str__(self) -> str:
        state = "ok" if self.ok else f"FAILED {self.reason}"
        return f"{self.host}: {state} ({self.bytes} bytes, {self.seconds:.3f}s)"


class GroupError(DistributedError):
    """Some locations of a group failed; ``result`` holds every location's outcome."""

    def __init__(self, what: str, result: GroupResult) -> None:
        self.result = result
        lines = "; ".join(f"{r.host}: {r.reason}" for r in result.failed.values())
        super().__init__(f"{what} failed on {len(result.failed)} of {len(result)} locations: {lines}")


class GroupResult(dict[str, HostResult]):
    """Location label -> HostResult, in the group's location order.

    ``need`` is "all" (every location must succeed: puts, deletes) or "any" (one is enough:
    a get that falls back to the next replica).
    """

    def __init__(self, what: str, results: Mapping[str, HostResult] | None = None, need: str = "all") -> None:
        super().__init__(results or {})
        self.what = what
        self.need = need

    @property
    def succeeded(self) -> dict[str, HostResult]:
        return {h: r for h, r in self.items() if r.ok}

    @property
    def failed(self) -> dict[str, HostResult]:
        return {h: r for h, r in self.items() if not r.ok}

    @property
    def ok(self) -> bool:
        """Whether the operation achieved what ``need`` asks (never for zero locations)."""
        if self.need == "any":
            return bool(self.succeeded)
        return bool(self) and not self.failed

    def raise_on_failure(self) -> GroupResult:
        """Return self if ``ok``, else raise GroupError naming every failed location and why."""
        if not self.ok:
            raise GroupError(self.what, self)
        return self

    def __str__(self) -> str:
        return f"{self.what}:\n" + "\n".join(f"  {r}" for r in self.values())


def _run(label: str, fn: Callable[[], Any], size: Callable[[Any], int] | None = None) -> HostResult:
    t0 = time.monotonic()
    try:
        value = fn()
    except (WebDBError, OSError) as e:
        return HostResult(label, False, error=e, seconds=time.monotonic() - t0)
    n = size(value) if size else 0
    return HostResult(label, True, value=value, bytes=n, seconds=time.monotonic() - t0)


class ShareGroup:
    """One share group of one db: the same relative names at every location of the group."""

    def __init__(self, db: str, name: str, transports: Mapping[str, Transport]) -> None:
        self.db = validate_component(db, "db name")
        self.name = validate_component(name, "share group name")
        if not transports:
            raise ConfigError(f"share group {name!r} has no locations")
        self.transports = dict(transports)

    @property
    def hosts(self) -> list[str]:
        """Location labels in configuration order."""
        return list(self.transports)

    def file(self, name: str) -> NutchFile:
        """The NutchFile ``(db, group, name)``."""
        return NutchFile(self.db, self.name, name)

    def _rel(self, name: str) -> str:
        return self.file(name).relpath

    def _dir(self, prefix: str) -> str:
        prefix = validate_prefix(prefix)
        return f"{self.db}/{self.name}/{prefix}" if prefix else f"{self.db}/{self.name}"

    def _each(self, what: str, fn: Callable[[Transport], Any], size: Callable[[Any], int] | None = None) -> GroupResult:
        items = list(self.transports.items())
        if len(items) == 1:
            label, t = items[0]
            return GroupResult(what, {label: _run(label, lambda: fn(t), size)})
        with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix=f"ndfs-{self.name}") as pool:
            futures = {label: pool.submit(_run, label, lambda t=t: fn(t), size) for label, t in items}
            return GroupResult(what, {label: f.result() for label, f in futures.items()})

    def put(self, local_path: str | os.PathLike[str], name: str) -> GroupResult:
        """Publish a local file at every location (atomic put + completion flag), in parallel.

        Per host: value is the Completion, bytes the file size.  Cost: the file is read once
        per location and sent once to each.
        """
        rel = self._rel(name)
        return self._each(f"put {rel}", lambda t: t.put(local_path, rel), lambda c: c.size)

    def write_text(self, name: str, text: str) -> GroupResult:
        """Publish a small text file at every location."""
        rel = self._rel(name)
        return self._each(f"write {rel}", lambda t: t.write_text(rel, text), lambda c: c.size)

    def get(self, name: str, local_path: str | os.PathLike[str]) -> GroupResult:
        """Copy ``name`` from the first location that can deliver it (in order).

        The result holds the failed attempts and the one success; ``.ok`` is False if every
        location failed.
        """
        rel = self._rel(name)
        out = GroupResult(f"get {rel}", need="any")
        for label, t in self.transports.items():
            r = _run(label, lambda t=t: t.get(rel, local_path), lambda n: n)
            out[label] = r
            if r.ok:
                break
        return out

    def read_text(self, name: str) -> str:
        """Content of a small file from the first location that has it; GroupError if none."""
        rel = self._rel(name)
        out = GroupResult(f"read {rel}", need="any")
        for label, t in self.transports.items():
            r = _run(label, lambda t=t: t.read_text(rel), len)
            out[label] = r
            if r.ok:
                return r.value
        raise GroupError(out.what, out)

    def exists(self, name: str) -> GroupResult:
        """Per host: whether the file exists (complete or not)."""
        rel = self._rel(name)
        return self._each(f"exists {rel}", lambda t: t.exists(rel))

    def completion(self, name: str) -> GroupResult:
        """Per host: the Completion of ``name``, or None if it is not flagged complete there."""
        rel = self._rel(name)
        return self._each(f"completion {rel}", lambda t: t.completion(rel))

    def wait_complete(self, name: str, timeout: float, poll: float = 0.2) -> GroupResult:
        """Wait at every location in parallel; a location that times out is a failed result."""
        rel = self._rel(name)
        return self._each(f"wait {rel}", lambda t: t.wait_complete(rel, timeout, poll), lambda c: c.size)

    def delete(self, name: str) -> GroupResult:
        """Remove a file and its flag everywhere; per host value: whether it existed."""
        rel = self._rel(name)
        return self._each(f"delete {rel}", lambda t: t.delete(rel))

    def rename(self, src: str, dst: str) -> GroupResult:
        """Rename at every location (the completion flag moves with the file)."""
        a, b = self._rel(src), self._rel(dst)
        return self._each(f"rename {a} -> {b}", lambda t: t.rename(a, b))

    def list(self, prefix: str = "", *, complete_only: bool = False) -> GroupResult:
        """Per host: sorted names (relative to the group) below ``prefix``."""
        d = self._dir(prefix)
        cut = len(f"{self.db}/{self.name}/")

        def names(t: Transport) -> list[str]:
            return [n[cut:] for n in t.list(d, complete_only=complete_only)]

        return self._each(f"list {d}", names)

    def remove_tree(self, prefix: str = "") -> GroupResult:
        """Remove ``prefix`` (default: the whole group directory of this db) everywhere."""
        d = self._dir(prefix)
        return self._each(f"remove {d}", lambda t: t.remove_tree(d))

    def disk_free(self) -> GroupResult:
        """Per host: bytes free where this group lives."""
        d = self._dir("")
        return self._each(f"df {d}", lambda t: t.disk_free(d), lambda n: n)


def open_transport(location: Location, *, local_host: str | None = None) -> Transport:
    """The transport for a location: local for a path or for the host we run on, else ssh."""
    if location.path is not None:
        return LocalTransport(location.path, label=location.path)
    assert location.host is not None
    if location.host.name == local_host:
        return LocalTransport(location.host.root, label=location.host.name)
    return open_ssh_transport(location.host)


class NDFS:
    """One machine's handle on the shared namespace of ``db``.

    ``local_host`` is the hosts.ini name of the machine this runs on: its groups are reached
    through the local filesystem instead of ssh to itself.  Transports are opened lazily, one
    per location, and shared by every group on that location.  ``scratch``: the files put
    through this handle are a batch's files in flight, handed over by the caller — published
    without fsyncs (a crash discards the batch whole) and, on a local transport, hard-linked
    into place rather than copied (``Transport.durable``, ``LocalTransport.link``).
    """

    def __init__(
        self,
        config: NdfsConfig,
        db: str | None = None,
        *,
        local_host: str | None = None,
        transport_factory: Callable[[Location], Transport] | None = None,
        scratch: bool = False,
    ) -> None:
        db = db or config.db
        if db is None:
            raise ConfigError(f"{config.source}: no db name given and no [ndfs] db")
        self.db = validate_component(db, "db name")
        if local_host is not None and local_host not in config.hosts:
            raise ConfigError(f"{config.source}: local host {local_host!r} is not a [host:...] section")
        self.config = config
        self.local_host = local_host
        self._factory = transport_factory or (lambda loc: open_transport(loc, local_host=local_host))
        self._transports: dict[str, Transport] = {}
        self.scratch = scratch

    def transport(self, location: Location) -> Transport:
        """The shared transport of a location (created on first use; connects lazily)."""
        t = self._transports.get(location.label)
        if t is None:
            t = self._transports[location.label] = self._factory(location)
            if self.scratch:
                t.durable = False
                if isinstance(t, LocalTransport):
                    t.link = True
        return t

    def group(self, name: str) -> ShareGroup:
        """The share group ``name`` of this db."""
        locs = self.config.locations(name)
        return ShareGroup(self.db, name, {loc.label: self.transport(loc) for loc in locs})

    def section(self, i: int) -> ShareGroup:
        """The share group of section ``i`` (``section-0000`` ...)."""
        return self.group(self.config.section_group(i))

    def close(self) -> None:
        """Close every transport."""
        for t in self._transports.values():
            t.close()
        self._transports.clear()

    def __enter__(self) -> NDFS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["GroupError", "GroupResult", "HostResult", "NDFS", "ShareGroup", "open_transport"]
