"""The writer: collects one batch of edits and applies them at ``close()`` through the cascade.

Every call validates its input (``BadInput`` names the bad URL or field) and appends one edit
record to a spilling sort buffer; nothing touches the tables until ``close()``.  Semantics:
docs/semantics.md.  Memory: at most ``memory_mb`` for edits, whatever the batch size.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Iterator
from typing import Any

from tqdm import tqdm

from webdb.core.manifest import Manifest
from webdb.core.marks import encode_mark
from webdb.core.schedule import FetchResult
from webdb.core.sections import Reservoir, Sections
from webdb.core.settings import Settings
from webdb.errors import BadInput, ClosedError
from webdb.tables.format import TMP_DIR
from webdb.tables.pagecodec import page_without_md5
from webdb.tables.records import (
    BAD_URL_CHAR,
    NEVER,
    Link,
    Page,
    Status,
    check_domain_id,
    validate_fetch,
    validate_link,
    validate_page,
    validate_url,
)
from webdb.util import faults
from webdb.util.sortbuf import GroupFeed, SortBuffer
from webdb.writer import edits, kernels
from webdb.writer.cascade import StageJob, encode_fetch, encode_lastmod, write_routed
from webdb.writer.columns import FetchBlock, have_numpy
from webdb.writer.engine import LocalExchange, base_state, batch_manifest, choose_sections, run_stages, stage_job
from webdb.writer.executor import LocalExecutor

__all__ = ["EditLog", "Writer"]

_STATUSES = frozenset(int(s) for s in Status)
# Below this many edits a batch runs its sections in this process, one after the other (the
# local executor's fast path).
PARALLEL_MIN_EDITS = 200_000


class EditLog:
    """The writer calls of one batch, recorded as sorted edit records (no db access).

    ``route(job)`` writes them as one edit file per target section: what the local writer
    applies, and what each host of the distributed writer ships to the others.
    """

    def __init__(self, settings: Settings, sections: Sections, tmp: str, producer: int = 0):
        self.settings = settings
        self.secs = sections
        self.tmp = tmp
        self.producer = producer
        mem = int(self.settings.memory_mb) << 20
        bs, codec = 65536, self.settings.codec
        # The writer's two edit buffers get 60% of the budget; the rest is the interpreter, the
        # block cache of probes and the write buffers.  Stage workers run after they are freed.
        self._pages_by_url = SortBuffer(self.tmp, "api-st1", int(mem * 0.3), bs, codec)
        self._links_by_md5 = SortBuffer(self.tmp, "api-st3", int(mem * 0.3), bs, codec)
        self._seq = edits.Seq(edits.RANK_API, producer)
        # The URL sample a first load of a k-section db chooses its breakpoints from.
        self._sample = None if self.secs.ready else Reservoir(int(self.settings.breakpoint_sample))
        self._max_url = int(self.settings.max_url_bytes)
        self._anchor_max = int(self.settings.anchor_max)
        self._files = 0  # edit files routed so far (their names are numbered)
        self.closed = False  # set by close()/abort(): a later call raises instead of being lost

    @property
    def count(self) -> int:
        return self._pages_by_url.count + self._links_by_md5.count

    @property
    def edits(self) -> dict[str, int]:
        """Edits recorded so far, page calls and link calls: the manifest's ``edits``."""
        return {"pages": self._pages_by_url.count, "links": self._links_by_md5.count}

    def sample(self) -> list[bytes]:
        """The URL sample (reservoir) taken while the sections had no breakpoints yet."""
        return list(self._sample.items) if self._sample is not None else []

    def _url(self, url: object) -> bytes:
        return validate_url(url, self._max_url)

    def _live(self) -> None:
        if self.closed:
            raise ClosedError(
                "this writer is closed (close() or abort() ran): the call would be lost; open a new writer"
            )

    def _page_edit(self, page: Page, op: int) -> bytes:
        self._live()
        if not isinstance(page, Page):
            raise BadInput(f"expected a webdb.Page, got {type(page).__name__}")
        url_b = self._url(page.url)
        validate_page(page)
        if page.status not in _STATUSES:
            raise BadInput(f"page {page.url!r:.200} has unknown status {page.status!r}")
        if self._sample is not None:
            self._sample.add(url_b)
        return url_b

    def _add1(self, key: bytes, value: bytes) -> None:
        self._pages_by_url.add(edits.pack(key, self._seq.next(), value))

    def add_page(self, page: Page) -> None:
        """Insert or replace ``page``; an existing page keeps its stored score and next_score."""
        url_b = self._page_edit(page, edits.OP_ADD)
        self._add1(edits.pages_by_url_edit_key(url_b, edits.OP_ADD), page.encode_value())

    def add_page_with_score(self, page: Page) -> None:
        """Insert or replace ``page``, scores included."""
        url_b = self._page_edit(page, edits.OP_ADD_SCORE)
        self._add1(edits.pages_by_url_edit_key(url_b, edits.OP_ADD_SCORE), page.encode_value())

    def add_page_if_not_present(self, page: Page, link: Link | None = None) -> None:
        """Insert ``page`` only if its url is absent; then also add ``link`` (which must point to it)."""
        url_b = self._page_edit(page, edits.OP_IF_NEW)
        if link is None:
            v = edits.if_new_value(page.encode_value())
        else:
            self._check_link(link)
            if link.url != page.url:
                raise BadInput(f"link to {link.url!r:.200} given with page {page.url!r:.200}: must be the same url")
            v = edits.if_new_value(page.encode_value(), link.from_id, self._link_value(link))
        self._add1(edits.pages_by_url_edit_key(url_b, edits.OP_IF_NEW), v)

    def delete_page(self, url: str) -> None:
        """Remove the page (its inlinks then dangle and are removed too)."""
        self._live()
        url_b = self._url(url)
        self._add1(edits.pages_by_url_edit_key(url_b, edits.OP_DEL), b"")

    def apply_fetch(self, result: FetchResult) -> None:
        """Apply a fetch outcome to the stored page (docs/semantics.md, *Fetch results*)."""
        self._live()
        if not isinstance(result, FetchResult):
            raise BadInput(f"expected a webdb.FetchResult, got {type(result).__name__}")
        url_b = self._url(result.url)
        if result.status == Status.FETCHED and (not isinstance(result.md5, bytes) or len(result.md5) != 16):
            raise BadInput(f"fetch result for {result.url!r:.200}: status FETCHED needs a 16-byte md5")
        if result.status not in _STATUSES or result.status in (Status.UNFETCHED, Status.DUPLICATE):
            raise BadInput(f"fetch result for {result.url!r:.200}: status {result.status!r} is not a fetch outcome")
        validate_fetch(result)
        if self._sample is not None:
            self._sample.add(url_b)
        self._add1(edits.pages_by_url_edit_key(url_b, edits.OP_FETCH), encode_fetch(result))

    def apply_lastmod(self, url: str, lastmod: int, due: int) -> None:
        """A hint that ``url`` changed at ``lastmod`` (a sitemap's lastmod, seconds since the
        epoch): at commit, after the batch's fetches of the url, a stored page last fetched
        (FETCHED or NOT_MODIFIED) before ``lastmod`` and due after ``due`` becomes due at ``due``
        (docs/semantics.md, *Pages*).  No page, no effect."""
        self._live()
        url_b = self._url(url)
        for name, v in (("lastmod", lastmod), ("due", due)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= NEVER:
                raise BadInput(
                    f"lastmod hint for {url!r:.200}: {name} must be whole seconds in 0..{NEVER}, not {v!r:.60}"
                )
        if self._sample is not None:
            self._sample.add(url_b)
        self._add1(edits.pages_by_url_edit_key(url_b, edits.OP_LASTMOD), encode_lastmod(lastmod, due))

    def mark_generated(self, url: str, mark: str) -> None:
        """Set the generate mark (``meta["gen"]``) of the stored page ``url`` to ``mark``: what
        a generate commits for each page it chose (fetchlist.generate).  The mark goes to the
        section's mark table, not into the page tables (webdb.core.marks; a batch of marks only
        rewrites no page), and every reader shows it in the page's meta.  For a page read under
        this writer's lock: ``webdb check`` reports a mark of a URL that holds no page."""
        self._live()
        url_b = self._url(url)
        v = encode_mark(mark)
        if self._sample is not None:
            self._sample.add(url_b)
        self._add1(edits.pages_by_url_edit_key(url_b, edits.OP_MARK), v)

    def _check_link(self, link: Link) -> bytes:
        self._live()
        if not isinstance(link, Link):
            raise BadInput(f"expected a webdb.Link, got {type(link).__name__}")
        url_b = self._url(link.url)
        validate_link(link)
        return url_b

    def _link_value(self, link: Link) -> bytes:
        anchor = link.anchor
        return Link(link.from_id, link.url, anchor[: self._anchor_max], link.domain_id, False).encode_value()

    def add_link(self, link: Link) -> None:
        """Insert or replace the link (from_id, url); the last call for a key wins."""
        url_b = self._check_link(link)
        self._links_by_md5.add(
            edits.pack(edits.links_by_md5_add_key(link.from_id, url_b), self._seq.next(), self._link_value(link))
        )

    def delete_links(self, md5: bytes) -> None:
        """Remove every link whose from_id is ``md5`` (applied before this batch's adds)."""
        self._live()
        if not isinstance(md5, bytes) or len(md5) != 16:
            raise BadInput(f"delete_links needs a 16-byte md5, got {md5!r:.80}")
        self._links_by_md5.add(edits.pack(edits.links_by_md5_del_all_key(md5), self._seq.next()))

    def add_links(self, from_md5: bytes, links: Iterable[tuple[str, str]], *, domain_id: int = 0) -> None:
        """``add_link(Link(from_md5, url, anchor, domain_id))`` for each (url, anchor), with less work per link."""
        self._links(from_md5, links, domain_id, None)

    def add_outlinks(
        self,
        from_md5: bytes,
        outlinks: Iterable[tuple[str, str]],
        *,
        domain_id: int = 0,
        next_fetch: int = 0,
        score: float = 1.0,
        fetch_interval: int | None = None,
    ) -> None:
        """For each (url, anchor): ``add_link(Link(from_md5, url, anchor, domain_id))`` and
        ``add_page_if_not_present(Page(url, next_fetch=…, score=…, fetch_interval=…))``.

        The same edits as those calls, built with less work per link: the update tool's path.
        """
        iv = self.settings.default_interval if fetch_interval is None else fetch_interval
        page = Page("x://", b"\x00" * 16, Status.UNFETCHED, 0, next_fetch, 0, iv, 0, score, score)
        validate_page(page)
        self._links(from_md5, outlinks, domain_id, page_without_md5(page.encode_value()))

    def _links(self, from_md5: bytes, links: Iterable[tuple[str, str]], domain_id: int, page_tail: bytes | None):
        # The hot path of an update: Seq.next inlined, one record call per edit; an outlink's page edit leaves
        # its md5 (MD5 of the url) to stage 1, which computes it only if the page is new.
        self._live()
        if not isinstance(from_md5, bytes) or len(from_md5) != 16:
            raise BadInput(f"links need a 16-byte source md5, got {from_md5!r:.80}")
        check_domain_id(domain_id, f"links from {from_md5.hex()}")
        link_pre = Link(from_md5, "", "", domain_id).encode_value()
        amax, seq, pages_by_url, links_by_md5 = self._anchor_max, self._seq, self._pages_by_url, self._links_by_md5
        sample, url_ok, prefix = self._sample, self._url, seq.prefix
        if_new = edits.if_new_value_without_md5(page_tail) if page_tail is not None else b""
        pages_by_url_record, links_by_md5_add_record, op_if_new = (
            edits.pages_by_url_record,
            edits.links_by_md5_add_record,
            edits.OP_IF_NEW,
        )
        precs: list[bytes] = []
        lrecs: list[bytes] = []
        bad, max_url = BAD_URL_CHAR.search, self._max_url
        try:
            for url, anchor in links:
                # validate_url inlined (the common case); anything odd goes through it for the error
                try:
                    url_b = url.encode("utf-8")
                except (AttributeError, UnicodeEncodeError):
                    url_b = url_ok(url)
                if len(url_b) > max_url or b"://" not in url_b[:32] or url_b[:3] == b"://" or bad(url):
                    url_b = url_ok(url)
                try:
                    anchor_b = (anchor[:amax] if len(anchor) > amax else anchor).encode("utf-8")
                except (TypeError, AttributeError, UnicodeEncodeError):
                    raise BadInput(
                        f"link to {url!r:.200}: anchor must be a str without lone surrogates, not {anchor!r:.60}"
                    ) from None
                if page_tail is not None:
                    if sample is not None:
                        sample.add(url_b)
                    seq.n += 1
                    precs.append(pages_by_url_record(url_b, op_if_new, prefix, seq.n, if_new))
                seq.n += 1
                lrecs.append(links_by_md5_add_record(from_md5, url_b, prefix, seq.n, link_pre + anchor_b))
        finally:
            # What was recorded before a bad URL stays recorded, as with one call per link.
            if precs:
                pages_by_url.extend(precs)
            if lrecs:
                links_by_md5.extend(lrecs)

    def apply_fetch_block(
        self,
        block: FetchBlock,
        *,
        domain_id: int = 0,
        score: float = 1.0,
        fetch_interval: int | None = None,
    ) -> None:
        """The calls of ``block`` (webdb.writer.columns.FetchBlock), in order: per row
        ``apply_fetch`` and, for a fetched page, ``add_outlinks(md5, links, next_fetch=fetch
        time, domain_id=…, score=…, fetch_interval=…)``.  The same edits (byte for byte, the
        same spills), the block's checks done at once with numpy and no call per outlink; call
        by call without numpy, while the URL sample is taken, or when a row or link would be
        refused (the call names it).  Cost: O(outlink bytes) in numpy, one concatenation per
        record."""
        self._live()
        if (
            not have_numpy()
            or self._sample is not None
            or not self._fetch_block(block, domain_id, score, fetch_interval)
        ):
            for r, links in block.calls():
                self.apply_fetch(r)
                if links is not None:
                    self.add_outlinks(
                        r.md5,
                        links,
                        domain_id=domain_id,
                        next_fetch=r.fetch_time,
                        score=score,
                        fetch_interval=fetch_interval,
                    )

    def _fetch_block(self, b: FetchBlock, domain_id: int, score: float, fetch_interval: int | None) -> bool:
        # Checks first, records after: a refused block records nothing (the calls then redo it).
        import numpy as np

        from webdb.writer.columns import link_records

        iv = self.settings.default_interval if fetch_interval is None else fetch_interval
        prefix = self._seq.prefix
        fetches = self._fetch_records(b, domain_id, score, iv)
        if fetches is None:
            return False
        frecs, rows, seqs, md5s, tail_of, link_pre, n = fetches
        cols = _link_columns(b, self._anchor_max, self._max_url)
        if cols is None:
            return False
        data, us, ue, as_, ae, counts = cols
        nl = len(us)
        precs: list[bytes] = []
        lrecs: list[bytes] = []
        psize = lsize = None
        if nl:
            precs, lrecs, psize, lsize = link_records(
                data,
                us,
                ue,
                as_,
                ae,
                counts,
                md5s,
                tail_of,
                np.asarray(seqs, np.int64),
                *edits.outlink_seq_prefixes(prefix),
                link_pre,
            )
        recs, ends, ppos, lpos, sizes = _in_call_order(frecs, precs, rows, counts, psize)
        feeds = [(GroupFeed(self._pages_by_url, recs, ends, sizes), ppos)]
        if nl:
            feeds.append((GroupFeed(self._links_by_md5, lrecs, np.cumsum(counts).tolist(), lsize), lpos))
        _spill_in_call_order(feeds)
        self._seq.n = n
        return True

    def _fetch_records(self, b: FetchBlock, domain_id: int, score: float, iv: int) -> tuple | None:
        """A block's fetch records (one per row, ``pages_by_url_record`` of OP_FETCH) and what its
        outlinks' records need: the rows with outlinks, the seq of each such row's first outlink
        edit, its md5 and page tail, the link value's fixed part, and the sequence counter after
        the block.  None for a row the calls would refuse or name (they then run instead)."""
        prefix, n = self._seq.prefix, self._seq.n
        try:
            check_domain_id(domain_id, "links")
            link_pre = Link(b"\x00" * 16, "", "", domain_id).encode_value()
            tails: dict[int, bytes] = {}
            frecs, rows, seqs, md5s, tail_of = [], [], [], [], []
            for url, ok, md5, t, m in zip(b.urls, b.fetched, b.md5s, b.times, b.nlinks):
                url_b = self._url(url)
                if ok:
                    if not isinstance(md5, bytes) or len(md5) != 16:
                        return None
                    r = FetchResult(url, Status.FETCHED, t, md5, m)
                    tail = tails.get(t)
                    if tail is None:
                        page = Page("x://", b"\x00" * 16, Status.UNFETCHED, 0, t, 0, iv, 0, score, score)
                        validate_page(page)
                        pt = page_without_md5(page.encode_value())
                        tail = tails[t] = edits.if_new_value_without_md5(pt)
                    if m:
                        rows.append(len(frecs))
                        seqs.append(n + 1)
                        md5s.append(md5)
                        tail_of.append(tail)
                else:
                    if m:
                        return None
                    r = FetchResult(url, Status.RETRY, t)
                validate_fetch(r)
                n += 1
                frecs.append(edits.pages_by_url_record(url_b, edits.OP_FETCH, prefix, n, encode_fetch(r)))
                n += 2 * m
        except BadInput:
            return None
        if len({len(t) for t in tail_of}) > 1:
            return None
        return frecs, rows, seqs, md5s, tail_of, link_pre, n

    def _route_run(self, job: StageJob, stage: int, recs) -> dict[int, int]:
        self._files += 1
        name = f"api-{self.producer:04d}-{self._files:04d}"
        return write_routed(job, stage, first_if_new_only(recs) if stage == edits.STAGE_PAGES_BY_URL else recs, name)

    def route_as_you_go(self, job: StageJob) -> None:
        """From now on a spill routes its sorted records straight into edit files (the stage
        workers merge those with their other inputs), instead of a run this process would merge
        back serially at close.  Needs the sections' breakpoints and the batch's job."""
        self._pages_by_url.spill_to = lambda recs: self._route_run(job, edits.STAGE_PAGES_BY_URL, recs)
        self._links_by_md5.spill_to = lambda recs: self._route_run(job, edits.STAGE_LINKS_BY_MD5, recs)

    def route(self, job: StageJob) -> dict[str, dict[int, int]]:
        """Sort the edits and write them as edit files per target section (consumes them)."""
        counts = {
            "pages": self._route_run(job, edits.STAGE_PAGES_BY_URL, self._pages_by_url.sorted_records()),
            "links": self._route_run(job, edits.STAGE_LINKS_BY_MD5, self._links_by_md5.sorted_records()),
        }
        self.discard()
        return counts

    def discard(self) -> None:
        self._pages_by_url.cleanup()
        self._links_by_md5.cleanup()
        if os.path.isdir(self.tmp):
            shutil.rmtree(self.tmp)


def _link_columns(b: FetchBlock, amax: int, max_url: int) -> tuple | None:
    """A block's outlink columns checked and as int64 arrays: ``(data, url start, url end, anchor
    start, anchor end, links per row with links)``, anchors longer than ``amax`` characters cut
    (the cut ones appended to ``data``).  None when a slice is out of bounds, a url fails
    ``link_urls_ok`` or the counts do not add up (the calls then run instead)."""
    import numpy as np

    from webdb.writer.columns import link_urls_ok

    data = b.data
    us, ue = np.asarray(b.url_start, np.int64), np.asarray(b.url_end, np.int64)
    as_, ae = np.asarray(b.anchor_start, np.int64), np.asarray(b.anchor_end, np.int64)
    buf = np.frombuffer(data, np.uint8)
    nd = len(data)
    if len(as_) != len(us):
        return None
    for s, e in ((us, ue), (as_, ae)):  # slices in bounds (else the calls slice as Python does)
        if len(s) != len(e) or (len(s) and (s.min() < 0 or e.max() > nd or (e < s).any())):
            return None
    if not link_urls_ok(buf, us, ue, max_url):
        return None
    counts = np.asarray([m for m in b.nlinks if m], np.int64)
    if int(counts.sum()) != len(us):
        return None
    long = np.flatnonzero(ae - as_ > amax)
    if len(long):  # anchors cut to anchor_max characters: those few in Python, appended
        cut = [data[a:e].decode("utf-8")[:amax].encode("utf-8") for a, e in zip(as_[long].tolist(), ae[long].tolist())]
        ends = np.cumsum([len(c) for c in cut]) + len(data)
        as_, ae = as_.copy(), ae.copy()
        as_[long], ae[long] = ends - [len(c) for c in cut], ends
        data += b"".join(cut)
    return data, us, ue, as_, ae, counts


def _in_call_order(frecs: list[bytes], precs: list[bytes], rows: list[int], counts, psize) -> tuple:
    """Stage 1's buffer gets per fetch its record, then its outlinks' page edits, then stage 3's
    buffer its link edits (add_outlinks): groups in call order, 3 positions per row.  Returns
    stage 1's records, their group ends, the positions of stage 1's and stage 3's groups, and
    the records' lengths in that order (numpy: a fetch record, then its row's links)."""
    import numpy as np

    recs: list[bytes] = []
    ends: list[int] = []
    ppos: list[int] = []
    lpos: list[int] = []
    lo, rows_it = 0, iter(zip(rows, counts.tolist()))
    nxt = next(rows_it, None)
    for i, fr in enumerate(frecs):
        recs.append(fr)
        ends.append(len(recs))
        ppos.append(3 * i)
        if nxt is not None and nxt[0] == i:
            hi = lo + nxt[1]
            recs += precs[lo:hi]
            ends.append(len(recs))
            ppos.append(3 * i + 1)
            lpos.append(3 * i + 2)
            lo = hi
            nxt = next(rows_it, None)
    sizes = np.fromiter(map(len, frecs), np.int64, len(frecs))
    nl = len(precs)
    if nl:
        per_row = np.zeros(len(frecs), np.int64)
        per_row[rows] = counts
        at = np.arange(len(frecs)) + np.cumsum(per_row) - per_row
        both = np.empty(len(frecs) + nl, np.int64)
        links = np.ones(len(both), bool)
        links[at] = False
        both[at], both[links] = sizes, psize
        sizes = both
    return recs, ends, ppos, lpos, sizes


def _spill_in_call_order(feeds: list[tuple[GroupFeed, list[int]]]) -> None:
    """Hand the feeds' groups to their buffers, the group of the lowest call position first, so
    the buffers spill exactly where the calls would have made them spill; then finish them."""
    while True:
        nexts = [(pos[g], f, g) for f, pos in feeds if (g := f.next_spill()) is not None]
        if not nexts:
            break
        _, f, g = min(nexts, key=lambda x: x[0])
        f.spill_next(g)
    for f, _ in feeds:
        f.finish()


def first_if_new_only(recs: Iterable[bytes]) -> Iterable[bytes]:
    """Drop every add_page_if_not_present edit of a url but its first: only the first can win
    (docs/semantics.md), and an update adds one per outlink, so most targets repeat.  A list
    (a spill) is filtered in one C call (``_stagesc.first_if_new``) with the writer's kernels compiled."""
    c = kernels.stagesc
    if c is not None and isinstance(recs, list):
        return c.first_if_new(recs, edits.OP_IF_NEW)
    return first_if_new_only_py(recs)


def first_if_new_only_py(recs: Iterable[bytes]) -> Iterator[bytes]:
    """``first_if_new_only`` in Python, a record at a time (the reference of ``_stagesc.first_if_new``)."""
    prev = b""
    for rec in recs:
        kl = rec[-2] | (rec[-1] << 8)
        key = rec[: kl - 8]
        if key[-1] == edits.OP_IF_NEW and key == prev:
            continue
        prev = key
        yield rec


class Writer(EditLog):
    """One batch.  Use as a context manager: a normal exit commits, an exception aborts.

    Only one writer may be open on a database at a time (``LockedError`` names the holder).
    """

    def __init__(self, db, progress: bool = False, **overrides: Any):
        self.db = db
        self.progress = progress
        settings = db.settings.replace(**overrides)
        self.lock = db.lock().acquire()
        try:
            self.recovered = db.recover()
            self.base = db.manifest()
        except BaseException:
            self.lock.release()
            raise
        super().__init__(settings, self.base.sections, os.path.join(db.path, TMP_DIR, f"w{os.getpid()}"))
        # The lock is held from here to the commit, so this batch's generation is known now.
        self.gen = self.base.generation + 1
        self.batch = f"{self.gen:08d}-{os.urandom(4).hex()}"
        if self.secs.ready:
            self.route_as_you_go(stage_job(db.path, self.batch, self.gen, self.secs, settings, self.tmp, 1))
        self.closed = False
        self.result: Manifest | None = None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, et, ev, tb) -> None:
        if et is None:
            self.close()
        else:
            self.abort()

    def abort(self) -> None:
        """Discard the batch."""
        if self.closed:
            return
        self.closed = True
        try:
            self.discard()
            self.db.recover()
        finally:
            self.lock.release()

    def close(self) -> Manifest | None:
        """Apply the batch and commit it; returns the new generation's manifest (None when
        the writer was aborted).  Readers see the old database until this returns."""
        if self.closed:
            return self.result
        try:
            self.result = self._apply()
        except BaseException:
            self.abort()
            raise
        self.closed = True
        try:
            self.db.recover()
        finally:
            self.lock.release()
        return self.result

    def _apply(self) -> Manifest:
        t0 = time.monotonic()
        db, s, base = self.db, self.settings, self.base
        gen, batch = self.gen, self.batch
        secs = self.secs
        if not secs.ready and self._sample.seen:
            secs = choose_sections([self.sample()], secs.k)
        workers = int(s.workers) or (os.cpu_count() or 1)
        workers = max(1, min(workers, secs.k))
        if self.count < PARALLEL_MIN_EDITS and not s.workers:
            workers = 1  # starting worker processes costs more than a small batch
        job0 = stage_job(db.path, batch, gen, secs, s, self.tmp, workers)
        os.makedirs(self.tmp, exist_ok=True)
        n_api = self.edits
        if secs.ready:
            self.route(job0)
        self.discard()
        faults.point("close.after_route")
        tables, status = base_state(base, secs.k)
        # A bar over the five stages (tqdm turns itself off when stderr is not a terminal).
        bar = tqdm(total=5, desc="update", unit="stage", disable=None if self.progress else True, leave=False)
        exchange = LocalExchange(db.path, batch, lambda stage: bar.update(1))
        execute = LocalExecutor(workers, self.tmp)
        try:
            rows = run_stages(job0, range(secs.k), tables, status, exchange, execute)
        except BaseException:
            execute.kill()
            raise
        execute.close()
        bar.close()
        manifest = batch_manifest(base, gen, batch, secs, tables, status, n_api, rows)
        db.commit(manifest)
        manifest.seconds = time.monotonic() - t0
        return manifest
