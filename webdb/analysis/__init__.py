"""Tools built on the db: link analysis, dedup by content, URL-prefix statistics, filter generation.

See docs/analysis.md.  Each reads a committed snapshot in streaming passes with bounded memory.

Owns: link analysis (rank.py), dedup by content (dedup.py), URL-prefix statistics
(prefixes.py), filter generation from them (filtergen.py), and rank/dedup/prefixes over a rack
or a Dask cluster (onrack.py, through ``webdb.rack``'s update with a steps function).

May import: webdb's public API and readers (``webdb.core.reader``, ``webdb.tables`` records,
``pagecodec`` and ``format``), ``webdb.urls``, the external sort buffer (``webdb.util.sortbuf``),
``webdb.tools.export``, ``webdb.core.lockwait`` and ``webdb.errors``; onrack.py also ``webdb.rack``,
``webdb.core.sections`` and the writer's ``CallRecorder`` (``webdb.writer.inputs``).  Never
``fetchlist`` (contract ``analysis-without-crawl``).
"""
