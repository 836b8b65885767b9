"""Update: apply crawl segments to the database as writer calls (the original WebDB's update, Nutch 1.x rules).

    with db.writer() as w:
        counts = apply_segments(w, ["segments/20240601120000"], ignore_internal=False)

``apply_segments(log, segment_dirs, **options)`` feeds anything that has the writer calls — a
``webdb.Writer``, the distributed writer's ``EditLog`` (it is the default input of ``webdb
update``, see webdb.writer.inputs), a ``CallRecorder`` — and returns counts.  Options are plain
JSON values, so they travel to every host of a rack.

Per fetch record of each segment, in segment order then fetch order:

* ``apply_fetch(result)``: the fetch schedule of webdb.core.schedule (status, retries, intervals,
  the ``adaptive`` setting) is applied to the *stored* page at commit.  The result's meta also
  clears the generate mark (``gen = ""``) and, for a redirect, records its target
  (``redirect``).
* FETCHED with an md5 different from the md5 the page had when it was generated (the one in
  the fetchlist): the content changed, so its outlinks are emitted —
  ``add_outlinks(new_md5, links)``: a link from the new content to each target and the target
  as a new page if it is not present.  The old content's links go by the md5 cascade (when no
  page carries the old md5 any more).  Unchanged content (same md5, NOT_MODIFIED) emits no link:
  its links are already there.
* A record the address policy refused (no request was made: ``refused_by_policy``) is not a
  fetch: the page keeps its status, retries and content and loses its generate mark
  (``add_page`` of the page as generated); the first refusal leaves it due, so a crawl run again
  with ``allow_private_addresses`` fetches it at once; a repeated one (``meta["refused"]`` set)
  puts it ``retry_delay`` ahead, so hosts that resolve to private addresses do not fill every
  round.  Counted in ``refused_policy``; robots.txt denials (GONE) in ``refused_robots``.
* REDIRECT_* with a target: the target is added as a new page if not present; no link is
  recorded (a link's source is a content md5, and a redirect has no content of its own: a link
  from the page's old content would attach the redirect to that content's duplicates too).
  The page keeps ``meta["redirect"] = target``.

* Canonical: a FETCHED page whose parse record names a canonical URL other than its own gets
  ``meta["canonical"]`` = that URL (cleared when the page stops naming one); ``webdb dedup
  --canonical`` reads it.
* Sitemaps (``fetchlist.sitemaps``): each sitemap a parse record reports (robots.txt
  ``Sitemap:`` lines, or an index's children) is added, if not present, as a page with
  ``meta["sitemap"]`` = its level; the URLs of a sitemap whose content changed are added, if
  not present, due at once, with ``score = new_score × 2 × priority`` (priority 0.5 when the
  sitemap gives none) and ``fetch_interval`` from ``changefreq``; a URL with a ``lastmod`` also
  gets ``apply_lastmod(url, lastmod, t)``: a known page last fetched before it is due at once.
  No link is recorded for either (a sitemap is a list of URLs, not a vote for them).

Every URL entering the db here passes the same path as an injected one: outlinks and redirect
targets are normalized (``fetchlist.normalize``, with the www rules ``www_rules``); one that
cannot be (``javascript:``, ``file:``, malformed) is counted in ``bad_urls`` and skipped, and a
fetch record whose URL is not http(s), or neither in the segment's fetchlist nor in normal
form, is counted in ``bad_records`` and skipped: one bad URL never stops a round.  Then, in this order: the URL
filter (``url_filters``), the internal/external rule (``ignore_internal`` / ``ignore_external``
by ``link_mode`` host or domain; outlinks only), then at most ``max_outlinks`` per page.  With
``no_additions`` no new page is added: links are still added, and the database keeps those
whose target exists (a link to an absent page dangles and is dropped by the cascade).

Cost: one sequential pass over each segment's fetchlist (a dict url → md5 per partition) and
its fetch and parse files; O(1) writer calls per record plus O(outlinks) for changed pages.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from fetchlist.filters import UrlFilter
from fetchlist.generate import MARK, host_key
from fetchlist.net import POLICY
from fetchlist.normalize import WwwRules, normalize, registered_domain
from fetchlist.parse import ParseResult
from fetchlist.robots import ROBOTS_DENIED
from fetchlist.segment import FetchRecord, Segment
from fetchlist.sitemaps import CHANGEFREQ, QUOTA_META, SITEMAP_META, SitemapUrl, sitemap_level
from webdb import DAY, DEFAULT_INTERVAL, FetchResult, Link, Page, Status, check_share, domain_id
from webdb.errors import BadInput

__all__ = [
    "apply_segments",
    "refused_by_policy",
    "UpdateOptions",
    "OPTIONS",
    "REFUSED",
    "REFUSED_POLICY",
    "REFUSED_ROBOTS",
]

REFUSED = "refused"  # page.meta key: why the last generated fetch of the page made no request
# Counts of records whose URL was not requested: the address policy refused its host (the page
# stays as it was), robots.txt denied it (GONE).
REFUSED_POLICY = "refused_policy"
REFUSED_ROBOTS = "refused_robots"

# Every option of apply_segments, with its default (plain JSON values).
OPTIONS: dict[str, Any] = {
    # Add no new pages (links are still added; those to absent pages are dropped by the db).
    "no_additions": False,
    # Drop outlinks to the page's own host (or domain, link_mode).
    "ignore_internal": False,
    # Drop outlinks to other hosts (or domains).
    "ignore_external": False,
    # What "internal" means: "host" or "domain" (registered domain).
    "link_mode": "host",
    # Outlinks kept per page (after rewriting and filtering), in document order.
    "max_outlinks": 100,
    # URL filter files (fetchlist.filters) applied to outlinks and redirect targets.
    "url_filters": [],
    # www/non-www rules file (fetchlist.normalize.WwwRules) applied to outlinks and redirect targets.
    "www_rules": None,
    # Score of a page added by an outlink or a redirect.
    "new_score": 1.0,
    # Fetch interval of a new page, seconds (None: the db's default_interval).
    "new_interval": None,
    # Focused crawling (fetchlist.focus): a rules file; new pages whose URL fits get score
    # fit_score and meta fit=1, the others other_score.
    "focus_rules": None,
    "fit_score": 1.0,
    "other_score": 0.1,
}


class UpdateOptions:
    """Resolved options: files loaded once, unknown names rejected (BadInput naming them)."""

    def __init__(self, **options: Any) -> None:
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise BadInput(f"unknown update option(s) {', '.join(sorted(unknown))} (known: {', '.join(OPTIONS)})")
        o = {**OPTIONS, **{k: v for k, v in options.items() if v is not None}}
        if o["link_mode"] not in ("host", "domain"):
            raise BadInput(f"update option link_mode must be 'host' or 'domain', not {o['link_mode']!r}")
        if not isinstance(o["max_outlinks"], int) or o["max_outlinks"] < 0:
            raise BadInput(f"update option max_outlinks must be a whole number >= 0, not {o['max_outlinks']!r}")
        self.no_additions = bool(o["no_additions"])
        self.ignore_internal = bool(o["ignore_internal"])
        self.ignore_external = bool(o["ignore_external"])
        self.by_domain = o["link_mode"] == "domain"
        self.max_outlinks = o["max_outlinks"]
        uf = o["url_filters"]
        self.url_filter = uf if isinstance(uf, UrlFilter) else (UrlFilter.from_files(uf) if uf else None)
        www = o["www_rules"]
        self.www = www if isinstance(www, WwwRules) or www is None else WwwRules.from_file(www)
        self.new_score = float(o["new_score"])
        self.new_interval = o["new_interval"]
        focus = o["focus_rules"]
        if focus is not None and not hasattr(focus, "fits"):
            from fetchlist.focus import FocusRules

            focus = FocusRules.from_file(focus)
        self.focus = focus
        self.fit_score, self.other_score = float(o["fit_score"]), float(o["other_score"])
        self.bad = 0  # URLs that could not be normalized (not http(s), malformed): skipped

    def _group(self, host: str) -> str:
        return registered_domain(host) if self.by_domain and host else host

    def targets(self, src: str, links: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The outlinks of ``src`` to record: rewritten, deduplicated, without ``src`` itself,
        filtered, the internal/external rule, capped."""
        out: list[tuple[str, str]] = []
        seen: set[str] = set()
        check_side = self.ignore_internal or self.ignore_external
        mine = self._group(host_key(src)) if check_side else ""
        for url, anchor in links:
            if len(out) >= self.max_outlinks:
                break
            url = normalize(url, www=self.www) if isinstance(url, str) else None
            if url is None:
                self.bad += 1
                continue
            if url in seen or url == src:  # a link to the page itself says nothing (as Nutch)
                continue
            if self.url_filter is not None and not self.url_filter.accept(url):
                continue
            if check_side:
                internal = self._group(host_key(url)) == mine
                if (internal and self.ignore_internal) or (not internal and self.ignore_external):
                    continue
            seen.add(url)
            out.append((url, anchor))
        return out

    def target(self, url: str) -> str | None:
        """A redirect target to add, or None (rewritten and filtered like an outlink)."""
        url = normalize(url, www=self.www)
        if url is None:
            self.bad += 1
            return None
        if self.url_filter is not None and not self.url_filter.accept(url):
            return None
        return url


