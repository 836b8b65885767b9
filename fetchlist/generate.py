"""Generate: choose the pages due for fetching and write them as a segment's fetchlists.

    res = generate(db, "segments/20240601120000", top_n=1000, max_per_host=50, fetchers=2)

Data flow (docs/crawl.md, *Generate*):

1. Take the database's writer lock (waiting up to ``lock_wait`` seconds if another writer —
   another generate, an update — holds it).  Holding it from the scan to the commit of the
   marks is what makes concurrent generates disjoint, and keeps an update from changing a page
   between the scan and the mark (the mark rewrites the page as it was read).
2. A page is *eligible* when ``next_fetch <= now + add_days``, its score is at least
   ``min_score``, it carries no live generate mark (``meta["gen"]``, see below) and it passes
   the URL filter (if one is given).
3. Select the best by ``order_key`` (score desc, then a hash of the URL): per host
   (``max_per_host``) and per registered domain (``max_per_domain``) at most that many, at
   most ``top_n`` in all — exactly what taking eligible pages in that order while the caps
   have room gives (Nutch 2's generate.max.count).  ``choose`` reads the sections' due indexes
   (``Reader.due``: the pages of the due buckets in that order, docs/design.md §4.6) and takes
   greedily until ``top_n`` are taken; a db without them is scanned (``_eligible``, then
   ``select``: O(top_n) memory with at most one cap, else the per-host top ``max_per_host``
   of every host).  Both give the same selection.
4. Partition by a hash (mmh3) of the host, or of the registered domain (``partition``), into
   ``fetchers`` lists: all of one host in one list.  Within a list hosts are interleaved (each
   host's best, then each host's second, ...), so a fetcher's queues all start at once.
5. Each entry carries its page as stored and the distinct anchor texts of its inlinks, one per
   source domain (``max_anchors``, at most ``max_inlinks_scanned`` inlinks read per URL).
6. Write the segment (fetchlists: temp file, fsync, rename), then commit the marks: one
   ``Writer.mark_generated`` per selected page, ``meta["gen"] = "<segment name>@<generate time>"``,
   kept in the sections' mark tables beside the pages (docs/design.md §4.7), not in them.
   A crash between the two leaves a segment nobody marked for (harmless: its pages are
   generated again); never marks without a segment.

The mark: a page marked at time T is skipped by later generates until ``T + mark_expiry``
(default 7 days, Nutch's crawl.gen.delay) or until an update applies a fetch outcome for it
(``fetchlist.update`` sets ``meta["gen"] = ""``).  So a round whose segment is lost or never
updated gives its pages back after the expiry.

Cost: through the due index, the records read (the selected pages and those skipped on the
way) plus a block per section and due bucket, then a point read per selected page; by a scan,
one sequential read of PagesByURL (every block decoded once, not cached), per eligible page a
struct unpack and a heap operation, O(log top_n).  Either way, per selected page one inlink
lookup and one mark: a batch of marks only, which writes the sections' mark tables (the marks
outstanding) and leaves PagesByURL, PagesByMD5 and the due index as they are.

Given a rack (``generate(rack, ...)``), it gives the same result with each host reading only
its own sections: every host runs steps 2-3 on its sections, the coordinator runs ``select`` again
over their selections (exact: each host's selection contains its share of the global one),
the hosts read the anchors of their chosen pages, the coordinator writes the segment, and the
marks commit as one distributed batch (docs/crawl.md, *Generate in a rack*).
"""

from __future__ import annotations

import heapq
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import mmh3

from fetchlist.filters import UrlFilter
from fetchlist.normalize import registered_domain
from fetchlist.segment import FetchEntry, Segment
from webdb import DAY, CallRecorder, Page, Reader, pagecodec, wait_for_lock
from webdb.errors import BadInput, CorruptionError
from webdb.rack import Rack

__all__ = [
    "Choice",
    "GenerateResult",
    "GenerateOptions",
    "generate",
    "order_key",
    "host_key",
    "partition_of",
    "mark_time",
    "MARK",
    "select",
    "choose",
]

MARK = pagecodec.GENERATE_MARK  # page.meta key of the generate mark ("gen"; the due index carries it)
DEFAULT_MARK_EXPIRY = 7 * DAY
DEFAULT_MAX_ANCHORS = 10
DEFAULT_MAX_INLINKS_SCANNED = 1000
_MARK_BYTES = b'"' + MARK.encode() + b'"'
# The block cache of a generate's reader: it reads the chosen pages in URL order, each block
# once, so a cache only costs (at 3M pages the default 256 MiB filled up and was 20% slower).
_CACHE_MB = 4


@dataclass
class GenerateResult:
    """What a generate did.  ``segment`` is None when nothing was selected (no segment written)."""

    segment: str | None
    selected: int
    parts: list[int]
    scanned: int
    eligible: int
    skipped: dict[str, int] = field(default_factory=dict)
    hosts: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    rack: Any = None  # a rack's generate: the update's per-host result (webdb.rack.UpdateResult)
    candidates: int = 0  # a rack's generate: keys the locations sent the coordinator
    via: str = "scan"  # "index": read the due front of the due index; "scan": every page

    def summary(self) -> str:
        sk = ", ".join(f"{k} {v:,}" for k, v in self.skipped.items() if v)
        head = (
            f"generated {self.selected:,} URLs from {self.hosts:,} hosts into {self.segment} "
            f"({len(self.parts)} fetchlists: {', '.join(f'{n:,}' for n in self.parts)})"
            if self.segment
            else "nothing to generate"
        )
        read = f"read {self.scanned:,} due index records" if self.via == "index" else f"scanned {self.scanned:,} pages"
        return f"{head}; {read}, {self.eligible:,} eligible" + (f"; skipped: {sk}" if sk else "")


