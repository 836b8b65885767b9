"""The scrub of a link-table stage (design.md §4.3, *Files a round keeps unread*): it runs after
the stage's body and checks only the blocks of its slice the body did not verify whole; damage
anywhere in the kept files still stops the round that changes the table, named (file and
block), with the db at its old state.  The file runs again in a child pytest under
``WEBDB_PURE_PYTHON=1`` (the last test)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from bisect import bisect_left

import pytest
from dbutil import damage_block, make_db, md5

from webdb import FetchResult, Page, Status
from webdb.errors import CorruptionError
from webdb.tables import block
from webdb.tables.format import KIND_LINKS_BY_MD5
from webdb.tables.table import TableReader, TableWriter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Runs are kept: never merged by size, nor by count within these tests' rounds.
KEEP = {"level_ratio": 1000.0, "level_runs": 8}


def _block_of(path: str, key: bytes) -> int:
    """The block of a table file that holds the first key >= ``key``."""
    t = TableReader(path)
    try:
        b = bisect_left(t.last_keys, key)
        assert b < t.nblocks and t.first_keys[b] <= key + b"\xff" * 8
        return b
    finally:
        t.close()


def _slice_of(path: str, b: int, shares: int) -> int:
    """The slice (of ``shares``) of a file's blocks that holds block ``b`` (check_crcs' split)."""
    t = TableReader(path)
    n = t.nblocks
    t.close()
    return next(s for s in range(shares) if n * s // shares <= b < n * (s + 1) // shares)


def _data_bytes(path: str) -> int:
    t = TableReader(path)
    try:
        return t.offsets[-1] + t.lengths[-1]
    finally:
        t.close()


def _files(db, table: str) -> tuple[str, list[str]]:
    e = db.manifest().tables[0][table]
    d = os.path.join(db.path, "section-0000")
    return os.path.join(d, e["file"]), [os.path.join(d, r["file"]) for r in e.get("runs", ())]


def _round0(w) -> None:
    """Refetches with new content and outlinks: the links tables get a run."""
    rng = random.Random(100)
    for n in rng.sample(range(300), 40):
        c = md5(f"content-{n}-r0")
        outs = [(f"http://h{j % 7}.example/p{j}", "r0") for j in rng.sample(range(320), 4)]
        w.apply_fetch(FetchResult(f"http://h{n % 7}.example/p{n}", Status.FETCHED, 3000, c, len(outs)))
        w.add_outlinks(c, outs)


def _far_round(w, i: int = 0) -> None:
    """Edits that all fall after the last key of both link tables (md5 ff…, URLs of zz.example):
    the stages read no block of the files they keep."""
    c = b"\xff" * 15 + bytes((i,))
    w.add_page(Page(f"http://zz.example/a{i}"))
    w.apply_fetch(FetchResult(f"http://zz.example/a{i}", Status.FETCHED, 5000, c, 1))
    w.add_outlinks(c, [(f"http://zz.example/b{i}", "b")])


# A page of batch_a and of _round0, its content md5 and its outlinks' targets then.
_A_PAGE, _A_MD5 = "http://h0.example/p0", md5("content-0")
_A_J = random.Random(1).sample(range(300), 5)[0]
_A_TARGET = f"http://h{_A_J % 7}.example/p{_A_J}"
_rng0 = random.Random(100)
_R0_N = _rng0.sample(range(300), 40)[0]
_R0_J = _rng0.sample(range(320), 4)[0]
_R0_PAGE, _R0_MD5 = f"http://h{_R0_N % 7}.example/p{_R0_N}", md5(f"content-{_R0_N}-r0")
_R0_TARGET = f"http://h{_R0_J % 7}.example/p{_R0_J}"


def _read_round(page: str):
    """A round that refetches ``page`` with new content and outlinks: stage 3 deletes the links
    of its old md5 (a range read of it in LinksByMD5), stage 4 its old targets' inlink from it."""

    def run(w) -> None:
        c = md5(f"{page}-read")
        w.apply_fetch(FetchResult(page, Status.FETCHED, 6000, c, 1))
        w.add_outlinks(c, [("http://zz.example/read", "x")])

    return run


def _fails_named(db, path: str, b: int, do) -> None:
    """``do`` as a round of ``db`` fails naming ``path``'s block ``b``; nothing committed, no
    file of the failed generation left in the section; ``check`` names the block too."""
    gen = db.committed()
    before = db.manifest().tables
    t = TableReader(path)
    where = t.where(b)
    t.close()
    with pytest.raises(CorruptionError) as ei:
        with db.writer() as w:
            do(w)
    assert str(ei.value).startswith(f"{where}: "), str(ei.value)
    assert db.committed() == gen and db.manifest().tables == before
    mark = f"{gen + 1:08d}-"
    assert not [f for f in os.listdir(os.path.join(db.path, "section-0000")) if f.startswith(mark)]
    with db.reader() as r, pytest.raises(CorruptionError, match=f"block {b} at offset"):
        r.check()
    # `webdb check` says the same: the block named, exit status 1.
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "check", db.path, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1 and f"{where}: " in p.stdout, p.stdout + p.stderr


