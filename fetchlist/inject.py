"""Inject: seed URLs into the database, each added only if not present (as the original WebDB's inject).

    counts = inject(db, ["seeds.txt"], score=1.0)

A seed file is UTF-8 text, one URL per line, as Nutch's injector reads it: the URL, then
optional tab-separated ``name=value`` metadata::

    # comment lines and blank lines are skipped
    http://example.com/
    http://example.org/news/	score=2.5	fetch_interval=86400
    http://example.net/	nutch.score=0.5	nutch.fetchInterval=3600	lang=en

``score`` (or ``nutch.score``) sets the page's score (a decimal number in ASCII digits;
default: the injected score), ``fetch_interval`` (or ``nutch.fetchInterval``) its refetch
interval in whole seconds (ASCII digits; default: the db's ``default_interval``); any other
``name=value`` goes to ``page.meta``, except the keys the crawl sets itself
(``RESERVED_META``: ``gen``, ``redirect``, ``fit``, ``etag``, ``last_modified``,
``refused``, ``canonical``, ``sitemap_quota``), which are an error, as are a name given twice and a control
character.  A UTF-8 BOM at the start of a file is skipped.  A line without a tab may separate
its fields with spaces.  URLs are normalized (``fetchlist.normalize``, www
rules if given) and filtered (``url_filter``): a URL that cannot be normalized or a malformed
``name=value`` is an error naming file and line (``skip_bad`` counts and skips it instead), and
so is a line that is not UTF-8 (a latin-1 byte, UTF-16 text): the other lines are read; a
URL the filter rejects is counted as ``filtered``.  New pages are due at once (``next_fetch =
now``).

Cost: one pass over the files; one ``add_page_if_not_present`` per URL.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fetchlist.filters import UrlFilter
from fetchlist.normalize import WwwRules, normalize
from webdb import DEFAULT_INTERVAL, Page
from webdb.errors import BadInput

__all__ = ["Seed", "read_seeds", "inject_seeds", "inject"]

_SCORE = ("score", "nutch.score")
# Page meta keys the crawl itself sets: a seed setting one could block a page for good (``gen``),
# fake a redirect, skip focus rules or send forged validators.
RESERVED_META = frozenset({"gen", "redirect", "fit", "etag", "last_modified", "refused", "canonical", "sitemap_quota"})
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_WHOLE = re.compile(r"[0-9]{1,10}", re.ASCII)
_INTERVAL = ("fetch_interval", "nutch.fetchInterval")


@dataclass(slots=True)
class Seed:
    """One seed line: the normalized URL, its optional score and interval, other metadata."""

    url: str
    score: float | None = None
    fetch_interval: int | None = None
    meta: dict[str, str] = field(default_factory=dict)
    where: str = ""


def _parse_line(line: str, where: str, www: WwwRules | None) -> Seed:
    fields = line.split("\t") if "\t" in line else line.split()
    fields = [f.strip() for f in fields if f.strip()]
    raw = fields[0]
    url = normalize(raw, www=www)
    if url is None:
        raise BadInput(f"{where}: not an http(s) URL: {raw!r:.200}")
    seed = Seed(url, where=where)
    for f in fields[1:]:
        name, sep, value = f.partition("=")
        if not sep or not name:
            raise BadInput(f"{where}: expected name=value after the URL, got {f!r:.100}")
        if name in RESERVED_META:
            raise BadInput(f"{where}: meta key {name!r} is reserved (set by the crawl, not by seeds)")
        if not name.isprintable() or not value.isprintable():
            raise BadInput(f"{where}: meta {f!r:.100} holds a control character")
        if name in seed.meta or (name in _SCORE and seed.score is not None):
            raise BadInput(f"{where}: {name} given twice")
        if name in _SCORE:
            if not _NUMBER.fullmatch(value) or not math.isfinite(float(value)):
                raise BadInput(f"{where}: {name} must be a number, got {value!r:.50}")
            seed.score = float(value)
        elif name in _INTERVAL:
            if not _WHOLE.fullmatch(value) or not 0 < int(value) < 2**32:
                raise BadInput(f"{where}: {name} must be whole seconds > 0, got {value!r:.50}")
            seed.fetch_interval = int(value)
        else:
            seed.meta[name] = value
    return seed


def read_seeds(
    paths: Iterable[str | os.PathLike],
    *,
    www: WwwRules | None = None,
    skip_bad: bool = False,
    bad: list[str] | None = None,
) -> Iterator[Seed]:
    """The seeds of each file in order.  A file that cannot be read is BadInput naming it;
    a bad line too, unless ``skip_bad`` (then its message is appended to ``bad``)."""
    for p in paths:
        p = os.fspath(p)
        try:
            # a BOM on the first line is not part of the URL; bytes that are not UTF-8 are kept as
            # escapes so that one such line is reported (file:line) without losing the rest
            f = open(p, encoding="utf-8-sig", errors="surrogateescape")
        except OSError as e:
            raise BadInput(f"{p}: cannot read seed file: {e.strerror}") from None
        with f:
            for lineno, line in enumerate(f, 1):
                s = line.strip()
                if not s or s.startswith("#"):
                    continue
                try:
                    _check_text(line, f"{p}:{lineno}")
                    yield _parse_line(line.rstrip("\r\n"), f"{p}:{lineno}", www)
                except BadInput as e:
                    if not skip_bad:
                        raise
                    if bad is not None:
                        bad.append(str(e))


def _check_text(line: str, where: str) -> None:
    """BadInput naming ``where`` if ``line`` held bytes that are not UTF-8 (read with
    surrogateescape) or NUL bytes (UTF-16 text read as UTF-8)."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as e:
        at = len(line[: e.start].encode("utf-8", "surrogateescape"))
        byte = ord(line[e.start]) - 0xDC00
        raise BadInput(f"{where}: not UTF-8 (byte 0x{byte:02x} at byte {at} of the line)") from None
    if "\0" in line:
        raise BadInput(f"{where}: holds NUL bytes (UTF-16 text? seed files are UTF-8)")


