"""The crawl loop: inject, then rounds of generate → fetch → update (docs/crawl.md, *Crawl*).

    res = crawl("crawl.db", seeds=["seeds.txt"], rounds=3, top_n=1000, report=print)

Each round writes one segment under ``segments_dir`` (default ``<db>.segments``), named by its
UTC start time (``YYYYMMDDHHMMSS``, ``-N`` appended if taken), so segment names sort in round
order.  One ``Fetcher`` serves every round: robots.txt answers and each host's politeness
delay hold across rounds.  A round that generates nothing ends the crawl early.  Ctrl-C during
a fetch applies what was fetched (one update), then stops; the URLs not reached stay marked
until their mark expires.

``fetch_parts`` fetches every partition of a segment in one run (one thread pool over all
hosts, each record appended to its own partition's files): what ``webdb fetch`` does.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import webdb
from fetchlist.fetch import Fetcher, FetchStats
from fetchlist.generate import generate
from fetchlist.inject import inject
from fetchlist.net import POLICY
from fetchlist.segment import Segment
from fetchlist.update import REFUSED_POLICY, REFUSED_ROBOTS, apply_segments
from webdb.errors import BadInput, NotADatabase

POLICY_HINT = "set allow_private_addresses to fetch them"

__all__ = ["RoundSummary", "CrawlResult", "crawl", "fetch_parts", "new_segment_dir", "refused_text", "update_db"]


@dataclass
class RoundSummary:
    """One round: what was generated, fetched, found; db size after it; seconds per step."""

    round: int
    segment: str | None
    generated: int = 0
    fetched: int = 0
    not_modified: int = 0
    redirects: int = 0
    failed: int = 0
    new_urls: int = 0
    # URLs not requested, by reason: "address policy" (host refused; the page stays as it was),
    # "robots.txt" (denied: GONE)
    refused: dict[str, int] = field(default_factory=dict)
    pages: int = 0
    links: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        s = self.seconds
        refused = f", {refused_text(self.refused)}" if self.refused else ""
        return (
            f"round {self.round}: generated {self.generated:,}, fetched {self.fetched:,}, "
            f"not modified {self.not_modified:,}, redirects {self.redirects:,}, failed {self.failed:,}, "
            f"new URLs {self.new_urls:,}{refused}; db {self.pages:,} pages, {self.links:,} links; "
            f"generate {s.get('generate', 0):.2f}s fetch {s.get('fetch', 0):.2f}s update {s.get('update', 0):.2f}s"
        )


def refused_text(refused: dict[str, int]) -> str:
    """``"refused 3 (address policy 2, robots.txt 1; set allow_private_addresses to fetch them)"``,
    or "" if nothing was refused."""
    n = sum(refused.values())
    if not n:
        return ""
    why = ", ".join(f"{k} {v:,}" for k, v in sorted(refused.items()) if v)
    return f"refused {n:,} ({why}{'; ' + POLICY_HINT if refused.get(POLICY) else ''})"


@dataclass
class CrawlResult:
    db: str
    segments_dir: str
    injected: dict | None
    rounds: list[RoundSummary]
    seconds: float = 0.0
    # why the crawl ended before its last round, if it did ("" otherwise)
    stopped: str = ""

    @property
    def refused(self) -> dict[str, int]:
        """URLs not requested in all rounds, by reason (RoundSummary.refused)."""
        total: dict[str, int] = {}
        for r in self.rounds:
            for k, v in r.refused.items():
                total[k] = total.get(k, 0) + v
        return total

    def to_json(self) -> dict:
        return {
            "db": self.db,
            "segments_dir": self.segments_dir,
            "injected": self.injected,
            "rounds": [asdict(r) for r in self.rounds],
            "refused": self.refused,
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
        }


def new_segment_dir(segments_dir: str, now: float | None = None) -> str:
    """A fresh segment path under ``segments_dir`` named by UTC time (made unique)."""
    name = time.strftime("%Y%m%d%H%M%S", time.gmtime(time.time() if now is None else now))
    path = os.path.join(segments_dir, name)
    n = 0
    while os.path.exists(path):
        n += 1
        path = os.path.join(segments_dir, f"{name}-{n}")
    return path


def fetch_parts(segment: Segment, fetcher: Fetcher, parts: Iterable[int] | None = None) -> FetchStats:
    """Fetch the given partitions (all by default) of ``segment`` in one run, skipping URLs
    already fetched (resume).  Each record goes to its own partition's output.  On
    KeyboardInterrupt the records written so far are kept (and fsynced), then it re-raises."""
    parts = segment.parts() if parts is None else list(parts)
    known = set(segment.parts())
    for p in parts:
        if p not in known:
            raise BadInput(f"{segment.path}: no partition {p} (partitions: {sorted(known) or 'none'})")
    with contextlib.ExitStack() as stack:
        writers = {p: stack.enter_context(segment.writer(p)) for p in parts}
        route: dict[str, int] = {}
        entries = []
        done = 0
        for p in parts:
            w = writers[p]
            done += len(w.done)
            for e in segment.fetchlist(p):
                if e.url not in w.done and e.url not in route:
                    route[e.url] = p
                    entries.append(e)
        stats = fetcher.fetch(entries, lambda rec: writers[route[rec.url]].write(rec))
        stats.skipped += done
        return stats


def update_db(db, segment_dirs: list[str], writer_settings: dict | None = None, **options: Any) -> dict:
    """Apply segments to ``db`` in one local batch; counts of ``apply_segments`` plus ``pages``,
    ``links``, ``new_urls`` (pages added), ``seconds`` (in all), ``feed_seconds`` (reading the
    segments into writer calls) and ``commit_seconds`` (the cascade and commit)."""
    t0 = time.monotonic()
    with db.writer(**(writer_settings or {})) as w:
        with db.reader() as r:
            before = r.num_pages
        counts = apply_segments(w, segment_dirs, **options)
        counts["feed_seconds"] = counts.pop("seconds")
    m = w.result
    tabs = m.tables if m is not None else []
    counts["pages"] = sum(t.get("pages_by_url", {}).get("records", 0) for t in tabs)
    counts["links"] = sum(t.get("links_by_md5", {}).get("records", 0) for t in tabs)
    counts["new_urls"] = counts["pages"] - before
    counts["seconds"] = round(time.monotonic() - t0, 3)
    counts["commit_seconds"] = round((m.seconds if m is not None else None) or 0.0, 3)
    return counts


def _open_or_create(db_path: str, sections: int, create_settings: dict | None):
    """The db at ``db_path``, created (with ``sections``) where nothing or an empty folder is."""
    try:
        return webdb.open(db_path)
    except NotADatabase:
        if os.path.exists(db_path) and (not os.path.isdir(db_path) or os.listdir(db_path)):
            raise
        return webdb.create(db_path, sections=sections, **(create_settings or {}))


def _count_update(rs: RoundSummary, c: dict) -> None:
    """A round's summary from its update's counts (those of ``update_db``)."""
    rs.fetched = c.get("fetched", 0)
    rs.not_modified = c.get("not_modified", 0)
    rs.redirects = c.get("redirect_perm", 0) + c.get("redirect_temp", 0)
    rs.failed = c.get("retry", 0) + c.get("gone", 0)
    rs.new_urls, rs.pages, rs.links = c["new_urls"], c["pages"], c["links"]
    refused = {POLICY: c.get(REFUSED_POLICY, 0), "robots.txt": c.get(REFUSED_ROBOTS, 0)}
    rs.refused = {k: v for k, v in refused.items() if v}


def crawl(
    db_path: str,
    *,
    seeds: Iterable[str] = (),
    rounds: int = 1,
    segments_dir: str | None = None,
    sections: int = 1,
    fetcher: Fetcher | None = None,
    fetch_settings: dict | None = None,
    generate_options: dict | None = None,
    update_options: dict | None = None,
    inject_options: dict | None = None,
    writer_settings: dict | None = None,
    create_settings: dict | None = None,
    report: Callable[[RoundSummary], None] | None = None,
    lock_wait: float = 60.0,
) -> CrawlResult:
    """Inject ``seeds`` into ``db_path`` (created with ``sections`` if absent), then run up to
    ``rounds`` rounds.  ``generate_options`` go to ``generate`` (top_n, max_per_host, ...),
    ``update_options`` to ``apply_segments``, ``fetch_settings`` to the Fetcher (ignored if
    ``fetcher`` is given), ``writer_settings`` to every writer (e.g. ``adaptive=True``).
    ``report`` is called with each round's summary as it ends.  Every step that writes (inject,
    generate, update) waits up to ``lock_wait`` seconds for another writer's lock."""
    from webdb import wait_for_lock

    if not isinstance(rounds, int) or rounds < 0:
        raise BadInput(f"rounds must be a whole number >= 0, not {rounds!r}")
    t_start = time.monotonic()
    db = _open_or_create(db_path, sections, create_settings)
    segments_dir = segments_dir or os.path.abspath(db_path).rstrip(os.sep) + ".segments"
    os.makedirs(segments_dir, exist_ok=True)
    seeds = list(seeds)
    inj_opts = inject_options or {}
    injected = wait_for_lock(lambda: inject(db, seeds, **inj_opts), lock_wait, "inject") if seeds else None
    fetcher = fetcher or Fetcher(fetch_settings or {})
    gen_opts = dict(generate_options or {})
    gen_opts.setdefault("writer_settings", writer_settings)
    gen_opts.setdefault("lock_wait", lock_wait)
    upd_opts = update_options or {}

    def update_step(seg_dir: str) -> dict:
        return wait_for_lock(lambda: update_db(db, [seg_dir], writer_settings, **upd_opts), lock_wait, "update")

    out: list[RoundSummary] = []
    stopped = ""
    for n in range(1, rounds + 1):
        t0 = time.monotonic()
        seg_dir = new_segment_dir(segments_dir)
        g = generate(db, seg_dir, info={"round": n}, **gen_opts)
        rs = RoundSummary(n, g.segment, g.selected)
        rs.seconds["generate"] = round(time.monotonic() - t0, 3)
        if not g.segment:
            with db.reader() as r:
                rs.pages, rs.links = r.num_pages, r.num_links
            out.append(rs)
            if report:
                report(rs)
            break
        t1 = time.monotonic()
        try:
            fetch_parts(Segment.open(seg_dir), fetcher)
        except KeyboardInterrupt:
            # Keep what was fetched: apply it, then stop (URLs not reached keep their mark).
            update_step(seg_dir)
            raise
        rs.seconds["fetch"] = round(time.monotonic() - t1, 3)
        t1 = time.monotonic()
        c = update_step(seg_dir)
        rs.seconds["update"] = round(time.monotonic() - t1, 3)
        _count_update(rs, c)
        out.append(rs)
        if report:
            report(rs)
        if rs.refused.get(POLICY, 0) >= rs.generated and n < rounds:
            # Every URL of the round was refused by the address policy: the next round would
            # generate them again and meet the same policy.
            stopped = f"stopped after round {n}: every URL was refused by the address policy ({POLICY_HINT})"
            break
    return CrawlResult(os.path.abspath(db_path), segments_dir, injected, out, time.monotonic() - t_start, stopped)
