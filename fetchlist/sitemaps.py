"""Sitemaps (sitemaps.org protocol 0.9): XML urlsets, sitemap indexes, RSS 2.0 and Atom 1.0 feeds,
plain-text lists, gzip.

How sitemaps enter a crawl (docs/crawl.md, *Sitemaps*):

1. **Discovery.**  The ``Sitemap:`` lines of a site's robots.txt (at most ``max_sitemaps``) are
   reported with the first page of that site the fetcher parses after reading the robots.txt
   (``RobotsSitemaps``), in the parse record's ``sitemaps``.  A seed line may also name one:
   ``http://example.com/sitemap.xml	sitemap=1``.
2. **Into the db.**  The update adds each reported sitemap as a page with ``meta["sitemap"]`` =
   its level (1 for robots.txt and seeds, the index's level + 1 for a sitemap an index lists),
   if it is not present.  Generate then selects it like any page.
3. **Fetched and parsed.**  The fetcher parses a FETCHED page whose fetchlist entry carries
   ``meta["sitemap"]`` with ``parse_sitemap`` instead of the HTML parser: a urlset gives the
   parse record's ``sitemap_urls`` (``[url, lastmod, changefreq, priority]``), an index gives
   ``sitemaps`` (its children, followed while the level is below ``sitemap_max_depth``).  A
   feed named as a sitemap (the protocol allows RSS 2.0 and Atom 1.0) gives ``sitemap_urls``
   too: each RSS ``<item>``'s ``<link>`` with its ``<pubDate>`` as lastmod, each Atom
   ``<entry>``'s ``<link href>`` (no ``rel`` or ``rel="alternate"``) with its ``<updated>``.
4. **Applied.**  The update adds every sitemap URL not yet in the db as a new page, due at once,
   with ``score = new_score × 2 × priority`` (priority 0.5, the protocol's default, gives
   ``new_score``) and ``fetch_interval`` from ``changefreq`` (``CHANGEFREQ``); a page already
   in the db and last fetched before its ``lastmod`` becomes due at once (``apply_lastmod``).

Bounds (hostile sitemaps are input like any other): at most ``max_bytes`` bytes of XML or text
are read, a gzip file decompressed to no more than that (a gzip bomb stops there); at most
``max_urls`` URLs and ``max_sitemaps`` child sitemaps per file, and per tree (one robots.txt
or seed and every index under it) the crawl's ``sitemap_tree_max_*``: each sitemap carries its
share of the tree (``QUOTA_META``), an index splits its share among its children
(``child_quota``) and is parsed with caps no larger than it; entities are never expanded, no
DTD is loaded and nothing is fetched by the XML parser (lxml with ``resolve_entities=False``,
``load_dtd=False``, ``no_network=True``); a broken document gives what was read before the
break and an ``error``.  Loops end by themselves: a sitemap already in the db is not added
again, and levels deeper than ``sitemap_max_depth`` are not followed.  A URL or child sitemap
must be http(s), normalize, and belong to the sitemap's own registered domain (the protocol's
"same host" rule, widened to the registered domain so that ``www.example.com``'s robots.txt
may name ``static.example.com/sitemap.xml``).

Cost: one streaming pass (lxml ``iterparse``, each element cleared after use), memory
O(``max_urls``) for the result; per URL one ``normalize`` call.
"""

from __future__ import annotations

import datetime
import email.utils
import io
import math
import threading
import zlib
from dataclasses import dataclass, field

import lxml.etree

from fetchlist.normalize import WwwRules, host_of, normalize, registered_domain
from fetchlist.robots import RobotsRules, robots_url
from webdb import DAY

__all__ = [
    "CHANGEFREQ",
    "QUOTA_META",
    "SITEMAP_META",
    "RobotsSitemaps",
    "SitemapResult",
    "SitemapUrl",
    "child_quota",
    "gunzip_limited",
    "parse_lastmod",
    "parse_sitemap",
    "sitemap_level",
    "sitemap_quota",
]

# Page meta key marking a sitemap in the db; its value is the sitemap's level ("1", "2", ...).
SITEMAP_META = "sitemap"
# Page meta key of a sitemap's share of its tree: "URLS SITEMAPS", what it and the sitemaps it
# lists may give in all (``child_quota``).  Absent: the whole tree's (a seed, robots.txt).
QUOTA_META = "sitemap_quota"

