"""Bulk load: build the four tables of an empty db straight from sorted input (docs/api.md).

``bulk_load(db, pages, links)`` commits exactly the generation that one writer batch of
``add_page_with_score(p)`` for every page, then ``add_link(l)`` for every link, would commit
(docs/semantics.md): the first call for a url wins, the last call for a link key wins, links
from an md5 no page carries and links to a url with no page are dropped, every
``target_has_outlink`` is the target page's ``num_outlinks > 0``, anchors are cut to
``anchor_max``.  On an empty db no edit meets a stored record, so the cascade's five merges
reduce to four external sorts and two merge joins; no edit file is written.

Crash safety is the writer's: new table files are named after the new generation and count
only once ``WebDB.commit`` flips CURRENT; a kill before that leaves the empty db, and the next
writer (or ``recover``) removes what was left.
"""

from __future__ import annotations

import bisect
import os
import shutil
import time
from collections.abc import Callable, Iterable
from typing import Any

from webdb.core.due import index_sections
from webdb.core.manifest import Manifest, build, check_counts
from webdb.core.sections import Reservoir, Sections, section_path
from webdb.core.settings import Settings
from webdb.errors import BadInput
from webdb.tables.format import TABLE_KINDS, TABLE_SUFFIX, TMP_DIR
from webdb.tables.pagecodec import LINK, LINK_FIXED, LINK_FLAGS, LINK_OUT, NO_OUTLINKS, NUM_OUTLINKS
from webdb.tables.records import Link, Page, Status, validate_link, validate_page, validate_url
from webdb.tables.table import TableReader, TableWriter
from webdb.util import faults
from webdb.util.sortbuf import SortBuffer

__all__ = ["SectionFiles", "bulk_load", "load_manifest", "locked_load", "section_writer"]

_STATUSES = frozenset(int(s) for s in Status)
_FLAG = (b"\x00", bytes((LINK_OUT,)))  # the flags byte of a link value, by target_has_outlink
_SEQ = 8  # bytes of the call number that orders duplicates in the sorts
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_CHUNK = 4096  # records handed to a TableWriter or SortBuffer at a time
# Greater than every key: keys are at most 16 + 1 + MAX_URL_BYTES long and a URL (UTF-8) never
# holds the byte 0xff.
_TOP = b"\xff" * 9000


class SectionFiles:
    """One table's files of a bulk load, one per non-empty section (opened on first use);
    ``close`` records them in the manifest's per-section ``tables``."""

    def __init__(self, root: str, gen: int, table: str, s: Settings, tables: list[dict]):
        self.root, self.gen, self.table, self.s, self.tables = root, gen, table, s, tables
        self.writers: dict[int, TableWriter] = {}

    def writer(self, j: int) -> TableWriter:
        w = self.writers.get(j)
        if w is None:
            w = self.writers[j] = section_writer(self.root, self.gen, self.table, self.s, j)
        return w

    def close(self) -> None:
        for j, w in sorted(self.writers.items()):
            info = w.close()
            self.tables[j][self.table] = {
                "file": os.path.basename(w.path),
                "records": info["records"],
                "bytes": info["bytes"],
            }

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


class _Tables(SectionFiles):
    """Fed in key order by ``put``; ``bounds`` are the smallest keys of sections 1..k-1
    (Sections.key_bounds)."""

    def __init__(self, root: str, gen: int, table: str, s: Settings, tables: list[dict], bounds: list[bytes]):
        super().__init__(root, gen, table, s, tables)
        self.bounds = bounds
        self.j = -1
        self.nxt = b""  # the first key opens its section
        self.keys: list[bytes] = []
        self.vals: list[bytes] = []
        self.w: TableWriter | None = None

    def put(self, key: bytes, val: bytes) -> None:
        if key >= self.nxt:
            self._switch(key)
        self.keys.append(key)
        self.vals.append(val)
        if len(self.keys) >= _CHUNK:
            self._flush()

    def _switch(self, key: bytes) -> None:
        self._flush()
        j = self.j = bisect.bisect_right(self.bounds, key)
        self.nxt = self.bounds[j] if j < len(self.bounds) else _TOP
        self.w = self.writer(j)

    def _flush(self) -> None:
        if self.keys:
            self.w.add_many(self.keys, self.vals)
            self.keys, self.vals = [], []

    def close(self) -> None:
        self._flush()
        super().close()


