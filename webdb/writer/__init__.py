"""The writer: edit records, the cascade, the local and the distributed writer.

Owns: turning writer calls into a committed generation — edit records and their sort
(edits.py, sortbuf.py), the five-stage cascade (cascade.py), the ``Writer`` (writer.py), the
inputs of a distributed update (inputs.py), the section agents and the coordinator over a rack
(distributed.py, rack.py).

May import: ``webdb.tables``, ``webdb.ndfs``, ``webdb.db``, ``webdb.sections``,
``webdb.settings``, ``webdb.schedule``, ``webdb.errors``, ``webdb._fault``.  Never ``fetchlist``
(the crawl registers its inputs by name: inputs.py) nor ``webdb.cli`` / ``webdb.analysis``.
Used by ``webdb.db`` only through ``writer.py`` (``db.writer()``); others use the public
``webdb.Writer`` and ``webdb.rack``.
"""
