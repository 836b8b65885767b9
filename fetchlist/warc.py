"""Fetched content as WARC/1.1 (ISO 28500:2017), written and read with warcio.

One fetch partition writes one WARC file and its content index::

    content/part-NNNNN.warc.gz          warcinfo, then per fetched URL: request, response, metadata
    content/part-NNNNN.index.jsonl      one line per response record: URL → file, offset, length

Every record is its own gzip member (the usual ``.warc.gz``), so a record can be read by
seeking to its offset.  For each fetch:

- ``request``: the request line and headers as sent (``GET /path HTTP/1.1``, ``Host``, …).
- ``response``: the status line and headers as received, then the body.  The fetcher keeps the
  body after undoing ``Content-Encoding`` (that is what it parses and digests), so, as Common
  Crawl does, headers that no longer describe the stored body (``Content-Encoding``,
  ``Transfer-Encoding``, a ``Content-Length`` of another size) are renamed ``X-Crawler-…`` and
  a ``Content-Length`` of the stored body is added: any WARC reader then gets the stored bytes
  as the payload, and ``WARC-Payload-Digest`` (SHA-1, base32) is theirs.  A body cut at
  ``max_content`` carries ``WARC-Truncated: length``.
- ``metadata`` (``application/warc-fields``, ``WARC-Concurrent-To`` the response):
  ``fetchTimeMs`` (the request's duration) and one ``outlink: URL ANCHOR`` line per outlink.

The index line of a URL is written after its three records, flushed, and is the WARC file's
commit point: ``WarcWriter`` opened on an existing partition cuts the WARC file back to the end
of the last indexed exchange (a crash leaves at most a torn record after it) and the index to
its last complete line.  ``truncate(end)`` cuts further (the segment does so to drop exchanges
whose fetch record was never written).

Cost: one gzip member per record (about 0.3 KiB of headers each besides the body); reading a
body is one seek and the decompression of one record.
"""

from __future__ import annotations

import base64
import datetime
import errno
import hashlib
import io
import json
import os
import stat
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from webdb.errors import BadInput, CorruptionError

__all__ = [
    "EncodedExchange",
    "Exchange",
    "WarcLocation",
    "WarcResponse",
    "WarcWriter",
    "content_index",
    "encode_exchange",
    "index_warc",
    "open_nofollow",
    "read_index",
    "read_metadata",
    "read_response",
]

WARC_VERSION = "WARC/1.1"
WARC_SUFFIX = ".warc.gz"
INDEX_SUFFIX = ".index.jsonl"
MAX_OFFSET = 1 << 40  # the largest offset a segment refers to (1 TiB)
# zlib's (and gzip's) default level: on HTML 2.5 times faster than warcio's 9, 2 % larger.
GZIP_LEVEL = 6
# Response headers that describe the bytes on the wire, not the stored (decoded) body.
_RENAMED = ("content-encoding", "transfer-encoding", "content-length")


def warc_name(part: int) -> str:
    return f"part-{part:05d}{WARC_SUFFIX}"


def index_name(part: int) -> str:
    return f"part-{part:05d}{INDEX_SUFFIX}"


@dataclass(slots=True)
class Exchange:
    """One fetch as the WARC records need it.

    ``headers`` are the response headers as received, in order, repeats included
    (``list(resp.raw.headers.items())`` with requests); ``body`` is the content as kept by
    the fetcher (after Content-Encoding is undone); ``fetch_time`` is seconds since the epoch
    when the request started; ``elapsed`` its duration in seconds.
    """

    url: str
    fetch_time: float
    status: int
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    method: str = "GET"
    protocol: str = "HTTP/1.1"
    truncated: bool = False
    elapsed: float = 0.0
    outlinks: list[tuple[str, str]] = field(default_factory=list)
    ip: str | None = None


@dataclass(frozen=True, slots=True)
class WarcLocation:
    """Where a response record is: ``file`` (name inside ``content/``), byte ``offset`` of its
    gzip member, and the member's ``length``; ``end`` is where the URL's exchange ends."""

    url: str
    file: str
    offset: int
    length: int
    end: int
    digest: str = ""

    def to_json(self) -> dict:
        return {
            "url": self.url,
            "file": self.file,
            "offset": self.offset,
            "length": self.length,
            "end": self.end,
            "digest": self.digest,
        }


@dataclass(slots=True)
class WarcResponse:
    """A response record read back: target URL, HTTP status and headers, body, digests."""

    url: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    date: str
    payload_digest: str
    truncated: bool
    length: int = 0  # of the record's gzip member


def sha1_digest(data: bytes) -> str:
    """A WARC digest value: ``sha1:`` + base32 of the SHA-1 (as warcio writes and checks)."""
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def _iso(t: float) -> str:
    dt = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).replace(tzinfo=None)  # warcio wants naive UTC
    return datetime_to_iso_date(dt, use_micros=True)


