"""webdb: a crawl database of pages and links in four sorted tables, split into k sections.

import webdb
db = webdb.create("crawl.db", sections=2)
with db.writer() as w:
    w.add_page(webdb.Page("http://example.com/"))
with db.reader() as r:
    print(r.get_page("http://example.com/"))

Owns: the public API and, in folders, the parts: ``core`` (the database itself: a db
directory, its generations and manifests, settings, the fetch schedule, sections, readers, the
writer lock), ``tools`` (what acts on a whole db between rounds: bulk load, check, compact,
export, rebalance, stats, deploy), ``util`` (fault points, progress reports, the external sort),
``tables`` (the table format), ``writer`` (edits, the cascade and its transports), ``ndfs``
(files on hosts), ``analysis`` (rank, dedup, prefixes, filters), ``serve`` (the dashboard) and
``cli`` (the ``webdb`` command).

May import: its parts only (``tables`` at the bottom, then ``ndfs``, ``writer``, ``analysis``,
``cli`` at the top: docs/design.md, *Parts and arrows*); never ``fetchlist`` outside the CLI.

The public API — what other packages (the crawl, ``fetchlist``; tools) may import — is this
package's ``__all__`` (the db, its records, readers and writers, and the helpers a tool built on
webdb needs: ``SortBuffer``, the external sort; ``wait_for_lock``; ``progress_bar``) and three
small public modules: ``webdb.errors`` (every exception), ``webdb.urls`` (host and
registered-domain helpers) and ``webdb.rack`` (the distributed update).
Everything else (``webdb.core``, ``webdb.tools``, ``webdb.tables``, ``webdb.writer``, ...) is
internal; the allowed imports between the parts are import-linter contracts in pyproject.toml
(docs/design.md, *Parts and arrows*).
"""

from webdb.core.db import WebDB, create
from webdb.core.db import open_db as open  # noqa: A001 - webdb.open mirrors dbm.open
from webdb.core.lockwait import wait_for_lock
from webdb.core.manifest import Manifest
from webdb.core.reader import Reader
from webdb.core.schedule import FetchResult, Schedule
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
from webdb.tables import pagecodec
from webdb.tables.records import (
    DAY,
    DEFAULT_ANCHOR_MAX,
    DEFAULT_INTERVAL,
    MAX_URL_BYTES,
    NEVER,
    Link,
    Page,
    Status,
    domain_id,
    url_md5,
    validate_url,
)
from webdb.tools.bulk import bulk_load
from webdb.util.progress import progress_bar
from webdb.util.sortbuf import SortBuffer
from webdb.writer.inputs import CallRecorder, check_share, register_input
from webdb.writer.writer import Writer

__version__ = "0.1.0"

__all__ = [
    "BadInput",
    "CallRecorder",
    "ClosedError",
    "CorruptionError",
    "DAY",
    "DEFAULT_ANCHOR_MAX",
    "DEFAULT_INTERVAL",
    "DiskFull",
    "DistributedError",
    "FetchResult",
    "Link",
    "LockedError",
    "Manifest",
    "MAX_URL_BYTES",
    "NEVER",
    "NotADatabase",
    "Page",
    "Reader",
    "Schedule",
    "SortBuffer",
    "Status",
    "WebDB",
    "WebDBError",
    "Writer",
    "bulk_load",
    "check_share",
    "create",
    "domain_id",
    "open",
    "pagecodec",
    "progress_bar",
    "register_input",
    "url_md5",
    "validate_url",
    "wait_for_lock",
    "__version__",
]
