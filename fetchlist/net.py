"""The fetcher's connections: a total deadline per request and the address policy.

``requests`` and ``urllib3`` bound each socket read, not a request: a server that drips its
status line one byte a second never times out.  Here every request runs under a ``Budget``
(a monotonic deadline) that a ``Watchdog`` thread enforces by shutting the request's sockets
down when it passes: a blocked read then returns at once, whatever stage the request is in
(TLS handshake, status line, headers, body), and the caller sees ``budget.expired``.  A
connect in progress is polled every 0.25 s instead (a shutdown does not wake it).  DNS
resolution is not bounded here (the system resolver's own timeouts apply).
``Watchdog.abort_all`` does the same to every request in flight (Ctrl-C).

The address policy is applied where the connection is made (``_PolicyConnection._new_conn``):
the host name is resolved once, every address is checked, and the socket connects to a checked
address, so a DNS answer that changes between a check and the connect (rebinding) cannot slip
through.  By default private, loopback, link-local, multicast, unspecified, reserved and
site-local addresses (everything ``ipaddress`` does not call global, and 6to4 addresses of
such IPv4 addresses) are refused; the crawl setting
``allow_private_addresses`` allows them (loopback test sites, the demo).  Redirects followed for
robots.txt make new connections through the same class, so they are checked too.

Incomplete messages are failures, never pages: the connections' response class
(``_Response``) refuses a head that the connection's end cut before its blank line
(``IncompleteHead``: http.client alone takes the end of the stream for the end of the head),
and ``read_body`` undoes the Content-Encoding itself and checks that each gzip or deflate
stream reached its end (``BadBody``).  ``location_of`` reads the Location lines of a redirect
one by one: different values are no target (never one comma-joined URL).

Connections are never reused (the pool closes every connection handed back): a host's
connection does not outlive its request, and a redirect hop never meets a connection the
server already closed.

A page request goes through an ``HttpClient`` (one per fetcher thread): urllib3 directly, which
costs about half a millisecond of CPU less per request than ``requests`` on top of it.  It
sends the same headers a requests Session would (``User-Agent``, ``Accept-Encoding: gzip,
deflate`` — the codings ``read_body`` undoes —, ``Accept``, ``Connection``, then the crawl's
``default_headers``), never a cookie and never credentials; it verifies TLS certificates against
certifi's bundle, and with ``trust_env`` takes proxies (``HTTP(S)_PROXY``, ``NO_PROXY``) and a
CA bundle (``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``) from the environment as requests does.
Through a proxy, the connection made is the one to the proxy: its address is the one the
policy checks, and the watchdog cuts it.  robots.txt, which follows redirects, goes through ``new_session`` (requests).

Runtime cost per request: one heap push and two short lock holds; the watchdog thread sleeps
until the earliest deadline.  Memory: finished budgets are dropped from the heap once they
outnumber the active ones (plus 1024).
"""

from __future__ import annotations

import errno
import heapq
import http.client
import ipaddress
import itertools
import os
import select
import socket
import threading
import time
import zlib
from collections.abc import Callable, Mapping

import requests
import requests.auth
import requests.utils
import urllib3
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

__all__ = [
    "POLICY",
    "Budget",
    "BadBody",
    "HttpClient",
    "IncompleteHead",
    "Watchdog",
    "address_refusal",
    "current",
    "location_of",
    "location_text",
    "new_session",
    "read_body",
]

# How the error of a request the address policy refused begins (update tells such records apart).
POLICY = "address policy"

_ctx = threading.local()


def address_refusal(ip: str) -> str | None:
    """Why the default policy refuses the address ``ip`` ("loopback", ...), or None if it is global.

    An IPv6 address that carries an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, 6to4
    ``2002:AABB:CCDD::/48``) is judged by that IPv4 address too: a 6to4 relay delivers it there.
    Site-local ``fec0::/10`` (deprecated, still routed inside some networks) counts as private.
    """
    try:
        a = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(a, ipaddress.IPv6Address):
        if a.ipv4_mapped is not None:
            a = a.ipv4_mapped
        elif a.sixtofour is not None:
            inner = address_refusal(str(a.sixtofour))
            if inner is not None:
                return f"6to4 of {a.sixtofour}: {inner}"
        elif a.is_site_local:
            return "site-local"
    for name in ("loopback", "link_local", "multicast", "unspecified", "reserved", "private"):
        if getattr(a, f"is_{name}"):
            return name.replace("_", "-")
    return None if a.is_global else "not global"


