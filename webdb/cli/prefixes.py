"""``webdb prefixes DB [--depth N] [--min-count M] [--json]``: statistics by URL prefix.

One line per prefix, by (domain, prefix): domain, prefix, unfetched, fetched, fit (pages with
meta fit=1) — TSV with a ``#`` header, or JSON lines with --json.  A URL counts in each of its
first N prefixes (cut after each "/"); prefixes with fetched+unfetched < M are dropped.
"""

from __future__ import annotations

import json
import sys

from webdb.cli.common import add_db_location, add_json, nonneg_int, open_db, positive_int

COLS = ("domain", "prefix", "unfetched", "fetched", "fit")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "prefixes",
        help="statistics by URL prefix",
        description=__doc__,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument("--depth", type=positive_int, default=4, help="prefixes per URL, the host root included (default 4)")
    p.add_argument("--min-count", type=nonneg_int, default=1, help="drop prefixes with fewer known URLs (default 1)")
    add_db_location(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from webdb.analysis.prefixes import prefix_stats

    out = sys.stdout
    if not args.json:
        out.write("#" + "\t".join(COLS) + "\n")
    with open_db(args).reader() as r:
        for s in prefix_stats(r, args.depth, args.min_count):
            row = {c: getattr(s, c) for c in COLS}
            out.write(json.dumps(row) + "\n" if args.json else "\t".join(map(str, row.values())) + "\n")
    return 0
