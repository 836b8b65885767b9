"""Docs that run: the worked example of docs/format.md is rebuilt and compared byte for byte."""

from __future__ import annotations

import os
import re

from webdb.tables.format import KIND_PAGES_BY_URL
from webdb.tables.table import TableReader, TableWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dump_lines(md: str) -> dict[int, bytes]:
    """offset -> bytes of the xxd lines quoted in the worked example."""
    sec = md[md.index("### 1.4 Worked example") :]
    out = {}
    for m in re.finditer(r"^([0-9a-f]{8}): ((?:[0-9a-f]{4} ?){1,8})", sec, re.M):
        out[int(m.group(1), 16)] = bytes.fromhex(m.group(2).replace(" ", ""))
    return out


def test_format_worked_example_matches_real_bytes(tmp_path):
    w = TableWriter(str(tmp_path / "ex"), KIND_PAGES_BY_URL, 32768, "none", sync=False)
    w.add(b"http://a/", b"V1")
    w.add(b"http://a/b", b"V22")
    assert w.close({}) == {"records": 2, "bytes": 260}
    data = (tmp_path / "ex").read_bytes()
    lines = _dump_lines(open(os.path.join(ROOT, "docs", "format.md")).read())
    assert len(lines) >= 10
    for off, b in lines.items():
        assert data[off : off + len(b)] == b, f"docs/format.md worked example differs at offset {off:#x}"
    t = TableReader(str(tmp_path / "ex"), KIND_PAGES_BY_URL)
    assert list(t.items()) == [(b"http://a/", b"V1"), (b"http://a/b", b"V22")]


def test_api_examples_run(tmp_path, monkeypatch, capsys):
    md = open(os.path.join(ROOT, "docs", "api.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", md, re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    for code in blocks:
        exec(compile(code, "docs/api.md", "exec"), ns)
    assert "url has no scheme" in capsys.readouterr().out
