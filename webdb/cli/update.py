"""``webdb update``: apply one round of fetch output to a database, section by section.

    webdb update DB SEGMENT...                      k local section processes (the embedded default)
    webdb update --hosts hosts.ini DB [HOST:]PATH...  one section writer per host, over ssh
    webdb update --dask tcp://HOST:8786 DB PATH...    each section's steps as tasks on a Dask cluster

Each section writer applies its share of the input on its own host (``--input``, default the
crawl loop's segments reader), then the writers exchange edits stage by stage through ndfs
and the coordinator commits all sections at once (docs/distributed.md).  With --hosts, a
bare PATH is read on every host (relative to ``<root>/<db>`` there), ``HOST:PATH`` on one
host; a location's sections split its inputs into ordered shares (docs/distributed.md).  With
--dask (or ``dask_scheduler`` in hosts.ini) the same protocol runs on an existing Dask cluster:
section J's tasks go to the worker started with ``--resources section-J=1``.  Progress goes to
stderr — one line per stage (a bar per stage on a terminal), or with -v a line per section
and step — and a per-host summary to stdout.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
from collections import Counter

from webdb.cli.common import add_json, add_lock_wait, add_quiet, emit, parse_settings
from webdb.core.lockwait import wait_for_lock
from webdb.errors import BadInput
from webdb.ndfs.config import check_scheduler_address
from webdb.writer.daskrun import CONNECT_TIMEOUT, WORKER_TIMEOUT
from webdb.writer.engine import LEVEL_STEPS
from webdb.writer.inputs import DEFAULT_INPUT, input_spec, resolve
from webdb.writer.rack import HEARTBEAT_TIMEOUT, STAGE_TIMEOUT, Rack, UpdateFailed, update


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
        "--dask",
        metavar="tcp://HOST:PORT",
        help="run on this Dask scheduler (default: hosts.ini's dask_scheduler, if any; docs/distributed.md)",
    )
    p.add_argument(
        "--worker-timeout",
        type=float,
        default=WORKER_TIMEOUT,
        metavar="S",
        help=f"with Dask: longest a section may be without its worker (default {WORKER_TIMEOUT:g})",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT,
        metavar="S",
        help=f"with Dask: longest wait to reach the scheduler (default {CONNECT_TIMEOUT:g})",
    )
    p.add_argument(
        "--input",
        default=DEFAULT_INPUT,
        metavar="NAME|MODULE:FUNCTION",
        help=f"what applies the input to a section writer: a registered name or MODULE:FUNCTION "
        f"(default {DEFAULT_INPUT}, the crawl's segments)",
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
    add_lock_wait(p)
    add_quiet(p)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="a progress line per section and step (default: one per stage)"
    )
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


# What a stage did to a link table's delta runs besides adding one (webdb.writer.engine.LEVEL_STEPS).
_LEVEL_WORDS = {"compacted": "compacted into a new base", "merged_runs": "merged into one run"}


class Progress:
    """Progress of an update on stderr.

    By default one line per stage once every section has merged it (on a terminal, one bar
    per stage over the k sections instead), and the commit; ``verbose``: a line per finished
    step of each section, per host (stage, records, bytes moved)."""

    def __init__(self, k: int, verbose: bool = False, out=sys.stderr, terminal: bool | None = None) -> None:
        from webdb.util.progress import is_terminal

        self.k, self.verbose, self.out = k, verbose, out
        self.terminal = is_terminal(out) if terminal is None else terminal
        self.t0 = time.monotonic()
        self.stages: dict[int, list] = {}  # stage -> [sections merged, records, bytes, bar, Counter]
        self.latest: dict[int, int] = {}  # section -> last stage it merged
        self.printed = 0  # stages reported
        self.committed = False

    def __call__(self, e: dict) -> None:
        if e.get("ev") == "warning":  # e.g. a host without the compiled block codec
            self._write(f"{time.monotonic() - self.t0:7.1f}s  warning: {e['message']}")
        elif self.verbose:
            self._detail(e)
        else:
            self._summary(e)

    def _write(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def _summary(self, e: dict) -> None:
        ev = e.get("ev")
        if ev == "section" and e.get("state") == "merged":
            step = e["step"]
            st = self.stages.setdefault(step, [0, 0, 0, None, Counter()])
            st[0] += 1
            st[1] += e["records"]
            st[2] += e["bytes"]
            st[4].update(k for k in LEVEL_STEPS if e.get(k))  # sections that compacted / merged runs
            if self.terminal:
                if st[3] is None:
                    from tqdm import tqdm

                    st[3] = tqdm(total=self.k, desc=f"stage {step}/5", unit="section", file=self.out)
                st[3].update(1)
            # A section with nothing to merge in a stage skips it: a stage is done once every
            # section has reached it or a later one.
            self.latest[e["section"]] = max(self.latest.get(e["section"], 0), step)
            if len(self.latest) == self.k:
                self._done_up_to(min(self.latest.values()))
        elif ev == "committed" and not self.committed:
            self.committed = True
            self._done_up_to(5)
            self._write(f"{time.monotonic() - self.t0:7.1f}s  committed")

    def _done_up_to(self, stage: int) -> None:
        while self.printed < stage:
            self.printed += 1
            n, records, size, bar, levels = self.stages.get(self.printed, [0, 0, 0, None, Counter()])
            if bar is not None:
                bar.close()
            elif not self.terminal:
                self._write(
                    f"{time.monotonic() - self.t0:7.1f}s  stage {self.printed}/5 merged in {n} of {self.k} "
                    f"section(s): {records:,} records, {size / 1e6:.1f} MB"
                    + "".join(f"; runs {_LEVEL_WORDS[k]} in {levels[k]} section(s)" for k in LEVEL_STEPS if levels[k])
                )

    def _detail(self, e: dict) -> None:
        ev, host = e.get("ev"), e["host"]
        t = f"{time.monotonic() - self.t0:7.1f}s"
        if ev == "section" and e.get("state") == "merged":
            line = (
                f"section {e['section']}: stage {e['step']}/5 merged, {e['records']:,} records, "
                f"{e['bytes'] / 1e6:.1f} MB ({e['seconds']:.1f}s)"
                + "".join(f", {e[k]} run(s) {_LEVEL_WORDS[k]}" for k in LEVEL_STEPS if e.get(k))
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
        self._write(f"{t} {host:>10}  {line}")


def run(args) -> int:
    import fetchlist

    fetchlist.register_inputs()  # the crawl's inputs by name ("segments"); webdb does not know them
    if not args.inputs and not (args.hosts or args.dask):
        # An update of nothing would commit an empty generation: surely a slip (an unset
        # shell variable), so it is refused.  On a rack an empty batch has a use (it brings
        # every host to the rack's generation first), so it runs, saying so.
        raise BadInput("no INPUT given: name the segment directories (or input files) to apply")
    if not args.inputs and not args.quiet:
        print(
            "webdb update: no INPUT given: an empty batch (every host is brought to the rack's generation)",
            file=sys.stderr,
        )
    spec = input_spec(args.input)  # the hosts get MODULE:FUNCTION: they import it themselves
    fn = resolve(spec)  # a missing input module is reported here, before any host is touched
    # Sections of one host split the input into ordered shares when the input function can.
    shares = "share" in inspect.signature(fn).parameters
    if args.hosts:
        rack = Rack.from_file(args.hosts, args.db)
        names = list(args.inputs)
    else:
        rack = Rack.local(args.db)
        names = [os.path.abspath(p) for p in args.inputs]
    if args.dask:
        try:
            check_scheduler_address(args.dask)
        except ValueError as e:
            raise BadInput(f"--dask: {e}") from None
    progress = None if (args.quiet or args.json) else Progress(rack.k, verbose=args.verbose)
    options, settings = _options(args.option), parse_settings(args.set)
    common = {
        "names": names,
        "shares": shares,
        "input_fn": spec,
        "options": options,
        "settings": settings,
        "heartbeat_timeout": args.heartbeat_timeout,
        "stage_timeout": args.stage_timeout,
        "progress": progress,
    }

    if args.dask or rack.config.dask_scheduler:
        common.update(worker_timeout=args.worker_timeout, connect_timeout=args.connect_timeout)

    def attempt():
        return update(rack, dask=args.dask, **common)

    try:
        res = wait_for_lock(attempt, args.lock_wait, "update", rack_lock_held)
    except UpdateFailed as e:
        # The error is one line on stderr; the per-host table only with --json or -v.
        if args.json or args.verbose:
            emit(args, _json(e.result), e.result.summary())
        waited = f"waited {args.lock_wait:g}s for the writer lock: " if rack_lock_held(e) else ""
        print(f"webdb update: error: {waited}{e}", file=sys.stderr)
        # Bad input (a segment that is not there, a malformed record), a corrupt db and a lock
        # held past --lock-wait are 2 like every command's WebDBError; a run that failed for
        # other reasons (host down, killed writer) is 1.
        return 2 if e.kind in ("BadInput", "CorruptionError", "LockedError") else 1
    emit(args, _json(res), res.summary())
    return 0


def rack_lock_held(e: BaseException) -> bool:
    """A rack update that failed only because a host's writer lock is held: nothing was
    written (the agents take their locks first), so it can start again."""
    return isinstance(e, UpdateFailed) and e.kind == "LockedError" and not e.result.committed


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
