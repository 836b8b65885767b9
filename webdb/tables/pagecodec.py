"""The byte layouts of Page and Link values: the one module that knows their offsets.

Layouts (docs/format.md §3, little-endian)::

    Page:  md5(16) status(u8) fetch_time(i64) next_fetch(i64) retries(u16) fetch_interval(u32)
           num_outlinks(u32) score(f64) next_score(f64) | meta (JSON, may be empty)
           0      16         17              25              33           35
           39                43          51               59
    Link:  domain_id(i64) flags(u8: bit 0 target_has_outlink) | anchor (UTF-8)
           0              8          9
    Due index (docs/format.md §3.1), one record per page, big-endian keys:
      key:   bucket(u32 BE) score(u64 BE, descending) tie(u64 BE) | url
             0              4                          12            20
      value: next_fetch(i64 LE) | generate mark (UTF-8, may be empty)

``Page.encode_value``/``decode`` (records.py) pack and unpack the whole value; the hot paths
(the cascade, check, rank, generate) read single fields without decoding, through the slice
and offset constants here (as fast as a literal slice: no call per record) or the small
functions below.  A change of layout is a change of this module and docs/format.md only.
"""

from __future__ import annotations

import json
import struct

import mmh3

from webdb.tables.format import DUE_BUCKET_SHIFT

__all__ = [
    "PAGE",
    "PAGE_FIXED",
    "MD5",
    "STATUS",
    "NUM_OUTLINKS",
    "NO_OUTLINKS",
    "SCORES",
    "SCORE",
    "F_NEXT_FETCH",
    "F_SCORE",
    "page_status",
    "page_has_outlinks",
    "page_score",
    "page_without_md5",
    "page_with_scores_of",
    "LINK",
    "LINK_FIXED",
    "LINK_OUT",
    "LINK_FLAGS",
    "link_domain_id",
    "link_flag",
    "link_with_flags",
    "link_anchor",
    "link_same_but_flag",
    "GENERATE_MARK",
    "DUE_LAST_BUCKET",
    "due_bucket",
    "due_prefix",
    "due_tie",
    "due_record",
    "due_order",
    "due_next_fetch",
    "due_mark",
    "with_mark",
]

# ---- Page -------------------------------------------------------------------------------------

# md5 status fetch_time next_fetch retries fetch_interval num_outlinks score next_score
PAGE = struct.Struct("<16sBqqHIIdd")
PAGE_FIXED = PAGE.size  # 59: the meta map (JSON) follows
# Indexes of fields in ``PAGE.unpack_from(value)`` (a scan that needs a few fixed fields).
F_NEXT_FETCH = 3
F_SCORE = 7

MD5 = slice(0, 16)
STATUS = 16  # value[STATUS] is the status byte (an int)
NUM_OUTLINKS = slice(39, 43)
NO_OUTLINKS = b"\x00\x00\x00\x00"  # value[NUM_OUTLINKS] of a page without outlinks
SCORE = 43  # offset of score (f64); next_score follows
SCORES = slice(43, PAGE_FIXED)  # score and next_score
_F64 = struct.Struct("<d")


def page_status(value: bytes) -> int:
    """status of an encoded page value."""
    return value[STATUS]


def page_has_outlinks(value: bytes) -> bool:
    return value[NUM_OUTLINKS] != NO_OUTLINKS


def page_score(value: bytes) -> float:
    return _F64.unpack_from(value, SCORE)[0]


def page_without_md5(value: bytes) -> bytes:
    """The value minus its md5 (an if-new edit of a new page whose md5 is MD5(url)); the inverse
    is ``md5 + rest``."""
    return value[16:]


def page_with_scores_of(new: bytes, old: bytes) -> bytes:
    """``new`` with ``old``'s score and next_score (``add_page`` keeps the stored scores)."""
    return new[:SCORE] + old[SCORES] + new[PAGE_FIXED:]


# ---- Link -------------------------------------------------------------------------------------

LINK = struct.Struct("<qB")  # domain_id flags
LINK_FIXED = LINK.size  # 9: the anchor follows
LINK_OUT = 1  # flags bit: the target page exists and has outlinks
LINK_FLAGS = 8  # value[LINK_FLAGS] is the flags byte (an int)
_I64 = struct.Struct("<q")


def link_domain_id(value: bytes) -> int:
    return _I64.unpack_from(value)[0]


def link_flag(value: bytes) -> bool:
    """target_has_outlink of an encoded link value."""
    return bool(value[LINK_FLAGS] & LINK_OUT)


def link_with_flags(value: bytes, flags: bytes) -> bytes:
    """``value`` with its flags byte replaced by ``flags`` (one byte, e.g. ``bytes((LINK_OUT,))``)."""
    return value[:LINK_FLAGS] + flags + value[LINK_FIXED:]


