"""Waiting for a db's writer lock, and removing a lock whose holder is gone (``webdb unlock``).

Every writer command waits up to ``--lock-wait`` seconds (default ``LOCK_WAIT``, 60) for a
writer lock held by another process, then fails with the holder's host and pid
(docs/operations.md, *Locks*).  A lock is an flock on ``<section or db>/LOCK`` whose content
names the holder (``{"host", "pid", "since"}``, written by ``webdb.core.db.WriterLock``): the kernel
drops it when the holder dies, so a lock only needs removing when its holder is alive but
will never finish (stopped, hung on a dead mount) or holds it from another machine through a
shared filesystem.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from webdb.errors import BadInput, LockedError, WebDBError

__all__ = ["LOCK_WAIT", "LockInfo", "lock_files", "lock_info", "unlock", "wait_for_lock"]

LOCK_WAIT = 60.0  # seconds; docs/operations.md promises this default
T = TypeVar("T")


def _is_locked(e: BaseException) -> bool:
    return isinstance(e, LockedError)


def wait_for_lock(
    fn: Callable[[], T],
    lock_wait: float,
    what: str,
    locked: Callable[[BaseException], bool] = _is_locked,
    give_up: Callable[[BaseException], BaseException] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``fn()``, retried while it fails because a writer lock is held (``locked(e)``; the lock
    is taken before anything is written) for up to ``lock_wait`` seconds, backing off from
    50 ms to 1 s.  Then ``give_up(e)`` is raised if given; else a LockedError says how long
    ``what`` waited and names the holder, and another error that ``locked`` accepts (a rack
    update's UpdateFailed) is re-raised as it is.  The one retry loop of every writer command."""
    deadline = clock() + lock_wait
    delay = 0.05
    while True:
        try:
            return fn()
        except WebDBError as e:
            if not locked(e):
                raise
            left = deadline - clock()
            if left <= 0:
                if give_up is not None:
                    raise give_up(e) from None
                if isinstance(e, LockedError):
                    raise LockedError(f"{what} waited {lock_wait:g}s for the writer lock: {e}") from None
                raise
            sleep(min(delay, left))
            delay = min(1.0, delay * 2)


@dataclass
class LockInfo:
    """One LOCK file: who wrote it last and whether an flock is held on it now."""

    path: str
    held: bool
    host: str | None
    pid: int | None
    since: str | None

    def who(self) -> str:
        return f"pid {self.pid if self.pid is not None else '?'} on host {self.host or '?'} since {self.since or '?'}"


def lock_files(db_path: str) -> list[str]:
    """The LOCK files of a db directory: its own, and each ``section-JJJJ/LOCK`` below it."""
    out = [os.path.join(db_path, "LOCK")]
    for name in sorted(os.listdir(db_path)):
        p = os.path.join(db_path, name, "LOCK")
        if name.startswith("section-") and os.path.isfile(p):
            out.append(p)
    return [p for p in out if os.path.isfile(p)]


def lock_info(path: str) -> LockInfo:
    """Read a LOCK file and test (without taking it) whether a process holds it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = os.read(fd, 4096)
        try:
            holder = json.loads(raw) if raw.strip() else {}
        except ValueError:
            holder = {}
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            held = True
    finally:
        os.close(fd)
    pid = holder.get("pid")
    return LockInfo(path, held, holder.get("host"), pid if isinstance(pid, int) else None, holder.get("since"))


def _process_state(pid: int) -> str | None:
    """``running``, ``stopped`` ... of a local pid, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return None
    return {"R": "running", "S": "sleeping", "D": "in disk wait", "T": "stopped", "t": "stopped (traced)",
            "Z": "a zombie"}.get(state, f"state {state}")  # fmt: skip


def unlock(db_path: str, *, force: bool = False) -> list[str]:
    """Remove the held writer locks of a db (each LOCK file, so the next writer takes a fresh
    one), after a safety check per lock; returns one line per lock saying what was checked and
    done.  Raises LockedError (nothing removed) if a holder is alive on this host, or is on
    another host and ``force`` is not given."""
    if not os.path.isdir(db_path):
        raise BadInput(f"{db_path}: no such database directory")
    locks = [lock_info(p) for p in lock_files(db_path)]
    held = [li for li in locks if li.held]
    if not held:
        return [f"{db_path}: not locked (no process holds a writer lock)"]
    me = socket.gethostname()
    checked = []
    for li in held:
        if li.host == me and li.pid is not None:
            state = _process_state(li.pid)
            if state is not None:
                raise LockedError(
                    f"{li.path} is held by {li.who()}, which is alive on this host ({state}): refusing to unlock; "
                    f"let it finish, or stop it first (kill {li.pid})"
                )
            checked.append(f"pid {li.pid} is not running on this host, yet a process holds the flock (one that "
                           f"inherited it)")  # fmt: skip
        else:
            checked.append(f"the flock is held and the holder is not on this host ({me}): whether pid "
                           f"{li.pid if li.pid is not None else '?'} on {li.host or '?'} is alive cannot be "
                           f"checked from here")  # fmt: skip
    if not force:
        raise LockedError(
            "; ".join(f"{li.path} is held by {li.who()}; checked: {c}" for li, c in zip(held, checked))
            + "; make sure the holder is gone, then run again with --force"
        )
    out = []
    for li, c in zip(held, checked):
        os.unlink(li.path)  # the next writer creates and flocks a fresh file
        out.append(f"{li.path}: removed the lock of {li.who()} (--force; checked: {c})")
    return out