def inject_seeds(
    log: Any,
    paths: Iterable[str | os.PathLike],
    *,
    score: float = 1.0,
    now: int | None = None,
    url_filter: UrlFilter | None = None,
    www: WwwRules | None = None,
    skip_bad: bool = False,
    focus: Any = None,
    fit_score: float | None = None,
) -> dict:
    """``add_page_if_not_present`` on ``log`` (any writer) for each seed; return counts
    (``urls``, ``filtered``, ``bad``, and ``bad_lines``: the first messages of skipped lines).

    With ``focus`` (fetchlist.focus.FocusRules) a fitting seed gets ``meta["fit"] = "1"`` (and
    ``fit_score`` if given and the line sets no score).
    """
    now = int(time.time()) if now is None else int(now)
    s = getattr(log, "settings", None)
    default_iv = int(s.default_interval) if s else DEFAULT_INTERVAL
    bad: list[str] = []
    urls = filtered = 0
    for seed in read_seeds(paths, www=www, skip_bad=skip_bad, bad=bad):
        if url_filter is not None and not url_filter.accept(seed.url):
            filtered += 1
            continue
        sc = seed.score if seed.score is not None else score
        meta = dict(seed.meta)
        if focus is not None and focus.fits(seed.url):
            meta["fit"] = "1"
            if seed.score is None and fit_score is not None:
                sc = fit_score
        iv = seed.fetch_interval or default_iv
        log.add_page_if_not_present(
            Page(seed.url, next_fetch=now, fetch_interval=iv, score=sc, next_score=sc, meta=meta)
        )
        urls += 1
    return {"urls": urls, "filtered": filtered, "bad": len(bad), "bad_lines": bad[:10]}


def inject(db, paths: Iterable[str | os.PathLike], **options: Any) -> dict:
    """Inject into ``db`` (a ``webdb.WebDB``) in one batch; counts as ``inject_seeds`` plus
    ``new`` (pages added: the rest were already present) and ``pages`` (the db size after).

    A bad line aborts the batch (nothing is injected); the count is exact because the
    writer lock is held from before the count to after the commit.
    """
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise BadInput("no seed file given")
    for p in paths:
        if not os.path.isfile(p):
            raise BadInput(f"{p}: no such seed file")
    t0 = time.monotonic()
    w = db.writer()
    try:
        with db.reader() as r:
            before = r.num_pages
        counts = inject_seeds(w, paths, **options)
        m = w.close()
    except BaseException:
        w.abort()
        raise
    counts["pages"] = sum(t.get("pages_by_url", {}).get("records", 0) for t in m.tables)
    counts["new"] = counts["pages"] - before
    counts["seconds"] = round(time.monotonic() - t0, 3)
    return counts


def inject_input(
    log: Any,
    paths: list[str],
    *,
    score: float = 1.0,
    url_filters: Iterable[str] = (),
    www_rules: str | None = None,
    focus_rules: str | None = None,
    fit_score: float | None = None,
    skip_bad: bool = False,
    now: int | None = None,
) -> dict:
    """``inject_seeds`` as a rack update's input function (``webdb inject --hosts``): the
    filter, www and focus rule files are paths on the host, options are plain JSON values."""
    from fetchlist.focus import FocusRules

    return inject_seeds(
        log,
        paths,
        score=score,
        now=now,
        url_filter=UrlFilter.from_files(list(url_filters)) if url_filters else None,
        www=WwwRules.from_file(www_rules) if www_rules else None,
        skip_bad=skip_bad,
        focus=FocusRules.from_file(focus_rules) if focus_rules else None,
        fit_score=fit_score,
    )
