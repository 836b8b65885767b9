"""The coordinator of a distributed update (docs/distributed.md): where sections live, agents
started locally or over ssh (fabric), liveness, the two-phase commit, per-host results.

    rack = Rack.from_file("hosts.ini", "crawl")          # or Rack.local("/data/crawl")
    res = update(rack, {0: {"paths": [...]}, 1: {...}})  # raises UpdateFailed, .result per host
    print(res.summary())
    res = update_dask(rack, "tcp://scheduler:8786", {...})  # the same batch on a Dask cluster

One agent runs at every location that holds a section or a master copy: over ssh for a
``[host:*]``, as a local process for a path.  Every location keeps ``<root>/<db>/webdb.json``,
``CURRENT`` and ``gen/``; the master locations (``[group:master]``, else section 0's) flip
CURRENT first, and that flip is the commit point.

This module is the public face of the distributed writer; its parts are rooms of one concern:
webdb.writer.hosts (where sections live, agents started and stopped), webdb.writer.coordinator
(liveness, breakpoints, manifest, two-phase commit), webdb.writer.results (per-host results),
webdb.writer.distributed (the agent), webdb.writer.section (a section writer).
"""

from __future__ import annotations

from webdb.writer.coordinator import HEARTBEAT_TIMEOUT, STAGE_TIMEOUT, Session, create_rack, parse_inputs, update
from webdb.writer.daskrun import DaskUnavailable, update_dask
from webdb.writer.hosts import Placement, Rack
from webdb.writer.results import UpdateFailed, UpdateResult

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
    "parse_inputs",
    "update",
    "update_dask",
]
