"""Hostile segments: a malformed record is reported once with ``file:line`` and the reason,
exit 2, nothing committed; bad URLs inside well-formed records are counted and skipped;
out-of-range times are rejected where they enter."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from hostile_util import assert_error, cli

import webdb
from fetchlist.crawl import update_db
from fetchlist.parse import ParseResult
from fetchlist.segment import FetchEntry, FetchRecord, Segment
from webdb.errors import CorruptionError
from webdb.tables.records import Page, Status

URL = "http://example.com/"
BODY = b"<html><a href='/a'>a</a></html>"


def _segment(path, outlinks=(("http://example.com/a", "a"),), url: str = URL) -> Segment:
    seg = Segment.create(path)
    seg.write_fetchlist(0, [FetchEntry(URL, Page(URL))])
    md5 = hashlib.md5(BODY).digest()
    parse = ParseResult(url, md5, title="t", outlinks=list(outlinks))
    with seg.writer(0) as w:
        w.write(FetchRecord(url, Status.FETCHED, 1_700_000_000, 200, content=BODY, md5=md5, parse=parse))
    return seg


def _rewrite(path: str, change) -> None:
    rec = json.loads(open(path, encoding="utf-8").readline())
    line = change(rec)
    with open(path, "w", encoding="utf-8") as f:
        f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def _set(**kv):
    return lambda rec: {**rec, **kv}


def _drop(name):
    return lambda rec: {k: v for k, v in rec.items() if k != name}


def _page(**kv):
    return lambda rec: {**rec, "page": {**rec["page"], **kv}}


FETCH_CASES = {
    "not json": (lambda rec: "{not json", "not a JSON record"),
    "array": (lambda rec: "[1, 2]", "not a JSON object"),
    "no url": (_drop("url"), "field 'url' is missing"),
    "url not a string": (_set(url=7), "field 'url' must be str"),
    "empty url": (_set(url=""), "field 'url' must be a non-empty string"),
    "unknown status": (_set(status=99), "field 'status' must be a status code"),
    "status as string": (_set(status="1"), "field 'status' must be int"),
    "status true": (_set(status=True), "field 'status' must be int"),
    "fetch_time 2**62": (_set(fetch_time=2**62), "field 'fetch_time' must be a whole number in [0, 253402300799]"),
    "fetch_time negative": (_set(fetch_time=-1), "field 'fetch_time' must be a whole number"),
    "fetch_time float": (_set(fetch_time=1.5), "field 'fetch_time' must be int"),
    "http_status 1000": (_set(http_status=1000), "field 'http_status' must be a whole number in [0, 999]"),
    "bad md5": (_set(md5="zz"), "field 'md5' must be 32 lowercase hex digits"),
    "headers list": (_set(headers=[]), "field 'headers' must be dict"),
    "header value int": (_set(headers={"etag": 5}), "field 'headers' must be an object of strings"),
    "content not a pair": (_set(content=[1]), "content must be [offset, length]"),
    "truncated string": (_set(truncated="no"), "field 'truncated' must be bool"),
    "elapsed NaN": (
        lambda rec: json.dumps(rec).replace('"elapsed": ' + json.dumps(rec["elapsed"]), '"elapsed": NaN'),
        "field 'elapsed' must be a finite number",
    ),
    "redirect int": (_set(redirect=3), "field 'redirect' must be str or null"),
}
PARSE_CASES = {
    "outlinks not pairs": (_set(outlinks=[["http://example.com/a"]]), "outlinks[0] is not a [url, anchor] pair"),
    "outlink url int": (_set(outlinks=[[1, "a"]]), "outlinks[0] is not a [url, anchor] pair"),
    "title int": (_set(title=1), "field 'title' must be str"),
    "noindex string": (_set(noindex="yes"), "field 'noindex' must be bool"),
    "no text": (_drop("text"), "field 'text' is missing"),
}
FETCHLIST_CASES = {
    "no page": (_drop("page"), "field 'page' is missing"),
    "page fetch_time 2**62": (_page(fetch_time=2**62), "page: field 'fetch_time' must be a whole number"),
    "page status": (_page(status=42), "page: field 'status' must be a status code"),
    "page meta not strings": (_page(meta={"gen": 1}), "page: field 'meta' must be an object of strings"),
    "page score inf": (lambda rec: json.dumps({**rec, "page": {**rec["page"], "score": 1e999}}), "finite number"),
    "anchors not strings": (_set(anchors=[1]), "field 'anchors' must be a list of strings"),
    "retries huge": (_page(retries=70000), "page: field 'retries' must be a whole number in [0, 65535]"),
}


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("db") / "db"
    webdb.create(str(path), sync=False)
    return path


def _cases():
    for kind, cases in (("fetch", FETCH_CASES), ("parse", PARSE_CASES), ("fetchlist", FETCHLIST_CASES)):
        for name, (change, reason) in cases.items():
            yield pytest.param(kind, change, reason, id=f"{kind}: {name}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind, change, reason", list(_cases()))
def test_malformed_record_stops_update_naming_file_and_line(db_path, tmp_path, kind, change, reason):
    seg = _segment(tmp_path / "seg")
    path = seg.file(kind, 0)
    _rewrite(path, change)
    with webdb.open(str(db_path)).reader() as r:
        before = r.generation
    assert_error(cli("update", "-q", db_path, seg.path), f"{path}:1: ", reason)
    with webdb.open(str(db_path)).reader() as r:
        assert r.generation == before and r.num_pages == 0  # nothing committed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fetch", "fetchlist"])
def test_malformed_record_stops_fetch_naming_file_and_line(tmp_path, kind):
    seg = _segment(tmp_path / "seg")
    path = seg.file(kind, 0)
    _rewrite(path, _set(url=5))
    assert_error(cli("fetch", seg.path), f"{path}:1: field 'url' must be str")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "change, reason",
    [
        (_set(offset="0"), "needs 0 <= offset < offset"),
        (_set(length=-5), "needs 0 <= offset < offset"),
        (_set(end=2**41), "needs 0 <= offset < offset"),
        (_drop("url"), "not a content index entry"),
        (_set(file="../../victim"), "does not lie after the previous one"),
    ],
    ids=["offset string", "negative length", "end past 1 TiB", "no url", "other file"],
)
def test_malformed_content_index_stops_fetch_naming_file_and_line(tmp_path, change, reason):
    seg = _segment(tmp_path / "seg")
    path = seg.content_index(0)
    _rewrite(path, change)
    size = os.path.getsize(seg.file("content", 0))
    assert_error(cli("fetch", seg.path), f"{path}:1", reason)
    assert os.path.getsize(seg.file("content", 0)) == size


@pytest.mark.timeout(60)
def test_warc_response_of_another_url_is_refused(tmp_path):
    seg = _segment(tmp_path / "seg")
    (r,) = seg.fetch_records(0)
    _rewrite(seg.file("fetch", 0), _set(url="http://example.com/other"))
    with pytest.raises(
        CorruptionError, match="the response of 'http://example.com/', not of 'http://example.com/other'"
    ):
        list(seg.records(0, content=True))


@pytest.mark.timeout(60)
def test_segment_check_reports_the_record(tmp_path):
    seg = _segment(tmp_path / "seg")
    _rewrite(seg.file("fetch", 0), _set(fetch_time=2**62))
    with pytest.raises(CorruptionError, match=r"part-00000.jsonl:1: field 'fetch_time'"):
        seg.check()


BAD_OUTLINKS = [
    "javascript:alert(1)",
    "file:///etc/passwd",
    "ftp://example.com/x",
    "mailto:a@example.com",
    "http://exa mple.com/",
    "http://example.com:0/",
    "",
]


@pytest.mark.timeout(60)
def test_bad_outlinks_are_counted_and_skipped_and_the_round_commits(tmp_path):
    links = [(u, "x") for u in BAD_OUTLINKS] + [("http://example.com/good", "g"), ("http://2130706433/", "ip")]
    seg = _segment(tmp_path / "seg", outlinks=links)
    db = webdb.create(str(tmp_path / "db"), sync=False)
    counts = update_db(db, [seg.path])
    assert counts["bad_urls"] == len(BAD_OUTLINKS) and counts["outlinks"] == 2
    with db.reader() as r:
        urls = sorted(p.url for p in r.pages())
    assert urls == ["http://127.0.0.1/", URL, "http://example.com/good"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("target", ["file:///etc/passwd", "javascript:x", "http://exa mple.com/"])
def test_bad_redirect_target_is_counted_and_skipped(tmp_path, target):
    seg = Segment.create(tmp_path / "seg")
    seg.write_fetchlist(0, [FetchEntry(URL, Page(URL))])
    with seg.writer(0) as w:
        w.write(FetchRecord(URL, Status.REDIRECT_PERM, 1_700_000_000, 301, redirect=target))
    db = webdb.create(str(tmp_path / "db"), sync=False)
    counts = update_db(db, [seg.path])
    assert counts["bad_urls"] == 1 and counts["redirect_perm"] == 1
    with db.reader() as r:
        assert [p.url for p in r.pages()] == [URL]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("url", ["file:///etc/passwd", "javascript:alert(1)", "HTTP://EXAMPLE.COM/other"])
def test_fetch_record_url_outside_the_fetchlist_and_not_normal_is_skipped(tmp_path, url):
    seg = _segment(tmp_path / "seg")
    with seg.writer(0) as w:
        w.write(FetchRecord(url, Status.GONE, 1_700_000_000, 404))
    db = webdb.create(str(tmp_path / "db"), sync=False)
    counts = update_db(db, [seg.path])
    assert counts["bad_records"] == 1 and counts["fetched"] == 1
    with db.reader() as r:
        assert sorted(p.url for p in r.pages()) == [URL, "http://example.com/a"]


@pytest.mark.timeout(60)
def test_validators_stored_in_the_db_from_the_segment(tmp_path):
    seg = Segment.create(tmp_path / "seg")
    seg.write_fetchlist(0, [FetchEntry(URL, Page(URL))])
    md5 = hashlib.md5(BODY).digest()
    headers = {"etag": '"v1"', "last-modified": "Wed, 21 Oct 2015 07:28:00 GMT"}
    with seg.writer(0) as w:
        w.write(FetchRecord(URL, Status.FETCHED, 1_700_000_000, 200, headers=headers, content=BODY, md5=md5))
    db = webdb.create(str(tmp_path / "db"), sync=False)
    update_db(db, [seg.path])
    with db.reader() as r:
        meta = r.get_page(URL).meta
    assert meta["etag"] == '"v1"' and meta["last_modified"] == "Wed, 21 Oct 2015 07:28:00 GMT"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("etag", ['"' + "x" * 300 + '"', '"a\x01b"'])
def test_hostile_validators_are_not_kept(tmp_path, etag):
    seg = Segment.create(tmp_path / "seg")
    seg.write_fetchlist(0, [FetchEntry(URL, Page(URL))])
    with seg.writer(0) as w:
        w.write(
            FetchRecord(
                URL,
                Status.FETCHED,
                1_700_000_000,
                200,
                headers={"etag": etag},
                content=BODY,
                md5=hashlib.md5(BODY).digest(),
            )
        )
    (o,) = Segment.open(seg.path).outcomes(0)
    assert o.result.meta is None
    assert os.path.exists(seg.file("fetch", 0))


@pytest.mark.timeout(60)
def test_fetchlist_with_a_file_url_never_makes_it_a_page(tmp_path):
    """A crafted fetchlist entry does not make a non-http URL acceptable to update."""
    seg = Segment.create(tmp_path / "seg")
    bad = "file:///etc/passwd"
    seg.write_fetchlist(0, [FetchEntry(URL, Page(URL)), FetchEntry(bad, Page(bad))])
    md5 = hashlib.md5(BODY).digest()
    with seg.writer(0) as w:
        w.write(FetchRecord(bad, Status.FETCHED, 1_700_000_000, 200, content=BODY, md5=md5))
        w.write(FetchRecord(URL, Status.GONE, 1_700_000_000, 404))
    db = webdb.create(str(tmp_path / "db"), sync=False)
    counts = update_db(db, [seg.path])
    assert counts["bad_records"] == 1 and counts["gone"] == 1
    with db.reader() as r:
        assert [p.url for p in r.pages()] == [URL]


def _no_fetchlist_dir(seg):
    for name in os.listdir(seg.file("fetchlist", 0).rsplit("/", 1)[0]):
        os.remove(os.path.join(seg.path, "fetchlist", name))
    os.rmdir(os.path.join(seg.path, "fetchlist"))
    return os.path.join(seg.path, "fetchlist"), "missing (or not a directory): not a complete segment"


def _segment_file_is_a_dir(seg):
    os.remove(os.path.join(seg.path, "SEGMENT"))
    os.mkdir(os.path.join(seg.path, "SEGMENT"))
    return os.path.join(seg.path, "SEGMENT"), "cannot read: Is a directory"


def _segment_file_not_an_object(seg):
    with open(os.path.join(seg.path, "SEGMENT"), "w") as f:
        f.write("[1]")
    return seg.path, "SEGMENT does not name the format 'webdb-segment'"


def _part_is_a_dir(seg):
    os.remove(seg.file("parse", 0))
    os.mkdir(seg.file("parse", 0))
    return seg.file("parse", 0), "Is a directory"


def _utf16_fetchlist(seg):
    with open(seg.file("fetchlist", 0), "wb") as f:
        f.write(b"\xff\xfe\n")
    return seg.file("fetchlist", 0) + ":1", "not a JSON record"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["fetch", "update"])
@pytest.mark.parametrize(
    "damage", [_no_fetchlist_dir, _segment_file_is_a_dir, _segment_file_not_an_object, _part_is_a_dir, _utf16_fetchlist]
)
def test_damaged_segment_directory(db_path, tmp_path, command, damage):
    seg = _segment(tmp_path / "seg")
    where, reason = damage(seg)
    args = ("fetch", seg.path) if command == "fetch" else ("update", "-q", db_path, seg.path)
    assert_error(cli(*args), where, reason)


@pytest.mark.timeout(60)
def test_stray_files_in_part_folders_are_not_parts(tmp_path):
    seg = _segment(tmp_path / "seg")
    for name in ("part-abcde.jsonl", "part-1.jsonl", "part-00001.jsonl.tmp.7", "notes.txt"):
        open(os.path.join(seg.path, "fetchlist", name), "w").close()
    assert Segment.open(seg.path).parts() == [0]


def _plant_fifo(path: str) -> None:
    if os.path.lexists(path):
        os.remove(path)
    os.mkfifo(path)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["fetch", "update"])
@pytest.mark.parametrize("kind", ["fetch", "parse", "fetchlist"])
def test_fifo_part_file_is_refused_without_blocking(db_path, tmp_path, command, kind):
    seg = _segment(tmp_path / "seg")
    path = seg.file(kind, 0)
    _plant_fifo(path)
    args = ("fetch", seg.path) if command == "fetch" else ("update", "-q", db_path, seg.path)
    assert_error(cli(*args), path, "not a regular file")
    with webdb.open(str(db_path)).reader() as r:
        assert r.num_pages == 0  # nothing committed, and the writer lock was let go


@pytest.mark.timeout(120)
def test_fifo_segment_file_is_refused_without_blocking(db_path, tmp_path):
    seg = _segment(tmp_path / "seg")
    path = os.path.join(seg.path, "SEGMENT")
    _plant_fifo(path)
    assert_error(cli("update", "-q", db_path, seg.path), path, "is a FIFO, not a regular file")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fetch", "parse", "fetchlist"])
def test_symlinked_part_file_is_not_read_through(db_path, tmp_path, kind):
    seg = _segment(tmp_path / "seg")
    path = seg.file(kind, 0)
    real = tmp_path / "elsewhere.jsonl"
    os.replace(path, real)
    os.symlink(real, path)
    assert_error(cli("update", "-q", db_path, seg.path), path, "is a symlink; refusing to read through it")
    with webdb.open(str(db_path)).reader() as r:
        assert r.num_pages == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fetch", "parse", "fetchlist"])
def test_deeply_nested_line_is_a_bad_record_naming_file_and_line(db_path, tmp_path, kind):
    seg = _segment(tmp_path / "seg")
    path = seg.file(kind, 0)
    with open(path, "ab") as f:
        f.write(b"[" * 200_000 + b"\n")
    with webdb.open(str(db_path)).reader() as r:
        before = r.generation
    assert_error(cli("update", "-q", db_path, seg.path), f"{path}:2: not a JSON record (nested too deep)")
    with webdb.open(str(db_path)).reader() as r:
        assert r.generation == before and r.num_pages == 0
