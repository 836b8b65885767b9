"""The database itself.

Owns: a db directory and its small files (``db``, ``dbfiles``), what a generation's manifest
holds (``manifest``), settings and the fetch schedule (``settings``, ``schedule``), how keys split
into sections (``sections``), the reader of a committed generation (``reader``), the due index
generate reads (``due``), the mark table a generate commits (``marks``) and the writer lock
(``lockwait``).

May import: ``webdb.tables``, ``webdb.errors``, ``webdb.util``; the writer only through
``webdb.writer.writer`` (``WebDB.writer()``); of the tools only what ``WebDB.compact``,
``WebDB.rebalance`` and ``Reader.check`` call.
"""
