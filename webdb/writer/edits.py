"""Edit records: what each cascade stage consumes (layouts in docs/format.md, *Edit records*).

An edit record is one ``bytes``::

    key | seq (8) | value | len(key + seq) (u16 LE)

``key`` is built so that byte order is the order the stage applies edits in, and so that no
key is a prefix of another; ``seq`` = producer rank (1) + producer id (2) + counter (5, BE)
makes records unique and keeps call order among equal keys.  So a plain bytes sort of
records is the stable sort by key the semantics need ("first call wins", "last call wins").
"""

from __future__ import annotations

import hashlib
import struct

from webdb.tables.pagecodec import NO_OUTLINKS, NUM_OUTLINKS
from webdb.writer.kernels import pack_edits

# Stages of the cascade and the table each one rewrites.
STAGE_PAGES_BY_URL, STAGE_PAGES_BY_MD5, STAGE_LINKS_BY_MD5, STAGE_LINKS_BY_URL, STAGE_LINK_FIXUPS = 1, 2, 3, 4, 5
STAGE_TABLE = {
    STAGE_PAGES_BY_URL: "pages_by_url",
    STAGE_PAGES_BY_MD5: "pages_by_md5",
    STAGE_LINKS_BY_MD5: "links_by_md5",
    STAGE_LINKS_BY_URL: "links_by_url",
    STAGE_LINK_FIXUPS: "links_by_md5",
}
# Which split routes a stage's edits: URL breakpoints or md5 ranges.
STAGE_BY_URL = {
    STAGE_PAGES_BY_URL: True,
    STAGE_PAGES_BY_MD5: False,
    STAGE_LINKS_BY_MD5: False,
    STAGE_LINKS_BY_URL: True,
    STAGE_LINK_FIXUPS: False,
}

# Stage 1 (PagesByURL) opcodes, in priority order (lowest first wins); fetches come last, and
# generate marks (webdb.core.marks) after everything: a mark applies to the page as the batch leaves it.
OP_ADD, OP_ADD_SCORE, OP_IF_NEW, OP_DEL, OP_FETCH, OP_LASTMOD, OP_MARK = 1, 2, 3, 4, 5, 6, 7
# Stage 2 (PagesByMD5) and stage 5 (LinksByMD5 fix-ups), stage 4 link edits.
OP2_DEL, OP2_ADD = 0, 1
OP5_DEL, OP5_FLAG = 0, 1
OP4_DEL, OP4_ADD = 0, 1
# Stage 3 tags after the md5: delete-all sorts before the adds of that md5.
TAG3_DEL_ALL, TAG3_ADD = b"\x00", b"\x01"
# Stage 4 tags after url 0x00: the target notice sorts before the links.
TAG4_NOTICE, TAG4_LINK = b"\x00", b"\x01"
# Target states carried by a stage-4 notice.
TARGET_ABSENT, TARGET_NO_OUT, TARGET_OUT = 0, 1, 2

# Producer ranks (first byte of seq): the API writer, then each stage's emissions.
RANK_API = 0

_U32 = struct.Struct("<I")


class Seq:
    """Hands out the 8-byte seq suffix for one producer."""

    __slots__ = ("prefix", "n")

    def __init__(self, rank: int, producer: int):
        self.prefix = bytes((rank,)) + producer.to_bytes(2, "big")
        self.n = 0

    def next(self) -> bytes:
        self.n += 1
        return self.prefix + self.n.to_bytes(5, "big")


def pack(key: bytes, seq: bytes, value: bytes = b"") -> bytes:
    return key + seq + value + (len(key) + 8).to_bytes(2, "little")


def pack_at(key: bytes, prefix: bytes, n: int, value: bytes = b"") -> bytes:
    """``pack(key, seq, value)`` with the seq given as its producer ``prefix`` (``Seq.prefix``)
    and counter ``n``: for producers that count in a local (the hot loops)."""
    return key + prefix + n.to_bytes(5, "big") + value + (len(key) + 8).to_bytes(2, "little")


def pack_many(keys: list[bytes], values: list[bytes], prefix: bytes, n0: int) -> list[bytes]:
    """``[pack_at(k, prefix, n0 + i, v) for i, (k, v) in enumerate(zip(keys, values), 1)]``,
    in C when the writer's kernels are compiled (``_stagesc.pack_edits``)."""
    recs = pack_edits(keys, values, prefix, n0)
    if recs is None:
        recs = [
            k + prefix + (n0 + i).to_bytes(5, "big") + v + (len(k) + 8).to_bytes(2, "little")
            for i, (k, v) in enumerate(zip(keys, values), 1)
        ]
    return recs