# ---- keys -----------------------------------------------------------------------------------------


def order_key(score: float, url: str | bytes) -> tuple[float, int]:
    """Selection order: higher score first; equal scores by a hash of the URL (mmh3), which
    spreads ties over hosts instead of favouring the alphabet.  Larger key = selected first."""
    b = url.encode("utf-8") if isinstance(url, str) else url
    return (score, -mmh3.hash64(b, signed=True)[0])


def host_key(url: str | bytes) -> str:
    """The lowercased host of a (normalized) URL, without userinfo and port.  A few hundred ns."""
    u = url.decode("utf-8", "replace") if isinstance(url, bytes) else url
    i = u.find("//")
    rest = u[i + 2 :] if i >= 0 else u
    j = len(rest)
    for sep in "/?#":
        k = rest.find(sep)
        if 0 <= k < j:
            j = k
    hp = rest[:j].rpartition("@")[2]
    if hp.startswith("["):
        return hp[: hp.find("]") + 1].lower()
    return hp.partition(":")[0].lower()


def partition_of(url: str, fetchers: int, mode: str = "host") -> int:
    """Fetchlist of ``url``: mmh3 of its host (or registered domain) modulo ``fetchers``."""
    h = host_key(url)
    key = registered_domain(h) if mode == "domain" and h else h
    return mmh3.hash(key.encode("utf-8"), 0, signed=False) % fetchers


def mark_time(meta: dict) -> int | None:
    """Generate time of a page's mark (None: not marked)."""
    m = meta.get(MARK) or ""
    return _mark_at(m) if isinstance(m, str) else None


def _mark_at(mark: str) -> int | None:
    """Generate time of a mark ``<segment>@<time>`` (None: not a mark)."""
    at = mark.rpartition("@")[2]
    # ASCII digits only: str.isdigit accepts "²", which int() then refuses
    return int(at) if at.isascii() and at.isdigit() and len(at) <= 18 else None


# ---- selection ------------------------------------------------------------------------------------


class _Capped:
    """The best ``top_n`` offers, at most ``cap`` per group: exactly the greedy selection in
    key order (a group's items beyond its top ``cap`` can never be chosen, and the worst item
    kept overall is also the worst of its own group, so evicting it keeps the group heaps exact).

    Memory O(top_n).  Offer cost O(log top_n + log cap).
    """

    def __init__(self, top_n: int | None, cap: int | None) -> None:
        self.top_n, self.cap = top_n, cap
        self.heap: list = []  # (key, seq, item) of live items; item = [url, value, group, alive]
        self.groups: dict[str, list] = defaultdict(list)  # group -> heap of (key, seq, item)
        self.n = 0
        self._seq = 0

    def offer(self, key: tuple, url: bytes, value: bytes, group: str) -> None:
        top_n, cap = self.top_n, self.cap
        if top_n is not None and self.n >= top_n and key <= self._root()[0]:
            return
        self._seq += 1
        item = [url, value, group, True]
        ent = (key, self._seq, item)
        if cap is not None:
            g = self.groups[group]
            if len(g) >= cap:
                if key <= g[0][0]:
                    return
                old = heapq.heapreplace(g, ent)
                old[2][3] = False  # dead in the global heap (removed lazily)
                self.n -= 1
            else:
                heapq.heappush(g, ent)
        heapq.heappush(self.heap, ent)
        self.n += 1
        if len(self.heap) > 2 * self.n + 1024:  # drop dead entries: memory stays O(live)
            self.heap = [e for e in self.heap if e[2][3]]
            heapq.heapify(self.heap)
        if top_n is not None and self.n > top_n:
            worst = self._root()
            heapq.heappop(self.heap)
            worst[2][3] = False
            self.n -= 1
            if cap is not None:
                g = self.groups[worst[2][2]]
                assert g[0] is worst
                heapq.heappop(g)
                if not g:
                    del self.groups[worst[2][2]]

    def _root(self):
        h = self.heap
        while not h[0][2][3]:
            heapq.heappop(h)
        return h[0]

    def items(self) -> list[tuple[tuple, bytes, bytes]]:
        """Selected (key, url, value), best first."""
        live = [(k, it[0], it[1]) for k, _, it in self.heap if it[3]]
        live.sort(key=lambda x: x[0], reverse=True)
        return live


