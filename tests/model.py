"""A small in-memory reference model of the batch semantics of docs/semantics.md.

The property tests run the same writer calls against this model and against webdb and compare
every table.  The model is written straight from the contract, declaratively: ``commit()``
computes the new pages and links from the old ones and the batch's list of calls, with no
cascade, no sorting of edits and no reference counting.  It is slow (every commit is O(db)) and
meant to stay obviously correct.  It implements the fetch schedule itself rather than import
``webdb.core.schedule.apply_fetch``: the point is an independent second implementation.

Choices where the contract leaves room (each is the reading closest to the original WebDB):

* The link of ``add_page_if_not_present(page, link)`` must point to ``page`` (it is the inlink
  that made the page known, as in the original's update tool); another url is ``BadInput``.
  It is subject to ``anchor_max`` like any ``add_link``.
* A fetch result for a url with no page (and no page call winning) starts from
  ``Page(url, fetch_interval=default_interval)``.
* Adaptive intervals are whole seconds: ``int(iv * (1 + inc_rate))`` / ``int(iv * (1 -
  dec_rate))``, then clamped to ``[min_interval, max_interval]``.
* ``RETRY`` leaves ``fetch_time`` alone; ``GONE`` leaves ``retries`` alone.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from webdb.core.schedule import FetchResult
from webdb.core.settings import DEFAULTS, NAMES, SCHEDULE_KEYS
from webdb.errors import BadInput
from webdb.tables.records import NEVER, Link, Page, Status

__all__ = ["Model", "PRIORITY"]

# Lower value wins.  docs/semantics.md, *Pages* rule 1.
PRIORITY = {"add_page": 0, "add_page_with_score": 1, "add_page_if_not_present": 2, "delete_page": 3}

FETCH_STATUSES = frozenset(
    {
        Status.FETCHED,
        Status.NOT_MODIFIED,
        Status.RETRY,
        Status.GONE,
        Status.REDIRECT_TEMP,
        Status.REDIRECT_PERM,
    }
)

_MODEL_SETTINGS = ("anchor_max", *SCHEDULE_KEYS)


def url_key(url: str) -> bytes:
    return url.encode("utf-8")


def pages_by_md5_key(p: Page) -> bytes:
    return p.md5 + url_key(p.url)


def links_by_md5_key(link: Link) -> bytes:
    return link.from_id + url_key(link.url)


def links_by_url_key(link: Link) -> bytes:
    return url_key(link.url) + b"\x00" + link.from_id


class Model:
    """The whole database as two dicts, plus the calls of the open batch.

    ``pages``: url -> Page; ``links``: (from_id, url) -> Link.  Writer calls only record
    themselves; ``commit()`` applies the batch, ``abort()`` drops it.
    """

    def __init__(self, **settings: object) -> None:
        unknown = set(settings) - set(NAMES)
        if unknown:
            raise BadInput(f"unknown settings {sorted(unknown)}")
        s = {name: settings.get(name, getattr(DEFAULTS, name)) for name in _MODEL_SETTINGS}
        self.anchor_max: int = s["anchor_max"]
        self.default_interval: int = s["default_interval"]
        self.retry_delay: int = s["retry_delay"]
        self.max_retries: int = s["max_retries"]
        self.adaptive: bool = s["adaptive"]
        self.min_interval: int = s["min_interval"]
        self.max_interval: int = s["max_interval"]
        self.inc_rate: float = s["inc_rate"]
        self.dec_rate: float = s["dec_rate"]
        self._pages: dict[str, Page] = {}
        self._links: dict[tuple[bytes, str], Link] = {}
        self._calls: list[tuple[str, object, object]] = []

    # ---- writer calls (recorded; copies, so the caller may reuse its objects) -----------------

    def add_page(self, page: Page) -> None:
        self._calls.append(("add_page", copy.deepcopy(page), None))

    def add_page_with_score(self, page: Page) -> None:
        self._calls.append(("add_page_with_score", copy.deepcopy(page), None))

    def add_page_if_not_present(self, page: Page, link: Link | None = None) -> None:
        if link is not None and link.url != page.url:
            raise BadInput(f"link to {link.url!r} given with page {page.url!r}: must be the same url")
        self._calls.append(("add_page_if_not_present", copy.deepcopy(page), copy.deepcopy(link)))

    def delete_page(self, url: str) -> None:
        self._calls.append(("delete_page", url, None))

    def apply_fetch(self, result: FetchResult) -> None:
        if result.status not in FETCH_STATUSES:
            raise BadInput(f"fetch result for {result.url!r} has status {result.status!r}")
        if result.status == Status.FETCHED and (result.md5 is None or len(result.md5) != 16):
            raise BadInput(f"fetch result for {result.url!r} has status FETCHED but no 16-byte md5")
        self._calls.append(("apply_fetch", copy.deepcopy(result), None))

    def apply_lastmod(self, url: str, lastmod: int, due: int) -> None:
        self._calls.append(("apply_lastmod", url, (lastmod, due)))

    def add_link(self, link: Link) -> None:
        self._calls.append(("add_link", copy.deepcopy(link), None))

    def delete_links(self, md5: bytes) -> None:
        self._calls.append(("delete_links", md5, None))

    def abort(self) -> None:
        self._calls = []

    def commit(self) -> None:
        calls, self._calls = self._calls, []
        new_pages, if_new_links = self._new_pages(calls)
        self._links = self._new_links(calls, if_new_links, new_pages)
        self._pages = new_pages

    # ---- the batch, declaratively ---------------------------------------------------------------

    @staticmethod
    def _call_url(op: str, arg: object) -> str | None:
        if op in PRIORITY and op != "delete_page":
            return arg.url
        if op == "delete_page":
            return arg
        if op == "apply_fetch":
            return arg.url
        if op == "apply_lastmod":
            return arg
        return None

    def _new_pages(self, calls: list) -> tuple[dict[str, Page], list[Link]]:
        """New url -> page map, and the links of the winning add_page_if_not_present calls."""
        new = dict(self._pages)
        if_new_links: list[tuple[int, Link]] = []
        by_url: dict[str, list[tuple[int, str, object, object]]] = {}
        for i, (op, a, b) in enumerate(calls):
            url = self._call_url(op, a)
            if url is not None:
                by_url.setdefault(url, []).append((i, op, a, b))
        for url, mine in by_url.items():
            old = self._pages.get(url)
            edits = [c for c in mine if c[1] in PRIORITY]
            if edits:
                i, op, arg, link = min(edits, key=lambda c: (PRIORITY[c[1]], c[0]))
                if op == "add_page":
                    p = copy.deepcopy(arg)
                    if old is not None:
                        p.score, p.next_score = old.score, old.next_score
                elif op == "add_page_with_score":
                    p = copy.deepcopy(arg)
                elif op == "add_page_if_not_present":
                    if old is not None:
                        p = old
                    else:
                        p = copy.deepcopy(arg)
                        if link is not None:
                            if_new_links.append((i, link))
                else:
                    p = None
            else:
                p = old
            for _, op, result, _ in mine:
                if op == "apply_fetch":
                    base = p if p is not None else Page(url, fetch_interval=self.default_interval)
                    p = self.schedule(base, result)
            for _, op, _, hint in mine:  # lastmod hints: after every fetch of the url
                if op == "apply_lastmod" and p is not None:
                    lastmod, due = hint
                    if p.status in (Status.FETCHED, Status.NOT_MODIFIED) and p.fetch_time < lastmod:
                        if p.next_fetch > due:
                            p = copy.deepcopy(p)
                            p.next_fetch = due
            if p is None:
                new.pop(url, None)
            else:
                new[url] = p
        return new, [link for _, link in sorted(if_new_links, key=lambda x: x[0])]

    def _new_links(self, calls: list, if_new_links: list[Link], new_pages: dict[str, Page]) -> dict:
        dropped = {a for op, a, _ in calls if op == "delete_links"}
        links = {k: v for k, v in self._links.items() if k[0] not in dropped}
        added = [a for op, a, _ in calls if op == "add_link"] + if_new_links
        for link in added:
            link = copy.deepcopy(link)
            link.anchor = link.anchor[: self.anchor_max]
            links[(link.from_id, link.url)] = link
        live_md5s = {p.md5 for p in new_pages.values()}
        out = {}
        for key, link in links.items():
            target = new_pages.get(link.url)
            if link.from_id in live_md5s and target is not None:
                link = copy.deepcopy(link)
                link.target_has_outlink = target.num_outlinks > 0
                out[key] = link
        return out

    def _grow(self, iv: int) -> int:
        return min(self.max_interval, max(self.min_interval, int(iv * (1 + self.inc_rate))))

    def _shrink(self, iv: int) -> int:
        return min(self.max_interval, max(self.min_interval, int(iv * (1 - self.dec_rate))))

    def schedule(self, page: Page, r: FetchResult) -> Page:
        """The page after fetch result ``r`` (docs/semantics.md, *Fetch results*); a new object."""
        p = copy.deepcopy(page)
        t = r.fetch_time
        if r.status == Status.FETCHED:
            if self.adaptive:
                changed = r.md5 != p.md5
                p.fetch_interval = self._shrink(p.fetch_interval) if changed else self._grow(p.fetch_interval)
            p.md5 = r.md5
            p.status = Status.FETCHED
            p.fetch_time = t
            p.retries = 0
            p.num_outlinks = r.num_outlinks
            p.next_fetch = t + p.fetch_interval
        elif r.status == Status.NOT_MODIFIED:
            if self.adaptive:
                p.fetch_interval = self._grow(p.fetch_interval)
            p.status = Status.NOT_MODIFIED
            p.fetch_time = t
            p.retries = 0
            p.next_fetch = t + p.fetch_interval
        elif r.status == Status.RETRY:
            p.retries += 1
            if p.retries > self.max_retries:
                p.status = Status.GONE
                p.next_fetch = NEVER
            else:
                p.status = Status.RETRY
                p.next_fetch = t + self.retry_delay
        elif r.status == Status.GONE:
            p.status = Status.GONE
            p.fetch_time = t
            p.next_fetch = NEVER
        else:  # REDIRECT_TEMP / REDIRECT_PERM
            p.status = r.status
            p.fetch_time = t
            p.retries = 0
            p.next_fetch = t + p.fetch_interval
        if r.meta:
            p.meta = {**p.meta, **r.meta}
        return p

    # ---- read side (committed state only; copies, in encoded-key order) -------------------------

    @property
    def num_pages(self) -> int:
        return len(self._pages)

    @property
    def num_links(self) -> int:
        return len(self._links)

    def get_page(self, url: str) -> Page | None:
        p = self._pages.get(url)
        return copy.deepcopy(p)

    def pages(self) -> list[Page]:
        return _sorted_copies(self._pages.values(), lambda p: url_key(p.url))

    def pages_by_md5(self) -> list[Page]:
        return _sorted_copies(self._pages.values(), pages_by_md5_key)

    def links(self) -> list[Link]:
        return _sorted_copies(self._links.values(), links_by_url_key)

    def links_by_md5(self) -> list[Link]:
        return _sorted_copies(self._links.values(), links_by_md5_key)

    def get_pages(self, md5: bytes) -> list[Page]:
        return _sorted_copies([p for p in self._pages.values() if p.md5 == md5], pages_by_md5_key)

    def inlinks(self, url: str) -> list[Link]:
        return _sorted_copies([x for x in self._links.values() if x.url == url], links_by_url_key)

    def outlinks(self, md5: bytes) -> list[Link]:
        return _sorted_copies([x for x in self._links.values() if x.from_id == md5], links_by_md5_key)


def _sorted_copies(items: Iterable, key) -> list:
    return [copy.deepcopy(x) for x in sorted(items, key=key)]


def assert_reader_matches(r, m: Model, urls: Iterable[str] = (), md5s: Iterable[bytes] = ()) -> None:
    """A webdb reader ``r`` shows exactly the model's committed state and passes ``r.check()``.

    Compares the four tables in full, the counts, and the point lookups of ``urls`` and ``md5s``
    plus every url and md5 the model holds.
    """
    assert list(r.pages()) == m.pages()
    assert list(r.pages_by_md5()) == m.pages_by_md5()
    assert list(r.links()) == m.links()
    assert list(r.links_by_md5()) == m.links_by_md5()
    assert (r.num_pages, r.num_links) == (m.num_pages, m.num_links)
    all_urls = set(urls) | {p.url for p in m.pages()} | {link.url for link in m.links()}
    all_md5s = set(md5s) | {p.md5 for p in m.pages()}
    for url in sorted(all_urls):
        assert r.get_page(url) == m.get_page(url), url
        assert list(r.inlinks(url)) == m.inlinks(url), url
    for md5 in sorted(all_md5s):
        assert list(r.get_pages(md5)) == m.get_pages(md5), md5
        assert list(r.outlinks(md5)) == m.outlinks(md5), md5
    r.check()
