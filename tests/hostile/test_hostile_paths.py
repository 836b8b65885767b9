"""Nothing is written outside the segment or over a file that is not ours: part files and
folders are opened without following symlinks, resume offsets are checked against the real
file size, and ``--out`` replaces only a regular file, atomically."""

from __future__ import annotations

import json
import os

import pytest
from hostile_util import assert_error, cli

from fetchlist.segment import FetchEntry, FetchRecord, Segment
from webdb.errors import BadInput
from webdb.tables.records import Status


def _segment(path, n: int = 2, version: int = 2) -> Segment:
    seg = Segment.create(path, version=version)
    seg.write_fetchlist(0, [FetchEntry(f"http://192.0.2.1/{i}") for i in range(n)])
    return seg


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_bytes(b"precious\n")
    return v


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "kind, ext",
    [("fetch", "jsonl"), ("parse", "jsonl"), ("content", "warc.gz"), ("content", "index.jsonl"), ("content", "bin")],
)
def test_symlinked_part_file_is_refused(tmp_path, victim, kind, ext):
    seg = _segment(tmp_path / "seg", version=1 if ext == "bin" else 2)
    link = os.path.join(seg.path, kind, f"part-00000.{ext}")
    os.symlink(victim, link)
    out = cli("fetch", seg.path)
    assert_error(out, link, "is a symlink; refusing to write through it")
    assert victim.read_bytes() == b"precious\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fetch", "parse", "content"])
def test_symlinked_part_folder_is_refused(tmp_path, kind):
    seg = _segment(tmp_path / "seg")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = os.path.join(seg.path, kind)
    os.rmdir(folder)
    os.symlink(elsewhere, folder)
    out = cli("fetch", seg.path)
    assert_error(out, folder, "not a directory of the segment")
    assert os.listdir(elsewhere) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ext", ["warc.gz", "index.jsonl", "bin"])
def test_part_file_that_is_a_fifo_is_refused(tmp_path, ext):
    seg = _segment(tmp_path / "seg", version=1 if ext == "bin" else 2)
    path = os.path.join(seg.path, "content", f"part-00000.{ext}")
    os.mkfifo(path)
    assert_error(cli("fetch", seg.path), path, "not a regular file")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("plant", ["symlink", "fifo"])
def test_warc_content_is_read_only_from_a_regular_file(tmp_path, victim, plant):
    seg = _segment(tmp_path / "seg")
    with seg.writer(0) as w:
        w.write(FetchRecord("http://192.0.2.1/0", Status.FETCHED, 1_700_000_000, 200, content=b"hello", md5=b"\0" * 16))
    path = seg.file("content", 0)
    os.replace(path, victim)
    os.symlink(victim, path) if plant == "symlink" else os.mkfifo(path)
    with pytest.raises(BadInput, match="symlink|not a regular file"):
        list(seg.records(0, content=True))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "ref, reason",
    [
        ([2**39, 10], "beyond the end of"),
        ([0, 2**40], "beyond the end of"),
        ([2**41, 1], "content must be [offset, length]"),
        ([-1, 5], "content must be [offset, length]"),
        ([0, 0], "content must be [offset, length]"),
        (["0", 5], "content must be [offset, length]"),
    ],
    ids=["offset 512 GiB", "length 1 TiB", "offset 2 TiB", "negative", "empty", "string"],
)
def test_crafted_resume_reference_never_grows_the_content_file(tmp_path, ref, reason):
    seg = _segment(tmp_path / "seg")
    with seg.writer(0) as w:
        w.write(FetchRecord("http://192.0.2.1/0", Status.FETCHED, 1_700_000_000, 200, content=b"hello", md5=b"\0" * 16))
    fetch = seg.file("fetch", 0)
    rec = json.loads(open(fetch).readline())
    rec["content"] = ref
    with open(fetch, "w") as f:
        f.write(json.dumps(rec) + "\n")
    sizes = {k: os.path.getsize(seg.file(k, 0)) for k in ("content", "fetch")}
    assert_error(cli("fetch", seg.path), f"{fetch}:1", reason)
    assert {k: os.path.getsize(seg.file(k, 0)) for k in ("content", "fetch")} == sizes
    assert os.stat(seg.file("content", 0)).st_blocks * 512 < 1 << 20