def _new_interval(log: Any, opts: UpdateOptions) -> int:
    if opts.new_interval is not None:
        return int(opts.new_interval)
    s = getattr(log, "settings", None)
    return int(s.default_interval) if s else DEFAULT_INTERVAL


def _retry_delay(log: Any) -> int:
    s = getattr(log, "settings", None)
    return int(s.retry_delay) if s else DAY


def _add_new(
    log: Any, src_md5: bytes | None, links: list[tuple[str, str]], dom: int, t: int, iv: int, opts: UpdateOptions
) -> None:
    """Links from ``src_md5`` (if given) to each target, and each target as a new page (due at
    ``t``).  Focused crawling checks fit here; the result is kept only if the page is new."""
    if opts.focus is None:
        groups = [(links, opts.new_score, None)]
    else:
        fit = [x for x in links if opts.focus.fits(x[0])]
        other = [x for x in links if not opts.focus.fits(x[0])] if fit else links
        groups = [(other, opts.other_score, None), (fit, opts.fit_score, {"fit": "1"})]
    for batch, score, meta in groups:
        if not batch:
            continue
        if src_md5 is not None and meta is None:
            log.add_outlinks(src_md5, batch, domain_id=dom, next_fetch=t, score=score, fetch_interval=iv)
            continue
        if src_md5 is not None:
            _links_only(log, src_md5, batch, dom)
        for url, _ in batch:
            log.add_page_if_not_present(
                Page(url, next_fetch=t, fetch_interval=iv, score=score, next_score=score, meta=dict(meta or {}))
            )


