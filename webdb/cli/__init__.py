"""The ``webdb`` command: one module per subcommand, each with ``add_parser`` and ``run``.

Owns: argument parsing, messages and exit statuses (2 for bad input) of every subcommand.
The top of the picture: it glues the db and the crawl, and nothing imports it.

May import: any part of webdb and ``fetchlist`` (the only part of webdb that may import the
crawl, with deploy: contract ``db-without-crawl`` in pyproject.toml).
"""
