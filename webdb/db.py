"""A database directory: identity, generations, the commit pointer, the writer lock, recovery.

Layout (docs/design.md, *Files in a database*)::

    DB/webdb.json            identity: format version, name, creation time, stored settings
    DB/CURRENT               the committed generation number (replaced by rename, never edited)
    DB/gen/NNNNNNNN.json     manifest of generation N: sections, breakpoints, table files, stats
    DB/section-JJJJ/         section J: its table files, named by generation and stage
    DB/section-JJJJ/edits/B/ incoming edit files of batch B (the section's share group)
    DB/LOCK                  writer lock (flock) + who holds it
    DB/tmp/                  scratch (sort runs)

Data files are immutable; a commit writes the new generation's files, fsyncs them, writes the
manifest, then flips CURRENT by rename.  Readers read CURRENT and open the files it names.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable
from typing import Any

from webdb import _fault
from webdb.errors import BadInput, LockedError, NotADatabase
from webdb.manifest import empty as empty_manifest
from webdb.sections import Sections, section_path
from webdb.settings import resolve
from webdb.tables.format import CURRENT, DB_FORMAT_VERSION, DB_IDENTITY, GEN_DIR, LOCK, TABLE_KINDS, TMP_DIR

TABLES = tuple(TABLE_KINDS)
_GEN_FILE = re.compile(r"^(\d{8})-s\d\.(pbu|pbm|lbm|lbu)$")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, sync: bool = True) -> None:
    """Write a small file by temp + fsync + rename (+ directory fsync)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


class WebDB:
    """An open database directory.  Cheap to create; holds no file open between calls."""

    def __init__(self, path: str, section_dirs: dict[int, str] | None = None):
        self.path = os.path.abspath(path)
        # Where each section's files are, when not under ``path`` (a rack read from one mount).
        self.section_dirs = {int(j): os.path.abspath(d) for j, d in (section_dirs or {}).items()}
        ident = os.path.join(self.path, DB_IDENTITY)
        try:
            with open(ident, "rb") as f:
                self.identity = json.loads(f.read())
        except FileNotFoundError:
            raise NotADatabase(f"{path}: not a webdb database (no {DB_IDENTITY})") from None
        except (OSError, ValueError) as e:
            raise NotADatabase(f"{path}: unreadable {DB_IDENTITY} ({e})") from None
        if self.identity.get("format", 0) > DB_FORMAT_VERSION:
            raise NotADatabase(f"{path}: database format {self.identity['format']} is newer than this webdb")
        self.settings = resolve(self.identity.get("settings"))

    # ---- generations -----------------------------------------------------------------------

    def committed(self) -> int:
        try:
            with open(os.path.join(self.path, CURRENT)) as f:
                return int(f.read().strip())
        except (OSError, ValueError) as e:
            raise NotADatabase(f"{self.path}: cannot read {CURRENT} ({e})") from None

    def manifest_path(self, gen: int) -> str:
        return os.path.join(self.path, GEN_DIR, f"{gen:08d}.json")

    def manifest(self, gen: int | None = None) -> dict:
        gen = self.committed() if gen is None else gen
        p = self.manifest_path(gen)
        try:
            with open(p, "rb") as f:
                return json.loads(f.read())
        except (OSError, ValueError) as e:
            raise NotADatabase(f"{p}: unreadable manifest of generation {gen} ({e})") from None

    def section_dir(self, j: int) -> str:
        """Directory of section j: given explicitly, else ``<path>/section-JJJJ``."""
        return self.section_dirs.get(j) or section_path(self.path, j)

    def sections(self, manifest: dict | None = None) -> Sections:
        return Sections.from_json((manifest or self.manifest())["sections"])

    def write_manifest(self, manifest: dict) -> None:
        """Write a generation's manifest (built by ``webdb.manifest.build``) without committing
        it: the distributed writer's phase 1, and the first half of ``commit``."""
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        write_atomic(self.manifest_path(manifest["generation"]), data, self.settings["sync"])

    def commit(self, manifest: dict) -> None:
        """Make ``manifest`` (already fully written files) the committed generation."""
        gen = manifest["generation"]
        sync = self.settings["sync"]
        self.write_manifest(manifest)
        _fault.point("commit.before_current")
        write_atomic(os.path.join(self.path, CURRENT), f"{gen:08d}\n".encode(), sync)
        _fault.point("commit.after_current")

    # ---- API -------------------------------------------------------------------------------

    def writer(self, progress: bool = False, **overrides: Any):
        """A writer for one batch (context manager).  Takes the lock; see ``webdb.Writer``.
        ``progress`` shows a bar over the cascade's stages on a terminal."""
        from webdb.writer.writer import Writer

        return Writer(self, progress=progress, **overrides)

    def reader(self):
        """A snapshot of the last committed generation; see ``webdb.Reader``."""
        from webdb.reader import Reader

        return Reader(self)

    def rebalance(self, sections: int) -> dict:
        """Re-split into ``sections`` sections as one atomic generation; see webdb.rebalance."""
        from webdb.rebalance import rebalance

        return rebalance(self, sections)

    # ---- lock and recovery -----------------------------------------------------------------

    def lock(self) -> WriterLock:
        return WriterLock(os.path.join(self.path, LOCK))

    def recover(self) -> list[str]:
        """Remove what an interrupted batch left (files of generations after CURRENT, edit
        files, scratch) and what old generations no reader needs.  Call with the lock held."""
        cur = self.committed()
        keep_gens = {cur, cur - 1}
        referenced: set[tuple[int, str]] = set()
        for g in keep_gens:
            if g >= 0 and os.path.exists(self.manifest_path(g)):
                m = self.manifest(g)
                for j, tabs in enumerate(m["tables"]):
                    for t in tabs.values():
                        referenced.add((j, t["file"]))
        removed: list[str] = []
        gdir = os.path.join(self.path, GEN_DIR)
        for name in os.listdir(gdir):
            m = re.match(r"^(\d{8})\.json$", name)
            if (m and int(m.group(1)) not in keep_gens) or ".tmp." in name:
                os.unlink(os.path.join(gdir, name))
                removed.append(os.path.join(GEN_DIR, name))
        for name in sorted(os.listdir(self.path)):
            if not name.startswith("section-"):
                continue
            j = int(name[len("section-") :])
            d = os.path.join(self.path, name)
            for f in os.listdir(d):
                p = os.path.join(d, f)
                if f == "edits":
                    shutil.rmtree(p)
                    removed.append(os.path.join(name, f))
                elif _GEN_FILE.match(f) and (j, f) not in referenced:
                    os.unlink(p)
                    removed.append(os.path.join(name, f))
        if os.path.isdir(os.path.join(self.path, TMP_DIR)):
            shutil.rmtree(os.path.join(self.path, TMP_DIR))
        return removed


