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
The small files' format and checks are in ``webdb.core.dbfiles``; this module (about 500 lines) is
the directory's lifecycle: generations, commit, quick check, recovery, the lock.
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
import stat
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from webdb.core.dbfiles import (  # noqa: F401 - current_line, seal, seal_checksum: re-exported
    CURRENT_LINE,
    GEN_FILE,
    MANIFEST_NAME,
    MARK_NAME,
    crc_hex,
    current_line,
    fsync_dir,
    identity,
    is_whole,
    read_identity,
    read_small,
    seal,
    seal_checksum,
    validate_manifest,
    write_atomic,
)
from webdb.core.manifest import Manifest, rounds, table_files
from webdb.core.manifest import empty as empty_manifest
from webdb.core.sections import Sections, section_path
from webdb.core.settings import Settings
from webdb.errors import (
    BadInput,
    CorruptionError,
    DiskFull,
    LockedError,
    NotADatabase,
    WebDBError,
    is_disk_full,
)
from webdb.tables.format import CURRENT, DB_IDENTITY, GEN_DIR, LOCK, TABLE_KINDS, TMP_DIR
from webdb.util import faults

TABLES = tuple(TABLE_KINDS)


class WebDB:
    """An open database directory.  Cheap to create; holds no file open between calls."""

    def __init__(self, path: str, section_dirs: dict[int, str] | None = None):
        self.path = os.path.abspath(path)
        # Where each section's files are, when not under ``path`` (a rack read from one mount).
        self.section_dirs = {int(j): os.path.abspath(d) for j, d in (section_dirs or {}).items()}
        self.identity = read_identity(self.path)
        self.settings = Settings.from_json(self.identity.get("settings"))

    # ---- generations -----------------------------------------------------------------------

    def current(self) -> tuple[int, str | None]:
        """(committed generation, its manifest's checksum or None for a pre-checksum CURRENT).

        Refuses a CURRENT that names a generation older than one committed later (a rolled-back
        or restored CURRENT): ``webdb recover --to N`` says which generation is meant."""
        p = os.path.join(self.path, CURRENT)
        try:
            data = read_small(p, "commit pointer", 64)
        except FileNotFoundError:
            raise CorruptionError(
                f"{p}: missing (run `webdb recover {self.path}` to see the generations present)"
            ) from None
        m = CURRENT_LINE.match(data)
        if m is None:
            raise CorruptionError(f"{p}: not a commit pointer ({data[:40]!r})")
        gen = int(m.group(1))
        if m.group(2) is not None and crc_hex(data[:17]) != m.group(3).decode():
            raise CorruptionError(f"{p}: checksum mismatch (the commit pointer is damaged)")
        marks = self._marks()
        later = [g for g in marks if g > gen]
        if later:
            raise CorruptionError(
                f"{p}: names generation {gen}, but generation {max(later)} was committed after it "
                f"({GEN_DIR}/{max(later):08d}.committed): CURRENT was rolled back or restored; run "
                f"`webdb recover {self.path} --to {max(later)}` to keep the newer one, or --to {gen} to drop it"
            )
        if m.group(2) is None and marks:
            raise CorruptionError(f"{p}: has no checksum, but this database was written with checksums")
        return gen, m.group(2).decode() if m.group(2) else None

    def committed(self) -> int:
        return self.current()[0]

    def _marks(self) -> list[int]:
        """Generations with a commit mark (written after CURRENT named them)."""
        try:
            names = os.listdir(os.path.join(self.path, GEN_DIR))
        except OSError as e:
            raise CorruptionError(f"{os.path.join(self.path, GEN_DIR)}: cannot list ({e.strerror})") from None
        return sorted(int(m.group(1)) for m in map(MARK_NAME.match, names) if m)

    def manifest_path(self, gen: int) -> str:
        return os.path.join(self.path, GEN_DIR, f"{gen:08d}.json")

    def manifest(self, gen: int | None = None, checksum: str | None = None) -> Manifest:
        """The manifest of ``gen`` (default: the committed one), verified: its own checksum,
        ``checksum`` when the caller knows it (CURRENT, a child's ``parent_checksum``), the
        shape of every field.  Any failure is a CorruptionError naming the file and field."""
        return self._load_manifest(gen, checksum)[0]

    def _load_manifest(self, gen: int | None, checksum: str | None = None) -> tuple[Manifest, str]:
        if gen is None:
            gen, checksum = self.current()
        p = self.manifest_path(gen)
        try:
            data = read_small(p, "manifest")
        except FileNotFoundError:
            raise CorruptionError(f"{p}: manifest of generation {gen} is missing") from None
        actual, own = seal_checksum(data)
        if own is not None and own != actual:
            raise CorruptionError(f"{p}: checksum mismatch (manifest of generation {gen} is damaged)")
        if checksum is not None and checksum != actual:
            raise CorruptionError(
                f"{p}: checksum {actual} is not the {checksum} recorded for it (damaged, or replaced by another copy)"
            )
        try:
            m = json.loads(data)
        except ValueError as e:
            raise CorruptionError(f"{p}: manifest of generation {gen} is not JSON ({e})") from None
        validate_manifest(m, gen, p)
        if isinstance(m.get("checksum"), str) and own is None:
            raise CorruptionError(f"{p}: checksum field is not where a webdb writer puts it (damaged)")
        try:
            return Manifest.from_json(m), actual
        except (BadInput, ValueError) as e:  # breakpoints no Sections takes (k too large, not UTF-8)
            raise CorruptionError(f"{p}: manifest field 'sections' is not a split webdb reads ({e})") from None

    def quick_check(self, sections: list[int] | None = None) -> Manifest:
        """Verify the committed generation before a writer builds on it; return its manifest.

        CURRENT's and the manifests' checksums (the committed one and, when present, its
        parent), and every table file of ``sections`` (default all): present, a regular file,
        of the size the manifest records.  Cost: a few small reads and one stat per table."""
        m = self.manifest()
        self._section_names()  # a stray section-foo is an error, not something to skip
        if m.parent is not None and os.path.lexists(self.manifest_path(m.parent)):
            self.manifest(m.parent, m.parent_checksum)
        for j in range(m.sections.k) if sections is None else sections:
            for t, _, f, size in _files_of(m.tables[j]):
                p = os.path.join(self.section_dir(j), f)
                try:
                    st = os.stat(p)
                except FileNotFoundError:
                    raise CorruptionError(f"{p}: {t} table of generation {m.generation} is missing") from None
                except OSError as err:
                    raise CorruptionError(f"{p}: cannot stat {t} table ({err.strerror})") from None
                if not stat.S_ISREG(st.st_mode):
                    raise CorruptionError(f"{p}: {t} table is not a regular file")
                if st.st_size != size:
                    raise CorruptionError(
                        f"{p}: {t} table is {st.st_size} bytes, the manifest of generation "
                        f"{m.generation} records {size}"
                    )
        return m

    def section_dir(self, j: int) -> str:
        """Directory of section j: given explicitly, else ``<path>/section-JJJJ``."""
        return self.section_dirs.get(j) or section_path(self.path, j)

    def sections(self, manifest: Manifest | None = None) -> Sections:
        return (manifest or self.manifest()).sections

    def write_manifest(self, manifest: Manifest) -> str:
        """Write ``manifest`` (with its checksum and its parent's) under gen/; return its
        checksum.  The one place a manifest file is written."""
        parent_m, parent_checksum = None, None
        if manifest.parent is not None:
            try:
                parent_m, parent_checksum = self._load_manifest(manifest.parent)
            except CorruptionError:
                pass  # no parent here (a fresh location of a rack): nothing to chain to
        body = replace(manifest, parent_checksum=parent_checksum)
        have = body.rounds
        if not (isinstance(have, list) and have and have[-1].get("generation") == body.generation):
            body.rounds = rounds(body, parent_m)  # the per-generation figures of `webdb serve`
        data = seal(body.to_json())
        write_atomic(self.manifest_path(manifest.generation), data, self.settings.sync)
        return seal_checksum(data)[0]

    def commit(self, manifest: Manifest) -> None:
        """Make ``manifest`` (already fully written files) the committed generation."""
        gen = manifest.generation
        sync = self.settings.sync
        c = self.write_manifest(manifest)
        faults.point("commit.before_current")
        self._point_current(gen, c, sync)
        faults.point("commit.after_current")

    def _point_current(self, gen: int, checksum: str, sync: bool) -> None:
        write_atomic(os.path.join(self.path, CURRENT), current_line(gen, checksum), sync)
        # After the flip: the mark that lets a reader tell a rolled-back CURRENT (newer mark)
        # from a batch killed before its flip (newer manifest, no mark).
        write_atomic(os.path.join(self.path, GEN_DIR, f"{gen:08d}.committed"), b"", sync)

    # ---- API -------------------------------------------------------------------------------

    def writer(self, progress: bool = False, **overrides: Any):
        """A writer for one batch (context manager).  Takes the lock; see ``webdb.Writer``.
        ``progress`` shows a bar over the cascade's stages on a terminal."""
        from webdb.writer.writer import Writer

        return Writer(self, progress=progress, **overrides)

    def reader(self, cache_mb: int | None = None):
        """A snapshot of the last committed generation; see ``webdb.Reader``.  ``cache_mb``
        overrides the db's setting for this reader's block cache."""
        from webdb.core.reader import Reader

        return Reader(self, cache_mb)

    def rebalance(self, sections: int) -> Manifest:
        """Re-split into ``sections`` sections as one atomic generation; see webdb.tools.rebalance."""
        from webdb.tools.rebalance import rebalance

        return rebalance(self, sections)

    def compact(self, budget: float | None = None) -> dict:
        """Merge the delta runs of the tables kept as levels into new bases, as one atomic
        generation, within ``budget`` seconds if given; see webdb.tools.compact."""
        from webdb.tools.compact import compact

        return compact(self, budget)

    # ---- lock and recovery -----------------------------------------------------------------

    def lock(self) -> WriterLock:
        return WriterLock(os.path.join(self.path, LOCK))

    def recover(self, sections: list[int] | None = None) -> list[str]:
        """Remove what an interrupted batch left (files of generations after CURRENT, edit
        files, scratch, temp files of a killed rename) and what old generations no reader
        needs.  Call with the lock held.  First runs the quick check (of ``sections``, default
        those whose directory is here): nothing is removed from a db that fails it."""
        if sections is None:
            sections = []
            for name in self._section_names():
                sections.append(int(name[len("section-") :]))
        m = self.quick_check([j for j in sections if j < self.manifest().sections.k])
        keep = {m.generation: m}
        if m.parent is not None and os.path.exists(self.manifest_path(m.parent)):
            keep[m.parent] = self.manifest(m.parent)
        return self._remove_unreferenced(keep)

    def _section_names(self) -> list[str]:
        out = []
        for name in sorted(os.listdir(self.path)):
            if not name.startswith("section-"):
                continue
            if not re.match(r"^section-\d{4}$", name) or not os.path.isdir(os.path.join(self.path, name)):
                raise CorruptionError(
                    f"{os.path.join(self.path, name)}: not a section directory of webdb (move it out of the database)"
                )
            out.append(name)
        return out

    def _remove_unreferenced(self, keep: dict[int, Manifest]) -> list[str]:
        referenced: set[tuple[int, str]] = set()
        for m in keep.values():
            for j, tabs in enumerate(m.tables):
                for _, _, f, _ in _files_of(tabs):
                    referenced.add((j, f))
        removed: list[str] = []
        gdir = os.path.join(self.path, GEN_DIR)
        for name in os.listdir(gdir):
            m = MANIFEST_NAME.match(name) or MARK_NAME.match(name)
            if (m and int(m.group(1)) not in keep) or ".tmp." in name:
                os.unlink(os.path.join(gdir, name))
                removed.append(os.path.join(GEN_DIR, name))
                faults.point("cleanup.unlinked")
        for name in os.listdir(self.path):
            if ".tmp." in name and name.split(".tmp.")[0] in (CURRENT, DB_IDENTITY):
                os.unlink(os.path.join(self.path, name))
                removed.append(name)
        for name in self._section_names():
            j = int(name[len("section-") :])
            d = os.path.join(self.path, name)
            for f in os.listdir(d):
                p = os.path.join(d, f)
                if f == "edits":
                    shutil.rmtree(p)
                    removed.append(os.path.join(name, f))
                elif GEN_FILE.match(f) and (j, f) not in referenced:
                    os.unlink(p)
                    removed.append(os.path.join(name, f))
        if os.path.isdir(os.path.join(self.path, TMP_DIR)):
            shutil.rmtree(os.path.join(self.path, TMP_DIR))
        return removed

    def generations(self) -> list[dict]:
        """What ``webdb recover`` shows: every manifest present, whether it passes the quick
        check, and whether CURRENT names it or it was committed."""
        marks = set(self._marks())
        out = []
        for name in sorted(os.listdir(os.path.join(self.path, GEN_DIR))):
            mm = MANIFEST_NAME.match(name)
            if not mm:
                continue
            g = int(mm.group(1))
            row: dict[str, Any] = {"generation": g, "committed": g in marks}
            try:
                self._check_generation(g)
                row["ok"] = True
            except CorruptionError as e:
                row["ok"], row["error"] = False, str(e)
            out.append(row)
        return out

    def _check_generation(self, gen: int) -> Manifest:
        m = self.manifest(gen)
        for j in range(m.sections.k):
            for t, _, f, size in _files_of(m.tables[j]):
                p = os.path.join(self.section_dir(j), f)
                try:
                    st = os.stat(p)
                except OSError:
                    raise CorruptionError(f"{p}: {t} table of generation {gen} is missing") from None
                if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                    raise CorruptionError(f"{p}: {t} table of generation {gen} is not the file its manifest records")
        return m

    def recover_to(self, gen: int) -> list[str]:
        """Make ``gen`` the committed generation, explicitly (``webdb recover --to N``): for a
        CURRENT that is damaged, missing or was rolled back.  ``gen``'s manifest and tables must
        pass the quick check; newer generations are removed.  Call with the lock held."""
        if not is_whole(gen) or gen < 0:
            raise BadInput(f"--to {gen!r}: not a generation number")
        if not os.path.exists(self.manifest_path(gen)):
            have = [r["generation"] for r in self.generations()]
            raise BadInput(f"{self.manifest_path(gen)}: no manifest of generation {gen} (present: {have})")
        m = self._check_generation(gen)
        sync = self.settings.sync
        # Old or new under kill -9: first the commit marks of the generations dropped go, so
        # no moment has CURRENT naming ``gen`` beside a newer mark (a rolled-back CURRENT to
        # every reader).  Dropping a mark newer than the old CURRENT is harmless: the old
        # CURRENT still reads, and the dropped generations are then a killed batch's leftovers.
        gdir = os.path.join(self.path, GEN_DIR)
        for g in self._marks():
            if g > gen:
                os.unlink(os.path.join(gdir, f"{g:08d}.committed"))
                faults.point("recover.mark_dropped")
        if sync:
            fsync_dir(gdir)
        faults.point("recover.before_current")
        self._point_current(gen, self._load_manifest(gen)[1], sync)
        faults.point("recover.after_current")
        keep = {gen: m}
        if m.parent is not None and os.path.exists(self.manifest_path(m.parent)):
            try:
                keep[m.parent] = self.manifest(m.parent, m.parent_checksum)
            except CorruptionError:
                pass  # a damaged parent is dropped: no one builds on it
        return self._remove_unreferenced(keep)


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
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise WebDBError(f"{self.path}: cannot take the writer lock ({e.strerror})") from None
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
        data = json.dumps(info).encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as e:
            # Let go of the flock before reporting: a descriptor kept open would hold it, and
            # this process could never take the lock again (even once space is freed).
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            if is_disk_full(e):
                raise DiskFull.at(self.path, len(data), e) from None
            raise WebDBError(f"{self.path}: cannot write the writer lock ({e.strerror})") from None
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
    Sections(sections)  # BadInput unless 1..MAX_SECTIONS
    Settings.from_json(settings)  # unknown or bad settings fail before anything is written
    path = os.path.abspath(path)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise BadInput(f"{path}: exists and is not an empty directory")
    try:
        return init_location(path, identity(os.path.basename(path), settings), range(sections), Sections(sections))
    except DiskFull:
        raise
    except OSError as e:
        raise BadInput(f"{e.filename or path}: cannot create the database there ({e.strerror})") from None


def init_location(path: str, ident: dict, sections: Iterable[int], secs: Sections) -> WebDB:
    """The one way a db directory comes to be (``create``, and every location of a rack):
    ``gen/``, the directories of ``sections`` (those that live here), the identity (sealed by
    its checksum), then generation 0 committed (an empty manifest of ``secs``)."""
    os.makedirs(os.path.join(path, GEN_DIR), exist_ok=True)
    for j in sections:
        os.makedirs(section_path(path, j), exist_ok=True)
    sync = Settings.from_json(ident.get("settings")).sync
    write_atomic(os.path.join(path, DB_IDENTITY), seal(ident), sync)
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


def _files_of(tables: dict) -> Iterator[tuple[str, dict, str, int]]:
    """(table, entry, file name, bytes) of every file of one section's tables (levels: the base
    and its delta runs)."""
    for t, e in tables.items():
        for f, size in table_files(e):
            yield t, e, f, size
