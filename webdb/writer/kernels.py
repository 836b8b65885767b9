"""The writer's compiled kernels: the extension ``webdb.writer._stagesc`` (built from
``_stagesc_src/``), or None where it is not built or ``WEBDB_PURE_PYTHON=1``.

Each kernel is the counterpart of a pure-Python reference in the writer (docs/design.md
"Compiled kernels" lists the pairs and the tests that compare them); the callers run the
reference when ``stagesc`` is None or a kernel declines (returns None) what the reference then
names.  The block kernels are the tables' own (``webdb.tables.block``, ``webdb.tables._blockc``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

stagesc: ModuleType | None = None
if os.environ.get("WEBDB_PURE_PYTHON", "") in ("", "0"):
    try:
        from webdb.writer import _stagesc as stagesc
    except ImportError:  # not built (no compiler where it was installed): the Python code
        pass
COMPILED = stagesc is not None
"""True when the writer's kernels run the compiled extension, False when they run pure Python."""


def pack_edits(keys: list[bytes], values: list[bytes], prefix: bytes, n0: int) -> list[bytes] | None:
    """Edit records ``key + prefix + seq counter (n0 + 1, ...; 5 bytes BE) + value + key length``
    (``webdb.writer.edits.pack``) in C (``_stagesc.pack_edits``); None when not compiled or for
    input it declines (the Python code raises)."""
    return stagesc.pack_edits(keys, values, prefix, n0) if stagesc is not None else None


def links_by_url_groups(recs: list[bytes], final: bool) -> tuple[list, int] | None:
    """Stage 4's edit records cut into groups per url in C (``_stagesc.links_by_url_groups``; the
    reference is ``webdb.writer.cascade.links_by_url_groups_py``); None when not compiled or for a record
    it declines."""
    return stagesc.links_by_url_groups(recs, final) if stagesc is not None else None


def links_by_md5_groups(recs: list[bytes], final: bool) -> tuple[list, int] | None:
    """Stage 3's edit records cut into groups per md5 in C (``_stagesc.links_by_md5_groups``; the
    reference is ``webdb.writer.cascade.links_by_md5_groups_py``); None when not compiled or for a record
    it declines."""
    return stagesc.links_by_md5_groups(recs, final) if stagesc is not None else None


def links_by_md5_adds(
    md5: bytes, ok: list[bytes], ov: list[bytes], adds: list[tuple[bytes, bytes]], tail: bytes
) -> tuple[list[bytes], list[bytes], list[tuple[bytes, bytes]]] | None:
    """Stage 3's new or changed links of one md5 in C (``_stagesc.links_by_md5_adds``; the reference is
    ``webdb.writer.cascade.links_by_md5_adds_py``); None when not compiled or for input it declines."""
    return stagesc.links_by_md5_adds(md5, ok, ov, adds, tail) if stagesc is not None else None


def links_by_url_splice(
    start: bytes, url: bytes, ledits: list, state_of: Callable[[bytes], int], tail: bytes
) -> tuple | None:
    """Stage 4's link edits of a url without a target notice in C (``_stagesc.links_by_url_splice``; the
    reference is ``webdb.writer.cascade.links_by_url_splice_py``); None when not compiled or for input it
    declines (``state_of`` not called then)."""
    return stagesc.links_by_url_splice(start, url, ledits, state_of, tail) if stagesc is not None else None
