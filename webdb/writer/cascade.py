"""The cascade: one stage of one section (docs/design.md, *The cascade*).

``run_stage(job)`` (a ``StageJob``) merges the sorted incoming edit files of a section with the section's
current table into a new table file and routes the edits it emits into per-section edit files
for later stages.  It runs in a process of the local executor (webdb.writer.executor) or of a section writer, reads
and writes only files, and is the unit the distributed writer runs on each host.

Stage   table        consumes                                emits
1       PagesByURL   page calls, fetch results, marks        2: page add/del, 3: links of new pages,
                                                             4: target notices
        (and its due index and mark table; a batch of marks only writes the mark table alone)
2       PagesByMD5   page add/del by (md5, url)              3: delete-all of an md5 no page holds
3       LinksByMD5   link adds, delete-all(md5)              4: link add/del by (url, fromID)
4       LinksByURL   link add/del, target notices            5: flag fix-ups, dangling deletes
5       LinksByMD5   flag fix-ups, single deletes            nothing

Cost of a stage: the bytes of its table (untouched blocks are copied raw, touched blocks
decoded) + O(e log e) for its e edits, which were sorted by the producers.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import chain, islice, repeat

from webdb.core.due import IndexEdits, update_index
from webdb.core.manifest import index_entry, marks_entry
from webdb.core.marks import MarkCursor, MarkEdits, decode_mark, marks_name
from webdb.core.schedule import FetchResult, Schedule, apply_fetch, apply_lastmod
from webdb.core.sections import Sections, section_dirname, section_path
from webdb.core.settings import Settings
from webdb.errors import CorruptionError
from webdb.tables.format import DELTA_KINDS, KIND_EDITS, TABLE_KINDS, TABLE_SUFFIX
from webdb.tables.levels import COMPACT, MERGE_RUNS, LevelCursor, compact, level_step, merge_runs, open_levels, written
from webdb.tables.merge import MergeCursor, Splice
from webdb.tables.pagecodec import (
    LINK_FLAGS,
    LINK_OUT,
    MD5,
    NO_OUTLINKS,
    NUM_OUTLINKS,
    STATUS,
    link_same_but_flag,
    link_with_flags,
    page_with_scores_of,
    with_mark,
)
from webdb.tables.records import Page
from webdb.tables.table import Probe, TableReader, TableWriter, prefix_end
from webdb.util import faults
from webdb.util.sortbuf import SortBuffer, merge_file_chunks, merge_files
from webdb.writer import edits, kernels

_FETCH = __import__("struct").Struct("<Bq16sI")  # status, fetch_time, md5, num_outlinks (+ meta json)


@dataclass
class TableFiles:
    """One table of the section a stage merges into: the paths of its base file and of its
    delta runs (newest first), and its manifest entry (``{"file", "records", "bytes"[, "runs"]}``)."""

    base: str
    runs: list[str]
    entry: dict


@dataclass
class StageJob:
    """What one stage of one section merges and where its outputs go (JSON only on the way to
    a worker process).  ``engine.stage_job`` makes the part every job of a batch shares (step 0
    routes with it: ``stage`` 0, no ``section``); ``engine.section_job`` adds the rest."""

    db: str
    batch: str
    gen: int
    sections: dict
    settings: Settings
    schedule: Schedule
    tmp: str
    emit_mb: int
    outbox: str | None = None  # the distributed writer's local outbox; None: the targets' incoming dirs
    stage: int = 0
    section: int | None = None
    inputs: list[str] = field(default_factory=list)
    tables: dict[str, TableFiles] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> StageJob:
        tables = {t: TableFiles(**e) for t, e in d["tables"].items()}
        return cls(
            **dict(d, settings=Settings.from_json(d["settings"]), schedule=Schedule(**d["schedule"]), tables=tables)
        )


def encode_fetch(r: FetchResult) -> bytes:
    v = _FETCH.pack(r.status, r.fetch_time, r.md5 or b"\x00" * 16, r.num_outlinks)
    v += b"\x01" if r.md5 else b"\x00"
    if r.meta:
        v += json.dumps(r.meta, separators=(",", ":"), sort_keys=True).encode("utf-8", "replace")
    return v


_LASTMOD = __import__("struct").Struct("<qq")  # lastmod, due


def encode_lastmod(lastmod: int, due: int) -> bytes:
    return _LASTMOD.pack(lastmod, due)


def decode_fetch(url: str, v: bytes) -> FetchResult:
    st, t, md5, nout = _FETCH.unpack_from(v)
    has_md5 = v[_FETCH.size] == 1
    meta = json.loads(v[_FETCH.size + 1 :]) if len(v) > _FETCH.size + 1 else None
    return FetchResult(url, st, t, md5 if has_md5 else None, nout, meta)


class Emitter:
    """Edits a stage emits for a later stage, sorted and cut into one file per target section."""

    def __init__(self, job: StageJob, stage: int, rank: int):
        self.job, self.stage = job, stage
        s = job.settings
        self.buf = SortBuffer(
            job.tmp,
            f"st{job.stage}-{job.section}-to{stage}",
            job.emit_mb << 20,
            s.block_size,
            s.codec,
        )
        self.prefix = edits.Seq(rank, job.section).prefix
        self.n = 0
        self.files = 0
        # A spill goes straight into edit files (the consumer merges every file it is sent), as
        # step 0's does: no run written, read back and merged here only to be written again.
        self.buf.spill_to = self._route

    def add(self, key: bytes, value: bytes = b"") -> None:
        # edits.pack with an inline edits.Seq: this runs once per emitted edit.
        self.n += 1
        self.buf.add(edits.pack_at(key, self.prefix, self.n, value))

    def add_many(self, keys: list[bytes], values: list[bytes]) -> None:
        """``add`` for many edits at once (one list comprehension instead of n calls)."""
        recs = edits.pack_many(keys, values, self.prefix, self.n)
        self.n += len(keys)
        self.buf.extend(recs)

    def _route(self, recs: Iterator[bytes] | list[bytes]) -> None:
        self.files += 1
        write_routed(self.job, self.stage, recs, f"st{self.job.stage}-{self.job.section:04d}-{self.files:04d}")

    def finish(self) -> int:
        n = self.buf.count
        if self.buf.recs:
            self._route(self.buf.sorted())
        self.buf.cleanup()
        return n


def edit_dir(job: StageJob, target: int, stage: int) -> str:
    """Where edits for ``stage`` of section ``target`` go.  Locally that is the target's
    incoming directory; with ``job.outbox`` (the distributed writer) a local outbox that
    is then shipped to the target's share group (same relative path)."""
    rel = os.path.join("edits", job.batch, f"st{stage}")
    if job.outbox:
        return os.path.join(job.outbox, section_dirname(target), rel)
    return os.path.join(section_path(job.db, target), rel)


