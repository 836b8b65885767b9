"""Fault points for crash tests: ``WEBDB_FAULTS=name[,name…]`` kills the process there.
``name@PATH`` kills only the first process that gets there (the one that creates ``PATH``):
a process restarted by a supervisor (a Dask nanny) then passes the point.

A fault point costs one dict lookup when no fault is set.  Names are listed in
docs/design.md (*Crash safety*); tests set the variable in a child process and reopen the db.
"""

from __future__ import annotations

import os
import signal

_ENTRIES = [x.partition("@") for x in os.environ.get("WEBDB_FAULTS", "").split(",") if x]
_FAULTS = frozenset(name for name, _, _ in _ENTRIES)
_ONCE = {name: path for name, at, path in _ENTRIES if at}


def point(name: str) -> None:
    if name in _FAULTS:
        if name in _ONCE:
            try:
                os.close(os.open(_ONCE[name], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                return  # fired once already
        os.kill(os.getpid(), signal.SIGKILL)


def armed(name: str) -> bool:
    """Whether the fault ``name`` is set: for faults that are not a kill (``flip_byte``)."""
    return name in _FAULTS


def flip_byte(t):  # t: webdb.ndfs.Transport -> Callable[[str], None]
    """Fault ``dist.sJ.stepT.corrupt`` (webdb.writer.section): a ``before_verify`` hook that
    changes one byte of a put's temporary file at the destination after it was sent, as if it
    flipped in transit; the put's verify must catch it."""
    from webdb.ndfs import LocalTransport

    def corrupt(tmp: str) -> None:
        if isinstance(t, LocalTransport):
            f = open(t.root / tmp, "r+b")
        else:
            f = t.connect().open(f"{t.host.root}/{tmp}", "r+b")  # SFTPTransport and subclasses
        with f:
            b = f.read(1)
            f.seek(0)
            f.write(bytes([b[0] ^ 0x40]))

    return corrupt


def refuse(t):  # t: webdb.ndfs.Transport -> Callable[[str], None]
    """Fault ``dist.sJ.stepT.unreachable`` (webdb.writer.section): a ``before_verify`` hook that
    fails a put to another location as a refused connection would, while that location itself
    stays up and answers its coordinator (a partition between two hosts)."""
    from webdb.ndfs.errors import HostUnreachable

    def fail(tmp: str) -> None:
        raise HostUnreachable(t.label, tmp, "connection refused (fault)")

    return fail
