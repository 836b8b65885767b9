"""fetchlist.filters: Nutch-style regex, prefix and suffix filter files."""

from __future__ import annotations

import os
import time

import pytest

from fetchlist.filters import PREFIX, REGEX, SUFFIX, UrlFilter, kind_of
from webdb.errors import BadInput


def write(path, text, bump=0):
    path.write_text(text)
    if bump:  # a later mtime, as an edit some time after the load would have
        t = time.time_ns() + bump * 10**9
        os.utime(path, ns=(t, t))
    return path


def test_regex_first_match_wins_and_unmatched_rejected(tmp_path):
    f = UrlFilter.from_files(
        [
            write(
                tmp_path / "regex-urlfilter.txt",
                """
# skip images
-\\.(gif|jpg|png)$
# news articles and the home page only
+^http://lenta\\.ru/news/\\d{4}/
-^http://lenta\\.ru/news/
+^http://lenta\\.ru/$
""",
            )
        ]
    )
    assert f.accept("http://lenta.ru/news/2010/05/09/a/")
    assert not f.accept("http://lenta.ru/news/2010/05/09/a.png")  # first rule wins
    assert not f.accept("http://lenta.ru/news/archive/")
    assert f.accept("http://lenta.ru/")
    assert not f.accept("http://lenta.ru/other/")  # no rule matched: rejected (Nutch)
    assert not f.accept(None)
    assert f.explain("http://lenta.ru/other/").endswith("(no rule matched)")
    assert f.explain("http://lenta.ru/a.gif").endswith("regex-urlfilter.txt:3")
    assert f.explain("http://lenta.ru/") == "accepted"


def test_regex_catch_all(tmp_path):
    f = UrlFilter.from_files([write(tmp_path / "rules.txt", "-^https://\n+.\n")])
    assert f.accept("http://a.org/") and not f.accept("https://a.org/")


def test_prefix_file(tmp_path):
    f = UrlFilter.from_files(
        [
            write(
                tmp_path / "prefix-urlfilter.txt",
                """
-http://a.org/private/
http://a.org/
+http://b.org/
""",
            )
        ]
    )
    assert f.accept("http://a.org/x") and f.accept("http://b.org/")
    assert not f.accept("http://a.org/private/x")
    assert not f.accept("http://c.org/")  # unmatched: rejected


def test_suffix_file(tmp_path):
    f = UrlFilter.from_files(
        [
            write(
                tmp_path / "suffix-urlfilter.txt",
                """
# bare lines reject
.JPG
.zip
+.html
-.htm
""",
            )
        ]
    )
    assert not f.accept("http://a.org/pic.jpg")
    assert not f.accept("http://a.org/pic.JpG?w=100")  # query ignored, case-insensitive
    assert not f.accept("http://a.org/f.zip#x")
    assert f.accept("http://a.org/page.html")
    assert not f.accept("http://a.org/page.htm")
    assert f.accept("http://a.org/dir/")  # unmatched: accepted


def test_chain_every_file_must_accept(tmp_path):
    f = UrlFilter.from_files(
        [
            write(tmp_path / "a-prefix.txt", "http://a.org/\n"),
            write(tmp_path / "b-suffix.txt", ".pdf\n"),
            (REGEX, write(tmp_path / "c.rules", "-/tmp/\n+.\n")),
        ]
    )
    assert [x.kind for x in f.files] == [PREFIX, SUFFIX, REGEX]
    assert f.accept("http://a.org/x.html")
    assert not f.accept("http://b.org/x.html")
    assert not f.accept("http://a.org/x.pdf")
    assert not f.accept("http://a.org/tmp/x")
    assert UrlFilter().accept("http://anything/")
    assert UrlFilter.from_settings({"url_filters": []}).accept("http://anything/")


def test_kind_of():
    assert kind_of("/x/regex-urlfilter.txt") == REGEX
    assert kind_of("/x/prefix-urlfilter.txt") == PREFIX
    assert kind_of("SUFFIX.txt") == SUFFIX
    assert kind_of("rules") == REGEX


def test_errors_name_file_and_line(tmp_path):
    p = write(tmp_path / "regex-urlfilter.txt", "+^http://ok/\n\n-(unclosed\n")
    with pytest.raises(BadInput, match=r"regex-urlfilter\.txt:3: bad regex '\(unclosed'"):
        UrlFilter.from_files([p])
    with pytest.raises(BadInput, match=r"rules\.txt:1: a regex rule starts with"):
        UrlFilter.from_files([write(tmp_path / "rules.txt", "^http://x/\n")])
    with pytest.raises(BadInput, match=r":2: empty prefix"):
        UrlFilter.from_files([write(tmp_path / "prefix.txt", "http://a/\n+\n")])
    with pytest.raises(BadInput, match="cannot read"):
        UrlFilter.from_files([tmp_path / "missing.txt"])
    with pytest.raises(BadInput, match="unknown filter kind"):
        UrlFilter.from_files([("glob", write(tmp_path / "g.txt", "+x\n"))])
    bad = tmp_path / "latin.txt"
    bad.write_bytes(b"+caf\xe9\n")
    with pytest.raises(BadInput, match="not UTF-8"):
        UrlFilter.from_files([bad])


def test_reload_if_changed(tmp_path):
    p = write(tmp_path / "regex-urlfilter.txt", "+^http://a/\n")
    q = write(tmp_path / "suffix.txt", ".gif\n")
    f = UrlFilter.from_files([p, q])
    assert not f.reload_if_changed()
    assert f.accept("http://a/x") and not f.accept("http://b/x")
    write(p, "+^http://b/\n", bump=1)
    assert f.reload_if_changed()
    assert not f.accept("http://a/x") and f.accept("http://b/x")
    assert not f.reload_if_changed()
    # a bad edit raises and keeps every previous rule, including other changed files
    write(q, ".png\n", bump=2)
    write(p, "+(\n", bump=2)
    with pytest.raises(BadInput, match=r":1: bad regex"):
        f.reload_if_changed()
    assert f.accept("http://b/x.png") and not f.accept("http://b/x.gif")
    write(p, "+^http://c/\n", bump=3)
    assert f.reload_if_changed()
    assert f.accept("http://c/x.gif") and not f.accept("http://c/x.png")
