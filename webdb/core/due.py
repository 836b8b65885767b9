"""The due index: each section's pages ordered by due bucket, then generate's order
(docs/design.md §4.6, layout in docs/format.md §3.1).

Per section a base table file and delta runs over it, newest first — the levels of
webdb.tables.levels — named inside the section's PagesByURL manifest entry
(``"due": {"file", "records", "bytes", "runs": [{"file", "bytes", "entries"}, ...]}``, kept
by ``webdb.core.manifest.index_entry`` and ``with_index`` alone), so they are committed, kept
and removed with the PagesByURL file they describe.  They are written by

- stage 1 of every batch (``IndexEdits`` collects the changed pages' old records to delete and
  new ones to put; ``update_index`` writes them as a new delta run — puts and tombstones, the
  cost following the batch — and, when ``levels.level_step`` says so, merges the runs into one
  or into a new base), and
- ``build_index`` from a finished PagesByURL file (bulk loads, ``rebalance``): a base alone.

``Reader.due`` (webdb.core.reader) reads the levels merged for generate;
``webdb.tools.check.check_index`` compares them with PagesByURL.  An entry without ``runs`` is
a base alone (as every db written before the runs has it).  A PagesByURL entry without ``due``
(a db written before the index) is simply not indexed: stage 1 keeps it so, generate scans,
and ``webdb rebalance`` (to the same k) builds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from webdb.core.manifest import index_files, with_index
from webdb.core.sections import section_path
from webdb.core.settings import Settings
from webdb.errors import CorruptionError
from webdb.tables.format import DUE_SUFFIX, KIND_DUE, KIND_DUE_RUN, KIND_PAGES_BY_URL
from webdb.tables.levels import COMPACT, DEL, KEEP, PUT, Levels, compact, level_step, merge_runs, written
from webdb.tables.merge import MergeCursor
from webdb.tables.pagecodec import due_record, due_tie
from webdb.tables.table import TableReader, TableWriter
from webdb.util import faults
from webdb.util.sortbuf import SortBuffer

__all__ = ["IndexEdits", "build_index", "compact_index", "index_name", "index_sections", "open_index", "update_index"]

_PUT, _DEL = PUT, DEL
_SORT_BYTES = 64 << 20


def index_name(gen: int, step: str) -> str:
    """File name of a due index file written by ``step``: ``s0`` a load's base, ``s1`` stage 1's
    new base (a compaction, or a section that had no pages), ``s1d`` stage 1's delta run,
    ``s1r`` stage 1's runs merged into one, ``c`` a base written by ``webdb compact``."""
    return f"{gen:08d}-{step}.{DUE_SUFFIX}"


def open_index(d: str, due: dict, lazy: bool = True) -> Levels:
    """The levels of the due index ``due`` (a manifest entry) of the section directory ``d``
    (what stage 1 compacts; ``Reader.due`` opens the same files itself: the dashboard's reader
    does not import this module)."""
    files = index_files(due)
    ts = _open(d, [(f["file"], KIND_DUE if i == 0 else KIND_DUE_RUN) for i, f in enumerate(files)], lazy)
    return Levels(ts[0], ts[1:], due["records"])


def _open(d: str, files: list[tuple[str, int]], lazy: bool = True) -> list[TableReader]:
    opened: list[TableReader] = []
    try:
        for name, kind in files:
            opened.append(TableReader(os.path.join(d, name), kind, lazy=lazy))
    except BaseException:
        for t in opened:
            t.close()
        raise
    return opened


def _entry(path: str, info: dict) -> dict:
    return {"file": os.path.basename(path), "records": info["records"], "bytes": info["bytes"]}


