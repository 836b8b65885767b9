"""The segment side of ``webdb export --segments``: each URL's latest parse output, joined by URL.

``SegmentJoin(segments, tmpdir)`` reads the fetch and parse records of every segment once and
sorts one record per fetched URL by ``(url, fetch time, segment, sequence)`` with the writer's
external sort (``webdb.util.sortbuf.SortBuffer``: sorted runs spilled to ``tmpdir`` past its
memory budget).  ``join(records)`` then walks that sorted index in step with the export's
records, which come in the same URL order, so the join needs no lookup and no index in memory.

For each URL the chosen fetch is the latest one whose content md5 equals the page's md5 in the
db (the content the db describes; a page NOT_MODIFIED since keeps its older parse), else the
latest fetch of the URL.

Cost: one sequential read of each segment's fetch and parse files, the sort (every record
written and read once more per spill), one sequential read of the sorted runs.  Memory: the
sort budget, plus the fetches of one URL.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator

from fetchlist.segment import CONTENT, FetchRecord, Segment
from webdb import SortBuffer, Status
from webdb.errors import BadInput

__all__ = ["SegmentJoin", "SEGMENT_FIELDS"]

# Fields a joined record gains (None when no segment fetched the URL).
SEGMENT_FIELDS = ("title", "text", "charset", "language", "outlinks", "content")
_HEAD = 16  # after "url 0x00": fetch_time u64 BE, segment u32 BE, sequence u32 BE


def content_location(seg: Segment, part: int, rec: FetchRecord) -> dict | None:
    """Where the fetched bytes of ``rec`` are: segment, file (relative to it), offset, length.

    In a version 2 segment the file is ``content/part-NNNNN.warc.gz`` and ``offset`` and
    ``length`` are those of the URL's WARC response record (one gzip member:
    ``fetchlist.warc.read_response(file, offset, url)`` reads it); in a legacy version 1
    segment, ``content/part-NNNNN.bin`` and the offset of the record's u32 length prefix
    (docs/segment.md).
    """
    if rec.content_ref is None:
        return None
    off, n = rec.content_ref
    return {
        "segment": seg.path,
        "file": os.path.relpath(seg.file(CONTENT, part), seg.path),
        "offset": off,
        "length": n,
    }


class SegmentJoin:
    """A sorted index of the parse output of ``segments``, built in a new directory under
    ``tmpdir`` and removed by ``close()`` (or ``with``)."""

    def __init__(self, segments: list[str], tmpdir: str, memory_bytes: int = 64 << 20) -> None:
        seen: dict[str, str] = {}
        self.segments: list[Segment] = []
        for s in segments:
            real = os.path.realpath(s)
            if real in seen:
                raise BadInput(f"{s}: segment given twice (also as {seen[real]})")
            seen[real] = s
            self.segments.append(Segment.open(os.path.abspath(s)))
        try:
            os.makedirs(tmpdir, exist_ok=True)
            self.dir = tempfile.mkdtemp(prefix="export-", dir=tmpdir)
        except OSError as e:
            raise BadInput(f"{tmpdir}: cannot make the segment index's sort directory ({e.strerror})") from None
        self._buf = SortBuffer(self.dir, "segments", memory_bytes)
        self.records = 0
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        seq = 0
        for i, seg in enumerate(self.segments):
            for part in seg.parts():
                for r in seg.records(part):
                    if r.status != Status.FETCHED:
                        continue
                    p = r.parse
                    payload = {
                        "md5": r.md5.hex() if r.md5 is not None else None,
                        "title": p.title if p else None,
                        "text": p.text if p else None,
                        "charset": p.encoding if p else None,
                        "language": r.headers.get("content-language"),
                        "outlinks": len(p.outlinks) if p else None,
                        "content": content_location(seg, part, r),
                    }
                    head = r.fetch_time.to_bytes(8, "big") + i.to_bytes(4, "big") + seq.to_bytes(4, "big")
                    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
                    self._buf.add(r.url.encode("utf-8") + b"\x00" + head + body)
                    seq += 1
        self.records = seq

    def _groups(self) -> Iterator[tuple[bytes, list[bytes]]]:
        """(url, [payload, …] oldest fetch first) in URL order."""
        url, group = None, []
        try:
            recs = self._buf.sorted()
            first = next(recs, None)  # the merge opens every run here; open runs stay readable
        except FileNotFoundError as e:
            raise BadInput(
                f"{e.filename}: sort run of the segment index removed while exporting "
                "(a writer's recovery empties DB/tmp; give --tmp DIR)"
            ) from None
        for rec in itertools.chain([first] if first is not None else [], recs):
            i = rec.index(b"\x00")
            u = rec[:i]
            if u != url:
                if url is not None:
                    yield url, group
                url, group = u, []
            group.append(rec[i + 1 + _HEAD :])
        if url is not None:
            yield url, group

    def join(self, records: Iterator[dict]) -> Iterator[dict]:
        """``records`` (export records in URL order) with the SEGMENT_FIELDS added."""
        groups = self._groups()
        g = next(groups, None)
        for rec in records:
            key = rec["url"].encode("utf-8")
            while g is not None and g[0] < key:
                g = next(groups, None)
            chosen = None
            if g is not None and g[0] == key:
                fetches = [json.loads(b) for b in g[1]]
                chosen = next((f for f in reversed(fetches) if f["md5"] == rec["md5"]), fetches[-1])
            for f in SEGMENT_FIELDS:
                rec[f] = chosen[f] if chosen is not None else None
            yield rec

    def close(self) -> None:
        self._buf.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SegmentJoin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
