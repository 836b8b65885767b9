"""The polite fetcher: per-host queues, one request per host at a time, N threads across hosts.

Data flow of ``Fetcher.fetch(entries, sink)`` (docs/crawl.md has the whole crawl):

1. Entries are deduplicated by URL and grouped into queues by host (or registered domain,
   ``queue_mode``), keeping their order inside a queue.
2. ``threads`` workers repeatedly take the queue whose next request is allowed earliest and that
   no other worker holds.  A worker holds a queue for exactly one request, so a host never has
   two requests in flight; after the request the queue may be taken again ``delay`` seconds
   after it ended, ``delay = max(politeness_delay, min(Crawl-delay, crawl_delay_cap))``.
3. The first request to a site is its robots.txt (``fetchlist.robots``); URLs it denies are
   recorded GONE without a request; a site whose robots.txt answered 5xx or could not be
   reached has its URLs recorded RETRY without a request.
4. A page request never follows redirects (the target is recorded for the db), sends the
   server's own validators (If-Modified-Since / If-None-Match) for pages fetched before, reads
   at most ``max_content`` bytes and is cut after ``fetch_timeout`` seconds in all (connect,
   headers, body: ``fetchlist.net``); hosts are checked against the address policy.
5. Fetched pages are parsed (``fetchlist.parse``) and their WARC records encoded in one of
   ``processes`` worker processes (``fetchlist.workers``), and written by a writer thread, while
   the thread that fetched the page goes on with its next request; with ``processes`` 0 the
   thread parses the page itself.  Every record goes to ``sink`` as soon as it is complete
   (``SegmentWriter.write`` appends and flushes it).
6. Ctrl-C (KeyboardInterrupt) stops taking new URLs, cuts the requests in flight (no record
   for them), lets the pages being parsed finish and writes them, then re-raises;
   ``fetch_segment`` run again on the same partition resumes.

HTTP status → webdb Status (Nutch 1.x):

============================  ===============  ==============================================
answer                        status           notes
============================  ===============  ==============================================
2xx                           FETCHED          content, md5, parse
2xx with a short meta refresh REDIRECT_*       delay 0 PERM, else TEMP (``fetchlist.hints``)
301, 308                      REDIRECT_PERM    ``redirect`` = normalized Location, not followed
300, 302, 303, 307            REDIRECT_TEMP    idem
304                           NOT_MODIFIED
404, 410, other 4xx           GONE             except 408 and 429
robots.txt denies             GONE             no request made
408, 429, 5xx                 RETRY
timeout, connection error     RETRY            also a 3xx without Location or with several
                                               different ones
incomplete message            RETRY            head or body cut by the connection's end, a
                                               gzip/deflate stream cut short (``net``)
address policy refuses host   RETRY            no request made; update leaves the page as
                                               it was (not a fetch: ``fetchlist.update``)
robots.txt 5xx / unreachable  RETRY            no request made
============================  ===============  ==============================================
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import requests
import urllib3

from fetchlist.hints import (
    add_robots_sitemaps,
    content_limit,
    finish_record,
    parse_fetched,
    sitemap_level_of,
    sitemap_quota_of,
)
from fetchlist.net import Budget, HttpClient, Watchdog, location_of, new_session, read_body
from fetchlist.normalize import WwwRules, host_of, normalize, registered_domain
from fetchlist.robots import ROBOTS_DENIED, RobotsCache, RobotsRules, fetch_robots
from fetchlist.segment import FetchEntry, FetchRecord, Segment
from fetchlist.settings import resolve
from fetchlist.sitemaps import RobotsSitemaps
from fetchlist.workers import DigestPool, default_processes
from webdb import Status, progress_bar

__all__ = ["Fetcher", "FetchStats", "HostStats", "status_of"]

_PERM = (301, 308)
_TEMP = (300, 302, 303, 307)
_TRANSIENT_4XX = (408, 429)
_VALIDATED = (Status.FETCHED, Status.NOT_MODIFIED)  # a page whose validators are sent


def status_of(http_status: int) -> Status:
    """The webdb Status of an HTTP answer (table in the module docstring)."""
    if 200 <= http_status < 300:
        return Status.FETCHED
    if http_status in _PERM:
        return Status.REDIRECT_PERM
    if http_status in _TEMP:
        return Status.REDIRECT_TEMP
    if http_status == 304:
        return Status.NOT_MODIFIED
    if 400 <= http_status < 500 and http_status not in _TRANSIENT_4XX:
        return Status.GONE
    return Status.RETRY


@dataclass(slots=True)
class HostStats:
    """What happened on one queue (host or domain): requests made, records by status, time."""

    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    robots: str | None = None
    delay: float = 0.0
    busy_seconds: float = 0.0
    gave_up: bool = False


@dataclass(slots=True)
class FetchStats:
    """Per-run totals and the per-host results (``hosts``)."""

    entries: int = 0
    skipped: int = 0
    records: int = 0
    requests: int = 0
    content_bytes: int = 0
    statuses: Counter = field(default_factory=Counter)
    hosts: dict[str, HostStats] = field(default_factory=dict)
    elapsed: float = 0.0
    interrupted: bool = False
    processes: int = 0  # worker processes that parsed the pages (0: the fetcher's threads)
    worker_cpu_seconds: float = 0.0  # CPU time the workers spent on this run's pages

    @property
    def pages_per_second(self) -> float:
        return self.records / self.elapsed if self.elapsed > 0 else 0.0


class _Queue:
    __slots__ = ("key", "urls", "ready", "delay", "errors", "stats", "rules")

    def __init__(self, key: str, delay: float, ready: float) -> None:
        self.key, self.urls, self.ready, self.delay, self.errors = key, deque(), ready, delay, 0
        self.stats = HostStats(delay=delay)
        self.rules: RobotsRules | None = None


class _Scheduler:
    """Hands each idle queue whose time has come to one worker; see step 2 of the data flow."""

    def __init__(self, queues: Iterable[_Queue]) -> None:
        self._cv = threading.Condition()
        self._seq = itertools.count()
        self._heap = [(q.ready, next(self._seq), q) for q in queues if q.urls]
        heapq.heapify(self._heap)
        self._busy = 0
        self.stopped = False

    def take(self) -> _Queue | None:
        with self._cv:
            while not self.stopped:
                if self._heap:
                    ready, _, q = self._heap[0]
                    wait = ready - time.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._heap)
                        self._busy += 1
                        return q
                    self._cv.wait(wait)
                elif self._busy:
                    self._cv.wait()
                else:
                    return None
            return None

    def release(self, q: _Queue) -> None:
        with self._cv:
            self._busy -= 1
            if q.urls and not self.stopped:
                heapq.heappush(self._heap, (q.ready, next(self._seq), q))
            self._cv.notify_all()

    def stop(self) -> None:
        with self._cv:
            self.stopped = True
            self._cv.notify_all()


class _Run:
    """What the threads of one ``Fetcher.fetch`` call share: the scheduler, the sink and its
    lock, the worker pool and the first error (which stops the run)."""

    def __init__(
        self, fetcher: Fetcher, stats: FetchStats, sched: _Scheduler, sink: Callable[[FetchRecord], None], progress
    ) -> None:
        self.fetcher, self.stats, self.sched, self.sink, self.progress = fetcher, stats, sched, sink, progress
        self.lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.pool: DigestPool | None = None
        self.digested: queue.SimpleQueue = queue.SimpleQueue()  # (record, queue, error) from the pool

    def fail(self, e: BaseException) -> None:
        """A failing sink (disk full, ...) or a dead worker stops the run; ``fetch`` raises it."""
        self.errors.append(e)
        self.sched.stop()

    def emit(self, rec: FetchRecord, q: _Queue) -> None:
        with self.lock:
            self.sink(rec)
            status = Status(rec.status).name
            self.stats.records += 1
            self.stats.statuses[status] += 1
            q.stats.statuses[status] += 1
            self.stats.content_bytes += len(rec.content or b"")
            self.progress.update(1)

    def deliver(self, rec: FetchRecord, q: _Queue) -> None:
        """A FETCHED page goes to a worker (the thread goes on with its next request) and is
        written by the writer thread; any other record is written now."""
        if self.pool is not None and rec.status == Status.FETCHED:
            self.pool.submit(rec, lambda r, err: self.digested.put((r, q, err)))
        else:
            self.emit(rec, q)

    def write_digested(self) -> None:
        """The writer thread: each page back from a worker goes to the sink."""
        s, sitemaps = self.fetcher.settings, self.fetcher.sitemaps
        while (item := self.digested.get()) is not None:
            rec, q, err = item
            try:
                if err is not None:
                    raise err
                if not self.errors:  # after a failure the pages still pending are dropped
                    add_robots_sitemaps(rec, s, sitemaps)  # the fetcher's state: here, not in the worker
                    self.emit(rec, q)
            except BaseException as e:
                self.fail(e)
            finally:
                self.pool.done_one()

    def fetch_queues(self) -> None:
        """A fetcher thread: one request on the queue whose turn it is, again and again."""
        try:
            while (q := self.sched.take()) is not None:
                try:
                    self.fetcher._serve(q, self.deliver, self.sched)
                finally:
                    self.sched.release(q)
        except BaseException as e:
            self.fail(e)
        finally:
            self.fetcher._close_session()


class Fetcher:
    """Fetches fetchlist entries politely and hands each FetchRecord to a sink.

    ``Fetcher(settings, **overrides)``: ``settings`` and overrides as in fetchlist.settings.
    One Fetcher may run several rounds: robots.txt answers are cached across them (``robots_ttl``)
    and a host's politeness delay holds across them too (the first request of a round waits for
    the last one of the previous round).  After a run, ``stats`` holds its FetchStats (also
    when it was interrupted).
    """

    def __init__(self, settings: dict | None = None, *, www: WwwRules | None = None, **overrides: object):
        self.settings = s = resolve(settings, **overrides)
        if www is None and s["www_rules"]:
            www = WwwRules.from_file(s["www_rules"])
        self.www = www
        self.robots = RobotsCache(s["robots_ttl"])
        self.sitemaps = RobotsSitemaps(int(s["sitemap_max_sitemaps"]))  # robots.txt Sitemap: lines
        self._local = threading.local()
        self._ready: dict[str, float] = {}  # queue key → when it may be asked again (monotonic)
        total = float(s["fetch_timeout"])
        self._timeout = (min(float(s["connect_timeout"]), total), float(s["read_timeout"]))
        self._watchdog = Watchdog()
        self._pool: DigestPool | None = None
        procs = s["processes"]
        self.processes = default_processes() if procs is None else int(procs)

    @classmethod
    def from_settings(cls, settings: dict) -> Fetcher:
        return cls(settings)

    # ---- running a round

    def fetch_segment(self, segment: Segment, part: int = 0) -> FetchStats:
        """Fetch partition ``part`` of ``segment`` into its output, skipping URLs already there."""
        with segment.writer(part) as w:
            done = set(w.done)
            entries = [e for e in segment.fetchlist(part) if e.url not in done]
            stats = self.fetch(entries, w.write)
            stats.skipped += len(done)
            return stats

    def fetch(self, entries: Iterable[FetchEntry], sink: Callable[[FetchRecord], None]) -> FetchStats:
        """Fetch every entry (first occurrence of each URL) and pass each record to ``sink``.

        ``sink`` is called from worker threads, one call at a time.  Returns the run's stats;
        on KeyboardInterrupt, finishes the requests in flight, then re-raises.
        """
        s = self.settings
        self.robots.new_run()
        self._watchdog.reset()
        t0 = time.monotonic()
        stats = self.stats = FetchStats()
        queues = self._queues(entries, stats)
        progress = progress_bar(
            stats.entries,
            "fetch",
            "url",
            enabled=s["progress"] is not False,
            force_bar=s["progress"] is True,
            leave=False,
        )
        run = _Run(self, stats, _Scheduler(queues.values()), sink, progress)
        threads = [
            threading.Thread(target=run.fetch_queues, name=f"fetcher-{i}", daemon=True)
            for i in range(min(int(s["threads"]), max(1, len(queues))))
        ]
        writer = self._start_pool(run, len(threads)) if self.processes else None
        try:
            self._run_threads(run, threads)
        finally:
            if writer is not None:
                run.digested.put(None)
                writer.join()
                run.pool.close()
                stats.worker_cpu_seconds = run.pool.cpu_seconds
                self._pool = None
            progress.close()
            stats.elapsed = time.monotonic() - t0
            stats.requests = sum(h.requests for h in stats.hosts.values())
            self._ready.update((k, q.ready) for k, q in queues.items())
        if run.errors:
            raise run.errors[0]
        return stats

    def _queues(self, entries: Iterable[FetchEntry], stats: FetchStats) -> dict[str, _Queue]:
        """Step 1 of the data flow: the first entry of each URL, in queues by host (or domain)."""
        queues: dict[str, _Queue] = {}
        seen: set[str] = set()
        delay = float(self.settings["politeness_delay"])
        for e in entries:
            if e.url in seen:
                continue
            seen.add(e.url)
            key = self._queue_key(e.url)
            q = queues.get(key)
            if q is None:
                q = queues[key] = _Queue(key, delay, self._ready.get(key, 0.0))
                stats.hosts[key] = q.stats
            q.urls.append(e)
        stats.entries = len(seen)
        return queues

    def _start_pool(self, run: _Run, threads: int) -> threading.Thread:
        """Start the worker processes of step 5 and the thread that writes what they return."""
        # Pages between request and write: enough to keep every worker busy while the
        # threads fetch, few enough to bound memory (each holds up to max_content bytes).
        run.pool = self._pool = DigestPool(
            min(self.processes, threads), self.settings, self.www, threads + 2 * self.processes
        )
        run.stats.processes = run.pool.processes
        writer = threading.Thread(target=run.write_digested, name="fetch-writer", daemon=True)
        writer.start()
        return writer

    def _run_threads(self, run: _Run, threads: list[threading.Thread]) -> None:
        """Run the fetcher threads to the end; on Ctrl-C, step 6 of the data flow."""
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.1)
            if run.pool is not None:
                run.pool.wait_idle()
        except KeyboardInterrupt:
            run.stats.interrupted = True
            run.sched.stop()
            self._watchdog.abort_all()  # requests in flight end now; their URLs stay unfetched
            for t in threads:
                t.join()
            if run.pool is not None:
                run.pool.wait_idle()  # the pages being parsed are written (workers ignore SIGINT)
            raise

    def _queue_key(self, url: str) -> str:
        host = host_of(url) or ""
        return registered_domain(host) if self.settings["queue_mode"] == "domain" and host else host

    def _serve(self, q: _Queue, emit: Callable[[FetchRecord, _Queue], None], sched: _Scheduler) -> None:
        """Handle entries of ``q`` until one request has been made (or the queue is empty)."""
        s = self.settings
        while q.urls and not sched.stopped:
            entry = q.urls[0]
            started = time.monotonic()
            rules = None
            if s["robots_obey"] and normalize(entry.url):
                rules = self.robots.get(entry.url)
                fresh = rules is None
                if fresh:
                    budget = self._budget(started)
                    try:
                        rules = fetch_robots(
                            self._session(), entry.url, timeout=self._timeout, max_size=int(s["robots_max_size"])
                        )
                    finally:
                        self._watchdog.finish(budget)
                        self._drop_connections()
                    if budget.aborted:
                        return
                    self.robots.put(entry.url, rules)
                    self.sitemaps.found(entry.url, rules)
                    q.stats.requests += 1
                if rules is not q.rules:  # fresh, or cached from an earlier round
                    q.rules = rules
                    self._apply_crawl_delay(q, rules)
                    q.stats.robots = rules.state
                if fresh:
                    self._requested(q, started)
                    return
            rec, requested = self._fetch_entry(entry, q, rules)
            if rec is None:  # interrupted in flight: not recorded, fetched again on resume
                return
            q.urls.popleft()
            emit(rec, q)
            if requested:
                self._requested(q, started)
                return

    def _requested(self, q: _Queue, started: float) -> None:
        end = time.monotonic()
        q.stats.busy_seconds += end - started
        q.ready = end + q.delay

    def _apply_crawl_delay(self, q: _Queue, rules: RobotsRules) -> None:
        d = rules.crawl_delay(self.settings["robots_agent"])
        if d is not None:
            q.delay = max(q.delay, min(d, float(self.settings["crawl_delay_cap"])))
            q.stats.delay = q.delay

    def _fetch_entry(self, entry: FetchEntry, q: _Queue, rules: RobotsRules | None) -> tuple[FetchRecord | None, bool]:
        """(record, whether a request was made) for one entry of queue ``q`` (``rules``: its site's);
        the record is None when an interrupt cut the request."""
        s = self.settings
        url, now = entry.url, int(time.time())
        if normalize(url) is None:
            return FetchRecord(url, Status.GONE, now, error="not a fetchable http(s) URL"), False
        if s["max_host_errors"] and q.errors >= s["max_host_errors"]:
            q.stats.gave_up = True
            err = f"host skipped for this round after {q.errors} consecutive transient failures"
            return FetchRecord(url, Status.RETRY, now, error=err), False
        if rules is not None:
            ok = rules.allowed(url, s["robots_agent"])
            if ok is None:
                return FetchRecord(url, Status.RETRY, now, error=f"robots.txt {rules.state}: {rules.error}"), False
            if not ok:
                return FetchRecord(url, Status.GONE, now, error=ROBOTS_DENIED), False
        try:
            rec = self.request(entry)
        except _Aborted:
            return None, True
        q.stats.requests += 1
        transient = rec.status == Status.RETRY
        q.errors = q.errors + 1 if transient else 0
        return rec, True

    # ---- one request

    def request(self, entry: FetchEntry) -> FetchRecord:
        """GET ``entry.url`` once (no robots, no politeness): the record, parsed if FETCHED."""
        s = self.settings
        start = time.time()
        t0 = time.monotonic()
        rec = FetchRecord(entry.url, Status.RETRY, int(start))
        rec.start = start
        client = self._client()
        headers = client.headers_for(self._validators(entry))
        budget = self._budget(t0)
        resp = None
        try:
            resp = client.get(entry.url, headers, self._timeout)
            rec.request_headers = list(headers.items())  # as sent, for the WARC request record
            self._answer(rec, resp, entry, budget)
        except (urllib3.exceptions.LocationValueError, UnicodeError) as e:
            rec.status, rec.content, rec.error = Status.GONE, None, f"{type(e).__name__}: {e}"[:300]
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            rec.status, rec.content, rec.error = Status.RETRY, None, f"{type(e).__name__}: {e}"[:300]
        finally:
            if resp is not None:
                resp.close()  # the connection is never reused (fetchlist.net)
                resp.release_conn()
            self._watchdog.finish(budget)
        if budget.aborted:
            raise _Aborted
        if budget.expired or budget.remaining < 0:
            # Whatever was read before the cut is not the page: a timeout, like any failed host.
            rec.status, rec.content, rec.truncated = Status.RETRY, None, False
            rec.error = f"fetch_timeout exceeded ({s['fetch_timeout']:g}s for connect, headers and body)"
        elif budget.refused:
            # RETRY, not GONE: the policy is this crawl's setting, not the page's fault (update
            # leaves such a page as it was: fetchlist.update)
            rec.status, rec.content, rec.error = Status.RETRY, None, budget.refused[:300]
        rec.elapsed = time.monotonic() - t0
        if rec.status == Status.FETCHED:
            self._fetched(rec, entry)
        return rec

    def _validators(self, entry: FetchEntry) -> dict[str, str]:
        """The conditional headers of a page fetched before: only the server's own validators
        (a server compares If-Modified-Since with its Last-Modified — nginx: for equality —,
        never with the time we fetched)."""
        page = entry.page
        if not self.settings["conditional"] or page is None or page.status not in _VALIDATED:
            return {}
        headers = {}
        if page.meta.get("last_modified"):
            headers["If-Modified-Since"] = page.meta["last_modified"]
        if page.meta.get("etag"):
            headers["If-None-Match"] = page.meta["etag"]
        return headers

    def _answer(self, rec: FetchRecord, resp: urllib3.BaseHTTPResponse, entry: FetchEntry, budget: Budget) -> None:
        """Fill ``rec`` from the response ``resp``: status, headers as received, and the body
        of a FETCHED answer or the target of a redirect."""
        s = self.settings
        rec.http_status = code = resp.status
        rec.status = status_of(code)
        # As received, for the WARC records (the segment keeps only keep_headers).
        rec.raw_headers = list(resp.headers.items())
        rec.reason = resp.reason or ""
        rec.protocol = "HTTP/1.0" if resp.version == 10 else "HTTP/1.1"
        rec.headers = {k: resp.headers[k] for k in s["keep_headers"] if k in resp.headers}
        location, problem = location_of(resp.headers)
        rec.headers.pop("location", None)  # several Location lines are never one value
        if location is not None and "location" in s["keep_headers"]:
            rec.headers["location"] = location
        ctype = resp.headers.get("content-type", "")
        rec.content_type = ctype.split(";", 1)[0].strip().lower()
        if rec.status == Status.FETCHED:
            rec.content, rec.truncated = read_body(resp, content_limit(entry, s), budget)
        elif rec.status in (Status.REDIRECT_PERM, Status.REDIRECT_TEMP):
            self._redirect(rec, location, problem)

    def _fetched(self, rec: FetchRecord, entry: FetchEntry) -> None:
        """The digest of a FETCHED page, and its parse when no worker process parses it."""
        s = self.settings
        rec.content = rec.content or b""
        rec.md5 = hashlib.md5(rec.content).digest()
        rec.sitemap_level = sitemap_level_of(entry, s)
        rec.sitemap_quota = sitemap_quota_of(entry) if rec.sitemap_level else None
        if self._pool is None and s["parse"]:  # else a worker parses it (``fetch``)
            rec.parse = parse_fetched(rec, s, self.www)
            finish_record(rec, s, self.www)
            add_robots_sitemaps(rec, s, self.sitemaps)

    def _budget(self, start: float) -> Budget:
        """Start the total deadline of a request begun at ``start`` (monotonic) in this thread."""
        s = self.settings
        return self._watchdog.start(Budget(start + float(s["fetch_timeout"]), bool(s["allow_private_addresses"])))

    def _redirect(self, rec: FetchRecord, location: str | None, problem: str | None) -> None:
        if problem is not None:  # several different targets: none is followed (as browsers)
            rec.status, rec.error = Status.RETRY, f"HTTP {rec.http_status} with {problem}"[:300]
            return
        if not location:
            rec.status, rec.error = Status.RETRY, f"HTTP {rec.http_status} without a Location header"
            return
        rec.redirect = normalize(location, rec.url, www=self.www)
        if rec.redirect is None:
            rec.error = f"redirect to an unusable URL: {location!r}"[:300]

    # ---- connections

    def _client(self) -> HttpClient:
        """This thread's client for page requests."""
        client = getattr(self._local, "client", None)
        if client is None:
            s = self.settings
            client = self._local.client = HttpClient(
                s["default_headers"], s["user_agent"], trust_env=bool(s["trust_env"])
            )
        return client

    def _session(self) -> requests.Session:
        """This thread's requests Session, for robots.txt (which follows redirects)."""
        sess = getattr(self._local, "session", None)
        if sess is None:
            sess = self._local.session = new_session()
            sess.trust_env = bool(self.settings["trust_env"])
            sess.headers.update(self.settings["default_headers"])
            sess.headers["User-Agent"] = self.settings["user_agent"]
        return sess

    def _drop_connections(self) -> None:
        """Close the thread's pooled connections: no idle connection to a host outlives its turn."""
        sess = getattr(self._local, "session", None)
        if sess is not None:
            sess.close()

    def _close_session(self) -> None:
        sess = getattr(self._local, "session", None)
        if sess is not None:
            sess.close()
            self._local.session = None
        client = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None


class _Aborted(Exception):
    """An interrupt cut the request: no record is written for it."""
