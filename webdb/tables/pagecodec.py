"""The byte layouts of Page and Link values: the one module that knows their offsets.

Layouts (docs/format.md §3, little-endian)::

    Page:  md5(16) status(u8) fetch_time(i64) next_fetch(i64) retries(u16) fetch_interval(u32)
           num_outlinks(u32) score(f64) next_score(f64) | meta (JSON, may be empty)
           0      16         17              25              33           35
           39                43          51               59
    Link:  domain_id(i64) flags(u8: bit 0 target_has_outlink) | anchor (UTF-8)
           0              8          9

``Page.encode_value``/``decode`` (records.py) pack and unpack the whole value; the hot paths
(the cascade, check, rank, generate) read single fields without decoding, through the slice
and offset constants here (as fast as a literal slice: no call per record) or the small
functions below.  A change of layout is a change of this module and docs/format.md only.
"""

from __future__ import annotations

import struct

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
