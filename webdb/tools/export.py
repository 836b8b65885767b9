"""Export for indexing: one record per fetched page with its inlink anchors (docs/indexing.md).

``export_pages(reader)`` walks the sections in order and, inside each section, merges
PagesByURL with LinksByURL in one ordered pass: both tables are keyed by URL (LinksByURL by
``url 0x00 from_id``) and split at the same breakpoints, so the inlinks of a page are the run
of LinksByURL records that follows the previous page's.  Records therefore come out in global
URL order, each page once.

Cost: one sequential read of both URL-keyed tables (every block decoded once, no lookups);
memory: one block of each table plus the distinct (linking host, anchor) pairs of the current
page — independent of the number of pages.

Anchors are deduplicated per linking host, as Nutch's ``Inlinks.getAnchors`` does: a host that
links to a page many times with the same text counts once for that text.  Each anchor carries
``hosts``, the number of distinct linking hosts (``Link.domain_id``) that used it; the list is
ordered by ``hosts`` (most first), then text, and cut to ``max_anchors``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import urlsplit

from webdb.core.reader import Reader
from webdb.errors import BadInput
from webdb.tables.pagecodec import GENERATE_MARK
from webdb.tables.records import Page, Status

__all__ = ["export_pages", "DEFAULT_STATUSES", "DEFAULT_MAX_ANCHORS", "parse_statuses", "parse_time", "host_filter"]

# Pages whose content the db holds: fetched, or fetched before and not modified since.
DEFAULT_STATUSES = frozenset({Status.FETCHED, Status.NOT_MODIFIED})
DEFAULT_MAX_ANCHORS = 100
# Layout of an encoded LinksByURL value (``Link.encode_value``, docs/format.md): domain_id
# (8 bytes), flags (1), anchor.  Sliced here rather than decoded into a Link per record: the
# link table is ten times the page table and Link.decode would double the export's time.
_LINK_DOMAIN = slice(0, 8)
_LINK_ANCHOR = 9


def parse_statuses(spec: str) -> frozenset[int]:
    """``"fetched,not_modified"`` → the Status values (names as ``read --dump`` prints them)."""
    out = set()
    for name in spec.split(","):
        name = name.strip().upper()
        if not name:
            continue
        try:
            out.add(Status[name])
        except KeyError:
            known = ", ".join(s.name.lower() for s in Status)
            raise BadInput(f"--status {spec!r}: unknown status {name.lower()!r} (known: {known})") from None
    if not out:
        raise BadInput(f"--status {spec!r}: name at least one status")
    return frozenset(out)


def parse_time(spec: str) -> int:
    """Seconds since the epoch from ``1764000000``, ``2026-11-24`` or ``2026-11-24T01:30:00Z``
    (a time without a zone is UTC)."""
    s = spec.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        t = datetime.datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
    except ValueError:
        raise BadInput(f"--since {spec!r}: expected seconds since the epoch or an ISO 8601 date/time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp())


def host_filter(domain: str) -> Callable[[str], bool]:
    """A URL predicate: its host is ``domain`` or a subdomain of it (case-insensitive)."""
    d = domain.strip().lower().rstrip(".")
    if not d:
        raise BadInput(f"--domain {domain!r}: empty domain")
    tail = "." + d

    def ok(url: str) -> bool:
        h = urlsplit(url).hostname or ""
        return h == d or h.endswith(tail)

    return ok


def page_record(p: Page) -> dict:
    """The page's fields as exported (docs/indexing.md, *Record*)."""
    return {
        "url": p.url,
        "md5": p.md5.hex(),
        "status": Status(p.status).name.lower(),
        "fetch_time": p.fetch_time,
        "score": p.score,
        "meta": p.meta,
    }


def _anchors(links: Iterable[bytes], max_anchors: int) -> tuple[int, int, list[dict]]:
    """(inlinks, distinct linking hosts, anchors) of one page from its LinksByURL values."""
    n = 0
    hosts: set[bytes] = set()
    pairs: set[tuple[bytes, bytes]] = set()
    for v in links:
        n += 1
        dom = v[_LINK_DOMAIN]
        hosts.add(dom)
        if len(v) > _LINK_ANCHOR:
            pairs.add((dom, v[_LINK_ANCHOR:]))
    by_text: dict[bytes, int] = {}
    for _, text in pairs:
        by_text[text] = by_text.get(text, 0) + 1
    best = sorted(by_text.items(), key=lambda kv: (-kv[1], kv[0]))[:max_anchors]
    return n, len(hosts), [{"text": t.decode("utf-8", "replace"), "hosts": c} for t, c in best]


