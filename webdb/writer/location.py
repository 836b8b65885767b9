"""One location's side of an update, whatever carries the driver's requests to it (an agent
process, webdb.writer.distributed, or Dask tasks, webdb.writer.dasktasks): lock, hello, sync,
a task's steps, prepare, commit, and the rollback after an abort (docs/distributed.md,
*The driver and its transports*).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

from webdb.core.db import WebDB, init_location
from webdb.core.manifest import Manifest, table_files
from webdb.core.sections import Sections, section_path
from webdb.errors import BadInput, WebDBError
from webdb.tables.format import DB_IDENTITY, TMP_DIR
from webdb.util import faults
from webdb.writer.inputs import resolve
from webdb.writer.placing import fingerprint

__all__ = ["PROTOCOL", "Location", "StepContext", "create_local", "sync_location"]

# 2: the "step" request between sync and run, and the failure's exception class in "failed"
# events.  3: numbered pings answered by an "hb" (liveness rounds).  4: the hello names the
# inputs a location sees and whether its compiled extensions load (block codec and writer kernels).
PROTOCOL = 4


class StepContext:
    """What a task's steps function sees at a location: its db copy (synced, locked), its
    sections, the rack's committed manifest, a scratch directory under ``tmp/`` (removed by
    the commit's or the abort's recover) and ``state`` kept across requests."""

    def __init__(self, db: WebDB, path: str, sections: list[int], manifest: Manifest, scratch: str) -> None:
        self.db, self.path, self.sections, self.manifest, self.scratch = db, path, sections, manifest, scratch
        self.state: dict[str, Any] = {}


class Location:
    """A location's db copy while an update holds its writer lock.  ``state`` goes open,
    synced, running, sections done, ready, committing, committed; ``rollback`` after an
    abort removes the batch's files unless a manifest may be committed."""

    def __init__(self, path: str, label: str, sections: list[int]) -> None:
        self.path, self.label, self.sections = path, label, list(sections)
        self.db = WebDB(path)
        self.lock = self.db.lock().acquire()
        self.state = "open"
        self.base: Manifest | None = None
        self.ctx: StepContext | None = None

    def hello(self, probe: list[str], **extra: Any) -> dict:
        """What the driver checks and chooses the generation from."""
        from webdb import __version__
        from webdb.tables import block
        from webdb.writer import kernels

        cur = self.db.committed()
        with open(os.path.join(self.path, DB_IDENTITY), "rb") as f:
            identity = json.loads(f.read())
        return {
            "protocol": PROTOCOL,
            "version": __version__,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "committed": cur,
            "manifest": self.db.manifest(cur).to_json(),
            "identity": identity,
            "stale_lock": self.lock.stale,
            "python": sys.executable,
            "webdb": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            "compiled": block.COMPILED and kernels.COMPILED,
            "inputs": {p: fingerprint(p) for p in probe},
            **extra,
        }

    def sync(self, gen: int, manifest: Manifest) -> int:
        """Roll forward to the rack's generation and recover (once per batch)."""
        if self.state != "open":
            return 0  # synced already for this batch: a second recover would remove its files
        removed = sync_location(self.db, self.path, self.sections, gen, manifest)
        self.base, self.state = manifest, "synced"
        return len(removed)

    def step(self, steps: str | None, request: dict) -> Iterator[dict]:
        """A task's request between sync and batch: ``steps`` (``module:function``) run as
        ``fn(ctx, request)``; yields its reply parts."""
        if not steps:
            raise BadInput("a step request, but this update names no steps function")
        if self.ctx is None:
            if self.base is None:
                raise BadInput("a step request before the sync: the location has no manifest yet")
            scratch = os.path.join(self.path, TMP_DIR, "task")
            os.makedirs(scratch, exist_ok=True)
            self.ctx = StepContext(self.db, self.path, self.sections, self.base, scratch)
        yield from resolve(steps)(self.ctx, request)

    def prepare(self, manifest: Manifest) -> None:
        """Phase 1: the new manifest on disk here before any CURRENT moves."""
        faults.point(f"dist.{self.label}.before_ready")
        self.db.write_manifest(manifest)
        self.state = "ready"

    def commit(self, manifest: Manifest) -> int:
        """Phase 2: flip CURRENT, then remove the batch's leftovers."""
        faults.point(f"dist.{self.label}.before_commit")
        self.state = "committing"
        self.db.commit(manifest)
        self.state = "committed"
        return len(self.db.recover())

    def rollback(self) -> None:
        """After an abort: undo this batch's files, unless a commit may have happened (then
        the next update decides from the master's CURRENT)."""
        if self.state not in ("synced", "running", "sections done"):
            return
        try:
            self.db.recover()
        except (OSError, WebDBError) as e:
            # What is left here the next update's recover removes (it runs before any batch).
            print(f"webdb: {self.path}: cleanup after the abort failed ({e}); the next update does it", file=sys.stderr)

    def release(self) -> None:
        self.lock.release()


def sync_location(db: WebDB, path: str, sections: list[int], gen: int, manifest: Manifest) -> list[str]:
    """Bring a location's copy to the rack's committed generation ``gen`` (roll forward if a
    commit never reached it), then recover: remove whatever an interrupted batch left.  Checks
    that the tables of ``sections`` (those living here) named by ``manifest`` are present."""
    cur = db.committed()
    if cur > gen:
        raise WebDBError(f"{path}: CURRENT is generation {cur}, newer than the rack's {gen}")
    if cur < gen:
        db.commit(manifest)
    removed = db.recover()
    for j in sections:
        d = section_path(path, j)
        os.makedirs(d, exist_ok=True)
        for t, e in manifest.tables[j].items():
            for f, _ in table_files(e):
                if not os.path.exists(os.path.join(d, f)):
                    raise WebDBError(f"{d}: {t} file {f} of generation {gen} is missing (section {j} must live here)")
    return removed


def create_local(spec: dict) -> dict:
    """Create this location's copy of a rack db (``init_location``: identity, generation 0, the
    directories of its sections).

    Idempotent: a copy with the same name and k that never committed a batch is re-created."""
    path = spec["path"]
    if os.path.exists(os.path.join(path, DB_IDENTITY)):
        try:
            db = WebDB(path)
            empty = db.committed() == 0 and db.manifest().sections.k == spec["k"]
            same = db.identity.get("name") == spec["identity"]["name"]
        except WebDBError as e:
            raise BadInput(f"{path}: a database already exists there and cannot be read ({e})") from None
        if not (empty and same):
            raise BadInput(f"{path}: a database already exists there (remove it or pick another name)")
    init_location(path, spec["identity"], spec["sections"], Sections(spec["k"]))
    return {"path": path, "sections": spec["sections"]}