def incoming_dir(root: str, section: int, batch: str, stage: int) -> str:
    return os.path.join(section_path(root, section), "edits", batch, f"st{stage}")


def write_routed(job: StageJob, stage: int, recs: Iterable[bytes], producer: str) -> dict[int, int]:
    """Write a sorted record stream into one edit file per target section; returns counts.

    The split is a range split in the stream's own order, so routing is a bisect per chunk.
    A list (a sort buffer's spill) is one chunk; an iterator is read 65536 records at a time."""
    secs = Sections.from_json(job.sections)
    s = job.settings
    bounds = secs.key_bounds(edits.STAGE_BY_URL[stage])
    counts: dict[int, int] = {}
    writers: dict[int, TableWriter] = {}
    chunks = [recs] if isinstance(recs, list) else _chunks(iter(recs), 65536)
    try:
        for chunk in chunks:
            lo = 0
            for j in range(secs.k):
                hi = bisect.bisect_left(chunk, bounds[j], lo) if j < len(bounds) else len(chunk)
                if hi > lo:
                    w = writers.get(j)
                    if w is None:
                        d = edit_dir(job, j, stage)
                        os.makedirs(d, exist_ok=True)
                        # Never fsynced: edits belong to one attempt of one batch, which a
                        # crash discards whole; a torn file fails its CRCs or its flag.
                        w = writers[j] = TableWriter(
                            os.path.join(d, producer + ".edits"),
                            KIND_EDITS,
                            s.block_size,
                            s.codec,
                            sync=False,
                        )
                    # The records are sorted already (a sort buffer's output): handed over as
                    # one run of bytes, keys with empty values, not checked record by record.
                    w.add_run(*join_run(chunk, lo, hi))
                    counts[j] = counts.get(j, 0) + hi - lo
                lo = hi
    finally:
        for w in writers.values():
            w.close()
    return counts


def _chunks(it: Iterator[bytes], n: int) -> Iterator[list[bytes]]:
    while chunk := list(islice(it, n)):
        yield chunk


def join_run(recs: list[bytes], lo: int, hi: int) -> tuple[bytes, list[int]]:
    """``recs[lo:hi]`` as ``TableWriter.add_run``'s arguments (keys with empty values): their
    bytes back to back and their lengths, each followed by 0.  In C (``_stagesc.join_run``) when
    the writer's kernels are compiled."""
    c = kernels.stagesc
    if c is not None:
        return c.join_run(recs, lo, hi)
    part = recs[lo:hi]
    return b"".join(part), list(chain.from_iterable(zip(map(len, part), repeat(0))))


def _records(job: StageJob) -> Iterator[tuple[bytes, bytes]]:
    for rec in merge_files(job.inputs, KIND_EDITS):
        kl = rec[-2] | (rec[-1] << 8)
        yield rec[: kl - 8], rec[kl:-2]


def _base(job: StageJob, table: str) -> str | None:
    """The base file of a table that is never kept as levels (the page tables)."""
    e = job.tables.get(table)
    if e is None:
        return None
    assert not e.runs, f"{table} has delta runs"
    return e.base


# Tables a stage may keep as levels: the link tables, where a round's edits are a small part of
# the table (docs/design.md §4.3).  The page tables are a tenth of the bytes and every stage
# probes them; they are rewritten each round (as levels they were measured no faster, and
# get_page slower: docs/performance.md, *Designs measured and rejected*).
LEVELED = frozenset(("links_by_md5", "links_by_url"))


def run_stage(job: StageJob) -> dict:
    """Run one stage for one section; returns the new table's stats (see module doc)."""
    t0, c0 = time.monotonic(), time.process_time()
    stage, sec = job.stage, job.section
    table = edits.STAGE_TABLE[stage]
    s = job.settings
    entry = job.tables.get(table)
    name = f"{job.gen:08d}-s{stage}.{TABLE_SUFFIX[table]}"
    d = section_path(job.db, sec)
    res: dict = {"stage": stage, "section": sec, "table": table, "file": name, "emitted": {}, "status": {}}
    fn = {
        1: _stage_pages_by_url,
        2: _stage_pages_by_md5,
        3: _stage_links_by_md5,
        4: _stage_links_by_url,
        5: _stage_link_fixups,
    }[stage]
    if stage == 1 and _marks_only(job):
        _stage_marks(job, res)
    elif entry is not None and table in LEVELED and s.level_ratio > 0:
        _leveled_stage(job, fn, entry, table, d, name, res)
    else:
        old = TableReader(entry.base, TABLE_KINDS[table]) if entry is not None else None
        if old is not None and entry.runs:
            # Levels turned off: the runs are merged into the base first (the rest as before).
            old.close()
            old = None
            tmp = _compact_entry(job, entry, table, d, f"{job.gen:08d}-s{stage}c.{TABLE_SUFFIX[table]}", {})
            old = TableReader(tmp, TABLE_KINDS[table])
        out = TableWriter(os.path.join(d, name), TABLE_KINDS[table], s.block_size, s.codec, sync=s.sync)
        cur = MergeCursor(old, out)
        try:
            info = fn(job, cur, out, res)  # the table's stats when the stage closed it itself
            if info is None:
                cur.finish()
                faults.point(f"stage{stage}.before_table_close")
                info = out.close()
            res.update(info)
        except BaseException:
            out.abort()
            raise
        finally:
            if old is not None:
                old.close()
                if entry is not None and entry.runs:
                    os.unlink(old.path)
        res["decoded_blocks"], res["raw_blocks"] = cur.decoded_blocks, cur.raw_blocks
        res["patched_blocks"] = cur.patched_blocks
    res["seconds"] = time.monotonic() - t0
    res["cpu_seconds"] = time.process_time() - c0
    faults.point(f"stage{stage}.done")
    return res


