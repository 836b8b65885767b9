"""The reader: a snapshot of one committed generation across all sections.

Point lookups go to the one section that can hold the key; enumerations read sections
0..k-1 in order, which is the global key order.  All iterators stream one block at a time.
Readers take no lock and never block a writer: they open the files CURRENT names, and
open file handles stay valid after a later commit removes the files.
"""

from __future__ import annotations

import functools
import heapq
import os
import struct
from bisect import bisect_right
from collections.abc import Iterable, Iterator

from webdb.core.manifest import index_entry, index_files, marks_entry
from webdb.core.marks import read_marks
from webdb.errors import ClosedError, CorruptionError, WebDBError
from webdb.tables.block import make_links
from webdb.tables.format import KIND_DUE, KIND_DUE_RUN, TABLE_KINDS
from webdb.tables.levels import Levels, open_levels
from webdb.tables.pagecodec import (
    DUE_LAST_BUCKET,
    GENERATE_MARK,
    LINK,
    LINK_FIXED,
    LINK_OUT,
    due_bucket,
    due_prefix,
    with_mark,
)
from webdb.tables.records import Link, Page, validate_url
from webdb.tables.table import BlockCache, TableReader, lookups

__all__ = ["Reader"]

# A section whose compiled page lookup is not made yet (``Reader._page_lookup``).
_UNBUILT = object()

# Links a streamed inlinks makes at a time.
_STREAM_LINKS = 128

# What decoding a crafted record can raise (short value, bad UTF-8, bad meta JSON, no separator).
_UNDECODABLE = (struct.error, UnicodeDecodeError, ValueError, IndexError, TypeError)


def _decodes(table: str):
    """Turn a record that does not decode into a CorruptionError naming the db and table."""

    def wrap(gen_fn):
        @functools.wraps(gen_fn)
        def inner(self, *args, **kw):
            try:
                yield from gen_fn(self, *args, **kw)
            except WebDBError:
                raise
            except _UNDECODABLE as e:
                raise CorruptionError(
                    f"{self.db.path}: {table}: undecodable record ({type(e).__name__}: {e})"
                ) from None

        return inner

    return wrap


def _links(keys: list[bytes], vals: list[bytes], n: int, url: str) -> list[Link]:
    """The links of LinksByURL records of ``url`` (keys: url, NUL, from_id), ``n`` = len(url) + 1.
    ``Link.decode`` inlined, or in C (``make_links``): the per-record cost of ``inlinks``."""
    links = make_links(keys, vals, n, url, Link, LINK_FIXED, LINK_OUT)
    if links is not None:
        return links
    unpack = LINK.unpack_from
    return [
        Link(k[n:], url, v[LINK_FIXED:].decode("utf-8", "replace"), d, (f & LINK_OUT) != 0)
        for k, v in zip(keys, vals)
        for d, f in (unpack(v),)
    ]


