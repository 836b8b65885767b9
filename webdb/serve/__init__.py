"""The crawl dashboard of ``webdb serve``: a read-only web view of a db and its rounds.

Owns: the HTTP server (``app``: routes, query parameters, headers), what each view shows
(``views``: plain data, rendered as HTML by ``templates/`` or as JSON under ``/api``) and the
browser's files (``static/``: our script and style sheet, and uPlot, vendored with its license).

May import: the database (``webdb.core.db`` through the ``WebDB`` it is given, ``webdb.core.reader``,
``webdb.tools.stats``, ``webdb.core.manifest``), ``webdb.tables.records`` and ``webdb.errors``; never the
writer, the CLI or ``fetchlist`` (an import-linter contract): it reads committed generations
only and never takes the writer lock.
"""

from webdb.serve.app import CSP, Dashboard, make_server

__all__ = ["CSP", "Dashboard", "make_server"]
