"""fetchlist.warc: real responses from a loopback server written as WARC/1.1; warcio reads every
record, ``warcio check`` passes, payload digests are right, the index matches the file, and a
crashed writer's leftovers are cut off."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys

import pytest
import requests
from dbutil import snapshot
from warcio.archiveiterator import ArchiveIterator

import webdb
from fetchlist.crawl import update_db
from fetchlist.demo_site import DEMO_HOSTS, Resource, SiteServer, loopback_ok, serve_demo
from fetchlist.fetch import Fetcher
from fetchlist.parse import parse
from fetchlist.segment import FetchEntry, FetchRecord, Segment
from fetchlist.warc import (
    Exchange,
    WarcWriter,
    content_index,
    index_warc,
    read_index,
    read_metadata,
    read_response,
    sha1_digest,
)
from webdb import Page, Status
from webdb.errors import BadInput, CorruptionError

HOST = "127.0.0.41"
PAGE = b"<html><head><title>T</title></head><body><a href='/b'>to b</a></body></html>"
BINARY = bytes(range(256)) * 40
TEXT = "Ünïcode text, gzip-encoded on the wire.\n".encode() * 50

pytestmark = pytest.mark.skipif(not loopback_ok(HOST), reason=f"needs {HOST}")


@pytest.fixture(scope="module")
def site():
    server = SiteServer([HOST])
    server.routes[HOST] = {
        "/a": Resource(200, PAGE, "text/html; charset=utf-8", headers={"Set-Cookie": "x=1", "X-Twice": "one"}),
        "/bin": Resource(200, BINARY, "application/octet-stream"),
        "/gz": Resource(200, gzip.compress(TEXT), "text/plain; charset=utf-8", headers={"Content-Encoding": "gzip"}),
        "/empty": Resource(200, b"", "text/plain"),
        "/missing": Resource(404, b"not here", "text/plain"),
    }
    with server:
        yield server


def fetch(url: str, max_content: int | None = None) -> Exchange:
    """What the fetcher has after one request: headers as received, the decoded body."""
    with requests.get(url, stream=True, timeout=10) as r:
        body = r.raw.read(decode_content=True)
        truncated = max_content is not None and len(body) > max_content
        return Exchange(
            url=url,
            fetch_time=1_795_000_000.25,
            status=r.status_code,
            reason=r.reason,
            headers=list(r.raw.headers.items()),
            body=body[:max_content] if truncated else body,
            request_headers=list(r.request.headers.items()),
            truncated=truncated,
            elapsed=r.elapsed.total_seconds(),
            outlinks=[(url.rsplit("/", 1)[0] + "/b", "to b")] if url.endswith("/a") else [],
            ip=HOST,
        )


def warcio_check(path: str) -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "warcio")
    return subprocess.run([exe, "check", "-v", path], capture_output=True, text=True, timeout=60)


def records(path: str) -> list[tuple[str, str | None, bytes]]:
    out = []
    with open(path, "rb") as f:
        for rec in ArchiveIterator(f):
            out.append((rec.rec_type, rec.rec_headers.get_header("WARC-Target-URI"), rec.raw_stream.read()))
    return out


def test_records_digests_check_and_index(site, tmp_path):
    paths = ["/a", "/bin", "/gz", "/empty", "/missing"]
    exchanges = [fetch(site.base(HOST) + p) for p in paths]
    with WarcWriter(str(tmp_path), 0) as w:
        locs = [w.write(ex) for ex in exchanges]
    path = str(tmp_path / "part-00000.warc.gz")
    recs = records(path)
    assert [t for t, _, _ in recs] == ["warcinfo"] + ["request", "response", "metadata"] * len(paths)
    responses = [(u, body) for t, u, body in recs if t == "response"]
    assert [u for u, _ in responses] == [ex.url for ex in exchanges]
    check = warcio_check(path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "digest pass" in check.stdout and "digest fail" not in check.stdout
    with open(path, "rb") as f:
        for rec in ArchiveIterator(f):
            assert rec.rec_headers.protocol == "WARC/1.1"
            if rec.rec_type == "response":
                body = rec.raw_stream.read()
                assert rec.rec_headers.get_header("WARC-Payload-Digest") == sha1_digest(body)
    for ex, loc in zip(exchanges, locs):
        r = read_response(path, loc.offset, ex.url)
        assert r.body == ex.body and r.status == ex.status and loc.digest == sha1_digest(ex.body)
        assert r.date == "2026-11-18T11:06:40.250000Z"  # fetch_time, to the microsecond
    gz = read_response(path, locs[2].offset)
    assert gz.body == TEXT  # the decoded body, as the fetcher parses it
    names = [k.lower() for k, _ in gz.headers]
    assert "x-crawler-content-encoding" in names and "content-encoding" not in names
    assert ("Content-Length", str(len(TEXT))) in gz.headers
    a = read_response(path, locs[0].offset)
    assert ("Set-Cookie", "x=1") in a.headers and ("X-Twice", "one") in a.headers  # as received
    assert ("Content-Length", str(len(PAGE))) in a.headers and not any(k.startswith("X-Crawler") for k, _ in a.headers)
    assert read_response(path, locs[1].offset).body == BINARY
    assert read_response(path, locs[4].offset).status == 404
    meta = read_metadata(path, locs[0].end - _last_record_length(path, locs[0]))
    assert meta["outlink"] == [f"{site.base(HOST)}/b to b"] and int(meta["fetchTimeMs"][0]) >= 0
    # The index written as we go is the one the file itself gives.
    assert list(read_index(str(tmp_path / "part-00000.index.jsonl"))) == locs == list(index_warc(path))
    assert content_index(str(tmp_path))[exchanges[3].url] == locs[3]


def _last_record_length(path: str, loc) -> int:
    """Length of the metadata record that ends the exchange at ``loc``."""
    with open(path, "rb") as f:
        f.seek(loc.offset + loc.length)
        it = ArchiveIterator(f)
        rec = next(it)
        it.read_to_end(rec)
        return it.get_record_length()


def test_truncated_body_is_marked(site, tmp_path):
    ex = fetch(site.base(HOST) + "/bin", max_content=1000)
    with WarcWriter(str(tmp_path), 3) as w:
        loc = w.write(ex)
    path = str(tmp_path / "part-00003.warc.gz")
    r = read_response(path, loc.offset)
    assert r.truncated and r.body == BINARY[:1000]
    assert ("X-Crawler-Content-Length", str(len(BINARY))) in r.headers and ("Content-Length", "1000") in r.headers
    assert warcio_check(path).returncode == 0


def test_reader_errors_name_file_and_offset(site, tmp_path):
    with WarcWriter(str(tmp_path), 0) as w:
        loc = w.write(fetch(site.base(HOST) + "/a"))
    path = str(tmp_path / "part-00000.warc.gz")
    with pytest.raises(CorruptionError, match="not of 'http://other/'"):
        read_response(path, loc.offset, "http://other/")
    with pytest.raises(CorruptionError, match=r"a request record, not a response"):
        read_response(path, loc.offset - _request_length(path, loc))
    data = bytearray(open(path, "rb").read())
    data[loc.offset + loc.length // 2] ^= 0xFF  # inside the response's gzip member
    bad = tmp_path / "bad.warc.gz"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match=f"{bad} at offset {loc.offset}"):
        read_response(str(bad), loc.offset)
    with pytest.raises(CorruptionError, match="missing WARC file"):
        read_response(str(tmp_path / "nope.warc.gz"), 0)


def _request_length(path: str, loc) -> int:
    for prev in index_requests(path):
        if prev[0] + prev[1] == loc.offset:
            return prev[1]
    raise AssertionError("no request before the response")


def index_requests(path: str) -> list[tuple[int, int]]:
    with open(path, "rb") as f:
        it = ArchiveIterator(f)
        out = []
        for rec in it:
            it.read_to_end(rec)
            if rec.rec_type == "request":
                out.append((it.get_record_offset(), it.get_record_length()))
        return out


def test_reopen_cuts_a_torn_exchange_and_truncate_drops_unfetched(site, tmp_path):
    urls = [site.base(HOST) + p for p in ("/a", "/bin", "/gz")]
    with WarcWriter(str(tmp_path), 0) as w:
        locs = [w.write(fetch(u)) for u in urls]
    path = tmp_path / "part-00000.warc.gz"
    index = tmp_path / "part-00000.index.jsonl"
    size = path.stat().st_size
    # A crash in the middle of the next exchange: half a record, half an index line.
    with open(path, "ab") as f:
        f.write(gzip.compress(b"WARC/1.1\r\nWARC-Type: request\r\n")[:30])
    with open(index, "ab") as f:
        f.write(b'{"url": "http://torn/"')
    w = WarcWriter(str(tmp_path), 0)
    assert path.stat().st_size == size and w.entries == locs
    loc = w.write(fetch(site.base(HOST) + "/empty"))
    assert loc.offset > size - 1
    # The segment drops the exchanges whose fetch record was never written.
    w.truncate(locs[1].end)
    w.close()
    assert list(read_index(str(index))) == locs[:2] == list(index_warc(str(path)))
    assert path.stat().st_size == locs[1].end
    assert [t for t, _, _ in records(str(path))] == ["warcinfo"] + ["request", "response", "metadata"] * 2
    assert warcio_check(str(path)).returncode == 0
    # Truncating everything keeps the warcinfo record: still a valid WARC file.
    with WarcWriter(str(tmp_path), 0) as w:
        w.truncate(None)
    assert [t for t, _, _ in records(str(path))] == ["warcinfo"]
    assert list(read_index(str(index))) == []


def test_payload_digest_is_sha1_base32():
    assert sha1_digest(b"") == "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"
    assert (
        sha1_digest(b"abc").removeprefix("sha1:")
        == __import__("base64").b32encode(hashlib.sha1(b"abc").digest()).decode()
    )


# ---- the fetcher's segments: WARC content end to end ------------------------------------------


@pytest.fixture(scope="module")
def demo_urls():
    """The demo site on loopback and every URL it serves (pages, redirects, 404s, binaries)."""
    if not all(loopback_ok(h) for h in DEMO_HOSTS):
        pytest.skip(f"needs {DEMO_HOSTS}")
    server, site = serve_demo(pages=40, crawl_delay=0.0)
    with server:
        urls = sorted(f"{server.base(h)}{p}" for h, paths in site.routes.items() for p in paths)
        yield urls + [f"{server.base(DEMO_HOSTS[0])}/no-such-page.html"]


def fetch_segment(path, urls, version=2, parts=1) -> Segment:
    seg = Segment.create(path, version=version)
    for p in range(parts):
        seg.write_fetchlist(p, [FetchEntry(u) for u in urls[p::parts]])
        Fetcher(**FAST).fetch_segment(seg, p)
    return seg


FAST = dict(politeness_delay=0.0, crawl_delay_cap=0.0, threads=4, progress=False, allow_private_addresses=True)


def assert_valid_warc(seg: Segment) -> int:
    """Every part's WARC file reads in warcio and passes ``warcio check``; each response record
    is the content of one FETCHED fetch record (digests right); return the response count."""
    responses = 0
    for p in seg.parts():
        path = seg.file("content", p)
        assert warcio_check(path).returncode == 0, warcio_check(path).stdout
        fetched = {r.url: r for r in seg.fetch_records(p) if r.status == Status.FETCHED}
        seen = []
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type != "response":
                    continue
                url = rec.rec_headers.get_header("WARC-Target-URI")
                body = rec.content_stream().read()
                assert rec.rec_headers.get_header("WARC-Payload-Digest") == sha1_digest(body)
                assert hashlib.md5(body).digest() == fetched[url].md5
                assert rec.http_headers.get_statuscode() == str(fetched[url].http_status)
                seen.append(url)
        assert sorted(seen) == sorted(fetched)  # one response per FETCHED record, no other
        responses += len(seen)
    assert seg.check()["responses"] == responses
    return responses


def db_after_update(tmp_path, name: str, urls, seg_path) -> dict:
    db = webdb.create(str(tmp_path / name), sync=False)
    with db.writer() as w:
        for u in urls:
            w.add_page(Page(u))
    update_db(db, [str(seg_path)])
    return snapshot(db)


def legacy_copy(seg: Segment, path) -> Segment:
    """The same fetch output through the legacy version 1 writer: records, parse records and
    content bytes (read back from the WARC files) as they were."""
    old = Segment.create(path, version=1)
    for p in seg.parts():
        old.write_fetchlist(p, seg.fetchlist(p))
        with old.writer(p) as w:
            for r in seg.records(p, content=True):
                r.content_ref = None
                w.write(r)
    return old


@pytest.mark.timeout(300)
def test_fetched_segment_is_warc_and_updates_the_db_as_before(demo_urls, tmp_path):
    seg = fetch_segment(tmp_path / "seg", demo_urls, parts=2)
    recs = list(seg.records(content=True))
    statuses = {r.status for r in recs}
    assert Status.FETCHED in statuses and len(statuses) > 2  # redirects, 404s too
    n = assert_valid_warc(seg)
    assert n == sum(r.status == Status.FETCHED for r in recs) > 20
    # The response record keeps the headers as received, the request record the request sent.
    r0 = next(r for r in recs if r.status == Status.FETCHED and r.content_type == "text/html")
    resp = read_response(
        seg.file("content", 0 if r0.url in {e.url for e in seg.fetchlist(0)} else 1), r0.content_ref[0]
    )
    names = [k.lower() for k, _ in resp.headers]
    assert {"content-type", "server", "date", "last-modified"} <= set(names)
    # The parse step on the WARC content gives the stored parse output.
    for r in recs:
        if r.status == Status.FETCHED and r.parse is not None:
            again = parse(r.url, r.content, r.headers.get("content-type"))
            assert (again.md5, again.outlinks, again.title) == (r.parse.md5, r.parse.outlinks, r.parse.title)
    # Oracle: the db an update makes from the WARC segment equals the one it makes from the same
    # records (and content, read from WARC) in a legacy segment, as the code before WARC wrote it.
    old = legacy_copy(seg, tmp_path / "v1")
    assert old.check()["fetched"] == len(recs)
    assert db_after_update(tmp_path, "db2", demo_urls, seg.path) == db_after_update(
        tmp_path, "db1", demo_urls, old.path
    )


def cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "webdb.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **(env or {})),
    )


@pytest.mark.timeout(300)
def test_upgrade_of_a_v1_segment_gives_the_same_db(demo_urls, tmp_path):
    v1 = fetch_segment(tmp_path / "seg", demo_urls, version=1, parts=2)
    before = [(r.url, r.content, r.parse) for r in v1.records(content=True)]
    assert os.path.exists(v1.file("content", 0)) and v1.file("content", 0).endswith(".bin")
    db1 = db_after_update(tmp_path, "db1", demo_urls, v1.path)
    out = cli("segment", "upgrade", v1.path)
    assert out.returncode == 0 and "upgraded from version 1 to 2" in out.stdout, out.stderr
    seg = Segment.open(v1.path)
    assert seg.version == 2 and sorted(os.listdir(seg.path)) == ["SEGMENT", "content", "fetch", "fetchlist", "parse"]
    assert not [n for n in os.listdir(os.path.join(seg.path, "content")) if n.endswith(".bin")]
    assert [(r.url, r.content, r.parse) for r in seg.records(content=True)] == before
    assert assert_valid_warc(seg) == sum(1 for r in seg.fetch_records() if r.status == Status.FETCHED)
    assert db_after_update(tmp_path, "db2", demo_urls, seg.path) == db1
    again = cli("segment", "upgrade", seg.path)
    assert again.returncode == 0 and "already version 2" in again.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "fault", ["upgrade.staged", "upgrade.committed", "upgrade.moved.fetch", "upgrade.moved.content", "upgrade.switched"]
)
def test_upgrade_killed_leaves_the_old_or_the_new_segment(demo_urls, tmp_path, fault):
    v1 = fetch_segment(tmp_path / "seg", demo_urls[:30], version=1)
    before = [(r.url, r.content, r.parse) for r in v1.records(content=True)]
    out = cli("segment", "upgrade", v1.path, env={"WEBDB_FAULTS": fault})
    assert out.returncode == -9, out.stderr
    if fault == "upgrade.staged":  # before the commit: the old segment, readable as it was
        old = Segment.open(v1.path)
        assert old.version == 1 and [(r.url, r.content, r.parse) for r in old.records(content=True)] == before
    elif fault != "upgrade.switched":  # committed: readers are told to finish it
        with pytest.raises(BadInput, match="upgrade was interrupted after its commit"):
            Segment.open(v1.path)
    out = cli("segment", "upgrade", v1.path)
    assert out.returncode == 0, out.stderr
    seg = Segment.open(v1.path)
    assert seg.version == 2 and not os.path.exists(os.path.join(seg.path, "upgrade.tmp"))
    assert [(r.url, r.content, r.parse) for r in seg.records(content=True)] == before
    assert_valid_warc(seg)


def test_resume_cuts_torn_and_uncommitted_exchanges(tmp_path):
    seg = Segment.create(tmp_path / "seg")
    body = b"<html><title>x</title></html>"

    def rec(u):
        return FetchRecord(u, Status.FETCHED, 1_700_000_000, 200, {}, "text/html", hashlib.md5(body).digest(), body)

    with seg.writer(0) as w:
        w.write(rec("http://a.example/1"))
    size = os.path.getsize(seg.file("content", 0))
    # A kill after the WARC exchange and its index line, before the fetch record; then a torn record.
    with WarcWriter(os.path.join(seg.path, "content"), 0) as ww:
        ww.write(Exchange("http://a.example/2", 1.0, 200, body=body))
    with open(seg.file("content", 0), "ab") as f:
        f.write(b"\x1f\x8b\x08\x00torn")
    with seg.writer(0) as w:
        assert w.done == {"http://a.example/1"}
        assert os.path.getsize(seg.file("content", 0)) == size
        w.write(rec("http://a.example/3"))
    assert [e.url for e in read_index(seg.content_index(0))] == ["http://a.example/1", "http://a.example/3"]
    assert assert_valid_warc(seg) == 2
    # A fetch record whose response is not in the index (a crafted resume point) is refused.
    fetch = seg.file("fetch", 0)
    lines = open(fetch).read().splitlines()
    d = json.loads(lines[1])
    d["content"] = [d["content"][0] - 1, d["content"][1]]
    open(fetch, "w").write(lines[0] + "\n" + json.dumps(d) + "\n")
    with pytest.raises(CorruptionError, match="is not the response of 'http://a.example/3'"):
        seg.writer(0)
