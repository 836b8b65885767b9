"""What each view of the dashboard shows, as plain data (the HTML pages and ``/api/…`` render the
same dicts).  Every function reads one ``Reader``: one committed generation.

Costs: ``overview`` and ``hosts`` need one sequential read of PagesByURL per generation, done
once in the background by ``Scans`` and kept for that generation; ``rounds`` reads the manifest
only; ``page`` is a point lookup plus at most ``limit`` inlinks and outlinks (each inlink's
source pages by one lookup in PagesByMD5); ``search`` reads at most ``limit`` keys from where
the prefix starts.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter

from webdb.core.reader import Reader
from webdb.errors import BadInput, WebDBError
from webdb.tables.records import Page, Status, validate_url
from webdb.tools.stats import stats

__all__ = ["HOST_COLUMNS", "Scans", "hosts", "overview", "page", "rounds", "search"]

STATUSES = [s.name.lower() for s in Status]
# The columns of the hosts view, in order; each sorts.  "failing": pages whose last fetch
# failed (retry or gone); "retrying": pages with retries > 0; "retries": their sum.
HOST_COLUMNS = ["host", "pages", *STATUSES, "failing", "retrying", "retries"]
_RETRY, _GONE = int(Status.RETRY), int(Status.GONE)
OTHER_HOSTS = "(other hosts)"
DAY = 86400


class Scan:
    """What one read of PagesByURL gives for one generation: ``stats`` (the numbers of
    ``webdb read --stats --json``), per-host counts, and score and fetch-interval histograms.

    Memory: one row of ``len(Status) + 3`` ints per host, for at most ``max_hosts`` hosts (the
    rest are counted in one row, ``(other hosts)``); the histograms have one bucket per
    quarter-octave of score and per day of interval."""

    def __init__(self, r: Reader, max_hosts: int, top_hosts: int = 10) -> None:
        self.generation = r.generation
        n = len(STATUSES)
        rows: dict[str, list[int]] = {}
        score_h: Counter[int] = Counter()
        interval_h: Counter[int] = Counter()

        def visit(host: str, p: Page) -> None:
            row = rows.get(host)
            if row is None:
                if len(rows) >= max_hosts and host != OTHER_HOSTS:
                    row = rows.setdefault(OTHER_HOSTS, [0] * (n + 2))
                else:
                    row = rows[host] = [0] * (n + 2)
            row[p.status] += 1
            if p.retries:
                row[n] += 1
                row[n + 1] += p.retries
            score_h[_score_bucket(p.score)] += 1
            interval_h[p.fetch_interval // DAY] += 1

        self.stats = stats(r, top_hosts, progress=False, visit=visit)
        self.hosts = [_host_row(h, c) for h, c in rows.items()]
        self.score_hist = [[_score_value(b), c] for b, c in sorted(score_h.items())]
        self.interval_hist = [[d, c] for d, c in sorted(interval_h.items())]
        self._sorted: dict[tuple[str, bool], list[dict]] = {}
        self._lock = threading.Lock()

    def hosts_sorted(self, key: str, desc: bool) -> list[dict]:
        """The host rows sorted by ``key`` (ties by host name); kept per order."""
        with self._lock:
            out = self._sorted.get((key, desc))
            if out is None:
                out = sorted(self.hosts, key=lambda h: h["host"])
                if key != "host" or desc:
                    out.sort(key=lambda h: h[key], reverse=desc)
                self._sorted[(key, desc)] = out
            return out


def _score_bucket(x: float) -> int:
    # Quarter-octaves: score 1.0 is bucket 0; 0 and negatives (and NaN) share one bucket below.
    if not x > 0 or math.isinf(x):
        return -(10**6) if not x > 0 else 10**6
    return math.floor(math.log2(x) * 4)


def _score_value(b: int) -> float | None:
    if abs(b) == 10**6:
        return 0.0 if b < 0 else None  # an infinite score: no value JSON can carry
    return round(2 ** (b / 4), 6)


def _host_row(host: str, c: list[int]) -> dict:
    n = len(STATUSES)
    row: dict = {"host": host, "pages": sum(c[:n])}
    row.update(zip(STATUSES, c[:n]))
    row["failing"] = c[_RETRY] + c[_GONE]
    row["retrying"], row["retries"] = c[n], c[n + 1]
    return row


class Scans:
    """The scan of the latest generations asked for, run in a background thread, one at a
    time per generation; a request waits for it up to its own bound, then shows what the
    manifest alone gives.  Keeps the scans of the last two generations seen."""

    def __init__(self, db, max_hosts: int) -> None:
        self.db, self.max_hosts = db, max_hosts
        self._lock = threading.Lock()
        self._by_gen: dict[int, dict] = {}

    def get(self, r: Reader, wait: float) -> Scan | None:
        """The scan of ``r``'s generation, or None when it is not done within ``wait`` s."""
        with self._lock:
            slot = self._by_gen.get(r.generation)
            if slot is None:
                # Its own reader of the same manifest: the request's reader closes with the request.
                try:
                    mine = Reader.of_sections(self.db, r.manifest, range(r.sections.k), cache_mb=4)
                except FileNotFoundError:  # two commits since the request began: its files are gone
                    raise WebDBError(f"generation {r.generation} was replaced during the request; reload") from None
                slot = self._by_gen[r.generation] = {"done": threading.Event(), "scan": None, "error": None}
                for g in sorted(self._by_gen)[:-2]:
                    del self._by_gen[g]
                threading.Thread(target=self._run, args=(slot, mine), daemon=True).start()
        if not slot["done"].wait(wait):
            return None
        if slot["error"] is not None:
            raise slot["error"]
        return slot["scan"]

    def _run(self, slot: dict, r: Reader) -> None:
        try:
            slot["scan"] = Scan(r, self.max_hosts)
        except Exception as e:  # reported to every request that waits on it
            slot["error"] = e
        finally:
            r.close()
            slot["done"].set()