# ---- stage 1 ---------------------------------------------------------------------------------


def pages_by_url_edit_key(url_b: bytes, op: int) -> bytes:
    return url_b + b"\x00" + bytes((op,))


def pages_by_url_record(url_b: bytes, op: int, prefix: bytes, n: int, value: bytes) -> bytes:
    """``pack_at(pages_by_url_edit_key(url_b, op), prefix, n, value)`` in one step (a call per fetch
    and per outlink)."""
    return (
        url_b + _PAGES_BY_URL_TAG[op] + prefix + n.to_bytes(5, "big") + value + (len(url_b) + 10).to_bytes(2, "little")
    )


_PAGES_BY_URL_TAG = [b"\x00" + bytes((op,)) for op in range(OP_MARK + 1)]


def if_new_value(page_value: bytes, link_from: bytes | None = None, link_value: bytes = b"") -> bytes:
    v = _U32.pack(len(page_value)) + page_value
    if link_from is not None:
        v += link_from + link_value
    return v


# High bit of an if-new value's length: the page value lacks its md5, which is MD5(url) (an
# outlink's new page); stage 1 computes it only when the page is really inserted.
IF_NEW_NO_MD5 = 0x80000000


def if_new_value_without_md5(page_tail: bytes) -> bytes:
    """An outlink's if-new value: the page value less its md5 (``page_without_md5``), flagged."""
    return (len(page_tail) | IF_NEW_NO_MD5).to_bytes(4, "little") + page_tail


def outlink_seq_prefixes(prefix: bytes) -> tuple[bytes, bytes]:
    """What follows the url in an outlink's two records up to their counter: the if-new page
    edit's (``0x00 OP_IF_NEW`` + seq prefix) and the link edit's (``links_by_md5_add_key``'s ``0x00`` +
    seq prefix).  ``webdb.writer.columns.link_records`` splices them per outlink."""
    return b"\x00" + bytes((OP_IF_NEW,)) + prefix, b"\x00" + prefix


def split_if_new_value(v: bytes, url_b: bytes = b"") -> tuple[bytes, bytes | None, bytes]:
    n = _U32.unpack_from(v)[0]
    if n & IF_NEW_NO_MD5:
        n &= ~IF_NEW_NO_MD5
        return hashlib.md5(url_b).digest() + v[4 : 4 + n], None, b""
    page = v[4 : 4 + n]
    rest = v[4 + n :]
    if not rest:
        return page, None, b""
    return page, rest[:16], rest[16:]


# ---- stage 2 ---------------------------------------------------------------------------------


def pages_by_md5_edit_key(md5: bytes, url_b: bytes, op: int) -> bytes:
    return md5 + url_b + b"\x00" + bytes((op,))


# ---- stage 3 ---------------------------------------------------------------------------------


def links_by_md5_del_all_key(md5: bytes) -> bytes:
    return md5 + TAG3_DEL_ALL


def links_by_md5_add_key(md5: bytes, url_b: bytes) -> bytes:
    return md5 + TAG3_ADD + url_b + b"\x00"


def links_by_md5_add_record(md5: bytes, url_b: bytes, prefix: bytes, n: int, value: bytes) -> bytes:
    """``pack_at(links_by_md5_add_key(md5, url_b), prefix, n, value)`` in one step (a call per outlink)."""
    k = md5 + TAG3_ADD + url_b + b"\x00"
    return k + prefix + n.to_bytes(5, "big") + value + (len(k) + 8).to_bytes(2, "little")


# ---- stage 4 ---------------------------------------------------------------------------------


def links_by_url_notice_key(url_b: bytes) -> bytes:
    return url_b + b"\x00" + TAG4_NOTICE


def links_by_url_link_tail(from_id: bytes, op: int) -> bytes:
    """A link edit's key is ``url_b + links_by_url_link_tail(from_id, op)``: the tail is built once per
    source and appended to each target url."""
    return b"\x00" + TAG4_LINK + from_id + bytes((op,))


# ---- stage 5 ---------------------------------------------------------------------------------


def link_fixup_tail(url_b: bytes, op: int) -> bytes:
    """A fix-up's key is ``from_id + link_fixup_tail(url_b, op)`` (one tail per target url)."""
    return url_b + b"\x00" + bytes((op,))


def target_state(page_value: bytes | None) -> int:
    if page_value is None:
        return TARGET_ABSENT
    return TARGET_OUT if page_value[NUM_OUTLINKS] != NO_OUTLINKS else TARGET_NO_OUT
