"""Inputs of a distributed update: what feeds each section writer's ``EditLog``.

An input is a function ``fn(log, paths, **options) -> dict`` that applies the round's data
found at ``paths`` on the writer's own host as writer calls on ``log`` (an ``EditLog``, which
has every ``Writer`` call) and returns counts to report.  The update ships it to every host as
``"module:function"`` (``input_spec``), so each host imports it itself.

Inputs also have names: ``register_input(name, "module:function")``.  One ships here:
``calls`` (``replay_calls``): JSON lines of writer calls, written with ``CallRecorder`` (tests,
tools that prepare calls elsewhere).  The benchmark workload's input is
``roundtsv:apply_round_tsv`` in bench/ (with bench/ on the path).

The crawl registers its own: ``fetchlist.register_inputs()`` adds ``segments``
(``fetchlist.update:apply_segments``), ``DEFAULT_INPUT``, what ``webdb update`` applies unless
told otherwise.  webdb never imports the crawl: the name means nothing until it is registered.

Calls of different section writers are ordered as if section 0's came first, then section
1's, and so on (docs/distributed.md, *Order of calls*).

Shares: an input function may take ``share=[j, m]`` — "of the same inputs, apply only the
j-th of m contiguous shares".  The m writers that read one host's inputs then split the
writer phase between them (it is otherwise the one serial part of an update), and because
share j holds the calls that come before share j+1's, the batch is the same as one writer
applying everything in order.  Line files split at line starts by byte offset
(``share_lines``); segments by their fetch partitions.
"""

from __future__ import annotations

import importlib
import json
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, TextIO

from webdb.core.schedule import FetchResult
from webdb.errors import BadInput
from webdb.tables.records import Link, Page

__all__ = [
    "DEFAULT_INPUT",
    "CallRecorder",
    "check_share",
    "input_spec",
    "register_input",
    "registered_inputs",
    "replay_calls",
    "resolve",
    "share_lines",
]

# The name ``webdb update`` uses by default: the crawl's segments, registered by the crawl.
DEFAULT_INPUT = "segments"

InputFn = Callable[..., dict]


# Inputs by name.  Explicit registration only (no entry points, no import side effects).
_REGISTRY: dict[str, str] = {
    "calls": "webdb.writer.inputs:replay_calls",
}


def register_input(name: str, spec: str) -> None:
    """Let ``name`` stand for the input function ``spec`` (``"module:function"``), e.g. in
    ``webdb update --input NAME``.  Registering a name again with the same spec is a no-op;
    with another spec it is an error (two packages claiming one name)."""
    if not name or ":" in name:
        raise BadInput(f"input name {name!r}: must be non-empty, without ':'")
    mod, sep, fn = spec.partition(":")
    if not (mod and sep and fn):
        raise BadInput(f"input {name!r}: {spec!r} is not MODULE:FUNCTION")
    have = _REGISTRY.setdefault(name, spec)
    if have != spec:
        raise BadInput(f"input {name!r} is already registered as {have!r}, not {spec!r}")


def registered_inputs() -> dict[str, str]:
    """Name → ``"module:function"`` of every registered input."""
    return dict(_REGISTRY)


def input_spec(name_or_spec: str) -> str:
    """``"module:function"`` of a registered input name, or ``name_or_spec`` if it is one."""
    if ":" in name_or_spec:
        return name_or_spec
    spec = _REGISTRY.get(name_or_spec)
    if spec is None:
        known = ", ".join(sorted(_REGISTRY))
        raise BadInput(f"input {name_or_spec!r} is not registered (registered: {known}; or give MODULE:FUNCTION)")
    return spec


def resolve(name_or_spec: str) -> InputFn:
    """The input function of a registered name or of ``"module:function"``; BadInput naming
    it if it is unknown or cannot be imported."""
    spec = input_spec(name_or_spec)
    mod, sep, name = spec.partition(":")
    if not sep or not mod or not name:
        raise BadInput(f"input {spec!r}: expected MODULE:FUNCTION")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except ModuleNotFoundError as e:
        raise BadInput(f"input {spec!r}: module {e.name!r} is not installed") from None
    except AttributeError:
        raise BadInput(f"input {spec!r}: {mod} has no {name}") from None
    if not callable(fn):
        raise BadInput(f"input {spec!r} is not a function")
    return fn


