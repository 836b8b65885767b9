"""``webdb create DB --sections K``: an empty database.

webdb create DB --sections K                    a local database directory
webdb create --hosts hosts.ini DB [--sections K]  a rack: on every host of hosts.ini, DB's
                                                identity and CURRENT, and the directory of
                                                each section that host holds (K: [sections] count)
"""

from __future__ import annotations

import argparse

import webdb
from webdb.cli.common import add_json, emit, parse_settings, positive_int
from webdb.errors import BadInput


def add_parser(sub) -> None:
    p = sub.add_parser(
        "create",
        help="create an empty database",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("db", help="database directory (must not exist or be empty); with --hosts, the db name")
    p.add_argument(
        "--sections", type=positive_int, default=None, help="number of sections (one per machine), default 1"
    )
    p.add_argument("--hosts", metavar="HOSTS_INI", help="create the db on the hosts of this hosts.ini")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="a stored setting (see webdb/core/settings.py)")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    if args.hosts:
        from webdb.writer.rack import Rack, create_rack

        rack = Rack.from_file(args.hosts, args.db)
        if args.sections not in (None, rack.k):
            raise BadInput(f"--sections {args.sections} but {args.hosts} places {rack.k} sections")
        res = create_rack(rack, **parse_settings(args.set))
        hosts = {h: {"sections": r.value["sections"], "seconds": r.seconds} for h, r in res.items()}
        emit(
            args,
            {"db": rack.db, "sections": rack.k, "hosts": hosts},
            f"created {rack.db} with {rack.k} section(s) on "
            + ", ".join(f"{h} ({','.join(map(str, v['sections'])) or 'master'})" for h, v in hosts.items()),
        )
        return 0
    sections = 1 if args.sections is None else args.sections
    db = webdb.create(args.db, sections=sections, **parse_settings(args.set))
    emit(args, {"db": db.path, "sections": sections}, f"created {db.path} with {sections} section(s)")
    return 0