def _field(v: str) -> str:
    """A header or warc-fields value on one line."""
    return " ".join(v.split())


def read_index(path: str) -> Iterator[WarcLocation]:
    """The entries of a content index, complete lines only (a torn last line is skipped)."""
    try:
        f = open_nofollow(path)
    except FileNotFoundError:
        return
    with f:
        yield from _index_lines(f, path)


def _index_lines(f, path: str) -> Iterator[WarcLocation]:
    for lineno, line in enumerate(f, 1):
        if not line.endswith(b"\n"):
            return
        try:
            d = json.loads(line)
            loc = WarcLocation(d["url"], d["file"], d["offset"], d["length"], d["end"], d.get("digest", ""))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptionError(f"{path}:{lineno}: not a content index entry ({e})") from None
        nums = (loc.offset, loc.length, loc.end)
        if not (
            isinstance(loc.url, str)
            and isinstance(loc.file, str)
            and isinstance(loc.digest, str)
            and all(type(x) is int for x in nums)
            and 0 <= loc.offset < loc.offset + loc.length <= loc.end <= MAX_OFFSET
        ):
            raise CorruptionError(
                f"{path}:{lineno}: content index entry needs 0 <= offset < offset + length <= end, not {line[:120]!r}"
            )
        yield loc


def open_nofollow(path: str, mode: str = "rb"):
    """Open ``path`` without following a symlink and only if it is a regular file: a planted
    link or FIFO in a segment must never make us read or write elsewhere (or block).
    ``mode`` is ``rb`` (read) or ``ab+`` (append, created if missing)."""
    flags = os.O_RDONLY if mode == "rb" else os.O_RDWR | os.O_CREAT | os.O_APPEND
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, e.strerror, path) from None
        if e.errno == errno.ELOOP:
            raise BadInput(f"{path}: is a symlink; refusing to open it") from None
        raise BadInput(f"{path}: cannot open: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"{path}: not a regular file; refusing to open it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, mode)


@dataclass(slots=True)
class EncodedExchange:
    """An exchange's request, response and metadata records, each its own gzip member, ready
    to be appended: ``data``; the response record is ``data[response_offset:][:response_length]``;
    ``digest`` is the body's (``sha1_digest``)."""

    url: str
    data: bytes
    response_offset: int
    response_length: int
    digest: str


def encode_exchange(ex: Exchange) -> EncodedExchange:
    """The three WARC records of ``ex``, compressed: the CPU part of ``WarcWriter.write``, which
    a fetcher runs in its worker processes.  Cost: one pass of gzip and SHA-1 over the body."""
    raw = io.BytesIO()
    w = WARCWriter(raw, gzip=False, warc_version=WARC_VERSION)
    date = _iso(ex.fetch_time)
    resp_id = f"<urn:uuid:{uuid.uuid4()}>"
    common = {"WARC-Date": date}
    if ex.ip:
        common["WARC-IP-Address"] = ex.ip
    request = _gzip_member(w, raw, _request(w, ex, common, resp_id))
    response = _gzip_member(w, raw, _response(w, ex, common, resp_id))
    metadata = _gzip_member(w, raw, _metadata(w, ex, date, resp_id))
    return EncodedExchange(ex.url, request + response + metadata, len(request), len(response), sha1_digest(ex.body))


def _gzip_member(w: WARCWriter, raw: io.BytesIO, rec) -> bytes:
    """``rec`` as written by ``w`` (into ``raw``), as one gzip member of GZIP_LEVEL."""
    raw.seek(0)
    raw.truncate()
    w.write_record(rec)
    z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS + 16)
    return z.compress(raw.getbuffer()) + z.flush()


def _response(w: WARCWriter, ex: Exchange, common: dict, resp_id: str):
    size = str(len(ex.body))
    # Headers as received, but for those that no longer describe the stored body.
    stale = {
        k.lower()
        for k, v in ex.headers
        if k.lower() in _RENAMED and not (k.lower() == "content-length" and v.strip() == size)
    }
    if stale - {"content-length"}:
        stale.add("content-length")
    headers = [(f"X-Crawler-{k}" if k.lower() in stale else k, _field(v)) for k, v in ex.headers]
    if not any(k.lower() == "content-length" for k, _ in headers):
        headers.append(("Content-Length", size))
    status = f"{ex.status} {_field(ex.reason)}".rstrip()
    http = StatusAndHeaders(status, headers, protocol=ex.protocol)
    wh = {**common, "WARC-Record-ID": resp_id}
    if ex.truncated:
        wh["WARC-Truncated"] = "length"
    return w.create_warc_record(
        ex.url,
        "response",
        payload=io.BytesIO(ex.body),
        length=len(ex.body),
        warc_headers_dict=wh,
        http_headers=http,
    )


