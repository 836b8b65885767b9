"""Progress for long commands: a tqdm bar on a terminal, periodic one-line reports elsewhere.

tqdm draws nothing when it cannot tell the terminal's size (``disable=None`` off a tty), so a
command whose stderr goes to a log file or a pipe (cron, ``ssh host webdb ...``, CI) showed no
progress at all.  ``progress_bar`` gives such a stream one line every ``every`` seconds (and
a last line at the end when it printed any), e.g. ``scanning pages: 120,000/400,000 page
(30%), 12.0s``; a job shorter than ``every`` prints nothing.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["LineProgress", "is_terminal", "progress_bar"]


def is_terminal(out: IO[str]) -> bool:
    """True if ``out`` is a terminal whose size is known (where a tqdm bar can be drawn)."""
    try:
        return out.isatty() and os.get_terminal_size(out.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):
        return False


class LineProgress:
    """tqdm's ``update`` / ``close`` / ``set_description`` for a stream that is not a
    terminal: a line at most every ``every`` seconds (``clock`` is injectable for tests)."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str,
        out: IO[str],
        every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.desc, self.unit, self.out = total, desc, unit, out
        self.every, self.clock = every, clock
        self.n = 0
        self.t0 = self.last = clock()
        self.closed = False
        self.lines = 0

    def _line(self) -> str:
        done = f"{self.n:,}"
        if self.total:
            done += f"/{self.total:,} {self.unit} ({100 * self.n // self.total}%)"
        else:
            done += f" {self.unit}"
        return f"{self.desc}: {done}, {self.clock() - self.t0:.1f}s"

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.lines += 1
            self.out.write(self._line() + "\n")
            self.out.flush()

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def close(self) -> None:
        """A last line, if the job was long enough to report along the way."""
        if not self.closed:
            self.closed = True
            if self.lines:
                self.out.write(self._line() + "\n")
                self.out.flush()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(
    total: int | None,
    desc: str,
    unit: str,
    *,
    enabled: bool = True,
    force_bar: bool = False,
    out: IO[str] | None = None,
    **kw: Any,
):
    """A tqdm bar on a terminal (or anywhere with ``force_bar``), a ``LineProgress`` on any
    other stream, a silent tqdm when not ``enabled``.  ``kw`` goes to tqdm (``leave``, ...)."""
    from tqdm import tqdm

    out = sys.stderr if out is None else out
    if not enabled:
        return tqdm(total=total, disable=True)
    if force_bar or is_terminal(out):
        return tqdm(total=total, desc=desc, unit=unit, file=out, **kw)
    return LineProgress(total, desc, unit, out)
