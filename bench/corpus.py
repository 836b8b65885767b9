"""The fetch benchmark's corpus: Debian's HTML documentation served by nginx on loopback hosts.

Recipe (Debian 12, as root)::

    apt-get install nginx python3-doc postgresql-doc-15 python-django-doc

Python's, PostgreSQL's and Django's manuals are 2,391 HTML pages of 40 KB on average.  ``Corpus``
starts one nginx (``daemon off``, a child of this process, stopped by ``close``) listening on
``hosts`` loopback addresses 127.0.1.1 … 127.0.1.N, port 8080; every host serves the same three
trees.  ``urls(copies)`` lists each page on ``copies`` hosts (page i on hosts i, i+1, …, modulo
N): 4 copies over 12 hosts make 9,564 distinct URLs, about 800 per host — what a fetcher
with 12 requests in flight and one per host sees on a crawl of 12 sites.

    with Corpus(hosts=12) as c:
        urls = c.urls(copies=4)

Nothing is written outside ``workdir`` (nginx's config, pid, temp and log files).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

DOC_ROOTS = {
    "python": "/usr/share/doc/python3-doc/html",
    "postgresql": "/usr/share/doc/postgresql-doc-15/html",
    "django": "/usr/share/doc/python-django-doc/html",
}
PORT = 8080
_PACKAGES = "nginx python3-doc postgresql-doc-15 python-django-doc"


def host_addr(i: int) -> str:
    """Loopback address of host ``i`` (0-based): 127.0.1.1, 127.0.1.2, …"""
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


def pages() -> list[str]:
    """Every HTML page of the corpus as a URL path (``/python/library/os.html``), sorted."""
    out = []
    for name, root in DOC_ROOTS.items():
        real = os.path.realpath(root)
        if not os.path.isdir(real):
            raise SystemExit(f"{root}: missing; install the corpus first: apt-get install {_PACKAGES}")
        for d, _, files in os.walk(real):
            rel = os.path.relpath(d, real)
            for f in files:
                if f.endswith(".html"):
                    out.append("/" + "/".join(p for p in (name, rel, f) if p != "."))
    return sorted(out)


class Corpus:
    """nginx serving the corpus on ``hosts`` loopback addresses (see the module docstring)."""

    def __init__(self, hosts: int = 12, workdir: str | None = None) -> None:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(nginx):
            raise SystemExit(f"nginx not found; install the corpus first: apt-get install {_PACKAGES}")
        self.hosts = [host_addr(i) for i in range(hosts)]
        self.paths = pages()
        self._own = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="bench-corpus-")
        for sub in ("logs", "tmp"):
            os.makedirs(os.path.join(self.workdir, sub), exist_ok=True)
        conf = os.path.join(self.workdir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(self._config())
        self.proc = subprocess.Popen([nginx, "-p", self.workdir, "-c", conf, "-e", "logs/error.log"])
        self._wait_listening()

    def _config(self) -> str:
        listen = "\n".join(f"    listen {h}:{PORT};" for h in self.hosts)
        aliases = "\n".join(
            f"    location /{name}/ {{ alias {os.path.realpath(root)}/; }}" for name, root in DOC_ROOTS.items()
        )
        w = self.workdir
        return f"""daemon off;
worker_processes 1;
pid {w}/nginx.pid;
error_log {w}/logs/error.log;
events {{ worker_connections 1024; }}
http {{
  types {{ text/html html; text/css css; image/png png; }}
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  client_body_temp_path {w}/tmp/body;
  proxy_temp_path {w}/tmp/proxy;
  fastcgi_temp_path {w}/tmp/fastcgi;
  uwsgi_temp_path {w}/tmp/uwsgi;
  scgi_temp_path {w}/tmp/scgi;
  server {{
{listen}
    location = /robots.txt {{ return 200 "User-agent: *\\nDisallow: /nowhere/\\n"; }}
{aliases}
  }}
}}
"""

    def _wait_listening(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for h in self.hosts:
            while True:
                if self.proc.poll() is not None:
                    raise SystemExit(f"nginx exited with status {self.proc.returncode} (see {self.workdir}/logs)")
                try:
                    socket.create_connection((h, PORT), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"nginx is not listening on {h}:{PORT} after {timeout:g}s") from None
                    time.sleep(0.05)

    def urls(self, copies: int = 4) -> list[str]:
        """Each page on ``copies`` hosts: ``len(pages) * copies`` distinct URLs, grouped by page."""
        n = len(self.hosts)
        k = min(copies, n)
        return [f"http://{self.hosts[(i + j) % n]}:{PORT}{p}" for i, p in enumerate(self.paths) for j in range(k)]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        if self._own:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Corpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
