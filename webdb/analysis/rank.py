"""Link analysis: iterated PageRank over the db, section by section (docs/analysis.md).

One iteration, for damping ``d``::

    new_score(u) = (1 - d) + d * sum(score(p) / n(p) for every page p linking to u)

where ``n(p)`` is the number of links stored from p's content md5.  A page carrying a content
md5 gives its own score: when several urls carry the same content they are several pages of the
url graph with the same outlinks, so their scores add up (the result is the PageRank of the url
graph).  Dangling pages (no outlinks) give nothing, and so do unfetched pages, even when links
are stored under their url md5 (their outlinks are not known until they are fetched); pages
with no inlinks get ``1 - d``.

The original ran in one process only (defect 8 of docs/semantics.md).  Here PagesByMD5 and LinksByMD5
share the md5 split, so each section's contributions come from a merge-join of its two md5
tables alone; sections run independently (``workers`` processes) and each emits sorted runs of
``url 0x00 md5 share`` records.  The runs merge by url against PagesByURL and every page is written
with ``add_page_with_score`` in one writer batch per iteration.

Cost per iteration: one sequential read of PagesByMD5, LinksByMD5 and PagesByURL, one write
and read of a (url, share) record per link (external sort), one batch rewriting every page.
Memory: the sort budget plus the targets of one md5 (a page's outlinks).
"""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from webdb.errors import BadInput
from webdb.tables.format import TMP_DIR
from webdb.tables.pagecodec import page_score, page_status
from webdb.tables.records import Page, Status
from webdb.util.sortbuf import SortBuffer, merge_files

__all__ = ["new_scores", "rank", "rank_iteration", "reader_contributions", "section_contributions", "shares"]

_SHARE = struct.Struct("<d")  # a score share in a contribution record


def _md5_groups(items: Iterator[tuple[bytes, bytes]]):
    return itertools.groupby(items, key=lambda kv: kv[0][:16])


def section_contributions(db, j: int, tmpdir: str, max_bytes: int) -> list[str]:
    """Merge-join PagesByMD5 and LinksByMD5 of section ``j``; return sorted run files of
    ``url 0x00 md5 share`` records.  Reads only section j (runs on any host that holds it).

    Cost: one sequential read of the section's two md5 tables; one record per link.
    """
    with db.reader() as r:
        return reader_contributions(r, j, tmpdir, max_bytes)


def reader_contributions(r, j: int, tmpdir: str, max_bytes: int) -> list[str]:
    """``section_contributions`` from a reader ``r`` that holds section j's md5 tables (a
    rack location's ``Reader.of_sections``)."""
    buf = SortBuffer(tmpdir, f"rank-s{j}", max_bytes)
    pages_by_md5, links_by_md5 = r.tables["pages_by_md5"][j], r.tables["links_by_md5"][j]
    if pages_by_md5 is None or links_by_md5 is None:
        return []
    pages = _md5_groups(pages_by_md5.items())
    cur = next(pages, None)
    for md5, links in _md5_groups(links_by_md5.items()):
        while cur is not None and cur[0] < md5:
            cur = next(pages, None)
        if cur is None:
            break
        if cur[0] != md5:
            continue  # links of a content no page carries any more: no score to give
        givers = [v for _, v in cur[1] if page_status(v) != Status.UNFETCHED]
        if not givers:
            continue  # only unfetched pages carry this md5: their outlinks are not known
        total = sum(page_score(v) for v in givers)
        targets = [k[16:] for k, _ in links]  # one page's outlinks: bounded by the update's cap
        share = _SHARE.pack(total / len(targets))
        for t in targets:
            buf.add(t + b"\x00" + md5 + share)  # (url, md5) is unique: run keys must be
    buf.spill()
    return buf.runs


def shares(records: Iterator[bytes]) -> Iterator[tuple[bytes, list[float]]]:
    """(url, its shares in md5 order) from sorted ``url 0x00 md5 share`` records."""
    for url, grp in itertools.groupby(records, key=lambda rec: rec[: rec.index(b"\x00")]):
        yield url, [_SHARE.unpack_from(rec, len(url) + 17)[0] for rec in grp]


def _sums(records: Iterator[bytes]) -> Iterator[tuple[bytes, float]]:
    """(url, sum of shares) from ``url 0x00 md5 share`` records sorted by url."""
    for url, xs in shares(records):
        yield url, sum(xs)  # one sum over the url's shares in md5 order (a rack sums the same list)


def rank_iteration(db, damping: float = 0.85, workers: int = 1, memory_mb: int | None = None) -> dict:
    """One PageRank iteration as one writer batch; returns counts and the L1 change of scores."""
    budget = (memory_mb or int(db.settings.memory_mb)) << 20
    with db.writer() as w, db.reader() as r:
        base = os.path.join(db.path, TMP_DIR)  # removed by the writer's recovery if we die
        os.makedirs(base, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f"rank-{os.getpid()}-", dir=base)
        try:
            k = r.sections.k
            per = max(1 << 20, budget // (4 * max(1, min(workers, k))))
            if workers > 1 and k > 1:
                with ProcessPoolExecutor(min(workers, k)) as ex:
                    runs = list(ex.map(section_contributions, [db] * k, range(k), [tmp] * k, [per] * k))
            else:
                runs = [section_contributions(db, j, tmp, per) for j in range(k)]
            paths = [p for rs in runs for p in rs]
            sums = _sums(merge_files(paths)) if paths else iter(())
            pages = 0
            delta = 0.0
            for page, new in new_scores(r.items("pages_by_url"), sums, damping):
                delta += abs(new - page.score)
                page.score = page.next_score = new
                w.add_page_with_score(page)
                pages += 1
            links = r.num_links
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"pages": pages, "links": links, "delta": delta}


def new_scores(
    items: Iterator[tuple[bytes, bytes]], sums: Iterator[tuple[bytes, float]], damping: float
) -> Iterator[tuple[Page, float]]:
    """Each page of PagesByURL ``items`` with its new score, from ``sums`` (url, sum of its
    shares) sorted by url: a merge-join."""
    nxt = next(sums, None)
    for key, v in items:
        while nxt is not None and nxt[0] < key:
            nxt = next(sums, None)  # a share for a url with no page (cannot stay: dangling)
        s = 0.0
        if nxt is not None and nxt[0] == key:
            s = nxt[1]
        yield Page.decode(key.decode("utf-8"), v), (1.0 - damping) + damping * s


def rank(
    db,
    iterations: int,
    damping: float = 0.85,
    workers: int = 1,
    memory_mb: int | None = None,
    lock_wait: float = 0.0,
) -> list[dict]:
    """Run ``iterations`` iterations (one committed batch each); a result dict per iteration.
    Each iteration waits up to ``lock_wait`` seconds for another writer's lock."""
    from webdb.core.lockwait import wait_for_lock

    if not 0.0 <= damping <= 1.0:
        raise BadInput(f"damping must be in [0, 1], got {damping}")
    if not isinstance(iterations, int) or iterations < 0:
        raise BadInput(f"iterations must be a whole number >= 0, not {iterations!r}")
    if not isinstance(workers, int) or workers < 1:
        raise BadInput(f"workers must be a whole number >= 1, not {workers!r}")
    return [
        wait_for_lock(lambda: rank_iteration(db, damping, workers, memory_mb), lock_wait, "rank")
        for _ in range(iterations)
    ]
