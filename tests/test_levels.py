"""Levels (docs/design.md §4.2): the link tables as a base plus delta runs.  The same batches
give the same db with levels kept for many rounds, compacted by the stages' policy, turned off,
and compacted by ``webdb compact``; compaction is crash-safe; ``check`` verifies every level;
a db written without levels opens and keeps working."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest
from dbutil import batch_b, commit_next, damage_block, make_db, md5, snapshot

import webdb
from webdb import FetchResult, Page, Status
from webdb.errors import BadInput, CorruptionError
from webdb.tables.format import DELTA_KINDS
from webdb.tables.levels import DEL, PUT, LevelCursor, Levels, Seeker, open_levels
from webdb.tables.merge import Splice
from webdb.tables.table import TableReader, TableWriter
from webdb.writer.edits import STAGE_TABLE
from webdb.writer.engine import level_steps

HERE = os.path.dirname(os.path.abspath(__file__))
# Runs are kept (never merged by size) and merged by count after three.
KEEP = {"level_ratio": 1000.0, "level_runs": 3}


def rounds(w, i: int) -> None:
    """Round i: refetches with new content (outlinks replaced), failures, new pages, deletes."""
    rng = random.Random(100 + i)
    for n in rng.sample(range(300), 40):
        u = f"http://h{n % 7}.example/p{n}"
        c = md5(f"content-{n}-r{i}")
        outs = [(f"http://h{j % 7}.example/p{j}", f"r{i}") for j in rng.sample(range(320), 4)]
        w.apply_fetch(FetchResult(u, Status.FETCHED, 3000 + i, c, len(outs)))
        w.add_outlinks(c, outs)
    for n in rng.sample(range(300), 5):
        w.apply_fetch(FetchResult(f"http://h{n % 7}.example/p{n}", Status.RETRY, 3000 + i))
    for n in rng.sample(range(300), 3):
        w.delete_page(f"http://h{n % 7}.example/p{n}")
    w.add_page(Page(f"http://new{i}.example/"))


def runs_of(db) -> dict[tuple[int, str], int]:
    m = db.manifest()
    return {(j, t): len(e.get("runs", [])) for j, tabs in enumerate(m.tables) for t, e in tabs.items()}


def rounds_of(db) -> dict[tuple[int, str], int]:
    """Rounds whose runs each table holds (a run's file name starts with its generation)."""
    m = db.manifest()
    return {
        (j, t): len({r["file"].partition("-")[0] for r in e.get("runs", [])})
        for j, tabs in enumerate(m.tables)
        for t, e in tabs.items()
    }


def due_runs_of(db) -> list[int]:
    """Runs of each section's due index."""
    return [len(tabs["pages_by_url"]["due"].get("runs", [])) for tabs in db.manifest().tables]


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    """Snapshots after each of 8 rounds, written with levels off (every round rewrites)."""
    db = make_db(tmp_path_factory.mktemp("lv") / "off", level_ratio=0.0)
    out = []
    for i in range(8):
        with db.writer() as w:
            rounds(w, i)
        out.append(snapshot(db))
    return out


@pytest.mark.parametrize("k", [1, 3])
def test_levels_kept_then_merged_by_count_equal_levels_off(tmp_path, expected, k):
    db = make_db(tmp_path / "db", sections=k, **KEEP)
    seen = set()
    for i in range(8):
        with db.writer() as w:
            rounds(w, i)
        assert snapshot(db) == expected[i], f"round {i}"
        with db.reader() as r:
            r.check()
        seen |= set(rounds_of(db).values())
        held = rounds_of(db)
        for (j, t), n in runs_of(db).items():
            assert n == 0 or t in ("links_by_md5", "links_by_url")
            # The count bound counts rounds: LinksByMD5 gets two runs a round (stages 3 and 5).
            assert held[(j, t)] <= 3 and n <= (6 if t == "links_by_md5" else 3)
    assert {1, 2, 3} <= seen | {0}  # runs piled up, and were merged at the fourth round
    assert 0 in seen or max(seen) == 3


def test_runs_merged_into_one_by_count_keep_the_base(tmp_path, expected):
    db = make_db(tmp_path / "db", sections=1, level_ratio=1000.0, level_runs=2)
    bases = set()
    for i in range(6):
        with db.writer() as w:
            rounds(w, i)
        assert snapshot(db) == expected[i]
        e = db.manifest().tables[0]["links_by_url"]
        bases.add(e["file"])
        assert 1 <= len(e["runs"]) <= 2
    assert len(bases) == 1  # never rewritten: only the runs were merged (tiered)
    assert any(r["file"].endswith("r.lbu") for r in db.manifest().tables[0]["links_by_url"]["runs"])
    with db.reader() as r:
        r.check()


def test_levels_merged_by_size_equal_levels_off(tmp_path, expected):
    db = make_db(tmp_path / "db", level_ratio=0.3, level_runs=8)
    for i in range(8):
        with db.writer() as w:
            rounds(w, i)
        assert snapshot(db) == expected[i]
    with db.reader() as r:
        r.check()


def test_levels_turned_off_merges_the_runs_and_goes_on(tmp_path, expected):
    db = make_db(tmp_path / "db", **KEEP)
    for i in range(2):
        with db.writer() as w:
            rounds(w, i)
    assert any(runs_of(db).values())
    for i in range(2, 4):
        with db.writer(level_ratio=0.0) as w:
            rounds(w, i)
        assert snapshot(db) == expected[i]
    assert not any(runs_of(db).values())
    # No file of the runs is left once nothing references them.
    with db.writer():
        pass
    names = [f for d in os.listdir(db.path) if d.startswith("section-") for f in os.listdir(os.path.join(db.path, d))]
    assert not [f for f in names if "d." in f or "c." in f]


def test_db_without_levels_opens_and_gets_levels(tmp_path, expected):
    # A db whose manifests have no "runs" (written before levels, or with them off) is read as
    # it is and keeps levels from its next batch on.
    db = make_db(tmp_path / "db", level_ratio=0.0)
    with db.writer() as w:
        rounds(w, 0)
    assert not any(runs_of(db).values())
    db = webdb.open(db.path)
    with db.writer(**KEEP) as w:
        rounds(w, 1)
    assert any(runs_of(db).values())
    assert snapshot(db) == expected[1]


def test_compact_merges_every_run_as_one_generation(tmp_path, expected):
    db = make_db(tmp_path / "db", **KEEP)
    for i in range(3):
        with db.writer() as w:
            rounds(w, i)
    before = db.manifest().generation
    assert any(due_runs_of(db))  # the due index has runs too
    r = db.compact()
    assert r["generation"] == before + 1 and r["left"] == 0
    assert {c["table"] for c in r["compacted"]} == {"links_by_md5", "links_by_url", "due"}
    assert not any(runs_of(db).values()) and not any(due_runs_of(db))
    assert snapshot(db) == expected[2]
    with db.reader() as rd:
        assert rd.check()["due"] == rd.num_pages
    assert db.compact()["generation"] is None  # nothing left: no new generation
    with db.writer() as w:
        rounds(w, 3)
    assert snapshot(db) == expected[3]


def test_compact_budget(tmp_path):
    db = make_db(tmp_path / "db", sections=3, **KEEP)
    with db.writer() as w:
        rounds(w, 0)
    n = sum(1 for v in runs_of(db).values() if v) + sum(1 for v in due_runs_of(db) if v)
    assert n >= 4
    # An injected clock: each table costs "10 s", the budget 25 s; the estimate stops at 2.
    t = [0.0]

    def clock() -> float:
        t[0] += 5.0
        return t[0]

    from webdb.tools.compact import compact

    r = compact(db, budget=25.0, clock=clock)
    assert 1 <= len(r["compacted"]) < n and r["left"] == n - len(r["compacted"])
    with pytest.raises(BadInput, match="budget"):
        compact(db, budget=0)
    assert db.compact()["left"] == 0


@pytest.mark.parametrize("point", ["compact.after_table", "compact.before_commit", "compact.after_commit"])
def test_compact_killed_keeps_old_or_new_state(tmp_path, expected, point):
    db = make_db(tmp_path / "db", **KEEP)
    for i in range(2):
        with db.writer() as w:
            rounds(w, i)
    gen = db.manifest().generation
    code = "import sys, webdb; webdb.open(sys.argv[1]).compact()"
    p = subprocess.run(
        [sys.executable, "-c", code, db.path], env=dict(os.environ, WEBDB_FAULTS=point), capture_output=True
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    db = webdb.open(db.path)
    want = gen + 1 if point == "compact.after_commit" else gen
    assert db.manifest().generation == want
    assert snapshot(db) == expected[1]
    with db.reader() as r:
        r.check()
    r = db.compact()
    assert (r["generation"] is None) == (point == "compact.after_commit")
    assert not any(runs_of(db).values())
    assert snapshot(db) == expected[1]


@pytest.mark.parametrize(
    "point,settings",
    [
        # Merged into the base by size (the round's run alone is over 1% of the base).
        ("stage3.compact.before_close", {"level_ratio": 0.01, "level_runs": 8}),
        ("stage4.compact.before_close", {"level_ratio": 0.01, "level_runs": 8}),
        # Merged into one run by count (the base is not touched).
        ("stage3.merge_runs.before_close", {"level_ratio": 1000.0, "level_runs": 1}),
        ("stage4.merge_runs.before_close", {"level_ratio": 1000.0, "level_runs": 1}),
        ("stage5.done", {"level_ratio": 1000.0, "level_runs": 1}),
    ],
)
def test_stage_compaction_killed_keeps_old_state(tmp_path, expected, point, settings):
    db = make_db(tmp_path / "db", level_ratio=1000.0, level_runs=8)
    with db.writer() as w:
        rounds(w, 0)  # one run each: the next round's stages compact
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); import webdb, test_levels as T\n"
        "with webdb.open(sys.argv[1]).writer() as w: T.rounds(w, 1)"
    )
    code = code.replace(".writer()", f".writer(**{settings!r})")
    p = subprocess.run(
        [sys.executable, "-c", code, db.path, HERE], env=dict(os.environ, WEBDB_FAULTS=point), capture_output=True
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    db = webdb.open(db.path)
    assert snapshot(db) == expected[0]
    with db.writer(**settings) as w:
        rounds(w, 1)
    assert snapshot(db) == expected[1]
    with db.reader() as r:
        r.check()


def test_compact_cli(tmp_path):
    db = make_db(tmp_path / "db", **KEEP)
    with db.writer() as w:
        batch_b(w)
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "compact", db.path, "--json"], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["generation"] and out["left"] == 0
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "compact", db.path, "--budget", "-1"], capture_output=True, text=True
    )
    assert p.returncode == 2 and "budget" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", "compact", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert p.returncode == 2 and "nope" in p.stderr and "Traceback" not in p.stderr


