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


class DistributedError(WebDBError):
    """A distributed update stopped: a host is down, timed out or failed a stage."""
