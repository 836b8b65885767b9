"""The db's small files: CURRENT, the manifests and webdb.json (docs/format.md §5.1).

How each is read (never blocking on a FIFO, size-capped), sealed with its checksum,
validated field by field, and written (``write_atomic``: temp file, fsync, rename); what a new
db's ``webdb.json`` holds (``identity``).  Every failure is a CorruptionError naming the file
and the field.  This module imports nothing of the writer, so the writer (a rack's locations,
the Dask tasks) uses it without importing ``webdb.core.db``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import zlib
from typing import Any

from webdb.core.settings import Settings
from webdb.errors import BadInput, CorruptionError, DiskFull, NotADatabase, is_disk_full
from webdb.tables.format import DB_FORMAT_VERSION, DB_IDENTITY, TABLE_KINDS

# A table file of generation NNNNNNNN: written by stage S (``-sS``), a delta run of it (``-sSd``),
# a stage's scratch compaction (``-sSc``), its runs merged into one (``-sSr``) or ``webdb compact``
# (``-c``).
GEN_FILE = re.compile(r"^(\d{8})-(?:s\d[dcr]?|c)\.(pbu|pbm|lbm|lbu|due|mrk)$")
# CURRENT: "NNNNNNNN MMMMMMMM CCCCCCCC\n" — generation, CRC-32 of its manifest, CRC-32 of the
# first 17 bytes (docs/format.md §5).  "NNNNNNNN\n" is the format before checksums.
CURRENT_LINE = re.compile(rb"^(\d{8})(?: ([0-9a-f]{8}) ([0-9a-f]{8}))?\n$")
MANIFEST_NAME = re.compile(r"^(\d{8})\.json$")
MARK_NAME = re.compile(r"^(\d{8})\.committed$")
# Small files are read whole; anything larger than this is not one of ours.
_SMALL_MAX = 256 << 20


def read_small(path: str, what: str, limit: int = _SMALL_MAX) -> bytes:
    """The bytes of one of the db's small files.  A FIFO, device or directory in its place is
    refused without blocking (O_NONBLOCK, then fstat); a missing file raises FileNotFoundError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CorruptionError(f"{path}: cannot open {what} ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptionError(f"{path}: {what} is not a regular file")
        if st.st_size > limit:
            raise CorruptionError(f"{path}: {what} of {st.st_size} bytes is larger than any webdb writes")
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    except OSError as e:
        raise CorruptionError(f"{path}: cannot read {what} ({e.strerror})") from None
    finally:
        os.close(fd)


def crc_hex(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


_SEAL = re.compile(rb'"checksum": "([0-9a-f]{8})"')
_UNSEALED = b'"checksum": "00000000"'


def seal(obj: dict) -> bytes:
    """``obj`` as JSON text whose ``checksum`` field is the CRC-32 of the text with that field
    reading ``00000000`` (docs/format.md §5): every byte of the file is covered."""
    text = json.dumps({**obj, "checksum": "00000000"}, indent=1, sort_keys=True).encode()
    return text.replace(_UNSEALED, f'"checksum": "{crc_hex(text)}"'.encode(), 1)


def seal_checksum(data: bytes) -> tuple[str, str | None]:
    """(the checksum of a sealed file's bytes, the checksum it records or None if none)."""
    found = _SEAL.findall(data)
    if len(found) != 1:
        return crc_hex(data), None
    return crc_hex(_SEAL.sub(_UNSEALED, data)), found[0].decode()


def current_line(gen: int, checksum: str) -> bytes:
    """The content of CURRENT naming generation ``gen`` whose manifest has ``checksum``."""
    head = f"{gen:08d} {checksum}".encode()
    return head + f" {crc_hex(head)}\n".encode()


def is_whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_manifest(m: Any, gen: int, path: str) -> None:
    """Raise CorruptionError naming ``path`` and the field if ``m`` is not a manifest of ``gen``."""

    def bad(field: str, why: str) -> CorruptionError:
        return CorruptionError(f"{path}: manifest field {field!r} {why}")

    if not isinstance(m, dict):
        raise CorruptionError(f"{path}: not a manifest (a JSON {type(m).__name__}, not an object)")
    for f in ("generation", "sections", "tables", "status"):
        if f not in m:
            raise bad(f, "is missing")
    if m["generation"] != gen or not is_whole(m["generation"]):
        raise bad("generation", f"is {m['generation']!r}, the file name says {gen}")
    parent = m.get("parent")
    if parent is not None and (not is_whole(parent) or not 0 <= parent < gen):
        raise bad("parent", f"is {parent!r}, not a generation before {gen}")
    secs = m["sections"]
    if not isinstance(secs, dict) or not is_whole(secs.get("k")) or not 1 <= secs["k"] <= 65535:
        raise bad("sections", f"is {secs!r:.100}, not {{'k': 1..65535, 'breakpoints': [...]}}")
    k = secs["k"]
    bps = secs.get("breakpoints", [])
    if not isinstance(bps, list) or (bps and len(bps) != k - 1) or not all(isinstance(b, str) for b in bps):
        raise bad("sections.breakpoints", f"is not a list of {k - 1} URLs")
    for f in ("tables", "status"):
        if not isinstance(m[f], list) or len(m[f]) != k or not all(isinstance(x, dict) for x in m[f]):
            raise bad(f, f"is not a list of {k} objects (one per section)")
    for j, tabs in enumerate(m["tables"]):
        for t, e in tabs.items():
            where = f"tables[{j}].{t}"
            if t not in TABLE_KINDS:
                raise bad(where, "is not a table name")
            if not isinstance(e, dict):
                raise bad(where, "is not an object")
            fm = GEN_FILE.match(e.get("file", "")) if isinstance(e.get("file"), str) else None
            if fm is None or int(fm.group(1)) > gen:
                raise bad(f"{where}.file", f"is {e.get('file')!r}, not a table file of generation <= {gen}")
            for f in ("records", "bytes"):
                if not is_whole(e.get(f)) or e[f] < 0:
                    raise bad(f"{where}.{f}", f"is {e.get(f)!r}, not a count")
            if "due" in e and not _is_due_index(t, e["due"], gen):
                raise bad(f"{where}.due", f"is {e['due']!r:.100}, not a due index of generation <= {gen}")
            if "marks" in e and not _is_side_file(t, e["marks"], gen, "mrk"):
                raise bad(f"{where}.marks", f"is {e['marks']!r:.100}, not a mark table of generation <= {gen}")
            runs = e.get("runs", [])
            if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
                raise bad(f"{where}.runs", "is not a list of objects")
            for i, r in enumerate(runs):
                rm = GEN_FILE.match(r.get("file", "")) if isinstance(r.get("file"), str) else None
                if rm is None or int(rm.group(1)) > gen:
                    raise bad(
                        f"{where}.runs[{i}].file", f"is {r.get('file')!r}, not a table file of generation <= {gen}"
                    )
                for f in ("bytes", "entries"):
                    if not is_whole(r.get(f)) or r[f] < 0:
                        raise bad(f"{where}.runs[{i}].{f}", f"is {r.get(f)!r}, not a count")
    for j, sc in enumerate(m["status"]):
        for st, n in sc.items():
            if not st.isdigit() or not is_whole(n) or n < 0:
                raise bad(f"status[{j}].{st}", f"is {n!r}, not a count")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, sync: bool = True) -> None:
    """Write a small file by temp + fsync + rename (+ directory fsync)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if is_disk_full(e):
            raise DiskFull.at(path, len(data), e) from None
        raise
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def identity(name: str, settings: dict) -> dict:
    """The content of ``webdb.json`` for a new db: format, name, creation time, the settings given."""
    stored = {k: v for k, v in settings.items() if v is not None}
    return {"format": DB_FORMAT_VERSION, "name": name, "created": time.time(), "settings": stored}


_IDENTITY_FIELDS = {"format", "name", "created", "settings", "checksum"}


def read_identity(path: str) -> dict:
    """``DB/webdb.json``, verified: a JSON object of known fields, its checksum when it has
    one (format 2; format 1 has none), a format this webdb reads, settings it knows."""
    p = os.path.join(path, DB_IDENTITY)
    try:
        data = read_small(p, "identity file", 1 << 20)
    except FileNotFoundError:
        raise NotADatabase(f"{path}: not a webdb database (no {DB_IDENTITY})") from None
    except CorruptionError as e:
        raise NotADatabase(str(e)) from None
    actual, own = seal_checksum(data)
    if own is not None and own != actual:
        raise CorruptionError(f"{p}: checksum mismatch (the identity file is damaged)")
    try:
        ident = json.loads(data)
    except ValueError as e:
        raise CorruptionError(f"{p}: not JSON ({e})") from None
    if not isinstance(ident, dict):
        raise CorruptionError(f"{p}: not a JSON object")
    unknown = sorted(set(ident) - _IDENTITY_FIELDS)
    if unknown:
        raise CorruptionError(f"{p}: unknown field {unknown[0]!r} (damaged?)")
    if "checksum" in ident and own is None:
        raise CorruptionError(f"{p}: checksum field is not where a webdb writer puts it (damaged)")
    fmt = ident.get("format", 0)
    if not is_whole(fmt) or fmt < 1:
        raise CorruptionError(f"{p}: field 'format' is {fmt!r}, not a format version")
    if fmt > DB_FORMAT_VERSION:
        raise NotADatabase(f"{path}: database format {fmt} is newer than this webdb's {DB_FORMAT_VERSION}")
    if not isinstance(ident.get("settings", {}), dict):
        raise CorruptionError(f"{p}: field 'settings' is not an object")
    try:
        Settings.from_json(ident.get("settings"))
    except BadInput as e:
        raise CorruptionError(f"{p}: {e}") from None
    return ident


def _is_due_index(table: str, due: object, gen: int) -> bool:
    """A PagesByURL entry's ``due`` (docs/format.md §3.1): a due file of generation <= ``gen``
    with its counts, and its delta runs (if any) due files of generation <= ``gen`` with theirs."""
    if not _is_side_file(table, due, gen, "due"):
        return False
    runs = due.get("runs", [])  # type: ignore[union-attr]
    if not isinstance(runs, list):
        return False
    for r in runs:
        if not isinstance(r, dict) or not isinstance(r.get("file"), str):
            return False
        m = GEN_FILE.match(r["file"])
        if m is None or m.group(2) != "due" or int(m.group(1)) > gen:
            return False
        if not all(is_whole(r.get(f)) and r[f] >= 0 for f in ("bytes", "entries")):
            return False
    return True


def _is_side_file(table: str, e: object, gen: int, suffix: str) -> bool:
    """A file named inside a PagesByURL entry (its ``due`` index, its ``marks``): a ``suffix``
    file of generation <= ``gen`` with its counts."""
    if table != "pages_by_url" or not isinstance(e, dict) or not isinstance(e.get("file"), str):
        return False
    m = GEN_FILE.match(e["file"])
    counts = all(is_whole(e.get(f)) and e[f] >= 0 for f in ("records", "bytes"))
    return m is not None and m.group(2) == suffix and int(m.group(1)) <= gen and counts