def _miscounted(path, table: str):
    """A one-section db after a round, then, as a buggy writer could commit it, a generation
    that counts section 0's ``table`` one record more than its levels hold (every file sound);
    returns the db and that generation."""
    db = make_db(path, sections=1, **KEEP)
    with db.writer() as w:
        rounds(w, 0)
    m = db.manifest()
    m.tables[0][table]["records"] += 1
    return db, commit_next(db, m)


def _committed_nothing(db, gen: int) -> None:
    assert db.manifest().generation == gen
    assert not [f for f in os.listdir(db.section_dir(0)) if f.startswith(f"{gen + 1:08d}-")]


def test_compact_refuses_levels_that_disagree_with_the_manifest_count(tmp_path):
    db, gen = _miscounted(tmp_path / "db", "links_by_md5")
    with pytest.raises(CorruptionError, match=r"-c\.\w+: \d+ records after compaction, the manifest counts \d+"):
        db.compact()
    _committed_nothing(db, gen)  # and the new base removed; check names the disagreement too
    with db.reader() as r, pytest.raises(CorruptionError, match=r"\.lbm: \d+ live records, .* says \d+"):
        r.check()
    p = subprocess.run([sys.executable, "-m", "webdb.cli.main", "compact", db.path], capture_output=True, text=True)
    assert p.returncode == 2 and "records after compaction" in p.stderr and "Traceback" not in p.stderr


