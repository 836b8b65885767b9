"""What one section's writer does in one batch of a rack update, as the typed values both sides
use: the driver builds a ``SectionSpec`` per section (``driver.section_specs``); a section writer
(``section.SectionWriter``, or the Dask tasks of ``dasktasks``) reads one and reports its part of
the batch as a ``Prepared``.  JSON only on the way: the agents' ``run`` command and events, and
Dask's task arguments and results (``to_json`` / ``from_json``).  Also the ``Options`` (liveness
bounds) every transport of the driver reads.  The driver and its transports (``coordinator``,
``daskrun``) import this module, never each other the other way: the driver picks a transport.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from webdb.core.sections import Sections
from webdb.core.settings import Settings

__all__ = ["HEARTBEAT_TIMEOUT", "STAGE_TIMEOUT", "Options", "Prepared", "SectionInput", "SectionSpec"]

# Defaults of the liveness bounds (seconds); both are options of update().
HEARTBEAT_TIMEOUT = 30.0
STAGE_TIMEOUT = 3600.0


@dataclass
class Prepared:
    """Section ``section``'s part of the batch, as its writer reports it after stage 5: its
    new tables and status, the batch's breakpoints, its input's counts and what it shipped."""

    section: int
    tables: dict
    status: dict
    sections: dict
    api: dict
    input: Any
    stages: list[dict]
    shipped: list[dict]
    step0: dict
    seconds: float
    cpu_seconds: float

    @classmethod
    def from_json(cls, d: dict) -> Prepared:
        return cls(**{f.name: d[f.name] for f in fields(cls)})


@dataclass
class Options:
    """How a run is bounded and watched (every transport reads the same ones)."""

    heartbeat_timeout: float = HEARTBEAT_TIMEOUT
    stage_timeout: float = STAGE_TIMEOUT
    progress: Callable[[dict], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic


@dataclass
class SectionInput:
    """What the section applies in step 0: ``fn`` (``module:function``, webdb.writer.inputs)
    called on ``paths`` with ``options``."""

    fn: str
    paths: list[str]
    options: dict[str, Any]


@dataclass
class SectionSpec:
    """Section ``section`` of ``k`` in one batch: where it runs (``host``, the db ``db`` at
    ``path`` under the location's ``root``; ``local_host`` the hosts.ini name of that host when
    it is remote), how the rack is described (hosts.ini text ``ini`` — or, for a rack built as
    data, its ``config`` — with ``ini_source`` and ``base_dir`` for its relative paths), the
    batch and generation, the committed ``sections`` split, ``tables`` and ``status`` of every
    section (the committed generation's), the ``settings`` (``memory_mb`` already this
    section's share), its ``input`` and the ``stage_timeout``.

    On Dask only: ``section_at`` (section to location label), the ``lease`` of the batch and,
    for the section that leads its location, that location as ``lead``."""

    section: int
    k: int
    host: str
    db: str
    path: str
    root: str
    local_host: str | None
    ini: str | None
    config: dict | None
    ini_source: str
    base_dir: str
    batch: str
    gen: int
    sections: Sections
    tables: list[dict]
    status: list[dict]
    settings: Settings
    input: SectionInput
    stage_timeout: float
    section_at: list[str] | None = None
    lease: str | None = None
    lead: dict | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["sections"] = self.sections.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> SectionSpec:
        v = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        v["sections"] = Sections.from_json(d["sections"])
        v["settings"] = Settings.from_json(d["settings"])
        v["input"] = SectionInput(**d["input"])
        return cls(**v)
