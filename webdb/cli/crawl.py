"""``webdb crawl DB --seeds FILE --rounds N``: inject, then N rounds of generate → fetch → update.

The db is created (with --sections) if it does not exist; segments go to --segments (default
DB.segments).  One line per round: generated, fetched, not modified, redirects, failed, new
URLs, db size, seconds per step.  A round that generates nothing ends the crawl.

``--set NAME=VALUE`` (repeatable) reaches every step that has a setting of that name: the
writer settings (webdb/core/settings.py: generate's and update's batches), the fetcher's
(fetchlist/settings.py) and update's options (fetchlist/update.py OPTIONS) — e.g.
``--set max_outlinks=500`` raises both the parser's and update's outlink cap.  A name no step
knows is an error.  ``--lock-wait`` applies to inject, generate and update.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from webdb.cli.common import add_json, emit, parse_settings
from webdb.cli.crawlopts import (
    add_fetch_args,
    add_generate_args,
    add_update_args,
    existing_files,
    fetch_settings,
    generate_kwargs,
    positive_int,
    update_kwargs,
)
from webdb.errors import BadInput


def add_parser(sub) -> None:
    p = sub.add_parser(
        "crawl",
        help="inject, then rounds of generate, fetch, update",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument("--seeds", action="append", metavar="FILE", default=[], help="seed file, repeatable")
    p.add_argument("--rounds", type=int, default=1, metavar="N", help="rounds (default 1)")
    p.add_argument("--segments", metavar="DIR", help="where segments go (default DB.segments)")
    p.add_argument("--sections", type=positive_int, default=1, help="sections of a db created here (default 1)")
    p.add_argument("--score", type=float, default=1.0, help="score of an injected page (default 1.0)")
    add_generate_args(p)
    add_fetch_args(p)
    add_update_args(p)
    p.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        dest="step_set",
        help="a setting of every step that knows NAME (writer, fetcher, update options); repeatable",
    )
    add_json(p)
    p.set_defaults(run=run)


def split_settings(pairs: list[str] | None) -> tuple[dict, dict, dict]:
    """``--set`` pairs split into (writer settings, fetch settings, update options): a name goes
    to every step that knows it; a name none knows is BadInput listing the known ones."""
    from fetchlist.settings import DEFAULTS as FETCH
    from fetchlist.settings import resolve
    from fetchlist.update import OPTIONS as UPDATE
    from webdb.core.settings import NAMES as WRITER

    writer, fetch, update = {}, {}, {}
    for pair in pairs or []:
        k, sep, v = pair.partition("=")
        if not sep or k not in (*WRITER, *FETCH, *UPDATE):
            known = ", ".join(sorted({*WRITER, *FETCH, *UPDATE}))
            raise BadInput(f"--set {pair!r}: expected NAME=VALUE with NAME a setting of a step: {known}")
        if k in WRITER:
            writer.update(parse_settings([pair]))
        try:
            value = json.loads(v)
        except ValueError:
            value = v
        if k in FETCH:
            fetch[k] = value
        if k in UPDATE:
            update[k] = value
    if fetch:
        resolve(dict(fetch))  # bad values are reported before anything runs
    return writer, fetch, update


def run(args) -> int:
    from fetchlist.crawl import crawl, refused_text
    from fetchlist.filters import UrlFilter
    from fetchlist.focus import FocusRules
    from fetchlist.normalize import WwwRules

    if args.rounds < 0:
        raise BadInput(f"--rounds {args.rounds}: expected a whole number >= 0")
    existing_files(args.seeds, "seed file")
    if args.segments and os.path.exists(args.segments) and not os.path.isdir(args.segments):
        raise BadInput(f"--segments {args.segments}: not a directory")
    writer_set, fetch_set, update_set = split_settings(args.step_set)
    gen = generate_kwargs(args)
    upd = {**update_kwargs(args), **update_set}
    inj = {
        "score": args.score,
        "url_filter": gen["url_filter"],
        "www": WwwRules.from_file(args.www_rules) if args.www_rules else None,
        "focus": FocusRules.from_file(args.focus_rules) if args.focus_rules else None,
    }
    if isinstance(gen["url_filter"], UrlFilter):
        upd["url_filters"] = gen["url_filter"]

    def report(rs) -> None:
        if not args.json:
            print(rs.line(), flush=True)

    res = crawl(
        args.db,
        seeds=args.seeds,
        rounds=args.rounds,
        segments_dir=args.segments,
        sections=args.sections,
        fetch_settings={**fetch_settings(args), **fetch_set},
        generate_options=gen,
        update_options=upd,
        inject_options=inj,
        writer_settings={**({"adaptive": True} if args.adaptive else {}), **writer_set} or None,
        report=report,
        lock_wait=args.lock_wait,
    )
    if args.json:
        emit(args, res.to_json())
    else:
        last = res.rounds[-1] if res.rounds else None
        inj_line = (
            f"injected {res.injected['new']:,} new of {res.injected['urls']:,} seed URLs; " if res.injected else ""
        )
        size = f"db {last.pages:,} pages, {last.links:,} links" if last else ""
        print(
            f"{inj_line}{len(res.rounds)} round(s) in {res.seconds:.1f}s; {size}; segments in {res.segments_dir}",
            file=sys.stdout,
        )
        if res.refused:
            print(f"in all rounds: {refused_text(res.refused)}", file=sys.stdout)
        if res.stopped:
            print(res.stopped, file=sys.stdout)
    return 0
