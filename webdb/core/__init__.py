"""The database itself: a db directory and its files, generations and manifests, the
settings and the fetch schedule, sections, readers and the writer lock.

May import: ``webdb.tables``, ``webdb.errors``, ``webdb.util``, and the writer only through
``webdb.writer.writer`` (``WebDB.writer()``).
"""
