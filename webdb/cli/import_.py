"""``webdb import DB --pages FILE [--links FILE]``: load an empty db from dumps, bypassing the
edit cascade (``webdb.bulk_load``).

The files have the shapes ``webdb read --dump pages`` and ``--dump links`` write: TSV with its
``#col...`` header line and escaped cells (``--format tsv``, the default) or one JSON object a
line (``--format jsonl``).  The db must hold no page.  The result equals one writer batch of
``add_page_with_score`` for every page line, then ``add_link`` for every link line, in file
order: the first line for a url wins, the last for a link (from_id, url) wins, links from an
md5 no page carries or to a url with no page are dropped, ``target_has_outlink`` is recomputed.
A bad line stops the import with ``FILE:LINE`` and exit status 2; nothing is committed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import webdb
from webdb.cli.common import add_json, add_lock_wait, emit
from webdb.cli.read import LINK_COLS, PAGE_COLS, tsv_unescape
from webdb.errors import BadInput, WebDBError
from webdb.tables.records import Link, Page, Status, validate_link, validate_page, validate_url

_STATUS = {s.name.lower(): s for s in Status}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "import",
        help="load an empty db from page and link dumps (bulk load)",
        description=__doc__,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    p.add_argument("--pages", required=True, metavar="FILE", help="pages, as `webdb read --dump pages` writes")
    p.add_argument("--links", metavar="FILE", help="links, as `webdb read --dump links` writes")
    p.add_argument("--format", choices=("tsv", "jsonl"), default="tsv", help="file format (default tsv)")
    p.add_argument("--memory-mb", type=int, help="sort budget (default: the db's memory_mb setting)")
    add_lock_wait(p)
    add_json(p)
    p.set_defaults(run=run)


def _int(d: dict, c: str) -> int:
    v = d[c]
    if isinstance(v, str):
        return int(v)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"{c} must be a whole number, not {v!r:.60}")
    return v


def _float(d: dict, c: str) -> float:
    v = d[c]
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{c} must be a number, not {v!r:.60}")
    return float(v)


def _md5(d: dict, c: str) -> bytes:
    try:
        b = bytes.fromhex(d[c])
    except ValueError:
        b = b""
    if len(b) != 16:
        raise ValueError(f"{c} must be 32 hex digits, not {d[c]!r:.60}")
    return b


def to_page(d: dict) -> Page:
    meta = d["meta"]
    if isinstance(meta, str):
        meta = json.loads(meta) if meta else {}
    st = d["status"]
    if st not in _STATUS:
        raise ValueError(f"status must be one of {', '.join(_STATUS)}, not {st!r:.60}")
    p = Page(
        d["url"],
        _md5(d, "md5"),
        _STATUS[st],
        _int(d, "fetch_time"),
        _int(d, "next_fetch"),
        _int(d, "retries"),
        _int(d, "fetch_interval"),
        _int(d, "num_outlinks"),
        _float(d, "score"),
        _float(d, "next_score"),
        meta,
    )
    validate_url(p.url)
    validate_page(p)
    return p


def to_link(d: dict) -> Link:
    lk = Link(_md5(d, "from_id"), d["url"], d["anchor"], _int(d, "domain_id"))
    validate_url(lk.url)
    validate_link(lk)
    return lk


def records(path: str, fmt: str, cols: tuple[str, ...], make: Callable[[dict], object]) -> Iterator:
    """The records of a dump file; any bad line raises BadInput naming ``path:line``."""
    n = 0
    try:
        with open(path, encoding="utf-8", newline="\n") as f:
            if fmt == "tsv":
                n = 1
                header = f.readline().rstrip("\n")
                if header != "#" + "\t".join(cols):
                    raise ValueError(
                        f"the header must be #{'<TAB>'.join(cols)} (webdb read --dump), not {header!r:.100}"
                    )
            for line in f:
                n += 1
                line = line.rstrip("\n")
                if fmt == "tsv":
                    cells = line.split("\t")
                    if len(cells) != len(cols):
                        raise ValueError(f"{len(cells)} cells, expected {len(cols)}")
                    d = dict(zip(cols, map(tsv_unescape, cells)))
                else:
                    if not line.strip():
                        continue
                    d = json.loads(line)
                    if not isinstance(d, dict) or not all(c in d for c in cols if c != "target_has_outlink"):
                        raise ValueError(f"expected an object with {', '.join(cols)}")
                yield make(d)
    except (ValueError, KeyError, TypeError, WebDBError) as e:
        # UnicodeDecodeError and json's errors are ValueErrors too.
        raise BadInput(f"{path}:{n}: {e}") from None


def run(args) -> int:
    from webdb.lockwait import wait_for_lock

    db = webdb.open(args.db)
    for p in (args.pages, args.links):
        if p is not None:
            open(p, "rb").close()  # a missing file fails before the lock is taken
    over = {} if args.memory_mb is None else {"memory_mb": args.memory_mb}

    def load() -> dict:
        pages = records(args.pages, args.format, PAGE_COLS, to_page)
        links = records(args.links, args.format, LINK_COLS, to_link) if args.links else iter(())
        return webdb.bulk_load(db, pages, links, **over)

    m = wait_for_lock(load, args.lock_wait, "import")
    pages = sum(t.get("pages_by_url", {}).get("records", 0) for t in m["tables"])
    links = sum(t.get("links_by_md5", {}).get("records", 0) for t in m["tables"])
    summary = {
        "generation": m["generation"],
        "pages": pages,
        "links": links,
        "page_lines": m["edits"]["pages"],
        "link_lines": m["edits"]["links"],
        "seconds": round(m["seconds"], 3),
    }
    emit(
        args,
        summary,
        f"imported {args.db}: {pages} pages, {links} links (from {summary['page_lines']} page and "
        f"{summary['link_lines']} link lines) in {summary['seconds']} s (generation {m['generation']})",
    )
    return 0
