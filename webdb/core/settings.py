"""Every setting of the database and the writer, with its default and what it means.

Settings are stored in the database's identity file (``webdb.json``) when it is created and
may be overridden per writer (``db.writer(memory_mb=...)``).
"""

from __future__ import annotations

from webdb.tables.records import DAY, DEFAULT_ANCHOR_MAX, DEFAULT_INTERVAL, MAX_URL_BYTES

DEFAULTS: dict[str, object] = {
    # Uncompressed size a table block is cut at.  Smaller blocks: cheaper point lookups; larger:
    # better compression and fewer index entries.
    "block_size": 32 * 1024,
    # Block codec: "lz4" (fast), "zlib" (smaller) or "none".
    "codec": "lz4",
    # Memory the writer and each stage worker may use for edits before spilling sorted runs, MiB.
    # The whole update (all worker processes) stays under this.
    "memory_mb": 512,
    # Worker processes that run the sections of one stage in parallel (0 = one per core, at most k).
    "workers": 0,
    # Anchor text is cut to this many characters when a link is added.
    "anchor_max": DEFAULT_ANCHOR_MAX,
    # Longest URL accepted, in UTF-8 bytes; longer ones are rejected with BadInput.
    "max_url_bytes": MAX_URL_BYTES,
    # Fetch interval a new page gets, seconds, whichever call creates it (add_outlinks, inject,
    # or a fetch result for a url with no page).
    "default_interval": DEFAULT_INTERVAL,
    # Fetch schedule (webdb.core.schedule): delay before retrying a transient failure, seconds.
    "retry_delay": DAY,
    # Transient failures after which a page is given up (status GONE).
    "max_retries": 3,
    # Adaptive schedule: shorten the interval of pages that change, lengthen it for the others.
    "adaptive": False,
    "min_interval": DAY,
    "max_interval": 365 * DAY,
    "inc_rate": 0.2,
    "dec_rate": 0.2,
    # fsync table files, manifests and CURRENT before a commit is visible (durable against power
    # loss).  Off only for scratch databases: a kill -9 is survived either way.
    "sync": True,
    # Decoded-block cache of a reader, MiB (point lookups fill it; inlinks does not).  256 holds
    # every PagesByURL block of a 1M-page db, so random get_page calls stop re-reading blocks.
    "cache_mb": 256,
    # Levels (docs/design.md §4.3): the link tables of a section are a base file plus delta runs
    # — a round writes only what it changed — until the runs hold more than ``level_ratio`` of
    # the base's bytes or there are more than ``level_runs`` of them; then the stage merges them
    # into a new base.  0 turns levels off: every round rewrites the tables (the old behaviour).
    "level_ratio": 0.5,
    "level_runs": 4,
    # A round keeps the files of those levels it does not rewrite as they are, unread.  So that
    # damage there is found by a writer, not only by `webdb check` or the next compaction, each
    # round verifies the CRC of every block of a ``1 / scrub_rounds`` slice of each such file
    # (a different slice each generation): every block within ``scrub_rounds`` rounds.  1: all
    # of them every round; 0: never.
    "scrub_rounds": 1,
    # URL sample size used to choose section breakpoints on the first load (or a rebalance).
    "breakpoint_sample": 20000,
}

SCHEDULE_KEYS = (
    "default_interval",
    "retry_delay",
    "max_retries",
    "adaptive",
    "min_interval",
    "max_interval",
    "inc_rate",
    "dec_rate",
)


def resolve(stored: dict | None = None, **overrides: object) -> dict:
    """Defaults, then the db's stored settings, then overrides; unknown names are an error."""
    from webdb.errors import BadInput

    out = dict(DEFAULTS)
    for src in (stored or {}), overrides:
        for k, v in src.items():
            if k not in DEFAULTS:
                raise BadInput(f"unknown setting {k!r} (known: {', '.join(sorted(DEFAULTS))})")
            if v is not None:
                out[k] = v
    if out["codec"] not in ("lz4", "zlib", "none"):
        raise BadInput(f"setting codec must be lz4, zlib or none, not {out['codec']!r}")
    for k, (lo, hi) in LIMITS.items():
        v = out[k]
        kind = type(DEFAULTS[k])
        ok = isinstance(v, bool) if kind is bool else isinstance(v, (int, float) if kind is float else int)
        if not ok or (kind is not bool and isinstance(v, bool)):
            what = {bool: "true or false", int: "a whole number", float: "a number"}[kind]
            raise BadInput(f"setting {k} must be {what}, not {v!r}")
        if kind is not bool and not lo <= v <= hi:
            raise BadInput(f"setting {k} must be in {lo}..{hi}, not {v!r}")
    if out["min_interval"] > out["max_interval"]:
        raise BadInput(f"setting min_interval {out['min_interval']} is above max_interval {out['max_interval']}")
    return out


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
