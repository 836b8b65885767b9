"""Errors of the file layer.  Each names the host (or location) and the file it is about."""

from __future__ import annotations

from webdb import errors as _errors
from webdb.errors import BadInput, CorruptionError, DistributedError


class ConfigError(BadInput):
    """hosts.ini is wrong; the message names the file, the section and the key."""


class TransportError(DistributedError):
    """An operation on one location failed.  ``host`` and ``name`` say where and what."""

    def __init__(self, host: str, name: str, message: str) -> None:
        self.host = host
        self.name = name
        self.message = message
        super().__init__(f"{host}: {name}: {message}" if name else f"{host}: {message}")

    def __reduce__(self):  # picklable across worker processes despite the 3-argument __init__
        return (type(self), (self.host, self.name, self.message))


class HostUnreachable(TransportError):
    """Connecting failed, or the connection broke or timed out during an operation."""


class HostKeyRejected(HostUnreachable):
    """The server's host key is unknown or differs from the known_hosts file; never accepted."""


class RemoteFileNotFound(TransportError, FileNotFoundError):
    """The named file does not exist at that location."""


class ChecksumMismatch(TransportError, CorruptionError):
    """The bytes that arrived differ from the bytes sent; nothing was published."""


class DiskFull(TransportError, _errors.DiskFull):
    """The destination has not enough free space; nothing was published."""


class CompletionTimeout(TransportError, TimeoutError):
    """A completion flag did not appear in time (the writer is slow, dead, or the host is down)."""
