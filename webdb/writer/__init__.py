"""The writer: edit records, the cascade, and the one engine that runs it — locally
(``Writer.close``: engine + local executor) and on a rack (``webdb update``: section writers,
agents, coordinator).

Owns: turning writer calls into a committed generation — edit records (``edits``), the
``Writer`` and its ``EditLog`` (``writer``), one stage of one section (``cascade``), the stage
loop and the batch's manifest (``engine``), local worker processes (``executor``), the
distributed writer — one driver (``driver``, ``placing``) over its transports: agents
(``coordinator`` / ``hosts`` / ``distributed``) and Dask (``daskrun`` / ``dasktasks``;
``distributed`` imported only there, lazily), one location side (``location``), a section
writer (``section``), results (``results``), the public face (``rack``) — and what feeds a
section writer (``inputs``; a fetch round's calls as columns: ``columns``) — and the compiled
kernels of step 0 and stages 3-4 (``kernels``: the extension ``_stagesc`` built from
``_stagesc_src/``, whose Python references are beside the code that calls them).

May import: webdb's core (``dbfiles``, ``manifest``, ``sections``, ``settings``, ``schedule``,
``due``, ``lockwait``), ``util``, ``tables``, ``ndfs``, ``errors``; ``webdb.core.db`` only on the
rack side (``hosts`` and ``location`` open and create the db at each location): the ``Writer``
that ``db.writer()`` returns, and all it imports, never reach ``webdb.core.db`` (no import cycle
through the db: docs/design.md, *Parts and arrows*).  Never ``fetchlist`` (the crawl registers
its inputs by name: inputs.py) nor ``webdb.cli`` / ``webdb.analysis``.
Imported by: ``webdb`` (``Writer``), the CLI, and the public ``webdb.rack``; by ``webdb.core``
only as ``webdb.writer.writer``; never by ``manifest``, ``check`` or ``rebalance``.
"""
