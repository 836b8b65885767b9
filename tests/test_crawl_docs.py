"""docs/segment.md and docs/crawl.md agree with the code: the worked example is what the code
writes, and every crawl setting is documented."""

from __future__ import annotations

import hashlib
import json
import os
import re

from fetchlist.parse import parse
from fetchlist.segment import FetchEntry, FetchRecord, Segment
from fetchlist.settings import DEFAULTS
from fetchlist.warc import read_index, read_response
from webdb.tables.records import Page, Status

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def _blocks(text: str) -> dict[str, str]:
    """Code blocks of the worked example, by the `file name` line just above each."""
    return {m[1]: m[2] for m in re.finditer(r"^`([\w/.-]+)`[^\n]*\n```\w*\n(.*?)```", text, re.M | re.S)}


def _worked_example(path, version: int) -> Segment:
    seg = Segment.create(path, version=version, round=1)
    old = Page(
        "http://example.com/old",
        status=Status.FETCHED,
        fetch_time=1700000000,
        next_fetch=1702592000,
        meta={"etag": '"x1"'},
    )
    seg.write_fetchlist(
        0,
        [
            FetchEntry("http://example.com/", Page("http://example.com/"), ["Example home"]),
            FetchEntry("http://example.com/old", old, []),
        ],
    )
    ctype = "text/html; charset=utf-8"
    with seg.writer(0) as w:
        w.write(
            FetchRecord(
                "http://example.com/",
                Status.FETCHED,
                1700086400,
                200,
                {"content-type": ctype, "content-length": str(len(BODY))},
                "text/html",
                hashlib.md5(BODY).digest(),
                BODY,
                elapsed=0.0123,
                parse=parse("http://example.com/", BODY, ctype),
            )
        )
        w.write(
            FetchRecord(
                "http://example.com/old",
                Status.REDIRECT_PERM,
                1700086401,
                301,
                {"location": "/new"},
                redirect="http://example.com/new",
                elapsed=0.0031,
            )
        )
    return seg


BODY = b'<html><head><title>Hi</title></head><body>Hello <a href="/a">A</a></body></html>'


def _no_offsets(text: str) -> list[dict]:
    """JSON lines with the WARC offsets (which vary with the gzip size of random record ids) blanked."""
    out = []
    for line in text.splitlines():
        d = json.loads(line)
        for k in ("content", "offset", "length", "end"):
            if isinstance(d.get(k), (int, list)):
                d[k] = "?"
        out.append(d)
    return out


def test_segment_worked_example(tmp_path):
    text = open(os.path.join(DOCS, "segment.md"), encoding="utf-8").read()
    example = text[text.index("## Worked example") :]
    blocks = _blocks(example)
    seg = _worked_example(tmp_path / "seg-0001", 2)
    ident = json.loads(blocks["SEGMENT"])
    assert {k: v for k, v in seg.info.items() if k != "created"} == {k: v for k, v in ident.items() if k != "created"}
    for name in ("fetchlist/part-00000.jsonl", "parse/part-00000.jsonl"):
        assert open(os.path.join(seg.path, name), encoding="utf-8").read() == blocks[name], name
    for name in ("fetch/part-00000.jsonl", "content/part-00000.index.jsonl"):
        got = open(os.path.join(seg.path, name), encoding="utf-8").read()
        assert _no_offsets(got) == _no_offsets(blocks[name]), name
    (loc,) = read_index(seg.content_index(0))
    resp = read_response(seg.file("content", 0), loc.offset, "http://example.com/")
    assert resp.body == BODY and resp.payload_digest in example
    # The legacy version 1 content file, as its hex dump shows it.
    v1 = _worked_example(tmp_path / "v1", 1)
    dump = re.findall(r"^0000[0-9a-f]{4}: .*$", example, re.M)
    shown = bytes.fromhex("".join(line[10:49].replace(" ", "") for line in dump))
    data = open(v1.file("content", 0), "rb").read()
    assert len(data) == 84 and data.startswith(shown) and len(shown) == 48
    assert json.loads(open(v1.file("fetch", 0)).readline())["content"] == [0, 80]
    out = list(seg.outcomes(0))
    assert (out[0].result.num_outlinks, out[0].outlinks) == (1, [("http://example.com/a", "A")])
    assert (out[1].result.status, out[1].redirect) == (Status.REDIRECT_PERM, "http://example.com/new")


def test_every_setting_documented():
    text = open(os.path.join(DOCS, "crawl.md"), encoding="utf-8").read()
    table = text[text.index("## Settings") :]
    documented = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert documented == list(DEFAULTS)


def test_package_exports_and_modules():
    import importlib

    import fetchlist

    assert all(hasattr(fetchlist, name) for name in fetchlist.__all__)
    for mod in ("normalize", "parse", "fetch", "segment", "filters", "robots", "settings", "demo_site"):
        m = importlib.import_module(f"fetchlist.{mod}")
        assert getattr(fetchlist, mod) is m  # a re-exported function never hides its module