def test_a_round_does_not_commit_a_rebuilt_base_that_disagrees_with_the_manifest_count(tmp_path):
    db, gen = _miscounted(tmp_path / "db", "links_by_url")
    # The next round's stage 4 merges the runs into a new base (over 1% of it): its count is off.
    with pytest.raises(CorruptionError, match=r"compaction kept \d+ records, the manifest counts \d+"):
        with db.writer(level_ratio=0.01, level_runs=8) as w:
            rounds(w, 1)
    _committed_nothing(db, gen)


def test_check_names_a_damaged_delta_run(tmp_path):
    db = make_db(tmp_path / "db", sections=1, **KEEP)
    with db.writer() as w:
        batch_b(w)
    e = db.manifest().tables[0]["links_by_url"]
    run = os.path.join(db.path, "section-0000", e["runs"][0]["file"])
    data = bytearray(open(run, "rb").read())
    data[20] ^= 0xFF
    os.chmod(run, 0o644)
    open(run, "wb").write(bytes(data))
    with pytest.raises(CorruptionError, match=e["runs"][0]["file"]):
        with db.reader() as r:
            r.check()


def test_manifest_runs_validated(tmp_path):
    db = make_db(tmp_path / "db", sections=1, **KEEP)
    with db.writer() as w:
        batch_b(w)
    gen = db.manifest().generation
    path = db.manifest_path(gen)
    m = json.load(open(path))
    m["tables"][0]["links_by_url"]["runs"][0]["file"] = "../../etc/passwd"
    from webdb.core.dbfiles import validate_manifest

    with pytest.raises(CorruptionError, match=r"runs\[0\]\.file"):
        validate_manifest(m, gen, path)


