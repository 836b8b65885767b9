"""Fault points for crash tests: ``WEBDB_FAULTS=name[,name…]`` kills the process there.

A fault point costs one dict lookup when no fault is set.  Names are listed in
docs/design.md (*Crash safety*); tests set the variable in a child process and reopen the db.
"""

from __future__ import annotations

import os
import signal

_FAULTS = frozenset(x for x in os.environ.get("WEBDB_FAULTS", "").split(",") if x)


def point(name: str) -> None:
    if name in _FAULTS:
        os.kill(os.getpid(), signal.SIGKILL)
