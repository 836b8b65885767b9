"""The mark table: each section's generate marks, kept beside its pages instead of in them
(docs/design.md §4.7, layout in docs/format.md §3.2).

A generate marks the pages it chose (``Writer.mark_generated``): their ``meta["gen"]`` becomes
the mark.  Written into the pages, that is an edit of PagesByURL, PagesByMD5 and the due index
per page, and 100k marks touch nearly every block of them.  Instead each section keeps a small
table, key url, value the mark (UTF-8), named inside the section's PagesByURL manifest entry
(``"marks": {"file", "records", "bytes"}``, read and written by
``webdb.core.manifest.marks_entry`` and ``with_marks`` alone).  A page's meta is its stored
meta with ``"gen"`` set to its entry's mark when it has one: every reader of pages overlays it
(``Reader.marks``), so a page reads exactly as if the mark had been written into it.

Stage 1 of every batch keeps it (``MarkEdits``): a batch of marks only (a generate's) writes
the new table and leaves the page tables as they are; a batch that rewrites a marked page
writes the page with its mark (or without, when the batch clears it) and drops the entry; a
page deleted drops it.  So the table holds the marks no batch has answered yet: in a crawl,
about the last rounds' top-N, whatever the size of the db.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from webdb.core.settings import Settings
from webdb.errors import BadInput, CorruptionError
from webdb.tables.format import KIND_MARKS, MARKS_SUFFIX
from webdb.tables.table import TableReader, TableWriter

__all__ = [
    "MarkCursor",
    "MarkEdits",
    "check_marks",
    "decode_mark",
    "encode_mark",
    "marks_name",
    "read_marks",
    "write_marks",
]

# Longest mark accepted (bytes of UTF-8): a segment name and a time.
MAX_MARK_BYTES = 1024


def marks_name(gen: int, step: str) -> str:
    """File name of a mark table written by ``step`` (``s1``: stage 1, ``s0``: a rebalance)."""
    return f"{gen:08d}-{step}.{MARKS_SUFFIX}"


def encode_mark(mark: object) -> bytes:
    """A mark as the table stores it (UTF-8; lone surrogates kept, as page meta keeps them);
    BadInput for anything but a non-empty string of at most ``MAX_MARK_BYTES``."""
    if not isinstance(mark, str) or not mark:
        raise BadInput(f"a generate mark must be a non-empty string, not {mark!r:.100}")
    b = mark.encode("utf-8", "surrogatepass")
    if len(b) > MAX_MARK_BYTES:
        raise BadInput(f"generate mark {mark!r:.100} is longer than {MAX_MARK_BYTES} bytes")
    return b


def decode_mark(value: bytes) -> str:
    return value.decode("utf-8", "surrogatepass")


def read_marks(path: str) -> dict[bytes, str]:
    """A mark table as a dict (url bytes to mark).  Memory: about 150 bytes a mark."""
    t = TableReader(path, KIND_MARKS)
    try:
        out: dict[bytes, str] = {}
        for b in range(t.nblocks):
            keys, vals = t.block(b, fill_cache=False)
            for k, v in zip(keys, vals):
                out[k] = decode_mark(v)
        return out
    finally:
        t.close()


def write_marks(
    path: str, items: Iterable[tuple[bytes, bytes]], block_size: int, codec: str, sync: bool
) -> dict | None:
    """Write the (url, mark bytes) ``items``, in URL order, as the mark table ``path``; returns
    its manifest entry, or None (and no file) when there are none."""
    out = TableWriter(path, KIND_MARKS, block_size, codec, sync=sync)
    try:
        n = 0
        for k, v in items:
            out.add(k, v)
            n += 1
        if n == 0:
            out.abort()
            return None
        info = out.close()
    except BaseException:
        out.abort()
        raise
    return {"file": os.path.basename(path), "records": info["records"], "bytes": info["bytes"]}


class MarkCursor:
    """The entries of a mark table (None: no table) asked for by increasing URL: ``get(url)``
    moves forward and returns the url's mark bytes or None.  Reads each block once."""

    def __init__(self, path: str | None) -> None:
        self.table = TableReader(path, KIND_MARKS) if path is not None else None
        self._it: Iterator[tuple[bytes, bytes]] = self.table.items() if self.table is not None else iter(())
        self._cur = next(self._it, None)

    def get(self, url_b: bytes) -> bytes | None:
        cur, it = self._cur, self._it
        while cur is not None and cur[0] < url_b:
            cur = next(it, None)
        self._cur = cur
        return cur[1] if cur is not None and cur[0] == url_b else None

    def close(self) -> None:
        if self.table is not None:
            self.table.close()