def export_pages(
    reader: Reader,
    *,
    statuses: Iterable[int] = DEFAULT_STATUSES,
    since: int | None = None,
    url_ok: Callable[[str], bool] | None = None,
    page_ok: Callable[[Page], bool] | None = None,
    max_anchors: int = DEFAULT_MAX_ANCHORS,
) -> Iterator[dict]:
    """Records of the pages with a status in ``statuses``, fetched after ``since`` (if given),
    whose URL passes ``url_ok`` and whose page passes ``page_ok``, in global URL order.

    Each record: the page fields (``page_record``), ``inlinks`` (number of links to it),
    ``inlink_hosts`` (distinct linking hosts) and ``anchors`` (``[{"text", "hosts"}]``, see the
    module docstring).  Runtime: one pass over PagesByURL and LinksByURL; the links of pages
    filtered out are skipped without being decoded.
    """
    if max_anchors < 0:
        raise BadInput(f"max_anchors must be >= 0, not {max_anchors}")
    want = frozenset(int(s) for s in statuses)
    for j in range(reader.sections.k):
        pages = reader.tables["pages_by_url"][j]
        if pages is None:
            continue
        links = _LinkCursor(reader.tables["links_by_url"][j])
        marks = reader.marks(j)  # generate marks, overlaid on the pages' meta (webdb.core.marks)
        for key, value in pages.items():
            p = Page.decode(key.decode("utf-8"), value)
            if marks and key in marks:
                p.meta[GENERATE_MARK] = marks[key]
            if p.status not in want or (since is not None and p.fetch_time <= since):
                continue
            if (url_ok is not None and not url_ok(p.url)) or (page_ok is not None and not page_ok(p)):
                continue
            rec = page_record(p)
            rec["inlinks"], rec["inlink_hosts"], rec["anchors"] = _anchors(links.run(key), max_anchors)
            yield rec


class _LinkCursor:
    """A forward-only cursor over one section's LinksByURL, read in step with PagesByURL."""

    def __init__(self, table) -> None:
        self._it = table.items() if table is not None else iter(())
        self._cur = next(self._it, None)

    def run(self, url_key: bytes) -> Iterator[bytes]:
        """The link values of ``url_key``, streamed.  Links of smaller URLs (pages filtered out,
        link targets that are no page) are skipped: both tables sort by URL first."""
        lo = url_key + b"\x00"
        it, cur = self._it, self._cur
        while cur is not None and cur[0] < lo:
            cur = next(it, None)
        while cur is not None and cur[0].startswith(lo):
            self._cur = cur
            yield cur[1]
            cur = next(it, None)
        self._cur = cur


# ---- output formats ---------------------------------------------------------------------------

ROW_GROUP_BYTES = 64 << 20


def write_jsonl(records: Iterable[dict], f) -> int:
    """One JSON object per line (UTF-8) to the binary file ``f``; returns the count."""
    n = 0
    dumps = json.dumps
    for rec in records:
        f.write(dumps(rec, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
        n += 1
    return n


def parquet_schema(segments: bool = False):
    """The Parquet schema of export records (docs/indexing.md, *Parquet*)."""
    import pyarrow as pa

    fields = [
        pa.field("url", pa.string(), nullable=False),
        pa.field("md5", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("fetch_time", pa.int64(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("meta", pa.map_(pa.string(), pa.string()), nullable=False),
        pa.field("inlinks", pa.int64(), nullable=False),
        pa.field("inlink_hosts", pa.int64(), nullable=False),
        pa.field("anchors", pa.list_(pa.struct([("text", pa.string()), ("hosts", pa.int64())])), nullable=False),
    ]
    if segments:
        content = pa.struct(
            [("segment", pa.string()), ("file", pa.string()), ("offset", pa.int64()), ("length", pa.int64())]
        )
        fields += [
            pa.field("title", pa.string()),
            pa.field("text", pa.string()),
            pa.field("charset", pa.string()),
            pa.field("language", pa.string()),
            pa.field("outlinks", pa.int64()),
            pa.field("content", content),
        ]
    return pa.schema(fields)


def _approx_bytes(rec: dict) -> int:
    return 96 + len(rec["url"]) + sum(len(a["text"]) + 16 for a in rec["anchors"]) + len(rec.get("text") or "")


def write_parquet(records: Iterable[dict], f, segments: bool = False, row_group_bytes: int = ROW_GROUP_BYTES) -> int:
    """Records to the binary file ``f`` as Parquet, one row group per about ``row_group_bytes``
    of record data; returns the count.

    Records are converted to Arrow in small batches (Arrow columns cost about their data size,
    Python objects ten times more), so memory holds one row group in Arrow form plus one batch.
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise BadInput("--format parquet needs pyarrow: pip install 'webdb[export]'") from None
    schema = parquet_schema(segments)
    names = schema.names
    batch_bytes = max(1, min(row_group_bytes, _BATCH_BYTES))
    n = 0
    with pq.ParquetWriter(f, schema, compression="zstd") as w:
        batches: list = []
        group = 0
        cols: dict[str, list] = {c: [] for c in names}
        size = 0
        for rec in records:
            for c in names:
                v = rec[c]
                cols[c].append(list(v.items()) if c == "meta" else v)
            n += 1
            size += _approx_bytes(rec)
            if size >= batch_bytes:
                batches.append(pa.RecordBatch.from_pydict(cols, schema=schema))
                group += size
                cols, size = {c: [] for c in names}, 0
                if group >= row_group_bytes:
                    _write_group(w, pa, schema, batches)
                    batches, group = [], 0
        if cols["url"]:
            batches.append(pa.RecordBatch.from_pydict(cols, schema=schema))
        _write_group(w, pa, schema, batches)
    return n


_BATCH_BYTES = 1 << 20


def _write_group(w, pa, schema, batches: list) -> None:
    if batches:
        t = pa.Table.from_batches(batches, schema=schema)
        w.write_table(t, row_group_size=t.num_rows)