def section_writer(root: str, gen: int, table: str, s: Settings, j: int) -> TableWriter:
    """The writer of ``table``'s file of section j in generation ``gen`` (stage 0 of the batch)."""
    path = os.path.join(section_path(root, j), f"{gen:08d}-s0.{TABLE_SUFFIX[table]}")
    return TableWriter(path, TABLE_KINDS[table], s.block_size, s.codec, sync=s.sync)


def _empty(base: Manifest) -> bool:
    return not any(t.get("records") for sec in base.tables for t in sec.values())


def bulk_load(
    db_or_path: Any,
    pages: Iterable[Page],
    links: Iterable[Link] = (),
    *,
    progress: Callable[[str], None] | None = None,
    **overrides: Any,
) -> Manifest:
    """Load ``pages`` and ``links`` into an empty db (no page, no link) and commit one new
    generation; returns its manifest.  Equal to one writer batch of ``add_page_with_score``
    for each page in order, then ``add_link`` for each link in order (module doc).  Settings
    (``memory_mb``, ``block_size``, ...) may be overridden as for ``db.writer(...)``.

    Raises BadInput for a db that holds any page (nothing is written) and for a bad page or
    link (naming it; nothing is committed).  Cost: four external sorts (O(n log n)) within
    ``memory_mb``; pages are read once and links once.
    """
    say = progress or (lambda _msg: None)
    return locked_load(db_or_path, overrides, lambda db, base, s, tmp: _load(db, base, s, tmp, pages, links, say))


def locked_load(db_or_path: Any, overrides: dict, load: Callable[[Any, Manifest, Settings, str], Manifest]) -> Manifest:
    """Run ``load(db, base manifest, settings, tmp dir)`` under the db's lock on an empty db
    and commit the manifest it returns (shared by bulk_load and bulkarrow.bulk_load_arrow).
    Anything raised leaves the db as it was: the new generation's files are removed."""
    from webdb.core.db import WebDB, open_db

    db = db_or_path if isinstance(db_or_path, WebDB) else open_db(os.fspath(db_or_path))
    t0 = time.monotonic()
    s = db.settings.replace(**overrides)
    lock = db.lock().acquire()
    tmp = os.path.join(db.path, TMP_DIR, f"bulk{os.getpid()}")
    try:
        db.recover()
        base = db.manifest()
        if not _empty(base):
            raise BadInput(f"{db.path}: import needs an empty db; this one holds pages (generation {base.generation})")
        manifest = load(db, base, s, tmp)
        faults.point("bulk.before_commit")
        db.commit(manifest)
        db.recover()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            db.recover()  # the new generation's files, if any: the db stays as it was
        finally:
            lock.release()
        raise
    lock.release()
    manifest.seconds = time.monotonic() - t0
    return manifest


