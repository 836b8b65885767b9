"""``webdb serve`` in a real browser (Debian's chromium and chromedriver, headless, through
selenium) against a db built by a real crawl of the demo site on loopback, with one page whose
anchor text is a ``<script>``: the overview shows the numbers of ``read --stats``, the rounds
chart has one point per generation, a page lists its inlinks and anchors, hostile text stays
text, bad parameters get a 400, and a writer committing while the server serves never gives a
page mixing two generations.

``WEBDB_SCREENSHOTS=DIR`` also saves the screenshots of the README there (``make screenshots``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from waiting import wait_until

import webdb
from fetchlist.demo_site import DEMO_HOSTS, Resource, loopback_ok, serve_demo

WEBDB = [sys.executable, "-m", "webdb.cli.main"]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HOSTILE = '<script>alert("owned")</script>'
WAIT = 120  # seconds: only a bound on a hang of the browser on a loaded machine

pytestmark = [
    pytest.mark.skipif(not all(map(loopback_ok, DEMO_HOSTS)), reason="needs 127.0.0.x addresses"),
    pytest.mark.timeout(600),
]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*WEBDB, *args], capture_output=True, text=True, timeout=300)


def read_stats(db: str, *extra: str) -> dict:
    out = cli("read", db, "--stats", "--json", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def crawled(tmp_path_factory) -> dict:
    """A db after 3 rounds of the demo site, plus a page on host 0 whose only link's anchor
    text is HOSTILE (escaped in its HTML, so the parser hands the text to the db)."""
    from fetchlist.crawl import crawl
    from fetchlist.fetch import Fetcher

    tmp = tmp_path_factory.mktemp("serve")
    server, site = serve_demo(pages=60, crawl_delay=0.05)
    with server:
        base = server.base(DEMO_HOSTS[0])
        target = base + "/s1/"
        body = (
            "<!DOCTYPE html><html><head><title>&lt;script&gt;alert(1)&lt;/script&gt;</title></head><body>"
            '<a href="/s1/">&lt;script&gt;alert("owned")&lt;/script&gt;</a></body></html>'
        )
        server.routes[DEMO_HOSTS[0]]["/hostile.html"] = Resource(200, body.encode(), "text/html; charset=utf-8")
        seeds = tmp / "seeds.txt"
        seeds.write_text("".join(u + "\n" for u in [*site.seeds, base + "/hostile.html"]), encoding="utf-8")
        root = str(tmp / "crawl.db")
        fetcher = Fetcher(politeness_delay=0.01, threads=8, progress=False, allow_private_addresses=True)
        crawl(root, seeds=[str(seeds)], rounds=3, sections=2, fetcher=fetcher, create_settings={"sync": False})
    return {"db": root, "hostile": base + "/hostile.html", "target": target, "home1": server.base(DEMO_HOSTS[1]) + "/"}


class Served:
    """``webdb serve`` in a child process on a free loopback port; ``url`` from its first line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*WEBDB, "serve", *args, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline()  # blocks until the server listens (pytest-timeout bounds it)
        m = re.search(r"on (http://\S+/) ", line)
        assert m, (line, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.url = m.group(1)

    def get(self, path: str) -> tuple[int, dict, bytes]:
        try:
            with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=WAIT) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def close(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=WAIT)
        return err


@pytest.fixture(scope="module")
def served(crawled):
    s = Served(crawled["db"])
    yield s
    err = s.close()
    assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.service import Service

    assert os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER), "needs chromium and chromium-driver: make deps"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1100"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(WAIT)
    yield driver
    driver.quit()


def load(driver, url: str, charts: bool = False) -> None:
    driver.get(url)
    WebDriverWait(driver, WAIT).until(lambda d: d.execute_script("return document.readyState") == "complete")
    if charts:
        WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-charts"))


