"""Tools that act on a whole database between rounds.

Owns: the bulk load (``bulk``), ``check``, ``compact``, ``export`` (for indexing),
``rebalance`` (the load and the rebalance write a new generation's files per section through
``sectionfiles``), the numbers of ``webdb read --stats`` (``stats``) and ``deploy`` (installing
webdb on the hosts of a hosts.ini).

May import: ``webdb.core``, ``webdb.tables``, ``webdb.util``, ``webdb.errors``; ``deploy`` also
``webdb.ndfs`` and the writer's host side. The tools that write tables (bulk load, check,
compact, rebalance) never import the writer.
"""
