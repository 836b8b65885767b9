"""The numbers of ``webdb read --stats``: counts from the manifests and, with a scan, the
score, next score and fetch-interval spreads, the retry histogram and the top hosts.  Shared by
the CLI (``webdb read``, ``webdb demo``) and the dashboard (``webdb serve``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

from webdb.tables.records import Page, Status

__all__ = ["stats"]


def _spread(values: _MinAvgMax) -> dict:
    return {"min": values.lo, "avg": values.total / values.n if values.n else None, "max": values.hi}


class _MinAvgMax:
    __slots__ = ("lo", "hi", "total", "n")

    def __init__(self) -> None:
        self.lo = self.hi = None
        self.total, self.n = 0.0, 0

    def add(self, x: float) -> None:
        self.lo = x if self.lo is None or x < self.lo else self.lo
        self.hi = x if self.hi is None or x > self.hi else self.hi
        self.total += x
        self.n += 1


def stats(
    r, top_hosts: int, progress: bool, scan: bool = True, visit: Callable[[str, Page], None] | None = None
) -> dict:
    """The db's counts (from the manifests) and, with ``scan``, what one read of PagesByURL
    adds: score, next score and fetch interval min/avg/max, the retry histogram, top hosts.

    "fetched" is one number everywhere: pages whose status is FETCHED (their last fetch
    returned content).  Cost without scan: the manifests only; with it: one sequential read
    of PagesByURL.  ``visit(host, page)`` is called on each page of the scan (its host
    name, as top hosts counts it, and its fixed fields; meta is empty): a caller adding its own
    figures reads the table once."""
    from webdb.core.manifest import table_files
    from webdb.tables.records import PAGE_FIXED
    from webdb.util.progress import progress_bar

    m = r.manifest
    st = r.status_counts()
    by_name = {Status(k).name.lower(): v for k, v in sorted(st.items())}
    sections = []
    total_bytes = 0
    for j, tabs in enumerate(m.tables):
        b = sum(size for t in tabs.values() for _, size in table_files(t))
        total_bytes += b
        sections.append(
            {
                "section": j,
                "pages": tabs.get("pages_by_url", {}).get("records", 0),
                "links": tabs.get("links_by_md5", {}).get("records", 0),
                "bytes": b,
                # Levels: the delta runs over each table's base (docs/operations.md).
                "runs": {t: len(e["runs"]) for t, e in tabs.items() if e.get("runs")},
                "status": {
                    Status(int(k)).name.lower(): v for k, v in sorted(m.status[j].items(), key=lambda kv: int(kv[0]))
                },
            }
        )
    out = {
        "generation": r.generation,
        "sections": r.sections.k,
        "pages": r.num_pages,
        "fetched": st.get(int(Status.FETCHED), 0),
        "unfetched": st.get(int(Status.UNFETCHED), 0),
        "links": r.num_links,
        "status": by_name,
        "bytes": total_bytes,
        "by_section": sections,
    }
    if scan:
        hosts: Counter[str] = Counter()
        score, next_score, interval = _MinAvgMax(), _MinAvgMax(), _MinAvgMax()
        retries: Counter[int] = Counter()
        bar = progress_bar(r.num_pages, "scanning pages", "page", enabled=progress, leave=False)
        try:
            for k, v in r.items("pages_by_url"):
                url = k.decode("utf-8", "replace")
                p = Page.decode(url, v[:PAGE_FIXED])  # the fixed fields; meta is not needed
                score.add(p.score)
                next_score.add(p.next_score)
                interval.add(p.fetch_interval)
                retries[p.retries] += 1
                if top_hosts or visit is not None:
                    host = urlsplit(url).hostname or ""
                    hosts[host] += 1
                    if visit is not None:
                        visit(host, p)
                bar.update(1)
        finally:
            bar.close()
        out["score"] = _spread(score)
        out["next_score"] = _spread(next_score)
        out["fetch_interval"] = _spread(interval)
        out["retries"] = {str(n): c for n, c in sorted(retries.items())}
        if top_hosts:
            out["top_hosts"] = hosts.most_common(top_hosts)
    return out
