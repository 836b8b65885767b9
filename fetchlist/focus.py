"""Focused crawling (seeds 001 and 003): per-domain "useful URL" rules.

A rules file maps a registered domain to regular expressions; a URL *fits* when one of its
domain's expressions matches it (``re.search``).  The check is made once, when a URL first
enters the db (inject, update): a fitting new page gets ``meta["fit"] = "1"`` and the score
``fit_score``, the others ``other_score`` (update options), so generate, which sorts by score,
fetches useful pages first.  Lookup is a dict by domain, so the cost per URL does not depend
on the number of domains.

File format (UTF-8; ``#`` starts a comment line; blank lines ignored)::

    # registered-domain   regex
    lenta.ru              ^https?://lenta\\.ru/news/\\d{4}/\\d{2}/\\d{2}/\\w+/
    example.com           /articles/\\d+\\.html$

A domain may be written in Unicode (``пример.рф``): it is converted to punycode
(``xn--e1afmkfd.xn--p1ai``) as the URLs in the db are, by the same normalizer.  A bad regex or
domain is a BadInput naming file and line.
"""

from __future__ import annotations

import os
import re

from fetchlist.generate import host_key
from fetchlist.normalize import normalize, registered_domain
from fetchlist.rulefiles import read_text
from webdb.errors import BadInput

__all__ = ["FocusRules"]


def _ascii_domain(domain: str, where: str) -> str:
    """``domain`` as the db stores hosts: lowercase, IDN labels in punycode."""
    if domain.isascii():
        return domain.lower()
    try:
        url = normalize(f"http://{domain}/")
    except (ValueError, BadInput):
        url = None
    if not url:
        raise BadInput(f"{where}: {domain!r} is not a valid domain name")
    return host_key(url)


class FocusRules:
    """Domain → compiled regexes.  ``fits(url)``: O(rules of the URL's domain)."""

    def __init__(self, rules: dict[str, list[re.Pattern]] | None = None, path: str | None = None) -> None:
        self.rules = rules or {}
        self.path = path

    @classmethod
    def parse(cls, text: str, name: str = "<string>") -> FocusRules:
        rules: dict[str, list[re.Pattern]] = {}
        for lineno, line in enumerate(text.splitlines(), 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            parts = s.split(None, 1)
            if len(parts) != 2:
                raise BadInput(f"{name}:{lineno}: expected 'domain regex', got {s!r}")
            domain, rx = _ascii_domain(parts[0], f"{name}:{lineno}"), parts[1]
            try:
                rules.setdefault(domain, []).append(re.compile(rx))
            except re.error as e:
                raise BadInput(f"{name}:{lineno}: bad regex {rx!r}: {e}") from None
        return cls(rules, name)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> FocusRules:
        path = os.fspath(path)
        return cls.parse(read_text(path, "cannot read focus rules", "focus rules are not UTF-8"), path)

    def fits(self, url: str) -> bool:
        h = host_key(url)
        pats = self.rules.get(registered_domain(h) if h else h)
        return bool(pats) and any(p.search(url) for p in pats)

    def __len__(self) -> int:
        return sum(len(v) for v in self.rules.values())
