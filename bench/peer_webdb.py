#!/usr/bin/env python3
"""webdb as a peer of bench/driver.py: the same workload, through webdb's public API.

    python3 bench/driver.py --peer webdb --data DATA/n100000 --work /tmp/w \
        --opt sections=2,sync=1

Load (the default, ``load=bulk``): ``bulk_load_tsv``, the bulk load from Arrow columns
(``webdb.tools.bulkarrow``: pyarrow reads the TSVs a chunk at a time, external sorts within
``memory_mb``, blocks encoded a window at a time; the records of ``webdb.bulk_load`` for input its
column checks refuse), the same records as ``load=writer``: one writer batch
(add_page_with_score for every page, add_links for each source's links).
Round: `webdb update DB round.tsv --input roundtsv:apply_round_tsv` (bench/roundtsv.py) as a library
call: k local section writers (the embedded default of the update tool), section j applying
the j-th contiguous share of round.tsv (apply_fetch per fetched page, add_outlinks for its
outlinks), one atomic commit.  ``round=writer`` applies it instead as one batch of the
in-process Writer (the writer phase then runs serially in this process).
Options (--opt k=v,...): sections (default 2, one per core), sync (1), memory_mb (512), codec,
round (update | writer; in bench/run.py's --peers: ``webdb:round=writer``), load (bulk | writer; default bulk).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from operator import methodcaller
from typing import TYPE_CHECKING

import webdb
from webdb import Link, Page, Status
from webdb.writer.rack import Rack, update

if TYPE_CHECKING:
    import pyarrow as pa

# numpy, pyarrow and the loaders are imported by the load and the round that use them: a
# reads-only process (driver.py --reads-only, bench_lookups.py) does not start OpenBLAS's
# threads beside the reads it times.

STATUS_IN = {"0": Status.UNFETCHED, "1": Status.FETCHED, "2": Status.RETRY}
STATUS_OUT = {int(Status.UNFETCHED): "0", int(Status.FETCHED): "1", int(Status.RETRY): "2"}


def _opts(opt: str) -> dict:
    out = {}
    for kv in filter(None, opt.split(",")):
        k, _, v = kv.partition("=")
        if k in ("sections", "sync", "memory_mb", "workers", "block_size"):
            out[k] = int(v)
        elif k in ("codec", "round", "load"):
            out[k] = v
        elif k == "engine" and v in ("update", "writer"):  # the form "webdb:engine=writer"
            out["round"] = v
    return out


def read_pages(pages_tsv: str) -> Iterator[Page]:
    url_md5 = webdb.url_md5
    with open(pages_tsv, encoding="utf-8") as f:
        for line in f:
            url, md5, st, ft, rt, iv, sc, no = line[:-1].split("\t")
            score = float(sc)
            yield Page(
                url,
                bytes.fromhex(md5) if md5 else url_md5(url),
                STATUS_IN[st],
                0,
                int(ft),
                int(rt),
                int(iv),
                int(no),
                score,
                score,
            )


def read_links(links_tsv: str) -> Iterator[Link]:
    with open(links_tsv, encoding="utf-8") as f:
        for line in f:
            src, url, anchor = line[:-1].split("\t")
            yield Link(bytes.fromhex(src), url, anchor)


def arrow_pages(pages_tsv: str) -> Iterator[pa.Table]:
    """pages.tsv as bulkarrow.PAGE_COLUMNS, in chunks (the same pages as ``read_pages``)."""
    import pyarrow as pa

    from webdb.tools.bulkarrow import tsv

    cols = ["url", "md5", "status", "next_fetch", "retries", "fetch_interval", "score", "num_outlinks"]
    types = dict(
        zip(cols, [pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.int64(), pa.float64(), pa.int64()])
    )
    for t in tsv(pages_tsv, cols, types, stream=True):
        yield _arrow_page_chunk(t)


def _arrow_page_chunk(t: pa.Table) -> pa.Table:
    """One parsed chunk of pages.tsv as PAGE_COLUMNS (a blank md5 is the url's md5)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from webdb.tools.bulkarrow import NotColumnar, md5_array, unhex16

    if t.num_rows and pc.max(t["status"]).as_py() > 2:
        raise NotColumnar("a status other than 0, 1, 2")
    url = t["url"].combine_chunks()
    hexes = t["md5"].combine_chunks()
    blank = pc.equal(pc.binary_length(hexes), 0)
    md5 = np.zeros((t.num_rows, 16), np.uint8)
    nb = np.asarray(pc.invert(blank).to_numpy(zero_copy_only=False))
    md5[nb] = unhex16(hexes.filter(pc.invert(blank)))
    fill = url.filter(blank)
    if len(fill):
        # webdb.url_md5 of each blank's url, in C-level loops over one buffer (no str objects)
        offs = np.frombuffer(fill.buffers()[1], np.int32)[fill.offset : fill.offset + len(fill) + 1].tolist()
        data = fill.buffers()[2].to_pybytes()
        digests = map(methodcaller("digest"), map(hashlib.md5, map(data.__getitem__, map(slice, offs[:-1], offs[1:]))))
        md5[~nb] = np.frombuffer(b"".join(digests), np.uint8).reshape(len(fill), 16)
    score = t["score"]
    return pa.table(
        {
            "url": url,
            "md5": md5_array(md5),
            "status": t["status"],
            "fetch_time": pa.array(np.zeros(t.num_rows, np.int64)),
            "next_fetch": t["next_fetch"],
            "retries": t["retries"],
            "fetch_interval": t["fetch_interval"],
            "num_outlinks": t["num_outlinks"],
            "score": score,
            "next_score": score,
        }
    )


def arrow_links(links_tsv: str) -> Iterator[pa.Table]:
    """links.tsv as bulkarrow.LINK_COLUMNS, in chunks (the same links as ``read_links``)."""
    import pyarrow as pa

    from webdb.tools.bulkarrow import md5_array, tsv, unhex16

    cols = ["from_id", "url", "anchor"]
    for b in tsv(links_tsv, cols, dict.fromkeys(cols, pa.string()), stream=True):
        yield pa.table({"from_id": md5_array(unhex16(b["from_id"])), "url": b["url"], "anchor": b["anchor"]})


def bulk_load_tsv(db, pages_tsv: str, links_tsv: str) -> None:
    """The initial db by a bulk load: equal to the writer batch of ``load_tsv``.  From Arrow
    columns when the files pass the column checks, else from records (``webdb.bulk_load``, which
    names a bad line); one loader either way (webdb.tools.bulkarrow)."""
    from webdb.tools.bulkarrow import NotColumnar, bulk_load_arrow

    try:
        bulk_load_arrow(db, arrow_pages(pages_tsv), arrow_links(links_tsv))
    except NotColumnar:
        webdb.bulk_load(db, read_pages(pages_tsv), read_links(links_tsv))


def load_tsv(db, pages_tsv: str, links_tsv: str) -> None:
    """The initial db in one writer batch: add_page_with_score per page, add_links per source."""
    with db.writer() as w:
        for p in read_pages(pages_tsv):
            w.add_page_with_score(p)
        with open(links_tsv, encoding="utf-8") as f:
            # links.tsv lists each source's links together: one add_links call per source.
            cur, batch = None, []
            for line in f:
                src, url, anchor = line[:-1].split("\t")
                if src != cur:
                    if batch:
                        w.add_links(bytes.fromhex(cur), batch)
                    cur, batch = src, []
                batch.append((url, anchor))
            if batch:
                w.add_links(bytes.fromhex(cur), batch)


class Peer:
    name = "webdb"

    def __init__(self, work: str, meta: dict, opt: str):
        o = self._configure(work, meta, opt)
        # The workload never gives up on a page: failures only count retries.
        self.db = webdb.create(self.path, sections=self.k, max_retries=1 << 15, **o)

    @classmethod
    def reopen(cls, work: str, meta: dict, opt: str) -> Peer:
        """The db a driver.py --keep run left in ``work`` (driver.py --reads-only), opened with
        its own settings (the block cache at the db's ``cache_mb``); the peer's options
        (round, load, its name) are those of a fresh one, so a next round runs the same way."""
        self = cls.__new__(cls)
        self._configure(work, meta, opt)
        self.db = webdb.open(self.path)
        return self

    def _configure(self, work: str, meta: dict, opt: str) -> dict:
        """Set everything but the db from ``opt``; return the db settings it names."""
        o = _opts(opt)
        k = o.pop("sections", 2)
        self.round = o.pop("round", "update")
        self.load_by = o.pop("load", "bulk")  # 4-8x faster than the writer batch (docs/performance.md)
        if self.load_by not in ("bulk", "writer"):
            raise ValueError(f"load={self.load_by!r}: expected bulk or writer")
        if self.round not in ("update", "writer"):
            raise ValueError(f"round={self.round!r}: expected update or writer")
        o["sync"] = bool(o.get("sync", 1))
        self.name = (
            f"webdb-k{k}"
            + ("" if o["sync"] else "-nosync")
            + ("" if self.round == "update" else "-writer")
            + ("-wload" if self.load_by == "writer" else "")
        )
        self.path = os.path.join(work, "db")
        self.k = k
        self.meta = meta
        self.r = None
        return o

    def load(self, pages_tsv: str, links_tsv: str) -> None:
        (bulk_load_tsv if self.load_by == "bulk" else load_tsv)(self.db, pages_tsv, links_tsv)

    def apply_round(self, round_tsv: str) -> None:
        from roundtsv import INPUT, apply_round_tsv

        if self.round == "writer":
            with self.db.writer() as w:
                apply_round_tsv(w, [round_tsv])
            return
        inputs = {j: {"paths": [round_tsv], "options": {"share": [j, self.k]}} for j in range(self.k)}
        update(Rack.local(self.path), inputs, input_fn=INPUT)

    def _reader(self):
        if self.r is None:
            self.r = self.db.reader()
        return self.r

    # The read test calls these 100k / 10k times: one call layer each, the reader opened once.
    def get_page(self, url: str):
        r = self.r
        return (r if r is not None else self._reader()).get_page(url)

    def inlinks(self, url: str):
        r = self.r
        return list((r if r is not None else self._reader()).inlinks(url))

    def dump(self, table: str):
        r = self._reader()
        url_md5 = webdb.url_md5
        buf: list[str] = []

        def md5hex(url: str, md5: bytes) -> str:
            return "" if md5 == url_md5(url) else md5.hex()

        if table == "pages_by_url":
            rows = (
                f"{p.url}\t{md5hex(p.url, p.md5)}\t{STATUS_OUT[p.status]}\t{p.next_fetch}\t{p.retries}\t"
                f"{p.fetch_interval}\t{p.score!r}\t{p.num_outlinks}\n"
                for p in r.pages()
            )
        elif table == "pages_by_md5":
            # Unfetched pages carry md5(url) here but '' in the canonical dump, where they sort first.
            unfetched = (f"\t{p.url}\n" for p in r.pages() if p.md5 == url_md5(p.url))
            fetched = (f"{p.md5.hex()}\t{p.url}\n" for p in r.pages_by_md5() if p.md5 != url_md5(p.url))
            rows = (x for it in (unfetched, fetched) for x in it)
        elif table == "links_by_md5":
            rows = (f"{lk.from_id.hex()}\t{lk.url}\t{lk.anchor}\n" for lk in r.links_by_md5())
        else:
            rows = (f"{lk.url}\t{lk.from_id.hex()}\t{lk.anchor}\n" for lk in r.links())
        for row in rows:
            buf.append(row)
            if len(buf) >= 100_000:
                yield "".join(buf)
                buf = []
        if buf:
            yield "".join(buf)

    def close(self) -> None:
        if self.r is not None:
            self.r.close()