def check_share(share: Sequence[int] | None) -> tuple[int, int] | None:
    """``share`` as ``(j, m)`` with 0 <= j < m, or None; BadInput otherwise."""
    if share is None:
        return None
    try:
        j, m = (int(x) for x in share)
    except (TypeError, ValueError):
        raise BadInput(f"share {share!r}: expected [j, m]") from None
    if not 0 <= j < m:
        raise BadInput(f"share {share!r}: expected 0 <= j < m")
    return j, m


def share_lines(paths: Sequence[str], share: Sequence[int] | None = None) -> Iterator[tuple[str, int, bytes]]:
    """``(path, line number, line without its newline)`` of the files in order; with
    ``share=[j, m]`` only the lines of the j-th of m contiguous shares of all their bytes.

    A line belongs to the share holding its first byte, so the m shares partition the lines
    and share j's come before share j+1's.  Lines end at b"\\n" only (0x1e, 0x1f and \\r are
    data in these files).  Line numbers count from where the share starts in the file
    (``where`` formats them for errors).  Cost: one seek per file and share."""
    sh = check_share(share)
    sizes = [_regular_size(p) for p in paths]
    total = sum(sizes)
    lo, hi = (0, total) if sh is None else (total * sh[0] // sh[1], total * (sh[0] + 1) // sh[1])
    base = 0
    for path, size in zip(paths, sizes):
        a, b = max(lo - base, 0), min(hi - base, size)
        base += size
        if a >= size or b <= 0 or a >= b:
            continue
        with _open_regular(path) as f:
            pos = 0
            if a > 0:
                f.seek(a - 1)
                pos = a - 1 + len(f.readline())  # the line holding byte a-1 is the share before's
            n = 0
            while pos < b:
                line = f.readline()
                if not line:
                    break
                n += 1
                pos += len(line)
                yield path, n, line[:-1] if line.endswith(b"\n") else line


def _open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; a FIFO, device or directory is a
    BadInput naming it, found without blocking (O_NONBLOCK, then fstat): a FIFO would
    otherwise hang the update while it holds the db's writer lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"{path}: not a regular file; refusing to read it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _regular_size(path: str) -> int:
    with _open_regular(path) as f:
        return os.fstat(f.fileno()).st_size


def where(path: str, line: int, share: Sequence[int] | None) -> str:
    """``path:line`` for an error, naming the share when the count starts inside the file."""
    return f"{path}:{line}" if not share or share[0] == 0 else f"{path}: line {line} of share {share[0]}/{share[1]}"


# ---- writer calls as JSON lines ----------------------------------------------------------------


def _page(p: Page) -> dict:
    return {
        "url": p.url,
        "md5": p.md5.hex(),
        "status": int(p.status),
        "fetch_time": p.fetch_time,
        "next_fetch": p.next_fetch,
        "retries": p.retries,
        "fetch_interval": p.fetch_interval,
        "num_outlinks": p.num_outlinks,
        "score": p.score,
        "next_score": p.next_score,
        "meta": p.meta,
    }


def _link(lk: Link) -> dict:
    return {"from_id": lk.from_id.hex(), "url": lk.url, "anchor": lk.anchor, "domain_id": lk.domain_id}


def _fetch(r: FetchResult) -> dict:
    return {
        "url": r.url,
        "status": int(r.status),
        "fetch_time": r.fetch_time,
        "md5": r.md5.hex() if r.md5 is not None else None,
        "num_outlinks": r.num_outlinks,
        "meta": r.meta,
    }


def _to_page(d: dict) -> Page:
    return Page(
        d["url"],
        bytes.fromhex(d["md5"]),
        d["status"],
        d["fetch_time"],
        d["next_fetch"],
        d["retries"],
        d["fetch_interval"],
        d["num_outlinks"],
        d["score"],
        d["next_score"],
        d["meta"],
    )


def _to_link(d: dict) -> Link:
    return Link(bytes.fromhex(d["from_id"]), d["url"], d["anchor"], d["domain_id"])


def _to_fetch(d: dict) -> FetchResult:
    md5 = bytes.fromhex(d["md5"]) if d["md5"] is not None else None
    return FetchResult(d["url"], d["status"], d["fetch_time"], md5, d["num_outlinks"], d["meta"])


class CallRecorder:
    """Has the writer's calls; records each as one JSON line (``replay_calls`` applies them).

    ``calls`` keeps the lines; ``write(f, lo, hi)`` writes a slice, so one recorded batch can
    be split across section writers (their order is kept: see the module doc).
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _rec(self, call: str, **args: Any) -> None:
        self.calls.append(json.dumps({"call": call, **args}, separators=(",", ":")))

    def add_page(self, page: Page) -> None:
        self._rec("add_page", page=_page(page))

    def add_page_with_score(self, page: Page) -> None:
        self._rec("add_page_with_score", page=_page(page))

    def add_page_if_not_present(self, page: Page, link: Link | None = None) -> None:
        self._rec("add_page_if_not_present", page=_page(page), link=_link(link) if link is not None else None)

    def delete_page(self, url: str) -> None:
        self._rec("delete_page", url=url)

    def apply_fetch(self, result: FetchResult) -> None:
        self._rec("apply_fetch", result=_fetch(result))

    def apply_lastmod(self, url: str, lastmod: int, due: int) -> None:
        self._rec("apply_lastmod", url=url, lastmod=lastmod, due=due)

    def mark_generated(self, url: str, mark: str) -> None:
        self._rec("mark_generated", url=url, mark=mark)

    def add_link(self, link: Link) -> None:
        self._rec("add_link", link=_link(link))

    def delete_links(self, md5: bytes) -> None:
        self._rec("delete_links", md5=md5.hex())

    def add_outlinks(
        self,
        from_md5: bytes,
        outlinks: list[tuple[str, str]],
        *,
        domain_id: int = 0,
        next_fetch: int = 0,
        score: float = 1.0,
        fetch_interval: int | None = None,
    ) -> None:
        self._rec(
            "add_outlinks",
            md5=from_md5.hex(),
            outlinks=[list(x) for x in outlinks],
            domain_id=domain_id,
            next_fetch=next_fetch,
            score=score,
            fetch_interval=fetch_interval,
        )

    def write(self, f: TextIO, lo: int = 0, hi: int | None = None) -> None:
        for line in self.calls[lo:hi]:
            f.write(line + "\n")


def apply_call(log: Any, d: dict) -> None:
    """Apply one recorded call to a writer or EditLog."""
    c = d["call"]
    if c in ("add_page", "add_page_with_score"):
        getattr(log, c)(_to_page(d["page"]))
    elif c == "add_page_if_not_present":
        log.add_page_if_not_present(_to_page(d["page"]), _to_link(d["link"]) if d["link"] else None)
    elif c == "delete_page":
        log.delete_page(d["url"])
    elif c == "apply_fetch":
        log.apply_fetch(_to_fetch(d["result"]))
    elif c == "apply_lastmod":
        log.apply_lastmod(d["url"], d["lastmod"], d["due"])
    elif c == "mark_generated":
        log.mark_generated(d["url"], d["mark"])
    elif c == "add_link":
        log.add_link(_to_link(d["link"]))
    elif c == "delete_links":
        log.delete_links(bytes.fromhex(d["md5"]))
    elif c == "add_outlinks":
        log.add_outlinks(
            bytes.fromhex(d["md5"]),
            [tuple(x) for x in d["outlinks"]],
            domain_id=d["domain_id"],
            next_fetch=d["next_fetch"],
            score=d["score"],
            fetch_interval=d["fetch_interval"],
        )
    else:
        raise BadInput(f"unknown writer call {c!r}")


def replay_calls(log: Any, paths: list[str], share: Sequence[int] | None = None, **_options: Any) -> dict:
    """Apply files of JSON-lines writer calls (``CallRecorder``), in order (``share``: see the
    module doc)."""
    n = 0
    for path, i, line in share_lines(paths, share):
        try:
            d = json.loads(line)
        except (ValueError, RecursionError):
            raise BadInput(f"{where(path, i, share)}: not a JSON writer call") from None
        apply_call(log, d)
        n += 1
    return {"calls": n}