class WriterLock:
    """One writer at a time: an flock on DB/LOCK, plus who holds it (host, pid, since).

    The kernel drops an flock when its process dies, so a lock left by a killed writer is
    simply taken over (and reported as stale) — no manual cleanup.
    """

    def __init__(self, path: str):
        self.path = path
        self.fd = -1
        self.stale: dict | None = None

    def acquire(self) -> WriterLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            holder = _read_holder(self.path)
            raise LockedError(
                f"{os.path.dirname(self.path)} is being written by pid {holder.get('pid', '?')} on host "
                f"{holder.get('host', '?')} since {holder.get('since', '?')} (lock {self.path})"
            ) from None
        prev = _read_holder(self.path)
        if prev:
            self.stale = prev  # its process is gone: flock would have failed otherwise
        info = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _read_holder(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            data = f.read()
        return json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}


def create(path: str, sections: int = 1, **settings: Any) -> WebDB:
    """Create an empty database with ``sections`` sections at ``path`` (must not exist or be empty)."""
    if not isinstance(sections, int) or sections < 1:
        raise BadInput(f"sections must be a whole number >= 1, not {sections!r}")
    resolve(None, **settings)  # unknown or bad settings fail before anything is written
    path = os.path.abspath(path)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise BadInput(f"{path}: exists and is not an empty directory")
    return init_location(path, identity(os.path.basename(path), settings), range(sections), Sections(sections))


def identity(name: str, settings: dict) -> dict:
    """The content of ``webdb.json`` for a new db: format, name, creation time, the settings given."""
    stored = {k: v for k, v in settings.items() if v is not None}
    return {"format": DB_FORMAT_VERSION, "name": name, "created": time.time(), "settings": stored}


def init_location(path: str, ident: dict, sections: Iterable[int], secs: Sections) -> WebDB:
    """The one way a db directory comes to be (``create``, and every location of a rack):
    ``gen/``, the directories of ``sections`` (those that live here), the identity, then
    generation 0 committed (an empty manifest of ``secs``)."""
    os.makedirs(os.path.join(path, GEN_DIR), exist_ok=True)
    for j in sections:
        os.makedirs(section_path(path, j), exist_ok=True)
    sync = resolve(ident.get("settings"))["sync"]
    write_atomic(os.path.join(path, DB_IDENTITY), json.dumps(ident, indent=1).encode(), sync)
    db = WebDB(path)
    db.commit(empty_manifest(secs))
    return db


def open_db(path: str, section_dirs: dict[int, str] | None = None, mount: str | None = None) -> WebDB:
    """Open an existing database.

    ``path`` holds the identity, ``CURRENT`` and ``gen/`` (any host's copy, for a rack).
    Sections are read from ``path/section-JJJJ`` unless ``section_dirs`` maps a section to
    another directory, or ``mount`` is a directory under which every host's root is visible
    (``MOUNT/*/DB/section-JJJJ`` or ``MOUNT/DB/section-JJJJ``, DB being the database's name):
    the way an indexer reads all partitions from one mount.
    """
    if not os.path.isdir(path):
        raise NotADatabase(f"{path}: no such database directory")
    dirs = dict(section_dirs or {})
    if mount is not None:
        dirs = {**find_sections(mount, os.path.basename(os.path.abspath(path))), **dirs}
    return WebDB(path, dirs)


def find_sections(mount: str, name: str) -> dict[int, str]:
    """Section directories of database ``name`` under ``mount`` (one level of host dirs)."""
    if not os.path.isdir(mount):
        raise BadInput(f"{mount}: no such directory to find sections in")
    found: dict[int, str] = {}
    cands = [os.path.join(mount, name)] + [os.path.join(mount, h, name) for h in sorted(os.listdir(mount))]
    for d in cands:
        if not os.path.isdir(d):
            continue
        for f in os.listdir(d):
            m = re.match(r"^section-(\d{4})$", f)
            if m and os.listdir(os.path.join(d, f)):
                j = int(m.group(1))
                if j in found and os.path.realpath(found[j]) != os.path.realpath(os.path.join(d, f)):
                    raise BadInput(f"section {j} of {name} found twice under {mount}: {found[j]} and {d}/{f}")
                found[j] = os.path.join(d, f)
    return found
