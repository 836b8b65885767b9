"""Helpers for core tests: deterministic batches and full-state snapshots."""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

import webdb
from webdb import FetchResult, Link, Page, Status
from webdb.tables.table import TableReader


def md5(s: str) -> bytes:
    return hashlib.md5(s.encode()).digest()


def snapshot(db) -> dict:
    """Every table of the committed generation, as comparable lists."""
    with db.reader() as r:
        return {
            "pages": list(r.pages()),
            "pages_by_md5": list(r.pages_by_md5()),
            "links": list(r.links()),
            "links_by_md5": list(r.links_by_md5()),
            "counts": (r.num_pages, r.num_links),
        }


def batch_a(w, n: int = 300) -> None:
    """An initial crawl db: n pages on 7 hosts, a third fetched, each fetched one with outlinks."""
    rng = random.Random(1)
    for i in range(n):
        w.add_page(Page(f"http://h{i % 7}.example/p{i}"))
    for i in range(0, n, 3):
        u = f"http://h{i % 7}.example/p{i}"
        c = md5(f"content-{i}")
        outs = [(f"http://h{j % 7}.example/p{j}", f"anchor {j}") for j in rng.sample(range(n), 5)]
        w.apply_fetch(FetchResult(u, Status.FETCHED, 1000, c, len(outs)))
        w.add_outlinks(c, outs)


def batch_b(w, n: int = 300) -> None:
    """A round: some refetched with new content (old outlinks go), failures, deletes, new urls."""
    rng = random.Random(2)
    for i in range(0, n, 6):
        u = f"http://h{i % 7}.example/p{i}"
        c = md5(f"content-{i}-v2")
        outs = [(f"http://h{j % 7}.example/p{j}", "v2") for j in rng.sample(range(n), 3)]
        outs.append((f"http://new{i}.example/", "new"))
        w.apply_fetch(FetchResult(u, Status.FETCHED, 2000, c, len(outs)))
        w.add_outlinks(c, outs)
    for i in range(1, n, 10):
        w.apply_fetch(FetchResult(f"http://h{i % 7}.example/p{i}", Status.RETRY, 2000))
    for i in range(2, n, 25):
        w.delete_page(f"http://h{i % 7}.example/p{i}")
    w.add_page_with_score(Page("http://h0.example/p0", score=9.5))
    w.add_link(Link(md5("content-3"), "http://h1.example/p1", "extra"))


def make_db(path, sections: int = 2, **settings) -> webdb.WebDB:
    settings.setdefault("sync", False)
    settings.setdefault("block_size", 512)
    db = webdb.create(str(path), sections=sections, **settings)
    with db.writer() as w:
        batch_a(w)
    return db


def commit_next(db: webdb.WebDB, m: webdb.Manifest) -> int:
    """Commit ``m`` (its tables changed by the test) as the next generation, as a buggy writer
    could, every file it names left as it is; returns that generation."""
    gen = m.generation + 1
    db.commit(replace(m, rounds=None, generation=gen, parent=m.generation))
    return gen


def damage_block(path: str, b: int) -> None:
    """Flip a byte in the middle of data block ``b`` of a table file (its CRC left as it was)."""
    t = TableReader(path)
    off, length = t.offsets[b], t.lengths[b]
    t.close()
    with open(path, "r+b") as f:
        f.seek(off + length // 2)
        x = f.read(1)
        f.seek(off + length // 2)
        f.write(bytes([x[0] ^ 0x40]))
