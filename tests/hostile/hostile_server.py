"""A loopback HTTP server that misbehaves on purpose, for the hostile-input suite.

``HostileServer(routes)`` listens on 127.0.0.1 (a free port) and serves each connection in its
own thread: it reads the request head, then calls ``routes[path](conn, request, server)`` which writes
whatever bytes the behaviour calls for.  Behaviours that drip or stall wait on ``stop`` (set
when the server closes) between bytes, so closing the server ends them all.  ``hits`` counts
requests per path; ``arrived[path]`` is an Event set when a request for ``path`` arrives (tests
wait on it instead of sleeping).
"""

from __future__ import annotations

import collections
import socket
import threading
from collections.abc import Callable

Route = Callable[[socket.socket, bytes, "HostileServer"], None]


class HostileServer:
    __test__ = False

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self.stop = threading.Event()
        self.hits: collections.Counter[str] = collections.Counter()
        self.requests: list[bytes] = []
        self.arrived: collections.defaultdict[str, threading.Event] = collections.defaultdict(threading.Event)
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            head = b""
            try:
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
            except OSError:
                return
            path = head.split(b" ", 2)[1].decode("latin-1")
            self.requests.append(head)
            self.hits[path] += 1
            self.arrived[path].set()
            route = self.routes.get(path, not_found)
            try:
                route(conn, head, self)
            except OSError:  # the client went away (cut by its deadline): the point of most tests
                pass

    def drip(self, conn: socket.socket, data: bytes, every: float = 0.05, forever: bytes | None = None) -> None:
        """Send ``data`` one byte at a time, then ``forever`` again and again (or, if None, nothing)
        until the server stops; the connection is never closed by the server before that."""
        for b in data:
            if self.stop.wait(every):
                return
            conn.sendall(bytes([b]))
        while not self.stop.wait(every):
            if forever is not None:
                conn.sendall(forever)

    def stall(self) -> None:
        """Send nothing more until the server closes."""
        self.stop.wait()

    def close(self) -> None:
        self.stop.set()
        self._sock.close()
        for t in self._threads:
            t.join(5)

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def answer(status: str = "200 OK", body: bytes = b"", headers: dict[str, str] | None = None) -> Route:
    """A well-formed answer (``Connection: close``)."""

    def route(conn: socket.socket, _req: bytes, _srv: HostileServer) -> None:
        h = {"Content-Type": "text/html", "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
        conn.sendall(f"HTTP/1.1 {status}\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode() for k, v in h.items()))
        conn.sendall(b"\r\n" + body)

    return route


def raw(data: bytes) -> Route:
    """Send exactly ``data`` and close."""

    def route(conn: socket.socket, _req: bytes, _srv: HostileServer) -> None:
        conn.sendall(data)

    return route


not_found = answer("404 Not Found", b"no")
