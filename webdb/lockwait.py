"""Waiting for the writer lock: the one retry loop of every tool that may start while another
writer holds a db (``generate`` on one db or on a rack)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_for_lock"]

T = TypeVar("T")


def wait_for_lock(
    attempt: Callable[[], T],
    lock_wait: float,
    locked: Callable[[Exception], bool],
    give_up: Callable[[Exception], Exception],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``attempt()``, tried again while it fails with an error ``locked(e)`` says is a held
    lock, for up to ``lock_wait`` seconds (backoff from 50 ms to 1 s); then ``give_up(e)`` is
    raised.  Any other error is raised as it is."""
    deadline = clock() + lock_wait
    delay = 0.05
    while True:
        try:
            return attempt()
        except Exception as e:
            if not locked(e):
                raise
            if clock() >= deadline:
                raise give_up(e) from None
        sleep(delay)
        delay = min(1.0, delay * 2)