def _leveled_stage(job: StageJob, fn, entry: TableFiles, table: str, d: str, name: str, res: dict) -> None:
    """The stage writes its changes as a new delta run over the table's levels; when the runs
    outgrow the policy (``levels.level_step``: ``level_ratio`` of the base's bytes, ``level_runs``
    runs) they are merged into one run or into a new base right away, inside the stage (so a
    round's time includes it)."""
    s = job.settings
    stage = job.stage
    e = entry.entry
    carried = [entry.base, *entry.runs]
    newest = entry.runs[0] if entry.runs else entry.base
    if stage == 5 and os.path.basename(newest).startswith(f"{job.gen:08d}-s3"):
        # Stage 3 of this round ran on this table: it verified the files it kept (its reads,
        # its scrub, or a rebuild's reads of them all) and wrote the newest (its run, or the
        # base it rebuilt).  Stage 5 reads none of them (it writes blind), so nothing is left.
        carried = []
    # The blocks the stage's reads verify whole (their CRC over the whole block), by path: the
    # scrub after the body skips them.
    verified: dict[str, bytearray] = {}
    made: list[str] = []  # the files the stage wrote, removed if the scrub then fails
    view = open_levels(entry.base, entry.runs, table, e["records"], verified=verified)
    dname = f"{job.gen:08d}-s{stage}d.{TABLE_SUFFIX[table]}"
    dpath = os.path.join(d, dname)
    out = TableWriter(dpath, DELTA_KINDS[table], _run_block(s), s.codec, sync=s.sync)
    cur = LevelCursor(view, out)
    _, info = written(
        view, out, lambda: fn(job, cur, out, res), lambda: faults.point(f"stage{stage}.before_table_close")
    )
    made.append(dpath)
    try:
        res["decoded_blocks"], res["raw_blocks"], res["patched_blocks"] = cur.decoded_blocks, 0, 0
        runs = [{"file": dname, "bytes": info["bytes"], "entries": info["records"]}] + list(e.get("runs", ()))
        records = e["records"] + cur.live
        # The count bound counts rounds: a run's file name starts with the generation that wrote it.
        rounds = len({r["file"].partition("-")[0] for r in runs})
        step = level_step(e["bytes"], [r["bytes"] for r in runs], s.level_ratio, s.level_runs, _rebased(job), rounds)
        if step == MERGE_RUNS:
            # Too many runs but not much data in them (a big db): merge the runs into one, tiered,
            # without reading or writing the base.
            rname = f"{job.gen:08d}-s{stage}r.{TABLE_SUFFIX[table]}"
            paths = [os.path.join(d, dname)] + entry.runs
            view = open_levels(None, paths, table, records, verified=verified)
            out = TableWriter(os.path.join(d, rname), DELTA_KINDS[table], _run_block(s), s.codec, sync=s.sync)
            _, rinfo = written(
                view, out, lambda: merge_runs(view, out), lambda: faults.point(f"stage{stage}.merge_runs.before_close")
            )
            made.append(os.path.join(d, rname))
            os.unlink(dpath)  # merged into the new run; never named by a manifest
            made.remove(dpath)
            res["merged_runs"] = len(runs)
            runs = [{"file": rname, "bytes": rinfo["bytes"], "entries": rinfo["records"]}]
        elif step == COMPACT:
            merged = replace(
                entry, runs=[os.path.join(d, dname)] + entry.runs, entry=dict(e, runs=runs, records=records)
            )
            made.append(_compact_entry(job, merged, table, d, name, res, verified))
            os.unlink(dpath)  # merged into the new base; never named by a manifest
            made.remove(dpath)
            res["compacted"] = len(runs)
            if res["records"] != records:  # the levels disagree with the manifest's count
                raise CorruptionError(
                    f"{os.path.join(d, name)}: compaction kept {res['records']} records, the manifest "
                    f"counts {records}; the round is not committed (webdb check names the damage)"
                )
        if step != COMPACT:
            res.update(file=e["file"], records=records, bytes=e["bytes"], runs=runs)
        # Every kept file's blocks of this generation's slice that no read above verified: damage
        # there stops this round (its output is not handed back), named as the read would.
        res["scrubbed_bytes"] = _scrub(carried, job.gen, s.scrub_rounds, verified)
    except BaseException:
        for p in made:
            with contextlib.suppress(FileNotFoundError):  # a merge may have removed it already
                os.unlink(p)
        raise


def _rebased(job: StageJob) -> bool:
    """Whether a link table of this section got a new base in this round (an earlier stage of
    the batch compacted it: its base file carries the batch's generation)."""
    mark = f"{job.gen:08d}-"
    return any(t in LEVELED and os.path.basename(f.base).startswith(mark) for t, f in job.tables.items())


