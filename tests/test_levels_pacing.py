"""The levels policy as a pure function (``levels.level_step``, docs/design.md §4.3): which step
a stage takes after writing its run, and over many rounds of a section's two link tables, that
no round rebuilds both bases unless one outgrew the slack or the run count, that a lookup reads
the base and the runs of at most ``level_runs`` rounds of a table (one run a round for
LinksByURL, two for LinksByMD5), and that putting merges off never makes more of them.  Then
the same on a real db: equal to levels off, ``check`` passes, a merge was put off."""

from __future__ import annotations

import pytest
from dbutil import make_db, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from test_levels import expected, rounds  # noqa: F401  (``expected`` is a fixture)

from webdb.tables.levels import COMPACT, DEFER_RUNS, DEFER_SLACK, KEEP, MERGE_RUNS, level_step


@pytest.mark.parametrize(
    "base,runs,ratio,max_runs,rebased,step",
    [
        (1000, [100], 0.5, 4, False, KEEP),
        (1000, [100, 100, 100, 100, 100], 0.5, 4, False, MERGE_RUNS),  # 5 runs, 500 bytes: not over
        (1000, [300, 201], 0.5, 4, False, COMPACT),
        (1000, [300, 201], 0.5, 4, True, KEEP),  # another table got a new base this round: a round later
        (1000, [400, 350], 0.5, 4, True, KEEP),  # 750 = DEFER_SLACK x 0.5 x 1000: still put off
        (1000, [400, 351], 0.5, 4, True, COMPACT),  # past the slack
        (1000, [200, 100, 100, 100, 100], 0.5, 4, True, KEEP),  # one run past the count: put off too
        (1000, [100, 100, 100, 100, 100], 0.5, 4, True, KEEP),  # not merged into a run the round before a base
        (1000, [200, 100, 100, 100, 100, 1], 0.5, 4, True, COMPACT),  # past the count's slack
        (1000, [10, 10, 10, 10, 10, 10], 0.5, 4, True, MERGE_RUNS),
        (1000, [10], 0.0, 4, False, COMPACT),  # ratio 0: any run is merged
        (0, [10], 0.5, 4, True, COMPACT),  # an empty base: over any share of it
    ],
)
def test_level_step(base, runs, ratio, max_runs, rebased, step):
    assert level_step(base, runs, ratio, max_runs, rebased) == step


@pytest.mark.parametrize(
    "runs,rounds,rebased,step",
    [
        ([30, 40, 30, 40, 30, 40, 30], 4, False, KEEP),  # 7 runs of 4 rounds: within the count
        ([30, 40, 30, 40, 30, 40, 30], None, False, MERGE_RUNS),  # counted as files: 7 > 4
        ([30, 40, 30, 40, 30, 40, 30, 40, 30], 5, False, MERGE_RUNS),  # 5 rounds, 310 bytes
        ([30, 40, 30, 40, 30, 40, 30, 40, 30], 5, True, KEEP),  # put off: 5 = 4 + DEFER_RUNS rounds
        ([30, 40, 30, 40, 30, 40, 30, 40, 30, 40, 30], 6, True, MERGE_RUNS),  # past the count's slack
        ([300, 201], 1, False, COMPACT),  # the size bound is the same
    ],
)
def test_level_step_counts_rounds(runs, rounds, rebased, step):
    # LinksByMD5 gets two runs a round (stage 3's, stage 5's): the count bound counts rounds.
    assert level_step(1000, runs, 0.5, 4, rebased, rounds) == step


def simulate(rounds_growth, ratio: float, max_runs: int, paced: bool = True, work: list | None = None):
    """A section's LinksByMD5 (a run in stage 3 and one in stage 5) and LinksByURL (stage 4)
    over rounds; ``rounds_growth`` gives each round's three run sizes as shares of the base.
    Returns per round the tables compacted and whether each was forced, and the most files and
    the largest runs/base share a table held between stages; ``work`` (if given) gets each
    round's bytes merged (a new base: the base and the runs; a tiered merge: the runs)."""
    base = {"md5": 1000, "url": 1000}  # bytes, whole numbers as the policy sees them
    runs: dict[str, list[int]] = {"md5": [], "url": []}
    gens: dict[str, list[int]] = {"md5": [], "url": []}  # the round that wrote each run
    out = []
    most_files, most_share = 0, 0.0
    for g, (s3, s4, s5) in enumerate(rounds_growth):
        done: list[tuple[str, bool]] = []
        merged = 0
        for table, share in (("md5", s3), ("url", s4), ("md5", s5)):
            runs[table].insert(0, int(share * base[table]))
            gens[table].insert(0, g)
            rebased = paced and bool(done)
            nrounds = len(set(gens[table]))
            step = level_step(base[table], runs[table], ratio, max_runs, rebased, nrounds)
            if step == COMPACT:
                # Forced: it would have been compacted even with another table rebased.
                forced = level_step(base[table], runs[table], ratio, max_runs, True, nrounds) == COMPACT
                merged += base[table] + sum(runs[table])
                base[table] += sum(runs[table]) // 2  # half the runs' bytes are new records
                runs[table], gens[table] = [], []
                done.append((table, forced))
            elif step == MERGE_RUNS:
                merged += sum(runs[table])
                runs[table], gens[table] = [sum(runs[table])], [g]
            # Files a lookup reads, as rounds' worth: LinksByMD5 holds two runs a round.
            most_files = max(most_files, 1 + len(set(gens[table])))
            most_share = max(most_share, sum(runs[table]) / base[table])
        out.append(done)
        if work is not None:
            work.append(merged)
    return out, most_files, most_share