# ---- the pieces, on tiny tables -----------------------------------------------------------------


def _table(path, kind, recs, block_size=64):
    w = TableWriter(str(path), kind, block_size=block_size, sync=False)
    for k, v in recs:
        w.add(k, v)
    w.close()
    return str(path)


def test_levels_view_newest_wins_and_tombstones_hide(tmp_path):
    kind = 3
    base = _table(tmp_path / "b", kind, [(b"k%03d" % i, b"base%d" % i) for i in range(0, 100, 2)])
    old = _table(
        tmp_path / "r1", DELTA_KINDS["links_by_md5"], [(b"k%03d" % i, PUT + b"r1-%d" % i) for i in range(0, 100, 5)]
    )
    new = _table(
        tmp_path / "r2",
        DELTA_KINDS["links_by_md5"],
        [(b"k%03d" % i, DEL if i % 4 == 0 else PUT + b"r2-%d" % i) for i in range(0, 100, 3)],
    )
    model: dict[bytes, bytes] = {b"k%03d" % i: b"base%d" % i for i in range(0, 100, 2)}
    for i in range(0, 100, 5):
        model[b"k%03d" % i] = b"r1-%d" % i
    for i in range(0, 100, 3):
        if i % 4 == 0:
            model.pop(b"k%03d" % i, None)
        else:
            model[b"k%03d" % i] = b"r2-%d" % i
    v = open_levels(base, [new, old], "links_by_md5", len(model))
    try:
        assert list(v.items()) == sorted(model.items())
        assert list(v.items(b"k050", b"k070")) == [(k, x) for k, x in sorted(model.items()) if b"k050" <= k < b"k070"]
        for i in range(-1, 101):
            assert v.get(b"k%03d" % i) == model.get(b"k%03d" % i)
        assert [kv for ks, vs in v.ranges(b"k010", b"k020") for kv in zip(ks, vs)] == [
            (k, x) for k, x in sorted(model.items()) if b"k010" <= k < b"k020"
        ]
        assert list(v.prefix(b"k09")) == [(k, x) for k, x in sorted(model.items()) if k.startswith(b"k09")]
    finally:
        v.close()


def test_seeker_forward_reads_skip_untouched_blocks(tmp_path):
    p = _table(tmp_path / "b", 3, [(b"k%05d" % i, b"v" * 20) for i in range(2000)])
    t = TableReader(p)
    s = Seeker(t)
    assert s.get(b"k00010") == b"v" * 20 and s.get(b"k00010x") is None
    assert s.range(b"k01000", b"k01003") == ([b"k01000", b"k01001", b"k01002"], [b"v" * 20] * 3)
    assert s.get(b"k01999") == b"v" * 20 and s.get(b"zzz") is None
    assert s.decoded <= 4 < t.nblocks  # only the blocks the keys fall in
    t.close()