def _db(tmp_path, scrub_rounds: int, **settings):
    db = make_db(tmp_path / "db", sections=1, **{**KEEP, **settings}, scrub_rounds=scrub_rounds)
    with db.writer() as w:
        _round0(w)
    return db


def _to_generation_not_in_slice(db, path: str, b: int, shares: int) -> None:
    """Far rounds until the next generation's slice does not hold block ``b`` (run before the
    damage: a far round leaves the base and the older runs as they are)."""
    while (db.committed() + 1) % shares == _slice_of(path, b, shares):
        with db.writer() as w:
            _far_round(w, db.committed())


@pytest.mark.parametrize("scrub_rounds", [1, 3])
@pytest.mark.parametrize("level", ["base", "run"])
def test_damage_in_a_block_the_stage_reads_stops_the_round_whatever_the_slice(tmp_path, level, scrub_rounds):
    """LinksByMD5 is read in whole blocks: the stage's own read verifies the damaged block (and
    names it) even in a generation whose scrub slice does not hold it."""
    db = _db(tmp_path, scrub_rounds)
    base, runs = _files(db, "links_by_md5")
    path, key, page = (base, _A_MD5, _A_PAGE) if level == "base" else (runs[0], _R0_MD5, _R0_PAGE)
    b = _block_of(path, key)
    if scrub_rounds > 1:
        _to_generation_not_in_slice(db, path, b, scrub_rounds)
    damage_block(path, b)
    _fails_named(db, path, b, _read_round(page))


@pytest.mark.parametrize("table", ["links_by_md5", "links_by_url"])
@pytest.mark.parametrize("level", ["base", "run"])
def test_damage_in_a_block_no_edit_reaches_stops_the_round(tmp_path, table, level):
    db = _db(tmp_path, 1)
    base, runs = _files(db, table)
    path = base if level == "base" else runs[0]
    damage_block(path, 0)
    _fails_named(db, path, 0, _far_round)


@pytest.mark.parametrize("level", ["base", "run"])
def test_damage_where_links_by_url_is_read_stops_the_round(tmp_path, level):
    """LinksByURL's blocks are lz4 pieces: a stage's read of some of them checks the block's
    own CRC too (the header's and the pieces' leave it unchecked); the round fails, naming the
    block, whichever of the read and the scrub finds it."""
    db = _db(tmp_path, 1)
    base, runs = _files(db, "links_by_url")
    path, key, page = (base, _A_TARGET, _A_PAGE) if level == "base" else (runs[0], _R0_TARGET, _R0_PAGE)
    b = _block_of(path, key.encode())
    damage_block(path, b)
    _fails_named(db, path, b, _read_round(page))


@pytest.mark.parametrize("level", ["base", "run"])
def test_scrub_rounds_3_finds_an_unread_block_in_its_slice_round(tmp_path, level):
    db = _db(tmp_path, 3)
    base, runs = _files(db, "links_by_md5")
    path = base if level == "base" else runs[0]
    damage_block(path, 0)
    want = _slice_of(path, 0, 3)
    for _ in range(3):
        if (db.committed() + 1) % 3 == want:
            _fails_named(db, path, 0, lambda w: _far_round(w, 99))
            return
        with db.writer() as w:
            _far_round(w, db.committed())
    pytest.fail("no generation's slice held block 0")


@pytest.mark.parametrize("table", ["links_by_md5", "links_by_url"])
@pytest.mark.parametrize("scrub_rounds", [1, 3])
def test_damage_found_by_a_compaction_round(tmp_path, table, scrub_rounds):
    """A round that compacts the table (here: every round) reads every block of its base and
    runs, each verified: a damaged block no edit reaches is named whatever the slice."""
    db = _db(tmp_path, scrub_rounds, level_ratio=0.0001)
    key = _A_MD5 if table == "links_by_md5" else _A_TARGET.encode()
    while True:
        base, runs = _files(db, table)
        assert not runs
        b = _block_of(base, key)
        if (db.committed() + 1) % scrub_rounds != _slice_of(base, b, scrub_rounds) or scrub_rounds == 1:
            break
        with db.writer() as w:
            _far_round(w, db.committed())
    damage_block(base, b)
    _fails_named(db, base, b, _far_round)


def _rows(db, stage: int) -> list[dict]:
    return next(x["sections"] for x in db.manifest().stages if x["stage"] == stage)