def apply_segments(
    log: Any, segment_dirs: Iterable[str | os.PathLike], share: Sequence[int] | None = None, **options: Any
) -> dict:
    """Apply each segment's fetch output to ``log`` (writer calls); return counts.

    ``options``: see ``OPTIONS`` (unknown names are BadInput).  A directory that is not a
    segment is BadInput naming it, raised before any call is made.  ``share=[j, m]``
    (webdb.writer.inputs): the j-th of m contiguous shares of the (segment, partition) pairs
    in order — a URL is in one partition of a segment, so the shares together make the same
    calls in the same order as one writer would.
    """
    sh = check_share(share)
    opts = UpdateOptions(**options)
    segs = []
    for d in segment_dirs:
        d = os.fspath(d)
        if not os.path.isdir(d):
            raise BadInput(f"{d}: no such segment directory")
        segs.append(Segment.open(d))
    applier = _Applier(log, opts)
    t0 = time.monotonic()
    units = [(seg, part) for seg in segs for part in seg.parts()]
    if sh is not None:
        units = units[len(units) * sh[0] // sh[1] : len(units) * (sh[0] + 1) // sh[1]]
    counts = applier.counts
    counts["segments"] = len(segs)
    for seg, part in units:
        generated = {e.url: e.page for e in seg.fetchlist(part)}
        for o in seg.outcomes(part):
            applier.outcome(o, generated)
    counts["bad_urls"] += opts.bad
    out = dict(counts)
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out


class _Applier:
    """The writer calls for one fetch outcome after another, counting what it found."""

    def __init__(self, log: Any, opts: UpdateOptions) -> None:
        self.log, self.opts = log, opts
        self.iv = _new_interval(log, opts)
        self.retry_delay = _retry_delay(log)
        self.counts: Counter[str] = Counter()

    def outcome(self, o: Any, generated: dict[str, Page]) -> None:
        """One outcome of a segment partition whose fetchlist is ``generated`` (url -> page)."""
        log, opts, counts = self.log, self.opts, self.counts
        r = o.result
        url = r.url
        norm = normalize(url)
        if norm is None or (norm != url and url not in generated):
            # not an http(s) URL, or neither in the fetchlist nor in normal form: never a page
            counts["bad_records"] += 1
            return
        page = generated.get(url)
        if refused_by_policy(o.record):
            counts[REFUSED_POLICY] += 1
            if page is not None:
                log.add_page(_refused(page, r.fetch_time, self.retry_delay))
            return
        prev_md5, prev_meta = (page.md5, page.meta) if page is not None else (None, {})
        redirect = opts.target(o.redirect) if o.redirect else None
        parsed = o.record.parse if r.status == Status.FETCHED else None
        meta = self._meta(o, prev_meta, parsed)
        log.apply_fetch(FetchResult(url, r.status, r.fetch_time, r.md5, r.num_outlinks, meta or None))
        counts[Status(r.status).name.lower()] += 1
        if r.status == Status.GONE and o.record.error == ROBOTS_DENIED:
            counts[REFUSED_ROBOTS] += 1
        if r.status == Status.FETCHED:
            self._fetched(o, parsed, prev_md5, prev_meta)
        elif redirect is not None and redirect != url:
            counts["redirect_targets"] += 1
            if not opts.no_additions:
                _add_new(log, None, [(redirect, "")], 0, r.fetch_time, self.iv, opts)

    def _meta(self, o: Any, prev_meta: dict, parsed: Any) -> dict:
        """The fetch's page meta: the fetcher's, with the generate mark, a refusal, a redirect
        and a canonical URL the page had cleared (an empty value), a new redirect or canonical set."""
        r = o.result
        meta = dict(r.meta or {})
        if MARK in prev_meta:
            meta[MARK] = ""
        if prev_meta.get(REFUSED):
            meta[REFUSED] = ""
        if r.status in (Status.REDIRECT_PERM, Status.REDIRECT_TEMP):
            meta["redirect"] = o.redirect or ""
        elif prev_meta.get("redirect"):
            meta["redirect"] = ""
        canonical = _canonical(r.url, parsed.canonical if parsed is not None else None, self.opts)
        if canonical:
            meta[CANONICAL] = canonical
        elif prev_meta.get(CANONICAL) and parsed is not None:  # no parse record: not known
            meta[CANONICAL] = ""
        return meta

    def _fetched(self, o: Any, parsed: Any, prev_md5: bytes | None, prev_meta: dict) -> None:
        """A page fetched: the sitemaps and sitemap URLs it names, and its outlinks if its
        content changed."""
        log, opts, counts, iv = self.log, self.opts, self.counts, self.iv
        r = o.result
        url = r.url
        if parsed is not None and parsed.sitemaps and not opts.no_additions:
            level = sitemap_level(prev_meta) + 1
            counts["sitemaps"] += _add_sitemaps(log, url, parsed, level, r.fetch_time, iv, opts)
        if (
            parsed is not None
            and parsed.sitemap_urls
            and sitemap_level(prev_meta)  # only a sitemap's record lists URLs
            and not opts.no_additions
            and r.md5 != prev_md5
        ):
            counts["sitemap_urls"] += _add_sitemap_urls(log, url, parsed.sitemap_urls, r.fetch_time, iv, opts)
        if prev_md5 is not None and r.md5 == prev_md5:
            counts["unchanged"] += 1
            return
        counts["changed"] += 1
        links = opts.targets(url, o.outlinks)
        if not links:
            return
        counts["outlinks"] += len(links)
        dom = domain_id(host_key(url))
        if opts.no_additions:
            _links_only(log, r.md5, links, dom)
        else:
            _add_new(log, r.md5, links, dom, r.fetch_time, iv, opts)


def refused_by_policy(record: FetchRecord) -> bool:
    """The fetcher made no request for ``record``'s URL because the address policy refused its
    host: its error names the policy and no HTTP answer came (status RETRY; a GONE record
    with such an error, which a segment may hold, is read the same way)."""
    return record.http_status == 0 and (record.error or "").startswith(POLICY + ":")


def _refused(page: Page, t: int, retry_delay: int) -> Page:
    """``page`` (as generated) after the address policy refused its host at ``t``: its status,
    retries and content stay, the generate mark goes; the first refusal leaves it due (the policy
    may be changed before the next round), a repeated one puts it ``retry_delay`` ahead."""
    meta = {k: v for k, v in page.meta.items() if k != MARK}
    if meta.get(REFUSED):
        nxt = max(page.next_fetch, t + retry_delay)
    else:
        nxt, meta[REFUSED] = page.next_fetch, POLICY
    return replace(page, next_fetch=nxt, meta=meta)


CANONICAL = "canonical"  # page meta key: the canonical URL a page names, when not its own


def _canonical(url: str, canonical: str | None, opts: UpdateOptions) -> str | None:
    """The canonical URL to record for ``url``: normalized, not ``url`` itself, else None."""
    if not isinstance(canonical, str):
        return None
    c = normalize(canonical, www=opts.www)
    return None if c == url else c


def _add_sitemaps(log: Any, src: str, parsed: ParseResult, level: int, t: int, iv: int, opts: UpdateOptions) -> int:
    """Add each sitemap ``parsed`` reports as a page marked ``meta["sitemap"] = level`` (and its
    share of the tree, ``meta["sitemap_quota"]``), if not present; the count."""
    n = 0
    for u in parsed.sitemaps:
        target = opts.target(u) if isinstance(u, str) else None
        if target is None or target == src:
            continue
        meta = {SITEMAP_META: str(level)}
        if parsed.sitemap_quota is not None:
            meta[QUOTA_META] = f"{parsed.sitemap_quota[0]} {parsed.sitemap_quota[1]}"
        log.add_page_if_not_present(
            Page(target, next_fetch=t, fetch_interval=iv, score=opts.new_score, next_score=opts.new_score, meta=meta)
        )
        n += 1
    return n


def _add_sitemap_urls(log: Any, src: str, urls: list[SitemapUrl], t: int, iv: int, opts: UpdateOptions) -> int:
    """Add each URL of a sitemap as a page, if not present: due at ``t``, scored by its priority,
    its interval from its changefreq (``iv`` without one); a known page fetched before its
    lastmod becomes due at ``t`` (``apply_lastmod``); the count."""
    n = 0
    for su in urls:
        url = opts.target(su.url)
        if url is None or url == src:
            continue
        meta: dict[str, str] = {}
        base = opts.new_score
        if opts.focus is not None:
            fits = opts.focus.fits(url)
            base = opts.fit_score if fits else opts.other_score
            if fits:
                meta["fit"] = "1"
        score = base * 2 * (0.5 if su.priority is None else su.priority)
        interval = CHANGEFREQ.get(su.changefreq or "", iv)
        log.add_page_if_not_present(
            Page(url, next_fetch=t, fetch_interval=interval, score=score, next_score=score, meta=meta)
        )
        if su.lastmod is not None:  # a known page changed since it was fetched: due now
            log.apply_lastmod(url, su.lastmod, t)
        n += 1
    return n


def _links_only(log: Any, md5: bytes, links: list[tuple[str, str]], dom: int) -> None:
    if hasattr(log, "add_links"):
        log.add_links(md5, links, domain_id=dom)
        return
    for url, anchor in links:
        log.add_link(Link(md5, url, anchor, dom))
