"""Table files: block format, records, readers and writers.

Owns: the bytes on disk of one table — the block and footer format and its constants
(format.py), the block codec and its checksum (block.py), the Page and Link records, their key
encodings and value layouts (records.py, pagecodec.py), the immutable table files with their
readers and writers (table.py), merging an old table with sorted changes into a new one
(merge.py: ``MergeCursor``, ``Splice``), and a table as a base file plus delta runs (levels.py:
``Levels``, ``LevelCursor``, compaction).  Knows nothing of sections, databases or hosts.

The compiled extension ``_blockc`` (built from ``_blockc_src/``) holds the block kernels and,
beside them, kernels of the writer's cascade stages that work on edit records as opaque sorted
bytes (``pack_edits``, ``lbu_groups``, ``lbm_groups``, ``lbm_adds``, ``lbu_splice``,
``make_links``; wrapped in block.py); the edit record layout they follow is owned by
``webdb.writer.edits``.

May import: ``webdb.errors`` only (contract ``tables-at-the-bottom`` in pyproject.toml).
"""