def _scrub(paths: list[str], gen: int, rounds: int, verified: dict[str, bytearray] | None = None) -> int:
    """Verify the CRCs of generation ``gen``'s slice (of ``rounds``) of each of the level files
    ``paths`` but the blocks ``verified`` marks (the stage's own reads verified them whole);
    return the bytes read."""
    if rounds <= 0:
        return 0
    done = 0
    for path in paths:
        t = TableReader(path)
        try:
            done += t.check_crcs(gen % rounds, rounds, verified.get(path) if verified is not None else None)
        finally:
            t.close()
    return done


def _run_block(settings: Settings) -> int:
    """Block size of a delta run: at most 8 KiB.  A lookup (``inlinks``) reads one block of the
    base and one of every run its range falls in, most of them holding nothing for it: a small
    run block is a quarter of the decompression (the base keeps ``block_size``)."""
    return min(settings.block_size, 8192)


def _compact_entry(
    job: StageJob, entry: TableFiles, table: str, d: str, name: str, res: dict, verified: dict | None = None
) -> str:
    """Merge a table's runs into a new base file ``name``; its stats go to ``res``.  The blocks
    it reads (all of them, each verified whole) are marked in ``verified`` if given."""
    s = job.settings
    t0, c0 = time.monotonic(), time.process_time()
    view = open_levels(entry.base, entry.runs, table, entry.entry["records"], verified=verified)
    path = os.path.join(d, name)
    out = TableWriter(path, TABLE_KINDS[table], s.block_size, s.codec, sync=s.sync)
    cur, info = written(
        view, out, lambda: compact(view, out), lambda: faults.point(f"stage{job.stage}.compact.before_close")
    )
    res.update(file=name, records=info["records"], bytes=info["bytes"])
    res["compact_raw_blocks"], res["compact_decoded_blocks"] = cur.raw_blocks, cur.decoded_blocks
    res["compact_seconds"], res["compact_cpu_seconds"] = time.monotonic() - t0, time.process_time() - c0
    return path


# ---- stage 1: PagesByURL ---------------------------------------------------------------------


def _page_after(
    url_b: bytes, base: bytes | None, group: list[tuple[int, bytes]], sched: Schedule
) -> tuple[bytes | None, tuple | None]:
    """Stage 1's rule: the page the edits of ``group`` make of ``base`` (None: none), and the
    link of an if-new edit that added it."""
    op, val = group[0]
    new = base
    link = None
    if op == edits.OP_ADD:
        new = page_with_scores_of(val, base) if base is not None else val
    elif op == edits.OP_ADD_SCORE:
        new = val
    elif op == edits.OP_IF_NEW:
        if base is None:
            new, lf, lv = edits.split_if_new_value(val, url_b)
            if lf is not None:
                link = (lf, lv)
    elif op == edits.OP_DEL:
        new = None
    if group[-1][0] >= edits.OP_FETCH:  # fetches, then lastmod hints (they sort last), in call order
        url = url_b.decode("utf-8")
        p = Page.decode(url, new) if new is not None else None
        for o, fv in group:
            if o == edits.OP_FETCH:
                p = apply_fetch(p, decode_fetch(url, fv), sched)
            elif o == edits.OP_LASTMOD and p is not None:
                p = apply_lastmod(p, *_LASTMOD.unpack(fv))
        new = p.encode_value() if p is not None else None
    return new, link


def _stage_pages_by_url(job: StageJob, cur: MergeCursor, out: TableWriter, res: dict) -> None:
    sched = job.schedule
    em2, em3, em4 = Emitter(job, 2, 1), Emitter(job, 3, 1), Emitter(job, 4, 1)
    status: dict[int, int] = {}
    index = _due_edits(job)
    held_path, held_entry = _old_marks(job)
    held_cur = MarkCursor(held_path) if held_path is not None else None
    mark_edits = MarkEdits()

    def marked(url_b: bytes, old: bytes | None, group: list[tuple[int, bytes]]) -> tuple[bytes | None, tuple | None]:
        """``_page_after`` for a page with a mark held or given (webdb.core.marks): the edits apply
        to the page with its held mark; a page they leave as it was keeps its stored value and
        its (new) mark in the table, a page they rewrite is written with its mark and leaves
        the table."""
        mark = None
        if group[-1][0] == edits.OP_MARK:
            mark = group[-1][1]  # the last mark call wins
            group = [g for g in group if g[0] != edits.OP_MARK]
        held = held_cur.get(url_b) if held_cur is not None else None
        base = old if held is None or old is None else with_mark(old, decode_mark(held))
        new, link = _page_after(url_b, base, group, sched) if group else (base, None)
        if new is not None and new == base:
            keep, stored = (mark if mark is not None else held), old
        else:
            keep, stored = None, (new if new is None or mark is None else with_mark(new, decode_mark(mark)))
        if keep != held:
            mark_edits.set(url_b, keep)
        return stored, link

    def combine(url_b: bytes, old: bytes | None, group: list[tuple[int, bytes]] | bytes) -> bytes | None:
        if type(group) is bytes:  # a lone if-new edit (_url_groups) of a page not stored
            group = [_lone_if_new(group)]
        op = group[0][0]
        if op == edits.OP_IF_NEW and old is not None and len(group) == 1:
            # Most groups: an outlink's target that is already stored.  Nothing changes, nothing
            # is emitted, and the record stays in its block's bytes (merge_points: same object).
            return old
        if held_cur is None and group[-1][0] != edits.OP_MARK:
            new, link = _page_after(url_b, old, group, sched)
        else:
            new, link = marked(url_b, old, group)
        if old is not None and new is not None:
            if old[MD5] != new[MD5]:
                em2.add(edits.pages_by_md5_edit_key(old[MD5], url_b, edits.OP2_DEL))
                em2.add(edits.pages_by_md5_edit_key(new[MD5], url_b, edits.OP2_ADD), new)
            elif old != new:
                em2.add(edits.pages_by_md5_edit_key(new[MD5], url_b, edits.OP2_ADD), new)
        elif old is not None:
            em2.add(edits.pages_by_md5_edit_key(old[MD5], url_b, edits.OP2_DEL))
        elif new is not None:
            em2.add(edits.pages_by_md5_edit_key(new[MD5], url_b, edits.OP2_ADD), new)
        if link is not None:
            em3.add(edits.links_by_md5_add_key(link[0], url_b), link[1])
        if old is None or new is None or (old[NUM_OUTLINKS] == NO_OUTLINKS) != (new[NUM_OUTLINKS] == NO_OUTLINKS):
            so, sn = edits.target_state(old), edits.target_state(new)
            if so != sn:
                em4.add(edits.links_by_url_notice_key(url_b), bytes((sn,)))
        if old is not None:
            status[old[STATUS]] = status.get(old[STATUS], 0) - 1
        if new is not None:
            status[new[STATUS]] = status.get(new[STATUS], 0) + 1
        if index is not None and old != new:
            index.change(url_b, old, new)
        return new

    try:
        cur.merge_points(_url_groups(job), combine, bytes)
    finally:
        if held_cur is not None:
            held_cur.close()
    faults.point("stage1.before_emit")
    res["emitted"] = {2: em2.finish(), 3: em3.finish(), 4: em4.finish()}
    res["status"] = {str(k): v for k, v in status.items() if v}
    if index is not None:
        res["due"] = _write_due(job, index)
    res["marks"] = _write_marks(job, mark_edits, held_path, held_entry)


