"""The benchmark workload's round input (bench/roundtsv.py): its lines as writer calls, and a
bad line named by file and line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import webdb
from webdb.writer.inputs import CallRecorder

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from roundtsv import apply_round_tsv  # noqa: E402


def test_round_tsv_lines_become_calls_and_bad_lines_are_named(tmp_path: Path) -> None:
    good = tmp_path / "good.tsv"
    good.write_text(f"http://a.com/\t1\t{'ab' * 16}\t5\thttp://b.com/\x1fbee\nhttp://c.com/\t0\t\t5\t\n")
    rec = CallRecorder()
    assert apply_round_tsv(rec, [str(good)]) == {"fetched": 1, "failed": 1, "outlinks": 1}
    assert [c.split('"')[3] for c in rec.calls] == ["apply_fetch", "add_outlinks", "apply_fetch"]
    bad = tmp_path / "round.tsv"
    bad.write_bytes(b"http://a.com/\t1\t" + b"ab" * 16 + b"\t5\t\nhttp://a.com/x\t1\tnot-hex\t5\t\n")
    with pytest.raises(webdb.BadInput, match=f"{bad}:2: not a round.tsv line"):
        apply_round_tsv(CallRecorder(), [str(bad)])
