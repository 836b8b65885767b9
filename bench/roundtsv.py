"""The benchmark workload's round input: ``round.tsv`` lines as writer calls.

An input function of ``webdb update`` (webdb.writer.inputs): with bench/ on ``PYTHONPATH``
(the agents inherit it), ``--input roundtsv:apply_round_tsv``.  Used by peer_webdb.py,
bench_distributed.py and bench_round.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webdb.core.schedule import FetchResult
from webdb.errors import BadInput
from webdb.tables.records import Status
from webdb.writer.columns import FetchBlock, have_numpy
from webdb.writer.inputs import share_lines, where

try:
    import numpy as np
except ImportError:  # apply_round_tsv then goes line by line
    np = None

__all__ = ["INPUT", "ROUND_NEW_INTERVAL", "apply_round_tsv"]

# The input spec of apply_round_tsv for update(input_fn=...).
INPUT = "roundtsv:apply_round_tsv"
# round.tsv pages new to the db get this fetch interval (the benchmark workload's rule).
ROUND_NEW_INTERVAL = 2592000


def apply_round_tsv(log: Any, paths: list[str], share: Sequence[int] | None = None, **_options: Any) -> dict:
    """Apply round.tsv files of the benchmark workload (the peers' generator, webgraph.py):
    ``url, ok, md5, time, outlinks`` per line; outlinks ``url 0x1f anchor`` joined by 0x1e.

    A fetched line is ``apply_fetch(FETCHED)`` + ``add_outlinks``; a failed one
    ``apply_fetch(RETRY)``.  ``share``: see the module doc.  Cost: one pass over the file,
    O(outlinks) writer calls.  On an ``EditLog`` with numpy installed, lines go a block at a
    time (``BLOCK_BYTES``) through ``apply_fetch_block``: the same edits, the outlinks split
    and made into edit records with numpy instead of one Python step each.
    """
    counts = {"fetched": 0, "failed": 0, "outlinks": 0}
    lines = share_lines(paths, share)
    if not (hasattr(log, "apply_fetch_block") and have_numpy()):
        for path, i, raw in lines:
            _apply_line(log, path, i, raw, share, counts)
        return counts
    block: list[tuple[str, int, bytes]] = []
    size = 0
    for line in lines:
        block.append(line)
        size += len(line[2])
        if size >= BLOCK_BYTES:
            _apply_block(log, block, share, counts)
            block, size = [], 0
    if block:
        _apply_block(log, block, share, counts)
    return counts


# Lines of round.tsv per apply_fetch_block call, in bytes (numpy's work arrays are ~25 bytes
# per outlink byte: ~25 MiB at this size).
BLOCK_BYTES = 1 << 20


def _apply_line(log: Any, path: str, i: int, raw: bytes, share: Sequence[int] | None, counts: dict) -> None:
    try:
        url, ok, md5, t, out = raw.decode("utf-8").split("\t")
        t = int(t)
        m = bytes.fromhex(md5) if ok == "1" else b""
    except ValueError:
        raise BadInput(f"{where(path, i, share)}: not a round.tsv line") from None
    if ok == "1":
        links = [tuple(x.split("\x1f")) for x in out.split("\x1e")] if out else []
        log.apply_fetch(FetchResult(url, Status.FETCHED, t, m, len(links)))
        log.add_outlinks(m, links, next_fetch=t, fetch_interval=ROUND_NEW_INTERVAL)
        counts["fetched"] += 1
        counts["outlinks"] += len(links)
    else:
        log.apply_fetch(FetchResult(url, Status.RETRY, t))
        counts["failed"] += 1


def _apply_block(log: Any, block: list[tuple[str, int, bytes]], share: Sequence[int] | None, counts: dict) -> None:
    """The lines of ``block`` through one ``apply_fetch_block``; line by line instead if one
    is not a well-formed round.tsv line (which then names it)."""
    fb = _fetch_block(block)
    if fb is None:
        for path, i, raw in block:
            _apply_line(log, path, i, raw, share, counts)
        return
    log.apply_fetch_block(fb, fetch_interval=ROUND_NEW_INTERVAL)
    nf = sum(fb.fetched)
    counts["fetched"] += nf
    counts["failed"] += len(fb) - nf
    counts["outlinks"] += len(fb.url_start)


def _fetch_block(block: list[tuple[str, int, bytes]]) -> FetchBlock | None:
    urls, fetched, md5s, times, nlinks, outs = [], [], [], [], [], []
    for _, _, raw in block:
        try:
            url, ok, md5, t, out = raw.decode("utf-8").split("\t")
            t = int(t)
            m = bytes.fromhex(md5) if ok == "1" else b""
        except ValueError:
            return None
        urls.append(url)
        times.append(t)
        md5s.append(m)
        if ok == "1":
            fetched.append(True)
            if out:
                o = raw[raw.rindex(b"\t") + 1 :]
                outs.append(o)
                nlinks.append(o.count(b"\x1e") + 1)
            else:
                nlinks.append(0)
        else:
            fetched.append(False)
            nlinks.append(0)
    data = b"\x1e".join(outs)
    buf = np.frombuffer(data, np.uint8)
    sep = np.flatnonzero(buf == 0x1E)
    mid = np.flatnonzero(buf == 0x1F)
    start = np.concatenate(([0], sep + 1)) if outs else sep
    end = np.concatenate((sep, [len(data)])) if outs else sep
    # every link is exactly "url 0x1f anchor" (else the line path fails as it always did)
    if len(mid) != len(start) or not ((start <= mid) & (mid < end)).all():
        return None
    return FetchBlock(urls, fetched, md5s, times, nlinks, data, start, mid, mid + 1, end)