class Budget:
    """The deadline of one request (all its connections).  ``expired``: the watchdog cut it at the
    deadline; ``aborted``: it was cut by ``abort_all`` (an interrupt)."""

    __slots__ = ("deadline", "allow_private", "expired", "aborted", "done", "refused", "_socks", "_lock")

    def __init__(self, deadline: float, allow_private: bool = False) -> None:
        self.deadline, self.allow_private = deadline, allow_private
        self.expired = self.aborted = self.done = False
        self.refused: str | None = None
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def cut(self) -> bool:
        return self.expired or self.aborted

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            if self.cut:
                _shut(sock)

    def fire(self, aborted: bool = False) -> None:
        with self._lock:
            if self.done:
                return
            if aborted:
                self.aborted = True
            else:
                self.expired = True
            for s in self._socks:
                _shut(s)

    def finish(self) -> None:
        with self._lock:
            self.done = True
            self._socks.clear()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed or never connected: nothing is blocked on it
        pass


class Watchdog:
    """Cuts requests at their deadlines (one daemon thread, started on first use)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, Budget]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._active: set[Budget] = set()
        self._aborting = False

    def start(self, budget: Budget) -> Budget:
        """Watch ``budget`` and make it the current thread's budget (until ``finish``).  After
        ``abort_all`` (until ``reset``) it starts cut: a request begun during an interrupt ends
        at once."""
        with self._cv:
            if self._aborting:
                budget.aborted = True
            self._active.add(budget)
            heapq.heappush(self._heap, (budget.deadline, next(self._seq), budget))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fetch-watchdog", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is budget:
                self._cv.notify()
        _ctx.budget = budget
        return budget

    def finish(self, budget: Budget) -> None:
        budget.finish()
        with self._cv:
            self._active.discard(budget)
            if len(self._heap) > 2 * len(self._active) + 1024:
                # finished budgets wait in the heap for their deadline: drop them (amortized O(1))
                self._heap = [e for e in self._heap if e[2] in self._active]
                heapq.heapify(self._heap)
        _ctx.budget = None

    def abort_all(self) -> None:
        """Cut every request in flight now (their budgets say ``aborted``), and every request
        started until ``reset``."""
        with self._cv:
            self._aborting = True
            active = list(self._active)
        for b in active:
            b.fire(aborted=True)

    def reset(self) -> None:
        """Let requests run again after ``abort_all``."""
        with self._cv:
            self._aborting = False

    def _run(self) -> None:
        with self._cv:
            while True:
                if not self._heap:
                    self._cv.wait()
                    continue
                deadline, _, b = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._cv.wait(wait)
                    continue
                heapq.heappop(self._heap)
                if b in self._active:
                    b.fire()


def current() -> Budget | None:
    """The budget of the request running in this thread, if any."""
    return getattr(_ctx, "budget", None)


class IncompleteHead(http.client.HTTPException):
    """The connection ended inside the response's status line or header block."""


class _HeadReader:
    """The response's file while its head is read: notes a line that the connection's end cut
    (http.client takes the end of the stream for the blank line that ends the head)."""

    def __init__(self, fp) -> None:
        self._fp = fp
        self.cut = False

    def readline(self, limit: int = -1) -> bytes:
        line = self._fp.readline(limit)
        if not line.endswith(b"\n") and (limit < 0 or len(line) < limit):
            self.cut = True
        return line

    def __getattr__(self, name: str):
        return getattr(self._fp, name)


class _Response(http.client.HTTPResponse):
    """An HTTPResponse whose head must end with its blank line: a head the connection's end cut
    is an incomplete message (IncompleteHead), never a complete answer with an empty body."""

    def begin(self) -> None:
        fp = self.fp
        reader = self.fp = _HeadReader(fp)
        try:
            super().begin()
        finally:
            if self.fp is reader:
                self.fp = fp
        if reader.cut:
            self._close_conn()
            raise IncompleteHead("the connection closed inside the response's header block")