class MarkEdits:
    """The mark table changes of one stage 1: ``set(url, mark bytes | None)`` by increasing
    URL (None: the entry goes), then ``write`` merges them with the old table into the new
    one.  Memory: the changes (a batch's marks and the marked pages it rewrote)."""

    def __init__(self) -> None:
        self.changes: list[tuple[bytes, bytes | None]] = []

    def set(self, url_b: bytes, mark: bytes | None) -> None:
        self.changes.append((url_b, mark))

    def write(self, old_path: str | None, old_entry: dict | None, path: str, settings: Settings) -> dict | None:
        """The new table's manifest entry: ``old_entry`` itself when nothing changed (the file
        is carried over), else ``path`` written (None: no marks left)."""
        if not self.changes:
            return old_entry
        changes = self.changes
        for a, b in zip(changes, changes[1:]):
            if a[0] >= b[0]:
                raise AssertionError(f"mark changes out of order at {b[0]!r:.100}")

        def merged() -> Iterator[tuple[bytes, bytes]]:
            old = TableReader(old_path, KIND_MARKS) if old_path is not None else None
            try:
                it = old.items() if old is not None else iter(())
                cur = next(it, None)
                for url_b, mark in changes:
                    while cur is not None and cur[0] < url_b:
                        yield cur
                        cur = next(it, None)
                    if cur is not None and cur[0] == url_b:
                        cur = next(it, None)
                    if mark is not None:
                        yield url_b, mark
                while cur is not None:
                    yield cur
                    cur = next(it, None)
            finally:
                if old is not None:
                    old.close()

        return write_marks(path, merged(), settings.block_size, settings.codec, settings.sync)


def check_marks(path: str, records: int, is_page: Callable[[bytes], bool]) -> int:
    """Verify a mark table: its blocks (CRCs, order, index against data), its count against
    the manifest's ``records``, every mark a non-empty string and every URL a page
    (``is_page(url)``); returns the records.  CorruptionError naming the file."""
    t = TableReader(path, KIND_MARKS)
    try:
        if t.count != records:
            raise CorruptionError(f"{path}: holds {t.count} marks, the manifest says {records}")
        prev = None
        n = 0
        for b in range(t.nblocks):
            keys, vals = t.block(b, fill_cache=False)
            if keys and (keys[0] != t.first_keys[b] or keys[-1] != t.last_keys[b]):
                raise CorruptionError(f"{t.where(b)}: first/last key differ from the index")
            for k, v in zip(keys, vals):
                if prev is not None and k <= prev:
                    raise CorruptionError(f"{t.where(b)}: key {k!r:.80} out of order")
                prev = k
                try:
                    ok = bool(decode_mark(v)) and len(v) <= MAX_MARK_BYTES
                except UnicodeDecodeError:
                    ok = False
                if not ok:
                    raise CorruptionError(f"{t.where(b)}: mark of {k!r:.100} is {v!r:.60}, not a mark")
                if not is_page(k):
                    raise CorruptionError(f"{path}: marks {k!r:.100}, which PagesByURL does not hold")
                n += 1
        return n
    finally:
        t.close()
