"""robots.txt: fetch once per site (scheme, host, port), parse with Protego, cache.

What the answer to ``GET /robots.txt`` means (RFC 9309 §2.3.1, as Google and Nutch read it):

==============================  ==========  ===================================================
answer                          state       the site's URLs this round
==============================  ==========  ===================================================
2xx                             parsed      allowed or denied by the rules (denied → GONE)
redirects (followed, at most    as the      the final answer counts; more than 5 redirects
5, to any host)                 final one   count as a 4xx
4xx except 429                  allow_all   all allowed ("no robots.txt")
429, 5xx                        backoff     not requested, recorded RETRY (retried next round)
timeout, connection error,      unreachable not requested, recorded RETRY
incomplete answer (cut head,
cut gzip stream)
==============================  ==========  ===================================================

A parsed robots.txt also gives the site's Crawl-delay for our agent (None if absent).
Parsed and allow_all answers are cached for ``robots_ttl`` seconds; backoff and unreachable
answers only for the current fetch run (``RobotsCache.new_run``), so the next round asks again.
At most ``robots_max_size`` bytes are kept (a longer file is cut there and parsed).
Several different ``Location`` lines on a redirect are not followed (``net.location_of``): the
answer counts as the 3xx it is (allow_all).  The request, its redirects included, runs under the
fetcher's total deadline (``fetch_timeout``, fetchlist.net): a robots.txt cut at the deadline is
unreachable; one whose host (or a redirect target) the address policy refuses counts as absent
(allow_all), and the site's pages then meet the same policy when requested.

Cost: one request per site per ``robots_ttl``; a lookup is a dict access plus Protego's match.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
import urllib3
from protego import Protego

from fetchlist.net import current, read_body

__all__ = [
    "RobotsRules",
    "RobotsCache",
    "fetch_robots",
    "robots_url",
    "PARSED",
    "ALLOW_ALL",
    "BACKOFF",
    "UNREACHABLE",
    "ROBOTS_DENIED",
]

PARSED = "parsed"
ALLOW_ALL = "allow_all"
BACKOFF = "backoff"
UNREACHABLE = "unreachable"
MAX_ROBOTS_REDIRECTS = 5
ROBOTS_DENIED = "denied by robots.txt"  # the error of a URL robots.txt denies (recorded GONE)


@dataclass(frozen=True, slots=True)
class RobotsRules:
    """One site's robots.txt as the fetcher uses it."""

    state: str
    http_status: int = 0
    parser: Protego | None = None
    error: str | None = None
    fetched_at: float = 0.0

    def allowed(self, url: str, agent: str) -> bool | None:
        """True/False for an answer; None when the site must be retried later (backoff/unreachable)."""
        if self.state == PARSED:
            return bool(self.parser.can_fetch(url, agent))
        if self.state == ALLOW_ALL:
            return True
        return None

    def crawl_delay(self, agent: str) -> float | None:
        if self.parser is None:
            return None
        d = self.parser.crawl_delay(agent)
        return float(d) if d is not None else None

    @property
    def lasting(self) -> bool:
        """Worth caching beyond this run."""
        return self.state in (PARSED, ALLOW_ALL)


def robots_url(url: str) -> str:
    """``scheme://netloc/robots.txt`` of the site of ``url``."""
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc}/robots.txt"


def fetch_robots(session: requests.Session, url: str, *, timeout: tuple[float, float], max_size: int) -> RobotsRules:
    """GET the robots.txt of ``url``'s site with ``session`` and interpret the answer (table above)."""
    now = time.time()
    rules = _get_robots(session, robots_url(url), timeout, max_size, now)
    budget = current()
    if budget is not None and (budget.cut or budget.remaining < 0):  # what was read is not the file
        return RobotsRules(UNREACHABLE, 0, error="robots.txt: fetch_timeout exceeded", fetched_at=now)
    if budget is not None and budget.refused:
        return RobotsRules(ALLOW_ALL, 0, error=f"robots.txt: {budget.refused}"[:300], fetched_at=now)
    return rules


def _get_robots(session: requests.Session, target: str, timeout: tuple[float, float], max_size: int, now: float):
    session.max_redirects = MAX_ROBOTS_REDIRECTS
    try:
        with session.get(target, timeout=timeout, allow_redirects=True, stream=True) as resp:
            code = resp.status_code
            if 200 <= code < 300:
                body = read_body(resp.raw, max_size, current())[0]
            elif code == 429 or code >= 500:
                return RobotsRules(BACKOFF, code, error=f"robots.txt answered {code}", fetched_at=now)
            else:
                return RobotsRules(ALLOW_ALL, code, fetched_at=now)
    except requests.TooManyRedirects:
        return RobotsRules(ALLOW_ALL, 0, error="robots.txt: too many redirects", fetched_at=now)
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
        return RobotsRules(UNREACHABLE, 0, error=f"robots.txt: {type(e).__name__}: {e}"[:300], fetched_at=now)
    text = body.decode("utf-8", "replace").lstrip("\ufeff")
    try:
        parser = Protego.parse(text)
    except Exception as e:  # a robots.txt Protego cannot read has no rule we could obey
        return RobotsRules(ALLOW_ALL, code, error=f"robots.txt unparseable: {e}"[:300], fetched_at=now)
    return RobotsRules(PARSED, code, parser, fetched_at=now)


class RobotsCache:
    """Per-site robots rules, thread-safe.  The fetcher asks under the site's queue, so one site's
    robots.txt is never requested twice at once."""

    def __init__(self, ttl: float = 86400.0) -> None:
        self.ttl = ttl
        self._rules: dict[str, RobotsRules] = {}
        self._lock = threading.Lock()

    def get(self, url: str) -> RobotsRules | None:
        """The cached rules of ``url``'s site, or None if it must be fetched."""
        key = robots_url(url)
        with self._lock:
            r = self._rules.get(key)
        if r is not None and r.lasting and time.time() - r.fetched_at > self.ttl:
            return None
        return r

    def put(self, url: str, rules: RobotsRules) -> None:
        with self._lock:
            self._rules[robots_url(url)] = rules

    def new_run(self) -> None:
        """Forget backoff and unreachable answers (they hold for one fetch run only)."""
        with self._lock:
            self._rules = {k: r for k, r in self._rules.items() if r.lasting}

    def __len__(self) -> int:
        return len(self._rules)
