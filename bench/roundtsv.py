"""The benchmark workload's round input: ``round.tsv`` lines as writer calls.

An input function of ``webdb update`` (webdb.writer.inputs): with bench/ on ``PYTHONPATH``
(the agents inherit it), ``--input roundtsv:apply_round_tsv``.  Used by peer_webdb.py,
bench_distributed.py and bench_round.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webdb.errors import BadInput
from webdb.schedule import FetchResult
from webdb.tables.records import Status
from webdb.writer.inputs import share_lines, where

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
    O(outlinks) writer calls.
    """
    fetched = failed = outlinks = 0
    for path, i, raw in share_lines(paths, share):
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
            fetched += 1
            outlinks += len(links)
        else:
            log.apply_fetch(FetchResult(url, Status.RETRY, t))
            failed += 1
    return {"fetched": fetched, "failed": failed, "outlinks": outlinks}