def _load(
    db, base: Manifest, s: Settings, tmp: str, pages: Iterable[Page], links: Iterable[Link], say: Callable[[str], None]
) -> Manifest:
    gen = base.generation + 1
    secs = base.sections
    mem = int(s.memory_mb) << 20
    codec = s.codec
    max_url, amax = int(s.max_url_bytes), int(s.anchor_max)
    os.makedirs(tmp, exist_ok=True)
    # At most three sorts hold records at a time (the links' while the pages are sorted, then
    # two being read and one being filled): a quarter of the budget each.
    part = int(mem * 0.25)
    sb_pu = SortBuffer(tmp, "pu", part, 65536, codec)
    sb_lm = SortBuffer(tmp, "lm", part, 65536, codec)
    buffers = [sb_pu, sb_lm]
    k = secs.k
    tables: list[dict] = [{} for _ in range(k)]
    status: list[dict] = [{} for _ in range(k)]
    outs: list[_Tables] = []
    phases: dict[str, float] = {}
    t_lap = [time.monotonic()]

    def lap(name: str) -> None:
        t = time.monotonic()
        phases[name] = round(t - t_lap[0], 3)
        t_lap[0] = t
        say(f"{name} ({phases[name]} s)")

    try:
        # ---- read: pages by (url, call), links by (from_id, url, call) ------------------------
        # The writer's reservoir: the same breakpoints for the same pages.
        sample = None if secs.ready else Reservoir(int(s.breakpoint_sample))
        n_pages = 0
        pend: list[bytes] = []
        for page in pages:
            if not isinstance(page, Page):
                raise BadInput(f"expected a webdb.Page, got {type(page).__name__}")
            url_b = validate_url(page.url, max_url)
            validate_page(page)
            if page.status not in _STATUSES:
                raise BadInput(f"page {page.url!r:.200} has unknown status {page.status!r}")
            n_pages += 1
            if sample is not None:
                sample.add(url_b)
            pend.append(url_b + b"\x00" + n_pages.to_bytes(_SEQ, "big") + page.encode_value())
            if len(pend) >= _CHUNK:
                sb_pu.extend(pend)
                pend = []
        sb_pu.extend(pend)
        pend = []
        n_links = 0
        pack = LINK.pack
        for link in links:
            if not isinstance(link, Link):
                raise BadInput(f"expected a webdb.Link, got {type(link).__name__}")
            url_b = validate_url(link.url, max_url)
            f, d, a = link.from_id, link.domain_id, link.anchor
            # The common case checked inline; anything else gets validate_link's message.
            if (
                type(f) is not bytes
                or len(f) != 16
                or type(d) is not int
                or not _I64_MIN <= d <= _I64_MAX
                or type(a) is not str
                or type(link.target_has_outlink) is not bool
            ):
                validate_link(link)
            try:
                ab = a.encode("utf-8") if len(a) <= amax else (a.encode("utf-8"), a[:amax].encode("utf-8"))[1]
            except UnicodeEncodeError:
                validate_link(link)  # a lone surrogate: BadInput naming the link
                raise
            n_links += 1
            v = pack(d, 0) + ab
            pend.append(link.from_id + url_b + b"\x00" + n_links.to_bytes(_SEQ, "big") + v)
            if len(pend) >= _CHUNK:
                sb_lm.extend(pend)
                pend = []
        sb_lm.extend(pend)
        pend = []
        if sample is not None and sample.items:
            secs = Sections(k, Sections.choose(sample.items, k))
        for j in range(k):
            os.makedirs(section_path(db.path, j), exist_ok=True)
        faults.point("bulk.after_read")
        lap("read")

        # ---- PagesByURL: the first call for a url wins ----------------------------------------
        url_bounds, md5_bounds = secs.key_bounds(True), secs.key_bounds(False)
        pages_by_url = _Tables(db.path, gen, "pages_by_url", s, tables, url_bounds)
        outs.append(pages_by_url)
        sb_pm = SortBuffer(tmp, "pm", part, 65536, codec)
        buffers.append(sb_pm)
        prev = b""
        put = pages_by_url.put
        for rec in sb_pu.sorted():
            cut = rec.index(b"\x00")
            url_b = rec[:cut]
            if url_b == prev:
                continue
            prev = url_b
            v = rec[cut + 1 + _SEQ :]
            put(url_b, v)
            st = str(v[16])
            sj = status[pages_by_url.j]
            sj[st] = sj.get(st, 0) + 1
            pend.append(v[:16] + url_b + b"\x00" + v)
            if len(pend) >= _CHUNK:
                sb_pm.extend(pend)
                pend = []
        sb_pm.extend(pend)
        pend = []
        sb_pu.cleanup()
        pages_by_url.close()
        faults.point("bulk.after_pages_by_url")
        lap("pages_by_url")

        # ---- PagesByMD5, joined with links by from_id: links from no page's md5 are dropped ---
        pages_by_md5 = _Tables(db.path, gen, "pages_by_md5", s, tables, md5_bounds)
        outs.append(pages_by_md5)
        sb_lu = SortBuffer(tmp, "lu", part, 65536, codec)
        buffers.append(sb_lu)
        pm = iter(sb_pm.sorted())
        head = next(pm, None)
        pages_by_md5_put = pages_by_md5.put

        def put_pm(rec: bytes) -> None:
            cut = rec.index(b"\x00", 16)
            pages_by_md5_put(rec[:cut], rec[cut + 1 :])

        last: bytes | None = None
        last_key = b""
        for rec in sb_lm.sorted():
            cut = rec.index(b"\x00", 16)
            key = rec[:cut]
            if key != last_key and last is not None:
                # ``last`` is the last call for its key: keep it if a page carries its from_id.
                f = last[:16]
                while head is not None and head[:16] < f:
                    put_pm(head)
                    head = next(pm, None)
                if head is not None and head[:16] == f:
                    c = last.index(b"\x00", 16)
                    pend.append(last[16:c] + b"\x00" + f + last[c + 1 + _SEQ :])
                    if len(pend) >= _CHUNK:
                        sb_lu.extend(pend)
                        pend = []
            last, last_key = rec, key
        if last is not None:
            f = last[:16]
            while head is not None and head[:16] < f:
                put_pm(head)
                head = next(pm, None)
            if head is not None and head[:16] == f:
                c = last.index(b"\x00", 16)
                pend.append(last[16:c] + b"\x00" + f + last[c + 1 + _SEQ :])
        sb_lu.extend(pend)
        pend = []
        while head is not None:
            put_pm(head)
            head = next(pm, None)
        sb_pm.cleanup()
        sb_lm.cleanup()
        pages_by_md5.close()
        faults.point("bulk.after_pages_by_md5")
        lap("pages_by_md5")

        # ---- LinksByURL, joined with PagesByURL: dangling links dropped, flags set -------------
        links_by_url = _Tables(db.path, gen, "links_by_url", s, tables, url_bounds)
        outs.append(links_by_url)
        sb_lm2 = SortBuffer(tmp, "lm2", part, 65536, codec)
        buffers.append(sb_lm2)
        pages_it = _table_items(db.path, tables, "pages_by_url")
        purl, pval = next(pages_it, (None, b""))
        put = links_by_url.put
        for rec in sb_lu.sorted():
            cut = rec.index(b"\x00")
            url_b = rec[:cut]
            while purl is not None and purl < url_b:
                purl, pval = next(pages_it, (None, b""))
            if purl != url_b:
                continue  # no page at the target: dangling
            key = rec[: cut + 17]
            v = rec[cut + 17 :]
            v = v[:LINK_FLAGS] + _FLAG[pval[NUM_OUTLINKS] != NO_OUTLINKS] + v[LINK_FIXED:]
            put(key, v)
            pend.append(rec[cut + 1 : cut + 17] + url_b + b"\x00" + v)
            if len(pend) >= _CHUNK:
                sb_lm2.extend(pend)
                pend = []
        sb_lm2.extend(pend)
        pend = []
        sb_lu.cleanup()
        links_by_url.close()
        faults.point("bulk.after_links_by_url")
        lap("links_by_url")

        # ---- LinksByMD5 --------------------------------------------------------------------------
        links_by_md5 = _Tables(db.path, gen, "links_by_md5", s, tables, md5_bounds)
        outs.append(links_by_md5)
        put = links_by_md5.put
        for rec in sb_lm2.sorted():
            cut = rec.index(b"\x00", 16)
            put(rec[:cut], rec[cut + 1 :])
        sb_lm2.cleanup()
        links_by_md5.close()
        faults.point("bulk.after_links_by_md5")
        lap("links_by_md5")
    except BaseException:
        for o in outs:
            o.abort()
        for b in buffers:
            b.cleanup()
        raise
    index_sections(db.path, gen, tables, s, tmp)
    faults.point("bulk.after_due_index")
    shutil.rmtree(tmp, ignore_errors=True)
    return load_manifest(gen, base, secs, tables, status, n_pages, n_links, {"seconds": phases})


def load_manifest(
    gen: int, base: Manifest, secs: Sections, tables: list[dict], status: list, n_pages: int, n_links: int, bulk: dict
) -> Manifest:
    """The manifest of a bulk load's generation (no stages; ``bulk`` says how it was built),
    its counts checked against the tables written."""
    m = build(
        generation=gen,
        parent=base.generation,
        batch=f"{gen:08d}-import",
        sections=secs,
        tables=tables,
        status=status,
        edits={"pages": n_pages, "links": n_links},
        stages=[],
        bulk=bulk,
    )
    check_counts(m)
    return m


def _table_items(root: str, tables: list[dict], table: str):
    """(key, value) of a just written table, sections in order (the global key order)."""
    for j, sec in enumerate(tables):
        e = sec.get(table)
        if not e:
            continue
        t = TableReader(os.path.join(section_path(root, j), e["file"]), TABLE_KINDS[table])
        try:
            for b in range(t.nblocks):
                keys, vals = t.block(b, fill_cache=False)
                yield from zip(keys, vals)
        finally:
            t.close()
