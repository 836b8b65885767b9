"""Fetch outcomes and their outlinks as a block of columns, made into edit records in bulk.

An update's input is mostly outlinks (at F = 100k fetched pages, ~28 per page): one link edit
and one page edit (add_page_if_not_present) each.  ``EditLog.apply_fetch_block`` takes a
``FetchBlock`` (per fetch a few Python values, per outlink only offsets into one bytes buffer),
checks the block's urls and anchors with numpy at once and builds each record with one bytes
concatenation, instead of a Python loop iteration of checks, encodes and calls per outlink.
The records are the very bytes the per-call path (``apply_fetch``, ``add_outlinks``) makes,
with the same sequence numbers, and they reach the sort buffers in the same groups, so spills
and edit files are byte for byte the same (tests/test_columns.py).

numpy is optional (the ``bulk`` extra): without it, or when a check below fails, the block is
applied call by call — which also names the bad input exactly as those calls do.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from webdb.core.schedule import FetchResult
from webdb.tables.records import Status
from webdb.writer import kernels
from webdb.writer.edits import TAG3_ADD

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FetchBlock", "have_numpy", "link_records"]


# numpy is installed (tests turn the block path off by setting it False).
NUMPY = importlib.util.find_spec("numpy") is not None


def have_numpy() -> bool:
    """Whether numpy is installed (the block path of ``EditLog.apply_fetch_block``; without
    it the block is applied call by call).  numpy itself is imported by the functions that use
    it, when a block is applied: ``import webdb`` (every command, every reader process) does
    not pay for it (~40 ms, and OpenBLAS's threads)."""
    return NUMPY


@dataclass
class FetchBlock:
    """Fetch outcomes in call order, each ``FETCHED`` (with its md5 and outlinks) or ``RETRY``.

    Row i stands for ``apply_fetch(FetchResult(urls[i], FETCHED, times[i], md5s[i], n))`` and
    ``add_outlinks(md5s[i], links, next_fetch=times[i], ...)`` with its n links, or, if not
    ``fetched[i]``, ``apply_fetch(FetchResult(urls[i], RETRY, times[i]))``.  The links of all
    rows, in order, are slices of ``data`` (UTF-8): url ``data[url_start[l]:url_end[l]]``,
    anchor ``data[anchor_start[l]:anchor_end[l]]``; row i has ``nlinks[i]`` of them (0 when
    not fetched).  The offsets are lists or numpy int64 arrays.
    """

    urls: list[str]
    fetched: list[bool]
    md5s: list[bytes]
    times: list[int]
    nlinks: list[int]
    data: bytes
    url_start: object
    url_end: object
    anchor_start: object
    anchor_end: object

    def __len__(self) -> int:
        return len(self.urls)

    def calls(self) -> Iterator[tuple[FetchResult, list[tuple[str, str]] | None]]:
        """Each row as (the fetch result, its outlinks or None for a RETRY): the call path."""
        us, ue, as_, ae = (
            list(map(int, x)) for x in (self.url_start, self.url_end, self.anchor_start, self.anchor_end)
        )
        d, lo = self.data, 0
        for url, ok, md5, t, n in zip(self.urls, self.fetched, self.md5s, self.times, self.nlinks):
            if not ok:
                yield FetchResult(url, Status.RETRY, t), None
                continue
            links = [(d[us[i] : ue[i]].decode("utf-8"), d[as_[i] : ae[i]].decode("utf-8")) for i in range(lo, lo + n)]
            lo += n
            yield FetchResult(url, Status.FETCHED, t, md5, n), links


def split_at(data: bytes, start: list[int], end: list[int]) -> list[bytes]:
    """``[data[s:e] for s, e in zip(start, end)]``, without a Python step per slice."""
    return list(map(data.__getitem__, map(slice, start, end)))


# Every u16, little-endian: a record's trailer by index (cheaper than a to_bytes call).
U16 = [i.to_bytes(2, "little") for i in range(1 << 16)]


def link_records(
    data: bytes,
    us: np.ndarray,
    ue: np.ndarray,
    as_: np.ndarray,
    ae: np.ndarray,
    counts: np.ndarray,
    md5s: list[bytes],
    tails: list[bytes],
    seqs: np.ndarray,
    pp: bytes,
    lp: bytes,
    link_pre: bytes,
) -> tuple[list[bytes], list[bytes], np.ndarray, np.ndarray]:
    """The page and link edit records of a fetch block's outlinks, and their lengths.

    Row r (a fetched page with outlinks: md5 ``md5s[r]``, page tail ``tails[r]``, its fetch
    record's seq ``seqs[r]``) has ``counts[r]`` links, whose url and anchor are slices of
    ``data`` (int64 offsets ``us``/``ue``, ``as_``/``ae``, in bounds).  Link k of the row gets
    seq ``seqs[r] + 1 + 2k`` for its page edit (add_page_if_not_present: url, ``pp``, seq,
    tail) and the next for its link edit (md5 0x01 url, ``lp``, seq, ``link_pre``, anchor).
    Returns the page records, the link records and their lengths (int64 arrays).  One C call
    (``_stagesc.link_records``) with the writer's kernels compiled, else ``link_records_py``."""
    import numpy as np

    c = kernels.stagesc
    f = c.link_records if c is not None else link_records_py
    precs, lrecs, psize, lsize = f(data, us, ue, as_, ae, counts, md5s, tails, seqs, pp, lp, link_pre)
    return precs, lrecs, np.frombuffer(psize, np.int64), np.frombuffer(lsize, np.int64)


def link_records_py(data, us, ue, as_, ae, counts, md5s, tails, seqs, pp, lp, link_pre):
    """``link_records`` in Python (the lengths as bytes of native int64, as the C function
    gives them): one concatenation per record (C-level bytes joins beat a numpy scatter of
    variable-length slices, measured)."""
    import numpy as np

    cnt = counts.tolist()
    ub = split_at(data, us.tolist(), ue.tolist())
    ab = split_at(data, as_.tolist(), ae.tolist())
    first = np.repeat(np.cumsum(counts) - counts, counts)
    k = np.arange(len(us), dtype=np.int64) - first
    pq = (np.repeat(seqs, counts) + 1 + 2 * k).tolist()
    tails_l = [t for t, c in zip(tails, cnt) for _ in range(c)]
    keys_l = [m + TAG3_ADD for m, c in zip(md5s, cnt) for _ in range(c)]
    precs = [u + pp + q.to_bytes(5, "big") + t + U16[len(u) + 10] for u, q, t in zip(ub, pq, tails_l)]
    lrecs = [
        k + u + lp + (q + 1).to_bytes(5, "big") + link_pre + a + U16[len(u) + 26]
        for k, u, q, a in zip(keys_l, ub, pq, ab)
    ]
    sizes = (np.fromiter(map(len, r), np.int64, len(r)).tobytes() for r in (precs, lrecs))
    return precs, lrecs, *sizes


def link_urls_ok(buf, start, end, max_url: int) -> bool:
    """Every url slice passes ``validate_url``'s checks, judged on bytes (stricter than on
    chars: a url this refuses goes the call path, which accepts it or names it): at most
    ``max_url`` bytes, "://" ending within the first 32 bytes and not at the start, no byte
    0x00-0x20 or 0x7f (in UTF-8 those bytes are never part of a longer character).  In C
    (``_stagesc.urls_ok``, one pass over the url bytes) with the writer's kernels compiled."""
    if not len(start):
        return True
    c = kernels.stagesc
    if c is not None:
        return c.urls_ok(buf, start, end, max_url)
    if int((end - start).max()) > max_url:
        return False
    import numpy as np

    bad = (buf <= 0x20) | (buf == 0x7F)
    cb = np.zeros(len(buf) + 1, np.int64)
    np.cumsum(bad, out=cb[1:])
    if (cb[end] - cb[start]).any():
        return False
    hits = np.flatnonzero((buf[:-2] == 0x3A) & (buf[1:-1] == 0x2F) & (buf[2:] == 0x2F)) if len(buf) > 2 else buf[:0]
    h = np.searchsorted(hits, start)
    if (h >= len(hits)).any():
        return False
    p = hits[h]
    return bool(((p > start) & (p + 3 <= start + 32) & (p + 3 <= end)).all())
