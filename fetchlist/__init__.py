"""The crawl side of webdb: URL normalization and filters, fetch, parse, segments."""