class _PolicyConnection(HTTPConnection):
    """Resolves, checks the addresses against the policy, connects, and hands the socket to the
    current budget (so the watchdog can cut it)."""

    response_class = _Response

    def _new_conn(self) -> socket.socket:
        budget = current()
        host = self._dns_host.strip("[]")
        try:
            infos = socket.getaddrinfo(host, self.port, 0, socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise urllib3.exceptions.NameResolutionError(self.host, self, e) from e
        allowed, refused = [], []
        for info in infos:
            why = None if budget is not None and budget.allow_private else address_refusal(info[4][0])
            (refused if why else allowed).append((info, why))
        if not allowed:
            ip, why = refused[0][0][4][0], refused[0][1]
            msg = f"{POLICY}: {self.host} resolves to {ip} ({why}); set allow_private_addresses to fetch it"
            if budget is not None:
                budget.refused = msg
            raise urllib3.exceptions.NewConnectionError(self, msg)
        err: OSError | None = None
        for (af, socktype, proto, _, sa), _ in allowed:
            sock = socket.socket(af, socktype, proto)
            try:
                for opt in self.socket_options or ():
                    sock.setsockopt(*opt)
                timeout = self.timeout if isinstance(self.timeout, (int, float)) else None
                if budget is not None:
                    budget.add(sock)
                    _connect(sock, sa, timeout, budget)
                else:
                    sock.settimeout(timeout)
                    sock.connect(sa)
                sock.settimeout(timeout)
                return sock
            except TimeoutError as e:
                sock.close()
                raise urllib3.exceptions.ConnectTimeoutError(self, f"connection to {self.host} timed out") from e
            except OSError as e:
                sock.close()
                err = e
        raise urllib3.exceptions.NewConnectionError(self, f"Failed to establish a new connection: {err}")


def _connect(sock: socket.socket, sa: tuple, timeout: float | None, budget: Budget) -> None:
    """Connect ``sock``, giving up at ``timeout`` or the budget's deadline, and at once when the
    budget is cut (shutdown does not wake a connect in progress: it is polled every 0.25 s)."""
    end = time.monotonic() + timeout if timeout is not None else budget.deadline
    end = min(end, budget.deadline)
    if budget.cut:
        raise TimeoutError("request cut before it connected")
    sock.setblocking(False)
    err = sock.connect_ex(sa)
    while err in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
        left = end - time.monotonic()
        if left <= 0 or budget.cut:
            raise TimeoutError("connect timed out")
        _, writable, _ = select.select([], [sock], [], min(left, 0.25))
        if writable:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))
    if budget.cut:  # cut while connecting: a shutdown before the connect completed did nothing
        raise TimeoutError("request cut while it connected")


class _PolicyHTTPSConnection(HTTPSConnection):
    response_class = _Response
    _new_conn = _PolicyConnection._new_conn


class _NoReuse:
    def _put_conn(self, conn) -> None:
        if conn is not None:
            conn.close()


class _HTTPPool(_NoReuse, HTTPConnectionPool):
    ConnectionCls = _PolicyConnection


class _HTTPSPool(_NoReuse, HTTPSConnectionPool):
    ConnectionCls = _PolicyHTTPSConnection


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}


_ACCEPT_ENCODING = "gzip, deflate"  # the codings read_body undoes