class IndexEdits:
    """The due index changes of one stage 1: ``change(url, old, new)`` per page it rewrote,
    then ``update_index`` writes them as a delta run (``write_run``), or ``write`` merges them
    into a base (a section that had no pages).

    Memory: a sort buffer of ``memory`` bytes (spilled runs under ``tmp``).  Cost per changed
    page: one mmh3 hash and two small records; per round one sort of them and one write of
    the run — nothing in proportion to the section."""

    def __init__(self, tmp: str, name: str, block_size: int, codec: str, memory: int = _SORT_BYTES):
        self.buf = SortBuffer(tmp, name, memory, block_size, codec)

    def change(self, url_b: bytes, old: bytes | None, new: bytes | None) -> None:
        tie = due_tie(url_b)
        ok = due_record(url_b, old, tie) if old is not None else None
        nk = due_record(url_b, new, tie) if new is not None else None
        if ok == nk:
            return
        if ok is not None and (nk is None or ok[0] != nk[0]):
            self.buf.add(ok[0] + b"\x00" + _DEL)
        if nk is not None:
            self.buf.add(nk[0] + b"\x00" + _PUT + nk[1])

    @property
    def count(self) -> int:
        """The edit records collected (a delete and a put per moved page)."""
        return self.buf.count

    def write_run(self, path: str, block_size: int, codec: str, sync: bool) -> dict:
        """Write the changes, sorted, as a delta run (``PUT`` + record value, or ``DEL``) to
        ``path``; returns its entry in the index's ``runs``."""
        out = TableWriter(path, KIND_DUE_RUN, block_size, codec, sync=sync)
        try:
            prev = None
            for rec in self.buf.sorted():
                i = rec.index(b"\x00", 20)  # a url holds no 0x00: the first one after the fixed fields
                key = rec[:i]
                if key == prev:  # one change per page and stage: a key is edited once
                    raise CorruptionError(f"{path}: due index edited twice at {key[20:]!r:.100}")
                prev = key
                out.add(key, rec[i + 1 :])
            info = out.close()
        except BaseException:
            out.abort()
            raise
        finally:
            self.buf.cleanup()
        return {"file": os.path.basename(path), "bytes": info["bytes"], "entries": info["records"]}

    def write(self, old_path: str | None, path: str, block_size: int, codec: str, sync: bool) -> dict:
        """Merge the changes with the index file ``old_path`` (None: the section had no pages)
        into ``path``; returns its manifest entry.  A delete of a record the old index does not
        hold means the index is out of step with PagesByURL: CorruptionError naming the file."""
        old = TableReader(old_path, KIND_DUE) if old_path else None
        out = TableWriter(path, KIND_DUE, block_size, codec, sync=sync)
        where = old_path or path

        def groups() -> Iterator[tuple[bytes, bytes]]:
            for rec in self.buf.sorted():
                i = rec.index(b"\x00", 20)  # a url holds no 0x00: the first one after the fixed fields
                yield rec[:i], rec[i + 1 :]

        def combine(key: bytes, held: bytes | None, edit: bytes) -> bytes | None:
            if edit[:1] == _DEL:
                if held is None:
                    raise CorruptionError(f"{where}: due index lacks {key[20:]!r:.100}, which PagesByURL holds")
                return None
            return edit[1:]

        try:
            cur = MergeCursor(old, out)
            cur.merge_points(groups(), combine)
            cur.finish()
            info = out.close()
        except BaseException:
            out.abort()
            raise
        finally:
            if old is not None:
                old.close()
            self.buf.cleanup()
        return _entry(path, info)


