"""``check()``: verify every invariant of a committed generation (``webdb check DB``).

First the quick check every writer runs (``WebDB.quick_check``).  Per table: every block's
checksum and decoding, index vs data, strict key order within and across sections, each key
in the section the split assigns it, counts vs the manifest.
Across tables: PagesByMD5 holds exactly (md5, url) → page of every page; LinksByURL holds
exactly the links of LinksByMD5; every link's source content is carried by a page and its
target is a page; every target_has_outlink flag is right; status counts match the manifest;
each section's due index holds exactly the records of its pages (check_index).
Cost: one read of every table plus an external sort of the pages and the links.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Iterator

from webdb.core.manifest import index_entry, index_files, marks_entry
from webdb.core.marks import check_marks
from webdb.errors import CorruptionError
from webdb.tables.format import KIND_DUE, KIND_DUE_RUN
from webdb.tables.levels import DEL, PUT, Levels
from webdb.tables.pagecodec import LINK_FIXED, MD5, PAGE_FIXED, STATUS, due_record, link_flag, page_has_outlinks
from webdb.tables.table import TableReader
from webdb.util.sortbuf import SortBuffer


def _file_blocks(t, delta: bool) -> Iterator[tuple[int, list[bytes], list[bytes]]]:
    """(block, keys, values) of one table file, verifying each block against the index, the key
    order inside the file, the footer count and (a delta run) every record's op byte."""
    prev: bytes | None = None
    n = 0
    for b in range(t.nblocks):
        keys, vals = t.block(b)
        if keys and (keys[0] != t.first_keys[b] or keys[-1] != t.last_keys[b]):
            raise CorruptionError(f"{t.where(b)}: first/last key differ from the index")
        if keys and prev is not None and keys[0] <= prev:
            raise CorruptionError(f"{t.where(b)}: key {keys[0]!r:.80} out of order")
        for i in range(1, len(keys)):
            if keys[i] <= keys[i - 1]:
                raise CorruptionError(f"{t.where(b)}: key {keys[i]!r:.80} out of order")
        if delta:
            for k, v in zip(keys, vals):
                if v[:1] not in (PUT, DEL) or (v[:1] == DEL and len(v) != 1):
                    raise CorruptionError(f"{t.where(b)}: delta record {k!r:.80} has no valid op byte")
        if keys:
            prev = keys[-1]
        n += len(keys)
        yield b, keys, vals
    if n != t.count:
        raise CorruptionError(f"{t.path}: {n} records read, footer says {t.count}")


def _scan(reader, table: str, progress) -> Iterator[tuple[int, bytes, bytes]]:
    """(section, key, value) of a table in order, verifying order, placement and counts; a
    table kept as levels has each of its files verified, then the merged view."""
    secs = reader.sections
    prev: bytes | None = None
    for j, t in enumerate(reader.tables[table]):
        entry = reader.manifest.tables[j].get(table)
        if t is None:
            continue
        if isinstance(t, Levels):
            for r in t.runs:
                for _ in _file_blocks(r, True):
                    pass
            chunks = ((None, keys, vals) for keys, vals in t.chunks())
        else:
            if entry["records"] != t.count:
                where = reader.db.manifest_path(reader.generation)
                raise CorruptionError(f"{t.path}: holds {t.count} records, {where} says {entry['records']}")
            chunks = _file_blocks(t, False)
        n = 0
        for b, keys, vals in chunks:
            here = t.where(b) if b is not None else f"{t.path} (merged with its delta runs)"
            if keys and prev is not None and keys[0] <= prev:
                raise CorruptionError(f"{here}: key {keys[0]!r:.80} out of order")
            if keys:
                prev = keys[-1]
            for k, v in zip(keys, vals):
                bad = _bad_record(table, k, v)
                if bad:
                    raise CorruptionError(f"{here}: record {k!r:.80} {bad}")
                want = secs.of_key(table, k)
                if want != j:
                    raise CorruptionError(f"{here}: key {k!r:.80} belongs in section {want}, found in {j}")
                yield j, k, v
            n += len(keys)
            if progress is not None:
                progress.update(len(keys))
        if n != entry["records"]:
            where = reader.db.manifest_path(reader.generation)
            raise CorruptionError(f"{t.path}: {n} live records, {where} says {entry['records']}")


# Each table's key layout (docs/format.md §2, §3): the shortest key and value, and whether the
# key holds the 0x00 that ends a URL before an md5 (LinksByURL: url 0x00 md5).
_SHAPES = {
    "pages_by_url": (1, PAGE_FIXED, False),
    "pages_by_md5": (17, PAGE_FIXED, False),
    "links_by_md5": (17, LINK_FIXED, False),
    "links_by_url": (18, LINK_FIXED, True),
}


