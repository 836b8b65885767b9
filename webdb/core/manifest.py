"""The manifest: what a generation's ``gen/NNNNNNNN.json`` holds (docs/format.md), as the typed
value ``Manifest`` the code passes around, and ``build``, its one builder.

Every generation — the empty one of ``create``, a batch of the local or distributed writer, a
rebalance — is described by ``build``; writing it to disk is ``WebDB.commit`` (webdb.core.db).  A
manifest becomes JSON only where it leaves the process: its file (``to_json``, sealed by
``webdb.core.dbfiles.seal``) and the agents' protocol (``from_json`` on the other side).
This module imports nothing of the writer, so ``db``, ``rebalance`` and ``check`` may use it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from webdb.core.sections import Sections
from webdb.errors import WebDBError

__all__ = [
    "ROUNDS_KEPT",
    "Manifest",
    "build",
    "check_counts",
    "empty",
    "index_entry",
    "index_files",
    "marks_entry",
    "round_row",
    "rounds",
    "stage_rows",
    "table_files",
    "with_index",
    "with_marks",
]

STAGES = range(1, 6)
# The rows of ``rounds`` a manifest carries: the last this many generations (~200 bytes each).
ROUNDS_KEPT = 1000
# Keys a manifest always has, null or not; every other named key is written only when set.
_ALWAYS = ("generation", "parent", "batch", "committed", "sections", "tables", "status")


@dataclass
class Manifest:
    """One generation (docs/format.md §5): per-section ``tables`` (table name to its file,
    records, bytes and delta ``runs``) and ``status`` counts (status code as a string to pages);
    for a batch its ``edits`` and per-stage ``stages`` rows; what made it (``distributed``,
    ``rebalance``, ``bulk``, ``compact``); the chain to its parent (``parent_checksum``, set
    when written) and the figures of the last generations (``rounds``).

    ``seconds`` (how long the generation took) is the caller's and never written.  ``extra``
    keeps what a file holds beyond these fields, as read, so a manifest read and written back
    is the same bytes; ``absent`` names the keys of ``_ALWAYS`` such a file lacked."""

    generation: int
    parent: int | None
    batch: str | None
    committed: float | None
    sections: Sections
    tables: list[dict[str, dict]]
    status: list[dict[str, int]]
    edits: dict | None = None
    stages: list[dict] | None = None
    distributed: dict | None = None
    rebalance: dict | None = None
    bulk: dict | None = None
    compact: dict | None = None
    parent_checksum: str | None = None
    rounds: list[dict] | None = None
    seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    absent: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The manifest as its file holds it (without ``checksum``, which the seal adds; keys
        are sorted when written, so their order here does not matter)."""
        d: dict[str, Any] = {}
        for f in _NAMED:
            v = getattr(self, f)
            if f == "sections":
                v = v.to_json()
            if (f in _ALWAYS and f not in self.absent) or v is not None:
                d[f] = v
        d.update(self.extra)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Manifest:
        """A manifest from its JSON object (validated first: ``webdb.core.dbfiles.validate_manifest``).
        A key this type does not name, or a named optional key read as null, goes to ``extra``."""
        known = {f: d[f] for f in _NAMED if d.get(f) is not None or (f in _ALWAYS and f in d)}
        known["sections"] = Sections.from_json(d["sections"])
        # ``checksum`` is the seal's, ``seconds`` no writer keeps.
        extra = {x: v for x, v in d.items() if x not in known and x not in ("checksum", "seconds")}
        absent = tuple(f for f in _ALWAYS if f not in d)
        return cls(**{**dict.fromkeys(_ALWAYS), **known}, extra=extra, absent=absent)


# The fields written to the file, in the order of the dataclass (``seconds``, ``extra`` and
# ``absent`` are not keys of the file).
_NAMED = tuple(f.name for f in fields(Manifest) if f.name not in ("seconds", "extra", "absent"))


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
    distributed: dict | None = None,
    rebalance: dict | None = None,
    bulk: dict | None = None,
    compact: dict | None = None,
) -> Manifest:
    """A generation's manifest, committed now: per-section ``tables`` (file, records, bytes)
    and ``status`` counts; ``edits`` and ``stages`` for a batch; what made it (``distributed``,
    ``rebalance``, ``bulk``, ``compact``)."""
    return Manifest(
        generation=generation,
        parent=parent,
        batch=batch,
        committed=time.time(),
        sections=sections,
        tables=tables,
        status=status,
        edits=edits,
        stages=stages,
        distributed=distributed,
        rebalance=rebalance,
        bulk=bulk,
        compact=compact,
    )


