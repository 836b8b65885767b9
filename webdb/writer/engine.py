"""The section protocol: the one stage loop both writers run (docs/design.md, *One protocol,
two transports*).

A batch is step 0 — the writer calls, recorded by an ``EditLog`` and routed as one edit file
per target section — then stages 1..5.  Stage S of section j merges the edit files every
producer sent j for S into j's table and routes what it emits to the sections of later stages;
it starts when every producer has finished step S-1.  ``run_stages`` is that loop for any set
of sections; an ``Exchange`` is the transport that moves edit files between steps:

- ``LocalExchange`` (``Writer.close``): every section is on this machine.  Edit files are
  written straight into the target's incoming directory, so a stage's inputs are the files
  there and nothing is shipped; one process runs all k sections stage by stage, the sections of
  a stage in parallel in the ``LocalExecutor``'s worker processes.
- ``SectionWriter`` (webdb.writer.section, ``webdb update`` over agents): one process per
  section, which ships its outbox through ndfs share groups and waits for the others' done
  markers.
- ``_TaskExchange`` (webdb.writer.dasktasks, ``webdb update`` on Dask): one task per stage
  and section runs one stage of the loop; its inputs arrive, and its outbox leaves, as
  task results.

Both end in the same manifest (``webdb.core.manifest.build`` via ``batch_manifest``) and the same
commit (``WebDB.commit``).  Cost: see webdb.writer.cascade (per stage) and docs/design.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Protocol

from webdb.core import manifest
from webdb.core.manifest import Manifest
from webdb.core.sections import Sections, section_path
from webdb.core.settings import Settings
from webdb.util import faults
from webdb.writer.cascade import StageJob, TableFiles, incoming_dir

__all__ = [
    "Exchange",
    "LocalExchange",
    "apply_stage_result",
    "batch_manifest",
    "choose_sections",
    "run_stages",
    "section_job",
    "stage_job",
]

STAGES = range(1, 6)


def stage_job(
    db_path: str, batch: str, gen: int, secs: Sections, settings: Settings, tmp: str, workers: int
) -> StageJob:
    """The part of a stage job every stage and section shares."""
    mem = int(settings.memory_mb)
    # Each worker emits into at most three sort buffers; together they get half the budget
    # (the rest: interpreters, decoded blocks, write buffers).
    return StageJob(
        db=db_path,
        batch=batch,
        gen=gen,
        sections=secs.to_json(),
        settings=settings,
        schedule=settings.schedule(),
        tmp=tmp,
        emit_mb=max(2, mem // (workers * 6)),
    )


def choose_sections(samples: Iterable[list[bytes]], k: int) -> Sections:
    """First batch of a k-section db: the breakpoints, from the URL samples of every producer
    (the local writer has one, the distributed writer one per section)."""
    return Sections(k, Sections.choose([u for s in samples for u in s], k))


class Exchange(Protocol):
    """The transport of one or more sections' edit files between the steps of a batch."""

    def inputs(self, stage: int, section: int) -> list[str]:
        """Local paths of the edit files for ``stage`` of ``section`` (waits for producers)."""
        ...

    def merged(self, result: dict) -> None:
        """A stage of a section finished (``run_stage``'s result)."""
        ...

    def published(self, stage: int) -> None:
        """Every section of this loop finished ``stage``: make its emitted edits visible."""
        ...


def run_stages(
    job0: StageJob,
    sections: Iterable[int],
    tables: list[dict],
    status: list[dict],
    exchange: Exchange,
    execute: Callable[[list[StageJob]], list[dict]],
    stages: Iterable[int] = STAGES,
) -> list[dict]:
    """The stage loop: stages 1..5 of ``sections``, each merging the edit files ``exchange``
    delivers into ``tables[j]`` (updated in place, as ``status[j]``); a stage's jobs run
    through ``execute``.  Returns one row per stage run (``{"stage", "section", ...}``).
    ``stages``: a part of the loop (a Dask stage task runs one stage; its graph is the loop)."""
    rows: list[dict] = []
    for stage in stages:
        jobs = []
        for j in sections:
            inputs = exchange.inputs(stage, j)
            if inputs:
                jobs.append(section_job(job0, stage, j, tables[j], inputs))
        for r in execute(jobs):
            apply_stage_result(tables, status, r)
            rows.append({"stage": stage, **stage_summary(r)})
            exchange.merged(r)
        exchange.published(stage)
    return rows