@pytest.mark.timeout(60)
def test_fetchlist_temp_name_planted_as_a_link_is_not_written_through(tmp_path, victim):
    seg = Segment.create(tmp_path / "seg")
    os.symlink(victim, seg.file("fetchlist", 0) + f".tmp.{os.getpid()}")
    assert seg.write_fetchlist(0, [FetchEntry("http://192.0.2.1/")]) == 1
    assert victim.read_bytes() == b"precious\n"
    assert [e.url for e in seg.fetchlist(0)] == ["http://192.0.2.1/"]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("db") / "db"
    out = cli("create", path)
    assert out.returncode == 0, out.stderr
    return path


@pytest.mark.timeout(60)
def test_out_symlink_is_refused(db, tmp_path, victim):
    link = tmp_path / "filters.txt"
    os.symlink(victim, link)
    assert_error(cli("filters", db, "--out", link), f"--out {link}: a symlink; refusing to replace it")
    assert victim.read_bytes() == b"precious\n" and os.path.islink(link)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", ["dir", "fifo"])
def test_out_not_a_regular_file_is_refused(db, tmp_path, make):
    target = tmp_path / "out"
    os.mkdir(target) if make == "dir" else os.mkfifo(target)
    assert_error(cli("filters", db, "--out", target), f"--out {target}: not a regular file")


@pytest.mark.timeout(60)
def test_out_regular_file_is_replaced_atomically(db, tmp_path):
    target = tmp_path / "filters.txt"
    target.write_text("old\n")
    hard = tmp_path / "hardlink.txt"
    os.link(target, hard)  # a replace by rename leaves the other name's content alone
    out = cli("filters", db, "--out", target)
    assert out.returncode == 0, out.stderr
    assert target.read_text().endswith("+.\n") and hard.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["filters.txt", "hardlink.txt"]  # no temp file left
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o644)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "setting, reason",
    [
        ("user_agent=bot\nX-Injected: 1", "user_agent must be a non-empty line of printable text"),
        ("user_agent=", "user_agent must be a non-empty line"),
        ('default_headers={"X-A": "1\\r\\nX-B: 2"}', "default_headers must map header names to printable strings"),
        ("default_headers=[1]", "default_headers must map"),
        ("keep_headers=5", "keep_headers must be a list of header names"),
        ("allow_private_addresses=maybe", "allow_private_addresses must be true or false"),
        ("robots_obey=1", "robots_obey must be true or false"),
        ("fetch_timeout=-1", "fetch_timeout must be a number >= 0"),
        ("fetch_timeout=NaN", "fetch_timeout must be a number >= 0"),
        ("progress=3", "progress must be true, false or null"),
    ],
)
def test_bad_crawl_setting_is_refused_before_anything_runs(tmp_path, setting, reason):
    seg = _segment(tmp_path / "seg")
    assert_error(cli("fetch", seg.path, "--crawl-set", setting), "crawl setting", reason)
    assert os.listdir(os.path.join(seg.path, "fetch")) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["\u00b2=/tmp", "\u0661=/tmp", "x=/tmp", "0"])
def test_section_dir_index_is_ascii_digits(db, value):
    assert_error(cli("read", db, "--stats", "--section-dir", value), f"--section-dir {value!r}: expected J=DIR")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("end", [2**39, 2**40 + 1], ids=["512 GiB", "past 1 TiB"])
def test_crafted_content_index_never_grows_the_warc_file(tmp_path, end):
    seg = _segment(tmp_path / "seg")
    with seg.writer(0) as w:
        w.write(FetchRecord("http://192.0.2.1/0", Status.FETCHED, 1_700_000_000, 200, content=b"hello", md5=b"\0" * 16))
    index = seg.content_index(0)
    entry = json.loads(open(index).readline())
    entry["end"] = end
    with open(index, "w") as f:
        f.write(json.dumps(entry) + "\n")
    sizes = {p: os.path.getsize(p) for p in (seg.file("content", 0), index, seg.file("fetch", 0))}
    assert_error(
        cli("fetch", seg.path), f"{index}:1", "does not lie after the previous one" if end < 2**40 else "0 <= offset"
    )
    assert {p: os.path.getsize(p) for p in sizes} == sizes
