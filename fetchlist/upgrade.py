"""``webdb segment upgrade``: convert a version 1 segment (content in ``.bin`` files) to version 2
(content as WARC), atomically.

Steps (docs/segment.md, "Upgrading a version 1 segment")::

    1. SEG/upgrade.tmp/{fetch,content}/   new fetch files (content references into the WARC
                                          files) and WARC files + indexes, written and fsynced
    2. SEG/upgrade.tmp/SEGMENT            version 2 identity, temp + rename: the commit point
    3. roll forward                       rename the new files over the old ones, then SEGMENT,
                                          delete the .bin files and upgrade.tmp/

A kill before 2 leaves the version 1 segment as it was (the next upgrade starts afresh); a kill
after 2 leaves a committed upgrade that ``Segment.open`` refuses to read until ``upgrade`` runs
again and finishes step 3 (every rename in it is idempotent).  The fetchlist and parse files
are not rewritten.  Partitions being fetched (their fetch file locked) are refused.

Cost: one pass over each partition's fetch records and content; the WARC files are about the
size of the ``.bin`` files gzip-compressed plus ~1 KiB of headers per fetched URL.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal

from fetchlist.segment import (
    CONTENT,
    FETCH,
    SEGMENT_FILE,
    SEGMENT_VERSION,
    UPGRADE_DIR,
    Segment,
    exchange_of,
    json_line,
    open_append,
    record_to_json,
    write_new,
)
from fetchlist.warc import WarcWriter
from webdb import Status
from webdb.errors import BadInput

__all__ = ["upgrade_segment"]


def upgrade_segment(path: str | os.PathLike) -> dict:
    """Upgrade the segment at ``path`` to the current version; return what was done:
    ``{"segment", "from_version", "version", "parts", "responses", "resumed"}``."""
    path = os.fspath(path)
    stage = os.path.join(path, UPGRADE_DIR)
    if os.path.islink(stage):
        raise BadInput(f"{stage}: is a symlink; refusing to use it")
    if os.path.isfile(os.path.join(stage, SEGMENT_FILE)):
        _roll_forward(path, stage)
        return {"segment": path, "from_version": 1, "version": SEGMENT_VERSION, "resumed": True}
    seg = Segment.open(path)
    if seg.version >= SEGMENT_VERSION:
        _clean(path, stage)  # leftovers of a roll forward killed after its last rename
        return {"segment": path, "from_version": seg.version, "version": seg.version, "parts": 0, "responses": 0}
    if os.path.lexists(stage):
        shutil.rmtree(stage)  # an attempt killed before its commit
    os.mkdir(stage)
    for kind in (FETCH, CONTENT):
        os.mkdir(os.path.join(stage, kind))
    locks = []
    responses = 0
    try:
        for p in seg.parts():
            lock = open_append(seg.file(FETCH, p))
            locks.append(lock)
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BadInput(
                    f"{seg.file(FETCH, p)}: partition {p} is being fetched; upgrade after the fetch"
                ) from None
            new_fetch = os.path.join(stage, FETCH, os.path.basename(seg.file(FETCH, p)))
            with WarcWriter(os.path.join(stage, CONTENT), p, opener=open_append) as w, open(new_fetch, "xb") as out:
                for r in seg.records(p, content=True):
                    if r.status == Status.FETCHED or r.content_ref is not None:
                        loc = w.write(exchange_of(r))
                        r.content_ref = (loc.offset, loc.length)
                        responses += 1
                    out.write(json_line(record_to_json(r)))
                out.flush()
                os.fsync(out.fileno())
        for d in (os.path.join(stage, FETCH), os.path.join(stage, CONTENT), stage):
            _fsync_dir(d)
        ident = {**seg.info, "version": SEGMENT_VERSION, "upgraded_from": seg.version}
        _fault("upgrade.staged")
        write_new(os.path.join(stage, SEGMENT_FILE), json.dumps(ident, indent=1).encode() + b"\n")
        _fsync_dir(stage)
        _fault("upgrade.committed")
        _roll_forward(path, stage)
    finally:
        for f in locks:
            f.close()
    return {
        "segment": path,
        "from_version": seg.version,
        "version": SEGMENT_VERSION,
        "parts": len(seg.parts()),
        "responses": responses,
        "resumed": False,
    }


def _roll_forward(path: str, stage: str) -> None:
    """Move a committed upgrade's files into place (idempotent: safe to run again after a kill)."""
    for kind in (FETCH, CONTENT):
        src = os.path.join(stage, kind)
        if os.path.isdir(src):
            for name in sorted(os.listdir(src)):
                os.replace(os.path.join(src, name), os.path.join(path, kind, name))
            _fsync_dir(os.path.join(path, kind))
        _fault(f"upgrade.moved.{kind}")
    os.replace(os.path.join(stage, SEGMENT_FILE), os.path.join(path, SEGMENT_FILE))
    _fault("upgrade.switched")
    _fsync_dir(path)
    _clean(path, stage)


def _clean(path: str, stage: str) -> None:
    content = os.path.join(path, CONTENT)
    for name in os.listdir(content):
        if name.endswith(".bin"):
            os.unlink(os.path.join(content, name))
    if os.path.lexists(stage):
        shutil.rmtree(stage)


def _fault(name: str) -> None:
    """Crash tests: ``WEBDB_FAULTS=name`` kills the process here (as webdb's fault points do;
    fetchlist does not import webdb's internals)."""
    if name in os.environ.get("WEBDB_FAULTS", "").split(","):
        os.kill(os.getpid(), signal.SIGKILL)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