@pytest.mark.parametrize("scrub_rounds", [1, 3])
@pytest.mark.parametrize(("table", "stage"), [("links_by_md5", 3), ("links_by_url", 4)])
def test_the_scrub_skips_the_blocks_the_stage_verified(tmp_path, table, stage, scrub_rounds):
    """The stage's row counts the bytes its scrub checked (``scrubbed_bytes``): a round that
    reads nothing of the table's files scrubs all of the generation's slice of them; a round
    that reads some of their blocks scrubs less, one that reads nearly all nearly nothing."""
    db = _db(tmp_path, scrub_rounds)

    def slice_bytes(gen: int) -> int:
        base, runs = _files(db, table)
        total = 0
        for p in (base, *runs):
            t = TableReader(p)
            n, s = t.nblocks, gen % scrub_rounds
            i, end = n * s // scrub_rounds, n * (s + 1) // scrub_rounds
            total += sum(t.lengths[i:end])
            t.close()
        return total

    want = slice_bytes(db.committed() + 1)
    with db.writer() as w:
        _far_round(w, 1)
    assert _rows(db, stage)[0]["scrubbed_bytes"] == want > 0
    full = slice_bytes(db.committed() + 1)
    with db.writer() as w:
        for page in (_A_PAGE, _R0_PAGE, "http://h3.example/p3", "http://h6.example/p6"):
            _read_round(page)(w)
    assert _rows(db, stage)[0]["scrubbed_bytes"] < full
    # A round over every fetched page: the stage reads most blocks, the scrub few.
    full = slice_bytes(db.committed() + 1)
    with db.writer() as w:
        for i in range(0, 300, 3):
            _read_round(f"http://h{i % 7}.example/p{i}")(w)
    assert _rows(db, stage)[0]["scrubbed_bytes"] < full // 4


def test_a_compaction_round_scrubs_nothing(tmp_path):
    db = _db(tmp_path, 1, level_ratio=0.0001)
    with db.writer() as w:
        _far_round(w)
    for stage in (3, 4):
        (row,) = _rows(db, stage)
        assert row.get("compacted") and row["scrubbed_bytes"] == 0, row
        # The new base's own share of the stage: its wall and CPU, within the stage's.
        assert 0 < row["compact_seconds"] <= row["seconds"], row
        assert 0 < row["compact_cpu_seconds"] <= row["cpu_seconds"], row
    assert not any(
        "compact_seconds" in r
        for x in db.manifest().stages
        if x["stage"] != 3 and x["stage"] != 4
        for r in x["sections"]
    )


def test_check_crcs_skips_the_marked_blocks(tmp_path):
    """``check_crcs(share, shares, skip)``: the bytes of the slice's unmarked blocks are read
    (and counted), a damaged marked block is not looked at, a damaged unmarked one is named."""
    path = str(tmp_path / "t.lbm")
    w = TableWriter(path, KIND_LINKS_BY_MD5, 256, "lz4", sync=False)
    for i in range(2000):
        w.add(b"%08d" % i, b"v" * (i % 40))
    w.close()
    t = TableReader(path)
    n = t.nblocks
    assert n > 30
    rng = random.Random(7)
    for shares in (1, 3):
        for _ in range(5):
            mask = bytearray(rng.random() < 0.5 for _ in range(n))
            for s in range(shares):
                i, end = n * s // shares, n * (s + 1) // shares
                want = sum(t.lengths[b] for b in range(i, end) if not mask[b])
                assert t.check_crcs(s, shares, mask) == want
    assert t.check_crcs(0, 1, bytearray([1]) * n) == 0
    assert t.check_crcs(0, 1, bytearray(n)) == t.check_crcs(0, 1)
    t.close()
    damage_block(path, 5)
    t = TableReader(path)
    mask = bytearray(n)
    mask[5] = 1
    t.check_crcs(0, 1, mask)  # the damaged block is marked verified: not read
    mask[5] = 0
    with pytest.raises(CorruptionError, match=f"{path}: block 5 at offset"):
        t.check_crcs(0, 1, mask)
    with pytest.raises(ValueError, match="a mask of 3 blocks"):
        t.check_crcs(0, 1, bytearray(3))
    t.close()


@pytest.mark.timeout(900)
def test_pure_python_fallback_passes_these_tests(tmp_path):
    """This file again, in a child pytest with WEBDB_PURE_PYTHON=1 (the Seekers' reads and the
    scrub's Python loop)."""
    if not block.COMPILED:
        pytest.skip("this run is the pure-Python one")
    env = dict(os.environ, WEBDB_PURE_PYTHON="1")
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist"]
    out = subprocess.run(
        [*cmd, f"--basetemp={tmp_path / 'pt'}", "-k", "not pure_python", os.path.join(HERE, "test_scrub.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout
