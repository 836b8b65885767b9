"""URL normalization: one spelling per document, so that one document is one key in the db.

``normalize`` is w3lib's ``canonicalize_url`` (w3lib is pinned: a changed normal form silently
splits the db into two spellings of every URL) plus what it leaves out:

* only ``http`` and ``https`` URLs with a valid host are kept (anything else gives ``None``);
* scheme and host lowercased, a trailing dot of the host removed;
* default ports removed (``:80`` for http, ``:443`` for https), an invalid port (or 0) rejected;
* userinfo dropped (``http://user:pass@host/`` is ``http://host/``): credentials never reach
  the db, a fetchlist or a log, and one page has one key; an IPv4 host in any spelling the WHATWG URL
  parser accepts (``2130706433``, ``0x7f.1``, ``0177.0.0.1``) written as a dotted quad, and a
  host whose last label is a number but that is no valid IPv4 address rejected;
* a backslash before the query is a slash, as the WHATWG URL parser reads http(s) URLs
  (``\\\\other.example\\x`` against ``http://host/`` is ``http://other.example/x``);
* dot segments resolved (RFC 3986 §5.2.4), an empty path becomes ``/``;
* fragment removed; IDN hosts in punycode; query arguments sorted; percent-encoding made
  uniform (these four by w3lib);
* optionally, the per-domain www/non-www rule of a ``WwwRules``: a registered domain
  is crawled either as ``www.example.com`` or as ``example.com``, never both.

``normalize`` is idempotent: ``normalize(normalize(u)) == normalize(u)`` (property-tested).

Runtime cost: about 20 µs per URL (w3lib does most of the work), paid once per distinct
absolute URL: the normal form of the joined URL (fragment dropped) is kept in a bounded LRU
memo (``MEMO_SIZE`` URLs of at most 400 characters: at most about 16 MB, a few MB for usual
URLs), so the links a site repeats on every page (its navigation, its index) cost a join and
a dictionary lookup (about 3 µs).  On the documentation corpus of bench/corpus.py 9 links in
10 are found there.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from collections.abc import Mapping
from urllib.parse import urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from fetchlist.rulefiles import file_stamp, read_text
from webdb import MAX_URL_BYTES, validate_url
from webdb.errors import BadInput
from webdb.urls import host_of, registered_domain
from webdb.urls import public_suffix_list as _psl

__all__ = ["normalize", "clear_memo", "memo_info", "registered_domain", "host_of", "WwwRules", "WWW", "BARE"]

WWW = "www"
BARE = "bare"

_DEFAULT_PORT = {"http": "80", "https": "443"}
_EDGE = "".join(chr(i) for i in range(33))  # C0 controls and space, stripped at both ends
_TAB_NL = str.maketrans("", "", "\t\n\r")  # removed anywhere (WHATWG URL parser)
_HOST_RE = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*")
_MAX_HOST = 253
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_QUAD_RE = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")  # an IPv4 host already in normal form
_MAX_INPUT = 4 * MAX_URL_BYTES  # longer inputs cannot give an acceptable URL: rejected early
MEMO_SIZE = 1 << 14  # normal forms remembered (per process): a site's repeated links
_MEMO_MAX_KEY = 400  # a longer URL is not remembered: the memo's memory stays bounded


def normalize(url: str, base: str | None = None, *, www: WwwRules | None = None) -> str | None:
    """Return the normal form of ``url`` (resolved against ``base`` if given), or ``None``.

    ``None`` means: not an http(s) URL, no valid host, an invalid port, longer than the db
    accepts, or unparseable.  Never raises on any str input; a non-str gives ``None``.
    """
    if not isinstance(url, str) or (base is not None and not isinstance(base, str)):
        return None
    try:
        return _normalize(url, base, www)
    except ValueError:  # urllib and w3lib signal every malformed URL with ValueError
        return None


def _normalize(url: str, base: str | None, www: WwwRules | None) -> str | None:
    u = _slashes(_clean(url))
    if len(u) > _MAX_INPUT:
        return None
    if base is not None:
        u = urljoin(_slashes(_clean(base)), u)
    # The fragment is dropped anyway (urlsplit ends the URL at its first "#" too): without it,
    # every "page.html#section" of a site is one memo entry.
    u = u.partition("#")[0]
    known = _absolute(u) if len(u) <= _MEMO_MAX_KEY else _absolute.__wrapped__(u)
    if known is None:
        return None
    out, scheme, host, valid = known
    rewritten = host if www is None else www.rewrite_host(host)
    if rewritten == host:
        return out if valid else None
    return _valid(f"{scheme}://{rewritten}{out[len(scheme) + 3 + len(host) :]}")


@functools.lru_cache(maxsize=MEMO_SIZE)
def _absolute(u: str) -> tuple[str, str, str, bool] | None:
    """(normal form, scheme, host, whether the db accepts it) of the absolute URL ``u`` before
    any www rule, or None.  Memoized (``MEMO_SIZE``): a pure function of ``u``."""
    scheme = u.partition(":")[0].lower()
    if scheme not in _DEFAULT_PORT or not urlsplit(u).netloc:
        return None
    p = urlsplit(canonicalize_url(u))
    hostport = p.netloc.rpartition("@")[2]  # userinfo dropped: one key per page, no credentials
    host, port = _split_hostport(hostport)
    if host is None:
        return None
    if port is not None:
        if not port.isdigit() or not port.isascii() or not 0 < int(port) <= 65535:
            return None
        port = str(int(port))
        if port == _DEFAULT_PORT[scheme]:
            port = None
    netloc = host + (":" + port if port else "")
    path = remove_dot_segments(p.path) or "/"
    out = urlunsplit((scheme, netloc, path, p.query, ""))
    return out, scheme, host, _valid(out) is not None


def memo_info() -> functools._CacheInfo:
    """Hits, misses and size of this process's memo of normal forms."""
    return _absolute.cache_info()


