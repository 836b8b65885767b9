"""webdb: a crawl database of pages and links in four sorted tables, split into k sections.

import webdb
db = webdb.create("crawl.db", sections=2)
with db.writer() as w:
    w.add_page(webdb.Page("http://example.com/"))
with db.reader() as r:
    print(r.get_page("http://example.com/"))
"""

from webdb.db import WebDB, create
from webdb.db import open_db as open  # noqa: A001 - webdb.open mirrors dbm.open
from webdb.errors import (
    BadInput,
    ClosedError,
    CorruptionError,
    DiskFull,
    DistributedError,
    LockedError,
    NotADatabase,
    WebDBError,
)
from webdb.reader import Reader
from webdb.schedule import FetchResult, Schedule
from webdb.tables.records import DAY, NEVER, Link, Page, Status, domain_id, url_md5
from webdb.writer.writer import Writer

__version__ = "0.1.0"

__all__ = [
    "BadInput",
    "ClosedError",
    "CorruptionError",
    "DAY",
    "DiskFull",
    "DistributedError",
    "FetchResult",
    "Link",
    "LockedError",
    "NEVER",
    "NotADatabase",
    "Page",
    "Reader",
    "Schedule",
    "Status",
    "WebDB",
    "WebDBError",
    "Writer",
    "create",
    "domain_id",
    "open",
    "url_md5",
    "__version__",
]
