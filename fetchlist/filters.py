"""URL filters read from files, in the Nutch convention, reloadable between rounds.

A ``UrlFilter`` is a chain of filter files.  A URL is accepted only if **every** file accepts
it.  Inside one file the rules are tried in order and the **first** rule that matches decides
(``+`` accept, ``-`` reject).  What happens to a URL no rule of a file matches depends on the
kind of file, as in Nutch:

==========  =============================  ====================================  ==============
kind        a line                         matches when                          no rule matches
==========  =============================  ====================================  ==============
regex       ``+REGEX`` / ``-REGEX``        ``re.search(REGEX, url)``             **rejected**
prefix      ``+PREFIX`` / ``-PREFIX`` /    ``url.startswith(PREFIX)``            **rejected**
            ``PREFIX`` (= ``+PREFIX``)
suffix      ``+SUFFIX`` / ``-SUFFIX`` /    the URL without query ends with       accepted
            ``SUFFIX`` (= ``-SUFFIX``)     SUFFIX, compared case-insensitively
==========  =============================  ====================================  ==============

So a regex file that should let everything else through ends with the line ``+.``, as Nutch's
``regex-urlfilter.txt`` does.  Lines starting with ``#`` and blank lines are ignored; leading
and trailing whitespace of a line is dropped.

The kind of a file is given explicitly as a ``(kind, path)`` pair, else declared by the file's
first line (``# webdb-filter-kind: regex``; ``webdb filters`` writes it), else comes from its
name (``…prefix…`` → prefix, ``…suffix…`` → suffix, anything else → regex).

``reload_if_changed()`` re-reads the files whose mtime or size changed (the focused-crawl rules
of a focused crawl are edited while it runs).  A bad rule raises ``BadInput`` naming the file
and line; on reload the previous rules are then kept.

Runtime cost of ``accept``: O(rules) regex searches / string comparisons per URL, stopping at
the first match.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from fetchlist.rulefiles import file_stamp, read_text
from webdb.errors import BadInput

__all__ = ["UrlFilter", "FilterFile", "REGEX", "PREFIX", "SUFFIX"]

REGEX = "regex"
PREFIX = "prefix"
SUFFIX = "suffix"
_KINDS = (REGEX, PREFIX, SUFFIX)
_DEFAULT_SIGN = {PREFIX: True, SUFFIX: False}  # a line without +/- in a prefix / suffix file
_UNMATCHED = {REGEX: False, PREFIX: False, SUFFIX: True}
# How errors about a filter file word it (fetchlist.rulefiles).
CANNOT_READ, NOT_UTF8 = "cannot read filter file", "filter file is not UTF-8"


@dataclass(frozen=True, slots=True)
class _Rule:
    accept: bool
    text: str
    regex: re.Pattern | None
    lineno: int


class FilterFile:
    """The rules of one filter file (see the module docstring for the format)."""

    def __init__(self, path: str | os.PathLike, kind: str | None = None) -> None:
        self.path = os.fspath(path)
        self._stamp: tuple[int, int] | None = file_stamp(self.path, CANNOT_READ)
        self.text = read_text(self.path, CANNOT_READ, NOT_UTF8)
        self.kind = kind or declared_kind(self.text) or kind_of(self.path)
        if self.kind not in _KINDS:
            raise BadInput(f"{self.path}: unknown filter kind {self.kind!r} (one of {', '.join(_KINDS)})")
        self.rules = parse_rules(self.text, self.kind, self.path)

    @classmethod
    def from_text(cls, text: str, kind: str, name: str = "<string>") -> FilterFile:
        """Rules read elsewhere (generate in a rack ships the coordinator's files to every
        host); ``name`` is what errors and ``explain`` call it; ``changed()`` is always False."""
        if kind not in _KINDS:
            raise BadInput(f"{name}: unknown filter kind {kind!r} (one of {', '.join(_KINDS)})")
        f = cls.__new__(cls)
        f.path, f.kind, f._stamp, f.text = name, kind, None, text
        f.rules = parse_rules(text, kind, name)
        return f

    def changed(self) -> bool:
        return self._stamp is not None and file_stamp(self.path, CANNOT_READ) != self._stamp

    def accept(self, url: str) -> bool:
        return self.match(url)[0]

    def match(self, url: str) -> tuple[bool, int | None]:
        """(accepted, line number of the deciding rule or None when no rule matched)."""
        if self.kind == REGEX:
            for r in self.rules:
                if r.regex.search(url):
                    return r.accept, r.lineno
        elif self.kind == PREFIX:
            for r in self.rules:
                if url.startswith(r.text):
                    return r.accept, r.lineno
        else:
            bare = url.partition("?")[0].partition("#")[0].lower()
            for r in self.rules:
                if bare.endswith(r.text):
                    return r.accept, r.lineno
        return _UNMATCHED[self.kind], None

    def __repr__(self) -> str:
        return f"FilterFile({self.path!r}, {self.kind}, {len(self.rules)} rules)"


KIND_LINE = "# webdb-filter-kind: "  # a file's first line may declare its kind (over its name)


def declared_kind(text: str) -> str | None:
    """The kind a file declares on its first line (``# webdb-filter-kind: regex``), or None."""
    first = text.split("\n", 1)[0].strip()
    return first[len(KIND_LINE) :].strip() if first.startswith(KIND_LINE) else None


def kind_of(path: str) -> str:
    """The filter kind a file name implies: prefix, suffix, else regex."""
    name = os.path.basename(path).lower()
    if PREFIX in name:
        return PREFIX
    if SUFFIX in name:
        return SUFFIX
    return REGEX


def parse_rules(text: str, kind: str, name: str = "<string>") -> list[_Rule]:
    """Parse the lines of a filter file; BadInput names ``name`` and the line of a bad rule."""
    rules = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line[0] in "+-":
            accept, body = line[0] == "+", line[1:].strip()
        elif kind == REGEX:
            raise BadInput(f"{name}:{lineno}: a regex rule starts with '+' or '-': {line!r}")
        else:
            accept, body = _DEFAULT_SIGN[kind], line
        if not body:
            raise BadInput(f"{name}:{lineno}: empty {kind} after {line[0]!r}")
        regex = None
        if kind == REGEX:
            try:
                regex = re.compile(body)
            except re.error as e:
                raise BadInput(f"{name}:{lineno}: bad regex {body!r}: {e}") from None
        elif kind == SUFFIX:
            body = body.lower()
        rules.append(_Rule(accept, body, regex, lineno))
    return rules


class UrlFilter:
    """A chain of filter files: a URL is accepted if every file accepts it.

    An empty chain accepts every str.
    """

    def __init__(self, files: Iterable[FilterFile] = ()) -> None:
        self.files = list(files)

    @classmethod
    def from_files(cls, paths: Iterable[str | os.PathLike | tuple[str, str | os.PathLike]]) -> UrlFilter:
        """Load each file; an entry is a path (kind from its name) or a ``(kind, path)`` pair."""
        files = []
        for p in paths:
            if isinstance(p, tuple):
                kind, path = p
                files.append(FilterFile(path, kind))
            else:
                files.append(FilterFile(p))
        return cls(files)

    @classmethod
    def from_settings(cls, settings: dict) -> UrlFilter:
        """The chain named by the ``url_filters`` setting (see fetchlist.settings)."""
        return cls.from_files(settings.get("url_filters") or ())

    def texts(self) -> list[tuple[str, str, str]]:
        """``(kind, name, text)`` of every file, for ``from_texts`` on another host."""
        return [(f.kind, f.path, f.text) for f in self.files]

    @classmethod
    def from_texts(cls, items: Iterable[tuple[str, str, str] | list[str]]) -> UrlFilter:
        """The chain ``texts()`` described, without reading any file."""
        return cls(FilterFile.from_text(text, kind, name) for kind, name, text in items)

    def accept(self, url: str) -> bool:
        if not isinstance(url, str):
            return False
        return all(f.accept(url) for f in self.files)

    def explain(self, url: str) -> str:
        """Which file and line decided about ``url`` (for ``webdb`` users debugging their rules)."""
        for f in self.files:
            ok, lineno = f.match(url)
            if not ok:
                where = f"{f.path}:{lineno}" if lineno else f"{f.path} (no rule matched)"
                return f"rejected by {where}"
        return "accepted"

    def reload_if_changed(self) -> bool:
        """Re-read every file whose mtime or size changed; True if any was reloaded.

        All changed files are parsed before any is swapped in, so a bad edit (BadInput, naming
        file and line) leaves the whole chain as it was.
        """
        fresh = [FilterFile(f.path, f.kind) if f.changed() else f for f in self.files]
        changed = any(a is not b for a, b in zip(fresh, self.files))
        self.files = fresh
        return changed

    def __repr__(self) -> str:
        return f"UrlFilter({self.files!r})"
