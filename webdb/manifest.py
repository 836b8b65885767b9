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

__all__ = [
    "ROUNDS_KEPT",
    "build",
    "check_counts",
    "empty",
    "index_entry",
    "round_row",
    "rounds",
    "stage_rows",
    "table_files",
    "with_index",
]

STAGES = range(1, 6)
# The rows of ``rounds`` a manifest carries: the last this many generations (~200 bytes each).
ROUNDS_KEPT = 1000


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
    runs newest first (docs/format.md §5, levels), then PagesByURL's due index (§3.1)."""
    files = [(entry["file"], entry["bytes"])] + [(r["file"], r["bytes"]) for r in entry.get("runs", ())]
    due = index_entry(entry)
    if due is not None:
        files.append((due["file"], due["bytes"]))
    return files


def index_entry(pages_entry: dict | None) -> dict | None:
    """The due index of one section's PagesByURL manifest entry (None: not indexed).  The one place
    that knows where the manifest keeps it (docs/format.md §3.1)."""
    return None if pages_entry is None else pages_entry.get("due")


def with_index(pages_entry: dict, due: dict | None) -> dict:
    """``pages_entry`` naming ``due`` as its index (``{"file", "records", "bytes"}``)."""
    e = {k: v for k, v in pages_entry.items() if k != "due"}
    if due is not None:
        e["due"] = due
    return e


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


def round_row(m: dict, parent_pages: int | None = None) -> dict:
    """The figures of one generation for ``rounds``: its commit time, batch, pages, links,
    bytes, pages by status, pages added since ``parent_pages`` (None: unknown) and the seconds
    of its cascade (the slowest section of each stage, summed; None without stages).  From the
    manifest alone: no table is read."""
    from webdb.tables.records import Status

    status: dict[str, int] = {}
    for per in m["status"]:
        for code, n in per.items():
            name = Status(int(code)).name.lower()
            status[name] = status.get(name, 0) + n
    pages = sum(t.get("pages_by_url", {}).get("records", 0) for t in m["tables"])
    stages = m.get("stages") or []
    seconds = [max((r.get("seconds", 0.0) for r in s["sections"]), default=0.0) for s in stages]
    return {
        "generation": m["generation"],
        "committed": m.get("committed"),
        "batch": m.get("batch"),
        "pages": pages,
        "links": sum(t.get("links_by_md5", {}).get("records", 0) for t in m["tables"]),
        "bytes": sum(size for t in m["tables"] for e in t.values() for _, size in table_files(e)),
        "status": dict(sorted(status.items())),
        "new_pages": None if parent_pages is None else pages - parent_pages,
        "seconds": round(sum(seconds), 3) if seconds else None,
    }


def rounds(m: dict, parent: dict | None) -> list[dict]:
    """``m``'s ``rounds``: its parent's rows (or, for a parent written without them, the row
    of the parent itself), then ``m``'s own, the last ``ROUNDS_KEPT``.  Written at commit, so
    the history of a crawl outlives the manifests a commit removes."""
    if parent is None:
        return [round_row(m)]
    before = parent.get("rounds")
    if not (isinstance(before, list) and before and all(isinstance(r, dict) for r in before)) or not isinstance(
        before[-1].get("pages"), int
    ):
        before = [round_row(parent)]  # written without rows (or rows we cannot read): start from the parent
    return [*before, round_row(m, before[-1]["pages"])][-ROUNDS_KEPT:]