def empty(secs: Sections, generation: int = 0) -> Manifest:
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
    runs newest first (docs/format.md §5, levels), then PagesByURL's due index (§3.1: its base
    and runs) and mark table (§3.2)."""
    files = [(entry["file"], entry["bytes"])] + [(r["file"], r["bytes"]) for r in entry.get("runs", ())]
    due = index_entry(entry)
    if due is not None:
        files += [(f["file"], f["bytes"]) for f in index_files(due)]
    e = marks_entry(entry)
    if e is not None:
        files.append((e["file"], e["bytes"]))
    return files


def index_entry(pages_entry: dict | None) -> dict | None:
    """The due index of one section's PagesByURL manifest entry (None: not indexed).  The one place
    that knows where the manifest keeps it (docs/format.md §3.1)."""
    return None if pages_entry is None else pages_entry.get("due")


def index_files(due: dict) -> list[dict]:
    """The file entries of a ``due`` index entry: its base, then its delta runs newest first."""
    return [due, *due.get("runs", ())]


def with_index(pages_entry: dict, due: dict | None) -> dict:
    """``pages_entry`` naming ``due`` as its index (``{"file", "records", "bytes"}`` of its base,
    ``"runs": [{"file", "bytes", "entries"}, ...]`` newest first when it has delta runs)."""
    e = {k: v for k, v in pages_entry.items() if k != "due"}
    if due is not None:
        e["due"] = due
    return e


def marks_entry(pages_entry: dict | None) -> dict | None:
    """The mark table of one section's PagesByURL manifest entry (None: no marks).  The one
    place that knows where the manifest keeps it (docs/format.md §3.2)."""
    return None if pages_entry is None else pages_entry.get("marks")


def with_marks(pages_entry: dict, marks: dict | None) -> dict:
    """``pages_entry`` naming ``marks`` as its mark table (``{"file", "records", "bytes"}``)."""
    e = {k: v for k, v in pages_entry.items() if k != "marks"}
    if marks is not None:
        e["marks"] = marks
    return e


def stage_rows(rows: Iterable[dict]) -> list[dict]:
    """Per-stage results of a batch, ``[{"stage": S, "sections": [row, ...]}]`` for S = 1..5,
    from rows ``{"stage": S, "section": J, ...}`` in any order (sections ascending in each)."""
    by_stage: dict[int, list[dict]] = {s: [] for s in STAGES}
    for r in rows:
        by_stage[r["stage"]].append({x: v for x, v in r.items() if x != "stage"})
    return [{"stage": s, "sections": sorted(by_stage[s], key=lambda r: r["section"])} for s in STAGES]


def check_counts(m: Manifest) -> None:
    """Cross-table counts must agree before a generation is committed."""

    def total(t: str) -> int:
        return sum(s.get(t, {}).get("records", 0) for s in m.tables)

    if total("pages_by_url") != total("pages_by_md5") or total("links_by_md5") != total("links_by_url"):
        raise WebDBError(
            f"internal error: table counts disagree before commit: "
            f"pages {total('pages_by_url')}/{total('pages_by_md5')}, "
            f"links {total('links_by_md5')}/{total('links_by_url')}"
        )


def round_row(m: Manifest, parent_pages: int | None = None) -> dict:
    """The figures of one generation for ``rounds``: its commit time, batch, pages, links,
    bytes, pages by status, pages added since ``parent_pages`` (None: unknown) and the seconds
    of its cascade (the slowest section of each stage, summed; None without stages).  From the
    manifest alone: no table is read."""
    from webdb.tables.records import Status

    status: dict[str, int] = {}
    for per in m.status:
        for code, n in per.items():
            name = Status(int(code)).name.lower()
            status[name] = status.get(name, 0) + n
    pages = sum(t.get("pages_by_url", {}).get("records", 0) for t in m.tables)
    stages = m.stages or []
    seconds = [max((r.get("seconds", 0.0) for r in s["sections"]), default=0.0) for s in stages]
    return {
        "generation": m.generation,
        "committed": m.committed,
        "batch": m.batch,
        "pages": pages,
        "links": sum(t.get("links_by_md5", {}).get("records", 0) for t in m.tables),
        "bytes": sum(size for t in m.tables for e in t.values() for _, size in table_files(e)),
        "status": dict(sorted(status.items())),
        "new_pages": None if parent_pages is None else pages - parent_pages,
        "seconds": round(sum(seconds), 3) if seconds else None,
    }


def rounds(m: Manifest, parent: Manifest | None) -> list[dict]:
    """``m``'s ``rounds``: its parent's rows (or, for a parent written without them, the row
    of the parent itself), then ``m``'s own, the last ``ROUNDS_KEPT``.  Written at commit, so
    the history of a crawl outlives the manifests a commit removes."""
    if parent is None:
        return [round_row(m)]
    before = parent.rounds
    if not (isinstance(before, list) and before and all(isinstance(r, dict) for r in before)) or not isinstance(
        before[-1].get("pages"), int
    ):
        before = [round_row(parent)]  # written without rows (or rows we cannot read): start from the parent
    return [*before, round_row(m, before[-1]["pages"])][-ROUNDS_KEPT:]