def clear_memo() -> None:
    """Forget every remembered normal form (the next ``normalize`` of each URL computes it)."""
    _absolute.cache_clear()


def _valid(url: str) -> str | None:
    try:
        validate_url(url)
    except BadInput:
        return None
    return url


def _clean(s: str) -> str:
    s = s.strip(_EDGE)
    return s.translate(_TAB_NL) if ("\t" in s or "\n" in s or "\r" in s) else s


def _slashes(s: str) -> str:
    """Backslashes before the query or fragment as slashes: the WHATWG URL parser reads them so
    in http(s) URLs (a URL of another scheme is refused anyway)."""
    if "\\" not in s:
        return s
    end = len(s)
    for c in "?#":
        i = s.find(c)
        if 0 <= i < end:
            end = i
    return s[:end].replace("\\", "/") + s[end:]


def _split_hostport(hostport: str) -> tuple[str | None, str | None]:
    """(lowercased valid host, port string or None); host None if the host is invalid."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            return None, None
        try:
            ip = ipaddress.IPv6Address(hostport[1:end])
        except ValueError:
            return None, None
        rest = hostport[end + 1 :]
        if rest and not rest.startswith(":"):
            return None, None
        return f"[{ip.compressed}]", (rest[1:] or None) if rest else None
    host, colon, port = hostport.partition(":")
    host = host.lower().rstrip(".")
    if host and not _QUAD_RE.fullmatch(host) and _ends_in_number(host):
        host = _ipv4(host)
        if host is None:
            return None, None
    if not host or len(host) > _MAX_HOST or not _HOST_RE.fullmatch(host):
        return None, None
    return host, (port or None) if colon else None


def _ends_in_number(host: str) -> bool:
    """WHATWG "ends in a number": the last label is decimal digits or 0x-hex (then the host
    must be an IPv4 address)."""
    last = host.rsplit(".", 1)[-1]
    if last.isascii() and last.isdigit():
        return True
    return last[:2] == "0x" and all(c in "0123456789abcdef" for c in last[2:])


def _ipv4(host: str) -> str | None:
    """The dotted quad of a WHATWG IPv4 host (``2130706433``, ``0x7f.1``, ``0177.0.0.1``), or
    None if it is not a valid one: 1 to 4 parts, decimal, 0x hex or 0-prefixed octal, the last
    part filling the remaining bytes."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    nums = []
    for p in parts:
        if p[:2] == "0x":
            digits, base = p[2:], 16
        elif len(p) > 1 and p[0] == "0":
            digits, base = p[1:], 8
        else:
            digits, base = p, 10
        if not p or not digits.isascii() or (digits and not all(c in "0123456789abcdef"[:base] for c in digits)):
            return None
        nums.append(int(digits, base) if digits else 0)
    *head, last = nums
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(nums)):
        return None
    value = last + sum(n << (8 * (3 - i)) for i, n in enumerate(head))
    return ".".join(str((value >> shift) & 255) for shift in (24, 16, 8, 0))


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4: resolve ``.`` and ``..`` segments of an absolute path."""
    if "." not in path:
        return path
    segs = path.split("/")
    out: list[str] = []
    for s in segs[1:-1]:
        if s == "..":
            if out:
                out.pop()
        elif s != ".":
            out.append(s)
    last = segs[-1]
    if last in (".", ".."):
        if last == ".." and out:
            out.pop()
        last = ""
    return "/" + "/".join([*out, last]) if segs[0] == "" else path


class WwwRules:
    """Per registered domain, the form its hosts are crawled in: ``"www"`` or ``"bare"``.

    Only the two spellings of the registered domain itself are rewritten: with ``example.com
    www``, ``example.com`` becomes ``www.example.com``; with ``example.com bare``,
    ``www.example.com`` becomes ``example.com``.  Other subdomains are left alone, as are
    domains without a rule.

    File format (UTF-8 text; ``#`` starts a comment; blank lines ignored)::

        # registered-domain   form
        example.com           www
        lenta.ru              bare

    A domain that is not a registered domain (``www.example.com``, ``co.uk``), an unknown
    form or a domain given twice is an error naming the file and line.
    """

    def __init__(self, rules: Mapping[str, str] | None = None, *, path: str | None = None) -> None:
        self._rules: dict[str, str] = {}
        for domain, form in (rules or {}).items():
            err = self._check(domain, form)
            if err:
                raise BadInput(f"www rule {domain!r} {form!r}: {err}")
            self._rules[domain.lower()] = form
        self.path = path
        self._stamp = file_stamp(path) if path else None

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> WwwRules:
        """Load the rules of ``path``; BadInput names the file and line of a bad rule."""
        path = os.fspath(path)
        stamp = file_stamp(path)
        rules = cls.parse(read_text(path), path)
        rules.path, rules._stamp = path, stamp
        return rules

    @classmethod
    def parse(cls, text: str, name: str = "<string>") -> WwwRules:
        rules: dict[str, str] = {}
        for lineno, line in enumerate(text.splitlines(), 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 2:
                raise BadInput(f"{name}:{lineno}: expected 'domain www|bare', got {line.strip()!r}")
            domain, form = fields[0].lower(), fields[1].lower()
            err = cls._check(domain, form)
            if not err and rules.get(domain, form) != form:
                err = f"domain {domain!r} already has the rule {rules[domain]!r}"
            if err:
                raise BadInput(f"{name}:{lineno}: {err}")
            rules[domain] = form
        return cls(rules)

    @staticmethod
    def _check(domain: str, form: str) -> str | None:
        if form not in (WWW, BARE):
            return f"form must be 'www' or 'bare', not {form!r}"
        d = domain.lower()
        if not _HOST_RE.fullmatch(d) or "." not in d:
            return f"{domain!r} is not a domain name"
        rd = _psl().privatesuffix(d)
        if rd is None:
            return f"{domain!r} is a public suffix, not a registered domain"
        if rd != d:
            return f"{domain!r} is not a registered domain (its registered domain is {rd!r})"
        return None

    def reload_if_changed(self) -> bool:
        """Reload from the file if its mtime or size changed; return True if reloaded.

        A bad edit raises BadInput and keeps the previous rules.
        """
        if self.path is None or file_stamp(self.path) == self._stamp:
            return False
        fresh = WwwRules.from_file(self.path)
        self._rules, self._stamp = fresh._rules, fresh._stamp
        return True

    def form(self, domain: str) -> str | None:
        """``"www"``, ``"bare"`` or ``None`` (no rule) for a registered domain."""
        return self._rules.get(domain.lower())

    def rewrite_host(self, host: str) -> str:
        """``host`` in the form its registered domain's rule asks for (lowercased input)."""
        if not self._rules:
            return host
        rd = registered_domain(host)
        form = self._rules.get(rd)
        if form == WWW and host == rd:
            return "www." + rd
        if form == BARE and host == "www." + rd:
            return rd
        return host

    def rewrite(self, url: str) -> str | None:
        """``normalize(url, www=self)``: the URL with its host in the chosen form."""
        return normalize(url, www=self)

    def items(self) -> list[tuple[str, str]]:
        return sorted(self._rules.items())

    def __len__(self) -> int:
        return len(self._rules)

    def __repr__(self) -> str:
        return f"WwwRules({len(self._rules)} domains, path={self.path!r})"
