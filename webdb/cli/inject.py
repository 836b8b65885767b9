"""``webdb inject DB FILE...``: add seed URLs (if not present) with an injected score.

Seed file: one URL per line, optionally followed by tab-separated name=value metadata
(score=X, fetch_interval=SECONDS, or any name=value kept in page.meta; Nutch's nutch.score
and nutch.fetchInterval are accepted).  '#' lines and blank lines are skipped.  The db is
created (with --sections) if it does not exist.
"""

from __future__ import annotations

import argparse
import os

import webdb
from webdb.cli.common import add_json, add_lock_wait, emit
from webdb.cli.crawlopts import existing_files, positive_int
from webdb.errors import NotADatabase


def add_parser(sub) -> None:
    p = sub.add_parser(
        "inject", help="add seed URLs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("db")
    p.add_argument("files", nargs="+", metavar="FILE", help="seed files")
    p.add_argument("--score", type=float, default=1.0, help="score of an injected page (default 1.0)")
    p.add_argument("--filter", action="append", metavar="FILE", dest="filters", help="URL filter file, repeatable")
    p.add_argument("--www-rules", metavar="FILE", help="www/non-www rules applied to the seeds")
    p.add_argument("--focus-rules", metavar="FILE", help="useful-URL rules: fitting seeds get meta fit=1")
    p.add_argument("--fit-score", type=float, help="score of a fitting seed without its own score")
    p.add_argument("--skip-bad", action="store_true", help="count and skip malformed lines instead of failing")
    p.add_argument("--sections", type=positive_int, default=1, help="sections of a db created here (default 1)")
    add_lock_wait(p)
    add_json(p)
    p.set_defaults(run=run)


def open_or_create(path: str, sections: int):
    """The db at ``path``; created (empty) if the path does not exist or is an empty directory."""
    try:
        return webdb.open(path), False
    except NotADatabase:
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise
        return webdb.create(path, sections=sections), True


def run(args) -> int:
    from fetchlist.filters import UrlFilter
    from fetchlist.focus import FocusRules
    from fetchlist.inject import inject
    from fetchlist.normalize import WwwRules

    existing_files(args.files, "seed file")
    opts = {
        "score": args.score,
        "url_filter": UrlFilter.from_files(args.filters) if args.filters else None,
        "www": WwwRules.from_file(args.www_rules) if args.www_rules else None,
        "skip_bad": args.skip_bad,
        "focus": FocusRules.from_file(args.focus_rules) if args.focus_rules else None,
        "fit_score": args.fit_score,
    }
    db, created = open_or_create(args.db, args.sections)
    from webdb.lockwait import wait_for_lock

    c = wait_for_lock(lambda: inject(db, args.files, **opts), args.lock_wait, "inject")
    c["created"] = created
    text = (
        (f"created {db.path}\n" if created else "")
        + f"injected {c['new']:,} new pages ({c['urls']:,} URLs read, {c['urls'] - c['new']:,} already present, "
        f"{c['filtered']:,} filtered, {c['bad']:,} bad lines skipped); db has {c['pages']:,} pages"
    )
    for line in c["bad_lines"]:
        text += f"\n  skipped {line}"
    emit(args, c, text)
    return 0