def update_index(d: str, gen: int, old: dict | None, index: IndexEdits, settings: Settings) -> dict:
    """Stage 1's new due index of the section directory ``d`` from its old one ``old`` (a
    manifest entry; None: the section had no pages) and the changes ``index``.  Returns the
    new manifest entry; the old one itself when nothing changed.

    The changes become a delta run (``s1d``, cost: the edits).  Then ``level_step`` with the
    links' policy (``level_ratio`` of the base's bytes, ``level_runs`` runs): ``COMPACT``
    merges the runs into a new base (``s1``; the base's blocks no edit falls in copied raw,
    tombstones dropped), ``MERGE_RUNS`` merges the runs into one (``s1r``; the base not read).
    A run merged away is removed here (no manifest ever names it); the old generation's files
    stay until the manifest that names them is dropped."""
    s = settings
    if old is None:
        return index.write(None, os.path.join(d, index_name(gen, "s1")), s.block_size, s.codec, s.sync)
    if not index.count:
        index.buf.cleanup()
        return old
    run = index.write_run(os.path.join(d, index_name(gen, "s1d")), s.block_size, s.codec, s.sync)
    faults.point("stage1.due_run_written")
    runs = [run, *old.get("runs", ())]
    base = {"file": old["file"], "records": old["records"], "bytes": old["bytes"]}
    step = level_step(old["bytes"], [r["bytes"] for r in runs], s.level_ratio, s.level_runs, False)
    if step == KEEP:
        return {**base, "runs": runs}
    if step == COMPACT:
        view = open_index(d, {**base, "runs": runs})
        path = os.path.join(d, index_name(gen, "s1"))
        out = TableWriter(path, KIND_DUE, s.block_size, s.codec, sync=s.sync)
        _, info = written(view, out, lambda: compact(view, out))
        new = _entry(path, info)
    else:
        view = Levels(None, _open(d, [(r["file"], KIND_DUE_RUN) for r in runs]), 0)
        path = os.path.join(d, index_name(gen, "s1r"))
        out = TableWriter(path, KIND_DUE_RUN, s.block_size, s.codec, sync=s.sync)
        _, info = written(view, out, lambda: merge_runs(view, out))
        new = {**base, "runs": [{"file": os.path.basename(path), "bytes": info["bytes"], "entries": info["records"]}]}
    faults.point("stage1.due_merged")
    os.unlink(os.path.join(d, run["file"]))
    return new


def compact_index(d: str, gen: int, due: dict, pages: int, settings: Settings) -> dict:
    """The due index ``due`` (a manifest entry with runs) of the section directory ``d``, whose
    PagesByURL holds ``pages`` records, merged into a new base (``c``, what ``webdb compact``
    writes beside the tables' new bases); returns its manifest entry.  The caller commits it
    and removes the file if it does not."""
    s = settings
    view = open_index(d, due)
    path = os.path.join(d, index_name(gen, "c"))
    out = TableWriter(path, KIND_DUE, s.block_size, s.codec, sync=s.sync)
    _, info = written(view, out, lambda: compact(view, out))
    if info["records"] != pages:
        raise CorruptionError(f"{path}: {info['records']} records after compaction, PagesByURL holds {pages}")
    return _entry(path, info)


def build_index(pages_path: str, path: str, tmp: str, block_size: int, codec: str, sync: bool) -> dict:
    """Write the due index of the finished PagesByURL file ``pages_path`` to ``path`` (what a
    bulk load and ``rebalance`` call once a section's PagesByURL is closed); returns its
    manifest entry.  Cost: one read of the pages, an external sort of one ~40-byte record
    per page (``_SORT_BYTES`` of memory, spilled under ``tmp``), one write."""
    buf = SortBuffer(tmp, f"due-{os.path.basename(path)}", _SORT_BYTES, block_size, codec)
    out = TableWriter(path, KIND_DUE, block_size, codec, sync=sync)
    try:
        t = TableReader(pages_path, KIND_PAGES_BY_URL)
        try:
            for b in range(t.nblocks):
                keys, vals = t.block(b, fill_cache=False)
                for k, v in zip(keys, vals):
                    dk, dv = due_record(k, v)
                    buf.add(dk + b"\x00" + dv)
        finally:
            t.close()
        for rec in buf.sorted():
            i = rec.index(b"\x00", 20)
            out.add(rec[:i], rec[i + 1 :])
        info = out.close()
    except BaseException:
        out.abort()
        raise
    finally:
        buf.cleanup()
    return _entry(path, info)


def index_sections(root: str, gen: int, tables: list[dict], settings: Settings, tmp: str) -> None:
    """Build the due index of every section's finished PagesByURL of generation ``gen`` and
    name it in its entry of ``tables`` (the manifest's per-section tables): what a bulk load
    and ``rebalance`` call once their PagesByURL files are closed, before the commit.  The
    files are of the new generation, so a crash before the commit leaves them to ``recover``."""
    for j, tabs in enumerate(tables):
        e = tabs.get("pages_by_url")
        if e is None:
            continue
        d = section_path(root, j)
        due = build_index(
            os.path.join(d, e["file"]),
            os.path.join(d, index_name(gen, "s0")),
            tmp,
            settings.block_size,
            settings.codec,
            settings.sync,
        )
        tabs["pages_by_url"] = with_index(e, due)
