"""The indexer of docs/indexing.md, run as it is on `webdb export` of a demo crawl: a query for a
phrase that only anchors pointing to a page contain finds that page."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from fetchlist.demo_site import DEMO_HOSTS, loopback_ok

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEBDB = [sys.executable, "-m", "webdb.cli.main"]


def indexer_code() -> str:
    text = open(os.path.join(ROOT, "docs", "indexing.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/indexing.md has one python block: the indexer"
    return blocks[0]


def test_the_indexer_is_under_40_lines():
    assert len(indexer_code().splitlines()) < 40


def words(s: str) -> list[str]:
    return re.findall(r"\w+", s.lower())


def contains(hay: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(hay[i : i + n] == phrase for i in range(len(hay) - n + 1))


@pytest.mark.skipif(not all(map(loopback_ok, DEMO_HOSTS)), reason="needs 127.0.0.x addresses")
@pytest.mark.timeout(600)
def test_indexer_finds_a_page_by_its_anchors_only(tmp_path):
    pytest.importorskip("tantivy", reason="the test extra installs tantivy")
    db = tmp_path / "demo.db"
    subprocess.run(
        [*WEBDB, "demo", "--db", db, "--rounds", "3", "--pages", "60", "--json"], check=True, capture_output=True
    )
    segs = sorted(str(p) for p in (tmp_path / "demo.db.segments").iterdir())
    export = tmp_path / "pages.jsonl"
    subprocess.run([*WEBDB, "export", db, "--segments", *segs, "--out", export], check=True, capture_output=True)
    script = tmp_path / "indexer.py"
    script.write_text(indexer_code(), encoding="utf-8")
    pages = [json.loads(line) for line in export.read_text(encoding="utf-8").splitlines()]
    # Anchor phrases (two words or more) found in no page's own title or text, with the pages
    # they point to: only the anchors can find those pages.
    anchor_only: dict[str, set[str]] = {}
    for p in pages:
        for a in p["anchors"]:
            phrase = words(a["text"])
            if len(phrase) >= 2 and not contains(words(p["title"] or "") + words(p["text"] or ""), phrase):
                anchor_only.setdefault(" ".join(phrase), set()).add(p["url"])
    assert anchor_only, "the demo crawl has anchor texts its targets do not contain"
    index = tmp_path / "index"
    subprocess.run([sys.executable, script, export, index], check=True, capture_output=True)
    checked = 0
    for phrase, targets in sorted(anchor_only.items())[:5]:
        out = subprocess.run(
            [sys.executable, script, export, index, f'"{phrase}"'], check=True, capture_output=True, text=True
        )
        found = [line.split("\t")[1] for line in out.stdout.splitlines()]
        # The phrase is also in the text of the linking pages (a page's text holds its link
        # texts), so they are found too; a target is among the ten best (anchors are boosted).
        assert targets & set(found), (phrase, targets, found)
        checked += 1
    assert checked
    # "Next host 1" links host 0's home page to host 1's, whose own text never says it.
    host1 = next(p["url"] for p in pages if p["title"] == "Home of host 1")
    assert "next host 1" in anchor_only and host1 in anchor_only["next host 1"]
    out = subprocess.run(
        [sys.executable, script, export, index, '"next host 1"'], check=True, capture_output=True, text=True
    )
    assert out.stdout.splitlines()[0].split("\t")[1] == host1
    # Indexing the same export again replaces documents instead of adding copies.
    subprocess.run([sys.executable, script, export, index], check=True, capture_output=True)
    again = subprocess.run(
        [sys.executable, script, export, index, '"next host 1"'], check=True, capture_output=True, text=True
    )
    assert again.stdout == out.stdout
