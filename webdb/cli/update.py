"""``webdb update``: apply one round of fetch output to a database, section by section.

    webdb update DB SEGMENT...                      k local section processes (the embedded default)
    webdb update --hosts hosts.ini DB [HOST:]PATH...  one section writer per host, over ssh

Each section writer applies its share of the input on its own host (``--input``, default the
crawl loop's segments reader), then the writers exchange edits stage by stage through ndfs
and the coordinator commits all sections at once (docs/distributed.md).  With --hosts, a
bare PATH is read on every host (relative to ``<root>/<db>`` there), ``HOST:PATH`` on one
host; a location's sections split its inputs into ordered shares (docs/distributed.md).  Progress goes to stderr, a
per-host summary to stdout.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time

from webdb.cli.common import add_json, emit, parse_settings
from webdb.errors import BadInput
from webdb.writer.inputs import DEFAULT_INPUT, resolve
from webdb.writer.rack import HEARTBEAT_TIMEOUT, STAGE_TIMEOUT, Rack, UpdateFailed, parse_inputs, update


def add_parser(sub) -> None:
    import argparse

    p = sub.add_parser(
        "update",
        help="apply a round of fetch output (local sections or a rack)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("db", help="database directory; with --hosts, the db name")
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="segment directories or other input files")
    p.add_argument("--hosts", metavar="HOSTS_INI", help="run one section writer per host of this hosts.ini")
    p.add_argument(
        "--input",
        default=DEFAULT_INPUT,
        metavar="MODULE:FUNCTION",
        help=f"what applies the input to a section writer (default {DEFAULT_INPUT})",
    )
    p.add_argument(
        "--option",
        action="append",
        metavar="NAME=VALUE",
        help="passed to the input function (VALUE parsed as JSON if it can be)",
    )
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="a writer setting for this batch")
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=HEARTBEAT_TIMEOUT,
        metavar="S",
        help=f"a host silent this long stops the update (default {HEARTBEAT_TIMEOUT:g})",
    )
    p.add_argument(
        "--stage-timeout",
        type=float,
        default=STAGE_TIMEOUT,
        metavar="S",
        help=f"longest a section waits for the others' edits of one stage (default {STAGE_TIMEOUT:g})",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    add_json(p)
    p.set_defaults(run=run)


def _options(pairs: list[str] | None) -> dict:
    out = {}
    for pair in pairs or []:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise BadInput(f"--option {pair!r}: expected NAME=VALUE")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


class Progress:
    """One line per finished step of a section, per host: stage, records, bytes moved."""

    def __init__(self, out=sys.stderr) -> None:
        self.out = out
        self.t0 = time.monotonic()

    def __call__(self, e: dict) -> None:
        ev, host = e.get("ev"), e["host"]
        t = f"{time.monotonic() - self.t0:7.1f}s"
        if ev == "section" and e.get("state") == "merged":
            line = (
                f"section {e['section']}: stage {e['step']}/5 merged, {e['records']:,} records, "
                f"{e['bytes'] / 1e6:.1f} MB ({e['seconds']:.1f}s)"
            )
        elif ev == "section" and e.get("state") == "shipped":
            line = (
                f"section {e['section']}: step {e['step']} shipped {e['files']} files, {e['bytes'] / 1e6:.2f} MB "
                f"({e['remote_bytes'] / 1e6:.2f} MB to other hosts, {e['seconds']:.1f}s)"
            )
        elif ev == "prepared":
            line = f"section {e['section']}: prepared"
        elif ev in ("synced", "ready", "committed"):
            line = ev
        else:
            return
        self.out.write(f"{t} {host:>10}  {line}\n")
        self.out.flush()


def run(args) -> int:
    fn = resolve(args.input)  # a missing input module is reported here, before any host is touched
    # Sections of one host split the input into ordered shares when the input function can.
    shares = "share" in inspect.signature(fn).parameters
    if args.hosts:
        rack = Rack.from_file(args.hosts, args.db)
        inputs = parse_inputs(rack, args.inputs, shares)
    else:
        rack = Rack.local(args.db)
        inputs = parse_inputs(rack, [os.path.abspath(p) for p in args.inputs], shares)
    progress = None if (args.quiet or args.json) else Progress()
    try:
        res = update(
            rack,
            inputs,
            input_fn=args.input,
            options=_options(args.option),
            settings=parse_settings(args.set),
            heartbeat_timeout=args.heartbeat_timeout,
            stage_timeout=args.stage_timeout,
            progress=progress,
        )
    except UpdateFailed as e:
        emit(args, _json(e.result), e.result.summary())
        print(f"webdb update: error: {e}", file=sys.stderr)
        # Bad input (a segment that is not there, a malformed record) is 2 like every command's
        # WebDBError; a run that failed for other reasons (host down, killed writer) is 1.
        return 2 if e.kind in ("BadInput", "CorruptionError") else 1
    emit(args, _json(res), res.summary())
    return 0


def _json(res) -> dict:
    hosts = {
        h: {"ok": r.ok, "reason": r.reason, "seconds": r.seconds, "bytes": r.bytes, **(r.value or {})}
        for h, r in res.hosts.items()
    }
    return {
        "db": res.db,
        "committed": res.committed,
        "generation": res.generation,
        "batch": res.batch,
        "seconds": res.seconds,
        "error": res.error,
        "kind": res.kind,
        "hosts": hosts,
        "shipped": res.shipped,
        "warnings": res.warnings,
    }
