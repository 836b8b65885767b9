"""Conditional refetches against a real nginx: the validators of its answer (ETag,
Last-Modified) are stored in the db and sent back, nginx answers 304, and the round counts
it.  nginx compares If-Modified-Since for equality, so our own fetch time would never match."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest

from fetchlist.crawl import crawl
from fetchlist.fetch import Fetcher

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed")

CONF = """
daemon off;
master_process off;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{}}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/tmp;
    proxy_temp_path {root}/tmp;
    fastcgi_temp_path {root}/tmp;
    uwsgi_temp_path {root}/tmp;
    scgi_temp_path {root}/tmp;
    types {{ text/html html; }}
    server {{
        listen 127.0.0.1:{port};
        root {root}/www;
    }}
}}
"""


@pytest.fixture
def nginx(tmp_path):
    root = tmp_path / "nginx"
    (root / "www").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "www" / "index.html").write_text("<html><body><a href='/a.html'>a</a></body></html>")
    (root / "www" / "a.html").write_text("<html><body>leaf</body></html>")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (root / "nginx.conf").write_text(CONF.format(root=root, port=port))
    proc = subprocess.Popen([NGINX, "-p", str(root), "-c", str(root / "nginx.conf"), "-e", str(root / "error.log")])
    try:
        while True:  # poll the port until nginx listens; bounded by the test's timeout
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except ConnectionRefusedError:
                try:
                    proc.wait(0.05)  # returns at once if nginx exited instead of listening
                except subprocess.TimeoutExpired:
                    continue
                pytest.fail((root / "error.log").read_text())
        yield f"http://127.0.0.1:{port}", root
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.timeout(120)
def test_refetch_sends_nginx_validators_and_counts_304(tmp_path, nginx):
    base, root = nginx
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(base + "/index.html\n")
    fetcher = Fetcher(politeness_delay=0.0, progress=False, allow_private_addresses=True)
    db = str(tmp_path / "db")
    r1 = crawl(db, seeds=[str(seeds)], rounds=1, fetcher=fetcher, create_settings={"sync": False}).rounds[0]
    assert (r1.fetched, r1.not_modified) == (1, 0)
    again = {"add_days": 400}  # everything due again
    r2 = crawl(db, rounds=1, fetcher=fetcher, generate_options=again).rounds[0]
    assert (r2.fetched, r2.not_modified) == (1, 1)  # a.html is new; index.html is not modified
    r3 = crawl(db, rounds=1, fetcher=fetcher, generate_options=again).rounds[0]
    assert (r3.fetched, r3.not_modified) == (0, 2)
    log = (root / "access.log").read_text().splitlines()
    assert sum('" 304 ' in ln for ln in log) == 3
