"""Hostile seed files: reserved meta keys, non-ASCII digits, BOMs, control characters.  A bad
line is an error naming file and line (exit 2, nothing injected); nothing a seed says can
poison the db for later rounds."""

from __future__ import annotations

import pytest
from hostile_util import assert_error, cli

import webdb
from fetchlist.generate import mark_time
from fetchlist.inject import RESERVED_META


def _inject(tmp_path, text: str | bytes, *extra: str):
    seeds = tmp_path / "seeds.txt"
    seeds.write_bytes(text if isinstance(text, bytes) else text.encode())
    return cli("inject", tmp_path / "db", seeds, *extra), str(seeds)


def _pages(tmp_path) -> dict:
    with webdb.open(str(tmp_path / "db")).reader() as r:
        return {p.url: p for p in r.pages()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("key", sorted(RESERVED_META))
def test_reserved_meta_key_is_rejected(tmp_path, key):
    out, seeds = _inject(tmp_path, f"http://ok.example/\nhttp://a.example/\t{key}=x@1700000000\n")
    assert_error(out, f"{seeds}:2: meta key {key!r} is reserved")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "field",
    [
        "score=\u00b2",
        "score=\uff11",
        "score=\u0661",
        "score=1_0",
        "score=nan",
        "score=inf",
        "score=1e999",
        "score= 1",
        "score=0x10",
        "fetch_interval=\u00b2",
        "fetch_interval=\u0661\u0662",
        "fetch_interval=1_000",
        "fetch_interval=+5",
        "fetch_interval=1e3",
        "fetch_interval=0",
        "fetch_interval=4294967296",
        "nutch.fetchInterval=-1",
        "nutch.score=",
    ],
)
def test_numbers_are_ascii_digits(tmp_path, field):
    out, seeds = _inject(tmp_path, f"http://a.example/\t{field}\n")
    name = field.partition("=")[0]
    assert_error(out, f"{seeds}:1: {name} must be")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "line, reason",
    [
        ("http://a.example/\tlang=e\x01n", "holds a control character"),
        ("http://a.example/\tlang=en\tlang=fr", "lang given twice"),
        ("http://a.example/\tscore=1\tnutch.score=2", "nutch.score given twice"),
        ("http://a.example/\tnovalue", "expected name=value"),
        ("http://a.example/\t=x", "expected name=value"),
        ("file:///etc/passwd", "not an http(s) URL"),
        ("javascript:alert(1)", "not an http(s) URL"),
        ("http://a.example:0/", "not an http(s) URL"),
        ("http://256.0.0.1/", "not an http(s) URL"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path, line, reason):
    out, seeds = _inject(tmp_path, f"# seeds\nhttp://ok.example/\n{line}\n")
    assert_error(out, f"{seeds}:3: ", reason)


@pytest.mark.timeout(60)
def test_utf8_bom_on_the_first_line_is_skipped(tmp_path):
    out, _ = _inject(tmp_path, b"\xef\xbb\xbfhttp://a.example/\tscore=2\nhttp://b.example/\n")
    assert out.returncode == 0, out.stderr
    pages = _pages(tmp_path)
    assert sorted(pages) == ["http://a.example/", "http://b.example/"] and pages["http://a.example/"].score == 2.0


@pytest.mark.timeout(60)
def test_not_utf8_names_the_file(tmp_path):
    out, seeds = _inject(tmp_path, b"http://a.example/\xe9\n")
    assert_error(out, f"{seeds}:1: not UTF-8 (byte 0xe9 at byte 17 of the line)")


@pytest.mark.timeout(60)
def test_skip_bad_counts_reserved_keys_and_injects_the_rest(tmp_path):
    out, _ = _inject(
        tmp_path, "http://a.example/\tgen=x@\u00b2\nhttp://b.example/\tfit=1\nhttp://c.example/\n", "--skip-bad"
    )
    assert out.returncode == 0, out.stderr
    assert "2 bad lines skipped" in out.stdout
    pages = _pages(tmp_path)
    assert list(pages) == ["http://c.example/"] and pages["http://c.example/"].meta == {}


@pytest.mark.parametrize(
    "meta, want",
    [
        ({"gen": "seg@1700000000"}, 1700000000),
        ({"gen": "x@\u00b2"}, None),
        ({"gen": "x@\u0661\u0662"}, None),
        ({"gen": "x@" + "9" * 40}, None),
        ({"gen": ""}, None),
        ({"gen": 5}, None),
        ({}, None),
    ],
)
def test_a_mark_already_in_a_db_never_breaks_generate(meta, want):
    assert mark_time(meta) == want


@pytest.mark.timeout(60)
def test_userinfo_in_seeds_is_dropped(tmp_path):
    out, _ = _inject(tmp_path, "http://user:pass@example.com/\nhttp://example.com/\nhttp://u@example.com/a\n")
    assert out.returncode == 0, out.stderr
    assert sorted(_pages(tmp_path)) == ["http://example.com/", "http://example.com/a"]
    assert "pass" not in out.stdout + out.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "text, good, bad",
    [
        (
            b"http://a.example/\nhttp://caf\xe9.example/\nhttp://b.example/\n",
            2,
            [":2: not UTF-8 (byte 0xe9 at byte 10"],
        ),
        (b"http://a.example/\xff\xfe\nhttp://b.example/\n", 1, [":1: not UTF-8 (byte 0xff at byte 17"]),
        (
            "http://a.example/\nhttp://b.example/\n".encode("utf-16"),
            0,
            [":1: not UTF-8", ":2: holds NUL bytes", ":3: holds NUL bytes"],
        ),
    ],
    ids=["latin-1 line", "bad bytes at the end of a line", "UTF-16 file"],
)
def test_skip_bad_skips_a_line_that_is_not_utf8_and_keeps_the_rest(tmp_path, text, good, bad):
    out, seeds = _inject(tmp_path, text, "--skip-bad")
    assert out.returncode == 0, out.stderr
    assert f"{len(bad)} bad lines skipped" in out.stdout
    for b in bad:
        assert f"{seeds}{b}" in out.stdout + out.stderr
    assert len(_pages(tmp_path)) == good
