"""Exceptions.  Every error a user can cause names the input it is about."""

from __future__ import annotations


class WebDBError(Exception):
    """Base class of every error webdb raises on purpose."""


class BadInput(WebDBError, ValueError):
    """A URL, record or file given to webdb is not acceptable; the message names it."""


class CorruptionError(WebDBError):
    """A file failed a checksum or structural check; the message names file and block."""


class ClosedError(WebDBError, ValueError):
    """A call on a writer or reader after its close() or abort(): it would be lost (a writer)
    or read a closed file (a reader)."""


class LockedError(WebDBError):
    """Another writer holds the database; the message names its host, pid and start time."""


class NotADatabase(WebDBError):
    """The path is not a webdb database (or of a newer format version)."""


class DiskFull(WebDBError, OSError):
    """No space left where webdb was writing: ``host``, ``path``, ``needed`` (bytes at least)
    and ``free`` say where and how much.  Nothing was committed: the db is at its old state."""

    host: str = ""
    path: str = ""
    needed: int | None = None
    free: int | None = None

    @classmethod
    def at(cls, path: str, needed: int | None, cause: OSError | None = None) -> DiskFull:
        """The error for a write of ``needed`` bytes to ``path`` that found no space."""
        import shutil
        import socket

        d = path
        free = None
        while d and free is None:
            try:
                free = shutil.disk_usage(d).free
            except OSError:
                d = d.rpartition("/")[0]
        host = socket.gethostname()
        what = "disk quota exceeded" if cause is not None and cause.errno == 122 else "no space left on device"
        need = f"needs at least {needed} more bytes" if needed is not None else "needs more space"
        e = cls(f"{host}: {path}: {what} ({need}, {free if free is not None else '?'} bytes free)")
        e.host, e.path, e.needed, e.free = host, path, needed, free
        return e


def is_disk_full(e: BaseException) -> bool:
    """ENOSPC or EDQUOT: the file system has no room for the write."""
    import errno

    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


class DistributedError(WebDBError):
    """A distributed update stopped: a host is down, timed out or failed a stage."""
