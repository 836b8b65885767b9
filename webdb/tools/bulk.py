"""Bulk load: the four tables of an empty db built straight from pages and links (docs/api.md).

``bulk_load(db, pages, links)`` commits exactly the generation that one writer batch of
``add_page_with_score(p)`` for every page, then ``add_link(l)`` for every link, would commit
(docs/semantics.md): the first call for a url wins, the last call for a link key wins, links
from an md5 no page carries and links to a url with no page are dropped, every
``target_has_outlink`` is the target page's ``num_outlinks > 0``, anchors are cut to
``anchor_max``.  Each record is checked as the writer checks it, then the records are loaded as
columns by ``webdb.tools.bulkarrow`` (the one loader: external sorts within ``memory_mb``,
docs/design.md §4.2), imported on the first call so that ``import webdb`` does not load
pyarrow.

Crash safety is the writer's: new table files are named after the new generation and count
only once ``WebDB.commit`` flips CURRENT; a kill before that leaves the empty db, and the next
writer (or ``recover``) removes what was left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from webdb.core.manifest import Manifest
from webdb.tables.records import Link, Page

__all__ = ["bulk_load"]


def bulk_load(
    db_or_path: Any,
    pages: Iterable[Page],
    links: Iterable[Link] = (),
    *,
    progress: Callable[[str], None] | None = None,
    **overrides: Any,
) -> Manifest:
    """Load ``pages`` and ``links`` into an empty db (no page, no link) and commit one new
    generation; returns its manifest.  Equal to one writer batch of ``add_page_with_score``
    for each page in order, then ``add_link`` for each link in order (module doc).  Settings
    (``memory_mb``, ``block_size``, ...) may be overridden as for ``db.writer(...)``.

    Raises BadInput for a db that holds any page (nothing is written) and for a bad page or
    link (naming it; nothing is committed).  Cost: external sorts of the pages and links
    (O(n log n)) within ``memory_mb``; pages are read once and links once.
    """
    from webdb.tools.bulkarrow import bulk_load_records

    return bulk_load_records(db_or_path, pages, links, progress, overrides)