def _request(w: WARCWriter, ex: Exchange, common: dict, resp_id: str):
    u = urlsplit(ex.url)
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    headers = [(k, _field(v)) for k, v in ex.request_headers]
    if not any(k.lower() == "host" for k, _ in headers):
        headers.insert(0, ("Host", u.netloc))
    http = StatusAndHeaders(f"{ex.method} {target} {ex.protocol}", headers, is_http_request=True)
    wh = {**common, "WARC-Concurrent-To": resp_id}
    return w.create_warc_record(ex.url, "request", warc_headers_dict=wh, http_headers=http)


def _metadata(w: WARCWriter, ex: Exchange, date: str, resp_id: str):
    lines = [f"fetchTimeMs: {round(ex.elapsed * 1000)}"]
    lines += [f"outlink: {u} {_field(a)}".rstrip() for u, a in ex.outlinks]
    body = ("\r\n".join(lines) + "\r\n").encode("utf-8")
    wh = {"WARC-Date": date, "WARC-Concurrent-To": resp_id}
    return w.create_warc_record(
        ex.url,
        "metadata",
        payload=io.BytesIO(body),
        length=len(body),
        warc_content_type="application/warc-fields",
        warc_headers_dict=wh,
    )


class WarcWriter:
    """Appends the WARC records of one partition and their index (thread-safe).

    ``WarcWriter(content_dir, part)`` opens (or creates) ``part-NNNNN.warc.gz`` and its index
    in ``content_dir``, recovering what a crashed writer left (see the module docstring).
    """

    def __init__(
        self,
        content_dir: str,
        part: int,
        software: str = "webdb fetchlist",
        opener: Callable[[str], object] | None = None,
    ) -> None:
        self.name = warc_name(part)
        self.path = os.path.join(content_dir, self.name)
        self.index_path = os.path.join(content_dir, index_name(part))
        self._lock = threading.Lock()
        opener = opener or (lambda p: open_nofollow(p, "ab+"))
        self._warc = opener(self.path)
        try:
            self._index = opener(self.index_path)
        except BaseException:
            self._warc.close()
            raise
        try:
            self._w = WARCWriter(self._warc, gzip=True, warc_version=WARC_VERSION)
            self._index.seek(0)
            self.entries = list(_index_lines(self._index, self.index_path))
            self._check_entries()
            self.truncate(self.entries[-1].end if self.entries else None)
        except BaseException:
            self._warc.close()
            self._index.close()
            raise
        if self._warc.tell() == 0:
            info = {"software": software, "format": "WARC File Format 1.1", "conformsTo": "ISO 28500:2017"}
            self._w.write_record(self._w.create_warcinfo_record(self.name, info))
            self._warc.flush()
        self._start = self._warc.tell()

    def _check_entries(self) -> None:
        """Index entries must follow each other inside the WARC file as it is: a crafted or
        stale index is an error, never a reason to extend the file."""
        size = os.fstat(self._warc.fileno()).st_size
        prev = 0
        for i, e in enumerate(self.entries, 1):
            if e.file != self.name or e.offset < prev or e.end > size:
                raise CorruptionError(
                    f"{self.index_path}:{i}: entry {e.url!r} at [{e.offset}, {e.end}) does not lie after the "
                    f"previous one inside {self.path} ({size} bytes)"
                )
            prev = e.end

    def truncate(self, end: int | None) -> None:
        """Cut the WARC file at ``end`` (an exchange's end; None: after the warcinfo record, or
        empty) and drop index entries past it."""
        with self._lock:
            keep = [e for e in self.entries if end is not None and e.end <= end]
            if end is None:
                end = self._first_end()
            self._warc.truncate(end)
            self._warc.seek(0, os.SEEK_END)
            self._index.truncate(0)
            self._index.write(b"".join(json.dumps(e.to_json()).encode() + b"\n" for e in keep))
            self._index.flush()
            self.entries = keep

    def _first_end(self) -> int:
        """End of the warcinfo record at the start of the file (0 if there is none)."""
        self._warc.seek(0)
        try:
            it = ArchiveIterator(self._warc)
            rec = next(it, None)
            if rec is None or rec.rec_type != "warcinfo":
                return 0
            it.read_to_end(rec)
            return it.get_record_offset() + it.get_record_length()
        except (ArchiveLoadFailed, OSError, EOFError, ValueError):
            return 0  # a torn first record: start the file again

    def write(self, ex: Exchange | EncodedExchange) -> WarcLocation:
        """Append the request, response and metadata records of ``ex`` and its index line
        (``ex`` may come encoded already, by ``encode_exchange`` in another process)."""
        enc = ex if isinstance(ex, EncodedExchange) else encode_exchange(ex)
        with self._lock:
            start = self._warc.tell()
            self._warc.write(enc.data)
            loc = WarcLocation(
                enc.url, self.name, start + enc.response_offset, enc.response_length, start + len(enc.data), enc.digest
            )
            self._warc.flush()
            self._index.write(json.dumps(loc.to_json()).encode() + b"\n")
            self._index.flush()
            self.entries.append(loc)
            return loc

    def close(self) -> None:
        with self._lock:
            for f in (self._warc, self._index):
                if not f.closed:
                    f.flush()
                    os.fsync(f.fileno())
                    f.close()

    def __enter__(self) -> WarcWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_response(path: str, offset: int, url: str | None = None, verify: bool = True) -> WarcResponse:
    """The response record at ``offset`` of the WARC file ``path``.

    With ``url``, the record must be that URL's; with ``verify``, its payload must match its
    ``WARC-Payload-Digest``.  Anything else is a CorruptionError naming file and offset.
    """
    try:
        f = open_nofollow(path)
    except FileNotFoundError:
        raise CorruptionError(f"{path}: missing WARC file") from None
    with f:
        return read_response_at(f, path, offset, url, verify)


