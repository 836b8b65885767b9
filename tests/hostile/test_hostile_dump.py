"""``read --dump`` TSV: backslash and every control character escaped, so a dump of hostile
anchors and meta parses back losslessly (``tsv_unescape``) into what the JSON dump holds."""

from __future__ import annotations

import json

import pytest
from hostile_util import cli

import webdb
from webdb.cli.read import tsv_escape, tsv_unescape
from webdb.tables.records import Link, Page, Status

NASTY = [
    "tab\there",
    "new\nline",
    "cr\rlf\r\n",
    "back\\slash \\t \\n \\\\",
    "nul\x00bell\x07esc\x1b",
    "del\x7f c1\x85\x9f",
    "line sep\u2028para sep\u2029",
    "\\x41 \\u0041 literal escapes",
    "caf\u00e9 \u65e5\u672c \U0001f600",
    "",
]


@pytest.mark.parametrize("s", NASTY)
def test_escape_round_trip_and_no_separator_survives(s):
    cell = tsv_escape(s)
    assert tsv_unescape(cell) == s
    assert not any(c in cell for c in "\t\n\r\x00\u2028\u2029\x85")
    assert len(cell.splitlines() or [""]) == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("table", ["pages", "links"])
def test_dump_parses_back_to_the_json_dump(tmp_path, table):
    db = webdb.create(str(tmp_path / "db"), sync=False)
    with db.writer() as w:
        for i, s in enumerate(NASTY):
            url = f"http://example.com/{i}"
            w.add_page(Page(url, md5=bytes([i]) * 16, status=Status.FETCHED, meta={"note": s, f"k{s[:3]}": "v"}))
            w.add_link(Link(bytes([i]) * 16, url, anchor=s))
    tsv = cli("read", tmp_path / "db", "--dump", table)
    jsonl = cli("read", tmp_path / "db", "--dump", table, "--format", "jsonl")
    assert tsv.returncode == 0 and jsonl.returncode == 0, tsv.stderr + jsonl.stderr
    lines = tsv.stdout.split("\n")
    assert lines[-1] == ""
    cols = lines[0][1:].split("\t")
    want = [json.loads(x) for x in jsonl.stdout.split("\n")[:-1]]  # not splitlines: U+2028 is raw in JSON
    got = [dict(zip(cols, map(tsv_unescape, ln.split("\t")))) for ln in lines[1:-1]]
    assert len(got) == len(want) == len(NASTY)
    for g, w in zip(got, want):
        for c in cols:
            v = w[c]
            if isinstance(v, dict):
                v = json.dumps(v, sort_keys=True, ensure_ascii=False) if v else ""
            assert g[c] == str(v), c
    if table == "pages":
        assert sorted(json.loads(g["meta"])["note"] for g in got) == sorted(NASTY)
    else:
        assert sorted(g["anchor"] for g in got) == sorted(NASTY)