def select(
    candidates: Iterable[tuple[tuple, bytes, bytes]],
    *,
    top_n: int | None = None,
    max_per_host: int | None = None,
    max_per_domain: int | None = None,
) -> list[tuple[tuple, bytes, bytes]]:
    """The greedy selection of ``candidates`` (key, url bytes, page value): in key order (larger
    first), take one while its host and its domain are under their caps and fewer than
    ``top_n`` are taken.  Returned best first.

    With at most one cap this streams in O(top_n) memory; with both, the per-host top
    ``max_per_host`` of each host is kept, then the greedy pass runs over those.
    """
    if max_per_host is not None and max_per_domain is not None:
        per_host = _Capped(None, max_per_host)
        for key, url, value in candidates:
            per_host.offer(key, url, value, host_key(url))
        taken: list = []
        hosts: dict[str, int] = defaultdict(int)
        doms: dict[str, int] = defaultdict(int)
        for key, url, value in per_host.items():
            if top_n is not None and len(taken) >= top_n:
                break
            h = host_key(url)
            d = registered_domain(h) if h else h
            if hosts[h] < max_per_host and doms[d] < max_per_domain:
                hosts[h] += 1
                doms[d] += 1
                taken.append((key, url, value))
        return taken
    cap = max_per_host if max_per_host is not None else max_per_domain
    sel = _Capped(top_n, cap)
    by_domain = max_per_domain is not None
    for key, url, value in candidates:
        h = host_key(url) if cap is not None else ""
        sel.offer(key, url, value, (registered_domain(h) if h else h) if by_domain else h)
    return sel.items()


# ---- the scan ---------------------------------------------------------------------------------------


def _eligible(
    reader,
    *,
    horizon: int,
    now: int,
    min_score: float | None,
    mark_expiry: int,
    url_filter: UrlFilter | None,
    skipped: dict[str, int],
    counter: list[int],
) -> Iterator[tuple[tuple, bytes, bytes]]:
    """(order key, url bytes, page value) of every eligible page, by URL.  One pass over
    PagesByURL, block by block, decoding only the fixed fields (and meta if it has a mark)."""
    unpack, i_next, i_score, fixed = (
        pagecodec.PAGE.unpack_from,
        pagecodec.F_NEXT_FETCH,
        pagecodec.F_SCORE,
        pagecodec.PAGE_FIXED,
    )
    hash64 = mmh3.hash64
    lo_score = float("-inf") if min_score is None else min_score
    not_due = low = marked = filtered = 0
    for j, t in enumerate(reader.tables["pages_by_url"]):
        if t is None:
            continue
        marks = reader.marks(j)  # the section's mark table: a page's mark, over the one in its meta
        for b in range(t.nblocks):
            keys, vals = t.block(b, fill_cache=False)
            counter[0] += len(keys)
            for k, v in zip(keys, vals):
                f = unpack(v)
                if f[i_next] > horizon:
                    not_due += 1
                    continue
                score = f[i_score]
                if score < lo_score:
                    low += 1
                    continue
                m = marks.get(k) if marks else None
                if m is not None:
                    at = _mark_at(m)
                    if at is not None and at + mark_expiry > now:
                        marked += 1
                        continue
                elif len(v) > fixed and _MARK_BYTES in v:
                    at = mark_time(json.loads(v[fixed:]))
                    if at is not None and at + mark_expiry > now:
                        marked += 1
                        continue
                if url_filter is not None and not url_filter.accept(k.decode("utf-8")):
                    filtered += 1
                    continue
                yield (score, -hash64(k, signed=True)[0]), k, v
    skipped.update(not_due=not_due, low_score=low, marked=marked, filtered=filtered)


def _due_front(
    front: Iterator[tuple[bytes, bytes]],
    *,
    horizon: int,
    now: int,
    min_score: float | None,
    mark_expiry: int,
    url_filter: UrlFilter | None,
    skipped: dict[str, int],
    counter: list[int],
) -> Iterator[tuple[tuple, bytes, None]]:
    """(order key, url bytes, None) of the eligible pages of the due index's ``front`` (best
    first, see ``Reader.due``): what ``_eligible`` yields, in key order and without the page
    values, for as long as the caller takes them.  Stops at the first score below
    ``min_score`` (all after it are lower)."""
    due_order, due_next_fetch, due_mark = pagecodec.due_order, pagecodec.due_next_fetch, pagecodec.due_mark
    lo_score = float("-inf") if min_score is None else min_score
    not_due = low = marked = filtered = 0
    try:
        for k, v in front:
            counter[0] += 1
            if due_next_fetch(v) > horizon:  # in the horizon's bucket, due later
                not_due += 1
                continue
            score, tie, url_b = due_order(k)
            if score < lo_score:
                low = 1  # the first one read; all after it are lower and not read
                break
            if len(v) > 8:
                at = _mark_at(due_mark(v))
                if at is not None and at + mark_expiry > now:
                    marked += 1
                    continue
            if url_filter is not None and not url_filter.accept(url_b.decode("utf-8")):
                filtered += 1
                continue
            yield (score, tie), url_b, None
    finally:
        skipped.update(not_due=not_due, low_score=low, marked=marked, filtered=filtered)


