"""Generate in a rack (fetchlist.generate.generate given a webdb.rack.Rack) against generate on the whole db.

- The superset argument, as a property of ``select``: for random pages split into random parts,
  ``select`` over the union of each part's own ``select`` equals ``select`` over everything.
- k = 1, 2, 3 local section processes: the same chosen URLs, the same fetchlists (entries,
  pages, anchors) and the same db afterwards as the single-process generate, over rounds with
  top-N, host and domain caps, min score and a URL filter; hosts cross section breakpoints and
  registered domains span sections.
- Over real sshd (k = 2): the same, reading each section where it lives.
- Failures: a section agent killed, a host down, a held lock, nothing due: a clear error,
  nothing marked, no segment left, and a rerun works.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dbutil import snapshot
from rackutil import gather, no_leftovers
from sshd import SSHHost

import webdb
from fetchlist.filters import UrlFilter
from fetchlist.generate import MARK, generate, host_key, order_key, select
from fetchlist.normalize import registered_domain
from fetchlist.segment import Segment
from webdb import DAY, Link, Page, Status
from webdb.writer.rack import Rack, UpdateFailed, create_rack, update

NOW = 1_700_000_000
SETTINGS = {"sync": False, "block_size": 512}
WEBDB = [sys.executable, "-m", "webdb.cli.main"]
# Rounds of options run one after another on the same dbs (mark_expiry=0 keeps every page
# eligible, so each round selects from the whole db again; the marks still change the pages).
ROUNDS = [
    {"top_n": 40},
    {"max_per_host": 3},
    {"max_per_domain": 5},
    {"top_n": 60, "max_per_host": 4},
    {"top_n": 50, "max_per_domain": 6},
    {"top_n": 70, "max_per_host": 2, "max_per_domain": 5},
    {"max_per_host": 6, "max_per_domain": 9, "min_score": 1.0},
    {"top_n": 30, "add_days": 2, "fetchers": 3},
    {},
]


# ---- the superset argument, on select() alone --------------------------------------------------------


def _cand(rnd: random.Random, i: int) -> tuple[tuple, bytes, bytes]:
    # few hosts per domain and few scores, so that caps and ties across parts matter
    dom = rnd.randrange(6)
    host = f"{'abcxyz'[rnd.randrange(6)]}.d{dom}.{'com' if dom % 2 else 'co.uk'}"
    url = f"http://{host}/{i}".encode()
    return order_key(rnd.choice([0.5, 1.0, 2.0, 3.0]), url), url, b"v%d" % i


@pytest.mark.parametrize("seed", range(300))
def test_select_over_the_parts_selections_is_the_global_selection(seed: int) -> None:
    rnd = random.Random(seed)
    cands = [_cand(rnd, i) for i in range(rnd.randrange(1, 200))]
    opts = {
        "top_n": rnd.choice([None, 1, 5, 20, 60]),
        "max_per_host": rnd.choice([None, 1, 2, 5]),
        "max_per_domain": rnd.choice([None, 1, 3, 8]),
    }
    k = rnd.randrange(1, 5)
    if rnd.random() < 0.5:  # parts of URL ranges, as sections are
        cands.sort(key=lambda c: c[1])
        cut = sorted(rnd.sample(range(len(cands) + 1), k - 1)) if k > 1 else []
        bounds = [0, *cut, len(cands)]
        parts = [cands[a:b] for a, b in zip(bounds, bounds[1:])]
    else:  # any split at all: the argument does not need URL ranges
        parts = [[] for _ in range(k)]
        for c in cands:
            parts[rnd.randrange(k)].append(c)
    local = [select(p, **opts) for p in parts]
    everything = select(cands, **opts)
    for p, sel in zip(parts, local):  # each part's share of the global selection is in its own
        assert {c[1] for c in everything} & {c[1] for c in p} <= {c[1] for c in sel}
    assert select([c for sel in local for c in sel], **opts) == everything


# ---- local rack == single process --------------------------------------------------------------------


def pages_and_links(n: int = 900, seed: int = 4) -> tuple[list[Page], list[Link]]:
    """Hosts with many pages (so section breakpoints fall inside hosts) whose names sort far
    apart within a registered domain (so a domain spans sections)."""
    rnd = random.Random(seed)
    pages, links = [], []
    for i in range(n):
        dom = rnd.randrange(5)  # hosts of uneven sizes: quantiles fall inside hosts
        host = f"{rnd.choice('aamqqqz')}.site{dom}.{'com' if dom % 2 else 'org.uk'}"
        nf = rnd.choice([0, NOW - DAY, NOW, NOW + DAY, NOW + 3 * DAY, webdb.NEVER])
        score = rnd.choice([0.5, 1.0, 1.0, 2.0, 3.0]) + rnd.randrange(3) * 0.25
        status = Status.GONE if nf == webdb.NEVER else Status.UNFETCHED
        url = f"http://{host}/p{i % 40}/{i}"
        md5 = hashlib.md5(url.encode()).digest()
        pages.append(Page(url, md5=md5, status=status, next_fetch=nf, score=score, next_score=score))
    for i in range(0, n, 3):  # inlinks with anchors from several source domains
        src = pages[i]
        for t in rnd.sample(range(n), 3):
            links.append(Link(src.md5, pages[t].url, f"anchor {i % 11}", webdb.domain_id(f"site{i % 5}.com")))
    return pages, links


def fill_db(db, pages: list[Page], links: list[Link]) -> None:
    with db.writer() as w:
        for p in pages:
            w.add_page_with_score(p)
        for lk in links:
            w.add_link(lk)


def fetchlists_of(seg_dir) -> list[list[tuple]]:
    """Entries of every fetchlist, marks named as the rack's segments are (see renamed)."""
    seg = Segment.open(seg_dir)
    return [[(e.url, renamed([e.page])[0], e.anchors) for e in seg.fetchlist(part)] for part in seg.parts()]


