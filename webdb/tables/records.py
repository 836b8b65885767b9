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
from dataclasses import dataclass, field, fields

from webdb.errors import BadInput
from webdb.tables.pagecodec import LINK, LINK_FIXED, LINK_OUT, PAGE, PAGE_FIXED

__all__ = [
    "Page",
    "PAGE_FIELDS",
    "Link",
    "Status",
    "validate_url",
    "validate_page",
    "validate_link",
    "validate_fetch",
    "url_md5",
    "DAY",
    "NEVER",
]

DAY = 86400
NEVER = 2**62  # next_fetch of a page that must never be fetched again
DEFAULT_INTERVAL = 30 * DAY
MAX_URL_BYTES = 8192
BAD_URL_CHAR = re.compile(r"[\x00-\x20\x7f]")
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
    bad = BAD_URL_CHAR.search(url)
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


_I64 = (-(2**63), 2**63 - 1)
_U32 = (0, 2**32 - 1)
# Field ranges of a page value (docs/format.md §3).
_PAGE_INTS = (
    ("status", (0, 255)),
    ("fetch_time", _I64),
    ("next_fetch", _I64),
    ("retries", (0, 0xFFFF)),
    ("fetch_interval", _U32),
    ("num_outlinks", _U32),
)


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(v: object) -> bool:
    """A str webdb can store: valid Unicode (a lone surrogate is refused, as in a URL)."""
    if not isinstance(v, str):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_page(page: Page) -> None:
    """Raise BadInput naming the field if ``page`` does not fit its value (docs/format.md §3).
    The URL is checked by ``validate_url``."""
    name = f"page {page.url!r:.200}"
    if not isinstance(page.md5, bytes) or len(page.md5) != 16:
        raise BadInput(f"{name}: md5 must be 16 bytes, not {page.md5!r:.60}")
    for f, (lo, hi) in _PAGE_INTS:
        v = getattr(page, f)
        if not _whole(v) or not lo <= v <= hi:
            raise BadInput(f"{name}: {f} must be a whole number in {lo}..{hi}, not {v!r:.60}")
    for f in ("score", "next_score"):
        v = getattr(page, f)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v:
            raise BadInput(f"{name}: {f} must be a number, not {v!r:.60}")
    if not isinstance(page.meta, dict):
        raise BadInput(f"{name}: meta must be a dict of str to str, not {type(page.meta).__name__}")
    for k, v in page.meta.items():
        if not _text(k) or not _text(v):
            raise BadInput(f"{name}: meta {k!r:.60}: keys and values must be str (no lone surrogates), not {v!r:.60}")


def validate_link(link: Link) -> None:
    """Raise BadInput naming the field if ``link`` does not fit its value.  The URL is checked
    by ``validate_url``; a lone surrogate in the anchor is refused, as in a URL."""
    name = f"link to {link.url!r:.200}"
    if not isinstance(link.from_id, bytes) or len(link.from_id) != 16:
        raise BadInput(f"{name}: from_id must be a 16-byte md5, not {link.from_id!r:.60}")
    if not _text(link.anchor):
        raise BadInput(f"{name}: anchor must be a str without lone surrogates, not {link.anchor!r:.60}")
    check_domain_id(link.domain_id, name)
    if not isinstance(link.target_has_outlink, bool):
        raise BadInput(f"{name}: target_has_outlink must be a bool, not {link.target_has_outlink!r:.60}")


def validate_fetch(result) -> None:
    """Raise BadInput naming the field if a FetchResult's fields do not fit its edit record."""
    name = f"fetch result for {result.url!r:.200}"
    if not _whole(result.fetch_time) or not _I64[0] <= result.fetch_time <= _I64[1]:
        raise BadInput(f"{name}: fetch_time must be a whole number of seconds, not {result.fetch_time!r:.60}")
    if result.md5 is not None and (not isinstance(result.md5, bytes) or len(result.md5) not in (0, 16)):
        raise BadInput(f"{name}: md5 must be 16 bytes or None, not {result.md5!r:.60}")
    if not _whole(result.num_outlinks) or not _U32[0] <= result.num_outlinks <= _U32[1]:
        raise BadInput(f"{name}: num_outlinks must be a whole number in 0..{_U32[1]}, not {result.num_outlinks!r:.60}")
    meta = result.meta
    if meta is not None and (not isinstance(meta, dict) or not all(_text(k) and _text(v) for k, v in meta.items())):
        raise BadInput(f"{name}: meta must be a dict of str to str (no lone surrogates), not {meta!r:.60}")


def check_domain_id(v: object, name: str) -> None:
    if not _whole(v) or not _I64[0] <= v <= _I64[1]:
        raise BadInput(f"{name}: domain_id must be a whole number in {_I64[0]}..{_I64[1]}, not {v!r:.60}")


# Page's fields in order: the columns of a pages dump and of the bulk load's page table.
PAGE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Page))


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
