"""``webdb demo``: crawl the bundled website on loopback and print what the db holds.

Serves the generated demo site (fetchlist.demo_site: four hosts on 127.0.0.2-5 with real links,
robots.txt rules, a Crawl-delay, redirects, a loop, 404/410/500 answers), injects its home pages
and crawls it for --rounds rounds (default 4), printing one line per round and the db stats at
the end.  The db goes to a new temporary directory that is removed at the end (--keep keeps
it), or to --db PATH (kept).  Nothing leaves loopback.

``webdb demo --serve [--port P] [--seeds FILE]`` only serves the site, until Ctrl-C, and writes
its home pages to FILE (default ./demo-seeds.txt): crawl it by hand with inject, generate,
fetch, update and read (README, *Using it*).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from webdb.cli.common import add_json, emit, positive_int
from webdb.errors import BadInput


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="crawl the bundled website on loopback",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--db", metavar="PATH", help="database directory (must not exist); default: a temporary one")
    p.add_argument("--keep", action="store_true", help="keep the temporary database and segments")
    p.add_argument("--rounds", type=positive_int, default=4, help="crawl rounds (default 4)")
    p.add_argument("--pages", type=positive_int, default=300, help="size of the generated site (default 300)")
    p.add_argument("--sections", type=positive_int, default=2, help="sections of the demo db (default 2)")
    p.add_argument("--serve", action="store_true", help="only serve the demo site until Ctrl-C")
    p.add_argument("--port", type=port_number, default=0, help="port of --serve (default: a free one)")
    p.add_argument(
        "--seeds",
        metavar="FILE",
        default="demo-seeds.txt",
        help="--serve: write the seed URLs here (default %(default)s)",
    )
    add_json(p)
    p.set_defaults(run=run)


def port_number(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0..65535, not {s!r}")
    return v


def check_parent(path: str, what: str) -> None:
    """BadInput naming ``path`` unless its folder exists and is a folder."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        why = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise BadInput(f"{what} {path}: the folder {parent} {why}")