def overview(r: Reader, scan: Scan | None) -> dict:
    """The numbers of ``webdb read --stats --json`` (``stats``; without the scan's figures
    while it runs), with the score and fetch-interval histograms."""
    out: dict = {"generation": r.generation, "scan": "done" if scan else "running"}
    if scan is not None:
        out["stats"] = scan.stats
        out["score_histogram"] = scan.score_hist
        out["interval_histogram_days"] = scan.interval_hist
    else:
        out["stats"] = stats(r, 0, progress=False, scan=False)
    return out


def rounds(r: Reader) -> dict:
    """One row per generation from the committed manifest's ``rounds`` (webdb.core.manifest); for a
    db whose manifests predate them, the rows the manifests present still give."""
    from webdb.core.manifest import round_row

    m = r.manifest
    rows = m.rounds
    if not (isinstance(rows, list) and rows and all(isinstance(x, dict) for x in rows)) or (
        rows[-1].get("generation") != m.generation
    ):
        rows = [round_row(m)]
    out = []
    prev = None
    for row in rows:
        row = dict(row)
        if prev is not None and row.get("committed") and prev.get("committed"):
            row["since_previous"] = round(row["committed"] - prev["committed"], 3)
        else:
            row["since_previous"] = None
        out.append(row)
        prev = row
    return {"generation": r.generation, "statuses": STATUSES, "rounds": out}