def pages_of(db) -> list[Page]:
    with db.reader() as r:
        return list(r.pages())


def renamed(pages: list[Page]) -> list[Page]:
    """The twin's pages with its marks named as the rack's segments are (want<n> -> got<n>)."""
    out = []
    for p in pages:
        m = p.meta.get(MARK)
        out.append(dataclasses.replace(p, meta={**p.meta, MARK: "got" + m[4:]}) if m and m.startswith("want") else p)
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_local_rack_generate_equals_generate(k: int, tmp_path: Path) -> None:
    pages, links = pages_and_links()
    rack_db = webdb.create(str(tmp_path / "crawl"), sections=k, **SETTINGS)
    twin = webdb.create(str(tmp_path / "twin"), sections=k, **SETTINGS)
    for d in (rack_db, twin):
        fill_db(d, pages, links)
    if k > 1:  # sections cut through hosts, and registered domains span sections
        secs = rack_db.sections()
        by_host: dict[str, set[int]] = {}
        by_domain: dict[str, set[int]] = {}
        for p in pages:
            host, j = host_key(p.url), secs.of_url(p.url.encode())
            by_host.setdefault(host, set()).add(j)
            by_domain.setdefault(registered_domain(host), set()).add(j)
        assert sum(len(v) > 1 for v in by_host.values()) >= k - 1
        assert sum(len(v) > 1 for v in by_domain.values()) >= 3
    rules = tmp_path / "regex-urlfilter.txt"
    rules.write_text("-^http://z\\.site1\\.\n+.\n")
    rack = Rack.local(rack_db.path)
    for n, opts in enumerate([*ROUNDS, {"top_n": 45, "url_filter": UrlFilter.from_files([rules])}]):
        now = NOW + n
        want = generate(twin, tmp_path / f"want{n}", now=now, mark_expiry=0, **opts)
        got = generate(rack, tmp_path / f"got{n}", now=now, mark_expiry=0, **opts)
        assert want.selected > 0 and got.selected == want.selected, opts
        assert fetchlists_of(tmp_path / f"got{n}") == fetchlists_of(tmp_path / f"want{n}"), opts
        assert (got.scanned, got.eligible, got.skipped, got.hosts, got.parts) == (
            want.scanned,
            want.eligible,
            want.skipped,
            want.hosts,
            want.parts,
        )
        assert got.rack.committed and got.rack.hosts.ok
        # at most O(top_n) (or the per-host caps) keys travelled per location
        if opts.get("top_n"):
            assert got.candidates <= opts["top_n"] * len(rack.places)
        assert pages_of(rack_db) == renamed(pages_of(twin)), opts
    with rack_db.reader() as r:
        r.check()
    no_leftovers([tmp_path])