def _bad_record(table: str, key: bytes, value: bytes) -> str | None:
    """What is wrong with the shape of one record (None if nothing): a crafted block may pass
    its CRC and still hold a value shorter than its fixed fields, or a key without its
    separator; check reports it rather than failing on it.  Cost: O(1) (one find for
    LinksByURL)."""
    min_key, min_value, sep = _SHAPES[table]
    if len(key) < min_key or (sep and key.find(b"\x00", 1) != len(key) - 17):
        return "has a key that is not of its table's layout"
    if len(value) < min_value:
        return f"has a value of {len(value)} bytes, shorter than its {min_value} bytes of fixed fields"
    return None


def _sorted_equal(a: SortBuffer, b: Iterator[bytes], what: str) -> int:
    n = 0
    it = iter(b)
    for x in a.sorted():
        y = next(it, None)
        if y != x:
            raise CorruptionError(f"{what}: expected {x!r:.120}, found {y!r:.120}")
        n += 1
    extra = next(it, None)
    if extra is not None:
        raise CorruptionError(f"{what}: unexpected record {extra!r:.120}")
    return n


def check(reader, progress: bool = False) -> dict:
    """Raise CorruptionError at the first violation; return counts when all is well.
    Starts with the writers' quick check (CURRENT, the committed and parent manifests, every
    table file present with its recorded size)."""
    reader.db.quick_check()
    bar = None
    if progress:
        from webdb.util.progress import progress_bar

        total = sum(t.count for lst in reader.tables.values() for t in lst if t is not None)  # live records
        bar = progress_bar(total, "check", "rec")  # periodic lines when stderr is not a terminal
    tmp = tempfile.mkdtemp(prefix="webdb-check-")
    try:
        return _check(reader, bar, tmp)
    except CorruptionError as e:
        if reader.db.path in str(e):
            raise
        # a cross-table finding names no one file: name the database
        raise CorruptionError(f"{reader.db.path} (generation {reader.generation}): {e}") from None
    finally:
        if bar is not None:
            bar.close()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


def _check(reader, bar, tmp: str) -> dict:
    mem = 64 << 20
    # Pages: PagesByURL → expected PagesByMD5 records; page presence and num_outlinks by url.
    want_pages = SortBuffer(tmp, "pbm", mem)
    status: dict[int, int] = {}
    pages_out: list[tuple[bytes, bool]] = []
    page_spill = SortBuffer(tmp, "pages", mem)
    for _, k, v in _scan(reader, "pages_by_url", bar):
        want_pages.add(v[MD5] + k + b"\x00" + v)
        status[v[STATUS]] = status.get(v[STATUS], 0) + 1
        page_spill.add(k + b"\x00" + (b"\x01" if page_has_outlinks(v) else b"\x00"))
    n_pages = _sorted_equal(
        want_pages, (k + b"\x00" + v for _, k, v in _scan(reader, "pages_by_md5", bar)), "PagesByMD5 vs PagesByURL"
    )
    want_status = {int(k): v for sc in reader.manifest.status for k, v in sc.items()}
    merged: dict[int, int] = {}
    for sc in reader.manifest.status:
        for k, v in sc.items():
            merged[int(k)] = merged.get(int(k), 0) + v
    if {k: v for k, v in merged.items() if v} != status:
        where = reader.db.manifest_path(reader.generation)
        raise CorruptionError(f"{where}: status counts {want_status} differ from the pages' {status}")
    del pages_out
    # Links: LinksByMD5 → expected LinksByURL; every source md5 carried by some page.
    want_links = SortBuffer(tmp, "lbu", mem)
    md5s = (k[:16] for _, k, _ in _scan(reader, "pages_by_md5", None))
    cur_md5 = next(md5s, None)
    for _, k, v in _scan(reader, "links_by_md5", bar):
        src = k[:16]
        while cur_md5 is not None and cur_md5 < src:
            cur_md5 = next(md5s, None)
        if cur_md5 != src:
            raise CorruptionError(f"LinksByMD5: link {k[16:]!r:.100} from md5 {src.hex()} that no page carries")
        want_links.add(k[16:] + b"\x00" + src + b"\x00" + v)
    n_links = _sorted_equal(
        want_links, (k + b"\x00" + v for _, k, v in _scan(reader, "links_by_url", bar)), "LinksByURL vs LinksByMD5"
    )
    # Every link target is a page and its flag matches the page's num_outlinks.
    pages = page_spill.sorted()
    cur = next(pages, None)
    for _, k, v in _scan(reader, "links_by_url", None):
        url = k[: k.index(b"\x00")]
        while cur is not None and cur[:-2] < url:
            cur = next(pages, None)
        if cur is None or cur[:-2] != url:
            raise CorruptionError(f"LinksByURL: link to {url!r:.100} whose target page does not exist")
        if link_flag(v) != (cur[-1] == 1):
            raise CorruptionError(
                f"LinksByURL: link to {url!r:.100} has target_has_outlink={link_flag(v)}, "
                f"but the page has {'some' if cur[-1] else 'no'} outlinks"
            )
    for buf in (want_pages, want_links, page_spill):
        buf.cleanup()
    n_due = check_index(reader, tmp)
    n_marks = check_mark_tables(reader)
    return {
        "pages": n_pages,
        "links": n_links,
        "due": n_due,
        "marks": n_marks,
        "status": status,
        "generation": reader.generation,
    }


