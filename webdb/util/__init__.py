"""Utilities the other parts share: fault points for crash tests (``faults``), progress
reports (``progress``) and the external sort (``sortbuf``).

May import: ``webdb.errors`` only.
"""