def link_anchor(value: bytes) -> str:
    return value[LINK_FIXED:].decode("utf-8", "replace")


def link_same_but_flag(a: bytes, b: bytes) -> bool:
    """Two link values equal in everything but target_has_outlink (the db maintains that)."""
    return a[:LINK_FLAGS] == b[:LINK_FLAGS] and a[LINK_FIXED:] == b[LINK_FIXED:]


# ---- Due index ----------------------------------------------------------------------------------

# The page meta key of the crawl's generate mark (fetchlist.generate.MARK): the due index
# carries its value so that generate skips marked pages without reading them.
GENERATE_MARK = "gen"
_MARK_BYTES = b'"' + GENERATE_MARK.encode() + b'"'
_NEXT_FETCH = 25  # offset of next_fetch (i64)
_DUE_HEAD = struct.Struct(">IQQ")  # bucket, score descending, tie
_U64 = struct.Struct(">Q")
_BE_F64 = struct.Struct(">d")
_ALL = (1 << 64) - 1
_SIGN = 1 << 63
DUE_LAST_BUCKET = (1 << 32) - 1


def due_bucket(next_fetch: int) -> int:
    """The due bucket of a time: ``next_fetch >> DUE_BUCKET_SHIFT``, clamped to u32 (negative
    times to 0; ``NEVER`` and anything past year 8 million to the last bucket)."""
    return min(max(next_fetch, 0) >> DUE_BUCKET_SHIFT, DUE_LAST_BUCKET)


def due_prefix(bucket: int) -> bytes:
    """The first 4 bytes of every due key of ``bucket``."""
    return bucket.to_bytes(4, "big")


def due_tie(url_b: bytes) -> bytes:
    """The tie of the generate order as 8 key bytes: mmh3.hash64 (signed) of the URL, offset
    by 2**63, big-endian, so equal scores sort by the hash ascending (``order_key``'s
    ``-hash`` descending)."""
    return _U64.pack(mmh3.hash64(url_b, signed=True)[0] + _SIGN)


def _score_desc(score: float) -> int:
    u = _U64.unpack(_BE_F64.pack(score + 0.0))[0]  # + 0.0: -0.0 sorts as 0.0, as it compares
    return (u | _SIGN if not u & _SIGN else u ^ _ALL) ^ _ALL


def due_record(url_b: bytes, value: bytes, tie: bytes | None = None) -> tuple[bytes, bytes]:
    """The due index record (key, value) of the page ``url_b`` whose PagesByURL value is
    ``value``; ``tie`` is ``due_tie(url_b)`` if the caller has it.  Key order = bucket, then
    the generate order (score descending, tie), then url.  O(len(value)) for the mark search;
    a JSON decode only for a page whose meta holds a mark."""
    nf = _I64.unpack_from(value, _NEXT_FETCH)[0]
    score = _F64.unpack_from(value, SCORE)[0]
    key = due_prefix(due_bucket(nf)) + _U64.pack(_score_desc(score)) + (due_tie(url_b) if tie is None else tie) + url_b
    mark = b""
    if len(value) > PAGE_FIXED and _MARK_BYTES in value:
        m = json.loads(value[PAGE_FIXED:]).get(GENERATE_MARK)
        if isinstance(m, str):
            mark = m.encode("utf-8", "surrogatepass")
    return key, _I64.pack(nf) + mark


def due_order(key: bytes) -> tuple[float, int, bytes]:
    """(score, tie, url) of a due key: ``(score, tie)`` is generate's ``order_key``."""
    _, sd, t = _DUE_HEAD.unpack_from(key)
    u = sd ^ _ALL
    u = u ^ _SIGN if u & _SIGN else u ^ _ALL
    return _BE_F64.unpack(_U64.pack(u))[0], _SIGN - t, key[20:]


def due_next_fetch(value: bytes) -> int:
    return _I64.unpack_from(value)[0]


def with_mark(value: bytes, mark: str) -> bytes:
    """The PagesByURL value ``value`` with its meta's generate mark set to ``mark``: the bytes
    ``Page.encode_value`` gives for the decoded page with ``meta["gen"] = mark`` (how a mark
    table entry overlays its page, format.md §3.2).  A JSON decode and encode of the meta."""
    meta = json.loads(value[PAGE_FIXED:]) if len(value) > PAGE_FIXED else {}
    meta[GENERATE_MARK] = mark
    return value[:PAGE_FIXED] + json.dumps(meta, separators=(",", ":"), sort_keys=True).encode("utf-8", "replace")


def due_mark(value: bytes) -> str:
    """The page's generate mark (``meta["gen"]``; "" when it has none)."""
    return value[8:].decode("utf-8", "surrogatepass")