def _take(
    candidates: Iterable[tuple[tuple, bytes, Any]],
    *,
    top_n: int | None,
    max_per_host: int | None,
    max_per_domain: int | None,
) -> list[tuple[tuple, bytes, Any]]:
    """``select`` over candidates that come in key order (best first): the greedy pass itself,
    which stops taking (and reading) once ``top_n`` are taken.  Memory: the taken and a count
    per host and domain seen."""
    taken: list = []
    if top_n is not None and top_n <= 0:
        return taken
    hosts: dict[str, int] = defaultdict(int)
    doms: dict[str, int] = defaultdict(int)
    capped = max_per_host is not None or max_per_domain is not None
    for c in candidates:
        if capped:
            h = host_key(c[1])
            if max_per_host is not None and hosts[h] >= max_per_host:
                continue
            if max_per_domain is not None:
                d = registered_domain(h) if h else h
                if doms[d] >= max_per_domain:
                    continue
                doms[d] += 1
            hosts[h] += 1
        taken.append(c)
        if len(taken) == top_n:
            break
    return taken


def _page_values(reader, chosen: list[tuple[tuple, bytes, Any]]) -> list[tuple[tuple, bytes, bytes]]:
    """``chosen`` with each page's value, read from PagesByURL in URL order (a point read per
    page, each block decoded at most once while it stays cached)."""
    tables, secs = reader.tables["pages_by_url"], reader.sections
    values = {}
    for url_b in sorted(u for _, u, _ in chosen):
        v = tables[secs.of_url(url_b)].get(url_b)
        if v is None:
            raise CorruptionError(
                f"{reader.db.path}: the due index names {url_b!r:.100}, which PagesByURL does not hold "
                f"(`webdb check` names the file)"
            )
        values[url_b] = v
    return [(key, u, values[u]) for key, u, _ in chosen]


@dataclass
class Choice:
    """A selection over one reader's sections, and what it read (``choose``)."""

    chosen: list[tuple[tuple, bytes, bytes]]
    scanned: int
    eligible: int
    skipped: dict[str, int]
    via: str


def choose(
    reader,
    *,
    now: int,
    horizon: int,
    min_score: float | None,
    mark_expiry: int,
    url_filter: UrlFilter | None,
    top_n: int | None,
    max_per_host: int | None,
    max_per_domain: int | None,
    due_index: bool = True,
) -> Choice:
    """Select from ``reader``'s sections: through the due index (the due front in key order,
    taken greedily until ``top_n``) when ``due_index`` and every section has one, else by a
    scan of PagesByURL (``_eligible`` then ``select``).  Both give the same selection; the
    counts say what each read."""
    skipped: dict[str, int] = {}
    counter = [0]
    n_elig = [0]
    front = reader.due(horizon) if due_index else None
    via = "index" if front is not None else "scan"
    filters = {
        "horizon": horizon,
        "now": now,
        "min_score": min_score,
        "mark_expiry": mark_expiry,
        "url_filter": url_filter,
        "skipped": skipped,
        "counter": counter,
    }
    cands = _due_front(front, **filters) if front is not None else _eligible(reader, **filters)

    def counted(it):
        for x in it:
            n_elig[0] += 1
            yield x

    caps = {"top_n": top_n, "max_per_host": max_per_host, "max_per_domain": max_per_domain}
    if front is not None:
        stream = counted(cands)
        chosen = _page_values(reader, _take(stream, **caps))
        for g in (stream, cands, front):  # end the merge: its tables close, the counts are final
            g.close()
    else:
        chosen = select(counted(cands), **caps)
    return Choice(chosen, counter[0], n_elig[0], skipped, via)


def _anchors(reader, url_b: bytes, max_anchors: int, max_scanned: int) -> list[str]:
    """Distinct anchor texts of links to ``url_b``, one per source domain (domain_id), from the
    first ``max_scanned`` inlinks.  ``Reader.inlinks``: one piece of a block decompressed per
    table file whose index does not rule the URL out, the cache not filled — per chosen URL a
    cost that does not grow with LinksByURL (a walk decoding whole blocks did: 1.2 CPU s for
    100k URLs at 1M pages, 2.4 at 3M)."""
    seen_dom: set[int] = set()
    out: list[str] = []
    for n, link in enumerate(reader.inlinks(url_b.decode("utf-8"))):
        if n >= max_scanned or len(out) >= max_anchors:
            break
        if link.domain_id in seen_dom:
            continue
        seen_dom.add(link.domain_id)
        a = link.anchor.strip()
        if a and a not in out:
            out.append(a)
    return out


def _interleave(selected: list[tuple[tuple, bytes, bytes]]) -> list[tuple[tuple, bytes, bytes]]:
    """Best of every host first (hosts by their best), then every host's second, and so on."""
    rank: dict[str, int] = defaultdict(int)
    first: dict[str, int] = {}
    keyed = []
    for i, x in enumerate(selected):  # selected is best first
        h = host_key(x[1])
        first.setdefault(h, i)
        keyed.append((rank[h], first[h], i))
        rank[h] += 1
    keyed.sort()
    return [selected[i] for _, _, i in keyed]


