"""NutchFile naming: (db, share group, name) -> ``<root>/<db>/<group>/<name>``.

Names reach us from config files and from other hosts, so every one is validated before it is
joined to a root: relative, ``/``-separated, no empty/``.``/``..`` components, no NUL or other
control characters, no backslashes, and never one of the reserved names the atomic-put protocol
uses (completion flags and temporary files).  Local paths are also checked after symlinks are
resolved, so a link inside the root cannot point a name outside it.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from webdb.errors import BadInput

# A file is published when `<name>.completed` exists; readers wait for the flag, never the file.
COMPLETED_SUFFIX = ".completed"
# Temporary files of an unfinished put: `<dir>/.<base>.ndfs-tmp.<random>`; never listed.
TMP_MARKER = ".ndfs-tmp."

MAX_NAME_BYTES = 4096
MAX_COMPONENT_BYTES = 255


def _check_chars(value: str, what: str) -> None:
    for ch in value:
        if ord(ch) < 32 or ord(ch) == 127:
            raise BadInput(f"{what} {value!r} contains control character {ch!r}")
    if "\\" in value:
        raise BadInput(f"{what} {value!r} contains a backslash")


def check_relpath(name: object, what: str = "ndfs name") -> str:
    """Structural checks only: a non-empty relative ``/``-separated path with no empty, ``.``
    or ``..`` components, no control characters or backslashes, within length limits.
    Runtime complexity: O(len(name))."""
    if not isinstance(name, str):
        raise BadInput(f"{what} must be a string, not {type(name).__name__}: {name!r}")
    if not name:
        raise BadInput(f"{what} is empty")
    _check_chars(name, what)
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise BadInput(f"{what} {name[:60]!r}... is longer than {MAX_NAME_BYTES} bytes")
    if name.startswith("/"):
        raise BadInput(f"{what} {name!r} is absolute; names are relative to the ndfs root")
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise BadInput(f"{what} {name!r} has an empty, '.' or '..' component")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES:
            raise BadInput(f"{what} {name!r} has a component longer than {MAX_COMPONENT_BYTES} bytes")
    return name


def validate_name(name: object, what: str = "ndfs name") -> str:
    """Return ``name`` if users may name a file so, else raise BadInput naming it.

    ``check_relpath``, and also not reserved: no ``.ndfs-tmp.`` component (temporary files)
    and no ``.completed`` ending (that is the file's flag).
    """
    check_relpath(name, what)
    assert isinstance(name, str)
    for part in name.split("/"):
        if TMP_MARKER in part:
            raise BadInput(f"{what} {name!r} contains the reserved marker {TMP_MARKER!r}")
    if name.endswith(COMPLETED_SUFFIX):
        raise BadInput(f"{what} {name!r} ends in {COMPLETED_SUFFIX!r}, reserved for completion flags")
    return name


def validate_component(value: object, what: str) -> str:
    """A db or share group name: one valid name component (no ``/``)."""
    validate_name(value, what)
    assert isinstance(value, str)
    if "/" in value:
        raise BadInput(f"{what} {value!r} must be a single component (no '/')")
    return value


_DB_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def validate_db_name(value: object, what: str = "db name") -> str:
    """A db name: one path component of ``[A-Za-z0-9._-]`` (not ``.`` or ``..``), so it can
    never leave the root it is joined to, on any host."""
    if not isinstance(value, str) or not value or value in (".", ".."):
        raise BadInput(f"{what} {value!r} must be one path component of letters, digits, '.', '_', '-'")
    bad = sorted(set(value) - _DB_NAME_CHARS)
    if bad:
        raise BadInput(f"{what} {value!r} may hold only letters, digits, '.', '_', '-' (not {bad[0]!r})")
    return validate_component(value, what)


def validate_prefix(prefix: object, what: str = "ndfs prefix") -> str:
    """A listing prefix: ``""`` (the whole root) or a valid name, trailing ``/`` allowed."""
    if prefix == "":
        return ""
    if isinstance(prefix, str) and prefix.endswith("/"):
        prefix = prefix[:-1]
    return validate_name(prefix, what)


def flag_name(name: str) -> str:
    """The completion flag of ``name``."""
    return name + COMPLETED_SUFFIX


def is_reserved(name: str) -> bool:
    """True for completion flags and temporary files, which listings leave out."""
    base = name.rsplit("/", 1)[-1]
    return base.endswith(COMPLETED_SUFFIX) or TMP_MARKER in base


def tmp_name(name: str, token: str) -> str:
    """The temporary name a put of ``name`` writes first (same directory, so rename is atomic)."""
    head, _, base = name.rpartition("/")
    tmp = f".{base}{TMP_MARKER}{token}"
    return f"{head}/{tmp}" if head else tmp


def remote_path(root: str, name: str, what: str = "ndfs name") -> str:
    """``root/name`` on a remote host, checked before use: ``name`` is a relative path of
    valid components (trailing ``/`` allowed) and the joined, normalized path lies under
    ``root`` (absolute and normalized when hosts.ini was read).  Remote symlinks are not
    resolved: webdb creates none, and names never contain ``..``."""
    if not name:
        return root
    check_relpath(name[:-1] if name.endswith("/") else name, what)
    joined = f"{root.rstrip('/')}/{name}"
    norm = posixpath.normpath(joined)
    if not posixpath.isabs(root) or not (norm + "/").startswith(root.rstrip("/") + "/"):
        raise BadInput(f"{what} {name!r} leaves the ndfs root {root!r} ({norm!r})")
    return joined


def local_path(root: str | os.PathLike[str], name: str, what: str = "ndfs name") -> Path:
    """``root/name`` after validation, refusing anything whose real path leaves ``root``.

    Symlinks are resolved on the longest existing prefix, so a name whose parent directory does
    not exist yet still resolves (puts create it).
    """
    if name != "":
        check_relpath(name, what)
    real_root = Path(os.path.realpath(root))
    path = real_root / name if name else real_root
    real = Path(os.path.realpath(path))
    if real != real_root and real_root not in real.parents:
        raise BadInput(f"{what} {name!r} resolves to {str(real)!r}, outside the ndfs root {str(real_root)!r}")
    return path


@dataclass(frozen=True, order=True)
class NutchFile:
    """A file of the shared namespace: (db, share group, name), validated on construction."""

    db: str
    group: str
    name: str

    def __post_init__(self) -> None:
        validate_db_name(self.db, "db name")
        validate_component(self.group, "share group name")
        validate_name(self.name, "file name")

    @property
    def relpath(self) -> str:
        """``<db>/<group>/<name>``: the path below a host's ndfs root."""
        return f"{self.db}/{self.group}/{self.name}"

    @property
    def flag(self) -> str:
        """Relative path of the completion flag."""
        return flag_name(self.relpath)

    def path(self, root: str | os.PathLike[str]) -> Path:
        """The local disk path under ``root`` (checked to stay inside it)."""
        return local_path(root, self.relpath, "file name")