def serve(args) -> int:
    """Serve the demo site until SIGINT/SIGTERM; the seeds file names its home pages."""
    import signal
    import sys
    import threading

    from fetchlist.demo_site import DEMO_HOSTS, serve_demo

    check_parent(args.seeds, "--seeds")
    if os.path.isdir(args.seeds):
        raise BadInput(f"--seeds {args.seeds}: is a directory; name the seed file to write")
    try:
        server, site = serve_demo(pages=args.pages, port=args.port, crawl_delay=0.1)
    except OSError as e:
        raise BadInput(f"--port {args.port}: cannot serve on {', '.join(DEMO_HOSTS)}: {e.strerror or e}") from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server:
        with open(args.seeds, "w", encoding="utf-8") as f:
            f.write("".join(u + "\n" for u in site.seeds))
        bases = ", ".join(server.base(h) for h in DEMO_HOSTS)
        print(f"demo site: {len(site.graph):,} pages; seeds in {args.seeds}", flush=True)
        print(f"serving on {bases} (Ctrl-C stops)", flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    print("stopped", file=sys.stderr)
    return 0


def run(args) -> int:
    from fetchlist.demo_site import DEMO_HOSTS, loopback_ok, serve_demo

    missing = [h for h in DEMO_HOSTS if not loopback_ok(h)]
    if missing:
        raise BadInput(f"the demo serves on {', '.join(DEMO_HOSTS)}; this machine cannot bind {', '.join(missing)}")
    if args.serve:
        return serve(args)
    check_db_arg(args)
    tmp = None if args.db else tempfile.mkdtemp(prefix="webdb-demo-")
    root = args.db or os.path.join(tmp, "demo.db")
    t0 = time.monotonic()
    try:
        server, site = serve_demo(pages=args.pages, crawl_delay=0.1)
        with server:
            res = crawl_demo(args, root, tmp, server, site)
        data, text = summary(args, root, tmp, site, res, t0)
        emit(args, data, text)
    finally:
        if tmp and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def check_db_arg(args) -> None:
    """--db: a new folder (made here, so that a folder no db can be made in is named) or an empty one."""
    if args.db:
        check_parent(args.db, "--db")
        if not os.path.exists(args.db):
            try:
                os.mkdir(args.db)  # here, so that a folder no db can be made in is named as --db
            except OSError as e:
                raise BadInput(f"--db {args.db}: cannot create it: {e.strerror}") from None
    if args.db and os.path.exists(args.db) and (not os.path.isdir(args.db) or os.listdir(args.db)):
        raise BadInput(f"{args.db}: exists; give a new path (the demo site's port changes every run)")


def crawl_demo(args, root: str, tmp: str | None, server, site):
    """Write the seeds beside the db and crawl the served site for --rounds rounds, printing a
    line per round (unless --json); returns the CrawlResult."""
    from fetchlist.crawl import crawl
    from fetchlist.demo_site import DEMO_HOSTS
    from fetchlist.fetch import Fetcher

    quiet = args.json
    seeds = os.path.join(os.path.dirname(os.path.abspath(root)), "demo-seeds.txt")
    if not quiet:
        where = (
            ("a temporary directory, kept" if args.keep else "a temporary directory, removed at the end")
            if tmp
            else "--db"
        )
        print(f"demo site: {len(site.graph):,} pages on {', '.join(server.base(h) for h in DEMO_HOSTS)}")
        print(f"db: {root} ({where}); seeds: {seeds}")
    with open(seeds, "w", encoding="utf-8") as f:
        f.write("".join(u + "\n" for u in site.seeds))
    # Our own servers on loopback (allowed by the address policy here only): a short
    # politeness delay (host 1 still asks for Crawl-delay 0.1 s).
    fetcher = Fetcher(politeness_delay=0.02, threads=8, progress=False, allow_private_addresses=True)
    return crawl(
        root,
        seeds=[seeds],
        rounds=args.rounds,
        sections=args.sections,
        fetcher=fetcher,
        create_settings={"sync": False},
        report=None if quiet else (lambda rs: print(rs.line(), flush=True)),
    )


def summary(args, root: str, tmp: str | None, site, res, t0: float) -> tuple[dict, str]:
    """What the db holds after the crawl, checked, and how much of the reachable site it
    fetched: the --json document and the text."""
    import webdb
    from webdb.cli.read import stats

    with webdb.open(root).reader() as r:
        st = stats(r, top_hosts=4, progress=False)
        check = r.check()
    reach = site.reachable()
    with webdb.open(root).reader() as r:
        got = {p.url for p in r.pages() if p.status == 1 and p.url in site.graph}
    data = {
        "db": root,
        "kept": tmp is None or args.keep,
        "crawl": res.to_json(),
        "stats": st,
        "check": "ok",
        "site_pages": len(site.graph),
        "reachable_html": len(reach),
        "fetched_html": len(got & reach),
        "seconds": round(time.monotonic() - t0, 2),
    }
    lines = [
        f"db stats: {st['pages']:,} pages ({st['fetched']:,} fetched, {st['unfetched']:,} unfetched), "
        f"{st['links']:,} links, {st['bytes']:,} bytes in {st['sections']} sections; check {data['check']} "
        f"({check['pages']:,} pages, {check['links']:,} links verified)",
        "status: " + ", ".join(f"{k} {v:,}" for k, v in st["status"].items()),
        "top hosts: " + ", ".join(f"{h} {n:,}" for h, n in st["top_hosts"]),
        f"fetched {data['fetched_html']:,} of the {len(reach):,} HTML pages a polite crawler can reach "
        f"in {data['seconds']:.1f}s",
    ]
    if tmp and not args.keep:
        lines.append(f"removed {tmp} (run `webdb demo --keep` or `--db PATH` to keep the db)")
    else:
        lines.append(f"try: webdb read {root} --stats")
    return data, "\n".join(lines)
