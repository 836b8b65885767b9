"""URL and domain helpers shared by the db's tools (webdb.analysis) and the crawl (fetchlist).

A small public module of webdb: ``fetchlist.normalize`` re-exports these, and
``webdb.analysis.prefixes`` uses them without importing the crawl.
"""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import urlsplit

from publicsuffixlist import PublicSuffixList

__all__ = ["host_of", "public_suffix_list", "registered_domain"]


@functools.lru_cache(maxsize=1)
def public_suffix_list() -> PublicSuffixList:
    """The Public Suffix List bundled with the publicsuffixlist package (nothing fetched)."""
    return PublicSuffixList()


@functools.lru_cache(maxsize=1 << 16)
def registered_domain(host: str) -> str:
    """The registered domain of ``host``: one label below its public suffix.

    ``www.bbc.co.uk`` → ``bbc.co.uk``; ``a.b.github.io`` → ``b.github.io`` (private suffixes
    count, so separate sites stay separate).  An IP address, a single-label host (``localhost``)
    and a host that is itself a public suffix are their own registered domain.
    Runtime cost: a few µs (cached for the last 65536 hosts).
    """
    h = host.lower().rstrip(".")
    if h.startswith("[") or _is_ipv4(h):
        return h
    return public_suffix_list().privatesuffix(h) or h


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def host_of(url: str) -> str | None:
    """The lowercased host of ``url`` without port (IPv6 without brackets), or ``None``."""
    if not isinstance(url, str):
        return None
    try:
        return urlsplit(url).hostname or None
    except ValueError:
        return None
