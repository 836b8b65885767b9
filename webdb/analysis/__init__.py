"""Tools built on the db: link analysis, dedup by content, URL-prefix statistics, filter generation.

See docs/analysis.md.  Each reads a committed snapshot in streaming passes with bounded memory.

Owns: link analysis (rank.py), dedup by content (dedup.py), URL-prefix statistics
(prefixes.py) and filter generation from them (filtergen.py).

May import: webdb's public API and readers (``webdb.reader``, ``webdb.tables`` records and
``pagecodec``), ``webdb.urls``, the writer's sort buffer (``webdb.writer.sortbuf``) and
``webdb.errors``.  Never ``fetchlist`` (contract ``analysis-without-crawl``).
"""
