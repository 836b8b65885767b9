"""Options shared by the crawl subcommands (inject, generate, fetch, crawl, demo)."""

from __future__ import annotations

import json
import os

from webdb.cli.common import nonneg_int, positive_int
from webdb.errors import BadInput
from webdb.tables.records import DAY


def add_generate_args(p) -> None:
    g = p.add_argument_group("generate")
    g.add_argument("--top-n", type=positive_int, metavar="N", help="at most N URLs per round (best scores first)")
    g.add_argument("--max-per-host", type=positive_int, metavar="N", help="at most N URLs of one host per round")
    g.add_argument("--max-per-domain", type=positive_int, metavar="N", help="at most N URLs of one registered domain")
    g.add_argument("--min-score", type=float, metavar="X", help="skip pages scoring below X")
    g.add_argument(
        "--add-days", type=float, default=0, metavar="D", help="generate pages due within D days (default 0)"
    )
    g.add_argument("--fetchers", type=positive_int, default=1, metavar="N", help="fetchlists (partitions), default 1")
    g.add_argument(
        "--partition",
        choices=("host", "domain"),
        default="host",
        help="partition fetchlists by host or registered domain (default host)",
    )
    g.add_argument(
        "--mark-expiry",
        type=float,
        default=7,
        metavar="DAYS",
        help="a generated page not updated after DAYS is generated again (default 7)",
    )
    g.add_argument(
        "--max-anchors",
        type=int,
        default=10,
        metavar="N",
        help="inlink anchor texts per fetchlist entry, one per source domain (default 10; 0: none, saves reading "
        "LinksByURL)",
    )
    g.add_argument(
        "--filter",
        action="append",
        metavar="FILE",
        dest="filters",
        help="URL filter file (fetchlist.filters), repeatable: generate, inject and update apply it",
    )
    from webdb.cli.common import add_lock_wait

    add_lock_wait(g)


def generate_kwargs(args) -> dict:
    from fetchlist.filters import UrlFilter

    return {
        "top_n": args.top_n,
        "max_per_host": args.max_per_host,
        "max_per_domain": args.max_per_domain,
        "min_score": args.min_score,
        "add_days": args.add_days,
        "fetchers": args.fetchers,
        "partition": args.partition,
        "mark_expiry": int(args.mark_expiry * DAY),
        "url_filter": UrlFilter.from_files(args.filters) if getattr(args, "filters", None) else None,
        "lock_wait": args.lock_wait,
        "max_anchors": args.max_anchors,
    }


def add_update_args(p) -> None:
    g = p.add_argument_group("update")
    g.add_argument("--no-additions", action="store_true", help="add no new pages (only update known ones)")
    g.add_argument("--ignore-internal", action="store_true", help="drop links within a host (or domain)")
    g.add_argument("--ignore-external", action="store_true", help="drop links to other hosts (or domains)")
    g.add_argument(
        "--link-mode",
        choices=("host", "domain"),
        default="host",
        help="internal means same host or same registered domain (default host)",
    )
    g.add_argument("--www-rules", metavar="FILE", help="www/non-www rules for outlinks and seeds")
    g.add_argument("--focus-rules", metavar="FILE", help="per-domain useful-URL regexes (focused crawling)")
    g.add_argument(
        "--adaptive",
        action="store_true",
        help="adaptive fetch schedule: shorter interval for pages that change, longer for the others",
    )


def update_kwargs(args) -> dict:
    return {
        "no_additions": args.no_additions,
        "ignore_internal": args.ignore_internal,
        "ignore_external": args.ignore_external,
        "link_mode": args.link_mode,
        "url_filters": list(getattr(args, "filters", None) or []),
        "www_rules": args.www_rules,
        "focus_rules": args.focus_rules,
    }


def add_fetch_args(p) -> None:
    g = p.add_argument_group("fetch")
    g.add_argument("--threads", type=positive_int, metavar="N", help="fetcher threads (default 10)")
    g.add_argument("--delay", type=float, metavar="S", help="politeness delay per host, seconds (default 1.0)")
    g.add_argument(
        "--processes",
        type=nonneg_int,
        metavar="N",
        help="worker processes that parse pages and compress WARC records (default: one per CPU; "
        "0: parse in the fetcher's threads)",
    )
    g.add_argument(
        "--crawl-set",
        action="append",
        metavar="NAME=VALUE",
        dest="crawl_set",
        help="a crawl setting (fetchlist/settings.py), VALUE as JSON if it parses; repeatable",
    )


def fetch_settings(args) -> dict:
    from fetchlist.settings import DEFAULTS, resolve

    out: dict = {}
    for pair in getattr(args, "crawl_set", None) or []:
        k, sep, v = pair.partition("=")
        if not sep or k not in DEFAULTS:
            raise BadInput(f"--crawl-set {pair!r}: expected NAME=VALUE with NAME one of {', '.join(sorted(DEFAULTS))}")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    if getattr(args, "threads", None):
        out["threads"] = args.threads
    if getattr(args, "delay", None) is not None:
        out["politeness_delay"] = args.delay
    if getattr(args, "processes", None) is not None:
        out["processes"] = args.processes
    if getattr(args, "www_rules", None):
        out.setdefault("www_rules", args.www_rules)
    resolve(out)  # unknown names and bad values are reported before anything runs
    return out


def existing_files(paths: list[str], what: str) -> list[str]:
    for p in paths:
        if not os.path.isfile(p):
            raise BadInput(f"{p}: no such {what}")
    return paths
