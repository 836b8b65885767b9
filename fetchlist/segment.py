"""A segment: the directory of one crawl round (fetchlist in, fetch and parse output out).

Layout and record formats: docs/segment.md.  In short::

    SEGMENT                          identity (JSON): format name and version (2)
    fetchlist/part-NNNNN.jsonl       input of fetcher partition N, written once (temp + rename)
    content/part-NNNNN.warc.gz       WARC/1.1 exchanges (request, response, metadata), appended
    content/part-NNNNN.index.jsonl   URL -> response record offset (fetchlist.warc), appended
    parse/part-NNNNN.jsonl           parse output, one JSON record per line, appended
    fetch/part-NNNNN.jsonl           fetch output, one JSON record per line, appended

Version 1 segments (legacy, still read and written by ``Segment.create(..., version=1)``) have
``content/part-NNNNN.bin`` instead: records of u32 length (LE) + bytes; ``fetchlist.upgrade``
converts them.

For every fetched URL the writer appends, under one lock and flushing after each: the WARC
exchange and its index line (the content's own commit point), then the parse record, then the
fetch record.  The fetch record is the commit point: a URL is fetched iff it has a fetch
record.  A crash therefore leaves at most a torn last line in any file, one parse record at
the end of the parse file whose fetch record was never written, and a torn record or one
uncommitted exchange at the end of the WARC file.  Readers skip all three; ``SegmentWriter``
(opened again on the same partition, e.g. to resume a fetch) cuts them off first.

Runtime cost: reading a part is one sequential pass over its file; ``outcomes`` merges the
fetch and parse files of a part in one pass each (parse records come in fetch-record order).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import http
import json
import math
import os
import re
import stat
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

from fetchlist.parse import ParseResult
from fetchlist.sitemaps import CHANGEFREQ, SitemapUrl
from fetchlist.warc import (
    EncodedExchange,
    Exchange,
    WarcWriter,
    index_name,
    open_nofollow,
    read_index,
    read_response_at,
)
from webdb import NEVER, FetchResult, Page, Status
from webdb.errors import BadInput, CorruptionError

__all__ = ["Segment", "SegmentWriter", "FetchEntry", "FetchRecord", "FetchOutcome", "SEGMENT_FORMAT", "SEGMENT_VERSION"]

SEGMENT_FILE = "SEGMENT"
SEGMENT_FORMAT = "webdb-segment"
SEGMENT_VERSION = 2  # 2: content as WARC (content/part-NNNNN.warc.gz); 1: legacy .bin, still read
VERSIONS = (1, 2)
UPGRADE_DIR = "upgrade.tmp"  # staging folder of `webdb segment upgrade` (fetchlist.upgrade)
FETCHLIST, FETCH, PARSE, CONTENT = "fetchlist", "fetch", "parse", "content"
_LEN = struct.Struct("<I")
_PART_RE = re.compile(r"part-([0-9]{5})\.jsonl")
# Times in records: seconds since the epoch up to the end of year 9999 (what HTTP dates and
# the db's schedule arithmetic handle); content offsets up to 1 TiB.
MAX_TIME = 253402300799
MAX_OFFSET = 1 << 40
MAX_VALIDATOR = 256
_PAGE_FIELDS = [f.name for f in fields(Page) if f.name != "url"]


@dataclass(slots=True)
class FetchEntry:
    """One URL to fetch: its page as stored in the db and anchors of links pointing to it."""

    url: str
    page: Page | None = None
    anchors: list[str] = field(default_factory=list)


@dataclass(slots=True)
class FetchRecord:
    """The outcome of fetching one URL, as the fetcher writes it and the segment reads it back.

    ``http_status`` is 0 when no HTTP response was received (robots denial, timeout, connection
    error).  ``md5`` is the digest of ``content`` for FETCHED records, else None.  ``content``
    is None when read back without content (see ``Segment.content``); ``content_ref`` is then
    ``(offset, length)`` of the URL's WARC response record in the part's content file (version
    1: of its length-prefixed bytes in the ``.bin`` file).
    """

    url: str
    status: int
    fetch_time: int
    http_status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = ""
    md5: bytes | None = None
    content: bytes | None = None
    truncated: bool = False
    redirect: str | None = None
    error: str | None = None
    elapsed: float = 0.0
    parse: ParseResult | None = None
    content_ref: tuple[int, int] | None = None
    # The exchange as on the wire, for the WARC records only (not in the fetch record's JSON):
    # response headers as received (in order, repeats kept), reason phrase, HTTP version,
    # request headers as sent, and the request's start (seconds since the epoch, a float).
    raw_headers: list[tuple[str, str]] | None = None
    reason: str = ""
    protocol: str = "HTTP/1.1"
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    start: float | None = None
    # The exchange's WARC records already encoded (by a fetcher's worker process): the writer
    # of a version 2 segment appends them as they are.
    warc: EncodedExchange | None = None
    # The fetchlist entry's sitemap level (0: a page), for the parse only: a sitemap is parsed
    # as one (fetchlist.hints); not in the fetch record's JSON.
    sitemap_level: int = 0
    # The entry's share of its sitemap tree, (URLs, sitemaps), if it has one (fetchlist.sitemaps).
    sitemap_quota: tuple[int, int] | None = None


@dataclass(slots=True)
class FetchOutcome:
    """What the db update applies for one fetched URL: the FetchResult, outlinks, redirect."""

    result: FetchResult
    outlinks: list[tuple[str, str]]
    redirect: str | None
    record: FetchRecord


# ---- JSON records -----------------------------------------------------------------------------


def json_line(obj: dict) -> bytes:
    """One record as a line of a part file: compact JSON, UTF-8, newline-terminated."""
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")


def entry_to_json(e: FetchEntry) -> dict:
    page = e.page or Page(e.url)
    p = {name: getattr(page, name) for name in _PAGE_FIELDS}
    p["md5"] = page.md5.hex()
    p["status"] = int(page.status)
    return {"url": e.url, "page": p, "anchors": list(e.anchors)}


def entry_from_json(d: dict, where: str = "fetchlist record") -> FetchEntry:
    """A fetchlist entry; a malformed one is CorruptionError naming ``where`` and the field."""
    c = _Check(d, where)
    url = c.text("url")
    p = c.obj("page")
    pc = _Check(p, f"{where}: page")
    page = Page(
        url,
        md5=pc.md5("md5"),
        status=pc.status("status"),
        fetch_time=pc.time("fetch_time"),
        next_fetch=pc.whole("next_fetch", 0, NEVER),
        retries=pc.whole("retries", 0, 0xFFFF),
        fetch_interval=pc.whole("fetch_interval", 0, 0xFFFFFFFF),
        num_outlinks=pc.whole("num_outlinks", 0, 0xFFFFFFFF),
        score=pc.number("score"),
        next_score=pc.number("next_score"),
        meta=pc.strmap("meta"),
    )
    anchors = c.strlist("anchors", optional=True)
    return FetchEntry(url, page, anchors)


def parse_to_json(p: ParseResult) -> dict:
    d = {
        "url": p.url,
        "md5": p.md5.hex(),
        "title": p.title,
        "text": p.text,
        "outlinks": [list(o) for o in p.outlinks],
        "base": p.base,
        "encoding": p.encoding,
        "noindex": p.noindex,
        "nofollow": p.nofollow,
        "error": p.error,
    }
    # Optional fields, present only when the page has them (docs/segment.md).
    if p.canonical is not None:
        d["canonical"] = p.canonical
    if p.sitemaps:
        d["sitemaps"] = list(p.sitemaps)
    if p.sitemap_urls:
        d["sitemap_urls"] = [u.to_json() for u in p.sitemap_urls]
    if p.sitemap_quota is not None:
        d["sitemap_quota"] = list(p.sitemap_quota)
    return d


def parse_from_json(d: dict, where: str = "parse record") -> ParseResult:
    c = _Check(d, where)
    links = c.get("outlinks", list)
    for i, o in enumerate(links):
        if not (isinstance(o, list) and len(o) == 2 and all(isinstance(x, str) for x in o)):
            raise CorruptionError(f"{where}: outlinks[{i}] is not a [url, anchor] pair of strings")
    return ParseResult(
        url=c.text("url"),
        md5=c.md5("md5"),
        title=c.get("title", str),
        text=c.get("text", str),
        outlinks=[(u, a) for u, a in links],
        base=c.get("base", str),
        encoding=c.get("encoding", (str, type(None))),
        noindex=c.get("noindex", bool),
        nofollow=c.get("nofollow", bool),
        error=c.get("error", (str, type(None))),
        canonical=c.get("canonical", str) if "canonical" in d else None,
        sitemaps=c.strlist("sitemaps", optional=True),
        sitemap_urls=_sitemap_urls(c, where),
        sitemap_quota=_sitemap_quota(c, where),
    )


def _sitemap_quota(c: _Check, where: str) -> tuple[int, int] | None:
    if "sitemap_quota" not in c.d:
        return None
    q = c.get("sitemap_quota", list)
    if not (len(q) == 2 and all(type(x) is int and 0 <= x < 10**15 for x in q)):
        raise CorruptionError(f"{where}: sitemap_quota must be [urls, sitemaps], whole numbers >= 0, not {q!r:.100}")
    return q[0], q[1]


def _sitemap_urls(c: _Check, where: str) -> list[SitemapUrl]:
    if "sitemap_urls" not in c.d:
        return []
    out = []
    for i, u in enumerate(c.get("sitemap_urls", list)):
        if not (
            isinstance(u, list)
            and len(u) == 4
            and isinstance(u[0], str)
            and (u[1] is None or (type(u[1]) is int and 0 <= u[1] <= MAX_TIME))
            and (u[2] is None or u[2] in CHANGEFREQ)
            and (u[3] is None or (type(u[3]) in (int, float) and 0 <= u[3] <= 1))
        ):
            raise CorruptionError(
                f"{where}: sitemap_urls[{i}] must be [url, lastmod seconds or null, changefreq or null, "
                f"priority in [0, 1] or null], not {u!r:.100}"
            )
        out.append(SitemapUrl(u[0], u[1], u[2], None if u[3] is None else float(u[3])))
    return out


def record_to_json(r: FetchRecord) -> dict:
    return {
        "url": r.url,
        "status": int(r.status),
        "status_name": Status(r.status).name,
        "http_status": r.http_status,
        "fetch_time": r.fetch_time,
        "elapsed": round(r.elapsed, 4),
        "headers": r.headers,
        "content_type": r.content_type,
        "md5": r.md5.hex() if r.md5 is not None else None,
        "content": list(r.content_ref) if r.content_ref else None,
        "truncated": r.truncated,
        "redirect": r.redirect,
        "error": r.error,
    }


def record_from_json(d: dict, where: str = "fetch record") -> FetchRecord:
    c = _Check(d, where)
    md5 = c.get("md5", (str, type(None)))
    ref = c.get("content", (list, type(None)))
    if ref is not None and not (
        len(ref) == 2 and all(type(x) is int and 0 <= x <= MAX_OFFSET for x in ref) and ref[1] > 0
    ):
        raise CorruptionError(
            f"{where}: content must be [offset, length] with 0 <= offset, 0 < length, not {ref!r:.80}"
        )
    headers = c.strmap("headers")
    return FetchRecord(
        url=c.text("url"),
        status=c.status("status"),
        fetch_time=c.time("fetch_time"),
        http_status=c.whole("http_status", 0, 999),
        headers=headers,
        content_type=c.get("content_type", str),
        md5=c.md5("md5") if md5 is not None else None,
        truncated=c.get("truncated", bool),
        redirect=c.get("redirect", (str, type(None))),
        error=c.get("error", (str, type(None))),
        elapsed=float(c.number("elapsed")),
        content_ref=(ref[0], ref[1]) if ref else None,
    )


class _Check:
    """Typed field access of one JSON record; a missing or wrong field is CorruptionError naming
    the record (``where``: file:line) and the field."""

    __slots__ = ("d", "where")

    def __init__(self, d: object, where: str) -> None:
        if not isinstance(d, dict):
            raise CorruptionError(f"{where}: not a JSON object")
        self.d, self.where = d, where

    def _bad(self, name: str, what: str) -> CorruptionError:
        return CorruptionError(f"{self.where}: field {name!r} must be {what}, not {self.d.get(name)!r:.80}")

    def get(self, name: str, types: type | tuple[type, ...]):
        if name not in self.d:
            raise CorruptionError(f"{self.where}: field {name!r} is missing")
        v = self.d[name]
        ok = isinstance(v, types) and not (
            isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,))
        )
        if not ok:
            names = types if isinstance(types, tuple) else (types,)
            raise self._bad(name, " or ".join("null" if t is type(None) else t.__name__ for t in names))
        return v

    def text(self, name: str) -> str:
        v = self.get(name, str)
        if not v:
            raise self._bad(name, "a non-empty string")
        return v

    def whole(self, name: str, lo: int, hi: int) -> int:
        v = self.get(name, int)
        if not lo <= v <= hi:
            raise self._bad(name, f"a whole number in [{lo}, {hi}]")
        return v

    def time(self, name: str) -> int:
        return self.whole(name, 0, MAX_TIME)

    def number(self, name: str) -> float:
        v = self.get(name, (int, float))
        if not math.isfinite(v):
            raise self._bad(name, "a finite number")
        return v

    def status(self, name: str) -> Status:
        v = self.get(name, int)
        try:
            return Status(v)
        except ValueError:
            raise self._bad(name, f"a status code ({', '.join(str(int(x)) for x in Status)})") from None

    def md5(self, name: str) -> bytes:
        v = self.get(name, str)
        if len(v) != 32 or not all(ch in "0123456789abcdef" for ch in v):
            raise self._bad(name, "32 lowercase hex digits")
        return bytes.fromhex(v)

    def obj(self, name: str) -> dict:
        return self.get(name, dict)

    def strmap(self, name: str) -> dict[str, str]:
        v = self.get(name, dict)
        if not all(isinstance(x, str) for x in v.values()):
            raise self._bad(name, "an object of strings")
        return v

    def strlist(self, name: str, optional: bool = False) -> list[str]:
        if optional and name not in self.d:
            return []
        v = self.get(name, list)
        if not all(isinstance(x, str) for x in v):
            raise self._bad(name, "a list of strings")
        return list(v)


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def open_part(path: str):
    """``path`` opened for reading if it is a regular file, never through a symlink and never
    blocking on a FIFO (O_NOFOLLOW | O_NONBLOCK, then fstat): a planted link must not make us
    read elsewhere, nor a FIFO hang the reader (which may hold the db's writer lock).  A missing
    file raises FileNotFoundError; anything else is a BadInput naming the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadInput(f"{path}: is a symlink; refusing to read through it") from None
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise BadInput(f"{path}: cannot read: Is a directory")
        kind = next((name for test, name in _KINDS if test(mode)), "a device")
        raise BadInput(f"{path}: is {kind}, not a regular file; refusing to read it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_lines(path: str) -> Iterator[tuple[int, int, dict]]:
    """(line number, end offset, record) of each complete line of a JSON-lines file.

    A last line without its newline (torn by a crash, or being written right now) is skipped;
    a complete line that is not a JSON object (or nested too deep to read) is a CorruptionError
    naming file and line.  A missing file reads as empty; a symlink, FIFO or directory in its
    place is refused without following or blocking (``open_part``).
    """
    try:
        f = open_part(path)
    except FileNotFoundError:
        return
    with f:
        pos = 0
        for lineno, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                return
            pos += len(line)
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise CorruptionError(f"{path}:{lineno}: not a JSON record ({e})") from None
            except RecursionError:
                raise CorruptionError(f"{path}:{lineno}: not a JSON record (nested too deep)") from None
            if not isinstance(rec, dict):
                raise CorruptionError(f"{path}:{lineno}: not a JSON object")
            yield lineno, pos, rec


def validators(headers: dict[str, str]) -> dict[str, str] | None:
    """The response's ETag and Last-Modified as page meta (``etag``, ``last_modified``), sent
    back as If-None-Match / If-Modified-Since on the next fetch.  A value longer than
    ``MAX_VALIDATOR`` characters or with a control character is not kept (no server needs it)."""
    out = {}
    for header, key in (("etag", "etag"), ("last-modified", "last_modified")):
        v = headers.get(header)
        if isinstance(v, str) and v and len(v) <= MAX_VALIDATOR and v.isprintable():
            out[key] = v
    return out or None


# ---- the segment --------------------------------------------------------------------------------


class Segment:
    """A segment directory.  ``Segment.create(dir)`` makes a new one; ``Segment.open(dir)``."""

    def __init__(self, path: str, info: dict) -> None:
        self.path = path
        self.info = info

    @property
    def version(self) -> int:
        return self.info["version"]

    @classmethod
    def create(cls, path: str | os.PathLike, *, version: int = SEGMENT_VERSION, **info: object) -> Segment:
        """Create the segment directory ``path`` (absent or empty); ``info`` is kept in SEGMENT.

        ``version=1`` writes the legacy ``.bin`` content (kept to test reading and upgrading)."""
        if version not in VERSIONS:
            raise BadInput(f"segment format version {version!r}: this code writes versions {VERSIONS}")
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        if os.listdir(path):
            raise BadInput(f"{path}: cannot create a segment in a non-empty directory")
        for sub in (FETCHLIST, FETCH, PARSE, CONTENT):
            os.mkdir(os.path.join(path, sub))
        ident = {"format": SEGMENT_FORMAT, "version": version, "created": int(time.time()), **info}
        write_new(os.path.join(path, SEGMENT_FILE), json.dumps(ident, indent=1).encode() + b"\n")
        return cls(path, ident)

    @classmethod
    def open(cls, path: str | os.PathLike) -> Segment:
        path = os.fspath(path)
        ident_path = os.path.join(path, SEGMENT_FILE)
        try:
            with open_part(ident_path) as f:
                text = f.read(1 << 20)
        except FileNotFoundError:
            raise BadInput(f"{path}: not a segment (no {SEGMENT_FILE} file)") from None
        except OSError as e:
            raise BadInput(f"{ident_path}: cannot read: {e.strerror}") from None
        try:
            ident = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise CorruptionError(f"{ident_path}: not JSON ({type(e).__name__}: {e})") from None
        if not isinstance(ident, dict) or ident.get("format") != SEGMENT_FORMAT:
            raise BadInput(f"{path}: {SEGMENT_FILE} does not name the format {SEGMENT_FORMAT!r}")
        if ident.get("version") not in VERSIONS or type(ident.get("version")) is not int:
            raise BadInput(
                f"{path}: segment format version {ident.get('version')!r}, this code reads versions {VERSIONS}"
            )
        if os.path.lexists(os.path.join(path, UPGRADE_DIR, SEGMENT_FILE)):
            raise BadInput(f"{path}: an upgrade was interrupted after its commit; run `webdb segment upgrade {path}`")
        for sub in (FETCHLIST, FETCH, PARSE, CONTENT):
            d = os.path.join(path, sub)
            if not os.path.isdir(d):
                raise CorruptionError(f"{d}: missing (or not a directory): not a complete segment")
        return cls(path, ident)

    def file(self, kind: str, part: int) -> str:
        """The file of ``kind`` (FETCHLIST, FETCH, PARSE, CONTENT) of partition ``part``; content is
        ``part-NNNNN.warc.gz`` (version 2) or the legacy ``part-NNNNN.bin`` (version 1)."""
        ext = (".warc.gz" if self.version >= 2 else ".bin") if kind == CONTENT else ".jsonl"
        return os.path.join(self.path, kind, f"part-{part:05d}{ext}")

    def content_index(self, part: int) -> str:
        """The WARC content index of partition ``part`` (version 2)."""
        return os.path.join(self.path, CONTENT, index_name(part))

    def parts(self) -> list[int]:
        """Partition numbers that have a fetchlist or any output."""
        found = set()
        for kind in (FETCHLIST, FETCH):
            for name in os.listdir(os.path.join(self.path, kind)):
                m = _PART_RE.fullmatch(name)
                if m:  # anything else (a temp file, a stray file) is not a part
                    found.add(int(m[1]))
        return sorted(found)

    def _parts(self, part: int | None) -> list[int]:
        return self.parts() if part is None else [part]

    # ---- fetchlist

    def write_fetchlist(self, part: int, entries: Iterable[FetchEntry]) -> int:
        """Write partition ``part``'s fetchlist once (temp file, fsync, rename); return its size."""
        path = self.file(FETCHLIST, part)
        if os.path.exists(path):
            raise BadInput(f"{path}: fetchlist already written (segments are write-once)")
        tmp = f"{path}.tmp.{os.getpid()}"
        n = 0
        if os.path.lexists(tmp):  # a leftover of a crashed write (or a planted link): never write through it
            os.unlink(tmp)
        with open(tmp, "xb") as f:
            for e in entries:
                f.write(json_line(entry_to_json(e)))
                n += 1
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        return n

    def fetchlist(self, part: int | None = None) -> Iterator[FetchEntry]:
        """The entries of one partition's fetchlist (every partition if ``part`` is None)."""
        for p in self._parts(part):
            path = self.file(FETCHLIST, p)
            for lineno, _, d in read_lines(path):
                yield entry_from_json(d, f"{path}:{lineno}")

    # ---- fetch output

    def writer(self, part: int) -> SegmentWriter:
        """The appending writer of partition ``part`` (recovers a crashed earlier writer first)."""
        return SegmentWriter(self, part)

    def fetch_records(self, part: int | None = None, *, content: bool = False) -> Iterator[FetchRecord]:
        """Fetch records in the order they were written; with ``content`` their bytes loaded."""
        for p in self._parts(part):
            with _ContentReader(self.file(CONTENT, p), self.version) as cr:
                path = self.file(FETCH, p)
                for lineno, _, d in read_lines(path):
                    r = record_from_json(d, f"{path}:{lineno}")
                    if content:
                        r.content = cr.read(r)
                    yield r

    def parse_records(self, part: int | None = None) -> Iterator[ParseResult]:
        """Parse records of fetched URLs (an orphan left by a crash is skipped)."""
        for r in self.records(part):
            if r.parse is not None:
                yield r.parse

    def content(self, record: FetchRecord, part: int) -> bytes:
        """The stored content of ``record`` (b"" if it has none), length-checked."""
        with _ContentReader(self.file(CONTENT, part), self.version) as cr:
            return cr.read(record)

    def records(self, part: int | None = None, *, content: bool = False) -> Iterator[FetchRecord]:
        """Fetch records joined with their parse records (``record.parse``)."""
        for p in self._parts(part):
            parse_path, path = self.file(PARSE, p), self.file(FETCH, p)
            parses = _Peek(read_lines(parse_path))
            with _ContentReader(self.file(CONTENT, p), self.version) as cr:
                for lineno, _, d in read_lines(path):
                    r = record_from_json(d, f"{path}:{lineno}")
                    nxt = parses.peek()
                    if (
                        nxt is not None
                        and nxt[2].get("url") == r.url
                        and r.md5 is not None
                        and (nxt[2].get("md5") == r.md5.hex())
                    ):
                        pl, _, pd = parses.take()
                        r.parse = parse_from_json(pd, f"{parse_path}:{pl}")
                    if content:
                        r.content = cr.read(r)
                    yield r
            # Parse records past the last fetch record (a crash leaves at most one) are read
            # too, so a line there that is not a JSON record is reported, not ignored.
            while parses.take() is not None:
                pass

    def outcomes(self, part: int | None = None) -> Iterator[FetchOutcome]:
        """For each fetched URL: the ``webdb.core.schedule.FetchResult`` to apply, outlinks, redirect.

        ``num_outlinks`` and ``outlinks`` come from the parse record (empty when there is none or
        the page said nofollow); ``meta`` carries the response's validators (``validators``).
        """
        for r in self.records(part):
            links = r.parse.outlinks if (r.parse is not None and r.status == Status.FETCHED) else []
            meta = validators(r.headers)
            md5 = r.md5 if r.status == Status.FETCHED else None
            res = FetchResult(r.url, int(r.status), r.fetch_time, md5, len(links), meta)
            yield FetchOutcome(res, list(links), r.redirect, r)

    def check(self) -> dict[str, int]:
        """Verify every part: records parse, parse records pair with fetch records in order,
        content references are in range with matching length prefix (v1) or WARC response
        record of the URL with a correct payload digest (v2) and md5, no URL twice; in v2 every
        content index entry but the last belongs to a fetch record.

        Return counts (``responses``: WARC response records of fetch records); raise
        CorruptionError naming the file and record on a violation.
        """
        counts = {"entries": 0, "fetched": 0, "parsed": 0, "content_bytes": 0, "responses": 0}
        for p in self.parts():
            if self.version >= 2:
                refs = {r.content_ref[0] for r in self.fetch_records(p) if r.content_ref}
                index = list(read_index(self.content_index(p)))
                orphans = [e for e in index if e.offset not in refs]
                if orphans[1:] or (orphans and orphans[0] is not index[-1]):
                    raise CorruptionError(
                        f"{self.content_index(p)}: {orphans[0].url!r} has a WARC response but no fetch record "
                        "(only the last one may, after a crash)"
                    )
                counts["responses"] += len(refs)
            counts["entries"] += sum(1 for _ in self.fetchlist(p))
            seen: set[str] = set()
            parsed = 0
            fetch_path = self.file(FETCH, p)
            for r in self.records(p, content=True):
                if r.url in seen:
                    raise CorruptionError(f"{fetch_path}: {r.url!r} has two fetch records")
                seen.add(r.url)
                parsed += r.parse is not None
                counts["content_bytes"] += len(r.content)
                if r.status == Status.FETCHED and r.md5 != hashlib.md5(r.content).digest():
                    raise CorruptionError(f"{fetch_path}: content of {r.url!r} does not match its md5")
            parse_path = self.file(PARSE, p)
            unmatched = sum(1 for _ in read_lines(parse_path)) - parsed
            if unmatched > 1:
                raise CorruptionError(
                    f"{parse_path}: {unmatched} parse records are not paired in order "
                    "with fetch records (at most one, the last, may be)"
                )
            counts["fetched"] += len(seen)
            counts["parsed"] += parsed
        return counts

    def __repr__(self) -> str:
        return f"Segment({self.path!r})"


class _Peek:
    def __init__(self, it: Iterator) -> None:
        self._it, self._next, self._done = it, None, False

    def peek(self):
        if self._next is None and not self._done:
            self._next = next(self._it, None)
            self._done = self._next is None
        return self._next

    def take(self):
        v = self.peek()
        self._next = None
        return v


class _ContentReader:
    """Reads the content of fetch records from a part's content file (opened no-follow, once)."""

    def __init__(self, path: str, version: int = SEGMENT_VERSION) -> None:
        self.path, self.version, self._f = path, version, None

    def __enter__(self) -> _ContentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._f is not None:
            self._f.close()

    def read(self, r: FetchRecord) -> bytes:
        if r.content_ref is None:
            return b""
        off, n = r.content_ref
        if self._f is None:
            try:
                self._f = open_nofollow(self.path)
            except FileNotFoundError:
                raise CorruptionError(f"{self.path}: missing, but {r.url!r} refers to it") from None
        head = _LEN.size if self.version < 2 else 0
        if off + head + n > os.fstat(self._f.fileno()).st_size:  # read nothing past the end
            raise CorruptionError(f"{self.path}: content of {r.url!r} at offset {off} is not {n} bytes")
        if self.version >= 2:
            # The response record of this URL, its payload digest checked.
            resp = read_response_at(self._f, self.path, off, r.url)
            if resp.length != n:
                raise CorruptionError(f"{self.path}: the response of {r.url!r} at offset {off} is not {n} bytes")
            return resp.body
        self._f.seek(off)
        head = self._f.read(_LEN.size)
        data = self._f.read(n)
        if len(head) != _LEN.size or _LEN.unpack(head)[0] != n or len(data) != n:
            raise CorruptionError(f"{self.path}: content of {r.url!r} at offset {off} is not {n} bytes")
        return data


def exchange_of(r: FetchRecord) -> Exchange:
    """The WARC exchange of a FETCHED record: the wire data the fetcher kept (``raw_headers`` …),
    or, for a record without them (a v1 segment being upgraded), its kept headers."""
    status = r.http_status or 200
    try:
        reason = r.reason or http.HTTPStatus(status).phrase
    except ValueError:
        reason = r.reason
    return Exchange(
        url=r.url,
        fetch_time=r.start if r.start is not None else float(r.fetch_time),
        status=status,
        reason=reason,
        headers=list(r.raw_headers) if r.raw_headers is not None else list(r.headers.items()),
        body=r.content or b"",
        request_headers=list(r.request_headers),
        protocol=r.protocol,
        truncated=r.truncated,
        elapsed=r.elapsed,
        outlinks=list(r.parse.outlinks) if r.parse is not None else [],
    )


class SegmentWriter:
    """Appends fetch records of one partition (thread-safe; one process per partition).

    Opening recovers what a crashed writer left (see the module docstring); ``done`` is then
    the set of URLs that already have a fetch record.  Every ``write`` appends and flushes the
    content, parse and fetch record, so a killed process loses at most the record in flight;
    ``close`` also fsyncs.
    """

    def __init__(self, segment: Segment, part: int) -> None:
        self.segment, self.part = segment, part
        self._lock = threading.Lock()
        fetch_path = segment.file(FETCH, part)
        self._fetch = open_append(fetch_path)
        try:
            fcntl.flock(self._fetch.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fetch.close()
            raise BadInput(f"{fetch_path}: partition {part} is being written by another process") from None
        self._content = self._warc = None
        try:
            self._parse = open_append(segment.file(PARSE, part))
        except BaseException:
            self._fetch.close()
            raise
        try:
            if segment.version >= 2:
                self._warc = WarcWriter(os.path.join(segment.path, CONTENT), part, opener=open_append)
            else:
                self._content = open_append(segment.file(CONTENT, part))
        except BaseException:
            self._parse.close()
            self._fetch.close()
            raise
        self.done: set[str] = set()
        self.written = 0
        try:
            self._recover()
        except BaseException:
            self._close_files(sync=False)
            raise

    def _recover(self) -> None:
        end, last_md5 = 0, {}
        content_end = 0
        path = self.segment.file(FETCH, self.part)
        content_path = self.segment.file(CONTENT, self.part)
        content = self._content if self._warc is None else self._warc._warc
        content_size = os.fstat(content.fileno()).st_size
        # v2: the WARC index is the content's commit point (WarcWriter has cut the file back to
        # its last entry); each content reference must be an entry of the same URL.
        entries = {e.offset: e for e in self._warc.entries} if self._warc is not None else {}
        head = _LEN.size if self._warc is None else 0
        for lineno, pos, d in read_lines(path):
            r = record_from_json(d, f"{path}:{lineno}")
            end = pos
            self.done.add(r.url)
            last_md5[r.url] = d["md5"]
            if r.content_ref:
                ref_end = r.content_ref[0] + head + r.content_ref[1]
                if ref_end > content_size:  # never extend the content file to meet a reference
                    raise CorruptionError(
                        f"{path}:{lineno}: content reference {list(r.content_ref)} ends at byte {ref_end}, "
                        f"beyond the end of {content_path} ({content_size} bytes)"
                    )
                if self._warc is not None:
                    e = entries.get(r.content_ref[0])
                    if e is None or e.url != r.url or e.length != r.content_ref[1]:
                        raise CorruptionError(
                            f"{path}:{lineno}: content reference {list(r.content_ref)} is not the response of "
                            f"{r.url!r} in {self._warc.index_path}"
                        )
                    ref_end = e.end
                content_end = max(content_end, ref_end)
        self._fetch.truncate(end)
        pend, prev_end, last = 0, 0, None
        for _, pos, d in read_lines(self.segment.file(PARSE, self.part)):
            prev_end, pend, last = pend, pos, d
        if last is not None and last_md5.get(last.get("url"), "") != last.get("md5"):
            pend = prev_end  # the parse record of a fetch that never committed
        self._parse.truncate(pend)
        if self._warc is not None:
            self._warc.truncate(content_end or None)  # drop an exchange whose fetch record is missing
        else:
            self._content.truncate(content_end)
        for f in (self._fetch, self._parse, self._content):
            if f is not None:
                f.seek(0, os.SEEK_END)

    def write(self, r: FetchRecord) -> None:
        """Append ``r`` (its content and parse record too).  ``r.content_ref`` is set.

        Version 2: a FETCHED record (or any with content) gets its WARC exchange (request,
        response, metadata) and ``content_ref`` = (offset, length) of the response record."""
        with self._lock:
            if self._warc is not None:
                if r.status == Status.FETCHED or r.content:
                    loc = self._warc.write(r.warc if r.warc is not None else exchange_of(r))
                    r.content_ref = (loc.offset, loc.length)
            elif r.content:
                off = self._content.tell()
                self._content.write(_LEN.pack(len(r.content)))
                self._content.write(r.content)
                self._content.flush()
                r.content_ref = (off, len(r.content))
            if r.parse is not None:
                self._parse.write(json_line(parse_to_json(r.parse)))
                self._parse.flush()
            self._fetch.write(json_line(record_to_json(r)))
            self._fetch.flush()
            self.done.add(r.url)
            self.written += 1

    def _close_files(self, sync: bool) -> None:
        if self._warc is not None:
            if sync:
                self._warc.close()
            else:
                for f in (self._warc._warc, self._warc._index):
                    f.close()
        for f in (self._content, self._parse, self._fetch):
            if f is not None and not f.closed:
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
                f.close()

    def close(self) -> None:
        with self._lock:
            self._close_files(sync=True)

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_append(path: str):
    """Open a part file for appending without following a symlink (at the file or at its
    folder inside the segment): a planted link could otherwise make us write anywhere."""
    folder = os.path.dirname(path)
    if os.path.islink(folder) or not os.path.isdir(folder):
        raise BadInput(f"{folder}: not a directory of the segment (a symlink or missing); refusing to write")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadInput(f"{path}: is a symlink; refusing to write through it") from None
        raise BadInput(f"{path}: cannot open for writing: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"{path}: not a regular file; refusing to write")
    return os.fdopen(fd, "ab+")


def write_new(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file, fsynced, renamed."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
