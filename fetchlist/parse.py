"""Parse fetched content: title, plain text and outlinks with anchor text.

``parse(url, content, content_type)`` never raises on any bytes: broken, empty, huge, binary
or hostile content gives a ``ParseResult`` whose ``error`` says why the parse failed or stopped
early (the fields then hold whatever was extracted before).

HTML (``text/html``, ``application/xhtml+xml``, or no content type and not binary):

1. charset (WHATWG encoding sniffing, ``sniff_encoding``): a BOM, else the ``charset`` of the
   HTTP Content-Type, else a ``<meta>`` charset in the first 4 KiB (UTF-16 there means
   UTF-8), else UTF-8 if the bytes are valid UTF-8, else windows-1252 (the HTML5 fallback).
   Undecodable bytes become U+FFFD.
2. lxml.html parses the text re-encoded as UTF-8 (so libxml2 never guesses an encoding);
   comments, ``<script>``, ``<style>`` and ``<template>`` do not count as text.  libxml2 stops
   at nesting depth 256; the result then carries ``error`` and what came before.
3. ``<base href>`` (first one, if it is an http(s) URL) is the base of relative links.
4. Outlinks: ``<a href>``, ``<area href>``, ``<frame src>``, ``<iframe src>`` in document order;
   ``javascript:``, ``mailto:``, ``data:``, ``tel:`` and every other non-http(s) target skipped;
   ``rel="nofollow"`` links skipped; targets normalized with ``fetchlist.normalize`` (and the
   www rules, if given); links to the page itself dropped; duplicates merged (the first
   non-empty anchor is kept); the first ``max_outlinks`` distinct targets kept.  Anchor text: the element's text
   with whitespace collapsed, else the ``alt`` of an image inside it, else its ``title``; cut to
   ``max_anchor`` characters.
5. In ``<head>``: ``<link rel="canonical" href>`` (the first one, resolved against the base and normalized) is
   ``canonical``; ``<meta http-equiv="refresh" content="N; url=…">`` (the first one) gives
   ``refresh`` (its normalized target, None when it names the page itself or an unusable URL)
   and ``refresh_delay`` (N seconds).  The fetcher turns a short refresh into a redirect and
   adds the HTTP ``Link: <…>; rel="canonical"`` header (``fetchlist.hints``).
6. Robots directives from ``<meta name="robots">`` (or ``name=`` the crawler's robots agent)
   and the ``X-Robots-Tag`` header: ``noindex`` empties title and text, ``nofollow`` drops all
   outlinks, ``none`` is both.

``text/plain`` gives text only.  Any other type gives an error "unsupported content type" and
only the md5.  The md5 (16 bytes) is always that of the whole content as given.

Runtime cost: linear in the content (capped at ``max_parse`` bytes) plus about 20 µs per
distinct link until ``max_outlinks`` are found; the canonical and refresh look only at the
children of ``<head>``.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from dataclasses import dataclass, field

import lxml.etree
import lxml.html
from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, read_bom

from fetchlist.normalize import WwwRules, normalize
from fetchlist.sitemaps import SitemapUrl
from webdb import DEFAULT_ANCHOR_MAX

__all__ = ["ParseResult", "parse", "sniff_encoding", "decode_html", "HTML_TYPES"]

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset({"text/plain"})
_SKIP = re.compile(r"\s*(?:javascript|mailto|data|tel|about|vbscript|file|ftp):", re.I)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_BLOCK = (
    "p",
    "div",
    "br",
    "li",
    "ul",
    "ol",
    "tr",
    "td",
    "th",
    "table",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "section",
    "article",
    "header",
    "footer",
    "nav",
    "aside",
    "blockquote",
    "pre",
    "hr",
    "dd",
    "dt",
    "dl",
    "form",
    "main",
    "figure",
    "figcaption",
    "option",
    "address",
)
_SNIFF = 1024
# The content of a refresh declaration (HTML's "shared declarative refresh steps"): a delay,
# then optionally ";" or ",", "url=" and the URL, possibly quoted.
_REFRESH = re.compile(r"\s*(\d+)(?:\.[\d.]*)?\s*(?:[;,]\s*(?:url\s*=\s*)?(.*))?\s*$", re.I | re.S)


@dataclass(slots=True)
class ParseResult:
    """What ``parse`` extracted from one page.  ``error`` is None when the parse was complete."""

    url: str
    md5: bytes
    title: str = ""
    text: str = ""
    outlinks: list[tuple[str, str]] = field(default_factory=list)
    base: str = ""
    encoding: str | None = None
    noindex: bool = False
    nofollow: bool = False
    error: str | None = None
    # What the page says about its own URL (module docstring, step 5): the canonical URL, and a
    # meta refresh's target and delay in seconds.
    canonical: str | None = None
    refresh: str | None = None
    refresh_delay: int = 0
    # Sitemaps: the sitemaps this record reports (robots.txt ``Sitemap:`` lines, or an index's
    # children) and, for a sitemap, its URLs (``fetchlist.sitemaps``).
    sitemaps: list[str] = field(default_factory=list)
    sitemap_urls: list[SitemapUrl] = field(default_factory=list)
    # What each of ``sitemaps`` may give in all, (URLs, sitemaps) (fetchlist.sitemaps.child_quota).
    sitemap_quota: tuple[int, int] | None = None


def parse(
    url: str,
    content: bytes,
    content_type: str | None = None,
    *,
    robots_header: str | None = None,
    robots_agent: str = "webdb-crawler",
    max_outlinks: int = 100,
    max_anchor: int = DEFAULT_ANCHOR_MAX,
    max_text: int = 100_000,
    max_parse: int = 4 * 1024 * 1024,
    www: WwwRules | None = None,
) -> ParseResult:
    """Parse ``content`` fetched from ``url``; see the module docstring.  Never raises."""
    if not isinstance(content, (bytes, bytearray, memoryview)):
        content = b""
    content = bytes(content)
    res = ParseResult(url=url if isinstance(url, str) else "", md5=hashlib.md5(content).digest())
    try:
        _parse(
            res, content[:max_parse], content_type, robots_header, robots_agent, max_outlinks, max_anchor, max_text, www
        )
    except Exception as e:  # the contract is "never raises": report whatever went wrong
        res.error = f"{type(e).__name__}: {e}"[:500]
    return res


def _parse(
    res: ParseResult,
    data: bytes,
    content_type: str | None,
    robots_header: str | None,
    agent: str,
    max_outlinks: int,
    max_anchor: int,
    max_text: int,
    www: WwwRules | None,
) -> None:
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime and mime not in HTML_TYPES and mime not in _TEXT_TYPES:
        res.error = f"unsupported content type {mime!r}"
        return
    if not data.strip():
        res.error = "empty document"
        return
    res.encoding, text = decode_html(data, content_type)
    if _looks_binary(text[:_SNIFF]):
        res.error = "binary content"
        return
    text = _CONTROL.sub("", text)
    res.base = normalize(res.url) or ""
    if mime in _TEXT_TYPES:
        res.text = _collapse(text)[:max_text]
        return
    parser = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True)
    try:
        doc = lxml.html.document_fromstring(text.encode("utf-8", "replace"), parser=parser)
    except lxml.etree.ParserError as e:
        res.error = f"no document: {e}"
        return
    fatal = [e for e in parser.error_log if e.level_name == "FATAL"]
    if fatal:
        res.error = f"parse stopped early: {fatal[0].message}"[:500]
    noindex, nofollow = _robots(doc, robots_header, agent)
    res.noindex, res.nofollow = noindex, nofollow
    lxml.etree.strip_elements(doc, "script", "style", "template", lxml.etree.Comment, with_tail=False)
    for b in doc.iter("base"):
        href = b.get("href")
        if href and href.strip():
            base = normalize(href, res.url)
            if base:
                res.base = base
            break
    self_url = normalize(res.url)
    head = doc.find("head")
    if head is not None:  # both live in <head>: no walk of the whole tree
        res.canonical = _canonical(head, res.base or res.url, www)
        res.refresh, res.refresh_delay = _refresh(head, res.base or res.url, self_url, www)
    if not nofollow:
        res.outlinks = _outlinks(doc, res.base or res.url, self_url, max_outlinks, max_anchor, www)
    if noindex:
        return
    title = next(doc.iter("title"), None)
    if title is not None:
        res.title = _collapse(_limited_text(title, max_text))
    body = doc.find("body")
    if body is not None:
        for el in body.iter(*_BLOCK):
            el.tail = "\n" + el.tail if el.tail else "\n"
            el.text = "\n" + el.text if el.text else "\n"
        res.text = _collapse(_limited_text(body, 2 * max_text + 1000))[:max_text]


def _canonical(doc: lxml.html.HtmlElement, base: str, www: WwwRules | None) -> str | None:
    """The normalized href of the first ``<link rel="canonical">``, or None."""
    for el in doc.iter("link"):
        if "canonical" in (el.get("rel") or "").lower().split():
            href = (el.get("href") or "").strip()
            return normalize(href, base, www=www) if href and not _SKIP.match(href) else None
    return None


def _refresh(
    doc: lxml.html.HtmlElement, base: str, self_url: str | None, www: WwwRules | None
) -> tuple[str | None, int]:
    """(target, delay) of the first ``<meta http-equiv="refresh">`` naming another usable URL."""
    for el in doc.iter("meta"):
        if (el.get("http-equiv") or "").strip().lower() != "refresh":
            continue
        m = _REFRESH.match(el.get("content") or "")
        if m is None or not m.group(2):
            return None, 0
        href = m.group(2).strip()
        if href[:1] in ("'", '"'):
            href = href[1:].split(href[0], 1)[0]
        if not href or _SKIP.match(href):
            return None, 0
        target = normalize(href, base, www=www)
        if target is None or target == self_url:
            return None, 0
        return target, min(int(m.group(1)[:9]), 10**9)
    return None, 0


def _robots(doc: lxml.html.HtmlElement, header: str | None, agent: str) -> tuple[bool, bool]:
    """(noindex, nofollow) from robots meta tags and the X-Robots-Tag header."""
    tokens: set[str] = set()
    agent = agent.lower()
    for m in doc.iter("meta"):
        name = (m.get("name") or "").strip().lower()
        if name in ("robots", agent):
            tokens.update(t.strip().lower() for t in (m.get("content") or "").split(","))
    for part in (header or "").split(","):
        who, colon, what = part.partition(":")
        if colon and who.strip().lower() not in ("noindex", "nofollow", "none", "all", "unavailable_after"):
            if who.strip().lower() == agent:
                tokens.add(what.strip().lower())
        else:
            tokens.add(part.strip().lower())
    none = "none" in tokens
    return none or "noindex" in tokens, none or "nofollow" in tokens


def _outlinks(
    doc: lxml.html.HtmlElement,
    base: str,
    self_url: str | None,
    max_outlinks: int,
    max_anchor: int,
    www: WwwRules | None,
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    index: dict[str, int] = {}
    resolved: dict[str, str | None] = {}
    for el in doc.iter("a", "area", "frame", "iframe"):
        href = el.get("href") if el.tag in ("a", "area") else el.get("src")
        if not href or _SKIP.match(href):
            continue
        rel = el.get("rel")
        if rel and "nofollow" in rel.lower().split():
            continue
        if href in resolved:
            target = resolved[href]
        else:
            target = resolved[href] = normalize(href, base, www=www)
        if target is None or target == self_url:
            continue
        i = index.get(target)
        if i is None:
            if len(out) >= max_outlinks:
                break
            index[target] = len(out)
            out.append((target, _anchor(el, max_anchor)))
        elif not out[i][1]:
            out[i] = (target, _anchor(el, max_anchor))
    return out


def _anchor(el: lxml.html.HtmlElement, max_anchor: int) -> str:
    text = "" if el.tag == "area" else _collapse(_limited_text(el, 4 * max_anchor + 100))
    if not text:
        for img in el.iter("img"):
            text = _collapse(img.get("alt") or "")
            if text:
                break
    if not text:
        text = _collapse(el.get("alt") or el.get("title") or "")
    return text[:max_anchor].rstrip()


def _limited_text(el: lxml.html.HtmlElement, limit: int) -> str:
    """The text under ``el``, reading at most about ``limit`` characters."""
    parts, n = [], 0
    for t in el.itertext():
        parts.append(t)
        n += len(t)
        if n > limit:
            break
    return "".join(parts)


def _collapse(s: str) -> str:
    return " ".join(s.split())


def sniff_encoding(data: bytes, content_type: str | None = None) -> tuple[str, int]:
    """(codec, BOM length) of an HTML document, as the WHATWG encoding sniffing algorithm
    orders the sources: a BOM, else the Content-Type charset, else a ``<meta>`` charset in the
    first 4 KiB (UTF-16 named there means UTF-8: a document whose meta tag could be read as
    ASCII is not UTF-16), else UTF-8 if the bytes are valid UTF-8, else windows-1252.  Labels
    are resolved as browsers do (w3lib: ``latin-1`` is windows-1252, ...); unknown ones are
    ignored."""
    enc, bom = read_bom(data)
    if enc:
        return enc, len(bom)
    enc = http_content_type_encoding(content_type or "")
    if enc:
        return ("utf-16-le" if enc in ("utf-16", "utf_16") else enc), 0
    enc = html_body_declared_encoding(data)
    if enc:
        return ("utf-8" if enc.replace("_", "-").startswith("utf-16") else enc), 0
    return _utf8_or_cp1252(data), 0


def decode_html(data: bytes, content_type: str | None = None) -> tuple[str, str]:
    """(codec, text) of ``data`` (``sniff_encoding``); undecodable bytes become U+FFFD."""
    enc, skip = sniff_encoding(data, content_type)
    try:
        return enc, data[skip:].decode(enc, "replace")
    except LookupError:  # a label w3lib knows but this Python lacks
        enc = _utf8_or_cp1252(data)
        return enc, data.decode(enc, "replace")


def _utf8_or_cp1252(data: bytes) -> str:
    """The fallback charset: UTF-8 if ``data`` decodes (a cut last character allowed), else cp1252."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def _looks_binary(sample: str) -> bool:
    """More than 4, and more than 5%, control characters (not whitespace) or U+FFFD in the first KiB."""
    bad = len(_CONTROL.findall(sample)) + sample.count("\ufffd")
    return bad > 4 and bad * 20 > len(sample)
