"""Table files: block format, records, readers and writers.

Owns: the bytes on disk of one table — the block and footer format and its constants
(format.py), the Page and Link records, their key encodings and value layouts (records.py,
pagecodec.py), and the immutable table files with their readers, writers and merge cursor
(table.py).  Knows nothing of sections, databases, edits or hosts.

May import: ``webdb.errors`` only (contract ``tables-at-the-bottom`` in pyproject.toml).
"""
