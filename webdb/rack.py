"""The distributed update as other packages use it (the crawl's ``generate`` on a rack, tools): a
``Rack`` of hosts from hosts.ini, ``update`` with its result and its error (over agents, or a
Dask cluster when hosts.ini or ``dask=`` names one; ``update_dask`` says so outright), and the
default liveness bounds.  docs/distributed.md.

A public module of webdb: the implementation lives in ``webdb.writer`` (rack.py, distributed.py)
and may move inside it; this module's names stay.
"""

from webdb.writer.rack import (
    HEARTBEAT_TIMEOUT,
    STAGE_TIMEOUT,
    DaskUnavailable,
    Rack,
    UpdateFailed,
    UpdateResult,
    update,
    update_dask,
)

__all__ = [
    "HEARTBEAT_TIMEOUT",
    "STAGE_TIMEOUT",
    "DaskUnavailable",
    "Rack",
    "UpdateFailed",
    "UpdateResult",
    "update",
    "update_dask",
]
