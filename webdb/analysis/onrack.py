"""``prefixes`` and ``dedup`` over a rack (docs/analysis.md, *On a rack or a Dask cluster*):
each location reads only its own sections, the coordinator (this process) combines.

Both run as a task of the distributed update (``webdb.rack.update``, over agents or a Dask
cluster as the driver chooses): every location takes its writer lock and syncs to the rack's generation, so all
sections are read at one generation; then ``rack_step`` answers per section.

- prefixes: each section's statistics over its slice of PagesByURL (a prefix may span two
  sections: its counts are summed here), merged by (domain, prefix); nothing is committed.
- dedup: PagesByMD5 is split by md5, so every duplicate of an md5 is in one section: each
  section finds its changes and writes them as writer calls; they commit as one batch.

Same output as the one-process commands on the same data.
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Callable, Iterable, Iterator

from webdb.analysis.dedup import SCOPES, Change, apply_change, find_duplicates
from webdb.analysis.prefixes import PrefixStat, prefix_stats
from webdb.analysis.rank import new_scores, reader_contributions, shares
from webdb.core.reader import Reader
from webdb.errors import BadInput
from webdb.tables.records import Page, Status
from webdb.util.sortbuf import merge_files
from webdb.writer.inputs import CallRecorder

__all__ = [
    "RACK_STEPS",
    "dedup_rack",
    "export_rack",
    "prefix_stats_rack",
    "rack_step",
    "rank_iteration_rack",
    "rank_rack",
]

RACK_STEPS = "webdb.analysis.onrack:rack_step"
_CHUNK = 5000  # records per reply part


def rack_step(ctx, req: dict) -> Iterator[dict]:
    """The locations' side (a steps function): ``op`` ``prefixes``, ``dedup``, ``rank-*`` or
    ``export``, per section of this location, reading that section's tables only."""
    op = req.get("op")
    for j in ctx.sections:
        if op == "prefixes":
            with Reader.of_sections(ctx.db, ctx.manifest, [j], ("pages_by_url",)) as r:
                rows = [
                    [s.domain, s.prefix, s.unfetched, s.fetched, s.fit]
                    for s in prefix_stats(r, req["depth"], 1, ctx.scratch)
                ]
            for i in range(0, max(len(rows), 1), _CHUNK):
                yield {"section": j, "stats": rows[i : i + _CHUNK]}
        elif op == "dedup":
            rec = CallRecorder()
            rows = []
            with Reader.of_sections(ctx.db, ctx.manifest, [j], ("pages_by_md5",)) as r:
                for c in find_duplicates(r, req["scope"], bool(req.get("canonical"))):
                    rows.append([c.page.url, int(c.status), c.keeper])
                    apply_change(c, rec)
            path = None
            if rows and not req.get("dry_run"):
                path = os.path.join(ctx.scratch, f"dedup-{j:04d}.jsonl")
                with open(path, "w", encoding="utf-8") as f:
                    rec.write(f)
            yield {"section": j, "calls": path, "changes": []}
            for i in range(0, len(rows), _CHUNK):
                yield {"section": j, "changes": rows[i : i + _CHUNK]}
        elif op == "rank-shares":
            budget = (int(ctx.db.settings.memory_mb) << 20) // 4
            tables = ("pages_by_md5", "links_by_md5")
            with Reader.of_sections(ctx.db, ctx.manifest, [j], tables) as r:
                runs = reader_contributions(r, j, ctx.scratch, budget)
            rows = [[u.decode("utf-8"), xs] for u, xs in shares(merge_files(runs))] if runs else []
            for path in runs:
                os.unlink(path)
            for i in range(0, max(len(rows), 1), _CHUNK):
                yield {"section": j, "shares": rows[i : i + _CHUNK]}
        elif op == "rank-scores":
            sums = ((u.encode("utf-8"), x) for u, x in req["sums"].get(str(j), ()))
            rec = CallRecorder()
            pages, delta = 0, 0.0
            with Reader.of_sections(ctx.db, ctx.manifest, [j], ("pages_by_url",)) as r:
                for page, new in new_scores(r.items("pages_by_url"), sums, req["damping"]):
                    delta += abs(new - page.score)
                    page.score = page.next_score = new
                    rec.add_page_with_score(page)
                    pages += 1
            path = os.path.join(ctx.scratch, f"rank-{j:04d}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                rec.write(f)
            links = ctx.manifest.tables[j].get("links_by_url", {}).get("records", 0)
            yield {"section": j, "calls": path, "pages": pages, "delta": delta, "links": links}
        elif op == "export":
            yield _export_section(ctx, j, req)
        else:
            raise BadInput(f"analysis on a rack: unknown step {op!r}")


def _export_section(ctx, j: int, req: dict) -> dict:
    """Section j's export records (webdb.tools.export) as JSON lines in the location's scratch."""
    from webdb.tools.export import export_pages, host_filter, write_jsonl

    path = os.path.join(ctx.scratch, f"export-{j:04d}.jsonl")
    fit = (lambda p: p.meta.get("fit") == "1") if req.get("fit_only") else None
    with Reader.of_sections(ctx.db, ctx.manifest, [j], ("pages_by_url", "links_by_url")) as r, open(path, "wb") as f:
        n = write_jsonl(
            export_pages(
                r,
                statuses=req["statuses"],
                since=req.get("since"),
                url_ok=host_filter(req["domain"]) if req.get("domain") else None,
                page_ok=fit,
                max_anchors=req["max_anchors"],
            ),
            f,
        )
    return {"section": j, "file": os.path.relpath(path, ctx.path), "pages": n}


def export_rack(
    rack,
    fetch: Callable[[str, str], None],
    *,
    statuses: Iterable[int],
    since: int | None = None,
    domain: str | None = None,
    fit_only: bool = False,
    max_anchors: int,
    dask: str | None = None,
    heartbeat_timeout: float | None = None,
) -> tuple[list[tuple[int, str]], int]:
    """``export_pages`` over a rack: each location writes its sections' records (JSON lines,
    in URL order) to its scratch; ``fetch(label, name)`` copies a location's file (``name``
    relative to its db directory) to this machine while the locks are held.  Returns
    ``[(section, label)]`` in section order (so in global URL order) and the generation."""
    req = {
        "op": "export",
        "statuses": sorted(int(s) for s in statuses),
        "since": since,
        "domain": domain,
        "fit_only": fit_only,
        "max_anchors": max_anchors,
    }
    got: list[tuple[int, str, str]] = []
    gen: list[int] = []

    def before_batch(session):
        got.clear()
        gen[:] = [session.generation]
        for label, parts in session.ask(lambda p: req if p.sections else None).items():
            for part in parts:
                got.append((part["section"], label, part["file"]))
        for _, label, name in got:
            fetch(label, name)
        return None  # read only: nothing to commit

    _run(rack, dask, before_batch, heartbeat_timeout)
    return [(j, label) for j, label, _ in sorted(got)], gen[0]


def _run(rack, dask: str | None, before_batch, heartbeat_timeout: float | None):
    from webdb.rack import HEARTBEAT_TIMEOUT, update

    kw = {
        "steps": RACK_STEPS,
        "before_batch": before_batch,
        "heartbeat_timeout": HEARTBEAT_TIMEOUT if heartbeat_timeout is None else heartbeat_timeout,
    }
    return update(rack, dask=dask, **kw)


def prefix_stats_rack(
    rack, depth: int = 4, min_count: int = 1, *, dask: str | None = None, heartbeat_timeout: float | None = None
) -> list[PrefixStat]:
    """``prefix_stats`` over a rack (``webdb.rack.Rack``), on its agents or (``dask``: a
    scheduler address) on a Dask cluster.  Raises UpdateFailed / DaskUnavailable as ``update``."""
    if not isinstance(depth, int) or depth < 1:
        raise BadInput(f"depth must be a whole number >= 1, not {depth!r}")
    per: dict[int, list[list]] = {}

    def before_batch(session):
        per.clear()
        for parts in session.ask(lambda p: {"op": "prefixes", "depth": depth} if p.sections else None).values():
            for part in parts:
                per.setdefault(part["section"], []).extend(part["stats"])
        return None  # read only: nothing to commit

    _run(rack, dask, before_batch, heartbeat_timeout)
    # Each section's rows are by (domain, prefix); a prefix spanning sections is summed.
    key = lambda row: (row[0].encode(), row[1].encode())  # noqa: E731 - the local sort's byte order
    merged = heapq.merge(*(per[j] for j in sorted(per)), key=key)
    out = []
    for (d, p), grp in itertools.groupby(merged, key=key):
        u = f = ft = 0
        for row in grp:
            u, f, ft = u + row[2], f + row[3], ft + row[4]
        if u + f >= min_count:
            out.append(PrefixStat(d.decode(), p.decode(), u, f, ft))
    return out


def dedup_rack(
    rack,
    dry_run: bool = False,
    on_change: Callable[[Change], None] | None = None,
    scope: str = "global",
    *,
    canonical: bool = False,
    dask: str | None = None,
    heartbeat_timeout: float | None = None,
) -> dict[str, int]:
    """``dedup`` over a rack: each section's changes found where it lives, applied as one
    batch (``dask``: on a Dask cluster).  ``on_change`` sees each change (its page holds only
    the url), in the local command's order.  Returns the counts, as ``dedup``."""
    if scope not in SCOPES:
        raise BadInput(f"dedup scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    counts = {"duplicate": 0, "restored": 0}
    got: dict[int, dict] = {}

    def before_batch(session):
        got.clear()
        counts.update(duplicate=0, restored=0)
        req = {"op": "dedup", "scope": scope, "dry_run": dry_run, "canonical": canonical}
        for parts in session.ask(lambda p: req if p.sections else None).values():
            for part in parts:
                g = got.setdefault(part["section"], {"calls": None, "changes": []})
                g["calls"] = part.get("calls") or g["calls"]
                g["changes"].extend(part["changes"])
        for j in sorted(got):  # sections in md5 order: the local command's order
            for url, status, keeper in got[j]["changes"]:
                counts["duplicate" if status == Status.DUPLICATE else "restored"] += 1
                if on_change is not None:
                    on_change(Change(Page(url), status, keeper))
        inputs = {j: {"paths": [g["calls"]]} for j, g in got.items() if g["calls"]}
        return (inputs, "calls") if inputs else None

    _run(rack, dask, before_batch, heartbeat_timeout)
    return counts


def rank_iteration_rack(
    rack, damping: float = 0.85, *, dask: str | None = None, heartbeat_timeout: float | None = None
) -> dict:
    """``rank_iteration`` over a rack (``dask``: on a Dask cluster), one committed batch.

    Each section's contributions come from its md5 tables where it lives; the coordinator
    merges the (url, shares) lists of all sections by url — each url's shares in md5 order, so
    their sum is the local one, bit for bit — and sends each url section its sums; there the
    merge against PagesByURL writes every page's score as writer calls, committed as one batch.
    Cost on the coordinator: one share per link (in memory) per iteration."""
    out = {"pages": 0, "links": 0, "delta": 0.0}

    def before_batch(session):
        per: dict[int, list] = {}
        for parts in session.ask(lambda p: {"op": "rank-shares"} if p.sections else None).values():
            for part in parts:
                per.setdefault(part["section"], []).extend(part["shares"])
        secs = session.manifest.sections
        sums: dict[str, list] = {}
        merged = heapq.merge(*(per[j] for j in sorted(per)), key=lambda row: row[0].encode("utf-8"))
        for url, grp in itertools.groupby(merged, key=lambda row: row[0]):
            # Sections in md5 order, each url's shares in md5 order: the local command's list.
            total = sum([x for row in grp for x in row[1]])
            sums.setdefault(str(secs.of_url(url.encode("utf-8"))), []).append([url, total])
        req = {"op": "rank-scores", "damping": damping, "sums": sums}
        inputs: dict[int, dict] = {}
        out.update(pages=0, links=0, delta=0.0)
        for parts in session.ask(
            lambda p: {**req, "sums": {str(j): sums.get(str(j), []) for j in p.sections}} if p.sections else None
        ).values():
            for part in parts:
                inputs[part["section"]] = {"paths": [part["calls"]]}
                out["pages"] += part["pages"]
                out["links"] += part["links"]
                out["delta"] += part["delta"]  # summed per section: may differ from the local in the last bits
        return inputs, "calls"

    _run(rack, dask, before_batch, heartbeat_timeout)
    return out


def rank_rack(
    rack,
    iterations: int,
    damping: float = 0.85,
    *,
    dask: str | None = None,
    heartbeat_timeout: float | None = None,
    lock_wait: float = 0.0,
) -> list[dict]:
    """``rank`` over a rack: ``iterations`` committed batches; a result dict per iteration."""
    from webdb.core.lockwait import wait_for_lock
    from webdb.rack import UpdateFailed

    if not 0.0 <= damping <= 1.0:
        raise BadInput(f"damping must be in [0, 1], got {damping}")
    if not isinstance(iterations, int) or iterations < 0:
        raise BadInput(f"iterations must be a whole number >= 0, not {iterations!r}")
    return [
        wait_for_lock(
            lambda: rank_iteration_rack(rack, damping, dask=dask, heartbeat_timeout=heartbeat_timeout),
            lock_wait,
            "rank",
            locked=lambda e: isinstance(e, UpdateFailed) and e.kind == "LockedError",
            give_up=lambda e: UpdateFailed(f"rank waited {lock_wait:g}s for the writer lock: {e}", e.result),
        )
        for _ in range(iterations)
    ]