def _groups(job: StageJob) -> Iterator[tuple[bytes, list[tuple[int, bytes]]]]:
    """Stage 1's edits by URL: (url, [(op, value), ...]) in the order they apply."""
    gu: bytes | None = None
    group: list[tuple[int, bytes]] = []
    for key, val in _records(job):
        url_b = key[:-2]
        if url_b != gu:
            if group:
                yield gu, group
            gu, group = url_b, []
        group.append((key[-1], val))
    if group:
        yield gu, group


def _url_groups(job: StageJob) -> Iterator[tuple[bytes, list[tuple[int, bytes]] | bytes]]:
    """``_groups`` as stage 1 merges them.  A group that starts with an if-new edit keeps only
    that one (``_page_after`` applies the first edit's op and then only fetches and lastmod
    hints: a later if-new changes nothing); a group of if-new edits only (most of them: an
    outlink's targets) is its first edit record itself, a ``bytes`` — ``merge_points`` leaves a
    stored page as it is without calling ``combine`` and ``_lone_if_new`` makes the group of an
    absent one.  The records are read a list at a time (``merge_file_chunks``), with no tuple
    per record."""
    gu: bytes | None = None
    group: list[tuple[int, bytes]] | bytes = b""
    if_new = edits.OP_IF_NEW
    for chunk in merge_file_chunks(job.inputs, KIND_EDITS):
        for rec in chunk:
            kl = rec[-2] | (rec[-1] << 8)
            url_b = rec[: kl - 10]
            if url_b != gu:
                if gu is not None:
                    yield gu, group
                gu = url_b
                group = rec if rec[kl - 9] == if_new else [(rec[kl - 9], rec[kl:-2])]
            elif type(group) is bytes:
                if rec[kl - 9] != if_new:  # (if-new edits sort first in a group that has them)
                    group = [_lone_if_new(group), (rec[kl - 9], rec[kl:-2])]
            else:
                group.append((rec[kl - 9], rec[kl:-2]))
    if gu is not None:
        yield gu, group


def _lone_if_new(rec: bytes) -> tuple[int, bytes]:
    """The (op, value) of an if-new edit record (``_url_groups``)."""
    kl = rec[-2] | (rec[-1] << 8)
    return rec[kl - 9], rec[kl:-2]


def _marks_only(job: StageJob) -> bool:
    """Stage 1's edits are all generate marks (a generate's batch): read until one is not."""
    return job.stage == 1 and "pages_by_url" in job.tables and all(k[-1] == edits.OP_MARK for k, _ in _records(job))


def _stage_marks(job: StageJob, res: dict) -> None:
    """Stage 1 of a batch of marks only: the section's mark table gets them (the last mark of
    a URL wins), PagesByURL and its due index stay as they are, and nothing is emitted.  The
    marks are of pages the caller read under the writer lock (``Writer.mark_generated``), so
    no page is read here: the cost follows the marks, not the section."""
    entry = job.tables["pages_by_url"]
    e = entry.entry
    held_path, held_entry = _old_marks(job)
    held_cur = MarkCursor(held_path) if held_path is not None else None
    mark_edits = MarkEdits()
    try:
        for url_b, group in _groups(job):
            mark = group[-1][1]
            if held_cur is None or held_cur.get(url_b) != mark:
                mark_edits.set(url_b, mark)
    finally:
        if held_cur is not None:
            held_cur.close()
    res.update(file=e["file"], records=e["records"], bytes=e["bytes"], emitted={}, status={})
    res["due"] = index_entry(e)
    res["marks"] = _write_marks(job, mark_edits, held_path, held_entry)
    res["decoded_blocks"], res["raw_blocks"], res["patched_blocks"] = 0, 0, 0


def _old_marks(job: StageJob) -> tuple[str | None, dict | None]:
    """The path and manifest entry of the section's mark table (None, None: no marks)."""
    entry = job.tables.get("pages_by_url")
    e = marks_entry(entry.entry) if entry is not None else None
    if e is None:
        return None, None
    return os.path.join(os.path.dirname(entry.base), e["file"]), e


