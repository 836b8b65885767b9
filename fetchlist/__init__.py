"""The crawl side of webdb: URL normalization and filters, fetch, parse, segments.

Data flow and settings: docs/crawl.md.  Segment files: docs/segment.md.

The functions ``normalize`` and ``parse`` are not re-exported here: they share their module's
name, and binding them would make ``import fetchlist.parse as m`` give the function.  Use
``from fetchlist.normalize import normalize`` and ``from fetchlist.parse import parse``.

Owns: the crawl loop — inject, generate (and generate over a rack), fetch (and its parse
worker processes, ``fetchlist.workers``), parse, segments, update (segments back into writer
calls), URL normalization, filters, robots, sitemaps, focus rules and the crawl's settings.
Registers its update input with webdb (``register_inputs``).

May import: webdb's public API only — ``webdb`` (``__all__``), ``webdb.errors``,
``webdb.urls``, ``webdb.rack`` (contract ``crawl-uses-public-api`` in pyproject.toml).
"""

from fetchlist.fetch import Fetcher, FetchStats, HostStats, status_of
from fetchlist.filters import UrlFilter
from fetchlist.normalize import WwwRules, host_of, registered_domain
from fetchlist.parse import ParseResult
from fetchlist.robots import RobotsCache, RobotsRules
from fetchlist.segment import FetchEntry, FetchOutcome, FetchRecord, Segment, SegmentWriter
from fetchlist.settings import DEFAULTS as DEFAULT_SETTINGS
from webdb import register_input

__version__ = "0.1.0"

# The crawl's inputs of a distributed update (``webdb update --input NAME``), by name.
INPUTS = {"segments": "fetchlist.update:apply_segments"}


def register_inputs() -> None:
    """Register the crawl's update inputs with webdb (``INPUTS``); calling it again is a no-op.
    The ``webdb update`` command calls it; webdb itself never imports the crawl."""
    for name, spec in INPUTS.items():
        register_input(name, spec)


__all__ = [
    "DEFAULT_SETTINGS",
    "FetchEntry",
    "FetchOutcome",
    "FetchRecord",
    "FetchStats",
    "INPUTS",
    "Fetcher",
    "HostStats",
    "ParseResult",
    "RobotsCache",
    "RobotsRules",
    "Segment",
    "SegmentWriter",
    "UrlFilter",
    "WwwRules",
    "host_of",
    "register_inputs",
    "registered_domain",
    "status_of",
]
