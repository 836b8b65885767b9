"""Statistics by URL prefix: ⟨domain, prefix, {unfetched, fetched, fit}⟩ (docs/analysis.md §3).

A URL (query and fragment dropped) is cut after each "/" of its path into at most ``depth``
prefixes: ``http://lenta.ru/2010/05/09/x`` → ``http://lenta.ru/``, ``…/2010/``, ``…/2010/05/``,
``…/2010/05/09/``.  Each prefix counts the pages under it that are unfetched, fetched (any
other status) and fit (``meta["fit"] == "1"``).

PagesByURL is in byte order and every prefix is a literal prefix of its URLs, so the URLs under
a prefix are contiguous: one pass keeps only the open prefixes of the current URL (a stack of at
most ``depth``) and emits a prefix when the scan leaves it.  The hosts of one registered domain
are not contiguous (``news.x.ru`` and ``www.x.ru`` sort apart), so emitted records go through
an external sort (``SortBuffer``) to come out by (domain, prefix).

Cost: one sequential read of PagesByURL, O(depth) work per page; one record written and read
per distinct prefix.  Memory: O(depth) plus the sort budget.
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from webdb.errors import BadInput
from webdb.tables.records import Page
from webdb.urls import host_of, registered_domain
from webdb.util.sortbuf import SortBuffer

__all__ = ["PrefixStat", "prefix_stats", "url_prefixes"]

_COUNTS = struct.Struct("<QQQ")


@dataclass(slots=True)
class PrefixStat:
    domain: str
    prefix: str
    unfetched: int = 0
    fetched: int = 0
    fit: int = 0

    @property
    def known(self) -> int:
        """URLs the db knows under the prefix (fetched + unfetched)."""
        return self.unfetched + self.fetched


def url_prefixes(url: str, depth: int) -> list[str]:
    """The at most ``depth`` prefixes of ``url``, shortest first (see the module docstring).

    A URL without a path (``http://h``) has the one prefix ``http://h/``.
    """
    s = url.split("#", 1)[0].split("?", 1)[0]
    i = s.find("://")
    j = s.find("/", i + 3 if i >= 0 else 0)
    if depth <= 0:
        return []
    if j < 0:
        return [s + "/"]
    out = [s[: j + 1]]
    while len(out) < depth:
        j = s.find("/", j + 1)
        if j < 0:
            break
        out.append(s[: j + 1])
    return out


def _domain(prefix: str) -> str:
    host = host_of(prefix)
    return registered_domain(host) if host else ""


def prefix_stats(
    reader, depth: int = 4, min_count: int = 1, tmpdir: str | None = None, max_bytes: int = 64 << 20
) -> Iterator[PrefixStat]:
    """Every prefix with ``known >= min_count``, by (domain, prefix).  Streams; see the module
    docstring for cost.  ``tmpdir`` holds the sort's spilled runs (default: a fresh temp dir)."""
    if not isinstance(depth, int) or depth < 1:
        raise BadInput(f"depth must be a whole number >= 1, not {depth!r}")
    with tempfile.TemporaryDirectory(prefix="webdb-prefixes-", dir=tmpdir) as tmp:
        buf = SortBuffer(tmp, "prefixes", max_bytes)
        seq = itertools.count()
        stack: list[list] = []  # [prefix, unfetched, fetched, fit] of the open prefixes

        def close(n: int) -> None:
            while len(stack) > n:
                p, u, f, ft = stack.pop()
                # The sequence number keeps run keys unique: a URL without a path opens its
                # host's root prefix apart from the host's other URLs; the reduce below sums them.
                buf.add(
                    b"%s\x00%s\x00%s%s"
                    % (_domain(p).encode(), p.encode(), next(seq).to_bytes(8, "big"), _COUNTS.pack(u, f, ft))
                )

        for k, v in reader.items("pages_by_url"):
            page = Page.decode(k.decode("utf-8"), v)
            chain = url_prefixes(page.url, depth)
            i = 0
            while i < len(stack) and i < len(chain) and stack[i][0] == chain[i]:
                i += 1
            close(i)
            stack.extend([p, 0, 0, 0] for p in chain[i:])
            fetched, fit = page.fetched, page.meta.get("fit") == "1"
            for e in stack:
                e[2 if fetched else 1] += 1
                e[3] += fit
        close(0)
        key = lambda rec: rec[: rec.index(b"\x00", rec.index(b"\x00") + 1)]  # noqa: E731 - domain 0x00 prefix
        for dp, grp in itertools.groupby(buf.sorted(), key=key):
            u = f = ft = 0
            for rec in grp:
                a, b, c = _COUNTS.unpack_from(rec, len(dp) + 9)
                u, f, ft = u + a, f + b, ft + c
            if u + f >= min_count:
                d, p = dp.split(b"\x00")
                yield PrefixStat(d.decode(), p.decode(), u, f, ft)
        buf.cleanup()
