"""The due index: each section's pages ordered by due bucket, then generate's order
(docs/design.md §4.6, layout in docs/format.md §3.1).

One table file per section, named inside the section's PagesByURL manifest entry
(``"due": {"file", "records", "bytes"}``, kept by ``webdb.core.manifest.index_entry`` and
``with_index`` alone), so it is committed,
kept and removed with the PagesByURL file it describes.  It is written by

- stage 1 of every batch (``IndexEdits``: the changed pages' old records deleted, new ones
  put, merged with the old index file as PagesByURL is merged with its edits), and
- ``build_index`` from a finished PagesByURL file (bulk loads, ``rebalance``).

``Reader.due`` (webdb.core.reader) reads it for generate; ``webdb.tools.check.check_index`` compares it
with PagesByURL.  A PagesByURL
entry without ``due`` (a db written before the index) is simply not indexed: stage 1 keeps it
so, generate scans, and ``webdb rebalance`` (to the same k) builds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from webdb.core.manifest import with_index
from webdb.core.sections import section_path
from webdb.core.settings import Settings
from webdb.errors import CorruptionError
from webdb.tables.format import DUE_SUFFIX, KIND_DUE, KIND_PAGES_BY_URL
from webdb.tables.merge import MergeCursor
from webdb.tables.pagecodec import due_record, due_tie
from webdb.tables.table import TableReader, TableWriter
from webdb.util.sortbuf import SortBuffer

__all__ = ["IndexEdits", "build_index", "index_name", "index_sections"]

_PUT, _DEL = b"\x01", b"\x00"
_SORT_BYTES = 64 << 20


def index_name(gen: int, step: str) -> str:
    """File name of a due index written by ``step`` (``s1``: stage 1, ``s0``: a load)."""
    return f"{gen:08d}-{step}.{DUE_SUFFIX}"


def _entry(path: str, info: dict) -> dict:
    return {"file": os.path.basename(path), "records": info["records"], "bytes": info["bytes"]}


class IndexEdits:
    """The due index changes of one stage 1: ``change(url, old, new)`` per page it rewrote,
    then ``write`` merges them with the old index into the new one.

    Memory: a sort buffer of ``memory`` bytes (spilled runs under ``tmp``).  Cost per changed
    page: one mmh3 hash and two small records; per round a merge of the index file whose
    untouched blocks are copied raw (docs/design.md §4.1)."""

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
