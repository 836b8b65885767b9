"""How keys are split into k sections (docs/design.md, *Sections*).

URL-keyed tables (PagesByURL, LinksByURL) split at k-1 breakpoint URLs chosen from the data;
md5-keyed tables (PagesByMD5, LinksByMD5) split the md5 space into k equal ranges by its top
64 bits.  Both splits are ranges, so sections 0..k-1 read in order give the global key order.
"""

from __future__ import annotations

import bisect
import os
import random

# section-JJJJ: four digits keep the directories in order; edit records carry the section
# number in a u16 (docs/format.md §4), so this is also well within the format.
MAX_SECTIONS = 10000


def section_dirname(j: int) -> str:
    """Directory (and ndfs share group) of section j: ``section-JJJJ``."""
    return f"section-{j:04d}"


def section_path(root: str, j: int) -> str:
    return os.path.join(root, section_dirname(j))


class Reservoir:
    """A seeded reservoir sample (Algorithm R) of the URLs a first load touches: its breakpoints.

    The writer and the bulk load (``webdb.tools.bulkarrow``) both sample through this class, so the same
    calls in the same order draw the same sample, hence the same breakpoints
    (``Sections.choose``).  ``items`` holds the first ``size`` items added; the n-th item after
    them (counting from 1) replaces a random one with probability ``size / n``.  Cost: O(1) and
    at most one draw per ``add``; O(size) memory.
    """

    __slots__ = ("size", "seen", "items", "_randrange")

    SEED = 0x5EED

    def __init__(self, size: int):
        self.size = size
        self.seen = 0
        self.items: list = []
        self._randrange = random.Random(self.SEED).randrange

    def add(self, item: object) -> None:
        """Offer ``item`` to the sample."""
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append(item)
            return
        i = self._randrange(self.seen)
        if i < self.size:
            self.items[i] = item


class Sections:
    """The split of one database generation: ``k`` and the URL breakpoints (UTF-8 bytes)."""

    __slots__ = ("k", "breakpoints")

    def __init__(self, k: int, breakpoints: list[bytes] | None = None):
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SECTIONS:
            from webdb.errors import BadInput

            raise BadInput(f"sections must be a whole number in 1..{MAX_SECTIONS}, not {k!r}")
        self.k = k
        self.breakpoints = list(breakpoints or [])
        if self.breakpoints and len(self.breakpoints) != k - 1:
            raise ValueError(f"{k} sections need {k - 1} breakpoints, got {len(self.breakpoints)}")

    @property
    def ready(self) -> bool:
        """False until breakpoints are chosen (k > 1 and nothing loaded yet)."""
        return self.k == 1 or bool(self.breakpoints)

    def of_url(self, url_b: bytes) -> int:
        """Section of a URL key.  Cost: O(log k)."""
        return bisect.bisect_right(self.breakpoints, url_b) if self.breakpoints else 0

    def of_md5(self, md5: bytes) -> int:
        """Section of an md5 key: equal ranges of its top 64 bits (any k, not only powers of 2)."""
        return (int.from_bytes(md5[:8], "big") * self.k) >> 64

    def of_key(self, table: str, key: bytes) -> int:
        """Section of a record key of ``table`` (a name of webdb.tables.format.TABLE_KINDS): the
        one place that knows which tables split by URL.  Cost: O(log k)."""
        if table == "pages_by_url":
            return self.of_url(key)
        if table == "links_by_url":
            return self.of_url(key[: key.index(b"\x00")])
        return self.of_md5(key)

    def key_bounds(self, by_url: bool) -> list[bytes]:
        """Smallest key of sections 1..k-1 of a URL- or md5-keyed stream: a key >= bound j-1
        goes to section j or later (URLs hold no byte below 0x21; md5 keys lead md5 records)."""
        if by_url:
            return list(self.breakpoints)
        return [self.md5_bounds(j) for j in range(1, self.k)]

    def md5_bounds(self, j: int) -> bytes:
        """Smallest md5 prefix (8 bytes) that belongs to section j."""
        lo = -((-j << 64) // self.k)  # ceil(j * 2**64 / k)
        return lo.to_bytes(8, "big") if j else b""

    @staticmethod
    def choose(sample: list[bytes], k: int) -> list[bytes]:
        """k-1 breakpoints at the quantiles of a URL sample (duplicates removed first)."""
        if k == 1:
            return []
        s = sorted(set(sample))
        if not s:
            return []
        return [s[min(len(s) - 1, (i * len(s)) // k)] for i in range(1, k)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sections) and (self.k, self.breakpoints) == (other.k, other.breakpoints)

    def __repr__(self) -> str:
        return f"Sections({self.k}, {self.breakpoints!r})"

    def to_json(self) -> dict:
        return {"k": self.k, "breakpoints": [b.decode("utf-8") for b in self.breakpoints]}

    @classmethod
    def from_json(cls, d: dict) -> Sections:
        return cls(d["k"], [b.encode("utf-8") for b in d.get("breakpoints") or []])