def console_errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def screenshot(driver, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 10_000
    out = os.environ.get("WEBDB_SCREENSHOTS")
    if out:
        shutil.copy(path, os.path.join(out, name))


def test_overview_shows_the_numbers_of_read_stats(crawled, served, browser, tmp_path):
    want = read_stats(crawled["db"])
    status, headers, body = served.get("/api/stats")
    assert status == 200 and json.loads(body) == want  # the same JSON as `read --stats --json`
    load(browser, served.url, charts=True)
    assert browser.find_element(By.ID, "generation").text == str(want["generation"])
    for k in ("pages", "fetched", "unfetched", "links"):
        el = browser.find_element(By.ID, f"stat-{k}")
        assert el.text == f"{want[k]:,}" and el.get_attribute("data-value") == str(want[k]), k
    shown = {
        td.get_attribute("data-status"): int(td.get_attribute("data-value"))
        for td in browser.find_elements(By.CSS_SELECTOR, "#status-table td[data-status]")
    }
    assert shown == want["status"]
    sections = browser.find_elements(By.CSS_SELECTOR, "#section-table tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in sections] == [
        f"{s['pages']:,}" for s in want["by_section"]
    ]
    hist = browser.execute_script("return window.webdbCharts['chart-score'].data[1]")
    assert sum(n for n in hist if n) == want["pages"]  # every page in one bucket of the score histogram
    assert console_errors(browser) == []
    screenshot(browser, "serve-overview.png", tmp_path)


def test_rounds_chart_has_one_point_per_generation(crawled, served, browser, tmp_path):
    gen = webdb.open(crawled["db"]).committed()
    load(browser, served.url + "rounds", charts=True)
    xs = browser.execute_script("return window.webdbCharts['chart-rounds'].data[0]")
    assert xs == list(range(gen + 1))
    pages = browser.execute_script("return window.webdbCharts['chart-rounds'].data[1]")
    assert pages[-1] == read_stats(crawled["db"], "--quick")["pages"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#rounds-table tbody tr")
    assert [int(r.get_attribute("data-generation")) for r in rows] == list(range(gen, -1, -1))
    assert console_errors(browser) == []
    screenshot(browser, "serve-rounds.png", tmp_path)


def test_page_lists_inlinks_and_anchors_and_search_finds_it(crawled, served, browser, tmp_path):
    url = crawled["home1"]
    out = cli("read", crawled["db"], "--inlinks", url, "--json")
    want = sorted(json.loads(line)["anchor"] for line in out.stdout.splitlines())
    assert want and "Next host 1" in want
    load(browser, served.url)
    box = browser.find_element(By.ID, "search-q")
    box.send_keys(url.rsplit(":", 1)[0])  # a prefix: http://127.0.0.3
    box.submit()
    WebDriverWait(browser, WAIT).until(lambda d: d.find_elements(By.ID, "results"))
    browser.find_element(By.LINK_TEXT, url).click()
    WebDriverWait(browser, WAIT).until(lambda d: d.find_elements(By.ID, "page-url"))
    assert browser.find_element(By.ID, "page-url").text == url
    anchors = sorted(td.text for td in browser.find_elements(By.CSS_SELECTOR, "#inlinks td.anchor"))
    assert anchors == want
    sources = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#inlinks td a")]
    assert crawled["home1"].replace(DEMO_HOSTS[1], DEMO_HOSTS[0]) in sources  # host 0's home links here
    assert browser.find_elements(By.CSS_SELECTOR, "#outlinks tbody a")  # via its md5
    assert console_errors(browser) == []
    screenshot(browser, "serve-page.png", tmp_path)


def test_a_script_anchor_stays_text(crawled, served, browser):
    target = crawled["target"]
    load(browser, served.url + "page?" + urllib.parse.urlencode({"url": target}))
    anchors = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#inlinks td.anchor")]
    assert HOSTILE in anchors  # shown as the text it is
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - the property raises when no alert is open
    assert browser.execute_script("return document.querySelectorAll('main script').length") == 0
    assert console_errors(browser) == []  # not even a CSP violation: nothing tried to run
    status, headers, body = served.get("page?" + urllib.parse.urlencode({"url": target}))
    html = body.decode()
    assert status == 200 and "&lt;script&gt;alert(&#34;owned&#34;)&lt;/script&gt;" in html
    assert HOSTILE not in html and "<script>alert" not in html
    assert "script-src 'self'" in headers["Content-Security-Policy"] and "unsafe-inline" not in html
    # The hostile page's own record (its URL is harmless; its outlink's anchor is not).
    load(browser, served.url + "page?" + urllib.parse.urlencode({"url": crawled["hostile"]}))
    assert [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#outlinks td.anchor")] == [HOSTILE]
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    assert console_errors(browser) == []


def test_hosts_sort_and_paginate(crawled, served, browser):
    load(browser, served.url + "hosts?per=2")
    cells = lambda: [  # noqa: E731
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in browser.find_elements(By.CSS_SELECTOR, "#hosts-table tbody tr")
    ]
    first = cells()
    assert len(first) == 2
    browser.find_element(By.ID, "next").click()
    WebDriverWait(browser, WAIT).until(lambda d: cells() != first)
    browser.find_element(By.LINK_TEXT, "host").click()  # sort by host name, ascending
    WebDriverWait(browser, WAIT).until(lambda d: "sort=host" in d.current_url)
    hosts = [r[0] for r in cells()]
    assert hosts == sorted(hosts)
    api = json.loads(served.get("api/hosts?sort=host&per=500")[2])
    assert [h["host"] for h in api["hosts"]] == sorted(DEMO_HOSTS)
    assert sum(h["pages"] for h in api["hosts"]) == read_stats(crawled["db"], "--quick")["pages"]
    assert console_errors(browser) == []


@pytest.mark.parametrize(
    "path,status,message",
    [
        ("hosts?sort=nope", 400, "sort='nope': expected one of"),
        ("hosts?page=0", 400, "page='0': expected a whole number 1.."),
        ("hosts?per=100000", 400, "per='100000'"),
        ("hosts?per=2&per=3", 400, "parameter 'per' is given twice"),
        ("rounds?x=1", 400, "unknown parameter 'x'"),
        ("page", 400, "parameter 'url' is required"),
        ("page?url=nourl", 400, "url has no scheme"),
        ("page?url=%ff", 400, "not UTF-8"),
        ("page?url=http://nowhere.example/", 404, "is not in generation"),
        ("api/page?url=nourl", 400, "url has no scheme"),
        ("api/hosts?order=up", 400, "order='up'"),
        ("search?after=http://a/&q=http://b/", 400, "does not start with"),
        ("nothing-here", 404, "no such page"),
        ("static/../app.py", 404, "no such file"),
    ],
)
def test_bad_requests_get_a_status_and_a_message(served, path, status, message):
    got, headers, body = served.get(path)
    text = body.decode()
    assert got == status and message.replace("'", "&#39;" if not path.startswith("api/") else "'") in text
    assert "Traceback" not in text and headers["Content-Security-Policy"]
    if path.startswith("api/"):
        assert json.loads(text)["status"] == status


def test_another_host_name_is_refused(served):
    """DNS rebinding: a page elsewhere reaching 127.0.0.1 under its own name reads nothing."""
    req = urllib.request.Request(served.url + "api/stats", headers={"Host": "evil.example"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=WAIT)
    assert e.value.code == 400 and b"Host header" in e.value.read()
    req = urllib.request.Request(served.url + "api/rounds", headers={"Host": "localhost:1"})
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        assert r.status == 200


def test_search_takes_any_text(served):
    status, _, body = served.get("search?q=127.0.0")  # not a URL: a prefix that matches nothing
    assert status == 200 and b'class="none"' in body
    got = json.loads(served.get("api/search?q=http%3A%2F%2F127.0.0.2&limit=2")[2])
    assert len(got["urls"]) == 2 and got["next"] == got["urls"][-1]
    more = json.loads(served.get("api/search?" + urllib.parse.urlencode({"q": got["q"], "after": got["next"]}))[2])
    assert more["urls"] and more["urls"][0] > got["urls"][-1]


def test_before_its_scan_a_page_shows_the_manifest_numbers(crawled):
    """What the overview and hosts views show while the scan of a new generation runs."""
    from webdb.serve import views
    from webdb.serve.app import Dashboard

    dash = Dashboard(webdb.open(crawled["db"]))
    with dash.db.reader() as r:
        d = views.overview(r, None)
        overview = dash.render("overview.html", d, "/").decode()
        hosts = dash.render("scanning.html", {"generation": r.generation, "pages": r.num_pages}, "/hosts").decode()
    assert d["scan"] == "running" and d["stats"] == read_stats(crawled["db"], "--quick")
    assert 'id="scan-running"' in overview and f'data-value="{d["stats"]["pages"]}"' in overview
    assert 'id="scan-running"' in hosts


def test_read_only_methods(served):
    req = urllib.request.Request(served.url + "rounds", method="HEAD")
    with urllib.request.urlopen(req, timeout=WAIT) as r:
        assert r.status == 200 and r.read() == b"" and int(r.headers["Content-Length"]) > 0
    req = urllib.request.Request(served.url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=WAIT)
    assert e.value.code == 405 and e.value.headers["Allow"] == "GET, HEAD"


def _snapshot(s: Served) -> tuple[int, dict, str]:
    """One overview page and the generation it says it shows, with /api/stats."""
    status, _, body = s.get("api/stats")
    assert status == 200
    api = json.loads(body)
    _, _, html = s.get("")
    html = html.decode()
    gen = int(re.search(r'id="generation">(\d+)<', html).group(1))
    shown = {k: int(re.search(rf'id="stat-{k}" data-value="(\d+)"', html).group(1)) for k in ("pages", "links")}
    return api["generation"], api, json.dumps({"gen": gen, **shown})


def test_a_commit_while_serving_shows_one_generation_per_page(crawled, tmp_path):
    db = str(tmp_path / "copy.db")
    shutil.copytree(crawled["db"], db)
    before = read_stats(db)
    s = Served(db)
    seen: list[tuple[int, dict, str]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            seen.append(_snapshot(s))

    t = threading.Thread(target=poll)
    t.start()
    try:
        # A real writer (its own process, the writer lock) commits while the server serves.
        urls = tmp_path / "new.txt"
        urls.write_text("".join(f"http://new{i}.example/\n" for i in range(50)), encoding="utf-8")
        out = cli("inject", db, str(urls))
        assert out.returncode == 0, out.stderr
        after = read_stats(db)
        assert after["generation"] == before["generation"] + 1 and after["pages"] == before["pages"] + 50
        # Wait until the server has answered with the new generation (an event, not a sleep).
        wait_until(lambda: any(g == after["generation"] for g, *_ in seen), WAIT, "the new generation served")
    finally:
        stop.set()
        t.join(WAIT)
        err = s.close()
    assert "Traceback" not in err
    by_gen = {before["generation"]: before, after["generation"]: after}
    assert {g for g, *_ in seen} <= set(by_gen) and after["generation"] in {g for g, *_ in seen}
    for g, api, page in seen:
        assert api == by_gen[g]  # /api/stats: all of one generation's numbers
        p = json.loads(page)
        want = by_gen[p["gen"]]
        assert (p["pages"], p["links"]) == (want["pages"], want["links"])  # the HTML: one generation too


def test_a_rack_through_section_dir(crawled, tmp_path):
    """Sections moved out of the db directory, served through --section-dir as `read` reads them."""
    db = tmp_path / "meta.db"
    shutil.copytree(crawled["db"], db)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(str(db / "section-0001"), str(moved / "section-0001"))
    args = ["--section-dir", f"1={moved / 'section-0001'}"]
    s = Served(str(db), *args)
    try:
        assert json.loads(s.get("api/stats")[2]) == read_stats(str(db), *args)
        assert s.get("page?" + urllib.parse.urlencode({"url": crawled["home1"]}))[0] == 200
    finally:
        s.close()


def test_bind_elsewhere_warns_and_bad_db_is_named(tmp_path):
    p = subprocess.Popen(
        [*WEBDB, "serve", str(tmp_path / "none.db"), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, err = p.communicate(timeout=WAIT)
    assert p.returncode == 2 and b"none.db" in err and b"Traceback" not in err
    db = tmp_path / "x.db"
    webdb.create(str(db))
    s = subprocess.Popen(
        [*WEBDB, "serve", str(db), "--port", "0", "--bind", "0.0.0.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "on http://0.0.0.0:" in s.stdout.readline()
        assert "no authentication" in s.stderr.readline()
    finally:
        s.terminate()
        s.communicate(timeout=WAIT)
