"""Every setting of the database and the writer, with its default and what it means: the typed
value ``Settings``, one field per setting.

Settings are stored in the database's identity file (``webdb.json``: only those given when it
was created, so the others follow this module's defaults) and may be overridden per writer
(``db.writer(memory_mb=...)``: ``Settings.replace``).  ``Settings()`` (``DEFAULTS``) holds every
default.  A ``Settings`` becomes JSON only where it leaves the process: the stage jobs of the
worker processes, the agents' ``run`` command and Dask's task arguments (``to_json`` /
``from_json`` on the other side).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from webdb.core.schedule import Schedule
from webdb.errors import BadInput
from webdb.tables.records import DEFAULT_ANCHOR_MAX, MAX_URL_BYTES

__all__ = ["DEFAULTS", "LIMITS", "MAX_URL_LIMIT", "NAMES", "SCHEDULE_KEYS", "Settings"]

_SCHEDULE = Schedule()  # the defaults of the schedule settings, written once: on Schedule


@dataclass(frozen=True)
class Settings:
    """The settings of one db, writer or reader: every field set, each in its range (``LIMITS``);
    built by ``from_json`` (defaults, then a stored or sent object) and ``replace`` (overrides),
    both checking names and values (BadInput naming the setting)."""

    # Uncompressed size a table block is cut at.  Smaller blocks: cheaper point lookups; larger:
    # better compression and fewer index entries.
    block_size: int = 32 * 1024
    # Block codec: "lz4" (fast), "zlib" (smaller) or "none".
    codec: str = "lz4"
    # Memory the writer and each stage worker may use for edits before spilling sorted runs, MiB.
    # The whole update (all worker processes) stays under this.
    memory_mb: int = 512
    # Worker processes that run the sections of one stage in parallel (0 = one per core, at most k).
    workers: int = 0
    # Anchor text is cut to this many characters when a link is added.
    anchor_max: int = DEFAULT_ANCHOR_MAX
    # Longest URL accepted, in UTF-8 bytes; longer ones are rejected with BadInput.
    max_url_bytes: int = MAX_URL_BYTES
    # The fetch schedule's settings (SCHEDULE_KEYS): their defaults are Schedule's.
    # Fetch interval a new page gets, seconds, whichever call creates it (add_outlinks, inject,
    # or a fetch result for a url with no page).
    default_interval: int = _SCHEDULE.default_interval
    # Delay before retrying a transient failure, seconds.
    retry_delay: int = _SCHEDULE.retry_delay
    # Transient failures after which a page is given up (status GONE).
    max_retries: int = _SCHEDULE.max_retries
    # Adaptive schedule: shorten the interval of pages that change, lengthen it for the others,
    # by these rates, within [min_interval, max_interval] (seconds).
    adaptive: bool = _SCHEDULE.adaptive
    min_interval: int = _SCHEDULE.min_interval
    max_interval: int = _SCHEDULE.max_interval
    inc_rate: float = _SCHEDULE.inc_rate
    dec_rate: float = _SCHEDULE.dec_rate
    # fsync table files, manifests and CURRENT before a commit is visible (durable against power
    # loss).  Off only for scratch databases: a kill -9 is survived either way.
    sync: bool = True
    # Decoded-block cache of a reader, MiB (point lookups fill it; inlinks does not).  256 holds
    # every PagesByURL block of a 1M-page db, so random get_page calls stop re-reading blocks.
    cache_mb: int = 256
    # Levels (docs/design.md §4.3): the link tables of a section are a base file plus delta runs
    # — a round writes only what it changed — until the runs hold more than ``level_ratio`` of
    # the base's bytes or there are more than ``level_runs`` of them; then the stage merges them
    # into a new base.  0 turns levels off: every round rewrites the tables (the old behaviour).
    level_ratio: float = 0.5
    level_runs: int = 4
    # A round keeps the files of those levels it does not rewrite as they are, unread.  So that
    # damage there is found by a writer, not only by `webdb check` or the next compaction, each
    # round verifies the CRC of every block of a ``1 / scrub_rounds`` slice of each such file
    # (a different slice each generation): every block within ``scrub_rounds`` rounds.  1: all
    # of them every round; 0: never.
    scrub_rounds: int = 1
    # URL sample size used to choose section breakpoints on the first load (or a rebalance).
    breakpoint_sample: int = 20000

    def __post_init__(self) -> None:
        _check(self)

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Settings:
        """The defaults, then the settings ``d`` names (a db's stored settings, or ``to_json``
        of another process); an unknown name is BadInput, a null value keeps the default."""
        return DEFAULTS.replace(**(d or {}))

    def to_json(self) -> dict[str, Any]:
        """Every setting, as a JSON object (``from_json`` makes this value of it again)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **overrides: Any) -> Settings:
        """These settings with ``overrides`` (None: unchanged); unknown names and bad values are
        BadInput naming the setting."""
        for k in overrides:
            if k not in _FIELDS:
                raise BadInput(f"unknown setting {k!r} (known: {', '.join(sorted(NAMES))})")
        given = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self

    def schedule(self) -> Schedule:
        """The fetch schedule these settings make (``SCHEDULE_KEYS``)."""
        return Schedule(**{k: getattr(self, k) for k in SCHEDULE_KEYS})


