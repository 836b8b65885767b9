"""``webdb import DB --pages FILE [--links FILE]``: load an empty db from dumps, bypassing the
edit cascade (``webdb.bulk_load``).

The files have the shapes ``webdb read --dump pages`` and ``--dump links`` write: TSV with its
``#col...`` header line and escaped cells (``--format tsv``, the default) or one JSON object a
line (``--format jsonl``).  The db must hold no page.  The result equals one writer batch of
``add_page_with_score`` for every page line, then ``add_link`` for every link line, in file
order: the first line for a url wins, the last for a link (from_id, url) wins, links from an
md5 no page carries or to a url with no page are dropped, ``target_has_outlink`` is recomputed.
A bad line stops the import with ``FILE:LINE`` and exit status 2; nothing is committed.

TSV dumps are parsed into Arrow columns (``webdb.tools.bulkarrow``); a file that the column
checks do not vouch for (an escaped cell, a line the columnar parser refuses, ...) and JSON
lines are read record by record instead, each record checked (naming any bad line) and then
loaded by the same loader.  Progress goes to stderr (one line a phase) unless ``--quiet`` or
``--json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator

import webdb
from webdb.cli.common import add_json, add_lock_wait, add_quiet, emit
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
    add_quiet(p)
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


def arrow_pages(path: str):
    """A ``--dump pages`` TSV as bulkarrow.PAGE_COLUMNS; NotColumnar for what the columns
    cannot take as is (then ``records`` reads the file and names any bad line)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from webdb.tools.bulkarrow import NotColumnar, md5_array, tsv, unhex16

    types = {c: pa.int64() for c in PAGE_COLS}
    types.update(url=pa.string(), md5=pa.string(), status=pa.string(), meta=pa.string())
    types.update(score=pa.float64(), next_score=pa.float64())
    _header(path, PAGE_COLS)
    t = tsv(path, list(PAGE_COLS), types, skip=1)
    _no_escapes(t, ("url", "meta"))
    st = pc.index_in(t["status"], value_set=pa.array(list(_STATUS)))
    if st.null_count:
        raise NotColumnar(f"{path}: a status other than {', '.join(_STATUS)}")
    st = pa.array([int(x) for x in _STATUS.values()], pa.int64()).take(st)
    meta = t["meta"].combine_chunks()
    enc = np.full(len(meta), b"", object)
    if len(meta) and pc.max(pc.binary_length(meta)).as_py():
        for i in np.flatnonzero(_np(pc.binary_length(meta))):
            enc[i] = _meta_bytes(meta[i].as_py())
    cols = {c: t[c] for c in PAGE_COLS if c not in ("md5", "status", "meta")}
    cols.update(md5=md5_array(unhex16(t["md5"])), status=st, meta=pa.array(enc, pa.binary()))
    return pa.table(cols)


def arrow_links(path: str) -> Iterator:
    """A ``--dump links`` TSV as bulkarrow.LINK_COLUMNS, in chunks (see ``arrow_pages``)."""
    import pyarrow as pa

    from webdb.tools.bulkarrow import md5_array, tsv, unhex16

    types = dict.fromkeys(LINK_COLS, pa.string())
    types["domain_id"] = pa.int64()
    _header(path, LINK_COLS)
    for t in tsv(path, list(LINK_COLS), types, skip=1, stream=True):
        _no_escapes(t, ("url", "anchor"))
        yield pa.table(
            {
                "from_id": md5_array(unhex16(t["from_id"])),
                "url": t["url"],
                "anchor": t["anchor"],
                "domain_id": t["domain_id"],
            }
        )


def _np(a):
    return a.to_numpy(zero_copy_only=False)


def _header(path: str, cols: tuple[str, ...]) -> None:
    from webdb.tools.bulkarrow import NotColumnar

    with open(path, "rb") as f:
        if f.readline().rstrip(b"\n") != ("#" + "\t".join(cols)).encode():
            raise NotColumnar(f"{path}: not the header of a dump")


def _no_escapes(t, cols: tuple[str, ...]) -> None:
    """Escaped cells (a backslash: tsv_escape) are for ``records``, which unescapes them."""
    import pyarrow.compute as pc

    from webdb.tools.bulkarrow import NotColumnar

    for c in cols:
        if t.num_rows and pc.any(pc.match_substring(t[c], "\\")).as_py():
            raise NotColumnar(f"an escaped {c}")


def _meta_bytes(cell: str) -> bytes:
    """A meta cell as Page.encode_value writes it; NotColumnar for anything else."""
    from webdb.tools.bulkarrow import NotColumnar

    try:
        meta = json.loads(cell)
    except ValueError:
        raise NotColumnar("a meta cell that is not JSON") from None
    if not isinstance(meta, dict) or not all(type(k) is str and type(v) is str for k, v in meta.items()):
        raise NotColumnar("a meta cell that is not a map of text to text")
    try:
        return json.dumps(meta, separators=(",", ":"), sort_keys=True).encode("utf-8") if meta else b""
    except UnicodeEncodeError:
        raise NotColumnar("a lone surrogate in a meta cell") from None


def run(args) -> int:
    from webdb.core.lockwait import wait_for_lock

    db = webdb.open(args.db)
    for p in (args.pages, args.links):
        if p is not None:
            open(p, "rb").close()  # a missing file fails before the lock is taken
    over = {} if args.memory_mb is None else {"memory_mb": args.memory_mb}
    quiet = args.quiet or args.json

    def say(msg: str) -> None:
        if not quiet:
            print(f"webdb import: {msg}", file=sys.stderr, flush=True)

    def load() -> dict:
        if args.format == "tsv":
            from webdb.tools.bulkarrow import NotColumnar, bulk_load_arrow

            try:
                links = arrow_links(args.links) if args.links else iter(())
                pages = (arrow_pages(p) for p in [args.pages])  # a generator: the load drops the table
                return bulk_load_arrow(db, pages, links, progress=say, **over)
            except NotColumnar as e:
                say(f"{e}: loading record by record")
        pages = records(args.pages, args.format, PAGE_COLS, to_page)
        links = records(args.links, args.format, LINK_COLS, to_link) if args.links else iter(())
        return webdb.bulk_load(db, pages, links, progress=say, **over)

    m = wait_for_lock(load, args.lock_wait, "import")
    pages = sum(t.get("pages_by_url", {}).get("records", 0) for t in m.tables)
    links = sum(t.get("links_by_md5", {}).get("records", 0) for t in m.tables)
    summary = {
        "generation": m.generation,
        "pages": pages,
        "links": links,
        "page_lines": m.edits["pages"],
        "link_lines": m.edits["links"],
        "seconds": round(m.seconds, 3),
    }
    emit(
        args,
        summary,
        f"imported {args.db}: {pages} pages, {links} links (from {summary['page_lines']} page and "
        f"{summary['link_lines']} link lines) in {summary['seconds']} s (generation {m.generation})",
    )
    return 0
