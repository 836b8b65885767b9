"""bench/peer_webdb.py: a peer reopened on the database a run kept (driver.py --reads-only)
is configured as a fresh one, so a next round on it runs the same way and gives the same db."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from test_bench_rack import workload

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("pages_by_url", "pages_by_md5", "links_by_md5", "links_by_url")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("opt", ["sections=1,sync=0,round=writer", "sections=2,sync=0"])
def test_a_reopened_peer_runs_the_next_round_as_a_fresh_one(tmp_path, monkeypatch, opt):
    bench = str(ROOT / "bench")
    monkeypatch.syspath_prepend(bench)
    # The update's section processes import the round's input (bench/roundtsv.py), as under driver.py.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [bench, os.environ.get("PYTHONPATH")])))
    Peer = importlib.import_module("peer_webdb").Peer
    data = workload(tmp_path / "data")
    pages, links, round_tsv = (str(data / f) for f in ("pages.tsv", "links.tsv", "round.tsv"))
    dumps = {}
    for how in ("fresh", "reopened"):
        work = str(tmp_path / how)
        peer = Peer(work, {}, opt)
        name, settings = peer.name, (peer.round, peer.load_by, peer.k)
        peer.load(pages, links)
        peer.apply_round(round_tsv)
        if how == "reopened":
            peer.close()
            peer = Peer.reopen(work, {}, opt)
            assert (peer.name, (peer.round, peer.load_by, peer.k)) == (name, settings)
        peer.apply_round(round_tsv)  # the next round: new pages become known, fetched again
        dumps[how] = {t: "".join(peer.dump(t)) for t in TABLES}
        peer.close()
    assert dumps["fresh"] == dumps["reopened"]
    assert dumps["fresh"]["pages_by_url"].count("\n") > 36  # the rounds added pages