def _check_args(
    segment_dir: str | os.PathLike,
    top_n: int | None,
    max_per_host: int | None,
    max_per_domain: int | None,
    fetchers: int,
    partition: str,
) -> str:
    for name, v in (("top_n", top_n), ("max_per_host", max_per_host), ("max_per_domain", max_per_domain)):
        if v is not None and (not isinstance(v, int) or v < 1):
            raise BadInput(f"{name} must be a whole number >= 1, not {v!r}")
    if not isinstance(fetchers, int) or fetchers < 1:
        raise BadInput(f"fetchers must be a whole number >= 1, not {fetchers!r}")
    if partition not in ("host", "domain"):
        raise BadInput(f"partition must be 'host' or 'domain', not {partition!r}")
    segment_dir = os.fspath(segment_dir)
    if os.path.exists(segment_dir) and (not os.path.isdir(segment_dir) or os.listdir(segment_dir)):
        raise BadInput(f"{segment_dir}: exists and is not an empty directory (a segment is written once)")
    return segment_dir


def mark_of(segment_dir: str, now: int) -> str:
    """The generate mark of the pages of ``segment_dir``: ``<segment name>@<generate time>``."""
    return f"{os.path.basename(os.path.normpath(segment_dir))}@{now}"


def _write_segment(
    segment_dir: str,
    chosen: list[tuple[tuple, bytes, bytes]],
    anchors: dict[bytes, list[str]],
    mark: str,
    now: int,
    db: str,
    fetchers: int,
    partition: str,
    info: dict | None,
) -> tuple[list[int], int]:
    """Write the fetchlists of ``chosen`` (best first); returns (entries per list, hosts)."""
    parts: list[list] = [[] for _ in range(fetchers)]
    for x in chosen:
        parts[partition_of(x[1].decode("utf-8"), fetchers, partition)].append(x)
    seg = Segment.create(
        segment_dir,
        generated=now,
        db=db,
        fetchers=fetchers,
        partition=partition,
        urls=len(chosen),
        **(info or {}),
    )
    sizes = []
    hosts = set()
    for i, part in enumerate(parts):
        entries = []
        for _, url_b, value in _interleave(part):
            url = url_b.decode("utf-8")
            hosts.add(host_key(url))
            page = Page.decode(url, value)
            page.meta[MARK] = mark  # the page as it is stored once the marks commit
            entries.append(FetchEntry(url, page, anchors[url_b]))
        sizes.append(seg.write_fetchlist(i, entries))
    return sizes, len(hosts)


def _open_writer(db, lock_wait: float, overrides: dict):
    return wait_for_lock(lambda: db.writer(**overrides), lock_wait, "generate")


@dataclass(frozen=True)
class GenerateOptions:
    """The options of ``generate``, each a keyword of it (docs/crawl.md, *Generate*)."""

    now: int | None = None  # the round's clock, seconds since the epoch (default: time.time())
    top_n: int | None = None  # at most this many pages (the best by order_key)
    max_per_host: int | None = None  # at most this many pages of one host
    max_per_domain: int | None = None  # at most this many pages of one registered domain
    min_score: float | None = None  # pages scored below are skipped
    add_days: float = 0  # select what is due this many days after ``now``
    fetchers: int = 1  # fetchlist parts of the segment
    partition: str = "host"  # what keeps URLs in one part: "host" or "domain"
    mark_expiry: int = DEFAULT_MARK_EXPIRY  # seconds after which a generate mark lapses
    max_anchors: int = DEFAULT_MAX_ANCHORS  # inlink anchors stored per fetch entry
    max_inlinks_scanned: int = DEFAULT_MAX_INLINKS_SCANNED  # inlinks read per page for them
    url_filter: UrlFilter | None = None  # URLs it refuses are skipped
    due_index: bool = True  # read the due index's front (False: scan every page; same selection)
    lock_wait: float = 60.0  # seconds to wait for the writer lock (then LockedError/UpdateFailed)
    writer_settings: dict | None = None  # settings of the batch that marks the pages
    info: dict | None = None  # stored in the segment's SEGMENT file
    progress: Callable[[str], None] | None = None  # one line per step
    # In a rack only:
    events: Callable[[dict], None] | None = None  # the rack's progress events (``update``'s)
    heartbeat_timeout: float | None = None  # default: webdb.rack.HEARTBEAT_TIMEOUT
    stage_timeout: float | None = None  # default: webdb.rack.STAGE_TIMEOUT
    env: dict[str, str] | None = None  # environment of the agents
    dask: str | None = None  # a Dask scheduler address (default: hosts.ini's dask_scheduler)


_RACK_ONLY = ("events", "heartbeat_timeout", "stage_timeout", "env", "dask")


def generate(target, segment_dir: str | os.PathLike, **options: Any) -> GenerateResult:
    """Select due pages of ``target``, write them as the segment ``segment_dir`` (created; must
    be absent or empty) and mark them.  See the module doc.  ``options``: the fields of
    ``GenerateOptions``.

    ``target`` is a ``webdb.WebDB`` (this process scans the db) or a ``webdb.rack.Rack`` (each
    location scans its own sections: the same selection, segment and marks; docs/crawl.md,
    *Generate in a rack*).  Raises BadInput for bad options (a rack-only option with a db
    among them), LockedError (a db) or UpdateFailed (a rack) if the writer lock stays held for
    ``lock_wait`` seconds.
    """
    o = GenerateOptions(**options)
    if isinstance(target, Rack):
        return _generate_rack(target, segment_dir, o)
    given = [n for n in _RACK_ONLY if getattr(o, n) is not None]
    if given:
        raise BadInput(f"generate: {', '.join(given)} apply to a rack only, not to the db {target.path}")
    return _generate_db(target, segment_dir, o)