class Reader:
    """Snapshot of the committed generation.  Close it (or use ``with``) to release files.

    ``cache_mb`` (default: the db's setting) bounds the block cache of this reader's lookups.
    """

    def __init__(self, db, cache_mb: int | None = None):
        self.db = db
        cache = BlockCache(db.settings.replace(cache_mb=cache_mb).cache_mb << 20)  # BadInput naming the setting
        for attempt in range(5):
            m = db.manifest()
            try:
                self._open(m, cache)
                break
            except FileNotFoundError as e:
                # A commit removed the generation between reading CURRENT and opening its
                # files: read CURRENT again.  Five misses: the file is really not there.
                if attempt == 4:
                    raise CorruptionError(
                        f"{e.filename}: missing table file of generation "
                        f"{m.generation} (wrong section directory or mount?)"
                    ) from None
        self.closed = False
        self.manifest = m
        self.generation = m.generation
        self.sections = m.sections
        self._url_bounds = self.sections.breakpoints

    @classmethod
    def of_sections(
        cls, db, manifest: dict, sections: Iterable[int], tables: Iterable[str] = TABLE_KINDS, cache_mb: int = 1
    ) -> Reader:
        """A reader of some sections of ``manifest`` only: the others' tables (and tables not in
        ``tables``) are None.  What a rack location holding some sections opens (it cannot open
        the whole db); point lookups and enumerations need all sections, ``tables`` does not."""
        self = cls.__new__(cls)
        self.db = db
        self._open(manifest, BlockCache(cache_mb << 20), set(sections), set(tables))
        self.closed = False
        self.manifest = manifest
        self.generation = manifest.generation
        self.sections = manifest.sections
        self._url_bounds = self.sections.breakpoints
        return self

    def _open(self, m: dict, cache: BlockCache, sections: set[int] | None = None, only: set[str] | None = None) -> None:
        tabs: dict[str, list[TableReader | None]] = {t: [] for t in TABLE_KINDS}
        try:
            for j, entry in enumerate(m.tables):
                for t in TABLE_KINDS:
                    e = entry.get(t) if (sections is None or j in sections) and (only is None or t in only) else None
                    if not e:
                        tabs[t].append(None)
                        continue
                    d = self.db.section_dir(j)
                    path = os.path.join(d, e["file"])
                    if e.get("runs"):
                        # Levels: the delta runs merged over the base (webdb.tables.levels).
                        runs = [os.path.join(d, r["file"]) for r in e["runs"]]
                        tabs[t].append(open_levels(path, runs, t, e["records"], cache))
                        continue
                    # Lazy: a table's index is read on its first use (a lookup needs one table).
                    tabs[t].append(TableReader(path, TABLE_KINDS[t], cache, lazy=True))
        except BaseException:
            for lst in tabs.values():
                for r in lst:
                    if r is not None:
                        r.close()
            raise
        self.tables = tabs
        self._cache = cache
        self._pages_by_url = tabs["pages_by_url"]
        self._links_by_url = tabs["links_by_url"]
        # Each section's compiled PagesByURL and LinksByURL lookups, made on their first
        # get_page / inlinks (None: none).
        self._page_lookups: list = [_UNBUILT] * len(tabs["pages_by_url"])
        self._link_lookups: list = [_UNBUILT] * len(tabs["links_by_url"])
        # Each section's mark table (webdb.core.marks) as a dict, read on first use; a section
        # without one has None, and a db without any skips the overlay altogether.
        self._marks: list = [
            _UNBUILT if t is not None and marks_entry(m.tables[j].get("pages_by_url")) else None
            for j, t in enumerate(tabs["pages_by_url"])
        ]
        self._any_marks = any(x is not None for x in self._marks)

    def close(self) -> None:
        self.closed = True
        # The lookups hold the fds closed below.
        self._page_lookups = [None] * len(self._page_lookups)
        self._link_lookups = [None] * len(self._link_lookups)
        for lst in self.tables.values():
            for r in lst:
                if r is not None:
                    r.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- counts ----------------------------------------------------------------------------

    def _total(self, table: str) -> int:
        return sum(e.get(table, {}).get("records", 0) for e in self.manifest.tables)

    @property
    def num_pages(self) -> int:
        return self._total("pages_by_url")

    @property
    def num_links(self) -> int:
        return self._total("links_by_md5")

    def status_counts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for sc in self.manifest.status:
            for k, v in sc.items():
                out[int(k)] = out.get(int(k), 0) + v
        return out

    def _live(self) -> None:
        if self.closed:
            raise ClosedError(f"reader of {self.db.path} is closed (open a new one with db.reader())")

    # ---- lookups ---------------------------------------------------------------------------

    def get_page(self, url: str) -> Page | None:
        """The page of ``url`` or None.  Cost: a binary search for the section, then in each
        level file (delta runs newest first, then the base) until one holds the key: a binary
        search of its index, one in the block (cached; a miss reads, checks and decompresses
        it), and one record decoded.  Per-call Python overhead, not the search, is most of a
        cached lookup: compiled, everything after the section is one C call (``Lookup.page``);
        the Python path below is its reference and names what the C call finds not sound.

        A URL is validated only when it is not found: a stored key passed ``validate_url`` when
        it was written, so a hit is a valid URL and a bad one still raises BadInput naming it.
        """
        if self.closed:
            self._live()
        if type(url) is str:
            try:
                url_b = url.encode()
            except UnicodeEncodeError:
                url_b = validate_url(url, 1 << 30)
        else:
            url_b = validate_url(url, 1 << 30)
        s = bisect_right(self._url_bounds, url_b)
        lk = self._page_lookups[s]
        if lk is _UNBUILT:
            lk = self._page_lookup(s)
        if lk is not None:
            p = lk.page(url, url_b)
            if p is not False:
                if p is None:
                    validate_url(url, 1 << 30)
                elif self._any_marks:  # inline: this is the hot path of a db with marks
                    mk = self._marks[s]
                    if mk is not None:
                        m = (self.marks(s) if mk is _UNBUILT else mk).get(url_b)
                        if m is not None:
                            p.meta[GENERATE_MARK] = m
                return p
        t = self._pages_by_url[s]
        v = t.get(url_b) if t is not None else None
        if v is None:
            validate_url(url, 1 << 30)
            return None
        try:
            p = Page.decode(url, v)
        except _UNDECODABLE as e:
            raise CorruptionError(f"{t.path}: page {url!r:.200}: undecodable value ({e})") from None
        if self._any_marks:
            self._mark(s, url_b, p)
        return p

    def _mark(self, s: int, url_b: bytes, p: Page) -> None:
        """Overlay section ``s``'s mark of ``url_b``, if it has one, on the page ``p``."""
        mk = self._marks[s]
        if mk is None:
            return
        if mk is _UNBUILT:
            mk = self.marks(s)
        m = mk.get(url_b)
        if m is not None:
            p.meta[GENERATE_MARK] = m

    def marks(self, j: int) -> dict[bytes, str]:
        """Section ``j``'s generate marks, url bytes to mark (webdb.core.marks): what every page
        read overlays on its meta's ``"gen"``.  Read whole on first use (about 150 bytes a
        mark; the table holds the marks no batch has answered yet, not one per page)."""
        mk = self._marks[j]
        if mk is None:
            return {}
        if mk is _UNBUILT:
            e = marks_entry(self.manifest.tables[j].get("pages_by_url"))
            mk = self._marks[j] = read_marks(os.path.join(self.db.section_dir(j), e["file"]))
        return mk

    def _marked_items(self, table: str, j: int, it: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        """Page records of ``table`` (section ``j``'s, for PagesByURL) with their marks overlaid."""
        if table == "pages_by_url":
            mk = self.marks(j)
            for k, v in it:
                m = mk.get(k)
                yield (k, v) if m is None else (k, with_mark(v, m))
            return
        bounds = self._url_bounds
        for k, v in it:
            u = k[16:]
            s = bisect_right(bounds, u)
            m = self.marks(s).get(u) if self._marks[s] is not None else None
            yield (k, v) if m is None else (k, with_mark(v, m))

    def _lookup(self, t, link: type | None):
        """The compiled lookup (``tables.table.lookups``) of ``t`` — one table of one section, a
        file or levels — its files newest first through this reader's cache; None if there is
        no table here or the lookup cannot be compiled."""
        if t is None:
            return None
        files = [(t, False)] if isinstance(t, TableReader) else [(r, True) for r in t.runs]
        if not isinstance(t, TableReader) and t.base is not None:
            files.append((t.base, False))
        return lookups(files, self._cache, Page, link)

    def _page_lookup(self, s: int):
        """Section ``s``'s compiled PagesByURL lookup, made once."""
        lk = self._page_lookups[s] = self._lookup(self._pages_by_url[s], None)
        return lk

    def _link_lookup(self, s: int):
        """Section ``s``'s compiled LinksByURL lookup (with ``links``), made once."""
        lk = self._link_lookups[s] = self._lookup(self._links_by_url[s], Link)
        return lk

    @_decodes("pages_by_md5")
    def get_pages(self, md5: bytes) -> Iterator[Page]:
        """Every page whose content has ``md5``, by url."""
        self._live()
        t = self.tables["pages_by_md5"][self.sections.of_md5(md5)]
        if t is None:
            return
        items = t.prefix(md5)
        if self._any_marks:
            items = self._marked_items("pages_by_md5", -1, items)
        for k, v in items:
            yield Page.decode(k[16:].decode("utf-8"), v)

    def inlinks(self, url: str) -> Iterator[Link]:
        """Links to ``url``, by from_id, streamed a block at a time (a URL with a million inlinks
        is fine).  Cost: the block index search, one block read (cached) per block the links
        span, and only the records in range split out and decoded.  A URL is validated only
        when it has no inlinks (as in ``get_page``).  A closed reader or a bad URL raises here,
        not on the first ``next``.

        Links that lie in a few blocks of each file of the table (all but the most linked URLs)
        take a shorter path than ``ranges`` with the same effect: each file whose index does not
        rule the URL out costs one block read (of a block in lz4 pieces: its header, then the
        pieces the links lie in), the levels are merged and the links built, all in one C call
        (``Lookup.links``; not compiled, ``short_range`` then ``_links``), and the list is
        returned.  The blocks are read through the cache but do not fill it.  Filling it costs
        more than it saves: at 1M pages LinksByURL is ~40k blocks, and keeping each block read
        means fresh memory (page faults) for every read."""
        if self.closed:
            self._live()
        if type(url) is str:
            try:
                url_b = url.encode()
            except UnicodeEncodeError:
                url_b = validate_url(url, 1 << 30)
        else:
            url_b = validate_url(url, 1 << 30)
        s = bisect_right(self._url_bounds, url_b)
        lk = self._link_lookups[s]
        if lk is _UNBUILT:
            lk = self._link_lookup(s)
        if lk is not None:
            links = lk.links(url, url_b)
            if links:
                return iter(links)
            if links is not None and links is not False:
                validate_url(url, 1 << 30)
                return iter(links)
        return self._inlinks(url, url_b, self._links_by_url[s])

    def _inlinks(self, url: str, url_b: bytes, t) -> Iterator[Link]:
        """``inlinks`` through the Python calls: the links of ``url`` in ``t`` (a section's
        LinksByURL), short or streamed; what names a fault the compiled path declines.  As the
        compiled path, the short path reads (and a bad URL raises) here, at the call; only a
        streamed URL's blocks are read as its iterator is consumed."""
        links: list[Link] = []
        if t is not None:
            p, stop = url_b + b"\x00", url_b + b"\x01"
            try:
                kv = t.short_range(p, stop)
                if kv is None:
                    return self._streamed(url, p, stop, t)
                links = _links(kv[0], kv[1], len(p), url)
            except _UNDECODABLE as e:
                raise self._undecodable(e) from None
        if not links:
            validate_url(url, 1 << 30)
        return iter(links)

    def _streamed(self, url: str, p: bytes, stop: bytes, t) -> Iterator[Link]:
        """The links of a URL whose records reach more than ``SHORT_BLOCKS`` blocks of a file,
        a block at a time (``ranges``)."""
        found = False
        try:
            for keys, vals in t.ranges(p, stop):
                found = True
                # Links made a slice of a block at a time: a block of a popular URL is ~1k
                # links, and the first costs a slice of them, not the block's.
                for i in range(0, len(keys), _STREAM_LINKS):
                    yield from _links(keys[i : i + _STREAM_LINKS], vals[i : i + _STREAM_LINKS], len(p), url)
        except _UNDECODABLE as e:
            raise self._undecodable(e) from None
        if not found:
            validate_url(url, 1 << 30)

    def _undecodable(self, e: Exception) -> CorruptionError:
        return CorruptionError(f"{self.db.path}: links_by_url: undecodable record ({type(e).__name__}: {e})")

    @_decodes("links_by_md5")
    def outlinks(self, md5: bytes) -> Iterator[Link]:
        """Links from the content ``md5``, by target url."""
        self._live()
        t = self.tables["links_by_md5"][self.sections.of_md5(md5)]
        if t is None:
            return
        for k, v in t.prefix(md5):
            yield Link.decode(md5, k[16:].decode("utf-8"), v)

    # ---- enumeration -----------------------------------------------------------------------

    def items(self, table: str, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs of a table in global key order, as stored; a page's value with
        its generate mark overlaid (webdb.core.marks), as if it were stored in its meta."""
        self._live()
        marked = self._any_marks and table in ("pages_by_url", "pages_by_md5")
        for j, t in enumerate(self.tables[table]):
            if t is not None:
                if marked:
                    yield from self._marked_items(table, j, t.items(start))
                else:
                    yield from t.items(start)

    @_decodes("pages_by_url")
    def pages(self) -> Iterator[Page]:
        for k, v in self.items("pages_by_url"):
            yield Page.decode(k.decode("utf-8"), v)

    @_decodes("pages_by_md5")
    def pages_by_md5(self) -> Iterator[Page]:
        for k, v in self.items("pages_by_md5"):
            yield Page.decode(k[16:].decode("utf-8"), v)

    @_decodes("links_by_url")
    def links(self) -> Iterator[Link]:
        """All links by (url, from_id)."""
        for k, v in self.items("links_by_url"):
            i = k.index(b"\x00")
            yield Link.decode(k[i + 1 :], k[:i].decode("utf-8"), v)

    @_decodes("links_by_md5")
    def links_by_md5(self) -> Iterator[Link]:
        for k, v in self.items("links_by_md5"):
            yield Link.decode(k[:16], k[16:].decode("utf-8"), v)

    def due(self, horizon: int) -> Iterator[tuple[bytes, bytes]] | None:
        """The due index records (key, value) of this reader's pages with a due bucket at most
        ``horizon``'s, in generate's order (``pagecodec.due_order`` decodes a key, the value
        holds next_fetch and the generate mark, the mark table's overlaid); None when a section with pages has no due
        index (a db written before it).  Lazy: reads about as many records as are taken, plus
        a block per section and due bucket (``_due_front``)."""
        self._live()
        return _due_front(self, horizon)

    def check(self, progress: bool = False) -> dict:
        """Verify every invariant; raises CorruptionError naming the first violation."""
        from webdb.tools.check import check

        return check(self, progress=progress)


# ---- the due index (docs/design.md §4.6) -------------------------------------------------------


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


# Above every key of the last bucket: its 4 bytes, 16 of score and tie, then a URL's first byte,
# which is never 0xff (UTF-8).
_PAST_LAST_BUCKET = b"\xff" * 21


def _bucket(t: TableReader | Levels, b: int) -> Iterator[tuple[bytes, bytes]]:
    stop = due_prefix(b + 1) if b < DUE_LAST_BUCKET else _PAST_LAST_BUCKET
    for keys, vals in (t.ranges if isinstance(t, TableReader) else t.chunks)(due_prefix(b), stop):
        yield from zip(keys, vals)


def _due_front(reader, horizon: int) -> Iterator[tuple[bytes, bytes]] | None:
    """The due index records (key, value) of every page of ``reader``'s sections whose due
    bucket is at most ``horizon``'s, in generate's order (score descending, tie, url) — the
    pages of ``horizon``'s own bucket that are due later are among them (the value says when).
    None when a section with pages has no index (generate then scans).

    Lazy: a k-way merge (heapq.merge) of one stream per section and due bucket, each read a
    block at a time (``ranges``: no cache filled; an index with delta runs merges them over
    its base blocks, ``Levels.chunks``), so a caller that stops after n records reads about n
    records plus one block per stream and file.  Sections of a rack's partial reader that are
    not here are skipped."""
    pages = reader.tables["pages_by_url"]
    found = []
    for j, t in enumerate(pages):
        if t is None:
            continue
        e = index_entry(reader.manifest.tables[j].get("pages_by_url"))
        if e is None:
            return None
        found.append((reader.db.section_dir(j), e, reader.marks(j)))
    return _merged(found, due_bucket(horizon))


def _merged(found: list[tuple[str, dict, dict[bytes, str]]], last: int) -> Iterator[tuple[bytes, bytes]]:
    views: list[TableReader | Levels] = []
    try:
        for d, e, _ in found:
            ts = []
            try:
                for i, f in enumerate(index_files(e)):
                    ts.append(TableReader(os.path.join(d, f["file"]), KIND_DUE_RUN if i else KIND_DUE, lazy=True))
            except BaseException:
                for t in ts:
                    t.close()
                raise
            views.append(Levels(ts[0], ts[1:], e["records"]) if len(ts) > 1 else ts[0])
        streams = [
            _bucket(v, b) if not marks else _marked_bucket(v, b, marks)
            for v, (_, _, marks) in zip(views, found)
            for b in _view_buckets(v, last)
        ]
        yield from heapq.merge(*streams, key=_order)
    finally:
        for v in views:
            v.close()


def _view_buckets(v: TableReader | Levels, last: int) -> list[int]:
    """The buckets <= ``last`` any file of ``v`` holds records of (a bucket whose records the
    runs all delete gives an empty stream)."""
    if isinstance(v, TableReader):
        return list(_buckets(v, last))
    return sorted({b for t in v.files() for b in _buckets(t, last)})


def _marked_bucket(t: TableReader | Levels, b: int, marks: dict[bytes, str]) -> Iterator[tuple[bytes, bytes]]:
    """``_bucket`` with the section's marks overlaid on the records' mark field (its value
    after next_fetch: format.md §3.1)."""
    for k, v in _bucket(t, b):
        m = marks.get(k[20:])
        yield (k, v) if m is None else (k, v[:8] + m.encode("utf-8", "surrogatepass"))


def _order(rec: tuple[bytes, bytes]) -> bytes:
    return rec[0][4:]
