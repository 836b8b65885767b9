"""Utilities the other parts share.

Owns: the fault points of the crash tests (``faults``), progress reports for long commands
(``progress``) and the external sort of byte records within a memory budget (``sortbuf``).

May import: ``webdb.errors``, ``webdb.tables`` and ``webdb.ndfs`` (the fault hooks damage table
files and stop hosts); never the db core, its tools or the writer.
"""