def _write_marks(job: StageJob, mark_edits: MarkEdits, held_path: str | None, held_entry: dict | None) -> dict | None:
    """Merge stage 1's mark changes with the section's old mark table into this generation's
    (the old entry itself when nothing changed)."""
    path = os.path.join(section_path(job.db, job.section), marks_name(job.gen, "s1"))
    marks = mark_edits.write(held_path, held_entry, path, job.settings)
    faults.point("stage1.marks_written")
    return marks


def _due_edits(job: StageJob) -> IndexEdits | None:
    """The due index changes stage 1 collects (webdb.core.due), or None when the section's
    PagesByURL has no index (a db written before it: generate scans it)."""
    entry = job.tables.get("pages_by_url")
    if entry is not None and index_entry(entry.entry) is None:
        return None
    s = job.settings
    return IndexEdits(job.tmp, f"st1-{job.section}-due", s.block_size, s.codec, job.emit_mb << 20)


def _write_due(job: StageJob, index: IndexEdits) -> dict:
    """Stage 1's due index changes as a delta run over the section's index, the runs merged
    when the levels policy says so (``webdb.core.due.update_index``)."""
    entry = job.tables.get("pages_by_url")
    old = index_entry(entry.entry) if entry is not None else None
    due = update_index(section_path(job.db, job.section), job.gen, old, index, job.settings)
    faults.point("stage1.due_written")
    return due


# ---- stage 2: PagesByMD5 ---------------------------------------------------------------------


def _stage_pages_by_md5(job: StageJob, cur: MergeCursor, out: TableWriter, res: dict) -> dict:
    """Closes its table itself (stage 3's emissions probe the new table) and returns its stats."""
    lost: list[bytes] = []

    def groups():
        # One group per (md5, url): its edits in order (a delete sorts before an add).
        gk, ops = None, []
        for key, val in _records(job):
            tk = key[:-2]
            if tk != gk:
                if ops:
                    yield gk, ops
                gk, ops = tk, []
            ops.append((key[-1], val))
        if ops:
            yield gk, ops

    def combine(tk: bytes, old: bytes | None, ops: list[tuple[int, bytes]]) -> bytes | None:
        v = old
        for op, val in ops:
            if op == edits.OP2_ADD:
                v = val
            else:
                if v is not None and (not lost or lost[-1] != tk[:16]):
                    lost.append(tk[:16])  # (md5, url) deleted: the md5 may have lost its last page
                v = None
        return v

    cur.merge_points(groups(), combine)
    cur.finish()
    out_path = out.path
    faults.point("stage2.before_table_close")
    info = out.close()
    # Reference counting: an md5 no page carries any more loses its outlinks (defect 1 fixed:
    # this looks at the new table, however many pages of the md5 went in this batch).
    em3 = Emitter(job, 3, 2)
    if lost:
        probe = Probe(TableReader(out_path))
        for md5 in lost:
            if not probe.has_prefix(md5):
                em3.add(edits.links_by_md5_del_all_key(md5))
        probe.t.close()
    res["emitted"] = {3: em3.finish()}
    return info


# ---- stage 3: LinksByMD5 ---------------------------------------------------------------------


def _stage_links_by_md5(job: StageJob, cur: MergeCursor, out: TableWriter, res: dict) -> None:
    em4 = Emitter(job, 4, 3)
    pages_by_md5 = _base(job, "pages_by_md5")
    # Lazy: its index kept in place, so that has_prefix is a range read in C (no key lists of
    # PagesByMD5's blocks, which a round's md5s reach nearly all of).
    probe = Probe(TableReader(pages_by_md5, lazy=True) if pages_by_md5 else None)
    dropped = 0

    def combine(md5: bytes, ok: list[bytes], old_values, payload) -> tuple[list[bytes], list[bytes]] | Splice:
        nonlocal dropped
        del_all, adds = payload
        if adds and not probe.has_prefix(md5):
            dropped += len(adds)  # no page carries this content: its links would be orphans
            adds = []
        if not adds and not del_all:
            return Splice()
        tail = edits.links_by_url_link_tail(md5, edits.OP4_ADD)
        if not del_all:
            # Only new or changed links are written; the stored ones stay as bytes (a re-add of
            # the same link keeps the stored flag and emits nothing).  In C when compiled.
            r = kernels.links_by_md5_adds(md5, ok, old_values(), adds, tail)
            ek, ev, sp = r if r is not None else links_by_md5_adds_py(md5, ok, old_values(), adds, tail)
            if ek:
                em4.add_many(ek, ev)
            return Splice(sp)
        old = dict(zip([k[16:] for k in ok], old_values()))
        ek: list[bytes] = []
        ev: list[bytes] = []
        new: dict[bytes, bytes] = {}
        for u, v in adds:
            prev = old.get(u)
            if prev is not None and link_same_but_flag(prev, v):
                v = prev  # same link: keep the stored flag, emit nothing
            else:
                ek.append(u + tail)
                ev.append(v)
            new[u] = v
        if ek:
            em4.add_many(ek, ev)
        if del_all:
            gone = [u for u in old if u not in new]
            if gone:
                tail = edits.links_by_url_link_tail(md5, edits.OP4_DEL)
                em4.add_many([u + tail for u in gone], [b""] * len(gone))
        us = sorted(new)
        return [md5 + u for u in us], [new[u] for u in us]

    cur.merge_ranges(_batched_groups(job, kernels.links_by_md5_groups, links_by_md5_groups_py), combine)
    if probe.t is not None:
        probe.t.close()
    res["emitted"] = {4: em4.finish()}
    res["dropped_no_source"] = dropped


