"""The dashboard's HTTP server: the standard library's ``ThreadingHTTPServer`` (a thread per
request), Jinja2 templates with autoescape, and the files of ``static/`` (uPlot, our script and
style sheet).  Read-only: GET and HEAD only; each request opens one reader (one committed
generation) and closes it before it answers, so it never holds the writer lock and a commit
shows on the next request.

Routes (HTML, and the same data as JSON under ``/api``)::

    /            /api/overview   the numbers of `webdb read --stats` (/api/stats: exactly its JSON)
    /rounds      /api/rounds     one row per generation
    /hosts       /api/hosts      pages per host by status, sortable, paginated
    /page        /api/page       one URL: record, inlinks with anchors, outlinks
    /search      /api/search     URLs by prefix (an exact URL goes to its page)
"""

from __future__ import annotations

import json
import mimetypes
import socket
import sys
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qsl, urlencode, urlsplit

from webdb.errors import BadInput, WebDBError
from webdb.serve import views
from webdb.tables.records import validate_url

__all__ = ["CSP", "Dashboard", "make_server"]

# No inline script or style, nothing from another origin: hostile text that slipped through
# escaping still could not run.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
STATIC = resources.files("webdb.serve") / "static"
MAX_LIMIT = 500  # rows of one window of inlinks, outlinks, hosts or search results
MAX_FIELDS = 10  # query parameters of one request


class NotFound(WebDBError):
    """A URL, path or static file the dashboard does not have (404)."""


class ScanRunning(WebDBError):
    """``/api/stats`` of a generation whose scan is not done within the wait (503)."""


