"""``webdb segment upgrade SEGMENT``: convert a version 1 segment (content in ``.bin`` files) to
version 2 (content as WARC, ``content/part-NNNNN.warc.gz``), atomically: a kill leaves the old
segment, or a committed upgrade that the same command finishes.  A segment already at version 2
is left as it is.  Details: docs/segment.md.
"""

from __future__ import annotations

import argparse
import os

from webdb.cli.common import add_json, emit
from webdb.errors import BadInput


def add_parser(sub) -> None:
    p = sub.add_parser(
        "segment",
        help="segment maintenance (upgrade)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # A positional action, not nested subparsers: main() parses with parse_intermixed_args.
    p.add_argument("action", choices=["upgrade"], help="upgrade: convert a version 1 segment's content to WARC")
    p.add_argument("segment")
    add_json(p)
    p.set_defaults(run=run_upgrade)


def run_upgrade(args) -> int:
    from fetchlist.upgrade import upgrade_segment

    if not os.path.isdir(args.segment):
        raise BadInput(f"{args.segment}: no such segment directory")
    res = upgrade_segment(args.segment)
    if res.get("resumed"):
        text = f"{args.segment}: finished an interrupted upgrade to version {res['version']}"
    elif res["from_version"] == res["version"]:
        text = f"{args.segment}: already version {res['version']}, nothing to do"
    else:
        text = (
            f"{args.segment}: upgraded from version {res['from_version']} to {res['version']}: "
            f"{res['parts']} partitions, {res['responses']:,} WARC response records"
        )
    emit(args, res, text)
    return 0