def test_rack_generate_marks_hide_pages_from_the_next_one(tmp_path: Path) -> None:
    """Overlapping rounds never hand out a URL twice: the second sees the first one's marks."""
    pages, links = pages_and_links(400)
    db = webdb.create(str(tmp_path / "crawl"), sections=2, **SETTINGS)
    fill_db(db, pages, links)
    rack = Rack.local(db.path)
    with db.reader() as r:
        due = sum(p.next_fetch <= NOW + 60 for p in r.pages())
    a = generate(rack, tmp_path / "a", now=NOW, top_n=50)
    b = generate(rack, tmp_path / "b", now=NOW + 60, top_n=1000)
    ua = {e[0] for lst in fetchlists_of(tmp_path / "a") for e in lst}
    ub = {e[0] for lst in fetchlists_of(tmp_path / "b") for e in lst}
    assert a.selected == len(ua) == 50 and not ua & ub and b.eligible == due - 50 and b.skipped["marked"] == 50
    with db.reader() as r:
        assert all(r.get_page(u).meta[MARK] == f"a@{NOW}" for u in ua)
    c = generate(rack, tmp_path / "c", now=NOW + 120)
    assert c.segment is None and c.selected == 0 and not (tmp_path / "c").exists()
    assert db.committed() == 3  # load, a, b: nothing to generate commits nothing
    no_leftovers([tmp_path])


@pytest.mark.timeout(300)
def test_local_rack_generate_section_agent_killed_then_rerun(tmp_path: Path) -> None:
    pages, links = pages_and_links(300)
    db = webdb.create(str(tmp_path / "crawl"), sections=3, **SETTINGS)
    fill_db(db, pages, links)
    before = snapshot(db)
    rack = Rack.local(db.path)
    for point in ("dist.s1.step0.before_ship", "dist.s2.step3.before_ship"):
        with pytest.raises(UpdateFailed, match="section . writer killed by signal 9") as e:
            generate(rack, tmp_path / "seg", now=NOW, top_n=80, heartbeat_timeout=30, env={"WEBDB_FAULTS": point})
        assert not e.value.result.committed
        assert "nothing committed" in str(e.value)
        assert snapshot(db) == before and db.committed() == 1  # nothing marked
        assert not (tmp_path / "seg").exists()  # its marks never committed: no segment either
        no_leftovers([tmp_path])
    res = generate(rack, tmp_path / "seg", now=NOW, top_n=80)
    assert res.selected == 80 and db.committed() == 2
    with db.reader() as r:
        assert sum(1 for p in r.pages() if p.meta.get(MARK) == f"seg@{NOW}") == 80


@pytest.mark.timeout(120)
def test_rack_generate_waits_for_the_lock_then_fails_clearly(tmp_path: Path) -> None:
    pages, links = pages_and_links(200)
    db = webdb.create(str(tmp_path / "crawl"), sections=2, **SETTINGS)
    fill_db(db, pages, links)
    w = db.writer()
    try:
        with pytest.raises(UpdateFailed, match=r"generate waited 1s for the writer lock: .*LockedError") as e:
            generate(Rack.local(db.path), tmp_path / "seg", now=NOW, lock_wait=1)
        assert e.value.kind == "LockedError"
    finally:
        w.abort()
    assert not (tmp_path / "seg").exists()
    assert generate(Rack.local(db.path), tmp_path / "seg", now=NOW, top_n=5).selected == 5


