"""``webdb read DB``: stats, lookups and dumps of a database.

webdb read DB --stats [--quick]       counts by status (in total and per section), links, bytes;
                                      score, next score, fetch interval min/avg/max, retry
                                      histogram, top hosts (one read of PagesByURL; --quick: none)
                                      "fetched" = pages whose status is fetched
webdb read DB --page URL              one page
webdb read DB --pages-md5 HEX         every page with that content md5
webdb read DB --inlinks URL           links to URL (streamed)
webdb read DB --outlinks HEX          links from the content HEX
webdb read DB --dump TABLE [--format tsv|jsonl]

TSV: a header line ``#col1<TAB>col2...``, then one line per record; in a cell, backslash, tab,
newline and CR are written \\\\ \\t \\n \\r, every other control character (C0, DEL, C1),
U+2028, U+2029 and lone surrogates \\xHH or \\uHHHH; meta is JSON (empty when there is none).
``webdb.cli.read.tsv_unescape`` reads a cell back exactly.
"""

from __future__ import annotations

import json
import re
import sys

from webdb.cli.common import add_db_location, add_json, emit, open_db
from webdb.errors import BadInput
from webdb.tables.records import PAGE_FIELDS, Link, Page, Status
from webdb.tools.stats import stats

TABLES = ("pages", "pages-by-md5", "links", "links-by-md5")
PAGE_COLS = PAGE_FIELDS
LINK_COLS = ("url", "from_id", "anchor", "domain_id", "target_has_outlink")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "read",
        help="stats, lookups and dumps",
        description=__doc__,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("db")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--stats", action="store_true")
    g.add_argument("--page", metavar="URL")
    g.add_argument("--pages-md5", metavar="HEX")
    g.add_argument("--inlinks", metavar="URL")
    g.add_argument("--outlinks", metavar="HEX")
    g.add_argument("--dump", choices=TABLES)
    p.add_argument("--format", choices=("tsv", "jsonl"), default="tsv", help="dump format (default tsv)")
    p.add_argument("--top-hosts", type=int, default=10, help="hosts listed by --stats (default 10; 0: none)")
    p.add_argument(
        "--quick", action="store_true", help="--stats from the manifests only: no score, interval, retry figures"
    )
    add_db_location(p)
    add_json(p)
    p.set_defaults(run=run)


def page_dict(p: Page) -> dict:
    d = {c: getattr(p, c) for c in PAGE_COLS}
    d["md5"] = p.md5.hex()
    d["status"] = Status(p.status).name.lower()
    return d


def link_dict(lk: Link) -> dict:
    d = {c: getattr(lk, c) for c in LINK_COLS}
    d["from_id"] = lk.from_id.hex()
    return d


def _md5(hexs: str) -> bytes:
    try:
        b = bytes.fromhex(hexs)
    except ValueError:
        b = b""
    if len(b) != 16:
        raise BadInput(f"{hexs!r} is not an md5 (32 hex digits)")
    return b


# TSV cells escape backslash, tab, newline, CR as \\ \t \n \r, every other control character
# (C0, DEL, C1), U+2028/U+2029 and lone surrogates as \xHH or \uHHHH: a cell never holds a
# character that splits a line or a field, and ``tsv_unescape`` gives the value back exactly.
_TSV_SPECIAL = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_TSV_SHORT = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_TSV_ESCAPE = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|[\\tnr])")


def tsv_escape(s: str) -> str:
    """One TSV cell: ``s`` with the characters above escaped."""
    return _TSV_SPECIAL.sub(lambda m: _TSV_SHORT.get(m[0]) or _hex(m[0]), s)


def _hex(c: str) -> str:
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def tsv_unescape(cell: str) -> str:
    """The value of a TSV cell written by ``tsv_escape`` (the inverse)."""
    short = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r"}
    return _TSV_ESCAPE.sub(lambda m: short.get(m[0]) or chr(int(m[0][2:], 16)), cell)


