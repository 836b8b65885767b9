"""The distributed update (docs/distributed.md): where sections live, one driver, its
transports, per-host results.

    rack = Rack.from_file("hosts.ini", "crawl")          # or Rack.local("/data/crawl")
    res = update(rack, names=["segments/20260101"])      # raises UpdateFailed, .result per host
    res = update(rack, {0: {"paths": [...]}, 1: {...}})  # or what each section applies
    print(res.summary())

``update`` is webdb.writer.driver's: it alone owns open, identity, generation, sync,
breakpoints, prepare and the masters-first commit.  Its transport follows from the rack: an
agent per location (a local process for a path, ssh for a ``[host:*]``; webdb.writer.coordinator)
or, when hosts.ini names a ``dask_scheduler`` (or ``dask=`` does), tasks on that Dask cluster
(webdb.writer.daskrun; ``update_dask`` says so outright).  Every location keeps
``<root>/<db>/webdb.json``, ``CURRENT`` and ``gen/``; the masters (``[group:master]``, else
section 0's location) flip CURRENT first, and that flip is the commit point.

Its parts: webdb.writer.hosts (where sections live, agent links), webdb.writer.driver (the
protocol), webdb.writer.placing (each input read once), webdb.writer.location (a location's
side), webdb.writer.results (per-host results), webdb.writer.section (a section writer).
"""

from __future__ import annotations

from webdb.writer.coordinator import create_rack
from webdb.writer.daskrun import DaskUnavailable
from webdb.writer.driver import Session, update, update_dask
from webdb.writer.hosts import Placement, Rack
from webdb.writer.results import UpdateFailed, UpdateResult
from webdb.writer.spec import HEARTBEAT_TIMEOUT, STAGE_TIMEOUT

__all__ = [
    "HEARTBEAT_TIMEOUT",
    "STAGE_TIMEOUT",
    "DaskUnavailable",
    "Placement",
    "Rack",
    "Session",
    "UpdateFailed",
    "UpdateResult",
    "create_rack",
    "update",
    "update_dask",
]
