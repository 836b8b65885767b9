"""What a fetched page says beyond its links: the fetcher's last step for each FETCHED response.

``parse_fetched(rec, settings, www)`` parses the content: a sitemap (``rec.sitemap_level``, set
from the fetchlist entry by ``sitemap_level_of``) with ``fetchlist.sitemaps.parse_sitemap``,
anything else with ``fetchlist.parse.parse``.  ``finish_record(rec, settings, www)`` then does
steps 1 and 2 below, and ``add_robots_sitemaps(rec, settings, robots_sitemaps)`` step 3.  The
first two are functions of the record alone, run where the page is parsed (a fetch worker
process, ``fetchlist.workers``); the third needs the fetcher's robots.txt state and runs in the
fetcher.

1. takes the canonical URL from the HTTP ``Link: <…>; rel="canonical"`` header when there is
   one (it wins over the HTML ``<link rel="canonical">``, and also serves non-HTML content);
2. turns a meta refresh of at most ``meta_refresh_max_delay`` seconds into a redirect, as Nutch
   does: status REDIRECT_PERM for a delay of 0, REDIRECT_TEMP otherwise, ``redirect`` = the
   normalized target, ``http_status`` kept (a 200 with a REDIRECT_* status is a meta refresh).
   Like an HTTP redirect it is not followed: the update adds the target as a page, which is
   fetched in a later round under the same robots.txt rules and address policy, one hop per
   round.  Like an HTTP redirect it has no content of its own in the segment (no WARC
   records, no parse record);
3. attaches the ``Sitemap:`` lines of the site's robots.txt, read earlier in this fetch run
   (``RobotsSitemaps``), to the parse record of the site's first parsed page.

Cost: for an HTML page, a look at the children of ``<head>`` (in ``parse``) and one
dict lookup; a sitemap costs one streaming XML pass (``fetchlist.sitemaps``).
"""

from __future__ import annotations

from requests.utils import parse_header_links

from fetchlist.normalize import WwwRules, normalize
from fetchlist.parse import ParseResult, parse
from fetchlist.segment import FetchEntry, FetchRecord
from fetchlist.sitemaps import RobotsSitemaps, child_quota, parse_sitemap, sitemap_level, sitemap_quota
from webdb import Status

__all__ = [
    "add_robots_sitemaps",
    "content_limit",
    "finish_record",
    "link_canonical",
    "parse_fetched",
    "sitemap_level_of",
    "sitemap_quota_of",
    "tree_quota",
]


def content_limit(entry: FetchEntry, settings: dict) -> int:
    """Bytes of the body the fetcher keeps: ``sitemap_max_bytes`` for a sitemap (its file may be
    gzip, decompressed later under the same bound), else ``max_content``."""
    if settings["sitemaps"] and entry.page is not None and sitemap_level(entry.page.meta):
        return max(int(settings["max_content"]), int(settings["sitemap_max_bytes"]))
    return int(settings["max_content"])


def sitemap_level_of(entry: FetchEntry, settings: dict) -> int:
    """The sitemap level of ``entry``'s page (0: a page to parse as a page)."""
    return sitemap_level(entry.page.meta) if entry.page is not None and settings["sitemaps"] else 0


def sitemap_quota_of(entry: FetchEntry) -> tuple[int, int] | None:
    """The share of its sitemap tree ``entry``'s page carries, if any (``fetchlist.sitemaps``)."""
    return sitemap_quota(entry.page.meta) if entry.page is not None else None


def tree_quota(settings: dict) -> tuple[int, int]:
    """(URLs, sitemaps) one whole sitemap tree may give: that of a seed or of robots.txt."""
    return int(settings["sitemap_tree_max_urls"]), int(settings["sitemap_tree_max_sitemaps"])


def parse_fetched(rec: FetchRecord, settings: dict, www: WwwRules | None) -> ParseResult:
    """The parse of ``rec.content`` (a FETCHED record): as a sitemap (``rec.sitemap_level``) or as
    a page."""
    s = settings
    level = rec.sitemap_level
    if not level:
        return parse(
            rec.url,
            rec.content,
            rec.headers.get("content-type"),
            robots_header=rec.headers.get("x-robots-tag"),
            robots_agent=s["robots_agent"],
            max_outlinks=int(s["max_outlinks"]),
            max_anchor=int(s["max_anchor"]),
            max_text=int(s["max_text"]),
            max_parse=int(s["max_parse"]),
            www=www,
        )
    quota = rec.sitemap_quota or tree_quota(s)
    per_file = int(s["sitemap_max_urls"])
    url_cap = "sitemap_max_urls" if per_file <= quota[0] else "this sitemap's share of sitemap_tree_max_urls"
    sm = parse_sitemap(
        rec.url,
        rec.content or b"",
        rec.headers.get("content-type"),
        level=level,
        max_depth=int(s["sitemap_max_depth"]),
        max_bytes=int(s["sitemap_max_bytes"]),
        max_urls=min(per_file, quota[0]),
        url_cap=url_cap,
        max_sitemaps=min(int(s["sitemap_max_sitemaps"]), quota[1]),
        max_age=float(s["sitemap_max_age"]),
        now=rec.fetch_time,
        www=www,
    )
    return ParseResult(
        url=rec.url,
        md5=rec.md5 or b"\0" * 16,
        base=normalize(rec.url) or "",
        error=sm.error,
        sitemaps=sm.sitemaps,
        sitemap_urls=sm.urls,
        sitemap_quota=child_quota(quota, len(sm.sitemaps)) if sm.sitemaps else None,
    )


def link_canonical(raw_headers: list[tuple[str, str]] | None, url: str, www: WwwRules | None = None) -> str | None:
    """The normalized target of the first ``rel="canonical"`` of the ``Link`` headers, or None."""
    for name, value in raw_headers or ():
        if name.lower() != "link" or len(value) > 8192:
            continue
        for link in parse_header_links(value):
            if "canonical" in str(link.get("rel", "")).lower().split():
                target = normalize(link.get("url", ""), url, www=www)
                if target is not None:
                    return target
    return None


def finish_record(rec: FetchRecord, settings: dict, www: WwwRules | None = None) -> None:
    """Steps 1 and 2 of the module docstring, applied to ``rec`` in place (a FETCHED, parsed
    record)."""
    p = rec.parse
    if rec.status != Status.FETCHED or p is None:
        return
    header = link_canonical(rec.raw_headers, rec.url, www)
    if header is not None:
        p.canonical = header
    if settings["meta_refresh"] and p.refresh and p.refresh_delay <= float(settings["meta_refresh_max_delay"]):
        rec.status = Status.REDIRECT_PERM if p.refresh_delay == 0 else Status.REDIRECT_TEMP
        rec.redirect = p.refresh
        rec.content = rec.md5 = rec.parse = None
        rec.truncated = False


def add_robots_sitemaps(rec: FetchRecord, settings: dict, robots_sitemaps: RobotsSitemaps | None) -> None:
    """Step 3 of the module docstring: the site's robots.txt ``Sitemap:`` lines not yet handed
    on go with ``rec``'s parse record (a FETCHED, parsed page that is no sitemap: a sitemap's
    record lists its own children), each with an even share of a whole tree's quota."""
    p = rec.parse
    if rec.status != Status.FETCHED or p is None or rec.sitemap_level:
        return
    if robots_sitemaps is not None and settings["sitemaps"]:
        tree = tree_quota(settings)
        found = [u for u in robots_sitemaps.take(rec.url) if u not in p.sitemaps][: tree[1]]
        if found:
            p.sitemaps = p.sitemaps + found
            p.sitemap_quota = child_quota(tree, len(p.sitemaps))