class HttpClient:
    """One thread's client for page requests (module docstring): ``get`` sends a GET and
    returns urllib3's response, its body unread; ``headers`` are the headers every request
    carries, in the order sent (``get``'s own are added after them)."""

    def __init__(self, headers: Mapping[str, str], user_agent: str, *, trust_env: bool = False) -> None:
        sent = CaseInsensitiveDict(
            {"User-Agent": user_agent, "Accept-Encoding": _ACCEPT_ENCODING, "Accept": "*/*", "Connection": "keep-alive"}
        )
        sent.update(headers)
        sent["User-Agent"] = user_agent
        self.headers: dict[str, str] = dict(sent.items())
        self.trust_env = trust_env
        ca = requests.utils.DEFAULT_CA_BUNDLE_PATH
        if trust_env:
            ca = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or ca
        where = {"ca_cert_dir": ca} if os.path.isdir(ca) else {"ca_certs": ca}
        self._tls = {"cert_reqs": "CERT_REQUIRED", **where}
        self._direct = urllib3.PoolManager(num_pools=4, maxsize=1, **self._tls)
        self._direct.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
        self._proxied: dict[str, urllib3.ProxyManager] = {}

    def headers_for(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        """The headers of a request: ``headers`` with ``extra`` added (Host aside), in order."""
        if not extra:
            return self.headers
        merged = CaseInsensitiveDict(self.headers)
        merged.update(extra)
        return dict(merged.items())

    def get(self, url: str, headers: Mapping[str, str], timeout: tuple[float, float]) -> urllib3.BaseHTTPResponse:
        """GET ``url`` with ``headers`` (``headers_for``) and (connect, read) ``timeout``: no
        redirect followed, no retry, the body unread (the caller closes the response).  Raises
        urllib3's errors (HTTPError), OSError, or ValueError for a URL urllib3 cannot read."""
        return self._manager(url).urlopen(
            "GET",
            url,
            headers=headers,
            redirect=False,
            retries=False,
            assert_same_host=False,
            preload_content=False,
            decode_content=False,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
        )

    def _manager(self, url: str) -> urllib3.PoolManager:
        if not self.trust_env:
            return self._direct
        proxy = requests.utils.select_proxy(url, requests.utils.get_environ_proxies(url))
        if not proxy:
            return self._direct
        manager = self._proxied.get(proxy)
        if manager is None:
            proxy = requests.utils.prepend_scheme_if_needed(proxy, "http")
            user, password = requests.utils.get_auth_from_url(proxy)
            auth = urllib3.make_headers(proxy_basic_auth=f"{user}:{password}") if user else None
            manager = self._proxied[proxy] = urllib3.ProxyManager(
                proxy, proxy_headers=auth, num_pools=4, maxsize=1, **self._tls
            )
            # The connection to the proxy follows the policy and the budget like any other.
            manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
        return manager

    def close(self) -> None:
        """Drop every pool (and any connection still in one)."""
        self._direct.clear()
        for manager in self._proxied.values():
            manager.clear()


def location_text(value: str) -> str:
    """A Location header as browsers read it: its bytes as UTF-8 if they are, else every byte
    above 0x7F percent-encoded (http.client hands header bytes over decoded as latin-1)."""
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:
        return value
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(chr(b) if b < 0x80 else f"%{b:02X}" for b in raw)


def location_of(headers) -> tuple[str | None, str | None]:
    """(target, problem) of a response's ``Location`` header lines (``headers``: urllib3's
    ``HTTPHeaderDict``, one entry per line).  Lines with the same value count once; lines
    with different values are an error, as in Chromium (ERR_RESPONSE_HEADERS_MULTIPLE_LOCATION):
    ``(None, "2 different Location headers ...")``.  Never joined into one target."""
    values = list(dict.fromkeys(v.strip() for v in headers.getlist("location")))
    if len(values) > 1:
        shown = ", ".join(repr(location_text(v))[:100] for v in values[:3])
        return None, f"{len(values)} different Location headers ({shown}): no target"
    return (location_text(values[0]) if values and values[0] else None), None


class _Session(requests.Session):
    def get_redirect_target(self, resp: requests.Response) -> str | None:
        # requests decodes Location as strict UTF-8 (raising on anything else) and follows the
        # comma-joined value of several Location lines: one target, or none (not followed)
        return location_of(resp.raw.headers)[0] if resp.is_redirect else None


class _NoAuth(requests.auth.AuthBase):
    """No credentials, whatever a URL's userinfo or ~/.netrc says: normalized URLs carry none,
    and a URL stored with userinfo must not make the crawler send it."""

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        return r


def new_session() -> requests.Session:
    """A requests Session whose connections follow the budget and address policy of the thread
    and that never sends credentials (``Authorization``)."""
    s = _Session()
    s.auth = _NoAuth()
    adapter = _Adapter(pool_connections=4, pool_maxsize=1)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    return s


class BadBody(ValueError):
    """A body whose content coding ends before its end (a cut gzip or deflate stream) or is not
    the coding it claims."""


_CODINGS = ("gzip", "x-gzip", "deflate")
_MAX_CODINGS = 5
_GZIP_MAGIC = b"\x1f\x8b"
_RAW_CHUNK = 65536


def read_body(resp: urllib3.BaseHTTPResponse, limit: int, budget: Budget | None = None) -> tuple[bytes, bool]:
    """``(content, truncated)``: the body of ``resp`` (urllib3's response, unread: ``raw`` of
    a requests Response) with its Content-Encoding undone, at most ``limit`` bytes
    (``truncated``: there was more).

    gzip, x-gzip and deflate (zlib-wrapped or raw) are undone, chained as listed (at most 5); a
    body in any other coding is kept as sent.  A compressed stream that the message ends before
    its end is ``BadBody`` — a failed fetch, like a body shorter than its Content-Length
    (urllib3's ``ProtocolError``) — never a complete page.  Bytes after the end of the stream are
    read (the message must end) and dropped, except further gzip members, which are decoded.
    ``TimeoutError`` when ``budget`` runs out.  Memory: O(limit) whatever the ratio of the coding
    (each stage is asked for at most what is still wanted).
    """
    codings = [c.strip().lower() for c in resp.headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]

    def raw(n: int) -> bytes:
        return resp.read1(min(n, _RAW_CHUNK), decode_content=False)

    read: Callable[[int], bytes] = raw
    if codings and len(codings) <= _MAX_CODINGS and all(c in _CODINGS for c in codings):
        for c in reversed(codings):  # applied in the order listed: undone last first
            read = _Inflater(c, read).read
    body = bytearray()
    while len(body) <= limit:
        piece = read(min(_RAW_CHUNK, limit + 1 - len(body)))
        if not piece:
            return bytes(body), False
        body += piece
        if budget is not None and budget.remaining < 0:
            raise TimeoutError("fetch_timeout exceeded")
    return bytes(body[:limit]), True


class _Inflater:
    """One content coding undone as a pull stage: ``read(n)`` gives at most ``n`` decoded bytes,
    b"" at the end; BadBody if the source ends inside the stream or the data is not the coding."""

    def __init__(self, coding: str, source: Callable[[int], bytes]) -> None:
        self.coding, self._source = coding, source
        self._gzip = coding != "deflate"
        self._obj = self._new(zlib.MAX_WBITS)
        self._pending = b""  # input fed but not consumed yet (unconsumed_tail)
        self._started = False  # the current stream has had input
        self._first: bytes | None = b"" if not self._gzip else None  # deflate: input before any output
        self._after = False  # past the end of the last stream: the rest is dropped

    def _new(self, wbits: int) -> zlib._Decompress:
        return zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else wbits)

    def read(self, n: int) -> bytes:
        while True:
            if self._obj.eof and not self._after:
                extra = self._obj.unused_data
                if not extra:  # the stream ended with a read: what comes next decides
                    extra = self._source(_RAW_CHUNK)
                    if not extra:
                        return b""
                if self._gzip and extra[:2] == _GZIP_MAGIC:  # another gzip member follows
                    self._obj, self._pending, self._started = self._new(zlib.MAX_WBITS), extra, False
                    continue
                self._after = True  # what follows the stream is dropped, as browsers do
            if self._after:
                if not self._source(_RAW_CHUNK):
                    return b""
                continue
            data, self._pending = self._pending, b""
            if not data:
                data = self._source(_RAW_CHUNK)
                if not data:
                    if self._started:
                        raise BadBody(f"the {self.coding} stream ends before its end (the body was cut)")
                    return b""
            self._started = True
            try:
                out = self._obj.decompress(data, n)
            except zlib.error as e:
                if self._first is not None:  # "deflate" sent as a raw deflate stream (no zlib header)
                    self._obj, self._pending, self._first = self._new(-zlib.MAX_WBITS), self._first + data, None
                    continue
                raise BadBody(f"the body is not valid {self.coding} data ({e})") from None
            if self._first is not None:
                self._first = None if out else self._first + data
            self._pending = self._obj.unconsumed_tail
            if out:
                return out
