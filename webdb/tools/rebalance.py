"""Re-split a database into a different number of sections (``webdb rebalance DB --sections K``).

Hosts are added or removed: the URL breakpoints are chosen anew from the data (exact
quantiles of PagesByURL by position, so sections get equal page counts) and the md5 split
follows the new k.  Every table is streamed once in global order and cut into the new
sections; a block whose first and last keys land in the same new section is carried over as
raw bytes, so a rebalance costs about a copy of the database.  The result is committed like
any batch: a new generation, atomically, with the old one readable until then.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from webdb.core.due import index_sections
from webdb.core.manifest import Manifest, build, check_counts, with_marks
from webdb.core.marks import encode_mark, marks_name, write_marks
from webdb.core.sections import Sections, section_path
from webdb.tables.block import check_block_crc
from webdb.tables.format import TABLE_KINDS, TMP_DIR
from webdb.tables.pagecodec import page_status
from webdb.tables.table import TableWriter
from webdb.tools.sectionfiles import SectionFiles


def _breakpoints(reader, k: int) -> list[bytes]:
    n = reader.num_pages
    if k == 1 or n == 0:
        return []
    want = [(i * n) // k for i in range(1, k)]
    out: list[bytes] = []
    pos = 0
    for key, _ in reader.items("pages_by_url"):
        while len(out) < len(want) and pos == want[len(out)]:
            out.append(key)
        pos += 1
        if len(out) == len(want):
            break
    return out


def _copy_table(
    r, table: str, secs: Sections, writer: Callable[[int], TableWriter], status: list[dict]
) -> tuple[int, int]:
    """Stream one table in global order into the new sections: a block that lands whole in one
    section is copied raw (its CRC checked), any other is decoded and cut; pages_by_url is
    always decoded, to count each new section's statuses.  Returns (raw, decoded) blocks."""
    raw = decoded = 0

    def of(key: bytes) -> int:
        return secs.of_key(table, key)

    for t in r.tables[table]:
        if t is None:
            continue
        if not hasattr(t, "nblocks"):
            # Kept as levels: the merged records, one by one (no raw blocks).
            for keys, vals in t.chunks():
                decoded += 1
                for key, val in zip(keys, vals):
                    writer(of(key)).add(key, val)
            continue
        for b in range(t.nblocks):
            j0, j1 = of(t.first_keys[b]), of(t.last_keys[b])
            if j0 == j1 and table != "pages_by_url":
                data = t.raw_block(b)
                check_block_crc(data, t.where(b))
                writer(j0).add_raw_block(data, t.first_keys[b], t.last_keys[b], t.counts[b])
                raw += 1
                continue
            keys, vals = t.block(b, fill_cache=False)
            decoded += 1
            for key, val in zip(keys, vals):
                j = of(key)
                writer(j).add(key, val)
                if table == "pages_by_url":
                    st = str(page_status(val))
                    status[j][st] = status[j].get(st, 0) + 1
    return raw, decoded


def _split_marks(db, r, secs: Sections, gen: int, tables: list[dict], s: dict) -> None:
    """Write the generate marks of ``r``'s sections (webdb.core.marks) as the mark tables of the
    new ``secs``, each named in its section's new PagesByURL entry.  Old sections are URL
    ranges in order, so their marks come in URL order.  Memory: the marks."""
    by_section: list[list[tuple[bytes, bytes]]] = [[] for _ in range(secs.k)]
    for j in range(r.sections.k):
        for url_b, mark in r.marks(j).items():
            by_section[secs.of_url(url_b)].append((url_b, encode_mark(mark)))
    for j, items in enumerate(by_section):
        if items:
            path = os.path.join(section_path(db.path, j), marks_name(gen, "s0"))
            e = write_marks(path, items, s.block_size, s.codec, s.sync)
            tables[j]["pages_by_url"] = with_marks(tables[j]["pages_by_url"], e)


def rebalance(db, sections: int, progress: bool = False) -> Manifest:
    """Commit a new generation of ``db`` with ``sections`` sections; returns its manifest."""
    from webdb.errors import BadInput

    if not isinstance(sections, int) or sections < 1:
        raise BadInput(f"sections must be a whole number >= 1, not {sections!r}")
    t0 = time.monotonic()
    lock = db.lock().acquire()
    try:
        db.recover()
        s = db.settings
        with db.reader() as r:
            gen = r.generation + 1
            secs = Sections(sections, _breakpoints(r, sections))
            for j in range(sections):
                os.makedirs(section_path(db.path, j), exist_ok=True)
            tables: list[dict] = [{} for _ in range(sections)]
            status: list[dict] = [{} for _ in range(sections)]
            raw = decoded = 0
            for table in TABLE_KINDS:
                files = SectionFiles(db.path, gen, table, s, tables)
                try:
                    table_raw, table_decoded = _copy_table(r, table, secs, files.writer, status)
                    files.close()
                except BaseException:
                    files.abort()
                    raise
                raw += table_raw
                decoded += table_decoded
            _split_marks(db, r, secs, gen, tables, s)
            base = r.manifest
        index_sections(db.path, gen, tables, s, os.path.join(db.path, TMP_DIR))
        manifest = build(
            generation=gen,
            parent=base.generation,
            batch=f"{gen:08d}-rebalance",
            sections=secs,
            tables=tables,
            status=status,
            edits={},
            stages=[],
            rebalance={"from": base.sections.k, "to": sections, "raw_blocks": raw, "decoded_blocks": decoded},
        )
        check_counts(manifest)
        db.commit(manifest)
        db.recover()
    finally:
        lock.release()
    manifest.seconds = time.monotonic() - t0
    return manifest
