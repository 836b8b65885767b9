"""Page and Link records, their statuses, and their key and value encodings.

Key encodings make byte order equal the logical order of each table:

=============  ===============================  =======================
table          logical key                      encoded key
=============  ===============================  =======================
PagesByURL     url                              url
PagesByMD5     (md5, url)                       md5(16) url
LinksByMD5     (fromID, url)                    fromID(16) url
LinksByURL     (url, fromID)                    url 0x00 fromID(16)
=============  ===============================  =======================

A URL never holds a NUL byte (``validate_url`` rejects it), so ``url 0x00`` sorts before any
longer URL that has ``url`` as a prefix.  MD5s are fixed width, so ``md5 url`` needs no separator.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
import struct
from dataclasses import dataclass, field

from webdb.errors import BadInput
from webdb.tables.pagecodec import LINK, LINK_FIXED, LINK_OUT, PAGE, PAGE_FIXED

__all__ = ["Page", "Link", "Status", "validate_url", "url_md5", "DAY", "NEVER"]

DAY = 86400
NEVER = 2**62  # next_fetch of a page that must never be fetched again
DEFAULT_INTERVAL = 30 * DAY
MAX_URL_BYTES = 8192
_BAD_URL_CHAR = re.compile(r"[\x00-\x20\x7f]")
DEFAULT_ANCHOR_MAX = 100


class Status(enum.IntEnum):
    """What the db knows of a page.  Values are stored on disk: never renumber."""

    UNFETCHED = 0
    FETCHED = 1
    RETRY = 2  # the last fetch failed transiently; it will be retried
    GONE = 3  # 404/410/robots-denied or too many retries: never refetched
    REDIRECT_TEMP = 4
    REDIRECT_PERM = 5
    NOT_MODIFIED = 6
    DUPLICATE = 7  # content equal to another page's (see webdb dedup)


def url_md5(url: str) -> bytes:
    """The md5 a never-fetched page carries: MD5 of its URL bytes (as the original WebDB)."""
    return hashlib.md5(url.encode("utf-8", "surrogatepass")).digest()


def validate_url(url: object, max_bytes: int = MAX_URL_BYTES) -> bytes:
    """Return the URL's key bytes or raise BadInput naming it.

    Accepted: a str with a scheme ("x://"), no NUL, no whitespace or control characters, valid
    UTF-8 (no lone surrogates), at most ``max_bytes`` bytes.  Normalization is the job of
    ``fetchlist.normalize``; the core stores what it is given.
    """
    if not isinstance(url, str):
        raise BadInput(f"url must be a str, not {type(url).__name__}: {url!r:.200}")
    try:
        b = url.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"url is not valid UTF-8 (lone surrogate): {url!r:.200}") from None
    if len(b) > max_bytes:
        raise BadInput(f"url too long ({len(b)} bytes > {max_bytes}): {url[:100]!r}...")
    if "://" not in url[:32] or url.startswith("://"):
        raise BadInput(f"url has no scheme: {url!r:.200}")
    bad = _BAD_URL_CHAR.search(url)
    if bad:
        raise BadInput(f"url holds a control or space character {bad.group()!r}: {url!r:.200}")
    return b


@dataclass(slots=True)
class Page:
    """One page of the db.  Times are seconds since the epoch; ``fetch_interval`` is seconds.

    ``md5`` is the 16-byte digest of the content; a page never fetched carries ``url_md5(url)``
    (the default).  ``meta`` is a small str→str map (e.g. ``{"fit": "1"}`` for focused crawls).
    """

    url: str
    md5: bytes = b""
    status: int = Status.UNFETCHED
    fetch_time: int = 0
    next_fetch: int = 0
    retries: int = 0
    fetch_interval: int = DEFAULT_INTERVAL
    num_outlinks: int = 0
    score: float = 1.0
    next_score: float = 1.0
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.md5:
            self.md5 = url_md5(self.url) if isinstance(self.url, str) else b""

    @property
    def fetched(self) -> bool:
        return self.status != Status.UNFETCHED

    def encode_value(self) -> bytes:
        """Value bytes (everything but the url); layout in pagecodec.py and docs/format.md."""
        try:
            v = PAGE.pack(
                self.md5,
                self.status,
                self.fetch_time,
                self.next_fetch,
                self.retries,
                self.fetch_interval,
                self.num_outlinks,
                self.score,
                self.next_score,
            )
        except struct.error as e:
            raise BadInput(f"page {self.url!r:.200} has a field out of range: {e}") from None
        if len(self.md5) != 16:
            raise BadInput(f"page {self.url!r:.200}: md5 must be 16 bytes, got {len(self.md5)}")
        if self.meta:
            v += json.dumps(self.meta, separators=(",", ":"), sort_keys=True).encode("utf-8", "replace")
        return v

    @classmethod
    def decode(cls, url: str, value: bytes) -> Page:
        md5, st, ft, nf, r, iv, no, sc, ns = PAGE.unpack_from(value)
        meta = json.loads(value[PAGE_FIXED:]) if len(value) > PAGE_FIXED else {}
        return cls(url, md5, st, ft, nf, r, iv, no, sc, ns, meta)


@dataclass(slots=True)
class Link:
    """A link from the content ``from_id`` (md5 of the source page) to ``url``.

    ``domain_id`` is a 64-bit hash of the source host (0 = unknown); ``anchor`` is truncated by
    the writer; ``target_has_outlink`` is maintained by the db (the target page exists and has
    ``num_outlinks > 0``).
    """

    from_id: bytes
    url: str
    anchor: str = ""
    domain_id: int = 0
    target_has_outlink: bool = False

    def encode_value(self) -> bytes:
        return LINK.pack(self.domain_id, LINK_OUT if self.target_has_outlink else 0) + self.anchor.encode(
            "utf-8", "replace"
        )

    @classmethod
    def decode(cls, from_id: bytes, url: str, value: bytes) -> Link:
        d, f = LINK.unpack_from(value)
        return cls(from_id, url, value[LINK_FIXED:].decode("utf-8", "replace"), d, bool(f & LINK_OUT))


def domain_id(host: str) -> int:
    """64-bit signed hash of a lowercased host name (stable across runs and machines)."""
    digest = hashlib.md5(host.lower().encode("utf-8", "replace")).digest()
    return int.from_bytes(digest[:8], "little", signed=True)