# changefreq → fetch interval of a page a sitemap adds, seconds.
CHANGEFREQ: dict[str, int] = {
    "always": 3600,
    "hourly": 3600,
    "daily": DAY,
    "weekly": 7 * DAY,
    "monthly": 30 * DAY,
    "yearly": 365 * DAY,
    "never": 365 * DAY,
}

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class SitemapUrl:
    """One ``<url>`` of a urlset: its normalized ``loc`` and the optional hints.  ``lastmod``
    is seconds since the epoch, ``changefreq`` a key of ``CHANGEFREQ``, ``priority`` in [0, 1]."""

    url: str
    lastmod: int | None = None
    changefreq: str | None = None
    priority: float | None = None

    def to_json(self) -> list:
        return [self.url, self.lastmod, self.changefreq, self.priority]


@dataclass(slots=True)
class SitemapResult:
    """What one sitemap file gave: ``kind`` ("urlset", "sitemapindex", "rss", "atom", "text" or "" when
    nothing was recognised), its URLs, its child sitemaps, and what went wrong (``error``)."""

    kind: str = ""
    urls: list[SitemapUrl] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    skipped: int = 0
    error: str | None = None


def sitemap_level(meta: dict[str, str] | None) -> int:
    """The level of a page whose meta is ``meta``: 0 for a page that is not a sitemap."""
    v = (meta or {}).get(SITEMAP_META, "")
    return int(v) if v.isascii() and v.isdigit() and len(v) < 4 and int(v) > 0 else 0


def sitemap_quota(meta: dict[str, str] | None) -> tuple[int, int] | None:
    """(URLs, sitemaps) of a sitemap's ``meta[QUOTA_META]``, or None when it has none."""
    parts = (meta or {}).get(QUOTA_META, "").split()
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) < 16 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def child_quota(quota: tuple[int, int], children: int) -> tuple[int, int]:
    """The share of each of ``children`` sitemaps listed by one with ``quota`` (URLs, sitemaps):
    the URLs split evenly, and the sitemaps left once the children are counted, so that a whole
    tree (one robots.txt or seed, every index under it) gives at most the root's quota."""
    urls, sitemaps = quota
    return urls // children, max(0, sitemaps - children) // children


def gunzip_limited(data: bytes, limit: int) -> tuple[bytes, str | None]:
    """``data`` decompressed (gzip, several members allowed), at most ``limit`` bytes; with an
    error message when the output was cut at ``limit`` or the stream is damaged."""
    out = bytearray()
    d = zlib.decompressobj(wbits=31)
    buf = data
    while buf:
        try:
            chunk = d.decompress(buf, limit + 1 - len(out))
        except zlib.error as e:
            return bytes(out[:limit]), f"bad gzip data: {e}"
        out += chunk
        if len(out) > limit:
            return bytes(out[:limit]), f"more than {limit} bytes once decompressed; the rest is ignored"
        if d.eof:
            buf = d.unused_data
            if not buf.startswith(_GZIP_MAGIC):
                break
            d = zlib.decompressobj(wbits=31)
        else:
            buf = d.unconsumed_tail
            if not buf and not chunk:
                break
    if not d.eof and not out:
        return b"", "truncated gzip data"
    return bytes(out), None if d.eof else "truncated gzip data"


def parse_lastmod(text: str) -> int | None:
    """A W3C datetime (``2024-05-01``, ``2024-05-01T10:00:00+02:00``, ``…Z``) as seconds since
    the epoch (UTC when no zone is given), or None when it is not one."""
    t = text.strip()
    if not t or len(t) > 40:
        return None
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        if len(t) in (4, 7):  # YYYY, YYYY-MM
            d = datetime.datetime.strptime(t, "%Y" if len(t) == 4 else "%Y-%m")
        else:
            d = datetime.datetime.fromisoformat(t)
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    try:
        s = int(d.timestamp())
    except (OverflowError, OSError, ValueError):
        return None
    return s if 0 <= s <= 253402300799 else None


def _priority(text: str) -> float | None:
    try:
        p = float(text.strip())
    except ValueError:
        return None
    return p if math.isfinite(p) and 0.0 <= p <= 1.0 else None


