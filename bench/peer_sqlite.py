#!/usr/bin/env python3
"""SQLite peer: WAL, synchronous=NORMAL, one transaction per phase, executemany.
The four WebDB tables are two WITHOUT ROWID tables and two covering indexes:
  PagesByURL = pages(url PK)           PagesByMD5 = index pages(md5, url)
  LinksByMD5 = links(from_md5, to_url PK, anchor)   LinksByURL = index links(to_url, from_md5, anchor)
"""

import os
import sqlite3
from itertools import islice

import driver

SCHEMA = """
CREATE TABLE pages(url TEXT PRIMARY KEY, md5 TEXT NOT NULL, status INT, fetch_time INT, retries INT,
                   interval INT, score REAL, num_outlinks INT) WITHOUT ROWID;
CREATE TABLE links(from_md5 TEXT, to_url TEXT, anchor TEXT, PRIMARY KEY(from_md5, to_url)) WITHOUT ROWID;
"""
INDEXES = """
CREATE INDEX pages_by_md5 ON pages(md5, url);
CREATE INDEX links_by_url ON links(to_url, from_md5, anchor);
"""


def tsv(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line[:-1].split("\t")


class Peer(driver.SqlPeer):
    name = "sqlite"

    def __init__(self, work, meta, opt, schema=True):
        self.meta = meta
        os.environ["SQLITE_TMPDIR"] = work  # staging tables and sorter spill here
        self.db = sqlite3.connect(os.path.join(work, "webdb.sqlite"), isolation_level=None)
        for p in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "cache_size=-2000000",  # 2 GB page cache
            "temp_store=FILE",
            "mmap_size=0",
        ):
            self.db.execute("PRAGMA " + p)
        if schema:
            self.db.executescript(SCHEMA)

    @classmethod
    def reopen(cls, work, meta, opt):
        """The database a driver.py --keep run left in ``work`` (driver.py --reads-only)."""
        return cls(work, meta, opt, schema=False)

    def load(self, pages, links):
        db = self.db
        db.execute("BEGIN")
        # stage in rowid tables, then insert in key order (sequential B-tree appends)
        db.execute("CREATE TEMP TABLE sp(url, md5, status, fetch_time, retries, interval, score, num_outlinks)")
        db.executemany("INSERT INTO sp VALUES (?,?,?,?,?,?,?,?)", tsv(pages))
        db.execute("INSERT INTO pages SELECT * FROM sp ORDER BY url")
        db.execute("CREATE TEMP TABLE sl(from_md5, to_url, anchor)")
        db.executemany("INSERT INTO sl VALUES (?,?,?)", tsv(links))
        db.execute("INSERT INTO links SELECT * FROM sl ORDER BY from_md5, to_url")
        db.execute("DROP TABLE sp")
        db.execute("DROP TABLE sl")
        db.executescript(INDEXES)  # commits
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def apply_round(self, path):
        db, t_new = self.db, self.meta["t_round"]
        cur = db.cursor()
        db.execute("BEGIN")
        recs = driver.read_round(path)
        while batch := list(islice(recs, 2000)):
            upd_ok, upd_fail, dels, ins, targets = [], [], [], [], []
            for url, ok, md5, t, links in batch:
                old_md5, interval = cur.execute("SELECT md5, interval FROM pages WHERE url=?", (url,)).fetchone()
                if ok:
                    upd_ok.append((md5, t + interval, len(links), url))
                    if old_md5:
                        dels.append((old_md5,))
                    ins.extend((md5, u, a) for u, a in links)
                    targets.extend((u,) for u, _ in links)
                else:
                    upd_fail.append((t + driver.DAY, url))
            cur.executemany("DELETE FROM links WHERE from_md5=?", dels)
            cur.executemany(
                "UPDATE pages SET md5=?, status=1, fetch_time=?, retries=0, num_outlinks=? WHERE url=?", upd_ok
            )
            cur.executemany("UPDATE pages SET status=2, fetch_time=?, retries=retries+1 WHERE url=?", upd_fail)
            cur.executemany("INSERT INTO links VALUES (?,?,?)", ins)
            cur.executemany(f"INSERT OR IGNORE INTO pages VALUES (?, '', 0, {t_new}, 0, 2592000, 1.0, 0)", targets)
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    QUERIES = dict(
        driver.SqlPeer.QUERIES,
        pages_by_md5="SELECT md5, url FROM pages INDEXED BY pages_by_md5 ORDER BY md5, url",
        links_by_url="SELECT to_url, from_md5, anchor FROM links INDEXED BY links_by_url ORDER BY to_url, from_md5",
    )


if __name__ == "__main__":
    driver.main(Peer)
