"""fetchlist.warc: real responses from a loopback server written as WARC/1.1; warcio reads every
record, ``warcio check`` passes, payload digests are right, the index matches the file, and a
crashed writer's leftovers are cut off."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys

import pytest
import requests
from warcio.archiveiterator import ArchiveIterator

from fetchlist.demo_site import Resource, SiteServer, loopback_ok
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
from webdb.errors import CorruptionError

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
