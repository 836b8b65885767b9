"""Every crawl setting (fetch, robots, parse, filters), with its default and what it means.

In the style of scrapy's ``default_settings``: one flat dict, one comment per setting.
``resolve(**overrides)`` gives the defaults with overrides applied and rejects unknown names.
The database's own settings (block size, fetch schedule, ...) are in ``webdb.core.settings``.
"""

from __future__ import annotations

import math
import os

from webdb import DEFAULT_ANCHOR_MAX
from webdb.errors import BadInput

DEFAULTS: dict[str, object] = {
    # ---- identity ------------------------------------------------------------------------------
    # User-Agent header of every request (robots.txt included).  A real crawl should add a
    # contact URL or address: "mycrawler/1.0 (+https://example.org/crawler)".
    "user_agent": "webdb-crawler/0.1",
    # Product token matched against robots.txt "User-agent:" lines (RFC 9309 §2.2.1).
    "robots_agent": "webdb-crawler",
    # ---- concurrency and politeness --------------------------------------------------------------
    # Fetcher threads, shared by all hosts.  A host never has more than one request in flight.
    "threads": 10,
    # Worker processes that parse the fetched pages and compress their WARC records
    # (fetchlist.workers), so a fetch uses every core; the requests, the politeness and the
    # segment writes stay in the fetcher's process.  None = one per CPU the process may run
    # on; 0 = none: the fetcher's threads parse (one process in all).
    "processes": None,
    # How fetch queues are keyed: "host" (one queue per host name) or "domain" (one per
    # registered domain: www.example.com and img.example.com share a queue and its delay).
    "queue_mode": "host",
    # Seconds between the end of one request to a queue and the start of the next.
    "politeness_delay": 1.0,
    # A robots.txt Crawl-delay raises the politeness delay of its host, up to this many seconds.
    "crawl_delay_cap": 30.0,
    # Consecutive transient failures (timeout, connection error, 5xx, 429) after which the rest
    # of a host's queue is not requested this round but recorded RETRY.  0 = never give up.
    "max_host_errors": 5,
    # ---- requests --------------------------------------------------------------------------------
    # Seconds to wait for a TCP connection.
    "connect_timeout": 10.0,
    # Seconds to wait for each read from the socket.
    "read_timeout": 30.0,
    # Seconds a whole request (connect, status line, headers, body) may take, robots.txt (with
    # its redirects) included; a watchdog cuts a slower one, which counts as a timeout (RETRY,
    # and a transient failure of its host).
    "fetch_timeout": 120.0,
    # Fetch hosts that resolve to private, loopback, link-local, multicast, unspecified,
    # reserved or site-local addresses (or a 6to4 address of one).  Off: such a host (or a
    # redirect to it) is refused after DNS resolution and recorded RETRY without a request,
    # which update leaves the page as it was for.  On only for crawls of your own network
    # (tests, the demo).
    "allow_private_addresses": False,
    # Content bytes kept per page; a longer body is cut there and the record marked truncated.
    "max_content": 1024 * 1024,
    # Headers sent with every request (User-Agent and the conditional headers are added).
    "default_headers": {
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,text/plain;q=0.8,*/*;q=0.5",
        "Accept-Language": "en;q=1.0, *;q=0.5",
        "Connection": "close",
    },
    # Send If-Modified-Since (page.meta["last_modified"]) and If-None-Match (page.meta["etag"]),
    # the server's validators kept from its answer, when refetching a page fetched before; a
    # 304 answer is recorded NOT_MODIFIED.
    "conditional": True,
    # Response headers kept in the fetch output (lowercased names).
    "keep_headers": [
        "content-type",
        "content-length",
        "content-encoding",
        "content-language",
        "last-modified",
        "etag",
        "location",
        "date",
        "expires",
        "cache-control",
        "retry-after",
        "x-robots-tag",
    ],
    # Use HTTP(S)_PROXY / NO_PROXY and REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment
    # (never credentials, ~/.netrc included).  Off: a crawler's traffic does not depend on who runs it.
    "trust_env": False,
    # ---- robots.txt ------------------------------------------------------------------------------
    # Obey robots.txt.  Off only for sites you own.
    "robots_obey": True,
    # Seconds a robots.txt answer (parsed, or 4xx = allow all) is reused by a Fetcher across
    # rounds.  5xx and unreachable answers hold for one round only.
    "robots_ttl": 86400.0,
    # robots.txt bytes read; the rest is ignored (RFC 9309 asks for at least 500 KiB).
    "robots_max_size": 500 * 1024,
    # ---- parse -----------------------------------------------------------------------------------
    # Parse fetched pages in the fetcher and write the parse part of the segment.
    "parse": True,
    # Outlinks kept per page, after normalization and deduplication, in document order.
    "max_outlinks": 100,
    # Anchor text is cut to this many characters (the db's default anchor_max).
    "max_anchor": DEFAULT_ANCHOR_MAX,
    # Plain text kept per page, characters.
    "max_text": 100_000,
    # Content bytes handed to the HTML parser (the rest is not parsed; the md5 covers it all).
    "max_parse": 4 * 1024 * 1024,
    # A page whose <meta http-equiv="refresh"> names another URL after at most this many seconds
    # is recorded as a redirect to it (delay 0: REDIRECT_PERM, else REDIRECT_TEMP), as Nutch
    # does; a longer refresh leaves the page as it is.  meta_refresh false: never.
    "meta_refresh": True,
    "meta_refresh_max_delay": 5,
    # ---- sitemaps (fetchlist.sitemaps) -------------------------------------------------------------
    # Read robots.txt Sitemap: lines (reported with the site's first parsed page, then added to
    # the db by the update) and parse pages marked meta["sitemap"] as sitemaps.
    "sitemaps": True,
    # Bytes of one sitemap kept and parsed: the body as fetched (this replaces max_content for
    # a sitemap) and the XML once a .gz file is decompressed (a gzip bomb stops here).  The
    # protocol's limit is 50 MiB.
    "sitemap_max_bytes": 50 * 1024 * 1024,
    # URLs taken from one sitemap (the protocol's limit); the rest are ignored.
    "sitemap_max_urls": 50_000,
    # Sitemaps taken from one robots.txt, and child sitemaps from one sitemap index.
    "sitemap_max_sitemaps": 50,
    # A sitemap tree (the sitemaps of one robots.txt or seed and every index under them) gives
    # at most this many URLs and sitemaps in all: each index splits its share among what it
    # lists (fetchlist.sitemaps.child_quota), so many index entries cannot multiply the caps.
    "sitemap_tree_max_urls": 1_000_000,
    "sitemap_tree_max_sitemaps": 250,
    # Levels of sitemaps followed: 1 = those named by robots.txt or a seed; 2 = also the
    # sitemaps an index at level 1 lists (the protocol's only nesting).  Deeper ones are ignored.
    "sitemap_max_depth": 2,
    # Skip sitemap URLs whose lastmod is more than this many seconds before the fetch (as
    # StormCrawler's sitemap.filter.hours.since.modified).  0: keep them all.
    "sitemap_max_age": 0,
    # ---- URL rules -------------------------------------------------------------------------------
    # Filter files (fetchlist.filters): paths, or (kind, path) pairs.  Empty: accept all.
    "url_filters": [],
    # www/non-www rules file (fetchlist.normalize.WwwRules); None: no rewriting.
    "www_rules": None,
    # ---- output ----------------------------------------------------------------------------------
    # Progress on stderr: None = a tqdm bar on a terminal, else a line every 10 s
    # (webdb.util.progress); True = always a tqdm bar; False = none.
    "progress": None,
}

_TYPES: dict[str, type | tuple[type, ...]] = {
    "threads": int,
    "max_host_errors": int,
    "max_content": int,
    "robots_max_size": int,
    "max_outlinks": int,
    "max_anchor": int,
    "max_text": int,
    "max_parse": int,
    "politeness_delay": (int, float),
    "crawl_delay_cap": (int, float),
    "connect_timeout": (int, float),
    "read_timeout": (int, float),
    "fetch_timeout": (int, float),
    "robots_ttl": (int, float),
    "meta_refresh_max_delay": (int, float),
    "sitemap_max_bytes": int,
    "sitemap_max_urls": int,
    "sitemap_max_sitemaps": int,
    "sitemap_tree_max_urls": int,
    "sitemap_tree_max_sitemaps": int,
    "sitemap_max_depth": int,
    "sitemap_max_age": (int, float),
}


def resolve(settings: dict | None = None, **overrides: object) -> dict:
    """Defaults, then ``settings``, then ``overrides``; an unknown name or bad value is BadInput."""
    out = dict(DEFAULTS)
    for src in (settings or {}), overrides:
        for k, v in src.items():
            if k not in DEFAULTS:
                raise BadInput(f"unknown crawl setting {k!r} (known: {', '.join(sorted(DEFAULTS))})")
            out[k] = v
    for k, t in _TYPES.items():
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, t) or not math.isfinite(v) or v < 0:
            raise BadInput(f"crawl setting {k} must be a number >= 0, not {v!r}")
    for k in (
        "conditional",
        "trust_env",
        "robots_obey",
        "parse",
        "allow_private_addresses",
        "meta_refresh",
        "sitemaps",
    ):
        if not isinstance(out[k], bool):
            raise BadInput(f"crawl setting {k} must be true or false, not {out[k]!r}")
    procs = out["processes"]
    if procs is not None and (isinstance(procs, bool) or not isinstance(procs, int) or not 0 <= procs <= 1024):
        raise BadInput(f"crawl setting processes must be a whole number from 0 to 1024 or null, not {procs!r:.100}")
    if out["progress"] is not None and not isinstance(out["progress"], bool):
        raise BadInput(f"crawl setting progress must be true, false or null, not {out['progress']!r}")
    for k in ("user_agent", "robots_agent"):
        if not isinstance(out[k], str) or not out[k].strip() or not out[k].isprintable():
            raise BadInput(f"crawl setting {k} must be a non-empty line of printable text, not {out[k]!r:.100}")
    headers = out["default_headers"]
    if not isinstance(headers, dict) or not all(
        isinstance(n, str) and isinstance(v, str) and n.isprintable() and v.isprintable() and n.strip()
        for n, v in headers.items()
    ):
        raise BadInput(
            f"crawl setting default_headers must map header names to printable strings, not {headers!r:.100}"
        )
    keep = out["keep_headers"]
    if not isinstance(keep, list) or not all(isinstance(h, str) for h in keep):
        raise BadInput(f"crawl setting keep_headers must be a list of header names, not {keep!r:.100}")
    if not isinstance(out["url_filters"], list):
        raise BadInput(f"crawl setting url_filters must be a list of files, not {out['url_filters']!r:.100}")
    if out["www_rules"] is not None and not isinstance(out["www_rules"], (str, os.PathLike)):
        raise BadInput(f"crawl setting www_rules must be a file name or null, not {out['www_rules']!r:.100}")
    if out["threads"] < 1:
        raise BadInput(f"crawl setting threads must be at least 1, not {out['threads']!r}")
    if out["sitemap_max_depth"] < 1:
        raise BadInput(f"crawl setting sitemap_max_depth must be at least 1, not {out['sitemap_max_depth']!r}")
    if out["queue_mode"] not in ("host", "domain"):
        raise BadInput(f"crawl setting queue_mode must be 'host' or 'domain', not {out['queue_mode']!r}")
    return out
