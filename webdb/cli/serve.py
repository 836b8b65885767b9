"""``webdb serve DB``: the crawl dashboard, a read-only web view of a db and its rounds.

webdb serve DB [--port P] [--bind ADDR] [--mount DIR | --section-dir J=DIR ...]

Serves http://ADDR:P/ (default 127.0.0.1:8642; --port 0 picks a free port) until Ctrl-C:
overview (the numbers of `read --stats`), rounds (one row per generation, with charts), hosts
(pages per host by status, sortable), page (a URL's record, inlinks with anchor texts,
outlinks) and the same as JSON under /api/ (docs/api.md).  Read-only: it never takes the
writer lock; each request reads the committed generation, so rounds run while it serves.
There is no authentication: an address other than loopback is served only when asked with
--bind, and with a warning.
"""

from __future__ import annotations

import argparse
import signal
import sys

from webdb.cli.common import add_db_location, nonneg_float, open_db, positive_int
from webdb.cli.demo import port_number
from webdb.errors import BadInput

DEFAULT_PORT = 8642


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="a read-only web dashboard of a db",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: a free one)"
    )
    p.add_argument(
        "--bind", metavar="ADDR", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)"
    )
    p.add_argument(
        "--max-hosts",
        type=positive_int,
        default=100_000,
        metavar="N",
        help="hosts the hosts view keeps per generation (the rest are one row; default 100000)",
    )
    p.add_argument(
        "--scan-wait",
        type=nonneg_float,
        default=5.0,
        metavar="S",
        help="seconds a page waits for the scan of a new generation before it shows the manifest's numbers (default 5)",
    )
    p.add_argument("--log", action="store_true", help="log every request on stderr")
    add_db_location(p)
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        import jinja2  # noqa: F401 - the templates' engine; checked before anything is bound
    except ImportError:
        raise BadInput("webdb serve needs Jinja2: pip install 'webdb[serve]'") from None
    from webdb.serve.app import is_loopback, make_server

    db = open_db(args)
    db.committed()  # a db without a readable CURRENT is named now, not at the first request
    try:
        server = make_server(
            db, args.bind, args.port, max_hosts=args.max_hosts, scan_wait=args.scan_wait, log_requests=args.log
        )
    except OSError as e:
        raise BadInput(f"--bind {args.bind} --port {args.port}: cannot listen there ({e.strerror or e})") from None
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    if not is_loopback(args.bind):
        print(
            f"webdb serve: warning: listening on {shown}:{port}, not loopback: there is no authentication, "
            "anyone who can reach this address can read the whole db",
            file=sys.stderr,
        )
    print(f"serving {db.path} on http://{shown}:{port}/ (read-only; Ctrl-C stops)", flush=True)
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the server as Ctrl-C does: the socket is closed
