"""The writer: edit records, the cascade, and the one engine that runs it — locally
(``Writer.close``: engine + local executor) and on a rack (``webdb update``: section writers,
agents, coordinator).

Modules: ``writer`` (EditLog, Writer), ``edits`` (edit keys), ``cascade`` (one stage of one
section), ``engine`` (the stage loop and the batch's manifest), ``executor`` (local worker
processes), ``section`` / ``distributed`` / ``coordinator`` / ``hosts`` / ``results`` / ``rack``
(the distributed writer), ``inputs`` (what feeds a section writer).

May import: webdb's core (db, manifest, sections, settings, schedule, sortbuf, tables, ndfs,
errors, _fault).  Imported by: webdb (Writer), the CLI, fetchlist (rack); never by db,
manifest, check or rebalance.
"""