def _generate_db(db, segment_dir: str | os.PathLike, o: GenerateOptions) -> GenerateResult:
    segment_dir = _check_args(segment_dir, o.top_n, o.max_per_host, o.max_per_domain, o.fetchers, o.partition)
    say = o.progress or (lambda _msg: None)
    t0 = time.monotonic()
    secs: dict[str, float] = {}
    w = _open_writer(db, o.lock_wait, o.writer_settings or {})
    try:
        now = int(time.time()) if o.now is None else int(o.now)
        with db.reader(cache_mb=_CACHE_MB) as r:
            secs["lock"] = time.monotonic() - t0
            choice = choose(r, **_selection_options(o, now), due_index=o.due_index)
            if choice.via == "scan":
                say(f"scanned {r.num_pages:,} pages" + ("" if not o.due_index else f" ({NO_INDEX})"))
            secs["scan"] = time.monotonic() - t0 - secs["lock"]
            chosen, eligible, skipped = choice.chosen, choice.eligible, choice.skipped
            skipped["capped"] = eligible - len(chosen)
            if not chosen:
                w.abort()
                secs["total"] = time.monotonic() - t0
                return GenerateResult(None, 0, [], choice.scanned, eligible, skipped, 0, secs, via=choice.via)
            t1 = time.monotonic()
            say(f"selected {len(chosen):,}; reading inlink anchors")
            anchors: dict[bytes, list[str]] = {}
            for _, url, _ in sorted(chosen, key=lambda x: x[1]):  # by URL: neighbours share blocks
                anchors[url] = _anchors(r, url, o.max_anchors, o.max_inlinks_scanned) if o.max_anchors > 0 else []
            secs["anchors"] = time.monotonic() - t1
        t1 = time.monotonic()
        mark = mark_of(segment_dir, now)
        sizes, hosts = _write_segment(segment_dir, chosen, anchors, mark, now, db.path, o.fetchers, o.partition, o.info)
        secs["write"] = time.monotonic() - t1
        t1 = time.monotonic()
        say(f"marking {len(chosen):,} pages")
        for _, url_b, _ in chosen:
            w.mark_generated(url_b.decode("utf-8"), mark)
        w.close()
        secs["mark"] = time.monotonic() - t1
    except BaseException:
        w.abort()
        raise
    secs["total"] = time.monotonic() - t0
    return GenerateResult(
        segment_dir, len(chosen), sizes, choice.scanned, eligible, skipped, hosts, secs, via=choice.via
    )


# What a generate of a db without a due index says (once): it scanned every page instead.
NO_INDEX = "no due index (a db written before it): every page scanned; `webdb rebalance` builds it"


def _selection_options(o: GenerateOptions, now: int) -> dict:
    """``choose``'s keywords from a generate's options (but ``due_index``)."""
    return {
        "now": now,
        "horizon": now + int(o.add_days * DAY),
        "min_score": o.min_score,
        "mark_expiry": o.mark_expiry,
        "url_filter": o.url_filter,
        "top_n": o.top_n,
        "max_per_host": o.max_per_host,
        "max_per_domain": o.max_per_domain,
    }


# ---- in a rack ------------------------------------------------------------------------------------

RACK_STEPS = "fetchlist.generate:rack_step"  # what a generate's agents run between sync and batch
_MARKS_INPUT = "calls"  # webdb's registered input of CallRecorder files (replay_calls)
_CHUNK = 5000  # candidates or entries per reply part: one JSON line of at most a few MB


