"""Inject: seed files (Nutch's format), injected score and metadata, add-if-not-present,
normalization and filters, and bad input as clear errors (exit code 2, never a traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import webdb
from fetchlist.filters import UrlFilter
from fetchlist.focus import FocusRules
from fetchlist.inject import inject, inject_seeds, read_seeds
from fetchlist.normalize import WwwRules
from webdb import DAY, Page, Status
from webdb.writer.inputs import CallRecorder

WEBDB = [sys.executable, "-m", "webdb.cli.main"]
NOW = 1_700_000_000

SEEDS = (
    "# seeds\n"
    "http://Example.COM:80/a/../index.html#top\n"
    "\n"
    "http://example.org/news/\tscore=2.5\tfetch_interval=86400\n"
    "http://example.net/   nutch.score=0.25 nutch.fetchInterval=3600 lang=en\n"
    "https://example.com/x\tcategory=news\r\n"
)


@pytest.fixture
def seeds(tmp_path):
    p = tmp_path / "seeds.txt"
    p.write_text(SEEDS)
    return p


def test_seed_lines_and_metadata(tmp_path, seeds):
    db = webdb.create(str(tmp_path / "db"), sync=False, default_interval=10 * DAY)
    c = inject(db, [seeds], score=1.5, now=NOW)
    assert (c["urls"], c["new"], c["pages"], c["filtered"], c["bad"]) == (4, 4, 4, 0, 0)
    with db.reader() as r:
        pages = {p.url: p for p in r.pages()}
    assert set(pages) == {
        "http://example.com/index.html",
        "http://example.org/news/",
        "http://example.net/",
        "https://example.com/x",
    }
    p = pages["http://example.com/index.html"]
    assert (p.status, p.score, p.next_score, p.next_fetch, p.fetch_interval, p.meta) == (
        Status.UNFETCHED,
        1.5,
        1.5,
        NOW,
        10 * DAY,
        {},
    )
    assert (pages["http://example.org/news/"].score, pages["http://example.org/news/"].fetch_interval) == (2.5, DAY)
    net = pages["http://example.net/"]
    assert (net.score, net.fetch_interval, net.meta) == (0.25, 3600, {"lang": "en"})
    assert pages["https://example.com/x"].meta == {"category": "news"}


def test_existing_pages_are_not_replaced(tmp_path, seeds):
    db = webdb.create(str(tmp_path / "db"), sync=False)
    with db.writer() as w:
        w.add_page(Page("http://example.net/", md5=b"x" * 16, status=Status.FETCHED, score=9.0, fetch_time=5))
    c = inject(db, [seeds], now=NOW)
    assert (c["urls"], c["new"], c["pages"]) == (4, 3, 4)
    with db.reader() as r:
        p = r.get_page("http://example.net/")
    assert (p.status, p.score, p.md5, p.meta) == (Status.FETCHED, 9.0, b"x" * 16, {})
    assert inject(db, [seeds, seeds])["new"] == 0


def test_filters_www_rules_and_focus(tmp_path, seeds):
    rules = tmp_path / "regex-urlfilter.txt"
    rules.write_text("-^https://\n+.\n")
    (tmp_path / "www.txt").write_text("example.com www\n")
    rec = CallRecorder()
    c = inject_seeds(
        rec,
        [seeds],
        now=NOW,
        url_filter=UrlFilter.from_files([rules]),
        www=WwwRules.from_file(tmp_path / "www.txt"),
        focus=FocusRules.parse("example.org ^http://example\\.org/news/\n"),
        fit_score=3.0,
    )
    assert (c["urls"], c["filtered"]) == (3, 1)
    import json

    calls = [json.loads(x) for x in rec.calls]
    assert [d["call"] for d in calls] == ["add_page_if_not_present"] * 3
    urls = [d["page"]["url"] for d in calls]
    assert urls == ["http://www.example.com/index.html", "http://example.org/news/", "http://example.net/"]
    assert calls[1]["page"]["meta"] == {"fit": "1"} and calls[1]["page"]["score"] == 2.5  # the line's own score
    assert "fit" not in calls[2]["page"]["meta"]


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        ("not a url", "seeds.txt:2: not an http(s) URL: 'not'"),
        ("ftp://example.com/", "seeds.txt:2: not an http(s) URL: 'ftp://example.com/'"),
        ("http://example.com/\tscore", "seeds.txt:2: expected name=value after the URL, got 'score'"),
        ("http://example.com/\tscore=high", "seeds.txt:2: score must be a number, got 'high'"),
        ("http://example.com/\tscore=nan", "seeds.txt:2: score must be a number"),
        ("http://example.com/\tfetch_interval=-5", "seeds.txt:2: fetch_interval must be whole seconds > 0"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, msg):
    p = tmp_path / "seeds.txt"
    p.write_text(f"http://ok.com/\n{line}\nhttp://ok.org/\n")
    db = webdb.create(str(tmp_path / "db"), sync=False)
    with pytest.raises(webdb.BadInput) as e:
        inject(db, [p])
    assert msg in str(e.value)
    with db.reader() as r:
        assert r.num_pages == 0  # a bad line aborts the whole batch
    out = subprocess.run([*WEBDB, "inject", db.path, str(p)], capture_output=True, text=True)
    assert out.returncode == 2 and msg in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([*WEBDB, "inject", db.path, str(p), "--skip-bad"], capture_output=True, text=True)
    assert out.returncode == 0 and "injected 2 new pages" in out.stdout and "1 bad lines skipped" in out.stdout
    assert msg in out.stdout


def test_inject_command(tmp_path, seeds):
    db = tmp_path / "new.db"
    out = subprocess.run(
        [*WEBDB, "inject", str(db), str(seeds), "--score", "2", "--sections", "2"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"created {db}",
        "injected 4 new pages (4 URLs read, 0 already present, 0 filtered, 0 bad lines skipped); db has 4 pages",
    ]
    with webdb.open(str(db)).reader() as r:
        assert r.sections.k == 2 and {p.score for p in r.pages()} == {2.0, 2.5, 0.25}
    out = subprocess.run([*WEBDB, "inject", str(db), str(seeds), "--json"], capture_output=True, text=True)
    assert out.returncode == 0 and '"new": 0' in out.stdout
    for args, msg in [
        ([str(db), str(tmp_path / "missing.txt")], "missing.txt: no such seed file"),
        ([str(tmp_path), str(seeds)], "not a webdb database"),
        ([str(db), str(seeds), "--filter", str(tmp_path / "nofilter")], "nofilter: cannot read filter file"),
    ]:
        out = subprocess.run([*WEBDB, "inject", *args], capture_output=True, text=True)
        assert out.returncode == 2 and msg in out.stderr and "Traceback" not in out.stderr, out.stderr
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"http://example.com/caf\xe9\n")
    out = subprocess.run([*WEBDB, "inject", str(db), str(bad)], capture_output=True, text=True)
    assert out.returncode == 2 and "latin1.txt:1: not UTF-8 (byte 0xe9 at byte 22 of the line)" in out.stderr


def test_read_seeds_skips_comments_and_blank_lines(tmp_path, seeds):
    bad: list[str] = []
    got = [s.url for s in read_seeds([seeds], skip_bad=True, bad=bad)]
    assert (
        got
        == ["http://example.com/index.html", "http://example.org/news/", "http://example.net/", "https://example.com/x"]
        and bad == []
    )
