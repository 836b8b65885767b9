"""What a fetched page says beyond its links: the fetcher's last step for each FETCHED response.

``parse_fetched(rec, entry, settings, www)`` parses the content: a sitemap (an entry whose page
carries ``meta["sitemap"]``) with ``fetchlist.sitemaps.parse_sitemap``, anything else with
``fetchlist.parse.parse``.  ``finish_record(rec, settings, robots_sitemaps, www)`` then

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
from fetchlist.sitemaps import RobotsSitemaps, parse_sitemap, sitemap_level
from webdb import Status

__all__ = ["content_limit", "finish_record", "link_canonical", "parse_fetched"]


def content_limit(entry: FetchEntry, settings: dict) -> int:
    """Bytes of the body the fetcher keeps: ``sitemap_max_bytes`` for a sitemap (its file may be
    gzip, decompressed later under the same bound), else ``max_content``."""
    if settings["sitemaps"] and entry.page is not None and sitemap_level(entry.page.meta):
        return max(int(settings["max_content"]), int(settings["sitemap_max_bytes"]))
    return int(settings["max_content"])


def parse_fetched(rec: FetchRecord, entry: FetchEntry, settings: dict, www: WwwRules | None) -> ParseResult:
    """The parse of ``rec.content`` (a FETCHED record): as a sitemap or as a page."""
    s = settings
    level = sitemap_level(entry.page.meta) if entry.page is not None and s["sitemaps"] else 0
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
    sm = parse_sitemap(
        rec.url,
        rec.content or b"",
        rec.headers.get("content-type"),
        level=level,
        max_depth=int(s["sitemap_max_depth"]),
        max_bytes=int(s["sitemap_max_bytes"]),
        max_urls=int(s["sitemap_max_urls"]),
        max_sitemaps=int(s["sitemap_max_sitemaps"]),
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


def finish_record(
    rec: FetchRecord, settings: dict, robots_sitemaps: RobotsSitemaps | None, www: WwwRules | None = None
) -> None:
    """Steps 1–3 of the module docstring, applied to ``rec`` in place (a FETCHED, parsed record)."""
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
        return
    if robots_sitemaps is not None and settings["sitemaps"]:
        p.sitemaps = p.sitemaps + [u for u in robots_sitemaps.take(rec.url) if u not in p.sitemaps]