# ---- stage 4: LinksByURL ---------------------------------------------------------------------


def _stage_links_by_url(job: StageJob, cur: MergeCursor, out: TableWriter, res: dict) -> None:
    em5 = Emitter(job, 5, 4)
    pages_by_url = _base(job, "pages_by_url")
    # Lazy: its index kept in place, so that Probe.get is a piece at a time in C.
    probe = Probe(TableReader(pages_by_url, lazy=True) if pages_by_url else None)
    dangling = 0

    last: list = [None, 0]  # the url asked last and its state: splice and combine may both ask

    def state_of(url_b: bytes) -> int:
        if url_b != last[0]:
            last[0], last[1] = url_b, edits.target_state(probe.get(url_b))
        return last[1]

    op5_flag = bytes((edits.OP5_FLAG,))

    def splice(start: bytes, payload) -> Splice | None:
        # A url without a target notice whose target is not absent: its link edits as a Splice,
        # which a LevelCursor applies without reading the url's stored inlinks; else None
        # (combine then gets them).  The stored links have the right flag and stay as they
        # are; added links need the target's state, deletes nothing.
        url_b, notice, ledits = payload
        if notice is not None:
            return None
        tail = start + op5_flag  # edits.link_fixup_tail(url_b, OP5_FLAG): start is url_b 0x00
        r = kernels.links_by_url_splice(start, url_b, ledits, state_of, tail)  # in C when compiled
        state, sp, fix, fixv = r if r is not None else links_by_url_splice_py(start, url_b, ledits, state_of, tail)
        if sp is None:
            return None
        if fix:
            em5.add_many(fix, fixv)
        return Splice(sp)

    def combine(start: bytes, ok: list[bytes], old_values, payload) -> tuple[list[bytes], list[bytes]] | Splice:
        nonlocal dangling
        url_b, notice, ledits = payload
        state = notice
        if notice is None:
            sp = splice(start, payload)  # (a MergeCursor asks combine only)
            if sp is not None:
                return sp
            state = edits.TARGET_ABSENT  # the one case splice leaves to combine
        n0 = len(start)
        links = dict(zip([k[n0:] for k in ok], old_values()))
        added = {}  # value as stage 3 wrote it to LinksByMD5
        for fid, op, v in ledits:
            if op == edits.OP4_DEL:
                links.pop(fid, None)
                added.pop(fid, None)
            else:
                links[fid] = added[fid] = v
        if state == edits.TARGET_ABSENT:
            if links:
                tail = edits.link_fixup_tail(url_b, edits.OP5_DEL)
                em5.add_many([fid + tail for fid in links], [b""] * len(links))
            dangling += len(links)
            return [], []
        if state >= 0:
            flag = LINK_OUT if state == edits.TARGET_OUT else 0
            fb = bytes((flag,))
            fix = [
                fid for fid, v in (links if notice is not None else added).items() if (v[LINK_FLAGS] & LINK_OUT) != flag
            ]
            if fix:
                for fid in fix:
                    links[fid] = link_with_flags(links[fid], fb)
                tail = edits.link_fixup_tail(url_b, edits.OP5_FLAG)
                em5.add_many([fid + tail for fid in fix], [links[fid] for fid in fix])
        fids = sorted(links)
        return [start + f for f in fids], [links[f] for f in fids]

    groups = _batched_groups(job, kernels.links_by_url_groups, links_by_url_groups_py)
    if isinstance(cur, LevelCursor):
        cur.merge_ranges(groups, combine, splice)
    else:
        cur.merge_ranges(groups, combine)  # a whole table rewritten: combine splices in its block
    if probe.t is not None:
        probe.t.close()
    res["emitted"] = {5: em5.finish()}
    res["dangling"] = dangling


def links_by_url_splice_py(
    start: bytes, url_b: bytes, ledits: list[tuple[bytes, int, bytes]], state_of: Callable[[bytes], int], tail: bytes
) -> tuple[int, list[tuple[bytes, bytes | None]] | None, list[bytes], list[bytes]]:
    """Stage 4's link edits of a url with no target notice: ``(state, splice, fix, fixv)``.  The
    last edit of each fromID wins; if a link is added, ``state = state_of(url_b)`` (else -1).  For
    an absent target ``(0, None, [], [])`` (the caller deletes every link).  Else the splice of the
    url's range (``start`` + fromID, value or None), each added link's flag set to the target's
    where it differs, ``fix`` the fromID + ``tail`` of those links and ``fixv`` their new values
    (stage 5 writes them to LinksByMD5).  (``_stagesc.links_by_url_splice`` is this in C.)"""
    fin: dict[bytes, bytes | None] = {}
    for fid, op, v in ledits:
        fin[fid] = v if op == edits.OP4_ADD else None
    added = {fid: v for fid, v in fin.items() if v is not None}
    state = state_of(url_b) if added else -1
    if state == edits.TARGET_ABSENT:
        return state, None, [], []
    fix: list[bytes] = []
    fixv: list[bytes] = []
    if state >= 0:
        flag = LINK_OUT if state == edits.TARGET_OUT else 0
        fb = bytes((flag,))
        fids = [fid for fid, v in added.items() if (v[LINK_FLAGS] & LINK_OUT) != flag]
        for fid in fids:
            fin[fid] = link_with_flags(fin[fid], fb)
        fix = [fid + tail for fid in fids]
        fixv = [fin[fid] for fid in fids]
    return state, [(start + fid, v) for fid, v in fin.items()], fix, fixv


