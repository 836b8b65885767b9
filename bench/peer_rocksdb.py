#!/usr/bin/env python3
"""RocksDB peer (rocksdict): an LSM key-value store.
One keyspace, a one-byte prefix per WebDB table, '\\t' between key parts:
  U url            -> md5 status fetch_time retries interval score num_outlinks   (PagesByURL)
  M md5 \\t url     -> ''                                                          (PagesByMD5)
  L from_md5 \\t to -> anchor                                                      (LinksByMD5)
  I to \\t from_md5 -> anchor                                                      (LinksByURL)
Load and round are applied as write batches of puts/deletes."""

import os
from itertools import islice

import driver

BATCH = 20_000


class RocksDB:
    def __init__(self, path):
        from rocksdict import BlockBasedOptions, Cache, Options, Rdict

        o = Options(raw_mode=True)
        o.create_if_missing(True)
        o.increase_parallelism(2)
        o.set_write_buffer_size(128 << 20)
        o.set_max_write_buffer_number(3)
        b = BlockBasedOptions()
        b.set_bloom_filter(10, False)
        b.set_block_cache(Cache(512 << 20))
        o.set_block_based_table_factory(b)
        self.db = Rdict(path, options=o)

    def batch(self):
        db = self.db
        from rocksdict import WriteBatch

        class B:  # a write batch as a context manager
            def __enter__(s):
                s.wb = WriteBatch(raw_mode=True)
                s.put, s.delete = s.wb.put, s.wb.delete
                return s

            def __exit__(s, *exc):
                db.write(s.wb)

        return B()

    def get(self, k):
        return self.db.get(k)

    def scan(self, prefix):
        it = self.db.iter()
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            yield it.key(), it.value()
            it.next()

    def flush(self):
        self.db.flush()

    def close(self):
        self.db.close()


class Peer:
    name = "rocksdb"

    def __init__(self, work, meta, opt):
        self.meta = meta
        self.kv = RocksDB(os.path.join(work, "db"))

    def load(self, pages, links):
        kv = self.kv
        with open(pages, "rb") as f:
            while lines := list(islice(f, BATCH)):
                with kv.batch() as b:
                    for line in lines:
                        url, val = line[:-1].split(b"\t", 1)
                        b.put(b"U" + url, val)
                        b.put(b"M" + val[: val.index(b"\t")] + b"\t" + url, b"")
        with open(links, "rb") as f:
            while lines := list(islice(f, BATCH)):
                with kv.batch() as b:
                    for line in lines:
                        m, u, a = line[:-1].split(b"\t")
                        b.put(b"L" + m + b"\t" + u, a)
                        b.put(b"I" + u + b"\t" + m, a)
        kv.flush()

    def apply_round(self, path):
        kv = self.kv
        new_val = b"\t0\t%d\t0\t2592000\t1.0\t0" % self.meta["t_round"]
        added = set()
        recs = driver.read_round(path)
        while batch := list(islice(recs, 2000)):
            with kv.batch() as b:
                for url, ok, md5, t, links in batch:
                    url, md5 = url.encode(), md5.encode()
                    old_md5, status, ft, retries, interval, score, nout = kv.get(b"U" + url).split(b"\t")
                    if not ok:
                        b.put(
                            b"U" + url,
                            b"\t".join(
                                (
                                    old_md5,
                                    b"2",
                                    b"%d" % (t + driver.DAY),
                                    b"%d" % (int(retries) + 1),
                                    interval,
                                    score,
                                    nout,
                                )
                            ),
                        )
                        continue
                    if old_md5:
                        for k, _ in kv.scan(b"L" + old_md5 + b"\t"):
                            b.delete(k)
                            b.delete(b"I" + k[34:] + b"\t" + old_md5)
                    if old_md5 != md5:
                        b.delete(b"M" + old_md5 + b"\t" + url)
                        b.put(b"M" + md5 + b"\t" + url, b"")
                    for u, a in links:
                        u, a = u.encode(), a.encode()
                        b.put(b"L" + md5 + b"\t" + u, a)
                        b.put(b"I" + u + b"\t" + md5, a)
                        if u not in added and kv.get(b"U" + u) is None:
                            added.add(u)
                            b.put(b"U" + u, new_val)
                            b.put(b"M\t" + u, b"")
                    b.put(
                        b"U" + url,
                        b"\t".join((md5, b"1", b"%d" % (t + int(interval)), b"0", interval, score, b"%d" % len(links))),
                    )
        kv.flush()

    def get_page(self, url):
        v = self.kv.get(b"U" + url.encode())
        return None if v is None else v.split(b"\t")

    def inlinks(self, url):
        k = b"I" + url.encode() + b"\t"
        return [(key[len(k) :], a) for key, a in self.kv.scan(k)]

    def dump(self, table):
        pre = {"pages_by_url": b"U", "pages_by_md5": b"M", "links_by_md5": b"L", "links_by_url": b"I"}[table]
        buf = []
        for k, v in self.kv.scan(pre):
            buf.append(k[1:] + b"\n" if pre == b"M" else k[1:] + b"\t" + v + b"\n")
            if len(buf) >= 100_000:
                yield b"".join(buf)
                buf = []
        yield b"".join(buf)

    def close(self):
        self.kv.close()


if __name__ == "__main__":
    driver.main(Peer)
