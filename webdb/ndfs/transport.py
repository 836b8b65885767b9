"""The transport interface: one location's files, addressed by names relative to its ndfs root.

A transport copies whole files in and out of one location (a local directory or a remote host)
and publishes them with the atomic-put protocol every implementation shares (``Transport.put``):

1. write the bytes to a temporary name in the target directory, hashing them as they go;
2. verify the copy: its size and SHA-256 as the destination sees them must equal the source's;
3. remove an old completion flag, rename the temporary file onto the name (POSIX rename);
4. write the completion flag ``<name>.completed`` (itself by temp + rename), holding the size
   and SHA-256, so ``get`` can verify what it reads.

Readers wait for the flag, never for the file.  A failed put removes its temporary file and
leaves no flag; a crashed put leaves only a ``.ndfs-tmp.`` file that listings never show.
Subclasses implement the small primitives at the bottom of ``Transport``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from webdb.errors import CorruptionError
from webdb.ndfs.errors import (
    ChecksumMismatch,
    CompletionTimeout,
    DiskFull,
    HostUnreachable,
    RemoteFileNotFound,
    TransportError,
)
from webdb.ndfs.names import (
    TMP_MARKER,
    flag_name,
    is_reserved,
    local_path,
    tmp_name,
    validate_name,
    validate_prefix,
)

CHUNK = 1 << 20
FLAG_VERSION = 1


@dataclass(frozen=True)
class Completion:
    """What a completion flag records about its published file."""

    size: int
    sha256: str

    def to_json(self) -> str:
        return json.dumps({"version": FLAG_VERSION, "size": self.size, "sha256": self.sha256}) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Completion:
        try:
            d = json.loads(text)
            return cls(size=int(d["size"]), sha256=str(d["sha256"]))
        except (ValueError, KeyError, TypeError):
            raise CorruptionError(f"{where}: completion flag is not valid: {text[:80]!r}") from None


def sha256_file(path: str | os.PathLike[str]) -> Completion:
    """Size and SHA-256 of a local file.  Cost: reads the file once."""
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            n += len(chunk)
    return Completion(n, h.hexdigest())


def _parent(name: str) -> str:
    return name.rpartition("/")[0]


class Transport(ABC):
    """Files of one location.  Names are relative to the location's root and validated.

    ``before_verify`` is a fault-injection hook for tests: called with the temporary name after
    the bytes are sent and before they are verified.
    """

    label: str
    before_verify: Callable[[str], None] | None = None
    # Whether a publish makes the file and its flag durable (fsync of the bytes, and of the
    # directory after each rename).  False only for files a crash discards whole: a batch's
    # edits in flight (a new attempt of the batch publishes under new names).
    durable: bool = True

    # -- publishing ----------------------------------------------------------------------------

    def put(self, local_path: str | os.PathLike[str], name: str) -> Completion:
        """Copy a local file to ``name`` atomically and flag it complete; returns size and digest.

        Raises ChecksumMismatch (nothing published) if the copy differs, DiskFull if the
        destination has no room.  Cost: reads the file once, sends it once, and the destination
        reads it once more to verify.
        """
        validate_name(name)
        size = os.path.getsize(local_path)
        return self._publish(name, size, lambda tmp: self._send_file(os.fspath(local_path), tmp, size))

    def put_bytes(self, data: bytes, name: str) -> Completion:
        """``put`` for an in-memory payload."""
        validate_name(name)
        return self._publish(name, len(data), lambda tmp: self._send_bytes(data, tmp))

    def write_text(self, name: str, text: str, encoding: str = "utf-8") -> Completion:
        """Publish a small text file (same protocol as ``put``)."""
        return self.put_bytes(text.encode(encoding), name)

    def _publish(self, name: str, size: int, send: Callable[[str], Completion]) -> Completion:
        parent = _parent(name)
        self._makedirs(parent)
        self._check_space(name, parent, size)
        tmp = tmp_name(name, uuid.uuid4().hex[:12])
        try:
            try:
                sent = send(tmp)
            except (OSError, TransportError) as e:
                raise self._write_error(name, parent, size, e) from e
            if sent.size != size:
                raise TransportError(self.label, name, f"source changed size while sending: {size} -> {sent.size}")
            if self.before_verify is not None:
                self.before_verify(tmp)
            got = self._digest(tmp, size)
            if got != sent:
                raise ChecksumMismatch(
                    self.label,
                    name,
                    f"copy differs from the source (sent {sent.size} bytes sha256 {sent.sha256[:16]}, "
                    f"destination has {got.size} bytes sha256 {got.sha256[:16]}); not published",
                )
            self._remove(flag_name(name), missing_ok=True)
            self._rename(tmp, name)
            self._write_flag(name, sent)
        except BaseException:
            try:
                self._remove(tmp, missing_ok=True)
            except (OSError, TransportError):
                pass  # the original error matters more; a stray temp file is never listed
            raise
        return sent

    def _check_space(self, name: str, parent: str, size: int) -> None:
        free = self.disk_free(parent)
        if free < size:
            raise DiskFull(self.label, name, f"needs {size} bytes, {free} free under {self._where(parent)}")

    def _write_error(self, name: str, parent: str, size: int, e: Exception) -> TransportError:
        """Map a failed write to DiskFull when the destination is (nearly) full: SFTP reports
        ENOSPC only as a generic "Failure", so the free space is asked for afterwards."""
        if isinstance(e, (HostUnreachable, DiskFull)):
            return type(e)(self.label, name, e.message)  # name the file, not its temporary name
        cause = e.__cause__ if isinstance(e, TransportError) else e
        where = self._where(parent)
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return DiskFull(self.label, name, f"no space left under {where} for {size} bytes")
        try:
            free = self.disk_free(parent)
        except (OSError, TransportError):
            free = None
        if free is not None and free < max(size, 1) // 16 + 65536:
            return DiskFull(self.label, name, f"write failed ({cause}) with {free} bytes free under {where}")
        detail = e.message if isinstance(e, TransportError) else str(e)
        return TransportError(self.label, name, f"write failed: {detail}")

    def _write_flag(self, name: str, c: Completion) -> None:
        flag = flag_name(name)
        tmp = tmp_name(flag, uuid.uuid4().hex[:12])
        try:
            self._send_bytes(c.to_json().encode(), tmp)
            self._rename(tmp, flag)
        except BaseException:
            self._remove(tmp, missing_ok=True)
            raise

    # -- reading -------------------------------------------------------------------------------

    def get(self, name: str, local_path: str | os.PathLike[str]) -> int:
        """Copy ``name`` to a local file (temp + rename); returns the byte count.

        If the file is flagged complete, its size and SHA-256 are checked against the flag and a
        mismatch raises ChecksumMismatch without creating ``local_path``.
        """
        validate_name(name)
        expect = self.completion(name)
        dest = Path(local_path)
        tmp = dest.with_name(f".{dest.name}{TMP_MARKER}{uuid.uuid4().hex[:12]}")
        try:
            got = self._recv_file(name, os.fspath(tmp))
            if expect is not None and got != expect:
                raise ChecksumMismatch(
                    self.label,
                    name,
                    f"read {got.size} bytes sha256 {got.sha256[:16]}, flag says {expect.size} bytes "
                    f"sha256 {expect.sha256[:16]}",
                )
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return got.size

    def read_bytes(self, name: str) -> bytes:
        """The content of a small file, checked against its flag when it has one."""
        validate_name(name)
        expect = self.completion(name)
        data = self._read_small(name)
        if expect is not None and Completion(len(data), hashlib.sha256(data).hexdigest()) != expect:
            raise ChecksumMismatch(self.label, name, "content does not match its completion flag")
        return data

    def read_text(self, name: str, encoding: str = "utf-8") -> str:
        """``read_bytes`` decoded."""
        return self.read_bytes(name).decode(encoding)

    def completion(self, name: str) -> Completion | None:
        """The flag of ``name`` if it is published, else None."""
        validate_name(name)
        try:
            text = self._read_small(flag_name(name)).decode("utf-8", "replace")
        except RemoteFileNotFound:
            return None
        return Completion.from_json(text, f"{self.label}: {flag_name(name)}")

    def is_complete(self, name: str) -> bool:
        """Whether ``name`` has its completion flag."""
        return self.completion(name) is not None

    def wait_complete(self, name: str, timeout: float, poll: float = 0.2) -> Completion:
        """Poll for the completion flag of ``name``; CompletionTimeout after ``timeout`` seconds.

        An unreachable host counts as "not yet" until the deadline, and each poll is itself
        bounded by the time left, so this returns or raises within about ``timeout + poll``.
        """
        validate_name(name)
        deadline = time.monotonic() + timeout
        last: HostUnreachable | None = None
        while True:
            try:
                with self._deadline(deadline):
                    c = self.completion(name)
                if c is not None:
                    return c
                last = None
            except HostUnreachable as e:
                last = e
            left = deadline - time.monotonic()
            if left <= 0:
                why = f"; last error: {last.message}" if last else ""
                raise CompletionTimeout(
                    self.label, name, f"no completion flag {flag_name(name)!r} after {timeout:g}s{why}"
                )
            time.sleep(min(poll, left))

    def _deadline(self, deadline: float) -> contextlib.AbstractContextManager[None]:
        """Bound the operations inside the ``with`` by ``deadline`` (monotonic); remote
        transports shorten their timeouts, local operations do not block."""
        return contextlib.nullcontext()

    # -- namespace -----------------------------------------------------------------------------

    def exists(self, name: str) -> bool:
        """Whether the file exists (complete or not)."""
        return self._size(validate_name(name)) is not None

    def delete(self, name: str) -> bool:
        """Remove a file and its flag (flag first, so it never points at nothing).

        Returns whether the file existed.
        """
        validate_name(name)
        self._remove(flag_name(name), missing_ok=True)
        return self._remove(name, missing_ok=True)

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` onto ``dst`` atomically (overwriting).  A completion flag moves with it:
        removed from ``src`` (and any old one from ``dst``) before the move, written after."""
        validate_name(src)
        validate_name(dst)
        if self._size(src) is None:  # before touching any flag: a failed rename changes nothing
            raise RemoteFileNotFound(self.label, src, f"no such file {self._where(src)!r}")
        c = self.completion(src)
        self._remove(flag_name(src), missing_ok=True)
        self._remove(flag_name(dst), missing_ok=True)
        self._makedirs(_parent(dst))
        self._rename(src, dst)
        if c is not None:
            self._write_flag(dst, c)

    def list(self, prefix: str = "", *, complete_only: bool = False) -> list[str]:
        """Sorted names of the files below directory ``prefix`` (recursively), without flags and
        temporary files; with ``complete_only`` only those that have their flag.  A missing
        directory lists as empty.  Cost: one directory read per directory."""
        prefix = validate_prefix(prefix)
        everything = set(self._walk(prefix))
        names = [n for n in everything if not is_reserved(n)]
        if complete_only:
            names = [n for n in names if flag_name(n) in everything]
        return sorted(names)

    def makedirs(self, name: str) -> None:
        """Create directory ``name`` and its parents (existing ones are fine)."""
        self._makedirs(validate_name(name))

    def remove_tree(self, prefix: str) -> int:
        """Remove directory ``prefix`` and everything below it; returns the files removed."""
        return self._remove_tree(validate_name(prefix))

    @abstractmethod
    def disk_free(self, name: str = "") -> int:
        """Bytes available to this user in the filesystem holding ``name`` (or the root)."""

    def close(self) -> None:  # noqa: B027 - optional hook: only remote transports hold connections
        """Release connections; the transport reconnects if used again."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label}>"

    # -- primitives (names already validated) --------------------------------------------------

    @abstractmethod
    def _where(self, name: str) -> str:
        """Human-readable location of ``name`` for messages."""

    @abstractmethod
    def _send_file(self, local_path: str, tmp: str, size: int) -> Completion:
        """Write a local file to ``tmp`` (new), returning size and SHA-256 of the bytes sent."""

    @abstractmethod
    def _send_bytes(self, data: bytes, tmp: str) -> Completion:
        """Write ``data`` to ``tmp`` (new)."""

    @abstractmethod
    def _digest(self, name: str, size_hint: int) -> Completion:
        """Size and SHA-256 of ``name`` as the destination sees it."""

    @abstractmethod
    def _recv_file(self, name: str, local_path: str) -> Completion:
        """Copy ``name`` to a new local file, returning size and SHA-256 of the bytes received."""

    @abstractmethod
    def _read_small(self, name: str) -> bytes:
        """Whole content of a small file; RemoteFileNotFound if missing."""

    @abstractmethod
    def _size(self, name: str) -> int | None:
        """Size of a file, None if it does not exist."""

    @abstractmethod
    def _remove(self, name: str, missing_ok: bool) -> bool:
        """Remove a file; returns whether it existed."""

    @abstractmethod
    def _rename(self, src: str, dst: str) -> None:
        """POSIX rename (atomic, overwriting); RemoteFileNotFound if ``src`` is missing."""

    @abstractmethod
    def _makedirs(self, name: str) -> None:
        """Create a directory and its parents; ``""`` is the root."""

    @abstractmethod
    def _walk(self, prefix: str) -> list[str]:
        """Every regular file below ``prefix`` (names relative to the root), reserved included."""

    @abstractmethod
    def _remove_tree(self, prefix: str) -> int:
        """Remove a directory tree; returns the number of files removed."""


def _copy_hashing(src: BinaryIO, dst: BinaryIO) -> Completion:
    h = hashlib.sha256()
    n = 0
    while chunk := src.read(CHUNK):
        h.update(chunk)
        dst.write(chunk)
        n += len(chunk)
    return Completion(n, h.hexdigest())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalTransport(Transport):
    """A directory on this machine: the local host's own root, or a share on an NFS mount.

    Files are fsynced before the rename and directories after it, so a published file and its
    flag survive a crash (unless ``durable`` is off).  Symlinks may not lead a name outside the
    root.  With ``link`` on, ``put`` hard-links the local file into place instead of copying it
    when both are on one filesystem (else it copies): for a caller that hands the file over and
    never changes it afterwards; the file is read once, for its SHA-256, and not read again to
    verify (the destination is the same inode).
    """

    link: bool = False

    def __init__(self, root: str | os.PathLike[str], label: str | None = None) -> None:
        # Real path once, so listings are relative to the same path names are resolved against.
        self.root = Path(os.path.realpath(root))
        self.label = label or str(root)
        self._linked: dict[str, Completion] = {}  # temporary name -> what its link hashed to

    def _path(self, name: str) -> Path:
        return local_path(self.root, name) if name else self.root

    def _where(self, name: str) -> str:
        return str(self._path(name))

    def _missing(self, name: str) -> RemoteFileNotFound:
        return RemoteFileNotFound(self.label, name, f"no such file {str(self._path(name))!r}")

    def disk_free(self, name: str = "") -> int:
        p = self._path(name) if name else self.root
        while not p.exists() and p != p.parent:
            p = p.parent
        st = os.statvfs(p)
        return st.f_bavail * st.f_frsize

    def _send_file(self, local_path: str, tmp: str, size: int) -> Completion:
        if self.link:
            dst = self._path(tmp)
            try:
                os.link(local_path, dst)
            except OSError:
                pass  # another filesystem, or links refused: copied below
            else:
                c = sha256_file(dst)
                if self.durable:
                    fd = os.open(dst, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                self._linked[tmp] = c
                return c
        with open(local_path, "rb") as src:
            return self._send_stream(src, tmp)

    def _send_bytes(self, data: bytes, tmp: str) -> Completion:
        return self._send_stream(io.BytesIO(data), tmp)

    def _send_stream(self, src: BinaryIO, tmp: str) -> Completion:
        with open(self._path(tmp), "xb") as dst:
            c = _copy_hashing(src, dst)
            dst.flush()
            if self.durable:
                os.fsync(dst.fileno())
        return c

    def _digest(self, name: str, size_hint: int) -> Completion:
        linked = self._linked.pop(name, None)
        if linked is not None and self.before_verify is None:
            return linked  # the sent bytes are the destination's own inode, hashed once
        return sha256_file(self._path(name))

    def _recv_file(self, name: str, local_path: str) -> Completion:
        try:
            src = open(self._path(name), "rb")
        except FileNotFoundError:
            raise self._missing(name) from None
        with src, open(local_path, "xb") as dst:
            return _copy_hashing(src, dst)

    def _read_small(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise self._missing(name) from None

    def _size(self, name: str) -> int | None:
        try:
            return self._path(name).stat().st_size
        except FileNotFoundError:
            return None

    def _remove(self, name: str, missing_ok: bool) -> bool:
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            if not missing_ok:
                raise self._missing(name) from None
            return False
        return True

    def _rename(self, src: str, dst: str) -> None:
        target = self._path(dst)
        try:
            os.rename(self._path(src), target)
        except FileNotFoundError:
            raise self._missing(src) from None
        if self.durable:
            _fsync_dir(target.parent)

    def _makedirs(self, name: str) -> None:
        self._path(name).mkdir(parents=True, exist_ok=True)

    def _walk(self, prefix: str) -> list[str]:
        top = self._path(prefix)
        out = []
        for dirpath, _dirs, files in os.walk(top):
            rel = os.path.relpath(dirpath, self.root)
            for f in files:
                out.append(f if rel == "." else f"{rel}/{f}")
        return out

    def _remove_tree(self, prefix: str) -> int:
        top = self._path(prefix)
        n = sum(len(files) for _d, _s, files in os.walk(top))
        if top.is_dir():
            shutil.rmtree(top)
        return n
