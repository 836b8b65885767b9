"""Which sections read which input, so that every input is applied exactly once
(docs/distributed.md, *Inputs*).

An operator names inputs as ``HOST:PATH`` (read at that location) or a bare ``PATH`` (read at
every location holding sections, relative paths under ``<root>/<db>`` there).  At open, each
location fingerprints the paths named for it (``fingerprint``); the driver then places them
(``place_inputs``):

- a bare path that is a different file at every location (each host fetched its own segment)
  is read by each location, its sections splitting it;
- a bare path that is the same file everywhere (roots on one machine, or one shared mount) is
  read once: the rack's sections split it between them;
- any other sharing — the same file at some locations only, or named twice as ``HOST:PATH`` —
  is refused, saying how to name it.
"""

from __future__ import annotations

import hashlib
import os

from webdb.errors import BadInput
from webdb.writer.hosts import Rack

__all__ = ["fingerprint", "place_inputs", "probe_names"]


def fingerprint(path: str) -> str | None:
    """What identifies the file or tree at ``path`` from any host that sees it: the inode,
    size and modification time of every file under it (a shared mount shows the same ones to
    every client; two copies differ at least in their inodes).  None if nothing is there.
    Cost: one stat per file."""
    if not os.path.exists(path):
        return None
    h = hashlib.sha256()
    if os.path.isdir(path):
        for d, dirs, files in os.walk(path):
            dirs.sort()
            for f in sorted(files):
                p = os.path.join(d, f)
                st = os.stat(p)
                h.update(f"{os.path.relpath(p, path)}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    else:
        st = os.stat(path)
        h.update(f"\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _named(rack: Rack, names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Location -> [(name as typed, path there)] of the inputs it is to read."""
    per: dict[str, list[tuple[str, str]]] = {label: [] for label, p in rack.places.items() if p.sections}
    for a in names:
        host, sep, path = a.partition(":")
        if sep and host in rack.places and not a.startswith("/"):
            if host not in per:
                raise BadInput(f"input {a!r}: {host} holds no section, nothing reads its inputs")
            per[host].append((a, path))
        elif sep and host and "/" not in host and host not in rack.places:
            raise BadInput(f"input {a!r}: {host!r} is not a location of the rack ({', '.join(rack.places)})")
        else:
            for lst in per.values():
                lst.append((a, a))
    return {
        label: [(a, p if os.path.isabs(p) else os.path.join(rack.path(label), p)) for a, p in lst]
        for label, lst in per.items()
    }


def probe_names(rack: Rack, names: list[str]) -> dict[str, list[str]]:
    """The paths each location fingerprints at open (its hello's ``inputs``)."""
    return {label: [p for _, p in lst] for label, lst in _named(rack, names).items()}


def place_inputs(rack: Rack, names: list[str], seen: dict[str, dict], shares: bool) -> dict[int, dict]:
    """Section -> ``{"paths", "options"}`` for ``names``, each input read once; ``seen``: the
    fingerprints each location reported.  The sections reading a list of paths split it: with
    ``shares`` (an input function taking ``share``) each gets all of them and ``share=[i,
    m]``, else contiguous runs of whole paths — in order either way, so the batch is the one a
    single writer would make (docs/distributed.md, *Order of calls*)."""
    per = _named(rack, names)
    where: dict[str, list[tuple[str, str]]] = {}  # fingerprint -> [(location, name as typed)]
    for label, lst in per.items():
        for a, p in lst:
            fp = seen.get(label, {}).get(p)
            if fp is not None:
                where.setdefault(fp, []).append((label, a))
    readers = [label for label in per]
    shared: list[str] = []
    for places in where.values():
        if len(places) == 1:
            continue
        labels = sorted({lab for lab, _ in places}, key=readers.index)
        typed = {a for _, a in places}
        if len(typed) == 1 and len(places) == len(readers) and labels == readers:
            shared.append(places[0][1])  # one file every location sees: read once
            continue
        raise BadInput(_ambiguous(sorted(typed), labels, readers))
    if shared and len(shared) < len(names):
        raise BadInput(
            f"input {shared[0]} is one file every location sees, other inputs are each location's own: "
            "update with them separately"
        )
    if shared:
        first = readers[0]
        paths = [p for a, p in per[first] if a in shared]
        return _split(paths, [j for label in readers for j in rack.places[label].sections], shares)
    out: dict[int, dict] = {}
    for label, lst in per.items():
        out.update(_split([p for _, p in lst], rack.places[label].sections, shares))
    return out


def _ambiguous(typed: list[str], labels: list[str], readers: list[str]) -> str:
    if len(typed) > 1:
        return (
            f"inputs {', '.join(typed)} are the same file (seen from {', '.join(labels)}): "
            "name it once, as HOST:PATH of one location or as a bare path if every location sees it"
        )
    others = [x for x in readers if x not in labels]
    return (
        f"input {typed[0]} is one file at {', '.join(labels)} but not at {', '.join(others)}: it would be "
        f"read more than once; name it as HOST:PATH of the one location that reads it (e.g. {labels[0]}:PATH), "
        "and each other location's own copy as HOST:PATH too"
    )


def _split(paths: list[str], sections: list[int], shares: bool) -> dict[int, dict]:
    m = len(sections)
    if shares and m > 1:
        return {j: {"paths": list(paths), "options": {"share": [i, m]}} for i, j in enumerate(sections)}
    return {j: {"paths": paths[len(paths) * i // m : len(paths) * (i + 1) // m]} for i, j in enumerate(sections)}