def test_level_cursor_writes_only_changes(tmp_path):
    base = _table(tmp_path / "b", 3, [(b"a%02d" % i, b"x%d" % i) for i in range(20)])
    view = Levels(TableReader(base), [], 20)
    out = TableWriter(str(tmp_path / "d"), DELTA_KINDS["links_by_md5"], sync=False)
    cur = LevelCursor(view, out)

    def combine(lo, ok, old_values, payload):
        if payload == "same":
            return ok, old_values()
        if payload == "splice":
            return Splice([(lo + b"5", b"new"), (lo + b"6", None)])
        return [lo + b"9"], [b"only"]

    # Ranges [a0, a1): a00..a09 unchanged; [a1, a2): a15 set, a16 deleted; [b, c): one new key.
    cur.merge_ranges(iter([(b"a0", b"a1", "same"), (b"a1", b"a2", "splice"), (b"b", b"c", "replace")]), combine)
    out.close()
    view.close()
    got = list(TableReader(str(tmp_path / "d")).items())
    assert got == [(b"a15", PUT + b"new"), (b"a16", DEL), (b"b9", PUT + b"only")]
    assert cur.live == 0


def test_level_cursor_put_points_writes_what_merge_points_writes(tmp_path):
    """Stage 5's blind writes: for changed values and stored keys removed (what its edits are),
    the run and the live count are merge_points' own, with no block of the levels read; keys
    out of order are refused, naming the run."""
    base = _table(tmp_path / "b", 3, [(b"a%04d" % i, b"x%d" % i) for i in range(3000)])
    edits_ = [(b"a%04d" % i, None if i % 3 == 0 else b"y%d" % i) for i in range(0, 3000, 7)]

    def run(name: str, blind: bool) -> tuple[list, int, int]:
        view = Levels(TableReader(base), [], 3000)
        out = TableWriter(str(tmp_path / name), DELTA_KINDS["links_by_md5"], sync=False)
        cur = LevelCursor(view, out)
        if blind:
            cur.put_points(iter(edits_))
        else:
            cur.merge_points(iter(edits_), lambda k, old, new: new)
        out.close()
        view.close()
        return list(TableReader(str(tmp_path / name)).items()), cur.live, cur.decoded_blocks

    got, live, decoded = run("blind", True)
    want, want_live, want_decoded = run("read", False)
    assert got == want and live == want_live == -sum(v is None for _, v in edits_)
    assert decoded == 0 < want_decoded
    view = Levels(TableReader(base), [], 3000)
    out = TableWriter(str(tmp_path / "bad"), DELTA_KINDS["links_by_md5"], sync=False)
    with pytest.raises(CorruptionError, match="bad.*out of order"):
        LevelCursor(view, out).put_points(iter([(b"a0002", b"v"), (b"a0001", None)]))
    out.abort()
    view.close()