def _check(s: Settings) -> None:
    if s.codec not in ("lz4", "zlib", "none"):
        raise BadInput(f"setting codec must be lz4, zlib or none, not {s.codec!r}")
    for k, (lo, hi) in LIMITS.items():
        v = getattr(s, k)
        kind = type(_FIELDS[k].default)
        ok = isinstance(v, bool) if kind is bool else isinstance(v, (int, float) if kind is float else int)
        if not ok or (kind is not bool and isinstance(v, bool)):
            what = {bool: "true or false", int: "a whole number", float: "a number"}[kind]
            raise BadInput(f"setting {k} must be {what}, not {v!r}")
        if kind is not bool and not lo <= v <= hi:
            raise BadInput(f"setting {k} must be in {lo}..{hi}, not {v!r}")
    if s.min_interval > s.max_interval:
        raise BadInput(f"setting min_interval {s.min_interval} is above max_interval {s.max_interval}")


_FIELDS = {f.name: f for f in fields(Settings)}
# The name of every setting, in the order of the fields.
NAMES: tuple[str, ...] = tuple(_FIELDS)

# The settings that make the fetch schedule: Schedule's fields, each a setting of the same name.
SCHEDULE_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Schedule))

# The longest edit key holds a URL and 19 more bytes (LinksByURL: url 0x00 0x01 fromID(16) op);
# with its 8-byte sequence number its length must fit the u16 after it (docs/format.md §4).
MAX_URL_LIMIT = 0xFFFF - 19 - 8
_U32 = 0xFFFFFFFF
# Range of each setting, from the width of the field that holds it (docs/format.md §3).
LIMITS: dict[str, tuple[float, float]] = {
    "block_size": (64, 16 << 20),
    "memory_mb": (1, 1 << 20),
    "workers": (0, 1024),
    "anchor_max": (0, 1 << 16),
    "max_url_bytes": (16, MAX_URL_LIMIT),
    "default_interval": (1, _U32),
    "retry_delay": (0, _U32),
    "max_retries": (0, 0xFFFF),
    "adaptive": (0, 1),
    "min_interval": (1, _U32),
    "max_interval": (1, _U32),
    "inc_rate": (0.0, 1.0),
    "dec_rate": (0.0, 1.0),
    "sync": (0, 1),
    "cache_mb": (0, 1 << 20),
    "level_ratio": (0.0, 1000.0),
    "level_runs": (1, 64),
    "scrub_rounds": (0, 1 << 20),
    "breakpoint_sample": (1, 100_000_000),
}

# Every default (``Settings()``).
DEFAULTS = Settings()
