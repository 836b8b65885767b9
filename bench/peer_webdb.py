#!/usr/bin/env python3
"""webdb as a peer of ../shared/peers/driver.py: the same workload, through webdb's public API.

    PYTHONPATH=bench python3 ../shared/peers/driver.py --peer webdb --data DATA/n100000 --work /tmp/w \
        --opt sections=2,sync=1

Load: one writer batch (add_page_with_score for every page, add_links for each source's links);
``load=bulk`` builds the same db, byte for byte, with ``webdb.bulk_load`` (external sorts
straight into the tables of the empty db: less CPU, but one process, so not faster yet).
Round: `webdb update DB round.tsv --input roundtsv:apply_round_tsv` (bench/roundtsv.py) as a library
call: k local section writers (the embedded default of the update tool), section j applying
the j-th contiguous share of round.tsv (apply_fetch per fetched page, add_outlinks for its
outlinks), one atomic commit.  ``round=writer`` applies it instead as one batch of the
in-process Writer (the writer phase then runs serially in this process).
Options (--opt k=v,...): sections (default 2, one per core), sync (1), memory_mb (512), codec,
round (update | writer; in run_peers.sh's PEERS: ``webdb:writer``), load (bulk | writer).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from roundtsv import INPUT, apply_round_tsv

import webdb
from webdb import Link, Page, Status
from webdb.writer.rack import Rack, update

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
        elif k == "engine" and v in ("update", "writer"):  # run_peers.sh's "webdb:writer"
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


def bulk_load_tsv(db, pages_tsv: str, links_tsv: str) -> None:
    """The initial db by ``webdb.bulk_load``: equal to the writer batch of ``load_tsv``."""
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
        o = _opts(opt)
        k = o.pop("sections", 2)
        self.round = o.pop("round", "update")
        self.load_by = o.pop("load", "writer")  # bulk_load is not faster yet (docs/performance.md)
        if self.load_by not in ("bulk", "writer"):
            raise ValueError(f"load={self.load_by!r}: expected bulk or writer")
        if self.round not in ("update", "writer"):
            raise ValueError(f"round={self.round!r}: expected update or writer")
        o["sync"] = bool(o.get("sync", 1))
        self.name = (
            f"webdb-k{k}"
            + ("" if o["sync"] else "-nosync")
            + ("" if self.round == "update" else "-writer")
            + ("-bulk" if self.load_by == "bulk" else "")
        )
        self.path = os.path.join(work, "db")
        self.k = k
        # The workload never gives up on a page: failures only count retries.
        self.db = webdb.create(self.path, sections=k, max_retries=1 << 15, **o)
        self.meta = meta
        self.r = None

    def load(self, pages_tsv: str, links_tsv: str) -> None:
        (bulk_load_tsv if self.load_by == "bulk" else load_tsv)(self.db, pages_tsv, links_tsv)

    def apply_round(self, round_tsv: str) -> None:
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
