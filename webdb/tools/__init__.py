"""Tools that act on a whole database, between rounds: the bulk load, ``check``,
``compact``, ``export``, ``rebalance``, ``stats`` and ``deploy`` (installing webdb on hosts).

May import: ``webdb.core``, ``webdb.tables``, ``webdb.util``, ``webdb.errors``; ``deploy`` also
``webdb.ndfs``. The bulk load, check, compact and rebalance read and write tables without the
writer.
"""