def _cli(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "webdb.cli.main", *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return p


def test_export_rank_rebalance_read_the_levels(tmp_path, expected):
    # Two dbs with the same content: one with runs in its link tables, one without.
    dbs = {}
    for name, kw in (("lv", KEEP), ("off", {"level_ratio": 0.0})):
        dbs[name] = db = make_db(tmp_path / name, sections=2, **kw)
        for i in range(3):
            with db.writer() as w:
                rounds(w, i)
    assert any(runs_of(dbs["lv"]).values()) and not any(runs_of(dbs["off"]).values())
    out = {n: tmp_path / f"{n}.jsonl" for n in dbs}
    for n, db in dbs.items():
        _cli("export", db.path, "--out", str(out[n]))
    assert out["lv"].read_bytes() == out["off"].read_bytes() and out["lv"].stat().st_size > 0
    for db in dbs.values():
        _cli("rank", db.path, "--iterations", "2")
    assert snapshot(dbs["lv"]) == snapshot(dbs["off"])
    dbs["lv"].rebalance(3)  # reads the merged view of every section, writes bases
    assert not any(runs_of(dbs["lv"]).values())
    assert snapshot(dbs["lv"]) == snapshot(dbs["off"])
    with dbs["lv"].reader() as r:
        r.check()


def _far_round(w) -> None:
    """A round whose edits all fall at the end of both link tables (md5 ff…, URLs of zz.example):
    it reads no block at their start."""
    c = b"\xff" * 16
    w.add_page(Page("http://zz.example/a"))
    w.apply_fetch(FetchResult("http://zz.example/a", Status.FETCHED, 5000, c, 1))
    w.add_outlinks(c, [("http://zz.example/b", "b")])


@pytest.mark.parametrize("table", ["links_by_md5", "links_by_url"])
def test_damage_in_a_level_no_round_rewrites_is_found_by_the_next_writer(tmp_path, table):
    """A round keeps the base of a table kept as levels unread where its edits do not fall; it
    verifies the base's blocks' CRCs (``scrub_rounds``): a damaged block stops the next round
    that changes the table, naming the block, nothing committed.  With ``scrub_rounds = 0`` the
    same round commits and only `check` finds the damage."""
    for setting, found in ((1, True), (0, False)):
        db = make_db(tmp_path / f"db{setting}", sections=1, **KEEP, scrub_rounds=setting)
        base = os.path.join(db.path, "section-0000", db.manifest().tables[0][table]["file"])
        damage_block(base, 0)
        gen = db.committed()
        if found:
            with pytest.raises(CorruptionError, match=f"{base}: block 0 at offset 0: checksum mismatch"):
                with db.writer() as w:
                    _far_round(w)
            assert db.committed() == gen
            continue
        with db.writer() as w:
            _far_round(w)
        assert db.committed() == gen + 1 and db.manifest().tables[0][table]["file"] == os.path.basename(base)
        with db.reader() as r, pytest.raises(CorruptionError, match="block 0 at offset 0: checksum mismatch"):
            r.check()


def test_scrub_rounds_verifies_a_slice_a_round(tmp_path):
    """With ``scrub_rounds = 3`` a round reads a third of the carried levels' blocks (the slice
    of its generation): the damaged first block is found by the round whose slice holds it."""
    db = make_db(tmp_path / "db", sections=1, **KEEP, scrub_rounds=3)
    base = os.path.join(db.path, "section-0000", db.manifest().tables[0]["links_by_md5"]["file"])
    damage_block(base, 0)
    found_at = None
    for _ in range(3):
        gen = db.committed() + 1
        try:
            with db.writer() as w:
                _far_round(w)
        except CorruptionError as e:
            assert "block 0 at offset 0: checksum mismatch" in str(e)
            found_at = gen
            break
    assert found_at is not None and found_at % 3 == 0  # slice 0 of 3: the generations 3, 6, …


@pytest.mark.parametrize(
    ("settings", "step"),
    [({"level_ratio": 0.01}, "compacted"), ({"level_ratio": 1000.0, "level_runs": 1}, "merged_runs")],
)
def test_the_manifest_stage_rows_say_which_sections_compacted_or_merged_runs(tmp_path, settings, step):
    """A stage's row per section names the level step it took (webdb.writer.engine.LEVEL_STEPS)
    and over how many runs (its own included): compacted into a new base, or merged into one
    run; no step named when it kept the runs.  Replayed against the manifest's run counts."""
    db = make_db(tmp_path / "db", sections=2, **settings)
    runs = runs_of(db)
    with db.writer() as w:
        rounds(w, 0)
    stages = {s["stage"]: s["sections"] for s in db.manifest().stages}
    other = "merged_runs" if step == "compacted" else "compacted"
    assert all(not level_steps(r) for st in (1, 2) for r in stages[st])  # the page tables have no levels
    for st in (3, 4, 5):  # in stage order: stage 5 writes LinksByMD5 again, over stage 3's run
        for r in stages[st]:
            key = (r["section"], STAGE_TABLE[st])
            assert other not in r
            runs[key] += 1  # the stage's own run
            if step in r:
                assert r[step] == runs[key]
                runs[key] = 0 if step == "compacted" else 1
    assert runs == runs_of(db)
    assert any(step in r for st in (3, 4, 5) for r in stages[st])
    # Runs kept (within level_runs and level_ratio): no step named.
    db = make_db(tmp_path / "kept", sections=2, level_ratio=1000.0, level_runs=8)
    with db.writer() as w:
        rounds(w, 0)
    assert not [r for s in db.manifest().stages for r in s["sections"] if level_steps(r)]


@pytest.mark.parametrize("seed", range(12))
def test_compact_reading_base_blocks_in_place_equals_the_list_merge(tmp_path, monkeypatch, seed):
    """compact merges a touched base block and the runs' records in its range read in place
    (block.merge_segs) and cuts the output in one call per run (block.run_cuts); the file
    equals, byte for byte, the ones the list paths write (the runs read as keys and values,
    the base block read in place by merge_block or split too, merge_run), and holds the model."""
    import webdb.tables.levels as levels_mod
    from webdb.tables import block
    from webdb.tables.format import TABLE_KINDS

    rnd = random.Random(seed)
    keys = [b"k%05d" % i + rnd.randbytes(rnd.randrange(4)) for i in range(0, 3000, rnd.choice((1, 2, 3)))]
    model = {k: rnd.randbytes(rnd.randrange(40)) for k in keys}
    base = _table(tmp_path / "b", TABLE_KINDS["links_by_md5"], sorted(model.items()), rnd.choice((64, 300, 2048)))
    runs = []
    for r in range(rnd.randrange(1, 5)):
        picks = sorted(set(rnd.sample(keys, rnd.randrange(1, len(keys) // rnd.choice((2, 10, 100)) + 2))))
        picks = sorted(set(picks + [b"k%05dz" % rnd.randrange(3000) for _ in range(rnd.randrange(20))]))
        recs = [(k, DEL if rnd.random() < 0.3 else PUT + rnd.randbytes(rnd.randrange(30))) for k in picks]
        runs.insert(0, _table(tmp_path / f"r{r}", DELTA_KINDS["links_by_md5"], recs, rnd.choice((64, 512))))
        for k, v in recs:
            if v == DEL:
                model.pop(k, None)
            else:
                model[k] = v[1:]
    block_size = rnd.choice((64, 256, 4096))

    def compacted(name: str) -> bytes:
        view = open_levels(base, runs, "links_by_md5", len(model))
        out = TableWriter(str(tmp_path / name), TABLE_KINDS["links_by_md5"], block_size=block_size, sync=False)
        levels_mod.compact(view, out)
        out.close()
        view.close()
        t = TableReader(str(tmp_path / name))
        assert list(t.items()) == sorted(model.items())
        t.check_crcs()
        t.close()
        return (tmp_path / name).read_bytes()

    merged = []
    real = levels_mod.merge_segs
    monkeypatch.setattr(levels_mod, "merge_segs", lambda *a: merged.append(real(*a)) or merged[-1])
    in_place = compacted("in-place")
    if block.COMPILED:
        assert merged and None not in merged  # every touched block went in place
    monkeypatch.setattr(levels_mod, "IN_PLACE", False)  # the runs as lists, the base block in place
    assert compacted("base-in-place") == in_place
    monkeypatch.setattr(levels_mod, "merge_block", lambda *a: None)  # all lists
    assert compacted("lists") == in_place
    monkeypatch.setattr(levels_mod, "IN_PLACE", True)
    monkeypatch.setattr(levels_mod, "merge_segs", lambda *a: None)  # in-place declined: its list path
    assert compacted("declined") == in_place


@pytest.mark.parametrize("in_place", [True, False])
def test_compact_names_a_run_with_a_bad_op_byte(tmp_path, monkeypatch, in_place):
    """A run record whose op byte is neither PUT nor DEL makes merge_segs (and merge_run)
    decline; the list path then names the run, and the new base's file is left to the caller
    (``written`` removes it)."""
    import webdb.tables.levels as levels_mod
    from webdb.errors import CorruptionError
    from webdb.tables.format import TABLE_KINDS

    monkeypatch.setattr(levels_mod, "IN_PLACE", in_place)
    base = _table(tmp_path / "b", TABLE_KINDS["links_by_md5"], [(b"k%03d" % i, b"v%d" % i) for i in range(200)])
    good = _table(
        tmp_path / "good", DELTA_KINDS["links_by_md5"], [(b"k%03d" % i, PUT + b"g") for i in range(0, 200, 7)]
    )
    bad = _table(tmp_path / "bad", DELTA_KINDS["links_by_md5"], [(b"k050", PUT + b"x"), (b"k120", b"\x07y")])
    view = open_levels(base, [bad, good], "links_by_md5", 200)
    out = TableWriter(str(tmp_path / "new"), TABLE_KINDS["links_by_md5"], block_size=256, sync=False)
    with pytest.raises(CorruptionError, match=f"{bad}: delta record b'k120'.*op byte 7"):
        levels_mod.written(view, out, lambda: levels_mod.compact(view, out))
    assert not (tmp_path / "new").exists()