class Dashboard:
    """The views over one db: ``db`` (a ``WebDB``, possibly a rack read through a mount),
    ``max_hosts`` (hosts kept by the scan), ``scan_wait`` (seconds an HTML view waits for the
    scan of a new generation before it shows the manifest's numbers alone; ``api_wait`` for
    ``/api``)."""

    def __init__(self, db, max_hosts: int = 100_000, scan_wait: float = 5.0, api_wait: float = 300.0) -> None:
        import jinja2

        self.db = db
        self.scans = views.Scans(db, max_hosts)
        self.scan_wait, self.api_wait = scan_wait, api_wait
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("webdb.serve", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(num=_num, when=_when, days=_days, nbytes=_nbytes)
        self.env.globals.update(link=_link, web_url=_web_url, statuses=views.STATUSES)
        self.routes: dict[str, Callable] = {
            "/": self.overview,
            "/rounds": self.rounds,
            "/hosts": self.hosts,
            "/page": self.page,
            "/search": self.search,
        }
        self.api_routes = {"/api" + (p if p != "/" else "/overview"): v for p, v in self.routes.items()}
        self.api_routes["/api/stats"] = self.api_stats

    # Each view: (reader, params, api) -> (template, data) or a redirect; params checked first.

    def overview(self, r, q: Params, api: bool):
        q.done()
        scan = self.scans.get(r, self.api_wait if api else self.scan_wait)
        return "overview.html", views.overview(r, scan)

    def api_stats(self, r, q: Params, api: bool):
        q.done()
        scan = self.scans.get(r, self.api_wait)
        if scan is None:
            raise ScanRunning(f"the scan of generation {r.generation} is still running; ask again")
        return None, scan.stats

    def rounds(self, r, q: Params, api: bool):
        q.done()
        return "rounds.html", views.rounds(r)

    def hosts(self, r, q: Params, api: bool):
        sort = q.choice("sort", views.HOST_COLUMNS, "pages")
        order = q.choice("order", ["asc", "desc"], "asc" if sort == "host" else "desc")
        page_no = q.integer("page", 1, 1, 10**9)
        per = q.integer("per", 50, 1, MAX_LIMIT)
        q.done()
        scan = self.scans.get(r, self.api_wait if api else self.scan_wait)
        if scan is None and api:
            raise ScanRunning(f"the scan of generation {r.generation} is still running; ask again")
        if scan is None:
            return "scanning.html", {"generation": r.generation, "pages": r.num_pages}
        return "hosts.html", views.hosts(scan, sort, order == "desc", page_no, per)

    def page(self, r, q: Params, api: bool):
        url = q.url("url")
        in_off = q.integer("in", 0, 0, 10**9)
        out_off = q.integer("out", 0, 0, 10**9)
        limit = q.integer("limit", 100, 1, MAX_LIMIT)
        q.done()
        d = views.page(r, url, in_off, out_off, limit)
        if d is None:
            raise NotFound(f"{url!r:.300} is not in generation {r.generation}")
        return "page.html", d

    def search(self, r, q: Params, api: bool):
        text = q.text("q", "")
        after = q.optional_url("after")
        limit = q.integer("limit", 100, 1, MAX_LIMIT)
        q.done()
        if not api and after is None and _is_url(text) and r.get_page(text) is not None:
            return _Redirect(_link("/page", url=text))
        return "search.html", views.search(r, text, after, limit)

    def answer(self, path: str, query: str) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a GET; every error is a status with a message."""
        api = path.startswith("/api/")
        view = (self.api_routes if api else self.routes).get(path)
        if path.startswith("/static/"):
            return self.static(path[len("/static/") :])
        try:
            if view is None:
                raise NotFound(f"no such page: {path[:200]}")
            q = Params(query)
            with self.db.reader() as r:
                out = view(r, q, api)
            if isinstance(out, _Redirect):
                return 303, {"Location": out.to}, b""
            template, data = out
            if template is None or api:
                return 200, {"Content-Type": "application/json"}, _json(data)
            return 200, _HTML, self.render(template, data, path)
        except BadInput as e:
            return self.error(400, str(e), api)
        except NotFound as e:
            return self.error(404, str(e), api)
        except ScanRunning as e:
            return self.error(503, str(e), api)
        except WebDBError as e:
            return self.error(500, str(e), api)

    def render(self, template: str, data: dict, path: str) -> bytes:
        view = template.removesuffix(".html")
        charts = views.chart_data(view, data) if view in ("rounds", "overview") else None
        html = self.env.get_template(template).render(
            d=data, view=view, path=path, db=self.db.path, charts=charts, generation=data.get("generation")
        )
        return html.encode()

    def error(self, status: int, message: str, api: bool) -> tuple[int, dict[str, str], bytes]:
        message = " | ".join(line.strip() for line in message.splitlines() if line.strip())[:2000]
        if api:
            return status, {"Content-Type": "application/json"}, _json({"error": message, "status": status})
        html = self.env.get_template("error.html").render(
            status=status, reason=HTTPStatus(status).phrase, message=message, view="error", path="", db=self.db.path
        )
        return status, _HTML, html.encode()

    def static(self, name: str) -> tuple[int, dict[str, str], bytes]:
        f = STATIC / name
        if "/" in name or name.startswith(".") or not f.is_file():
            return self.error(404, f"no such file: /static/{name[:200]}", False)
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return 200, {"Content-Type": ctype, "Cache-Control": "max-age=3600"}, f.read_bytes()


_HTML = {"Content-Type": "text/html; charset=utf-8"}


class _Redirect:
    def __init__(self, to: str) -> None:
        self.to = to


class Params:
    """A request's query parameters: each at most once, each known to its view (``done``
    refuses the rest); a bad value is BadInput naming the parameter (a 400)."""

    def __init__(self, query: str) -> None:
        try:
            pairs = parse_qsl(query, keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS)
        except UnicodeDecodeError:
            raise BadInput("the query string is not UTF-8") from None
        except ValueError:
            raise BadInput(f"more than {MAX_FIELDS} query parameters") from None
        self.values: dict[str, str] = {}
        for k, v in pairs:
            if k in self.values:
                raise BadInput(f"parameter {k!r:.100} is given twice")
            self.values[k] = v

    def _take(self, name: str) -> str | None:
        return self.values.pop(name, None)

    def done(self) -> None:
        if self.values:
            raise BadInput(f"unknown parameter {next(iter(self.values))!r:.100}")

    def integer(self, name: str, default: int, lo: int, hi: int) -> int:
        v = self._take(name)
        if v is None or v == "":
            return default
        if not (v.isascii() and v.isdigit()) or not lo <= int(v) <= hi:
            raise BadInput(f"{name}={v!r:.100}: expected a whole number {lo}..{hi}")
        return int(v)

    def choice(self, name: str, choices: list[str], default: str) -> str:
        v = self._take(name)
        if v is None or v == "":
            return default
        if v not in choices:
            raise BadInput(f"{name}={v!r:.100}: expected one of {', '.join(choices)}")
        return v

    def text(self, name: str, default: str) -> str:
        v = self._take(name)
        if v is None:
            return default
        if len(v) > 8192 or "\0" in v:
            raise BadInput(f"{name}: longer than 8192 characters or holds a NUL")
        return v

    def url(self, name: str) -> str:
        v = self._take(name)
        if not v:
            raise BadInput(f"parameter {name!r} is required (a URL)")
        validate_url(v)  # BadInput naming it
        return v

    def optional_url(self, name: str) -> str | None:
        v = self._take(name)
        if v is None or v == "":
            return None
        validate_url(v)
        return v


def _is_url(text: str) -> bool:
    try:
        validate_url(text)
    except BadInput:
        return False
    return True


def _json(data) -> bytes:
    return json.dumps(data, ensure_ascii=False, default=str).encode()


def _num(n) -> str:
    if n is None:
        return "-"
    if isinstance(n, float):
        return f"{n:,.4g}" if abs(n) < 1e6 else f"{n:,.0f}"
    return f"{n:,}"


def _when(t) -> str:
    if not t:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    except (OverflowError, OSError, ValueError):
        return str(t)


def _days(seconds) -> str:
    return "-" if seconds is None else f"{seconds / 86400:.4g} d"


def _nbytes(n) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _link(path: str, **params) -> str:
    """A link to one of our views; values are percent-encoded (and autoescaped in the page)."""
    kept = {k: v for k, v in params.items() if v is not None}
    return path + ("?" + urlencode(kept) if kept else "")


def _web_url(url: str) -> str | None:
    """``url`` when a browser may follow it (http or https), else None: a stored URL may be
    ``javascript://…`` and is then shown, never linked."""
    return url if urlsplit(url).scheme.lower() in ("http", "https") else None


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"
    server_version = "webdb-serve"
    timeout = 60  # seconds a connection may sit idle (or half-sent) before its thread lets it go

    def log_message(self, format: str, *args) -> None:
        if self.server.log_requests:
            sys.stderr.write(f"webdb serve: {self.address_string()} {format % args}\n")

    def do_GET(self, head: bool = False) -> None:
        parts = urlsplit(self.path)
        if not self.server.host_allowed(self.headers.get("Host", "")):
            # DNS rebinding: a web page the operator visits must not read the db through a name
            # of its own that resolves to loopback.
            status, headers, body = self.server.dashboard.error(400, "Host header names another server", False)
            self.send(status, headers, body, head)
            return
        try:
            status, headers, body = self.server.dashboard.answer(parts.path, parts.query)
        except Exception as e:  # a bug or a damaged db: a message, never a traceback to the client
            print(f"webdb serve: {self.path[:300]}: {type(e).__name__}: {e}", file=sys.stderr)
            status, headers, body = self.server.dashboard.error(
                500, f"internal error ({type(e).__name__}): {e}", parts.path.startswith("/api")
            )
        self.send(status, headers, body, head)

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def refuse(self) -> None:
        body = b"webdb serve is read-only: GET and HEAD only\n"
        self.close_connection = True  # its body is not read: the connection cannot carry another request
        self.send(405, {"Content-Type": "text/plain; charset=utf-8", "Allow": "GET, HEAD"}, body, False)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = refuse

    def send(self, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        self.send_response(status)
        headers = {
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "X-Frame-Options": "DENY",
            "Cache-Control": "no-store",
            **headers,
            "Content-Length": str(len(body)),
        }
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], dashboard: Dashboard, log_requests: bool = False) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.dashboard, self.log_requests = dashboard, log_requests
        super().__init__(address, _Handler)
        # On loopback, only the names of loopback are this server; elsewhere any name may be.
        self.hosts = {"127.0.0.1", "localhost", "::1", address[0].lower()} if is_loopback(address[0]) else None

    def host_allowed(self, header: str) -> bool:
        """Whether a request's Host header names this server (always, off loopback)."""
        if self.hosts is None:
            return True
        try:
            name = urlsplit("//" + header).hostname
        except ValueError:
            return False
        return name is not None and name.lower() in self.hosts


def make_server(db, host: str = "127.0.0.1", port: int = 0, **options) -> DashboardServer:
    """A server of the dashboard of ``db`` on ``host:port`` (0: a free port); call
    ``serve_forever()`` and, at the end, ``shutdown()`` and ``server_close()``."""
    log = options.pop("log_requests", False)
    return DashboardServer((host, port), Dashboard(db, **options), log_requests=log)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is a loopback address."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
