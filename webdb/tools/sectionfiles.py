"""One table's files of a new generation, one per section: what a bulk load and a rebalance write
(each file named ``NNNNNNNN-s0.<table>``, as stage 0 of a batch would name it)."""

from __future__ import annotations

import os

from webdb.core.sections import section_path
from webdb.core.settings import Settings
from webdb.tables.format import TABLE_KINDS, TABLE_SUFFIX
from webdb.tables.table import TableWriter

__all__ = ["SectionFiles", "section_writer"]


class SectionFiles:
    """One table's files of a new generation, one per non-empty section (opened on first use);
    ``close`` records them in the manifest's per-section ``tables``."""

    def __init__(self, root: str, gen: int, table: str, s: Settings, tables: list[dict]):
        self.root, self.gen, self.table, self.s, self.tables = root, gen, table, s, tables
        self.writers: dict[int, TableWriter] = {}

    def writer(self, j: int) -> TableWriter:
        w = self.writers.get(j)
        if w is None:
            w = self.writers[j] = section_writer(self.root, self.gen, self.table, self.s, j)
        return w

    def close(self) -> None:
        for j, w in sorted(self.writers.items()):
            info = w.close()
            self.tables[j][self.table] = {
                "file": os.path.basename(w.path),
                "records": info["records"],
                "bytes": info["bytes"],
            }

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


def section_writer(root: str, gen: int, table: str, s: Settings, j: int) -> TableWriter:
    """The writer of ``table``'s file of section j in generation ``gen`` (stage 0 of the batch)."""
    path = os.path.join(section_path(root, j), f"{gen:08d}-s0.{TABLE_SUFFIX[table]}")
    return TableWriter(path, TABLE_KINDS[table], s.block_size, s.codec, sync=s.sync)