def _tsv(d: dict, cols: tuple[str, ...]) -> str:
    def cell(v) -> str:
        if isinstance(v, dict):
            v = json.dumps(v, sort_keys=True, ensure_ascii=False) if v else ""
        return tsv_escape(str(v))

    return "\t".join(cell(d[c]) for c in cols)


def _rows(args, rows, cols) -> None:
    out = sys.stdout
    if args.json or args.format == "jsonl":
        for d in rows:
            out.write(json.dumps(d, ensure_ascii=False) + "\n")
    else:
        out.write("#" + "\t".join(cols) + "\n")
        for d in rows:
            out.write(_tsv(d, cols) + "\n")


def _fmt(d: dict, unit: str = "", scale: float = 1.0) -> str:
    if d["min"] is None:
        return "-"
    return f"min {d['min'] / scale:.4g}{unit}, avg {d['avg'] / scale:.4g}{unit}, max {d['max'] / scale:.4g}{unit}"


def stats_text(s: dict) -> str:
    """The --stats report for people (the JSON has the same numbers)."""
    lines = [
        f"generation {s['generation']}, {s['sections']} section(s), {s['bytes']:,} bytes",
        f"pages {s['pages']:,} (fetched {s['fetched']:,}, unfetched {s['unfetched']:,}, "
        f"other statuses {s['pages'] - s['fetched'] - s['unfetched']:,})",
        f"links {s['links']:,}",
        "status " + (", ".join(f"{k} {v:,}" for k, v in s["status"].items()) or "-"),
    ]
    for x in s["by_section"]:
        per = ", ".join(f"{k} {v:,}" for k, v in x["status"].items()) or "-"
        runs = "".join(f", {t} {n} delta run{'s' if n > 1 else ''}" for t, n in x.get("runs", {}).items())
        lines.append(
            f"  section {x['section']}: {x['pages']:,} pages, {x['links']:,} links, {x['bytes']:,} bytes{runs}; {per}"
        )
    if "score" in s:
        lines.append(f"score {_fmt(s['score'])}")
        lines.append(f"next score {_fmt(s['next_score'])}")
        lines.append(f"fetch interval {_fmt(s['fetch_interval'], ' d', 86400.0)}")
        lines.append("retries " + (", ".join(f"{n}: {c:,}" for n, c in s["retries"].items()) or "-"))
    if "top_hosts" in s:
        lines.append("top hosts: " + ", ".join(f"{h} {n:,}" for h, n in s["top_hosts"]))
    return "\n".join(lines)


def run(args) -> int:
    db = open_db(args)
    with db.reader() as r:
        if args.stats:
            s = stats(r, args.top_hosts, progress=not args.json, scan=not args.quick)
            emit(args, s, stats_text(s))
        elif args.page:
            p = r.get_page(args.page)
            if p is None:
                emit(args, None, f"not found: {args.page}")
                return 1
            d = page_dict(p)
            emit(args, d, "\n".join(f"{k}\t{v}" for k, v in d.items()))
        elif args.pages_md5:
            _rows(args, (page_dict(p) for p in r.get_pages(_md5(args.pages_md5))), PAGE_COLS)
        elif args.inlinks:
            _rows(args, (link_dict(lk) for lk in r.inlinks(args.inlinks)), LINK_COLS)
        elif args.outlinks:
            _rows(args, (link_dict(lk) for lk in r.outlinks(_md5(args.outlinks))), LINK_COLS)
        else:
            it = {"pages": r.pages, "pages-by-md5": r.pages_by_md5, "links": r.links, "links-by-md5": r.links_by_md5}[
                args.dump
            ]()
            if args.dump.startswith("pages"):
                _rows(args, (page_dict(p) for p in it), PAGE_COLS)
            else:
                _rows(args, (link_dict(lk) for lk in it), LINK_COLS)
    return 0
