"""``webdb compact``: merge the delta runs of tables kept as levels (the link tables and each
section's due index) into new bases, between rounds, as one atomic generation (docs/design.md §4.3, docs/operations.md).

The stages of ``webdb update`` already compact a table when its runs outgrow the policy
(``level_ratio``, ``level_runs``); this does it ahead of time — say, at night, so the day's
rounds do not pay for it — for every table with runs, the most run-heavy first, within an
optional time budget.  Crash-safe like a batch: the new bases are written, then one manifest is
committed (kill -9 anywhere: the db is at its old or its new generation; files of an
uncommitted attempt are removed by the next ``recover``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from webdb.core.due import compact_index, index_name
from webdb.core.manifest import Manifest, build, check_counts
from webdb.errors import BadInput, CorruptionError
from webdb.tables.format import TABLE_KINDS, TABLE_SUFFIX
from webdb.tables.levels import compact as compact_levels
from webdb.tables.levels import open_levels, written
from webdb.tables.table import TableWriter
from webdb.util import faults

__all__ = ["compact"]


def _check_sections_here(db, m: Manifest) -> None:
    for j in range(m.sections.k):
        if m.tables[j] and not os.path.isdir(db.section_dir(j)):
            raise BadInput(
                f"{db.path}: section {j} is not here (one location of a rack?); a rack's tables are "
                f"compacted inside `webdb update` (settings level_ratio, level_runs)"
            )


# The name a section's due index (kept inside PagesByURL's manifest entry) has here.
DUE = "due"


def _levels_entries(tables: dict) -> Iterator[tuple[str, dict]]:
    """(name, manifest entry) of every table of a section kept as levels, its due index too."""
    yield from tables.items()
    due = tables.get("pages_by_url", {}).get("due")
    if due is not None:
        yield DUE, due


def _tables_with_runs(m: Manifest) -> list[tuple[float, int, str, int]]:
    """(runs' bytes / base's bytes, section, table, total bytes) of every table with runs (the
    due index named ``due``), the most run-heavy first."""
    todo = []
    for j in range(m.sections.k):
        for t, e in _levels_entries(m.tables[j]):
            if e.get("runs"):
                rb = sum(r["bytes"] for r in e["runs"])
                todo.append((rb / max(e["bytes"], 1), j, t, e["bytes"] + rb))
    todo.sort(key=lambda x: (-x[0], x[1], x[2]))
    return todo


def _out_of_budget(budget: float | None, spent: float, done: list, nbytes: int, size: int) -> bool:
    """Whether the next table (``size`` bytes) would overrun the budget at the bytes per second
    so far (the first table always starts unless the budget is spent)."""
    if budget is None:
        return False
    if done and spent + size / (nbytes / max(spent, 1e-9)) > budget:
        return True
    return spent >= budget


def _compact_index(db, gen: int, pages: dict, j: int, created: list[str]) -> dict:
    """Section j's due index merged into a new base; returns PagesByURL's new manifest entry."""
    d = db.section_dir(j)
    created.append(os.path.join(d, index_name(gen, "c")))
    due = compact_index(d, gen, pages["due"], pages["records"], db.settings)
    faults.point("compact.after_table")
    return {**pages, "due": due}


def _compact_table(db, gen: int, entry: dict, j: int, t: str, created: list[str]) -> dict:
    """One table's base and runs merged into a new base file; returns its manifest entry."""
    s = db.settings
    d = db.section_dir(j)
    view = open_levels(
        os.path.join(d, entry["file"]), [os.path.join(d, r["file"]) for r in entry["runs"]], t, entry["records"]
    )
    name = f"{gen:08d}-c.{TABLE_SUFFIX[t]}"
    out = TableWriter(os.path.join(d, name), TABLE_KINDS[t], s.block_size, s.codec, sync=s.sync)
    created.append(out.path)
    _, info = written(view, out, lambda v=view, o=out: compact_levels(v, o))
    if info["records"] != entry["records"]:
        raise CorruptionError(  # the levels disagree with the manifest's count
            f"{out.path}: {info['records']} records after compaction, the manifest counts {entry['records']}; "
            "nothing replaced (webdb check names the damage)"
        )
    faults.point("compact.after_table")
    return {"file": name, "records": info["records"], "bytes": info["bytes"]}


def _remove(paths: list[str]) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass  # aborted before it was created, or already gone


def compact(db, budget: float | None = None, clock=time.monotonic) -> dict:
    """Merge every table's delta runs into a new base and commit one generation; returns
    ``{"generation", "compacted": [{"section", "table", "runs", "bytes", "seconds"}], "left",
    "seconds"}``.  With ``budget`` (seconds), tables are compacted while the time spent plus
    the next table's estimate (from the bytes per second so far) fits; ``left`` counts the
    tables with runs not compacted.  Nothing to do: no new generation (``generation`` None)."""
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int | float) or budget <= 0):
        raise BadInput(f"budget must be a number of seconds > 0, not {budget!r}")
    t0 = clock()
    lock = db.lock().acquire()
    try:
        db.recover()
        m = db.manifest()
        _check_sections_here(db, m)
        db.quick_check()
        todo = _tables_with_runs(m)
        gen = m.generation + 1
        tables = [dict(x) for x in m.tables]
        done: list[dict] = []
        created: list[str] = []
        nbytes = 0
        try:
            for _, j, t, size in todo:
                if _out_of_budget(budget, clock() - t0, done, nbytes, size):
                    break
                c0 = clock()
                if t == DUE:
                    runs = len(tables[j]["pages_by_url"]["due"]["runs"])
                    tables[j]["pages_by_url"] = _compact_index(db, gen, tables[j]["pages_by_url"], j, created)
                else:
                    runs = len(tables[j][t]["runs"])
                    tables[j][t] = _compact_table(db, gen, tables[j][t], j, t, created)
                done.append({"section": j, "table": t, "runs": runs, "bytes": size, "seconds": clock() - c0})
                nbytes += size
            if not done:
                return {"generation": None, "compacted": [], "left": len(todo), "seconds": clock() - t0}
            manifest = build(
                generation=gen,
                parent=m.generation,
                batch=f"{gen:08d}-compact",
                sections=m.sections,
                tables=tables,
                status=m.status,
                edits={},
                stages=[],
                compact={"tables": len(done), "bytes": nbytes},
            )
            check_counts(manifest)
            faults.point("compact.before_commit")
        except BaseException:
            _remove(created)
            raise
        db.commit(manifest)
        faults.point("compact.after_commit")
        db.recover()  # the old bases and runs of the compacted tables go
    finally:
        lock.release()
    return {"generation": gen, "compacted": done, "left": len(todo) - len(done), "seconds": clock() - t0}
