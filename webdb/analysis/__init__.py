"""Tools built on the db: link analysis, dedup by content, URL-prefix statistics, filter generation.

See docs/analysis.md.  Each reads a committed snapshot in streaming passes with bounded memory.
"""
