"""Fetch results and the fetch schedule: how one fetch outcome changes a stored page.

Pure functions, applied inside the PagesByURL stage of the cascade (so an update needs no
read-before-write) and by the reference model.  Semantics: docs/semantics.md, *Fetch results*.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from webdb.errors import BadInput
from webdb.tables.records import DAY, DEFAULT_INTERVAL, NEVER, Page, Status

__all__ = ["FetchResult", "Schedule", "apply_fetch", "apply_lastmod"]


@dataclass(slots=True)
class FetchResult:
    """The outcome of one fetch of ``url`` at ``fetch_time`` (seconds since the epoch)."""

    url: str
    status: int
    fetch_time: int
    md5: bytes | None = None
    num_outlinks: int = 0
    meta: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """Fetch-schedule settings.  These defaults are the db's (``webdb.core.settings.Settings``
    takes them from here); what each one means is said there."""

    # Fetch interval of a page that a fetch result creates (the db's ``default_interval``).
    default_interval: int = DEFAULT_INTERVAL
    retry_delay: int = DAY
    max_retries: int = 3
    adaptive: bool = False
    min_interval: int = DAY
    max_interval: int = 365 * DAY
    inc_rate: float = 0.2
    dec_rate: float = 0.2

    def _grow(self, iv: int) -> int:
        return min(self.max_interval, max(self.min_interval, int(iv * (1 + self.inc_rate))))

    def _shrink(self, iv: int) -> int:
        return min(self.max_interval, max(self.min_interval, int(iv * (1 - self.dec_rate))))


def apply_fetch(page: Page | None, r: FetchResult, s: Schedule) -> Page:
    """Return the page after fetch result ``r`` (``page`` is not modified)."""
    if page is not None:
        p = replace(page, meta=dict(page.meta))
    else:
        p = Page(r.url, fetch_interval=s.default_interval)
    t, iv = r.fetch_time, p.fetch_interval
    st = r.status
    if st == Status.FETCHED:
        if r.md5 is None or len(r.md5) != 16:
            raise BadInput(f"fetch result for {r.url!r:.200} has status FETCHED but no 16-byte md5")
        if s.adaptive:
            iv = s._shrink(iv) if r.md5 != p.md5 else s._grow(iv)
        p.md5, p.status, p.fetch_time, p.retries, p.num_outlinks = r.md5, Status.FETCHED, t, 0, r.num_outlinks
        p.fetch_interval, p.next_fetch = iv, t + iv
    elif st == Status.NOT_MODIFIED:
        if s.adaptive:
            iv = s._grow(iv)
        p.status, p.fetch_time, p.retries, p.fetch_interval, p.next_fetch = st, t, 0, iv, t + iv
    elif st == Status.RETRY:
        p.retries += 1
        if p.retries > s.max_retries:
            p.status, p.next_fetch = Status.GONE, NEVER
        else:
            p.status, p.next_fetch = Status.RETRY, t + s.retry_delay
    elif st == Status.GONE:
        p.status, p.fetch_time, p.next_fetch = Status.GONE, t, NEVER
    elif st in (Status.REDIRECT_TEMP, Status.REDIRECT_PERM):
        p.status, p.fetch_time, p.retries, p.next_fetch = st, t, 0, t + iv
    else:
        raise BadInput(f"fetch result for {r.url!r:.200} has status {st!r}, which no fetch produces")
    if r.meta:
        p.meta.update(r.meta)
    return p


def apply_lastmod(page: Page, lastmod: int, due: int) -> Page:
    """Return the page after the hint "it changed at ``lastmod``" (a sitemap's lastmod): a page
    last fetched (FETCHED or NOT_MODIFIED) before ``lastmod`` and due after ``due`` becomes due at
    ``due``; any other page is returned as it is."""
    if page.status in (Status.FETCHED, Status.NOT_MODIFIED) and page.fetch_time < lastmod and page.next_fetch > due:
        return replace(page, meta=dict(page.meta), next_fetch=due)
    return page
