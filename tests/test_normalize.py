"""fetchlist.normalize: the normal form, its idempotence, www rules, registered domains."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchlist.normalize import (
    WwwRules,
    clear_memo,
    host_of,
    memo_info,
    normalize,
    registered_domain,
    remove_dot_segments,
)
from webdb.errors import BadInput
from webdb.tables.records import validate_url

CASES = [
    ("HTTP://Www.Example.COM/a", "http://www.example.com/a"),
    ("http://example.com", "http://example.com/"),
    ("http://example.com:80/a", "http://example.com/a"),
    ("https://example.com:443/a", "https://example.com/a"),
    ("http://example.com:443/a", "http://example.com:443/a"),
    ("https://example.com:80/a", "https://example.com:80/a"),
    ("http://example.com:08080/", "http://example.com:8080/"),
    ("http://example.com:/a", "http://example.com/a"),
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/../../a", "http://example.com/a"),
    ("http://example.com/a/b/..", "http://example.com/a/"),
    ("http://example.com/a/%2E%2E/b", "http://example.com/b"),
    ("http://example.com/a#frag", "http://example.com/a"),
    ("http://example.com/a?b=2&a=1", "http://example.com/a?a=1&b=2"),
    ("http://example.com/a b", "http://example.com/a%20b"),
    ("http://example.com/%7Euser", "http://example.com/~user"),
    ("http://bücher.de/ä", "http://xn--bcher-kva.de/%C3%A4"),
    ("http://EXAMPLE.com./", "http://example.com/"),
    ("  http://example.com/\n", "http://example.com/"),
    ("http://exam\tple.com/", "http://example.com/"),
    ("http://[::1]:80/x", "http://[::1]/x"),
    ("http://[0:0:0:0:0:0:0:1]:8080/", "http://[::1]:8080/"),
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000/"),
    ("http://u:P@Example.com/", "http://example.com/"),
    ("http://my_host.example.com/", "http://my_host.example.com/"),
]

REJECTED = [
    "ftp://example.com/",
    "javascript:alert(1)",
    "mailto:a@example.com",
    "data:text/html,hi",
    "tel:+1234",
    "//example.com/a",
    "/relative/path",
    "http:example.com",
    "http://",
    "http:///a",
    "http://exa mple.com/",
    "http://x..com/",
    "http://-x.com/",
    "http://x.com:99999/",
    "http://x.com:abc/",
    "http://[::1/",
    "http://[zz::1]/",
    "http://" + "a" * 300 + ".com/",
    "http://example.com/" + "a" * 9000,
    "",
    "   ",
    "\x00",
]


@pytest.mark.parametrize("url,expected", CASES)
def test_normal_form(url, expected):
    assert normalize(url) == expected
    assert normalize(expected) == expected


@pytest.mark.parametrize("url", REJECTED)
def test_rejected(url):
    assert normalize(url) is None


def test_non_str_is_none():
    for bad in (None, b"http://example.com/", 42, ["http://x.com/"]):
        assert normalize(bad) is None
    assert normalize("a", base=b"http://x.com/") is None


def test_relative_to_base():
    base = "http://example.com/a/b/page.html?q=1"
    assert normalize("c.html", base) == "http://example.com/a/b/c.html"
    assert normalize("../c.html", base) == "http://example.com/a/c.html"
    assert normalize("/c", base) == "http://example.com/c"
    assert normalize("?x=1", base) == "http://example.com/a/b/page.html?x=1"
    assert normalize("#top", base) == "http://example.com/a/b/page.html?q=1"
    assert normalize("//other.org/x", base) == "http://other.org/x"
    assert normalize("https://other.org", base) == "https://other.org/"
    assert normalize("mailto:x@y.z", base) is None
    assert normalize("javascript:void(0)", base) is None


def test_dot_segments_rfc3986_examples():
    # RFC 3986 §5.4: resolution examples whose results involve dot segments
    base = "http://a/b/c/d;p?q"
    for ref, out in [
        ("./g", "http://a/b/c/g"),
        ("../g", "http://a/b/g"),
        ("../..", "http://a/"),
        ("../../g", "http://a/g"),
        ("../../../g", "http://a/g"),
        ("/./g", "http://a/g"),
        ("g.", "http://a/b/c/g."),
        ("..g", "http://a/b/c/..g"),
        ("./../g", "http://a/b/g"),
        ("g/./h", "http://a/b/c/g/h"),
        ("g/../h", "http://a/b/c/h"),
    ]:
        assert normalize(ref, base) == out, ref
    assert remove_dot_segments("/a/b/c/./../../g") == "/a/g"
    assert remove_dot_segments("/.") == "/"
    assert remove_dot_segments("/a/.") == "/a/"
    assert remove_dot_segments("/a.html") == "/a.html"


url_text = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda s, h, p, q: f"{s}://{h}{p}{q}",
        st.sampled_from(["http", "HTTP", "https", "ftp", "hTTps"]),
        st.sampled_from(
            [
                "example.com",
                "Www.Example.COM",
                "bücher.de",
                "[::1]",
                "x.com:80",
                "x.com:443",
                "127.0.0.1:8080",
                "a.b.c.example.co.uk",
                "x.com.",
                "host_1.org",
            ]
        ),
        st.text(alphabet="/.%aZ09~ ?#=&;:@+ü\t", max_size=30),
        st.text(alphabet="?&=ab#%/.", max_size=10),
    ),
)


@settings(max_examples=400, deadline=None)
@given(url_text, st.sampled_from([None, "http://example.com/a/b", "https://x.org:8443/p?q#f", "garbage"]))
def test_never_raises_and_idempotent(url, base):
    out = normalize(url, base)
    if out is not None:
        assert normalize(out) == out
        assert out.startswith(("http://", "https://"))
        validate_url(out)
        assert "#" not in out


_WWW = WwwRules({"example.com": "www", "x.com": "bare", "example.co.uk": "www"})


@settings(max_examples=300, deadline=None)
@given(
    url_text,
    st.sampled_from([None, "http://example.com/a/b", "https://www.x.com:8443/p?q#f", "garbage"]),
    st.sampled_from(["", "#", "#f", "#a#b", "#/../x?y"]),
)
def test_memo_answers_what_a_fresh_computation_answers(url, base, fragment):
    """The memo of normal forms is invisible: a remembered answer (with or without a www rule,
    with any fragment) is the one computed from nothing."""
    answers = []
    for www in (None, _WWW):
        clear_memo()
        fresh = normalize(url, base, www=www)
        assert normalize(url, base, www=www) == fresh  # remembered now (if it is short enough)
        assert normalize(url + fragment, base, www=www) == normalize(url, base, www=www)
        clear_memo()
        assert normalize(url + fragment, base, www=www) == fresh
        answers.append(fresh)
    assert answers[1] == (None if answers[0] is None else normalize(answers[0], www=_WWW))


def test_memo_is_bounded_and_counts_hits():
    clear_memo()
    for i in range(3):
        assert normalize(f"/p{i % 2}.html#s{i}", "http://example.com/a/") == f"http://example.com/p{i % 2}.html"
    info = memo_info()
    assert (info.hits, info.misses, info.currsize) == (1, 2, 2) and info.maxsize > 0
    long_url = "http://example.com/" + "a" * 1000
    assert normalize(long_url) == long_url and memo_info().currsize == 2  # long URLs are not kept


def test_www_rule_at_the_length_limit():
    """A URL one www. too long for the db is accepted once the bare rule drops the www."""
    path = "/" + "a" * (8192 - len("http://x.com/"))
    assert normalize("http://x.com" + path) is not None
    assert normalize("http://www.x.com" + path) is None
    assert normalize("http://www.x.com" + path, www=_WWW) == "http://x.com" + path
    assert normalize("http://x.com" + path, www=WwwRules({"x.com": "www"})) is None


def test_registered_domain():
    assert registered_domain("www.bbc.co.uk") == "bbc.co.uk"
    assert registered_domain("News.BBC.co.uk.") == "bbc.co.uk"
    assert registered_domain("example.com") == "example.com"
    assert registered_domain("a.b.github.io") == "b.github.io"
    assert registered_domain("co.uk") == "co.uk"
    assert registered_domain("localhost") == "localhost"
    assert registered_domain("127.0.0.2") == "127.0.0.2"
    assert registered_domain("[::1]") == "[::1]"
    assert registered_domain("xn--bcher-kva.de") == "xn--bcher-kva.de"
    assert registered_domain("lenta.ru") == "lenta.ru"


def test_host_of():
    assert host_of("http://WWW.Example.com:8080/a") == "www.example.com"
    assert host_of("http://[::1]:80/") == "::1"
    assert host_of("not a url") is None
    assert host_of("http://[::1/") is None
    assert host_of(None) is None


def test_www_rules_rewrite():
    w = WwwRules({"example.com": "www", "lenta.ru": "bare"})
    assert normalize("http://example.com/a", www=w) == "http://www.example.com/a"
    assert normalize("http://www.example.com/a", www=w) == "http://www.example.com/a"
    assert normalize("http://EXAMPLE.com:80/a", www=w) == "http://www.example.com/a"
    assert normalize("http://www.lenta.ru/news/", www=w) == "http://lenta.ru/news/"
    assert normalize("http://lenta.ru/news/", www=w) == "http://lenta.ru/news/"
    assert normalize("http://news.lenta.ru/", www=w) == "http://news.lenta.ru/"  # other subdomains kept
    assert normalize("http://www.other.org/", www=w) == "http://www.other.org/"  # no rule
    assert normalize("/x", "http://lenta.ru/a", www=w) == "http://lenta.ru/x"
    assert w.rewrite("http://www.lenta.ru/") == "http://lenta.ru/"
    assert w.form("Example.com") == "www" and w.form("other.org") is None
    assert len(w) == 2 and w.items() == [("example.com", "www"), ("lenta.ru", "bare")]


def test_www_rules_file_and_errors(tmp_path):
    p = tmp_path / "www.txt"
    p.write_text("# domain form\nexample.com www\n\nlenta.ru   bare  # news\n")
    w = WwwRules.from_file(p)
    assert w.items() == [("example.com", "www"), ("lenta.ru", "bare")]
    for text, msg in [
        ("example.com both\n", ":1: form must be"),
        ("\nwww.example.com www\n", ":2: 'www.example.com' is not a registered domain"),
        ("co.uk www\n", "is a public suffix"),
        ("example.com www\nexample.com bare\n", ":2: domain 'example.com' already has"),
        ("example.com\n", ":1: expected 'domain www|bare'"),
        ("exa mple.com www x\n", ":1: expected"),
    ]:
        bad = tmp_path / "bad.txt"
        bad.write_text(text)
        with pytest.raises(BadInput, match=msg) as e:
            WwwRules.from_file(bad)
        assert str(bad) in str(e.value)
    with pytest.raises(BadInput, match="cannot read"):
        WwwRules.from_file(tmp_path / "missing.txt")
    with pytest.raises(BadInput):
        WwwRules({"example.com": "wwww"})


def test_www_rules_reload(tmp_path):
    p = tmp_path / "www.txt"
    p.write_text("example.com www\n")
    w = WwwRules.from_file(p)
    assert not w.reload_if_changed()
    p.write_text("example.com bare\n")
    os.utime(p, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert w.reload_if_changed()
    assert normalize("http://www.example.com/", www=w) == "http://example.com/"
    p.write_text("example.com sometimes\n")
    os.utime(p, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
    with pytest.raises(BadInput, match=":1:"):
        w.reload_if_changed()
    assert w.form("example.com") == "bare"  # previous rules kept
