"""Helpers shared by subcommands: opening a db, printing JSON or text, parsing settings."""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

from webdb.core.settings import DEFAULTS, NAMES
from webdb.errors import BadInput


def emit(args, data: Any, text: str | None = None) -> None:
    """Print ``data`` as JSON with --json, else ``text`` (or a readable rendering of data)."""
    if getattr(args, "json", False) or text is None:
        json.dump(data, sys.stdout, indent=None if getattr(args, "json", False) else 1, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def parse_settings(pairs: list[str] | None) -> dict:
    """``--set name=value`` pairs, typed by the default's type."""
    out: dict = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep or k not in NAMES:
            raise BadInput(f"--set {p!r}: expected NAME=VALUE with NAME one of {', '.join(sorted(NAMES))}")
        d = getattr(DEFAULTS, k)
        try:
            if isinstance(d, bool):
                if v.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(v)
                out[k] = v.lower() in ("1", "true", "yes")
            elif isinstance(d, int):
                out[k] = int(v)
            elif isinstance(d, float):
                out[k] = float(v)
            else:
                out[k] = v
        except ValueError:
            raise BadInput(f"--set {p!r}: {k} takes a {type(d).__name__}") from None
    return out


def out_file(path: str, option: str = "--out") -> str:
    """An output path from the command line: absent, or an existing regular file (the writer
    replaces it atomically, temp file + rename).  A symlink, directory, device or fifo is
    BadInput: we never write through a link or into something that is not ours to replace."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as e:
        raise BadInput(f"{option} {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise BadInput(f"{option} {path}: {kind}; refusing to replace it")
    return path


def add_json(p) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_db_location(p) -> None:
    """Options to read a rack's sections from other directories than DB/section-JJJJ."""
    p.add_argument(
        "--mount",
        metavar="DIR",
        help="find sections under DIR/*/DBNAME/section-JJJJ (every host's root mounted side by side)",
    )
    p.add_argument("--section-dir", action="append", metavar="J=DIR", help="section J is in DIR (repeatable)")


def open_db(args):
    """webdb.open with --mount / --section-dir applied."""
    import webdb

    dirs: dict[int, str] = {}
    for item in getattr(args, "section_dir", None) or []:
        j, sep, d = item.partition("=")
        if not sep or not (j.isascii() and j.isdigit()):  # isdigit alone accepts "²"
            raise BadInput(f"--section-dir {item!r}: expected J=DIR")
        dirs[int(j)] = d
    mount = getattr(args, "mount", None)
    path = args.db
    if mount is not None and not os.path.isdir(path) and os.sep not in path:
        path = db_under_mount(mount, path)
    return webdb.open(path, section_dirs=dirs, mount=mount)


def db_under_mount(mount: str, name: str) -> str:
    """The copy of db ``name`` under ``mount`` (``MOUNT/NAME`` or ``MOUNT/HOST/NAME``) holding
    its identity and CURRENT, for ``--mount DIR NAME`` (every host's root side by side): of
    several (each rack host keeps one), the one that committed last, as the master flips
    first.  BadInput naming the mount if there is none."""
    import webdb
    from webdb.errors import WebDBError

    if not os.path.isdir(mount):
        raise BadInput(f"--mount {mount}: no such directory to find sections in")
    cands = [os.path.join(mount, name)] + [os.path.join(mount, h, name) for h in sorted(os.listdir(mount))]
    best: tuple[int, str] | None = None
    for d in cands:
        if not os.path.isfile(os.path.join(d, "CURRENT")):
            continue
        try:
            gen = webdb.open(d).committed()
        except WebDBError:
            continue
        if best is None or gen > best[0]:
            best = (gen, d)
    if best is None:
        raise BadInput(f"{name}: no such database directory, nor a copy of it under --mount {mount} ({mount}/*/{name})")
    return best[1]


def add_quiet(p) -> None:
    """``-q``: no progress lines on stderr, the same in every command that has it (errors and
    the result still print)."""
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines (errors and the result still print)")


def add_lock_wait(p) -> None:
    """``--lock-wait S``: how long a writer command waits for another writer's lock."""
    from webdb.core.lockwait import LOCK_WAIT

    p.add_argument(
        "--lock-wait",
        type=nonneg_float,
        default=LOCK_WAIT,
        metavar="S",
        help=f"seconds to wait for another writer's lock, then fail naming its host and pid (default {LOCK_WAIT:g})",
    )


def nonneg_float(s: str) -> float:
    """argparse type: a number >= 0."""
    import argparse
    import math

    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, not {s!r}") from None
    if not v >= 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, not {s!r}")
    return v


def _whole_at_least(lo: int):
    """An argparse type: a whole number >= ``lo``, else argparse's usage error naming it."""
    import argparse

    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {lo}, not {s!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {lo}, not {s!r}")
        return v

    return parse


nonneg_int = _whole_at_least(0)
positive_int = _whole_at_least(1)


def add_rack_args(p, what: str) -> None:
    """``--hosts``, ``--dask``, ``--heartbeat-timeout``: run ``what`` over a rack's locations
    (DB is then the db name) or on a Dask cluster (docs/distributed.md)."""
    from webdb.writer.rack import HEARTBEAT_TIMEOUT

    p.add_argument("--hosts", metavar="HOSTS_INI", help=f"{what} over the rack of this hosts.ini (DB: the db name)")
    p.add_argument(
        "--dask",
        metavar="tcp://HOST:PORT",
        help="run on this Dask scheduler (default: hosts.ini's dask_scheduler, if any; docs/distributed.md)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=HEARTBEAT_TIMEOUT,
        metavar="S",
        help=f"with --hosts/--dask: a location silent this long stops the run (default {HEARTBEAT_TIMEOUT:g})",
    )


def rack_target(args):
    """(rack, --dask) of --hosts/--dask, or (None, None) for a local db.  The transport is the
    driver's choice (webdb.writer.driver: --dask, else hosts.ini's dask_scheduler, else agents)."""
    if not (args.hosts or args.dask):
        return None, None
    from webdb.ndfs.config import check_scheduler_address
    from webdb.writer.rack import Rack

    if args.dask:
        try:
            check_scheduler_address(args.dask)
        except ValueError as e:
            raise BadInput(f"--dask: {e}") from None
    rack = Rack.from_file(args.hosts, args.db) if args.hosts else Rack.local(args.db)
    return rack, args.dask


def rack_failed(command: str, e) -> int:
    """A rack run that failed (``UpdateFailed`` ``e``): its one-line error on stderr, and the
    exit status: 2 for bad input or a held lock, 1 for the rest (a host down, a killed agent)."""
    print(f"webdb {command}: error: {e}", file=sys.stderr)
    return 2 if e.kind in ("BadInput", "LockedError") else 1
