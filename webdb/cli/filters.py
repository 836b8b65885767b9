"""``webdb filters DB --out FILE [--min-useful N] [--depth N] [--disabled FILE] [--json]``.

Generate URL-exclusion rules from the prefix statistics: per domain with at least N useful
(meta fit=1) URLs, every prefix with no useful URL and more known URLs than the domain's useful
count gets a rule ``-^PREFIX``.  FILE is a regex filter file (ending with ``+.``) for the
``url_filters`` setting; rules listed in the --disabled file are not re-created.
"""

from __future__ import annotations

from webdb.cli.common import add_db_location, add_json, emit, nonneg_int, open_db, out_file, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "filters",
        help="generate URL filters from prefix statistics",
        description=__doc__,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument("--out", required=True, metavar="FILE", help="filter file to write (replaced atomically)")
    p.add_argument("--min-useful", type=nonneg_int, default=10, help="skip domains with fewer useful URLs (default 10)")
    p.add_argument("--depth", type=positive_int, default=4, help="prefixes per URL, as `webdb prefixes` (default 4)")
    p.add_argument("--disabled", metavar="FILE", help="rules never to create, one per line")
    add_db_location(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from webdb.analysis.filtergen import check_out, filtergen

    out_file(check_out(args.out))  # before the db is read: a folder that exists, a regular file or none
    res = filtergen(open_db(args), args.out, args.min_useful, args.depth, args.disabled)
    emit(
        args,
        res,
        f"{res['out']}: {res['rules']:,} rule(s) for {res['domains']:,} domain(s), {res['disabled']:,} disabled",
    )
    return 0