def rack_step(ctx, req: dict) -> Iterator[dict]:
    """The agents' side of ``generate`` over a rack (a steps function, webdb.writer.rack.Session).

    ``op = "select"``: scan this location's PagesByURL, select with the request's options and
    reply the selection's keys and URLs, ``[score, tie, url]`` (no page values), then the scan
    counts.  ``op = "entries"``: for the chosen URLs of this location (a subset of what it
    replied), reply each page value (base64) and its inlink anchors from this location's
    LinksByURL, and write each section's marks as a ``replay_calls`` file in the scratch dir.
    The writer lock is held throughout (the agent took it before the sync).
    """
    op = req.get("op")
    if op == "select":
        from fetchlist.filters import UrlFilter

        # Only this location's sections (a rack location cannot open a whole-db Reader).
        view = Reader.of_sections(ctx.db, ctx.manifest, ctx.sections, ("pages_by_url", "links_by_url"))
        ctx.state["view"] = view
        url_filter = UrlFilter.from_texts(req["filters"]) if req.get("filters") else None
        choice = choose(
            view,
            now=req["now"],
            horizon=req["horizon"],
            min_score=req.get("min_score"),
            mark_expiry=req["mark_expiry"],
            url_filter=url_filter,
            top_n=req.get("top_n"),
            max_per_host=req.get("max_per_host"),
            max_per_domain=req.get("max_per_domain"),
            due_index=req.get("due_index", True),
        )
        chosen = choice.chosen
        ctx.state["values"] = {url: value for _, url, value in chosen}
        for i in range(0, len(chosen), _CHUNK):
            yield {"cands": [[k[0], k[1], u.decode("utf-8")] for k, u, _ in chosen[i : i + _CHUNK]]}
        yield {
            "stats": {
                "scanned": choice.scanned,
                "eligible": choice.eligible,
                "skipped": choice.skipped,
                "via": choice.via,
            }
        }
    elif op == "entries":
        import base64

        view, values = ctx.state.pop("view"), ctx.state.pop("values")
        mark, max_anchors = req["mark"], req["max_anchors"]
        marks: dict[int, CallRecorder] = {}
        out = []
        try:
            for url_b in sorted(u.encode("utf-8") for u in req["urls"]):  # by URL: neighbours share blocks
                value = values[url_b]
                url = url_b.decode("utf-8")
                anchors = _anchors(view, url_b, max_anchors, req["max_inlinks_scanned"]) if max_anchors > 0 else []
                marks.setdefault(view.sections.of_url(url_b), CallRecorder()).mark_generated(url, mark)
                out.append([url, base64.b64encode(value).decode("ascii"), anchors])
        finally:
            view.close()
        paths = {}
        for j, rec in marks.items():
            paths[str(j)] = os.path.join(ctx.scratch, f"marks-{j:04d}.jsonl")
            with open(paths[str(j)], "w", encoding="utf-8") as f:
                rec.write(f)
        yield {"marks": paths}
        for i in range(0, len(out), _CHUNK):
            yield {"entries": out[i : i + _CHUNK]}
    else:
        raise BadInput(f"generate: unknown step {op!r}")


def _generate_rack(rack, segment_dir: str | os.PathLike, o: GenerateOptions) -> GenerateResult:
    """``generate`` over a rack: the same selection, segment and marks as on the whole db,
    with each location selecting only from its own sections.  The segment is written here (on
    the coordinator).  docs/crawl.md, *Generate in a rack*.

    1. One distributed update opens: every location takes its writer lock and syncs.
    2. Each location selects from its sections with the same options (through their due
       indexes, or a scan) and replies the keys and URLs of its selection (a superset of its
       share of the global selection).
    3. ``select`` over the union is the global selection; each location replies the page
       values and anchors of its chosen URLs and writes its sections' marks as writer calls.
    4. The segment is written, then the batch of marks runs and commits on every section at
       once.  A failure before the commit point commits nothing and removes the segment.

    ``o.events`` gets the rack's progress events (as ``update``'s ``progress``); ``result.rack``
    is the update's per-host result.  Raises UpdateFailed as ``update`` does; a writer lock
    held elsewhere is waited for up to ``o.lock_wait`` seconds.  ``o.dask``: a Dask scheduler
    address (default: hosts.ini's ``dask_scheduler``): the same requests and batch run as tasks
    on its workers.
    """
    from webdb.rack import UpdateFailed

    run = _RackGenerate(
        rack, _check_args(segment_dir, o.top_n, o.max_per_host, o.max_per_domain, o.fetchers, o.partition), o
    )
    res = wait_for_lock(
        run.attempt,
        o.lock_wait,
        "generate",
        locked=lambda e: isinstance(e, UpdateFailed) and e.kind == "LockedError" and not run.got.get("written"),
        give_up=lambda e: UpdateFailed(f"generate waited {o.lock_wait:g}s for the writer lock: {e}", e.result),
    )
    return run.result(res)


