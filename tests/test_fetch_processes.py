"""A fetch with parse worker processes (fetchlist.workers): same records as one process,
politeness unchanged, Ctrl-C and resume, a worker that dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest
from httpsite import AVAILABLE, GRAPH_PAGES, HOSTS, TestSite, intervals, overlaps
from test_warc import assert_valid_warc
from waiting import sigint_default, wait_until

from fetchlist.demo_site import Hold
from fetchlist.fetch import Fetcher
from fetchlist.segment import FetchEntry, Segment
from fetchlist.warc import read_metadata, read_response
from fetchlist.workers import WorkerDied
from webdb.errors import BadInput
from webdb.tables.records import Status

pytestmark = [
    pytest.mark.skipif(not AVAILABLE, reason="needs 127.0.0.x loopback addresses"),
    pytest.mark.timeout(240),
]

FAST = {
    "politeness_delay": 0.0,
    "threads": 4,
    "progress": False,
    "connect_timeout": 30.0,  # a loaded machine may answer slowly; nothing here stalls on purpose
    "read_timeout": 30.0,
    "allow_private_addresses": True,
}
MISC = [
    "/s/200",
    "/s/204",
    "/s/301",
    "/s/404",
    "/s/503",
    "/redirect/absolute",
    "/binary.png",
    "/binary-as-html",
    "/text.txt",
    "/broken.html",
    "/cp1251.html",
    "/sjis.html",
    "/noindex.html",
    "/huge",
]
# What differs between two fetches of the same answer: when, how long, the server's Date.
_TIMING = ("fetch_time", "elapsed")


@pytest.fixture
def site():
    with TestSite() as s:
        yield s


def _urls(site) -> list[str]:
    urls = [site.url("graph", f"/g/{i}.html") for i in range(GRAPH_PAGES)]
    urls.append(site.url("graph", "/private/0.html"))  # denied by robots.txt
    urls += [site.url("slowbot", f"/p{i}.html") for i in range(4)]
    urls += [site.url("broken", "/p0.html")]  # robots.txt 500: RETRY without a request
    return urls + [site.url("misc", p) for p in MISC]


def _outputs(seg: Segment) -> dict[str, dict]:
    """Per URL: the fetch record, its parse record, and the WARC response and metadata."""
    out = {}
    path = seg.file("content", 0)
    for r in seg.records(0):
        rec = {k: getattr(r, k) for k in r.__slots__ if k not in (*_TIMING, "content_ref", "parse", "warc")}
        rec["headers"] = {k: v for k, v in r.headers.items() if k != "date"}
        rec["parse"] = r.parse
        if r.content_ref is not None:
            resp = read_response(path, r.content_ref[0], r.url)
            rec["warc"] = (resp.status, resp.body, resp.payload_digest, resp.truncated)
            meta = read_metadata(path, r.content_ref[0] + r.content_ref[1])
            rec["outlinks"] = meta.get("outlink", [])
        out[r.url] = rec
    return out


def test_processes_write_the_same_records_as_one_process(site, tmp_path):
    urls = _urls(site)
    outputs, stats = {}, {}
    for procs in (0, 2):
        seg = Segment.create(tmp_path / f"p{procs}")
        seg.write_fetchlist(0, [FetchEntry(u) for u in urls])
        stats[procs] = Fetcher(**FAST, processes=procs).fetch_segment(seg, 0)
        assert seg.check()["fetched"] == len(urls)
        assert assert_valid_warc(seg) == stats[procs].statuses["FETCHED"]
        outputs[procs] = _outputs(seg)
    assert stats[0].processes == 0 and stats[2].processes == 2
    assert stats[0].worker_cpu_seconds == 0 < stats[2].worker_cpu_seconds
    assert sorted(outputs[0]) == sorted(outputs[2]) == sorted(urls)
    for url in urls:
        assert outputs[2][url] == outputs[0][url], url
    fetched = [u for u in urls if outputs[2][u]["status"] == Status.FETCHED]
    assert len(fetched) > GRAPH_PAGES and all(outputs[2][u]["parse"] is not None for u in fetched)
    assert any(outputs[2][u]["outlinks"] for u in fetched)  # the workers' WARC metadata has them


def test_politeness_holds_with_worker_processes(site):
    urls = [site.url("graph", f"/g/{i}.html") for i in range(GRAPH_PAGES)]
    urls += [site.url("misc", p) for p in MISC] + [site.url("slowbot", f"/p{i}.html") for i in range(4)]
    records = []
    stats = Fetcher(**{**FAST, "politeness_delay": 0.2, "threads": 6}, processes=2).fetch(
        [FetchEntry(u) for u in urls], records.append
    )
    assert stats.processes == 2 and len(records) == len(urls)
    for name, delay in (("graph", 0.2), ("misc", 0.2), ("slowbot", 0.3)):
        log = site.requests(name)
        assert len(log) >= 4, name
        assert overlaps(log) == 0, name  # never two requests in flight to one host
        assert min(intervals(log)) >= delay - 0.002, (name, intervals(log))


def test_processes_setting_is_checked():
    for bad in (-1, True, "2", 2.5, 5000):
        with pytest.raises(BadInput, match="processes"):
            Fetcher(processes=bad)
    assert Fetcher(processes=0).processes == 0
    assert Fetcher().processes == len(os.sched_getaffinity(0))


def _webdb(*args: str, **kw) -> subprocess.Popen:
    exe = os.path.join(os.path.dirname(sys.executable), "webdb")
    return subprocess.Popen(
        [exe, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,  # Ctrl-C must reach it even if the suite runs in the background
        **kw,
    )


def test_cli_processes_option(tmp_path):
    proc = _webdb("fetch", str(tmp_path), "--processes", "-1")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--processes" in err and "Traceback" not in err


def test_interrupt_and_resume_with_worker_processes(site, tmp_path):
    """Ctrl-C while a request is in flight: the pages fetched before it are in the segment
    (the workers' records are written while the fetch runs), the request in flight is cut, the
    workers end, and a second run fetches only the rest."""
    seg = Segment.create(tmp_path / "seg")
    urls = [site.url("graph", f"/g/{i}.html") for i in range(GRAPH_PAGES)]
    urls += [site.url("slowbot", f"/p{i}.html") for i in range(4)]
    seg.write_fetchlist(0, [FetchEntry(u) for u in urls])
    # A queue is fetched in order: the graph host's request for /g/6.html stays in flight until
    # released, so the run cannot end before the interrupt, and by then it has fetched exactly
    # /g/0-5 and slowbot's four pages.
    held = 6
    hold = site.server.routes[HOSTS["graph"]][f"/g/{held}.html"].hold = Hold()
    before = urls[:held] + urls[GRAPH_PAGES:]
    args = ["fetch", seg.path, "--processes", "2", "--threads", "2", "--delay", "0"]
    args += ["--crawl-set", "allow_private_addresses=true"]
    # timeouts longer than any wait here: the held request ends by the interrupt, never by a timeout
    proc = _webdb(*args, "--crawl-set", "read_timeout=600", "--crawl-set", "fetch_timeout=600")

    def saved() -> bool:
        assert proc.poll() is None, proc.communicate()
        return hold.arrived.is_set() and sum(1 for _ in seg.fetch_records(0)) >= len(before)

    try:
        wait_until(saved, 120, f"{len(before)} fetch records in {seg.path} and /g/{held}.html in flight")
        workers = [p for p in psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # returns once every holder of its stdout is gone
    finally:
        hold.release()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and "interrupted" in out and "Traceback" not in err, (out, err)
    assert "2 worker processes" in out
    psutil.wait_procs(workers, timeout=30)
    assert not [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    kept = list(seg.records(0, content=True))
    assert sorted(r.url for r in kept) == sorted(before)
    assert assert_valid_warc(seg) == len(kept)
    assert all(r.status == Status.FETCHED and r.parse is not None for r in kept)
    served = {f"http://{r.host}:{site.port}{r.path}" for n in ("graph", "slowbot") for r in site.requests(n)}
    served -= {site.url("graph", "/robots.txt"), site.url("slowbot", "/robots.txt")}
    assert served == {*before, urls[held]}  # the one in flight was cut: not recorded
    # resume with workers again: only the missing URLs, nothing twice
    proc = _webdb(*args, "--json")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert seg.check()["fetched"] == len(urls)
    assert sorted(r.url for r in seg.fetch_records(0)) == sorted(urls)
    assert assert_valid_warc(seg) == len(urls)


def test_a_dead_worker_stops_the_fetch_cleanly(site, tmp_path):
    """A worker killed mid-run (out of memory, say) ends the run with WorkerDied; the records
    written stay valid and a second run resumes."""
    seg = Segment.create(tmp_path / "seg")
    urls = [site.url("graph", f"/g/{i}.html") for i in range(GRAPH_PAGES)]
    urls += [site.url("misc", p) for p in MISC]
    seg.write_fetchlist(0, [FetchEntry(u) for u in urls])
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    fetcher = Fetcher(**FAST, processes=2)
    killed = []

    def sink(rec, w):
        w.write(rec)
        if not killed and rec.status == Status.FETCHED:  # parsed by a worker: there is one
            pid = fetcher._pool.pids()[0]
            assert pid in {p.pid for p in me.children(recursive=True)} - before
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    with seg.writer(0) as w, pytest.raises(WorkerDied, match="resume"):
        fetcher.fetch(list(seg.fetchlist(0)), lambda rec: sink(rec, w))
    done = sum(1 for _ in seg.fetch_records(0))
    assert done < len(urls)
    stats = Fetcher(**FAST, processes=2).fetch_segment(seg, 0)
    assert stats.skipped == done and seg.check()["fetched"] == len(urls)
    assert assert_valid_warc(seg) == sum(r.status == Status.FETCHED for r in seg.fetch_records(0))