def hosts(scan: Scan, sort: str, desc: bool, page_no: int, per_page: int) -> dict:
    rows = scan.hosts_sorted(sort, desc)
    start = (page_no - 1) * per_page
    return {
        "generation": scan.generation,
        "columns": HOST_COLUMNS,
        "sort": sort,
        "order": "desc" if desc else "asc",
        "page": page_no,
        "per_page": per_page,
        "hosts_total": len(rows),
        "pages_total": max(1, -(-len(rows) // per_page)),
        "hosts": rows[start : start + per_page],
    }


def page_record(p: Page) -> dict:
    return {
        "url": p.url,
        "md5": p.md5.hex(),
        "status": Status(p.status).name.lower(),
        "fetch_time": p.fetch_time,
        "next_fetch": p.next_fetch,
        "retries": p.retries,
        "fetch_interval": p.fetch_interval,
        "num_outlinks": p.num_outlinks,
        "score": p.score,
        "next_score": p.next_score,
        "meta": p.meta,
    }


def _window(it, offset: int, limit: int) -> tuple[list, bool]:
    """Items offset..offset+limit of ``it`` and whether more follow (reads one past)."""
    got = list(itertools.islice(it, offset, offset + limit + 1))
    return got[:limit], len(got) > limit


SOURCES_SHOWN = 3  # pages of an inlink's source md5 listed (duplicates share one md5)


def page(r: Reader, url: str, in_offset: int, out_offset: int, limit: int) -> dict | None:
    """``url``'s record, a window of its inlinks (anchor texts, the pages whose content is the
    source md5) and of its outlinks, and the next URLs in key order.  None when not stored."""
    p = r.get_page(url)
    if p is None:
        return None
    inl, in_more = _window(r.inlinks(url), in_offset, limit)
    outl, out_more = _window(r.outlinks(p.md5), out_offset, limit)
    inlinks = []
    for lk in inl:
        sources = [s.url for s in itertools.islice(r.get_pages(lk.from_id), SOURCES_SHOWN)]
        inlinks.append({"from_id": lk.from_id.hex(), "from_urls": sources, "anchor": lk.anchor})
    outlinks = [{"url": lk.url, "anchor": lk.anchor, "target_has_outlink": lk.target_has_outlink} for lk in outl]
    nxt = [k.decode("utf-8", "replace") for k, _ in itertools.islice(r.items("pages_by_url", url.encode() + b"\0"), 5)]
    return {
        "generation": r.generation,
        "page": page_record(p),
        "inlinks": inlinks,
        "inlinks_offset": in_offset,
        "inlinks_more": in_more,
        "outlinks": outlinks,
        "outlinks_offset": out_offset,
        "outlinks_more": out_more,
        "limit": limit,
        "next_urls": nxt,
    }


def search(r: Reader, prefix: str, after: str | None, limit: int) -> dict:
    """Stored URLs starting with ``prefix`` (after the URL ``after``, when given), at most
    ``limit``; ``next`` is the cursor of the following window (None at the end)."""
    pb = prefix.encode("utf-8", "surrogatepass")
    if after is not None:
        validate_url(after)
        if not after.startswith(prefix):
            raise BadInput(f"after={after!r:.200}: does not start with q={prefix!r:.200}")
    start = after.encode() + b"\0" if after is not None else pb
    urls: list[str] = []
    more = False
    for k, _ in r.items("pages_by_url", start):
        if not k.startswith(pb):
            break
        if len(urls) == limit:
            more = True
            break
        urls.append(k.decode("utf-8", "replace"))
    return {"generation": r.generation, "q": prefix, "urls": urls, "next": urls[-1] if more else None}


def chart_data(view: str, data: dict) -> dict:
    """What the page's script draws (the browser reads it from a JSON data block)."""
    return _CHARTS[view](data)


def _rounds_chart(d: dict) -> dict:
    rows = d["rounds"]
    return {
        "x": [row["generation"] for row in rows],
        "series": {
            "pages": [row["pages"] for row in rows],
            "links": [row["links"] for row in rows],
            **{s: [row["status"].get(s, 0) for row in rows] for s in d["statuses"]},
        },
        "bytes": [row["bytes"] for row in rows],
    }


def _overview_chart(d: dict) -> dict:
    return {"score": d.get("score_histogram", []), "interval": d.get("interval_histogram_days", [])}


_CHARTS = {"rounds": _rounds_chart, "overview": _overview_chart}