class _Collector:
    """Accepts the URLs of one sitemap: normalized, http(s), in the sitemap's registered domain,
    deduplicated, at most the caps; counts the rest in ``skipped``."""

    def __init__(
        self, url: str, res: SitemapResult, max_urls: int, max_sitemaps: int, follow: bool, www, url_cap: str
    ) -> None:
        self.res, self.max_urls, self.max_sitemaps, self.follow, self.www = res, max_urls, max_sitemaps, follow, www
        self.url_cap = url_cap
        self.domain = registered_domain(host_of(url) or "")
        self.seen: set[str] = set()

    def _accept(self, loc: str | None) -> str | None:
        u = normalize(loc.strip(), www=self.www) if loc and len(loc) <= 4096 else None
        if u is None or u in self.seen or registered_domain(host_of(u) or "") != self.domain:
            self.res.skipped += 1
            return None
        self.seen.add(u)
        return u

    @property
    def full(self) -> bool:
        return len(self.res.urls) >= self.max_urls

    def cut_short(self) -> None:
        """Record that the sitemap held more URLs than the cap, naming the cap."""
        self.res.error = self.res.error or f"more URLs than {self.url_cap} ({self.max_urls}); the rest is ignored"

    def url(self, loc, lastmod=None, changefreq=None, priority=None, max_age_before=None, modified=None) -> None:
        """Take one URL (``lastmod`` a W3C datetime, or ``modified`` already in seconds)."""
        if self.full:
            self.res.skipped += 1
            self.cut_short()
            return
        u = self._accept(loc)
        if u is None:
            return
        lm = parse_lastmod(lastmod) if lastmod else modified
        if max_age_before is not None and lm is not None and lm < max_age_before:
            self.res.skipped += 1
            return
        cf = changefreq.strip().lower() if changefreq else None
        self.res.urls.append(
            SitemapUrl(u, lm, cf if cf in CHANGEFREQ else None, _priority(priority) if priority else None)
        )

    def sitemap(self, loc) -> None:
        if not self.follow or len(self.res.sitemaps) >= self.max_sitemaps:
            self.res.skipped += 1
            return
        u = self._accept(loc)
        if u is not None:
            self.res.sitemaps.append(u)


def parse_sitemap(
    url: str,
    content: bytes,
    content_type: str | None = None,
    *,
    level: int = 1,
    max_depth: int = 2,
    max_bytes: int = 50 * 1024 * 1024,
    max_urls: int = 50_000,
    max_sitemaps: int = 50,
    max_age: float = 0.0,
    now: float | None = None,
    www: WwwRules | None = None,
    url_cap: str = "sitemap_max_urls",
) -> SitemapResult:
    """Parse the sitemap ``content`` fetched from ``url`` (see the module docstring).  Never
    raises.  ``level``: the sitemap's own level; an index at ``level >= max_depth`` gives no
    children.  ``max_age`` (seconds, 0 = off): URLs whose lastmod is older than ``now -
    max_age`` are skipped.  ``url_cap`` names the limit ``max_urls`` stands for in the message
    of a sitemap cut short (the per-file setting or the tree's share)."""
    res = SitemapResult()
    try:
        args = (level, max_depth, max_bytes, max_urls, max_sitemaps, max_age, now, www, url_cap)
        _parse(res, url, bytes(content), content_type, *args)
    except Exception as e:  # the contract is "never raises": report what went wrong
        res.error = f"{type(e).__name__}: {e}"[:500]
    return res


def _parse(res, url, data, content_type, *args):
    level, max_depth, max_bytes, max_urls, max_sitemaps, max_age, now, www, url_cap = args
    if data.startswith(_GZIP_MAGIC):
        data, res.error = gunzip_limited(data, max_bytes)
    elif len(data) > max_bytes:
        data, res.error = data[:max_bytes], f"more than {max_bytes} bytes; the rest is ignored"
    follow = level < max_depth
    col = _Collector(url, res, max_urls, max_sitemaps, follow, www, url_cap)
    before = None
    if max_age > 0:
        before = int((now if now is not None else datetime.datetime.now().timestamp()) - max_age)
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if not head.startswith(b"<") and (mime == "text/plain" or head[:8].lower().startswith((b"http://", b"https://"))):
        res.kind = "text"
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                col.url(line, max_age_before=before)
        return
    _parse_xml(res, data, col, before)
    if not follow and res.kind == "sitemapindex" and res.skipped and res.error is None:
        res.error = f"sitemap index at level {level} not followed (sitemap_max_depth {max_depth})"


# Root element → (the record element, its depth): sitemaps.org's two formats and the two feed
# formats it accepts as sitemaps (RSS 2.0 <rss><channel><item>, Atom 1.0 <feed><entry>).
_RECORDS = {"urlset": ("url", 2), "sitemapindex": ("sitemap", 2), "rss": ("item", 3), "feed": ("entry", 2)}
_KIND = {"urlset": "urlset", "sitemapindex": "sitemapindex", "rss": "rss", "feed": "atom"}