def cli(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, WEBDB_FAULTS="")
    return subprocess.run([*WEBDB, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_cli_generate_in_a_local_rack_and_update_exit_codes(tmp_path: Path) -> None:
    """`webdb generate --hosts` on a hosts.ini of local paths, and `webdb update` with a bad
    segment path: exit code 2 (bad input), like every other command."""
    pages, links = pages_and_links(300)
    db = webdb.create(str(tmp_path / "crawl"), sections=2, **SETTINGS)
    fill_db(db, pages, links)
    (tmp_path / "hosts.ini").write_text(f"[ndfs]\ndb = crawl\n\n[sections]\ncount = 2\n0-1 = {tmp_path}\n")
    segs = tmp_path / "segs"
    p = cli(["generate", "--hosts", str(tmp_path / "hosts.ini"), "crawl", str(segs), "--segment", "r1",
             "--top-n", "20", "--max-per-host", "2", "--fetchers", "2"])  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("generated 20 URLs from ") and lines[-1] == str(segs / "r1")
    assert any(line.startswith(str(tmp_path)) and " ok " in line for line in lines), p.stdout  # per-host row
    assert "selecting on 1 location(s)" in p.stderr and "marking 20 pages" in p.stderr
    assert sum(len(x) for x in fetchlists_of(segs / "r1")) == 20
    p = cli(["generate", "--hosts", str(tmp_path / "hosts.ini"), "crawl", str(segs), "--min-score", "100", "--json"])
    assert p.returncode == 1 and json.loads(p.stdout)["segment"] is None, p.stderr
    p = cli(["generate", "--hosts", str(tmp_path / "hosts.ini"), "crawl", str(segs), "--segment", "r1"])
    assert p.returncode == 2 and "r1: exists and is not an empty directory" in p.stderr
    # update: a segment that is not there is bad input (2), not a failed run (1)
    p = cli(["update", db.path, str(tmp_path / "nowhere"), "-q"])
    assert p.returncode == 2, p.stderr
    assert "nothing committed" in p.stderr and "nowhere" in p.stderr and "Traceback" not in p.stderr
    p = cli(["update", db.path, str(segs / "r1"), "-q"])  # a segment not fetched yet: an empty round
    assert p.returncode == 0, p.stderr


# ---- over ssh ----------------------------------------------------------------------------------------

# The agents import the webdb under test, also where the installed one points elsewhere.
AGENT_ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def make_rack(hosts: list[SSHHost], tmp: Path) -> Rack:
    ini = "[ndfs]\ndb = crawl\nconnect_timeout = 3\ntimeout = 5\n\n" + "".join(h.ini() for h in hosts)
    ini += f"\n[sections]\ncount = {len(hosts)}\nhosts = {', '.join(h.name for h in hosts)}\n"
    (tmp / "hosts.ini").write_text(ini)
    return Rack.from_file(tmp / "hosts.ini")


def _load(rack: Rack, roots: list[Path], pages: list[Page], links: list[Link]) -> None:
    """The pages and links as one distributed batch (section j replays the j-th slice)."""
    from rackutil import split

    from webdb.writer.inputs import CallRecorder

    rec = CallRecorder()
    _fill_rec(rec, pages, links)
    update(rack, split(rec.calls, roots, "load"), input_fn="webdb.writer.inputs:replay_calls", env=AGENT_ENV)


def _fill_rec(rec, pages, links) -> None:
    for p in pages:
        rec.add_page_with_score(p)
    for lk in links:
        rec.add_link(lk)


@pytest.mark.ssh
@pytest.mark.timeout(600)
def test_ssh_rack_generate_equals_generate_then_a_host_down(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    hosts = ssh_hosts[:2]
    roots = [h.root for h in hosts]
    rack = make_rack(hosts, tmp_path)
    create_rack(rack, env=AGENT_ENV, **SETTINGS)
    pages, links = pages_and_links(600)
    _load(rack, roots, pages, links)
    twin = webdb.create(str(tmp_path / "twin"), sections=2, **SETTINGS)
    fill_db(twin, pages, links)
    for n, opts in enumerate([{"top_n": 50, "max_per_host": 4}, {"max_per_domain": 7, "fetchers": 2}]):
        want = generate(twin, tmp_path / f"want{n}", now=NOW + n, mark_expiry=0, **opts)
        got = generate(rack, tmp_path / f"got{n}", now=NOW + n, mark_expiry=0, env=AGENT_ENV, **opts)
        assert want.selected and got.selected == want.selected
        assert fetchlists_of(tmp_path / f"got{n}") == fetchlists_of(tmp_path / f"want{n}")
        assert set(got.rack.hosts) == {"h0", "h1"} and got.rack.hosts.ok
    assert pages_of(gather(roots)) == renamed(pages_of(twin))
    with gather(roots).reader() as r:
        r.check()
    gen = int((roots[0] / "crawl" / "CURRENT").read_text().split()[0])

    # h1 goes down while its sections read anchors: nothing is marked, no segment, rerun works
    def down(e: dict) -> None:
        if e["host"] == "h1" and e.get("ev") == "section" and hosts[1].running:
            hosts[1].stop()

    said: list[str] = []
    with pytest.raises(UpdateFailed, match="h1") as e:
        generate(
            rack, tmp_path / "down", now=NOW + 9, top_n=30, heartbeat_timeout=4, events=down, env=AGENT_ENV,
            progress=said.append,
        )  # fmt: skip
    assert "marking 30 pages" in said  # it failed after writing the segment
    # The host's stop kills its section processes too: which the driver hears first (their exit
    # status over the channel, the channel's loss, the silence) depends on timing.
    cause = r"(connection lost|no heartbeat|killed by signal 9)"
    assert re.search(r"h1 \(section 1\) failed at .*" + cause, str(e.value)), str(e.value)
    assert not e.value.result.committed and not (tmp_path / "down").exists()
    assert int((roots[0] / "crawl" / "CURRENT").read_text().split()[0]) == gen
    hosts[1].start()
    res = generate(rack, tmp_path / "down", now=NOW + 9, top_n=30, env=AGENT_ENV)
    assert res.selected == 30 and res.rack.generation == gen + 1
    no_leftovers(roots)