def links_by_md5_adds_py(
    md5: bytes, ok: list[bytes], ov: list[bytes], adds: list[tuple[bytes, bytes]], tail: bytes
) -> tuple[list[bytes], list[bytes], list[tuple[bytes, bytes]]]:
    """Stage 3's link adds of an md5 without a delete-all: the new or changed ones (a url not
    stored, or a value that differs but in the flag) as the edits to emit (url + ``tail``,
    value) and the splice of the md5's range (md5 + url, value).  ``ok``, ``ov``: the md5's
    stored links; ``adds`` in url order, one per url.  (``_stagesc.links_by_md5_adds`` is this in C.)"""
    old = dict(zip([k[16:] for k in ok], ov))
    ek: list[bytes] = []
    ev: list[bytes] = []
    sp: list[tuple[bytes, bytes]] = []
    for u, v in adds:
        prev = old.get(u)
        if prev is None or not link_same_but_flag(prev, v):
            ek.append(u + tail)
            ev.append(v)
            sp.append((md5 + u, v))
    return ek, ev, sp


def links_by_md5_groups_py(recs: list[bytes], final: bool) -> tuple[list, int]:
    """Stage 3's edit records cut into one group per md5, ``(md5, end of its key range,
    (delete_all, [(url, value)]))``, of several adds of a url the last; the rest as
    ``links_by_url_groups_py``.  (``_stagesc.links_by_md5_groups`` is this in C.)"""
    out = []
    gm: bytes | None = None
    del_all = False
    adds: list[tuple[bytes, bytes]] = []
    start = 0
    del_tag = edits.TAG3_DEL_ALL[0]
    for j, rec in enumerate(recs):
        # The edit record read in place (edits.pack): key = md5 tag [url 0x00], value at kl.
        kl = rec[-2] | (rec[-1] << 8)
        md5 = rec[:16]
        if md5 != gm:
            if gm is not None:
                out.append((gm, prefix_end(gm) or b"\xff" * 17, (del_all, adds)))
            gm, del_all, adds, start = md5, False, [], j
        if rec[16] == del_tag:
            del_all = True
        else:
            u = rec[17 : kl - 9]
            if adds and adds[-1][0] == u:
                adds[-1] = (u, rec[kl:-2])
            else:
                adds.append((u, rec[kl:-2]))
    if gm is None:
        return out, len(recs)
    if not final:
        return out, start
    out.append((gm, prefix_end(gm) or b"\xff" * 17, (del_all, adds)))
    return out, len(recs)


def links_by_url_groups_py(recs: list[bytes], final: bool) -> tuple[list, int]:
    """Stage 4's edit records cut into one group per url, ``(url 0x00, url 0x01, (url, notice,
    [(fromID, op, value)]))`` (the last notice of a url wins).  Unless ``final`` the last url's
    group is left, as it may go on in the next records: returns the groups and the index of its
    first record.  (``_stagesc.links_by_url_groups`` is this in C.)"""
    out = []
    gu: bytes | None = None
    notice: int | None = None
    ledits: list[tuple[bytes, int, bytes]] = []
    start = 0
    notice_tag = edits.TAG4_NOTICE[0]
    for j, rec in enumerate(recs):
        # The edit record read in place (edits.pack): key = url 0x00 tag [fromID op], value at kl.
        kl = rec[-2] | (rec[-1] << 8)
        i = rec.index(b"\x00")
        url_b = rec[:i]
        if url_b != gu:
            if gu is not None:
                out.append((gu + b"\x00", gu + b"\x01", (gu, notice, ledits)))
            gu, notice, ledits, start = url_b, None, [], j
        if rec[i + 1] == notice_tag:
            notice = rec[kl]
        else:
            ledits.append((rec[i + 2 : i + 18], rec[i + 18], rec[kl:-2]))
    if gu is None:
        return out, len(recs)
    if not final:
        return out, start
    out.append((gu + b"\x00", gu + b"\x01", (gu, notice, ledits)))
    return out, len(recs)


def _batched_groups(job: StageJob, cut, cut_py, n: int = 512) -> Iterator:
    """The groups of a stage's incoming edits, cut a few thousand records at a time by ``cut``
    (in C; None: declined) or ``cut_py`` (the reference, which also names what is wrong): one
    call per batch instead of Python work per record.  Batches are small (512 records) so that
    most groups are consumed before the garbage collector's next young-generation pass: a batch
    of thousands keeps thousands of containers alive across passes and costs more in the
    collector than it saves (measured: −0.6 CPU s of stage 4 at 512 against 4096)."""
    it = merge_files(job.inputs, KIND_EDITS)
    rest: list[bytes] = []
    while True:
        m = max(n, len(rest))  # a url's group longer than a batch: copied O(log) times, not O(len)
        new = list(islice(it, m))
        final = len(new) < m
        recs = rest + new if rest else new
        r = cut(recs, final)
        groups, used = r if r is not None else cut_py(recs, final)
        yield from groups
        if final:
            return
        rest = recs[used:]


# ---- stage 5: LinksByMD5 fix-ups -------------------------------------------------------------


def _stage_link_fixups(job: StageJob, cur: MergeCursor | LevelCursor, out: TableWriter, res: dict) -> None:
    # Each edit carries what LinksByMD5 holds after it: a flag fix-up the link's new value (the
    # one stage 4 wrote to LinksByURL), a delete nothing.  Stage 4 sends a fix-up only for a link
    # whose flag differs and a delete only for a link both tables hold (they hold the same links
    # with the same values), so over levels the run's records are written blind: no reads.
    recs = ((k[:-2], None if k[-1] == edits.OP5_DEL else v) for k, v in _records(job))
    if isinstance(cur, LevelCursor):
        cur.put_points(recs)
        return

    def combine(tk: bytes, old: bytes | None, new: bytes | None) -> bytes | None:
        return None if old is None else new

    # A whole table rewritten: a flag fix-up changes one byte of a value, so blocks with only
    # fix-ups are patched in place.
    cur.patch_points(recs, combine, lambda new: new is not None)
