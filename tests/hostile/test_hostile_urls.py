"""Hostile URLs: every URL entering the db passes one normalize + filter path, whatever its
source (seed, outlink, redirect, a crafted segment); the address policy refuses non-global
targets."""

from __future__ import annotations

import pytest

from fetchlist.net import address_refusal
from fetchlist.normalize import normalize

CANONICAL = [
    ("http://2130706433/", "http://127.0.0.1/"),
    ("http://0x7f.1/", "http://127.0.0.1/"),
    ("http://0x7F.0.0.1/", "http://127.0.0.1/"),
    ("http://0177.0.0.1/", "http://127.0.0.1/"),
    ("http://127.1/", "http://127.0.0.1/"),
    ("http://10.1.258/", "http://10.1.1.2/"),
    ("http://4294967295/", "http://255.255.255.255/"),
    ("http://0/", "http://0.0.0.0/"),
    ("http://1.2.3.4./x", "http://1.2.3.4/x"),
    ("http://@example.com/", "http://example.com/"),
    ("http://:@example.com/", "http://example.com/"),
    ("http://user@example.com/", "http://example.com/"),
    ("http://user:pass@example.com:8080/a", "http://example.com:8080/a"),
    ("http://example.com:00080/", "http://example.com/"),
    ("https://example.com:443/", "https://example.com/"),
    ("http://example.com:8080/", "http://example.com:8080/"),
    ("HTTP://EXAMPLE.COM./a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/#frag", "http://example.com/"),
    ("\ufeffhttp://example.com/", None),  # a BOM is not an edge space: the seed reader strips it
    (" \t http://example.com/x \n", "http://example.com/x"),
    ("http://ex\tam\nple.com/", "http://example.com/"),
    ("http://[::1]:8080/", "http://[::1]:8080/"),
    ("http://[0:0:0:0:0:0:0:1]/", "http://[::1]/"),
]

REJECTED = [
    "http://example.com:0/",
    "http://example.com:65536/",
    "http://example.com:-1/",
    "http://example.com:８０/",
    "http://256.1.1.1/",
    "http://1.2.3.4.5/",
    "http://4294967296/",
    "http://0x100000000/",
    "http://08.1.1.1/",
    "http://1..2/",
    "http://example.123/",
    "javascript:alert(1)",
    "file:///etc/passwd",
    "ftp://example.com/",
    "data:text/html,hi",
    "mailto:a@example.com",
    "gopher://example.com/",
    "http:///nohost",
    "http://exa mple.com/",
    "http://[::1/",
    "http://" + "a" * 300 + ".com/",
    "//example.com/",
    "",
]


@pytest.mark.parametrize("url, want", CANONICAL)
def test_normal_form(url, want):
    assert normalize(url) == want
    if want is not None:
        assert normalize(want) == want


@pytest.mark.parametrize("url", REJECTED)
def test_rejected(url):
    assert normalize(url) is None


@pytest.mark.parametrize(
    "ip, why",
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("169.254.169.254", "link-local"),  # cloud metadata
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not global"),  # carrier-grade NAT
        ("93.184.216.34", None),
        ("2606:2800:220:1:248:1893:25c8:1946", None),
        ("2002:7f00:1::", "6to4 of 127.0.0.1: loopback"),  # a 6to4 relay delivers it to 127.0.0.1
        ("2002:a00:1::1", "6to4 of 10.0.0.1: private"),
        ("2002:a9fe:a9fe::", "6to4 of 169.254.169.254: link-local"),
        ("2002:5db8:d822::1", None),  # 6to4 of a global address
        ("fec0::1", "site-local"),
        ("feff:ffff::1", "site-local"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "private"),  # Teredo
        ("64:ff9b::7f00:1", "reserved"),  # NAT64
    ],
)
def test_address_policy(ip, why):
    assert address_refusal(ip) == why


@pytest.mark.parametrize(
    "href",
    [
        "http://user:pass@example.com/a",
        "http://user@example.com/a",
        "http://user:p%40ss@example.com:80/a",
        "//user:pass@example.com/a",
        "http://a@b@example.com/a",
    ],
)
def test_userinfo_is_dropped_from_every_url(href):
    """One page, one key; no credentials in the db, a fetchlist or a log (seed, outlink and
    redirect alike go through normalize)."""
    assert normalize(href, "http://example.com/") == "http://example.com/a"
    assert normalize(href, "http://u:p@other.example/") == "http://example.com/a"