def read_response_at(f, path: str, offset: int, url: str | None = None, verify: bool = True) -> WarcResponse:
    """``read_response`` on an open file ``f`` (of ``path``, named in errors)."""
    where = f"{path} at offset {offset}"
    f.seek(offset)
    try:
        it = ArchiveIterator(f)
        rec = next(it, None)
        if rec is None:
            raise CorruptionError(f"{where}: no WARC record")
        body = rec.raw_stream.read()
        it.read_to_end(rec)
        length = it.get_record_length()
    except (ArchiveLoadFailed, OSError, EOFError, ValueError) as e:
        raise CorruptionError(f"{where}: unreadable WARC record ({e})") from None
    h = rec.rec_headers
    target = h.get_header("WARC-Target-URI")
    if rec.rec_type != "response":
        raise CorruptionError(f"{where}: a {rec.rec_type} record, not a response")
    if url is not None and target != url:
        raise CorruptionError(f"{where}: the response of {target!r}, not of {url!r}")
    digest = h.get_header("WARC-Payload-Digest") or ""
    if verify and digest != sha1_digest(body):
        raise CorruptionError(f"{where}: payload of {target!r} does not match its WARC-Payload-Digest")
    http = rec.http_headers
    return WarcResponse(
        url=target,
        status=int(http.get_statuscode() or 0),
        headers=list(http.headers),
        body=body,
        date=h.get_header("WARC-Date"),
        payload_digest=digest,
        truncated=h.get_header("WARC-Truncated") is not None,
        length=length,
    )


def index_warc(path: str) -> Iterator[WarcLocation]:
    """Rebuild the content index of a WARC file from the file alone (``warcio`` iteration):
    one entry per response record, its exchange ending before the next request or response."""
    name = os.path.basename(path)
    pending: WarcLocation | None = None
    with open_nofollow(path) as f:
        it = ArchiveIterator(f)
        for rec in it:
            digest = rec.rec_headers.get_header("WARC-Payload-Digest") or ""
            it.read_to_end(rec)
            off, n = it.get_record_offset(), it.get_record_length()
            if rec.rec_type in ("request", "response") and pending is not None:
                yield pending
                pending = None
            if rec.rec_type == "response":
                pending = WarcLocation(rec.rec_headers.get_header("WARC-Target-URI"), name, off, n, off + n, digest)
            elif pending is not None:
                pending = WarcLocation(pending.url, name, pending.offset, pending.length, off + n, pending.digest)
    if pending is not None:
        yield pending


def read_metadata(path: str, offset: int) -> dict[str, list[str]]:
    """The warc-fields of the metadata record at ``offset``: name → values in order."""
    with open_nofollow(path) as f:
        f.seek(offset)
        rec = next(iter(ArchiveIterator(f)), None)
        if rec is None or rec.rec_type != "metadata":
            raise CorruptionError(f"{path} at offset {offset}: not a metadata record")
        text = rec.content_stream().read().decode("utf-8")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            out.setdefault(name.strip(), []).append(value.strip())
    return out


def content_index(content_dir: str) -> dict[str, WarcLocation]:
    """URL → location of its response over every partition's index in ``content_dir`` (a
    segment's ``content/``).  Memory: one entry per fetched URL of the segment."""
    out: dict[str, WarcLocation] = {}
    for name in sorted(os.listdir(content_dir)):
        if name.endswith(INDEX_SUFFIX):
            for loc in read_index(os.path.join(content_dir, name)):
                out[loc.url] = loc
    return out
