"""Dedup by content: of the fetched pages carrying one md5, keep one, mark the others DUPLICATE.

The keeper of an md5 is the page with the highest score, then the shortest url, then the
smallest url (bytes).  Unfetched pages carry ``url_md5(url)`` and are never duplicates.
``scope`` says among which pages one is kept: ``global`` (every page of the md5, the
default), ``domain`` (the pages of one registered domain) or ``host`` (of one host), so with
``domain`` the same content on two sites is kept on both.

With ``canonical`` (``webdb dedup --canonical``) a page's canonical URL, ``meta["canonical"]``
(the ``<link rel="canonical">`` or ``Link`` header the crawl recorded), is its URL for dedup:
in a group, a page that another page names canonical is kept first, and the scope groups
pages by the host (domain) of that URL, so a copy naming another site's page canonical
competes with it there.

Pages already DUPLICATE compete again, so the result does not depend on earlier runs: a keeper
that is DUPLICATE (its better twin was deleted or lost score) is restored, and a second run
finds nothing to change.  A page marked DUPLICATE remembers its status in ``meta["dup_status"]``
when it was not FETCHED (a GONE page stays GONE once restored); restored pages get it back.

PagesByMD5 is sorted by (md5, url), so the pages of an md5 are contiguous: one sequential
read, memory O(largest md5 run).  Cost: one read of PagesByMD5; one ``add_page`` per changed
page, all in one batch.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from webdb.errors import BadInput
from webdb.tables.records import Page, Status, url_md5

__all__ = ["SCOPES", "Change", "apply_change", "dedup", "find_duplicates"]

SCOPES = ("global", "domain", "host")
DUP_STATUS = "dup_status"  # meta key: the status a page had before it was marked DUPLICATE
CANONICAL = "canonical"  # meta key: the canonical URL a page names (set by the crawl's update)


@dataclass(slots=True)
class Change:
    """``page`` gets ``status``; ``keeper`` is the url kept for its content."""

    page: Page
    status: int
    keeper: str


def _carries_content(p: Page) -> bool:
    return p.status != Status.UNFETCHED and p.md5 != url_md5(p.url)


def _rank_key(p: Page) -> tuple[float, int, bytes]:
    return (-p.score, len(p.url), p.url.encode("utf-8"))


def _dedup_url(p: Page) -> str:
    return p.meta.get(CANONICAL) or p.url


def _scope_key(scope: str, canonical: bool = False) -> Callable[[Page], str]:
    if scope == "global":
        return lambda p: ""
    from webdb.urls import host_of, registered_domain

    url = _dedup_url if canonical else (lambda p: p.url)
    if scope == "host":
        return lambda p: host_of(url(p)) or ""
    return lambda p: registered_domain(host_of(url(p)) or "")


def find_duplicates(reader, scope: str = "global", canonical: bool = False) -> Iterator[Change]:
    """Every status change dedup makes, streamed in (md5, url) order (see the module doc)."""
    if scope not in SCOPES:
        raise BadInput(f"dedup scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    key = _scope_key(scope, canonical)
    for _, grp in itertools.groupby(reader.items("pages_by_md5"), key=lambda kv: kv[0][:16]):
        run = [Page.decode(k[16:].decode("utf-8"), v) for k, v in grp]
        if len(run) == 1 and run[0].status != Status.DUPLICATE:
            continue  # the common case: content carried by one url
        groups: dict[str, list[Page]] = {}
        for p in run:
            if _carries_content(p):
                groups.setdefault(key(p), []).append(p)
        changes: list[Change] = []
        for fetched in groups.values():
            if len(fetched) < 2 and not any(p.status == Status.DUPLICATE for p in fetched):
                continue
            if canonical:
                named = {p.meta.get(CANONICAL) for p in fetched}
                keeper = min(fetched, key=lambda p: (p.url not in named, *_rank_key(p)))
            else:
                keeper = min(fetched, key=_rank_key)
            for p in fetched:
                if p is keeper:
                    if p.status == Status.DUPLICATE:
                        changes.append(Change(p, int(p.meta.get(DUP_STATUS, Status.FETCHED)), p.url))
                elif p.status != Status.DUPLICATE:
                    changes.append(Change(p, Status.DUPLICATE, keeper.url))
        yield from sorted(changes, key=lambda c: c.page.url.encode("utf-8"))


def dedup(
    db,
    dry_run: bool = False,
    on_change: Callable[[Change], None] | None = None,
    scope: str = "global",
    canonical: bool = False,
) -> dict[str, int]:
    """Apply (with ``dry_run`` only find) the changes of ``find_duplicates``, in one batch
    (``canonical``: canonical URLs count as the pages' URLs, see the module doc).

    ``on_change`` sees each change as it is found.  Returns counts of pages marked DUPLICATE
    and keepers restored to FETCHED.
    """
    counts = {"duplicate": 0, "restored": 0}
    with contextlib.ExitStack() as stack:
        w = None if dry_run else stack.enter_context(db.writer())
        r = stack.enter_context(db.reader())
        for c in find_duplicates(r, scope, canonical):
            counts["duplicate" if c.status == Status.DUPLICATE else "restored"] += 1
            if on_change is not None:
                on_change(c)
            if w is not None:
                apply_change(c, w)
    return counts


def apply_change(c: Change, w) -> None:
    """Write ``c`` through ``w`` (a writer, or a CallRecorder on a rack): the page's new
    status, remembering (or giving back) the status it had before DUPLICATE."""
    if c.status == Status.DUPLICATE:
        if c.page.status != Status.FETCHED:
            c.page.meta[DUP_STATUS] = str(int(c.page.status))
    else:
        c.page.meta.pop(DUP_STATUS, None)
    c.page.status = c.status
    w.add_page(c.page)  # add_page keeps the stored scores