def check_mark_tables(reader) -> int:
    """Verify every section's mark table (webdb.core.marks.check_marks): sound blocks in URL
    order, the manifest's count, a mark per record, and every URL a page of its section;
    returns the marks checked.  Cost: a read of the tables and a point read per mark."""
    n = 0
    for j, t in enumerate(reader.tables["pages_by_url"]):
        e = marks_entry(reader.manifest.tables[j].get("pages_by_url"))
        if e is None:
            continue
        path = os.path.join(reader.db.section_dir(j), e["file"])
        if t is None:
            raise CorruptionError(f"{path}: marks pages of section {j}, which has no PagesByURL")
        n += check_marks(path, e["records"], lambda url_b, t=t: t.get(url_b) is not None)
    return n


# ---- the due index (docs/design.md §4.6) -------------------------------------------------------


def check_index(reader, tmp: str) -> int:
    """Verify every section's due index against its PagesByURL: its levels (base and delta
    runs) merged hold the same records, byte for byte, as ``build_index`` would write (so
    every page is indexed once, under its current bucket, score and mark, and nothing else
    is); returns the records checked.  Each file's blocks are checked in order and against its
    index, its record count against the manifest's.  Raises CorruptionError naming the index
    file.  Cost: a read of PagesByURL and of every index file, an external sort of one record
    per page."""
    n = 0
    for j, t in enumerate(reader.tables["pages_by_url"]):
        entry = reader.manifest.tables[j].get("pages_by_url")
        e = index_entry(entry)
        if t is None or e is None:
            continue
        d = reader.db.section_dir(j)
        path = os.path.join(d, e["file"])
        want = SortBuffer(tmp, f"due-check-{j}", 64 << 20)
        for b in range(t.nblocks):
            keys, vals = t.block(b, fill_cache=False)
            for k, v in zip(keys, vals):
                dk, dv = due_record(k, v)
                want.add(dk + b"\x00" + dv)
        files: list[TableReader] = []
        try:
            for i, f in enumerate(index_files(e)):
                ft = TableReader(os.path.join(d, f["file"]), KIND_DUE if i == 0 else KIND_DUE_RUN)
                files.append(ft)
                said = f["records"] if i == 0 else f["entries"]
                if ft.count != said:
                    raise CorruptionError(f"{ft.path}: holds {ft.count} records, the manifest says {said}")
            got = (k + b"\x00" + v for k, v in _live_items(files[0], files[1:]))
            for x in want.sorted():
                y = next(got, None)
                if y != x:
                    raise CorruptionError(f"{path}: due index differs from PagesByURL at {_url_of(x)!r:.100}")
                n += 1
            extra = next(got, None)
            if extra is not None:
                raise CorruptionError(f"{path}: due index holds {_url_of(extra)!r:.100}, which is no page")
        finally:
            for f in files:
                f.close()
            want.cleanup()
    return n


def _live_items(base: TableReader, runs: list[TableReader]) -> Iterator[tuple[bytes, bytes]]:
    """The records of ``base`` under the delta ``runs`` (newest first): for each key the newest
    file's record, a run's op applied (a tombstone hides the key).  The reference merge, apart
    from webdb.tables.levels, each file read through ``_checked_items``."""
    streams = [_ranked(_checked_items(t), i) for i, t in enumerate([*runs, base])]
    prev = None
    for k, i, v in heapq.merge(*streams):
        if k == prev:
            continue  # an older version of a key already decided
        prev = k
        if i == len(runs):
            yield k, v
        elif v[:1] == PUT:
            yield k, v[1:]
        elif v != DEL:
            raise CorruptionError(f"{runs[i].path}: delta record {k[20:]!r:.100}: op byte is neither PUT nor DEL")


def _ranked(items: Iterator[tuple[bytes, bytes]], i: int) -> Iterator[tuple[bytes, int, bytes]]:
    for k, v in items:
        yield k, i, v


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
