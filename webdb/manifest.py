"""The one manifest builder: what a generation's ``gen/NNNNNNNN.json`` holds (docs/format.md).

Every generation — the empty one of ``create``, a batch of the local or distributed writer, a
rebalance — is described by ``build``; writing it to disk is ``WebDB.commit`` (webdb.db).
This module imports nothing of the writer, so ``db``, ``rebalance`` and ``check`` may use it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from webdb.errors import WebDBError
from webdb.sections import Sections

__all__ = ["build", "check_counts", "empty", "stage_rows", "table_files"]

STAGES = range(1, 6)


def build(
    *,
    generation: int,
    parent: int | None,
    batch: str | None,
    sections: Sections,
    tables: list[dict],
    status: list[dict],
    edits: dict | None = None,
    stages: list[dict] | None = None,
    **extra: Any,
) -> dict:
    """A generation's manifest: per-section ``tables`` (file, records, bytes) and ``status``
    counts; ``edits`` and ``stages`` for a batch; ``extra`` keys as given (``distributed``,
    ``rebalance``)."""
    m: dict[str, Any] = {
        "generation": generation,
        "parent": parent,
        "batch": batch,
        "committed": time.time(),
        "sections": sections.to_json(),
        "tables": tables,
        "status": status,
    }
    if edits is not None:
        m["edits"] = edits
    if stages is not None:
        m["stages"] = stages
    m.update(extra)
    return m


def empty(secs: Sections, generation: int = 0) -> dict:
    """The manifest of a new db's generation 0: no tables in any section."""
    return build(
        generation=generation,
        parent=None,
        batch=None,
        sections=secs,
        tables=[{} for _ in range(secs.k)],
        status=[{} for _ in range(secs.k)],
    )


def table_files(entry: dict) -> list[tuple[str, int]]:
    """(file name, bytes) of every file of one table of one section: the base, then its delta
    runs newest first (docs/format.md §5, levels)."""
    return [(entry["file"], entry["bytes"])] + [(r["file"], r["bytes"]) for r in entry.get("runs", ())]


def stage_rows(rows: Iterable[dict]) -> list[dict]:
    """Per-stage results of a batch, ``[{"stage": S, "sections": [row, ...]}]`` for S = 1..5,
    from rows ``{"stage": S, "section": J, ...}`` in any order (sections ascending in each)."""
    by_stage: dict[int, list[dict]] = {s: [] for s in STAGES}
    for r in rows:
        by_stage[r["stage"]].append({x: v for x, v in r.items() if x != "stage"})
    return [{"stage": s, "sections": sorted(by_stage[s], key=lambda r: r["section"])} for s in STAGES]


def check_counts(m: dict) -> None:
    """Cross-table counts must agree before a generation is committed."""

    def total(t: str) -> int:
        return sum(s.get(t, {}).get("records", 0) for s in m["tables"])

    if total("pages_by_url") != total("pages_by_md5") or total("links_by_md5") != total("links_by_url"):
        raise WebDBError(
            f"internal error: table counts disagree before commit: "
            f"pages {total('pages_by_url')}/{total('pages_by_md5')}, "
            f"links {total('links_by_md5')}/{total('links_by_url')}"
        )