def _parse_xml(res: SitemapResult, data: bytes, col: _Collector, before: int | None) -> None:
    events = lxml.etree.iterparse(
        io.BytesIO(data),
        events=("start", "end"),
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
        recover=False,
    )
    fields: dict[str, str] = {}
    record, at = "", 0  # the record element's name and depth
    depth = 0
    try:
        for ev, el in events:
            tag = el.tag
            name = lxml.etree.QName(tag).localname if isinstance(tag, str) else ""
            if ev == "start":
                depth += 1
                if depth == 1:
                    if el.getroottree().docinfo.internalDTD is not None:
                        res.error = "a DOCTYPE in a sitemap is refused (its entities are never expanded)"
                        return
                    if name not in _RECORDS:
                        res.error = f"not a sitemap: root element <{name}>"
                        return
                    res.kind, (record, at) = _KIND[name], _RECORDS[name]
                elif depth == at and name == record and record != "sitemap" and col.full:
                    col.cut_short()
                    return
                continue
            depth -= 1
            if depth == at:
                _field(fields, name, el)
            elif depth == at - 1 and name == record:
                _record(res.kind, fields, col, before)
            if depth == at - 1:
                fields.clear()
                el.clear()
                while el.getprevious() is not None:  # keep memory flat: drop finished siblings
                    del el.getparent()[0]
    except lxml.etree.XMLSyntaxError as e:
        msg = f"bad XML: {e}"[:300]
        res.error = f"{res.error}; {msg}" if res.error else msg


def _field(fields: dict[str, str], name: str, el: lxml.etree._Element) -> None:
    """Keep the text of a record's child ``el``; for an Atom ``<link>``, the href of the first
    one that is the entry's own page (no ``rel`` or ``rel="alternate"``)."""
    if name == "link" and el.get("href") is not None:
        if "link" not in fields and el.get("rel", "alternate").strip().lower() == "alternate":
            fields["link"] = el.get("href", "")[:4096]
        return
    fields[name] = (el.text or "")[:4096]


def _record(kind: str, fields: dict[str, str], col: _Collector, before: int | None) -> None:
    """One record of a sitemap or feed, to the collector."""
    if kind == "urlset":
        col.url(
            fields.get("loc"),
            fields.get("lastmod"),
            fields.get("changefreq"),
            fields.get("priority"),
            max_age_before=before,
        )
    elif kind == "sitemapindex":
        col.sitemap(fields.get("loc"))
    elif kind == "rss":
        col.url(fields.get("link"), modified=_rfc822(fields.get("pubDate")), max_age_before=before)
    else:  # atom: <updated> (1.0) or <modified> (0.3), W3C datetimes
        col.url(fields.get("link"), fields.get("updated") or fields.get("modified"), max_age_before=before)


def _rfc822(text: str | None) -> int | None:
    """An RSS ``pubDate`` (RFC 822: ``Wed, 01 May 2024 10:00:00 GMT``) as seconds since the
    epoch, or None when it is not one."""
    if not text or len(text) > 64:
        return None
    try:
        d = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    try:
        seconds = int(d.timestamp())
    except (OverflowError, OSError, ValueError):
        return None
    return seconds if 0 <= seconds <= 253402300799 else None


class RobotsSitemaps:
    """The ``Sitemap:`` lines of robots.txt files the fetcher read, waiting for the first parsed
    page of their site to carry them into the segment.  Thread-safe."""

    def __init__(self, max_sitemaps: int = 50) -> None:
        self.max_sitemaps = max_sitemaps
        self._pending: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def found(self, url: str, rules: RobotsRules) -> None:
        """Remember the sitemaps named by ``rules`` (the robots.txt of ``url``'s site)."""
        if rules.parser is None:
            return
        names: list[str] = []
        for s in rules.parser.sitemaps:
            if len(names) >= self.max_sitemaps:
                break
            if isinstance(s, str) and s.strip() and s not in names:
                names.append(s.strip())
        if names:
            with self._lock:
                self._pending[robots_url(url)] = names

    def take(self, url: str) -> list[str]:
        """The pending sitemaps of ``url``'s site (then forgotten), or []."""
        with self._lock:
            if not self._pending:
                return []
            return self._pending.pop(robots_url(url), [])
