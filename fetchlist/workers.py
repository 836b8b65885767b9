"""Worker processes for the CPU part of a fetch: parse each page, encode its WARC records.

A ``Fetcher`` with ``processes`` > 0 keeps its requests, politeness and segment writes in its
own process and hands each fetched page to a ``DigestPool``: a worker process parses the
content (``fetchlist.parse``) and encodes the exchange's WARC records
(``fetchlist.warc.encode_exchange``, gzip and SHA-1 over the body); the fetcher's writer
thread then writes the record, while the thread that made the request has gone on with its
next one.  The parse holds the GIL for most of a page's CPU time, so one process parses on one
core at most; the workers give every core to it.  Hosts, queues and delays stay in one
scheduler, so politeness is exactly that of one process.

Workers are started by the ``forkserver`` method (never ``fork`` from a process running
threads), lazily, one per page in flight up to ``processes``; they ignore SIGINT, so Ctrl-C
reaches the fetcher alone, which lets the pages being parsed finish and writes them.  As with
any ``multiprocessing`` start method but ``fork``, a script that fetches with workers needs
the ``if __name__ == "__main__":`` guard (a worker imports the script's main module).

Cost per page, besides the parse and the gzip: pickling the record with its content to the
worker and the parse result and compressed records back (about 0.1 ms for 40 KB on loopback).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.connection import Connection

from fetchlist.hints import finish_record, parse_fetched
from fetchlist.normalize import WwwRules
from fetchlist.parse import ParseResult
from fetchlist.segment import FetchRecord, exchange_of
from fetchlist.warc import EncodedExchange, encode_exchange
from webdb import Status
from webdb.errors import WebDBError

__all__ = ["Digested", "DigestPool", "WorkerDied", "digest", "default_processes"]

_options: dict = {}


def default_processes() -> int:
    """Worker processes by default: one per CPU this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass
class Digested:
    """What a worker sends back for a page: its parse record, its encoded WARC exchange (None
    for a record that is no longer FETCHED), and its status and redirect after the parse (a
    meta refresh turns a page into a redirect: ``fetchlist.hints.finish_record``)."""

    parse: ParseResult | None
    warc: EncodedExchange | None
    status: int
    redirect: str | None

    def apply(self, rec: FetchRecord) -> None:
        """Set these on ``rec``, the fetcher's copy of the page sent to the worker."""
        rec.parse, rec.warc = self.parse, self.warc
        if self.status != rec.status:  # a redirect now: no content of its own (finish_record)
            rec.status, rec.redirect = self.status, self.redirect
            rec.content = rec.md5 = None
            rec.truncated = False


class WorkerDied(WebDBError):
    """A worker process ended abruptly (killed, out of memory): the fetch stops; running it
    again resumes."""


def digest(rec: FetchRecord, options: dict, www: WwwRules | None) -> Digested:
    """Parse ``rec`` (if ``options["parse"]``: ``fetchlist.hints.parse_fetched`` and
    ``finish_record``) and encode its WARC exchange: what a worker does with one fetched page.
    ``options`` are the fetcher's settings.  A meta refresh makes ``rec`` a redirect, which has
    no WARC records."""
    if options["parse"]:
        rec.parse = parse_fetched(rec, options, www)
        finish_record(rec, options, www)
    enc = encode_exchange(exchange_of(rec)) if rec.status == Status.FETCHED else None
    return Digested(rec.parse, enc, rec.status, rec.redirect)


def _init(options: dict, www: WwwRules | None, alive: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the fetcher's to handle
    _options["options"], _options["www"] = options, www
    threading.Thread(target=_exit_with_fetcher, args=(alive,), daemon=True).start()


def _exit_with_fetcher(alive: Connection) -> None:
    """End this worker when the fetcher's end of ``alive`` closes: it was killed (an idle
    worker would otherwise wait on its task queue for ever, holding the fetcher's stdout)."""
    try:
        alive.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(1)


def _run(rec: FetchRecord) -> tuple[Digested, float]:
    t = time.process_time()
    d = digest(rec, _options["options"], _options["www"])
    return d, time.process_time() - t


class DigestPool:
    """``processes`` worker processes running ``digest``, at most ``backlog`` pages at a time
    between ``submit`` and ``done_one``; ``close`` waits for the workers to end."""

    def __init__(self, processes: int, options: dict, www: WwwRules | None, backlog: int) -> None:
        self.processes = processes
        self.cpu_seconds = 0.0  # spent by the workers on the pages (the digest calls)
        self._backlog = max(1, backlog)
        self._pending = 0
        self._cv = threading.Condition()
        ctx = multiprocessing.get_context("forkserver")
        # The fork server imports the parser once; workers are forks of it (the default would
        # import the caller's __main__ there).  Effective when this process starts its server.
        ctx.set_forkserver_preload([__name__])
        # Only this process holds the write end: it closes when the fetcher ends, however.
        self._alive_r, self._alive_w = ctx.Pipe(duplex=False)
        self._pool = ProcessPoolExecutor(
            processes, mp_context=ctx, initializer=_init, initargs=(options, www, self._alive_r)
        )

    def submit(self, rec: FetchRecord, done: Callable[[FetchRecord, BaseException | None], None]) -> None:
        """Have a worker set ``rec.parse`` and ``rec.warc``, then call ``done(rec, error)`` (from
        the pool's thread; ``error`` is None, or WorkerDied).  Blocks while ``backlog`` pages
        are pending: each submitted page is pending until its ``done_one`` call."""
        with self._cv:
            while self._pending >= self._backlog:
                self._cv.wait()
            self._pending += 1

        def finished(fut) -> None:
            try:
                d, cpu = fut.result()
                d.apply(rec)
            except BrokenProcessPool as e:
                done(rec, WorkerDied(f"a fetch worker process died ({e}); run the fetch again to resume"))
            except BaseException as e:  # noqa: BLE001 - handed to the fetcher, which stops and raises it
                done(rec, e)
            else:
                with self._cv:
                    self.cpu_seconds += cpu
                done(rec, None)

        try:
            fut = self._pool.submit(_run, rec)
        except BrokenProcessPool as e:
            done(rec, WorkerDied(f"a fetch worker process died ({e}); run the fetch again to resume"))
            return
        fut.add_done_callback(finished)

    def done_one(self) -> None:
        """One submitted page is written (or dropped): it no longer counts in the backlog."""
        with self._cv:
            self._pending -= 1
            self._cv.notify_all()

    def wait_idle(self) -> None:
        """Wait until every submitted page has had its ``done_one``."""
        with self._cv:
            while self._pending:
                self._cv.wait()

    def pids(self) -> list[int]:
        """Process ids of the workers started so far."""
        return list(self._pool._processes or ())

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._alive_w.close()
        self._alive_r.close()