def test_benchmark_growth_no_round_rebuilds_both_tables():
    # About the 1M benchmark's growth: LinksByMD5 a quarter of its base a round (stage 3) plus a
    # little (stage 5's flags), LinksByURL a sixth.  Unpaced, the two meet every few rounds.
    growth = [(0.22, 0.17, 0.04)] * 30
    paced, files, share = simulate(growth, 0.5, 4)
    unpaced, _, _ = simulate(growth, 0.5, 4, paced=False)
    assert any(len(r) == 2 for r in unpaced)
    assert all(len(r) <= 1 for r in paced)
    assert sum(map(len, paced)) <= sum(map(len, unpaced))
    assert files <= 5 + DEFER_RUNS and share <= DEFER_SLACK * 0.5 + 1e-9


def test_benchmark_3m_growth_no_tiered_merge_beside_a_new_base():
    # About the 3M benchmark's growth: LinksByMD5 a twentieth of its base in stage 3 and a
    # fourteenth in stage 5, LinksByURL a tenth in stage 4.  LinksByURL passes the run count in
    # the round LinksByMD5 gets its new base; merging its runs then, a round before its own new
    # base, was the longest round's second merge.
    growth = [(0.05, 0.1, 0.07)] * 30
    paced_work: list[int] = []
    unpaced_work: list[int] = []
    paced, files, _ = simulate(growth, 0.5, 4, work=paced_work)
    simulate(growth, 0.5, 4, paced=False, work=unpaced_work)
    assert all(len(r) <= 1 for r in paced)
    assert max(paced_work) < max(unpaced_work)
    assert sum(paced_work) <= sum(unpaced_work)
    assert files <= 5 + DEFER_RUNS


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(*[st.floats(0.0, 0.6)] * 3), min_size=1, max_size=40),
    st.sampled_from([0.2, 0.3, 0.5, 1.0]),
    st.integers(1, 6),
)
def test_paced_policy_bounds(growth, ratio, max_runs):
    paced, files, share = simulate(growth, ratio, max_runs)
    unpaced, _, _ = simulate(growth, ratio, max_runs, paced=False)
    # A lookup reads at most the base and max_runs runs of a table (one more in a round that put
    # a step off), and the runs never hold more than the slack over the base between stages.
    assert files <= max_runs + 1 + DEFER_RUNS
    assert share <= DEFER_SLACK * ratio + 1e-9
    for done in paced:
        # A second new base in a round only for a table that outgrew the slack or the count.
        assert all(forced for _, forced in done[1:])
    # Putting a merge off never makes more merges over the same rounds than merging at once,
    # give or take the one a round's shift can push into the last round.
    assert sum(map(len, paced)) <= sum(map(len, unpaced)) + 1


def test_db_with_merges_put_off_equals_levels_off(tmp_path, expected):  # noqa: F811
    # level_ratio 0.3: this workload's two link tables pass it in the same rounds, so one of
    # them waits a round; the db equals the one written with levels off, and check passes.
    ratio = 0.3
    db = make_db(tmp_path / "db", sections=2, level_ratio=ratio, level_runs=4)
    put_off = 0
    for i in range(8):
        with db.writer() as w:
            rounds(w, i)
        assert snapshot(db) == expected[i], f"round {i}"
        with db.reader() as r:
            r.check()
        m = db.manifest()
        new_base = f"{m.generation:08d}-"
        for tabs in m.tables:
            rebuilt = [t for t in ("links_by_md5", "links_by_url") if tabs[t]["file"].startswith(new_base)]
            for t in ("links_by_md5", "links_by_url"):
                e = tabs[t]
                run_bytes = sum(r["bytes"] for r in e.get("runs", ()))
                assert len({r["file"].partition("-")[0] for r in e.get("runs", ())}) <= 4  # rounds of runs
                if run_bytes > ratio * e["bytes"]:
                    # Kept over the ratio only because the other table was rebuilt this round.
                    assert rebuilt and t not in rebuilt
                    assert run_bytes <= DEFER_SLACK * ratio * e["bytes"]
                    put_off += 1
    assert put_off
