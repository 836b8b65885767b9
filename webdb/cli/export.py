"""``webdb export DB``: one record per fetched page with its inlink anchors, for an indexer.

webdb export DB                                JSON lines on stdout, in URL order
webdb export DB --out pages.parquet --format parquet
webdb export DB --mount /mnt/rack --out pages.jsonl     every host's sections from one mount
webdb export DB --segments SEG… --out pages.jsonl      + title, text, charset, language, outlinks,
                                               content location (latest parse of each URL)
webdb export DB --since 2026-11-24T00:00:00Z --domain example.com --fit-only
webdb export --hosts hosts.ini DB --out pages.jsonl      each host exports its own sections (or
                                               --dask: its workers), this machine joins them

Records and the Parquet schema: docs/indexing.md.  Pages exported by default: status fetched
or not_modified (duplicates and pages without content are left out; --status picks others).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from contextlib import contextmanager

from webdb.cli.common import add_db_location, add_json, add_rack_args, emit, open_db, rack_failed, rack_target
from webdb.errors import BadInput
from webdb.tables.format import TMP_DIR
from webdb.tools.export import (
    DEFAULT_MAX_ANCHORS,
    ROW_GROUP_BYTES,
    export_pages,
    host_filter,
    parse_statuses,
    parse_time,
    write_jsonl,
    write_parquet,
)


def _non_negative(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {v!r}")
    return n


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="pages with their anchors (and parse output) for an indexer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl", help="output format (default jsonl)")
    p.add_argument("--out", metavar="FILE", help="write FILE (temp file + rename); default stdout (jsonl only)")
    p.add_argument("--since", metavar="TIME", help="only pages fetched after TIME (epoch seconds or ISO 8601, UTC)")
    p.add_argument(
        "--status", metavar="LIST", help="statuses to export, comma-separated (default: fetched,not_modified)"
    )
    p.add_argument("--domain", metavar="DOMAIN", help="only pages on DOMAIN or its subdomains")
    p.add_argument("--fit-only", action="store_true", help='only pages marked fit by focus rules (meta "fit" = "1")')
    p.add_argument("--focus", metavar="FILE", help="with --fit-only: decide fit by these focus rules instead")
    p.add_argument(
        "--max-anchors",
        type=_non_negative,
        default=DEFAULT_MAX_ANCHORS,
        help=f"anchors kept per page (default {DEFAULT_MAX_ANCHORS})",
    )
    p.add_argument("--segments", nargs="+", metavar="SEG", help="join the latest parse output of these segments")
    p.add_argument("--tmp", metavar="DIR", help="where the segment index is sorted (default DB/tmp)")
    p.add_argument("--sort-mb", type=_non_negative, default=64, help="memory of the segment index sort (default 64)")
    p.add_argument(
        "--row-group-mb",
        type=_non_negative,
        default=ROW_GROUP_BYTES >> 20,
        help=f"Parquet row group size (default {ROW_GROUP_BYTES >> 20})",
    )
    add_db_location(p)
    add_rack_args(p, "export")
    add_json(p)
    p.set_defaults(run=run)


@contextmanager
def atomic_output(path: str):
    """A binary file that becomes ``path`` only when the block ends without an error.

    Written next to ``path`` (same file system) and renamed over it; an existing ``path`` is
    replaced only if it is a regular file (never a directory, device, pipe or symlink).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{path}: exists and is not a regular file; not replacing it")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise BadInput(f"{path}: no such directory {d}")
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp.{os.getpid()}")
    try:
        with open(tmp, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def run(args) -> int:
    if args.focus and not args.fit_only:
        raise BadInput("--focus FILE goes with --fit-only")
    if args.format == "parquet" and not args.out:
        raise BadInput("--format parquet writes a file: give --out FILE")
    statuses = parse_statuses(args.status) if args.status else None
    since = parse_time(args.since) if args.since is not None else None
    rack, scheduler = rack_target(args)
    if rack is not None:
        return run_rack(args, rack, scheduler, statuses, since)
    url_ok = host_filter(args.domain) if args.domain else None
    page_ok = None
    if args.fit_only and args.focus:
        from fetchlist.focus import FocusRules

        rules = FocusRules.from_file(args.focus)
        url_ok = _both(url_ok, rules.fits)
    elif args.fit_only:
        page_ok = _fit
    db = open_db(args)
    with db.reader() as r:
        kw = {"statuses": statuses} if statuses is not None else {}
        records = export_pages(r, since=since, url_ok=url_ok, page_ok=page_ok, max_anchors=args.max_anchors, **kw)
        join = None
        try:
            if args.segments:
                from fetchlist.export import SegmentJoin

                tmp = args.tmp or os.path.join(db.path, TMP_DIR)
                join = SegmentJoin(args.segments, tmp, args.sort_mb << 20)
                records = join.join(records)
            if args.out:
                try:
                    with atomic_output(args.out) as f:
                        n = _write(args, records, f)
                except OSError as e:
                    raise BadInput(f"{args.out}: export failed ({e.strerror or e})") from None
            else:
                n = _write(args, records, sys.stdout.buffer)
                sys.stdout.flush()
        finally:
            if join is not None:
                join.close()
    if args.out:
        emit(
            args,
            {"out": args.out, "format": args.format, "pages": n, "generation": r.generation},
            f"exported {n:,} pages of generation {r.generation} to {args.out} ({args.format})",
        )
    return 0


def run_rack(args, rack, scheduler, statuses, since) -> int:
    """The export of a rack db: every location writes its sections' records where they live
    (the driver's task, webdb.analysis.onrack.export_rack), this machine fetches them through
    each location's ndfs transport and writes them in section order, which is URL order."""
    import json
    import tempfile

    from webdb.analysis.onrack import export_rack
    from webdb.ndfs import open_transport
    from webdb.tools.export import DEFAULT_STATUSES
    from webdb.writer.rack import UpdateFailed

    for opt in ("segments", "focus", "mount", "section_dir"):
        if getattr(args, opt):
            raise BadInput(f"--{opt.replace('_', '-')} does not go with --hosts/--dask (export the rack's pages alone)")
    with tempfile.TemporaryDirectory(prefix="webdb-export-", dir=args.tmp) as tmp:

        def fetch(label: str, name: str) -> None:
            with open_transport(rack.places[label].location) as t:
                t.get(f"{rack.db}/{name}", os.path.join(tmp, os.path.basename(name)))

        try:
            parts, generation = export_rack(
                rack,
                fetch,
                statuses=DEFAULT_STATUSES if statuses is None else statuses,
                since=since,
                domain=args.domain,
                fit_only=args.fit_only,
                max_anchors=args.max_anchors,
                dask=scheduler,
                heartbeat_timeout=args.heartbeat_timeout,
            )
        except UpdateFailed as e:
            return rack_failed("export", e)

        def lines():
            for j, _ in parts:
                with open(os.path.join(tmp, f"export-{j:04d}.jsonl"), "rb") as f:
                    yield from f

        def write(f) -> int:
            if args.format == "jsonl":  # the locations' lines as they are (write_jsonl's bytes)
                n = 0
                for line in lines():
                    f.write(line)
                    n += 1
                return n
            return _write(args, (json.loads(x.decode("utf-8", "surrogatepass")) for x in lines()), f)

        if args.out:
            with atomic_output(args.out) as f:
                n = write(f)
        else:
            n = write(sys.stdout.buffer)
            sys.stdout.flush()
    if args.out:
        emit(
            args,
            {"out": args.out, "format": args.format, "pages": n, "generation": generation},
            f"exported {n:,} pages of generation {generation} ({len(parts)} sections) to {args.out} ({args.format})",
        )
    return 0


def _write(args, records, f) -> int:
    if args.format == "parquet":
        return write_parquet(records, f, segments=bool(args.segments), row_group_bytes=max(1, args.row_group_mb) << 20)
    return write_jsonl(records, f)


def _fit(page) -> bool:
    return page.meta.get("fit") == "1"


def _both(a, b):
    if a is None:
        return b
    return lambda url: a(url) and b(url)
