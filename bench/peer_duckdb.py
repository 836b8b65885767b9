#!/usr/bin/env python3
"""DuckDB peer: bulk SQL. Tables pages and links; ART indexes on pages(url) (unique) and
links(to_url) serve PagesByURL / LinksByURL point reads; the MD5-keyed roles are served by
set-based hash joins. The round is loaded into temp tables and applied with UPDATE/DELETE/INSERT."""

import os

import driver
import duckdb

PAGE_COLS = (
    "{'url':'VARCHAR','md5':'VARCHAR','status':'INTEGER','fetch_time':'BIGINT','retries':'INTEGER',"
    "'interval':'INTEGER','score':'DOUBLE','num_outlinks':'INTEGER'}"
)
LINK_COLS = "{'from_md5':'VARCHAR','to_url':'VARCHAR','anchor':'VARCHAR'}"
ROUND_COLS = "{'url':'VARCHAR','ok':'INTEGER','md5':'VARCHAR','t':'BIGINT','outlinks':'VARCHAR'}"


def csv(path, cols):
    return f"read_csv('{path}', delim='\\t', header=false, quote='', escape='', auto_detect=false, columns={cols})"


class Peer(driver.SqlPeer):
    name = "duckdb"

    def __init__(self, work, meta, opt):
        self.meta = meta
        mem = os.environ.get("BENCH_MEM", "4GB")
        self.db = duckdb.connect(
            os.path.join(work, "webdb.duckdb"),
            config=dict(
                threads=2, memory_limit=mem, temp_directory=os.path.join(work, "tmp"), preserve_insertion_order=False
            ),
        )
        self.q_page = None

    def load(self, pages, links):
        db = self.db
        db.execute(f"""CREATE TABLE pages AS SELECT url, coalesce(md5, '') AS md5, status, fetch_time, retries,
                       interval, score, num_outlinks FROM {csv(pages, PAGE_COLS)}""")
        db.execute(f"CREATE TABLE links AS SELECT * FROM {csv(links, LINK_COLS)}")
        db.execute("CREATE UNIQUE INDEX pages_url ON pages(url)")
        db.execute("CREATE INDEX links_to ON links(to_url)")
        db.execute("CHECKPOINT")

    def apply_round(self, path):
        db, t_new = self.db, self.meta["t_round"]
        db.execute(
            "CREATE TEMP TABLE r AS SELECT url, ok, coalesce(md5, '') AS md5, t, coalesce(outlinks, '') AS outlinks"
            f" FROM {csv(path, ROUND_COLS)}"
        )
        db.execute("""CREATE TEMP TABLE rl AS
            SELECT r.md5 AS from_md5, split_part(l, chr(31), 1) AS to_url, split_part(l, chr(31), 2) AS anchor
            FROM r, unnest(string_split(r.outlinks, chr(30))) AS u(l) WHERE r.ok = 1 AND r.outlinks <> ''""")
        db.execute("BEGIN")
        db.execute("""DELETE FROM links WHERE from_md5 IN
            (SELECT p.md5 FROM pages p JOIN r ON p.url = r.url WHERE r.ok = 1 AND p.md5 <> '')""")
        db.execute("INSERT INTO links SELECT * FROM rl")
        db.execute(f"""UPDATE pages SET
              md5 = CASE WHEN r.ok = 1 THEN r.md5 ELSE pages.md5 END,
              status = CASE WHEN r.ok = 1 THEN 1 ELSE 2 END,
              fetch_time = CASE WHEN r.ok = 1 THEN r.t + pages.interval ELSE r.t + {driver.DAY} END,
              retries = CASE WHEN r.ok = 1 THEN 0 ELSE pages.retries + 1 END,
              num_outlinks = CASE WHEN r.ok = 0 THEN pages.num_outlinks WHEN r.outlinks = '' THEN 0
                                  ELSE len(string_split(r.outlinks, chr(30))) END
            FROM r WHERE pages.url = r.url""")
        db.execute(f"""INSERT INTO pages SELECT DISTINCT to_url, '', 0, {t_new}, 0, 2592000, 1.0, 0
                       FROM rl ANTI JOIN pages p ON rl.to_url = p.url""")
        db.execute("COMMIT")
        db.execute("DROP TABLE r")
        db.execute("DROP TABLE rl")
        db.execute("CHECKPOINT")


if __name__ == "__main__":
    driver.main(Peer)
