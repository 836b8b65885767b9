"""``webdb export``: every fetched page once, in global URL order, with the anchors that
``read --dump links`` implies; k = 1 and k = 3 and a mount of host roots give the same bytes;
constant memory; the segment join; filters, formats and errors."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from collections import defaultdict

import pytest

import webdb
from fetchlist.demo_site import DEMO_HOSTS, loopback_ok
from fetchlist.export import SegmentJoin
from fetchlist.segment import Segment
from fetchlist.warc import read_response
from webdb import BadInput, Page, Status, domain_id
from webdb.tools.export import export_pages, write_parquet

WEBDB = [sys.executable, "-m", "webdb.cli.main"]
EXPORTED = {"fetched", "not_modified"}


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([*WEBDB, *map(str, args)], capture_output=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr.decode()
    return p


def export_lines(db, *args: str) -> list[dict]:
    out = cli("export", db, *args).stdout.decode("utf-8")
    return [json.loads(line) for line in out.splitlines()]


def md5(s: str) -> bytes:
    return hashlib.md5(s.encode()).digest()


# ---- a generated db ----------------------------------------------------------------------------

HOSTS = [f"h{i}.example" for i in range(12)] + ["www.h1.example", "news.h1.example"]
WORDS = ["alpha", "beta", "gamma", "delta", "Ünïcode", "", "alpha beta"]
STATUSES = [Status.FETCHED] * 6 + [Status.NOT_MODIFIED, Status.UNFETCHED, Status.GONE, Status.DUPLICATE, Status.RETRY]


def gen_db(path, k: int, n: int = 1500, seed: int = 7, **settings) -> webdb.WebDB:
    """n pages on 14 hosts, all statuses; fetched pages link to 3-12 others with anchors from a
    small vocabulary (so hosts repeat anchors), a hub page with many inlinks."""
    settings.setdefault("sync", False)
    settings.setdefault("block_size", 2048)
    rng = random.Random(seed)
    db = webdb.create(str(path), sections=k, **settings)
    urls = [f"http://{HOSTS[i % len(HOSTS)]}/p/{i}" for i in range(n)]
    hub = urls[1]
    with db.writer() as w:
        for i, u in enumerate(urls):
            st = rng.choice(STATUSES)
            meta = {"fit": "1"} if i % 3 == 0 else {}
            fetched = st != Status.UNFETCHED
            p = Page(u, md5(u) if fetched else b"", st, 1000 + (i % 50) * 10 if fetched else 0, score=i / 7, meta=meta)
            w.add_page_with_score(p)
        for i, u in enumerate(urls):
            outs = {(rng.choice(urls), rng.choice(WORDS)) for _ in range(rng.randint(3, 12))}
            outs.add((hub, rng.choice(WORDS)))
            w.add_links(md5(u), sorted(outs), domain_id=domain_id(HOSTS[i % len(HOSTS)]))
    return db


def dump(db, table: str) -> list[dict]:
    out = cli("read", db, "--dump", table, "--format", "jsonl").stdout.decode("utf-8")
    return [json.loads(line) for line in out.splitlines()]


def expected(db, max_anchors: int = 100) -> list[dict]:
    """The export computed independently from ``read --dump pages`` and ``--dump links``."""
    links = defaultdict(list)
    for lk in dump(db, "links"):
        links[lk["url"]].append(lk)
    out = []
    for p in dump(db, "pages"):
        if p["status"] not in EXPORTED:
            continue
        ls = links.get(p["url"], [])
        pairs = {(lk["domain_id"], lk["anchor"]) for lk in ls if lk["anchor"]}
        count: dict[str, int] = defaultdict(int)
        for _, text in pairs:
            count[text] += 1
        anchors = sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))[:max_anchors]
        out.append(
            {
                "url": p["url"],
                "md5": p["md5"],
                "status": p["status"],
                "fetch_time": p["fetch_time"],
                "score": p["score"],
                "meta": p["meta"],
                "inlinks": len(ls),
                "inlink_hosts": len({lk["domain_id"] for lk in ls}),
                "anchors": [{"text": t, "hosts": c} for t, c in anchors],
            }
        )
    return out


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    return {k: gen_db(root / f"k{k}", k) for k in (1, 3)}


def test_generated_db_matches_the_dumps_and_k_does_not_matter(dbs):
    out = {k: cli("export", db.path).stdout for k, db in dbs.items()}
    assert out[1] == out[3]  # byte for byte
    recs = [json.loads(line) for line in out[3].decode("utf-8").splitlines()]
    assert recs == expected(dbs[3].path)
    urls = [r["url"].encode() for r in recs]
    assert urls == sorted(set(urls))  # global URL order, each page once
    with dbs[3].reader() as r:
        assert r.sections.k == 3 and all(t is not None for t in r.tables["links_by_url"])
        by_status = r.status_counts()
    assert len(recs) == by_status[Status.FETCHED] + by_status[Status.NOT_MODIFIED]
    hub = next(r for r in recs if r["url"] == "http://h1.example/p/1")
    assert hub["inlinks"] > 1000 and hub["inlink_hosts"] == len(HOSTS)
    # Per linking host: no anchor counts more hosts than link to the page.
    assert max(a["hosts"] for r in recs for a in r["anchors"]) <= len(HOSTS)


def test_max_anchors_caps_the_list(dbs):
    recs = export_lines(dbs[1].path, "--max-anchors", "2")
    assert recs == expected(dbs[1].path, max_anchors=2)
    assert max(len(r["anchors"]) for r in recs) == 2
    assert all(r["anchors"] == [] for r in export_lines(dbs[1].path, "--max-anchors", "0"))


def test_filters(dbs, tmp_path):
    db = dbs[3].path
    allrecs = expected(db)
    since = export_lines(db, "--since", "1200")
    assert since == [r for r in allrecs if r["fetch_time"] > 1200] and 0 < len(since) < len(allrecs)
    assert export_lines(db, "--since", "1970-01-01T00:20:00Z") == since  # 1200 s after the epoch
    st = export_lines(db, "--status", "gone,duplicate", "--max-anchors", "0")
    assert {r["status"] for r in st} == {"gone", "duplicate"}
    dom = export_lines(db, "--domain", "H1.example")
    hosts = {r["url"].split("/")[2] for r in dom}
    assert hosts == {"h1.example", "www.h1.example", "news.h1.example"}
    fit = export_lines(db, "--fit-only")
    assert fit == [r for r in allrecs if r["meta"].get("fit") == "1"]
    rules = tmp_path / "focus.txt"
    rules.write_text("# domain regex\nh2.example  /p/\\d*0$\n")
    focus = export_lines(db, "--fit-only", "--focus", rules)
    want = [r for r in allrecs if r["url"].startswith("http://h2.example/") and r["url"].endswith("0")]
    assert focus == want and want


def test_parquet_has_the_jsonl_records_in_row_groups(dbs, tmp_path):
    import pyarrow.parquet as pq

    db = dbs[3].path
    out = tmp_path / "pages.parquet"
    res = json.loads(cli("export", db, "--format", "parquet", "--out", out, "--json").stdout)
    recs = expected(db)
    assert res["pages"] == len(recs)
    rows = pq.read_table(out).to_pylist()
    for r in rows:
        r["meta"] = dict(r["meta"])
    assert rows == recs
    # Row groups are cut by size: a small budget gives several, all rows kept.
    small = tmp_path / "small.parquet"
    with dbs[3].reader() as r, open(small, "wb") as f:
        n = write_parquet(export_pages(r), f, row_group_bytes=16 << 10)
    meta = pq.ParquetFile(small).metadata
    assert n == len(recs) and meta.num_row_groups > 3 and meta.num_rows == len(recs)


def test_mount_of_host_roots_gives_the_local_output(dbs, tmp_path):
    src = dbs[3].path
    mount = tmp_path / "mnt"
    for j, host in enumerate(["alpha", "beta", "gamma"]):
        d = mount / host / "k3"
        d.mkdir(parents=True)
        shutil.copytree(os.path.join(src, f"section-{j:04d}"), d / f"section-{j:04d}")
    meta = tmp_path / "meta" / "k3"
    meta.mkdir(parents=True)
    for f in ("webdb.json", "CURRENT"):
        shutil.copy(os.path.join(src, f), meta / f)
    shutil.copytree(os.path.join(src, "gen"), meta / "gen")
    assert cli("export", meta, "--mount", mount).stdout == cli("export", src).stdout
    one = cli("export", meta, "--mount", mount, "--section-dir", f"0={mount / 'alpha' / 'k3' / 'section-0000'}")
    assert one.stdout == cli("export", src).stdout


def test_documented_mount_command_reads_a_rack_by_its_db_name(dbs, tmp_path):
    """docs/indexing.md's `webdb export crawl --mount /mnt/rack --out pages.jsonl`, as written,
    on every host's root side by side (each holding the db's identity, CURRENT and gen/ with
    its own sections): DB is the db's name, found under the mount."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "indexing.md"), encoding="utf-8").read()
    line = next(ln for ln in doc.splitlines() if ln.startswith("webdb export crawl --mount /mnt/rack --out"))
    argv = line.split("#")[0].split()[1:]
    src = tmp_path / "src" / "crawl"
    shutil.copytree(dbs[3].path, src)
    mount = tmp_path / "rack"
    for j, host in enumerate(["h0", "h1", "h2"]):
        d = mount / host / "crawl"
        d.mkdir(parents=True)
        for f in ("webdb.json", "CURRENT"):
            shutil.copy(src / f, d / f)
        shutil.copytree(src / "gen", d / "gen")
        shutil.copytree(src / f"section-{j:04d}", d / f"section-{j:04d}")
    work = tmp_path / "work"
    work.mkdir()
    argv = [str(mount) if a == "/mnt/rack" else a for a in argv]
    p = subprocess.run([*WEBDB, *argv], capture_output=True, cwd=work, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    assert (work / "pages.jsonl").read_bytes() == cli("export", src).stdout
    p = cli("export", "nothere", "--mount", mount, check=False)
    assert p.returncode == 2 and b"nothere: no such database directory, nor a copy of it under --mount" in p.stderr


def test_out_is_atomic_and_only_replaces_a_regular_file(dbs, tmp_path):
    db = dbs[1].path
    out = tmp_path / "pages.jsonl"
    out.write_text("old\n")
    cli("export", db, "--out", out)
    assert out.read_bytes() == cli("export", db).stdout
    assert sorted(os.listdir(tmp_path)) == ["pages.jsonl"]  # no temp file left
    # A failure before any record (a bad segment) leaves the old file as it was.
    out.write_text("old\n")
    bad = cli("export", db, "--out", out, "--segments", tmp_path / "nope", check=False)
    assert bad.returncode == 2 and out.read_text() == "old\n"
    d = tmp_path / "adir"
    d.mkdir()
    p = cli("export", db, "--out", d, check=False)
    assert p.returncode == 2 and b"not a regular file" in p.stderr and os.path.isdir(d)
    link = tmp_path / "link"
    link.symlink_to(out)
    p = cli("export", db, "--out", link, check=False)
    assert p.returncode == 2 and os.path.islink(link) and out.read_text() == "old\n"


@pytest.mark.parametrize(
    "args,msg",
    [
        (["{tmp}/missing.db"], "missing.db: no such database directory"),
        (["{db}", "--segments", "{tmp}/noseg"], "noseg: not a segment"),
        (["{db}", "--mount", "{tmp}/nomount"], "nomount: no such directory"),
        (["{db}", "--status", "fetched,bogus"], "unknown status 'bogus'"),
        (["{db}", "--since", "yesterday"], "--since 'yesterday'"),
        (["{db}", "--format", "parquet"], "give --out FILE"),
        (["{db}", "--focus", "{tmp}/r.txt"], "--focus FILE goes with --fit-only"),
        (["{db}", "--fit-only", "--focus", "{tmp}/r.txt"], "r.txt: cannot read focus rules"),
    ],
)
def test_errors_are_one_line_and_exit_2(dbs, tmp_path, args, msg):
    p = cli("export", *(a.format(tmp=tmp_path, db=dbs[1].path) for a in args), check=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and msg in err and "Traceback" not in err and err.count("\n") == 1
    assert p.stdout == b""


def test_memory_is_flat_in_the_number_of_pages(tmp_path):
    """Peak RSS of an export (measured in the child) does not grow with the db: 10x the pages
    and links cost less than a record per page would.

    The child reads its own high-water mark (VmHWM, reset by exec; getrusage's ru_maxrss is
    not: it would carry this process's size at fork)."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("reads VmHWM from /proc (Linux)")
    child = textwrap.dedent(
        """
        import sys, webdb
        from webdb.tools.export import export_pages, write_jsonl
        with webdb.open(sys.argv[1]).reader() as r, open(sys.argv[2], "wb") as f:
            n = write_jsonl(export_pages(r), f)
        hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
        print(n, hwm.split()[1])
        """
    )
    peaks = {}
    for n in (4000, 40000):
        db = gen_db(tmp_path / f"n{n}", 2, n=n, block_size=32768)
        out = subprocess.run(
            [sys.executable, "-c", child, db.path, str(tmp_path / f"n{n}.jsonl")],
            capture_output=True,
            text=True,
            check=True,
        )
        pages, peak_kib = map(int, out.stdout.split())
        assert pages > n // 2
        peaks[n] = peak_kib / 1024
    # 36k more exported pages: a retained record each (~1 KiB) would add 30+ MiB.
    assert peaks[40000] - peaks[4000] < 12, peaks


# ---- the demo crawl ----------------------------------------------------------------------------

needs_demo = pytest.mark.skipif(not all(map(loopback_ok, DEMO_HOSTS)), reason="needs 127.0.0.x addresses")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    db = root / "demo.db"
    cli("demo", "--db", db, "--rounds", "3", "--pages", "60", "--json")
    segs = sorted(str(root / "demo.db.segments" / s) for s in os.listdir(root / "demo.db.segments"))
    return str(db), segs


@needs_demo
def test_demo_crawl_export_and_resplit(demo, tmp_path):
    db, _ = demo
    out = cli("export", db).stdout
    recs = [json.loads(line) for line in out.decode("utf-8").splitlines()]
    assert recs == expected(db)
    assert len(recs) > 60 and any(r["anchors"] for r in recs)
    for k in (1, 3):
        copy = tmp_path / f"k{k}"
        shutil.copytree(db, copy)
        webdb.open(str(copy)).rebalance(k)
        assert cli("export", copy).stdout == out


def latest_parses(segs: list[str]) -> dict[str, list[tuple]]:
    """url → [(fetch_time, segment index, md5 hex, record, part)] over the segments."""
    out: dict[str, list] = defaultdict(list)
    for i, s in enumerate(segs):
        seg = Segment.open(s)
        for part in seg.parts():
            for r in seg.records(part):
                if r.status == Status.FETCHED:
                    out[r.url].append((r.fetch_time, i, r.md5.hex(), r, part, seg))
    return out


@needs_demo
def test_demo_crawl_segment_join(demo, tmp_path):
    db, segs = demo
    out = tmp_path / "joined.jsonl"
    cli("export", db, "--segments", *segs, "--out", out)
    recs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [{k: r[k] for k in expected(db)[0]} for r in recs] == expected(db)
    parses = latest_parses(segs)
    joined = 0
    for rec in recs:
        cands = sorted(parses.get(rec["url"], []), key=lambda c: c[:2])
        same = [c for c in cands if c[2] == rec["md5"]]
        if not cands:
            assert rec["title"] is None and rec["content"] is None
            continue
        _, _, _, fr, part, seg = (same or cands)[-1]
        joined += 1
        assert rec["title"] == fr.parse.title and rec["text"] == fr.parse.text
        assert rec["charset"] == fr.parse.encoding and rec["outlinks"] == len(fr.parse.outlinks)
        loc = rec["content"]
        assert loc["segment"] == seg.path and loc["file"] == f"content/part-{part:05d}.warc.gz"
        resp = read_response(os.path.join(loc["segment"], loc["file"]), loc["offset"], rec["url"])
        assert resp.length == loc["length"] and hashlib.md5(resp.body).hexdigest() == fr.md5.hex()
    assert joined == len(recs)  # every fetched page of the demo has its parse in a segment
    assert not os.listdir(os.path.join(db, "tmp"))  # the sorted index is removed
    # The index sorts with spilled runs too: a tiny budget gives the same records.
    small = cli("export", db, "--segments", *segs, "--sort-mb", "0").stdout
    assert small == out.read_bytes()
    # A writer's recovery empties DB/tmp: an export whose runs are gone says so.
    join = SegmentJoin(segs, str(tmp_path / "sort"), 0)
    assert join._buf.runs  # spilled (the budget is at least 64 KiB)
    shutil.rmtree(join.dir)
    with webdb.open(db).reader() as r, pytest.raises(BadInput, match="sort run of the segment index removed"):
        list(join.join(export_pages(r)))
    join.close()


def test_segment_index_sorts_where_told(dbs, tmp_path):
    seg = Segment.create(tmp_path / "seg")  # a segment that fetched nothing: every field null
    recs = export_lines(dbs[1].path, "--segments", seg.path, "--tmp", tmp_path / "sort", "--max-anchors", "0")
    assert recs and all(r["title"] is None and r["content"] is None for r in recs)
    assert os.listdir(tmp_path / "sort") == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = cli("export", dbs[1].path, "--segments", seg.path, "--tmp", blocker / "sub", check=False)
    err = p.stderr.decode()
    assert p.returncode == 2 and "cannot make the segment index's sort directory" in err and "Traceback" not in err


def test_sections_without_links_or_pages(tmp_path):
    db = webdb.create(str(tmp_path / "db"), sections=3, sync=False)
    assert cli("export", db.path).stdout == b""  # an empty db: no table at all
    with db.writer() as w:
        for i in range(30):
            w.add_page(Page(f"http://a{i}.example/", md5(str(i)), Status.FETCHED, 5))
    with db.reader() as r:
        assert r.num_links == 0
    recs = export_lines(db.path)
    assert [r["url"] for r in recs] == sorted(f"http://a{i}.example/" for i in range(30))
    assert all(r["inlinks"] == 0 and r["anchors"] == [] for r in recs)
