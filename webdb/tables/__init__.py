"""Table files: block format, records, readers and writers.

Owns: the bytes on disk of one table — the block and footer format and its constants
(format.py), the block codec and its checksum (block.py), the Page and Link records, their key
encodings and value layouts (records.py, pagecodec.py), the immutable table files with their
readers and writers (table.py), merging an old table with sorted changes into a new one
(merge.py: ``MergeCursor``, ``Splice``), and a table as a base file plus delta runs (levels.py:
``Levels``, ``LevelCursor``, compaction).  Knows nothing of sections, databases or hosts.

The compiled extension ``_blockc`` (built from ``_blockc_src/``) holds the block kernels: a
block read, searched, split and built, a table's index and levels read in place, levels merged
and diffed a range at a time, the bulk load's blocks, a list of byte records sorted (block.py
loads it; its pure-Python code is the reference and the fallback).  The writer's kernels over
edit records are the writer's own (``webdb.writer._stagesc``).

May import: ``webdb.errors`` only (contract ``tables-at-the-bottom`` in pyproject.toml).
"""