class _RackGenerate:
    """One generate over a rack: the update's ``before_batch`` (``select``, then ``entries``,
    then the segment) and the result.  ``got`` holds what the steps learnt, ``secs`` their
    times."""

    def __init__(self, rack, segment_dir: str, o: GenerateOptions) -> None:
        self.rack, self.segment_dir, self.o = rack, segment_dir, o
        self.existed = os.path.isdir(segment_dir)
        self.say = o.progress or (lambda _msg: None)
        self.now = int(time.time()) if o.now is None else int(o.now)
        self.mark = mark_of(segment_dir, self.now)
        self.t0 = time.monotonic()
        self.secs: dict[str, float] = {}
        self.got: dict = {}

    def attempt(self):
        """One try of the distributed update that generates; a failure after the segment was
        written but before the marks committed removes the segment."""
        from webdb.rack import HEARTBEAT_TIMEOUT, STAGE_TIMEOUT, UpdateFailed, update

        o = self.o
        try:
            return update(
                self.rack,
                dask=o.dask,
                env=o.env,
                steps=RACK_STEPS,
                before_batch=self.before_batch,
                settings=o.writer_settings,
                heartbeat_timeout=HEARTBEAT_TIMEOUT if o.heartbeat_timeout is None else o.heartbeat_timeout,
                stage_timeout=STAGE_TIMEOUT if o.stage_timeout is None else o.stage_timeout,
                progress=o.events,
            )
        except UpdateFailed as e:
            if self.got.get("written") and not e.result.committed:
                import shutil

                shutil.rmtree(self.segment_dir, ignore_errors=True)  # its marks never committed: no segment
                if self.existed:
                    os.makedirs(self.segment_dir, exist_ok=True)
            raise

    def before_batch(self, session):
        """Select, read the entries, write the segment; returns the marks' input (None:
        nothing to generate)."""
        self.got.clear()
        t1 = time.monotonic()
        self.secs["lock"] = t1 - self.t0
        chosen, origin = self._select(session)
        self.secs["scan"] = time.monotonic() - t1
        if not chosen:
            return None
        t1 = time.monotonic()
        self.say(f"selected {len(chosen):,} of {self.got['candidates']:,} candidates; reading inlink anchors")
        chosen, anchors, inputs = self._entries(session, chosen, origin)
        self.secs["anchors"] = time.monotonic() - t1
        t1 = time.monotonic()
        # The segment before the marks: a failure in between leaves a segment nobody marked for.
        self.got["written"] = True
        where = f"{session.rack.db} ({session.rack.config.source})"
        o = self.o
        self.got["sizes"], self.got["hosts"] = _write_segment(
            self.segment_dir, chosen, anchors, self.mark, self.now, where, o.fetchers, o.partition, o.info
        )
        self.got["selected"] = len(chosen)
        self.secs["write"] = time.monotonic() - t1
        self.got["t_mark"] = time.monotonic()
        self.say(f"marking {len(chosen):,} pages")
        return inputs, _MARKS_INPUT

    def _select(self, session) -> tuple[list, dict[bytes, str]]:
        """Every location's selection, then ``select`` over their union: the global one, and
        the location each chosen URL came from."""
        o = self.o
        req = {
            "op": "select",
            "now": self.now,
            "horizon": self.now + int(o.add_days * DAY),
            "min_score": o.min_score,
            "mark_expiry": o.mark_expiry,
            "filters": o.url_filter.texts() if o.url_filter is not None else None,
            "top_n": o.top_n,
            "max_per_host": o.max_per_host,
            "max_per_domain": o.max_per_domain,
            "due_index": o.due_index,
        }
        self.say(f"selecting on {sum(1 for p in session.rack.places.values() if p.sections)} location(s)")
        replies = session.ask(lambda p: req if p.sections else None)
        origin: dict[bytes, str] = {}
        cands = []
        scanned = eligible = 0
        skipped: dict[str, int] = defaultdict(int)
        via = "index"
        for label, parts in replies.items():
            for part in parts:
                for score, tie, url in part.get("cands", ()):
                    url_b = url.encode("utf-8")
                    origin[url_b] = label
                    cands.append(((score, tie), url_b, b""))
                if "stats" in part:
                    scanned += part["stats"]["scanned"]
                    eligible += part["stats"]["eligible"]
                    for k, v in part["stats"]["skipped"].items():
                        skipped[k] += v
                    if part["stats"].get("via", "scan") == "scan":
                        via = "scan"
        chosen = select(cands, top_n=o.top_n, max_per_host=o.max_per_host, max_per_domain=o.max_per_domain)
        skipped["capped"] = eligible - len(chosen)
        self.got.update(scanned=scanned, eligible=eligible, skipped=dict(skipped), candidates=len(cands), via=via)
        if via == "scan" and o.due_index:
            self.say(NO_INDEX)
        return chosen, origin

    def _entries(self, session, chosen: list, origin: dict[bytes, str]) -> tuple[list, dict, dict]:
        """The chosen pages' values and anchors from their locations, which write the marks
        as writer calls: (chosen with values, anchors by URL, the marks' inputs by section)."""
        import base64

        o = self.o
        mine: dict[str, list[str]] = defaultdict(list)
        for _, url_b, _ in chosen:
            mine[origin[url_b]].append(url_b.decode("utf-8"))
        replies = session.ask(
            lambda p: (
                {
                    "op": "entries",
                    "urls": mine.get(p.label, []),
                    "mark": self.mark,
                    "max_anchors": o.max_anchors,
                    "max_inlinks_scanned": o.max_inlinks_scanned,
                }
                if p.sections
                else None
            )
        )
        values: dict[bytes, bytes] = {}
        anchors: dict[bytes, list[str]] = {}
        inputs: dict[int, dict] = {}
        for parts in replies.values():
            for part in parts:
                for j, path in (part.get("marks") or {}).items():
                    inputs[int(j)] = {"paths": [path]}
                for url, value, anch in part.get("entries", ()):
                    url_b = url.encode("utf-8")
                    values[url_b], anchors[url_b] = base64.b64decode(value), anch
        return [(key, url_b, values[url_b]) for key, url_b, _ in chosen], anchors, inputs

    def result(self, res) -> GenerateResult:
        got, secs = self.got, self.secs
        if "t_mark" in got:
            secs["mark"] = time.monotonic() - got["t_mark"]
        secs["total"] = time.monotonic() - self.t0
        via = got.get("via", "scan")
        if not res.committed:  # nothing to generate: the agents unlocked without a batch
            r = GenerateResult(
                None, 0, [], got.get("scanned", 0), got.get("eligible", 0), got.get("skipped", {}), 0, secs, via=via
            )
        else:
            r = GenerateResult(
                self.segment_dir,
                got["selected"],
                got["sizes"],
                got["scanned"],
                got["eligible"],
                got["skipped"],
                got["hosts"],
                secs,
                via=via,
            )
        r.rack = res
        r.candidates = got.get("candidates", 0)
        return r
