"""The due index: each section's pages ordered by due bucket, then generate's order
(docs/design.md §4.5, layout in docs/format.md §3.1).

One table file per section, named inside the section's PagesByURL manifest entry
(``"due": {"file", "records", "bytes"}``, read only through ``index_entry``), so it is committed,
kept and removed with the PagesByURL file it describes.  It is written by

- stage 1 of every batch (``IndexEdits``: the changed pages' old records deleted, new ones
  put, merged with the old index file as PagesByURL is merged with its edits), and
- ``build_index`` from a finished PagesByURL file (bulk loads, ``rebalance``).

``front`` reads it for generate; ``check_index`` compares it with PagesByURL.  A PagesByURL
entry without ``due`` (a db written before the index) is simply not indexed: stage 1 keeps it
so, generate scans, and ``webdb rebalance`` (to the same k) builds it.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator

from webdb.errors import CorruptionError
from webdb.sections import section_path
from webdb.sortbuf import SortBuffer
from webdb.tables.format import DUE_SUFFIX, KIND_DUE, KIND_PAGES_BY_URL
from webdb.tables.merge import MergeCursor
from webdb.tables.pagecodec import due_bucket, due_prefix, due_record, due_tie
from webdb.tables.table import TableReader, TableWriter

__all__ = ["IndexEdits", "build_index", "check_index", "front", "index_entry", "index_name", "index_sections"]

_PUT, _DEL = b"\x01", b"\x00"
_SORT_BYTES = 64 << 20


def index_entry(pages_entry: dict | None) -> dict | None:
    """The due index of one section's PagesByURL manifest entry (None: not indexed).  The one
    place that knows where the manifest keeps it."""
    return None if pages_entry is None else pages_entry.get("due")


def with_index(pages_entry: dict, due: dict | None) -> dict:
    """``pages_entry`` naming ``due`` as its index (``{"file", "records", "bytes"}``)."""
    e = {k: v for k, v in pages_entry.items() if k != "due"}
    if due is not None:
        e["due"] = due
    return e


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


def _buckets(t: TableReader, last: int) -> Iterator[int]:
    """The buckets <= ``last`` that hold records of the index ``t``, ascending: one index
    search per bucket (and one block read when a bucket starts inside a block)."""
    b = 0
    while b <= last:
        k = next(t.items(due_prefix(b)), None)
        if k is None:
            return
        b = int.from_bytes(k[0][:4], "big")
        if b > last:
            return
        yield b
        b += 1


def _bucket(t: TableReader, b: int) -> Iterator[tuple[bytes, bytes]]:
    for keys, vals in t.ranges(due_prefix(b), due_prefix(b + 1)):
        yield from zip(keys, vals)


def front(reader, horizon: int) -> Iterator[tuple[bytes, bytes]] | None:
    """The due index records (key, value) of every page of ``reader``'s sections whose due
    bucket is at most ``horizon``'s, in generate's order (score descending, tie, url) — the
    pages of ``horizon``'s own bucket that are due later are among them (the value says when).
    None when a section with pages has no index (generate then scans).

    Lazy: a k-way merge (heapq.merge) of one stream per section and due bucket, each read a
    block at a time (``ranges``: no cache filled), so a caller that stops after n records
    reads about n records plus one block per stream.  Sections of a rack's partial reader
    that are not here are skipped."""
    pages = reader.tables["pages_by_url"]
    paths = []
    for j, t in enumerate(pages):
        if t is None:
            continue
        e = index_entry(reader.manifest["tables"][j].get("pages_by_url"))
        if e is None:
            return None
        paths.append(os.path.join(reader.db.section_dir(j), e["file"]))
    return _merged(paths, due_bucket(horizon))


def _merged(paths: list[str], last: int) -> Iterator[tuple[bytes, bytes]]:
    tables = []
    try:
        for p in paths:
            tables.append(TableReader(p, KIND_DUE, lazy=True))
        streams = [_bucket(t, b) for t in tables for b in _buckets(t, last)]
        yield from heapq.merge(*streams, key=_order)
    finally:
        for t in tables:
            t.close()


def _order(rec: tuple[bytes, bytes]) -> bytes:
    return rec[0][4:]


def index_sections(root: str, gen: int, tables: list[dict], settings: dict, tmp: str) -> None:
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
            settings["block_size"],
            settings["codec"],
            settings["sync"],
        )
        tabs["pages_by_url"] = with_index(e, due)


def check_index(reader, tmp: str) -> int:
    """Verify every section's due index against its PagesByURL: the same records, byte for
    byte, as ``build_index`` would write (so every page is indexed once, under its current
    bucket, score and mark, and nothing else is); returns the records checked.  Raises
    CorruptionError naming the index file.  Cost: a read of PagesByURL and of the index, an
    external sort of one record per page."""
    n = 0
    for j, t in enumerate(reader.tables["pages_by_url"]):
        entry = reader.manifest["tables"][j].get("pages_by_url")
        e = index_entry(entry)
        if t is None or e is None:
            continue
        path = os.path.join(reader.db.section_dir(j), e["file"])
        want = SortBuffer(tmp, f"due-check-{j}", _SORT_BYTES)
        for b in range(t.nblocks):
            keys, vals = t.block(b, fill_cache=False)
            for k, v in zip(keys, vals):
                dk, dv = due_record(k, v)
                want.add(dk + b"\x00" + dv)
        idx = TableReader(path, KIND_DUE)
        try:
            if idx.count != e["records"]:
                raise CorruptionError(f"{path}: holds {idx.count} records, the manifest says {e['records']}")
            got = (k + b"\x00" + v for k, v in _checked_items(idx))
            for x in want.sorted():
                y = next(got, None)
                if y != x:
                    raise CorruptionError(f"{path}: due index differs from PagesByURL at {_url_of(x)!r:.100}")
                n += 1
            extra = next(got, None)
            if extra is not None:
                raise CorruptionError(f"{path}: due index holds {_url_of(extra)!r:.100}, which is no page")
        finally:
            idx.close()
            want.cleanup()
    return n


def _checked_items(t: TableReader) -> Iterator[tuple[bytes, bytes]]:
    """Every record of ``t``, each block's keys checked against the index and in order."""
    prev = None
    for b in range(t.nblocks):
        keys, vals = t.block(b, fill_cache=False)
        if keys and (keys[0] != t.first_keys[b] or keys[-1] != t.last_keys[b]):
            raise CorruptionError(f"{t.where(b)}: first/last key differ from the index")
        for k in keys:
            if prev is not None and k <= prev:
                raise CorruptionError(f"{t.where(b)}: key {k!r:.80} out of order")
            prev = k
        yield from zip(keys, vals)


def _url_of(rec: bytes) -> bytes:
    """The url of a due record joined as ``key 0x00 value``."""
    return rec[20 : rec.index(b"\x00", 20)]
