"""fetchlist.segment: round trip, torn last lines, crash recovery, corruption, the FetchResult view."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from warcio.archiveiterator import ArchiveIterator

from fetchlist.parse import parse
from fetchlist.segment import FetchEntry, FetchRecord, Segment
from fetchlist.warc import read_index, read_response
from webdb.core.schedule import FetchResult
from webdb.errors import BadInput, CorruptionError
from webdb.tables.records import Page, Status

HTML = b'<html><head><title>T</title></head><body>Hello <a href="/a">A</a> <a href="/b">B</a></body></html>'


def fetched(url, body=HTML, t=1000, etag=None):
    headers = {"content-type": "text/html"} | ({"etag": etag} if etag else {})
    return FetchRecord(
        url,
        Status.FETCHED,
        t,
        200,
        headers,
        "text/html",
        hashlib.md5(body).digest(),
        body,
        parse=parse(url, body, "text/html"),
    )


def records():
    return [
        fetched("http://a.org/1", etag='"e1"'),
        FetchRecord("http://a.org/2", Status.REDIRECT_PERM, 1001, 301, {"location": "/3"}, redirect="http://a.org/3"),
        FetchRecord("http://a.org/4", Status.GONE, 1002, error="denied by robots.txt"),
        FetchRecord("http://a.org/5", Status.NOT_MODIFIED, 1003, 304, {"etag": '"e5"'}),
        FetchRecord("http://a.org/6", Status.RETRY, 1004, error="ReadTimeout"),
        fetched("http://a.org/7", b"\x00\x01binary", 1005),
        fetched("http://a.org/8", "<p>Привет, мир</p>".encode(), 1006),
    ]


def test_fetchlist_round_trip(tmp_path):
    seg = Segment.create(tmp_path / "seg", round=3)
    entries = [
        FetchEntry(
            "http://a.org/1",
            Page(
                "http://a.org/1",
                status=Status.FETCHED,
                fetch_time=5,
                retries=1,
                score=2.5,
                meta={"etag": '"x"', "fit": "1"},
            ),
            ["anchor one", "ещё"],
        ),
        FetchEntry("http://a.org/2"),
    ]
    assert seg.write_fetchlist(0, entries) == 2
    assert seg.write_fetchlist(1, entries[1:]) == 1
    back = Segment.open(seg.path)
    assert back.info["round"] == 3 and back.parts() == [0, 1]
    got = list(back.fetchlist(0))
    assert got[0] == entries[0]
    assert got[1].page == Page("http://a.org/2") and got[1].anchors == []
    assert [e.url for e in back.fetchlist()] == ["http://a.org/1", "http://a.org/2", "http://a.org/2"]
    with pytest.raises(BadInput, match="already written"):
        seg.write_fetchlist(0, entries)


def test_output_round_trip_and_outcomes(tmp_path):
    seg = Segment.create(tmp_path / "seg")
    with seg.writer(0) as w:
        for r in records():
            w.write(r)
    back = Segment.open(seg.path)
    got = list(back.records(0, content=True))
    want = records()
    assert [r.url for r in got] == [r.url for r in want]
    for g, r in zip(got, want):
        assert (g.status, g.fetch_time, g.http_status, g.headers, g.md5, g.redirect, g.error) == (
            r.status,
            r.fetch_time,
            r.http_status,
            r.headers,
            r.md5,
            r.redirect,
            r.error,
        )
        assert g.content == (r.content or b"")
        assert g.parse == r.parse
    assert back.content(got[0], 0) == HTML
    assert [p.url for p in back.parse_records(0)] == ["http://a.org/1", "http://a.org/7", "http://a.org/8"]
    out = list(back.outcomes())
    assert out[0].result == FetchResult(
        "http://a.org/1", Status.FETCHED, 1000, hashlib.md5(HTML).digest(), 2, {"etag": '"e1"'}
    )
    assert out[0].outlinks == [("http://a.org/a", "A"), ("http://a.org/b", "B")]
    assert out[1].result == FetchResult("http://a.org/2", Status.REDIRECT_PERM, 1001, None, 0, None)
    assert out[1].redirect == "http://a.org/3"
    assert out[2].result.status == Status.GONE and out[2].result.md5 is None
    assert out[3].result == FetchResult("http://a.org/5", Status.NOT_MODIFIED, 1003, None, 0, {"etag": '"e5"'})
    assert out[4].result.status == Status.RETRY
    assert out[5].result.num_outlinks == 0 and out[5].outlinks == []
    assert back.check() == {
        "entries": 0,
        "fetched": 7,
        "parsed": 3,
        "content_bytes": sum(len(r.content or b"") for r in want),
        "responses": 3,
    }


def test_files_are_documented_json_lines(tmp_path):
    seg = Segment.create(tmp_path / "seg")
    with seg.writer(0) as w:
        w.write(records()[0])
    ident = json.loads(open(os.path.join(seg.path, "SEGMENT")).read())
    assert ident["format"] == "webdb-segment" and ident["version"] == 2
    line = json.loads(open(seg.file("fetch", 0), encoding="utf-8").readline())
    (loc,) = read_index(seg.content_index(0))
    assert line["status_name"] == "FETCHED" and line["content"] == [loc.offset, loc.length]
    assert seg.file("content", 0).endswith("content/part-00000.warc.gz")
    with open(seg.file("content", 0), "rb") as f:
        recs = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI")) for r in ArchiveIterator(f)]
    assert recs == [("warcinfo", None)] + [(t, "http://a.org/1") for t in ("request", "response", "metadata")]
    assert read_response(seg.file("content", 0), loc.offset, "http://a.org/1").body == HTML
    p = json.loads(open(seg.file("parse", 0), encoding="utf-8").readline())
    assert p["outlinks"] == [["http://a.org/a", "A"], ["http://a.org/b", "B"]] and p["md5"] == line["md5"]


def _append(path, data):
    with open(path, "ab") as f:
        f.write(data)


def test_torn_last_lines_and_recovery(tmp_path):
    seg = Segment.create(tmp_path / "seg")
    seg.write_fetchlist(0, [FetchEntry(r.url) for r in records()])
    w = seg.writer(0)
    for r in records()[:3]:
        w.write(r)
    w.close()
    sizes = {k: os.path.getsize(seg.file(k, 0)) for k in ("fetch", "parse", "content")}
    # a crash while writing the next record: content written, parse record written, fetch line torn
    crashed = fetched("http://a.org/8", b"<p>crash <a href='/z'>z</a></p>")
    _append(seg.file("content", 0), len(crashed.content).to_bytes(4, "little") + crashed.content[:10])
    _append(seg.file("parse", 0), json.dumps({"url": crashed.url, "md5": crashed.md5.hex()}).encode()[:-3])
    _append(seg.file("fetch", 0), b'{"url": "http://a.org/8", "stat')
    _append(seg.file("fetchlist", 0), b'{"url": "http://torn')
    assert [r.url for r in seg.fetch_records(0)] == [r.url for r in records()[:3]]
    assert len(list(seg.fetchlist(0))) == len(records())
    assert seg.check()["fetched"] == 3
    # an orphan parse record (fetch line never started) is skipped by readers too
    with open(seg.file("parse", 0), "rb+") as f:
        f.truncate(sizes["parse"])
    _append(seg.file("parse", 0), b'{"url": "http://a.org/8", "md5": "00"}\n')
    assert [p.url for p in seg.parse_records(0)] == ["http://a.org/1"]
    assert seg.check()["parsed"] == 1
    # reopening for writing cuts what the crash left, then appends cleanly
    with seg.writer(0) as w:
        assert w.done == {r.url for r in records()[:3]}
        assert {k: os.path.getsize(seg.file(k, 0)) for k in sizes} == sizes
        for r in records()[3:]:
            w.write(r)
    assert [r.url for r in seg.records(0)] == [r.url for r in records()]
    assert seg.check()["parsed"] == 3
    assert [len(r.content) for r in seg.records(0, content=True)] == [len(r.content or b"") for r in records()]


def test_corruption_is_reported(tmp_path):
    seg = Segment.create(tmp_path / "seg")
    with seg.writer(0) as w:
        for r in records():
            w.write(r)
    path = seg.file("fetch", 0)
    lines = open(path, "rb").read().split(b"\n")
    lines[1] = b"garbage" + lines[1]
    open(path, "wb").write(b"\n".join(lines))
    with pytest.raises(CorruptionError, match=r"part-00000\.jsonl:2: not a JSON record"):
        list(seg.fetch_records(0))
    with pytest.raises(CorruptionError) as failed:  # the writer will not append to a damaged part
        seg.writer(0)
    good = b"\n".join(x for i, x in enumerate(lines) if i != 1)
    open(path, "wb").write(good)
    seg.writer(0).close()  # the failed writer released its lock (its exception is still alive)
    assert failed.value is not None
    lines[1] = b"[1, 2]"
    open(path, "wb").write(b"\n".join(lines))
    with pytest.raises(CorruptionError, match=":2: not a JSON object"):
        list(seg.fetch_records(0))


@pytest.mark.parametrize("version", [1, 2])
def test_content_damage_detected(tmp_path, version):
    seg = Segment.create(tmp_path / "seg", version=version)
    with seg.writer(0) as w:
        w.write(records()[0])
    cpath = seg.file("content", 0)
    data = bytearray(open(cpath, "rb").read())
    if version == 1:
        data[10] ^= 0xFF
        damage = "does not match its md5"
    else:  # a byte of the body inside the gzip member of the response record
        (loc,) = read_index(seg.content_index(0))
        data[loc.offset + loc.length - 20] ^= 0xFF
        # The member's bytes change with the record's random WARC-Record-ID, so the flipped byte hits a
        # different deflate symbol each run: the stream may fail, or inflate to a record whose
        # payload or headers are wrong (about one run in ten: a garbled WARC-Target-URI).
        # Every outcome is a CorruptionError naming the file and offset.
        damage = "at offset \\d+: (unreadable WARC record|.*WARC-Payload-Digest|the response of |a .* record, not)"
    open(cpath, "wb").write(bytes(data))
    with pytest.raises(CorruptionError, match=damage):
        seg.check()
    open(cpath, "wb").write(bytes(data[:20]))
    with pytest.raises(CorruptionError, match="is not .* bytes"):
        list(seg.records(0, content=True))


def test_duplicate_url_detected(tmp_path):
    seg = Segment.create(tmp_path / "seg")
    with seg.writer(0) as w:
        w.write(records()[1])
        w.write(records()[1])
    with pytest.raises(CorruptionError, match="two fetch records"):
        seg.check()


def test_create_open_and_lock_errors(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(BadInput, match="non-empty"):
        Segment.create(tmp_path / "full")
    with pytest.raises(BadInput, match="not a segment"):
        Segment.open(tmp_path / "full")
    seg = Segment.create(tmp_path / "seg")
    ident = os.path.join(seg.path, "SEGMENT")
    with seg.writer(0):
        with pytest.raises(BadInput, match="being written by another process"):
            seg.writer(0)
        seg.writer(1).close()  # other partitions are independent
    info = json.loads(open(ident).read())
    for bad, msg in [({**info, "version": 99}, "version 99"), ({**info, "format": "x"}, "does not name")]:
        open(ident, "w").write(json.dumps(bad))
        with pytest.raises(BadInput, match=msg):
            Segment.open(seg.path)
    open(ident, "w").write("{not json")
    with pytest.raises(CorruptionError):
        Segment.open(seg.path)
