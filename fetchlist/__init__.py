"""The crawl side of webdb: URL normalization and filters, fetch, parse, segments.

Data flow and settings: docs/crawl.md.  Segment files: docs/segment.md.

The functions ``normalize`` and ``parse`` are not re-exported here: they share their module's
name, and binding them would make ``import fetchlist.parse as m`` give the function.  Use
``from fetchlist.normalize import normalize`` and ``from fetchlist.parse import parse``.
"""

from fetchlist.fetch import Fetcher, FetchStats, HostStats, status_of
from fetchlist.filters import UrlFilter
from fetchlist.normalize import WwwRules, host_of, registered_domain
from fetchlist.parse import ParseResult
from fetchlist.robots import RobotsCache, RobotsRules
from fetchlist.segment import FetchEntry, FetchOutcome, FetchRecord, Segment, SegmentWriter
from fetchlist.settings import DEFAULTS as DEFAULT_SETTINGS

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SETTINGS",
    "FetchEntry",
    "FetchOutcome",
    "FetchRecord",
    "FetchStats",
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
    "registered_domain",
    "status_of",
]
