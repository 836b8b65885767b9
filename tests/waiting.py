"""Waiting on another process without sleeping a guessed time: poll a condition until it holds.

``wait_until(cond, timeout, what)`` calls ``cond()`` every few milliseconds and returns its first
truthy value; if ``timeout`` seconds pass first it raises ``WaitTimeout`` naming ``what`` (and
``detail()``, e.g. a log tail, when given).  The timeout only bounds a hang: a test never asserts
how long the wait took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL = 0.01  # seconds between checks: small enough that a wait ends right after the condition holds


class WaitTimeout(AssertionError):
    """The condition did not hold within the timeout; the message says what was awaited."""


def wait_until(
    cond: Callable[[], T], timeout: float, what: str, detail: Callable[[], str] | None = None, poll: float = POLL
) -> T:
    """Return the first truthy ``cond()``; raise WaitTimeout naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f": {detail()}" if detail is not None else ""
            raise WaitTimeout(f"gave up after {timeout:g}s waiting for {what}{extra}")
        time.sleep(poll)


def sigint_default() -> None:
    """``preexec_fn`` of a child a test stops with SIGINT (Ctrl-C): a suite started in the
    background (``cmd &`` in a script) runs with SIGINT ignored, and children inherit that."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
