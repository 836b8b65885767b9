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
    # Fetch schedule (webdb.schedule): delay before retrying a transient failure, seconds.
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
    # Decoded-block cache of a reader, MiB.
    "cache_mb": 128,
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
    return out