def section_job(job0: StageJob, stage: int, j: int, tables: dict, inputs: list[str]) -> StageJob:
    """The job of ``stage`` on section ``j``: merge ``inputs`` (local edit file paths) into the
    section's current ``tables`` (``{table: manifest entry}``).  Every transport builds it here."""
    d = section_path(job0.db, j)
    paths = {
        t: TableFiles(os.path.join(d, e["file"]), [os.path.join(d, r["file"]) for r in e.get("runs", ())], e)
        for t, e in tables.items()
    }
    return replace(job0, stage=stage, section=j, inputs=inputs, tables=paths)


def apply_stage_result(tables: list[dict], status: list[dict], r: dict) -> None:
    j = r["section"]
    e = {"file": r["file"], "records": r["records"], "bytes": r["bytes"]}
    if r.get("runs"):
        e["runs"] = r["runs"]
    if r["table"] == "pages_by_url":  # stage 1 keeps the due index and the mark table (webdb.core.due, .marks)
        e = manifest.with_marks(manifest.with_index(e, r.get("due")), r.get("marks"))
    tables[j][r["table"]] = e
    for st, n in r["status"].items():
        status[j][st] = status[j].get(st, 0) + n
        if not status[j][st]:
            del status[j][st]


# What a stage did to a table's levels besides writing its run (webdb.writer.cascade), when it
# did: ``compacted`` N runs into a new base, or ``merged_runs`` N runs into one.
LEVEL_STEPS = ("compacted", "merged_runs")


def stage_summary(r: dict) -> dict:
    """A section's stage result as its row of the manifest's ``stages`` (and its progress event):
    the figures of every stage, then, a stage over a link table's levels, the bytes its scrub
    checked (``scrubbed_bytes``) and the level steps it took (``LEVEL_STEPS``), if any, with a new
    base's own wall and CPU (``compact_seconds``, ``compact_cpu_seconds``)."""
    keys = (
        "section",
        "records",
        "bytes",
        "seconds",
        "cpu_seconds",
        "emitted",
        "decoded_blocks",
        "raw_blocks",
        "patched_blocks",
    )
    scrub = {"scrubbed_bytes": r["scrubbed_bytes"]} if "scrubbed_bytes" in r else {}
    extra = {k: r[k] for k in ("compact_seconds", "compact_cpu_seconds") if k in r}
    return {**{k: r[k] for k in keys}, **scrub, **level_steps(r), **extra}


def level_steps(r: dict) -> dict:
    """The ``LEVEL_STEPS`` a stage result ``r`` (or its summary) took: ``{"compacted": N}``,
    ``{"merged_runs": N}`` or ``{}``."""
    return {k: r[k] for k in LEVEL_STEPS if r.get(k)}


def base_state(base: Manifest, k: int) -> tuple[list[dict], list[dict]]:
    """Copies of the committed generation's per-section tables and status, k long."""
    tables = [dict(t) for t in base.tables] + [{} for _ in range(k - len(base.tables))]
    status = [dict(x) for x in base.status] + [{} for _ in range(k - len(base.status))]
    return tables, status


def batch_manifest(
    base: Manifest,
    gen: int,
    batch: str,
    secs: Sections,
    tables: list[dict],
    status: list[dict],
    edits: dict,
    rows: Iterable[dict],
    distributed: dict | None = None,
) -> Manifest:
    """The manifest of a batch (either writer), its cross-table counts checked."""
    m = manifest.build(
        generation=gen,
        parent=base.generation,
        batch=batch,
        sections=secs,
        tables=tables,
        status=status,
        edits=edits,
        stages=manifest.stage_rows(rows),
        distributed=distributed,
    )
    manifest.check_counts(m)
    return m


class LocalExchange:
    """Every section on this machine: edit files land in the target's incoming directory."""

    def __init__(self, root: str, batch: str, on_stage: Callable[[int], None] | None = None) -> None:
        self.root, self.batch, self.on_stage = root, batch, on_stage

    def inputs(self, stage: int, section: int) -> list[str]:
        d = incoming_dir(self.root, section, self.batch, stage)
        return sorted(os.path.join(d, f) for f in os.listdir(d)) if os.path.isdir(d) else []

    def merged(self, result: dict) -> None:
        pass  # the files are in place already; progress is per stage

    def published(self, stage: int) -> None:
        if self.on_stage is not None:
            self.on_stage(stage)
        faults.point(f"close.after_stage{stage}")
