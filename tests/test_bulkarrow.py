"""The bulk load (webdb.tools.bulkarrow), from columns and from records: the records of the
writer batch of the same calls, in the files TableWriter writes from them, byte for byte, with
budgets small enough that every sort spills many runs and merges them in many windows; input its
column checks do not vouch for is refused before anything is written; a kill at any point leaves
the empty db; ``webdb import`` takes the columns of plain TSV dumps."""

from __future__ import annotations

import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_import import KILL_POINTS, TABLES, _cli, _link, _page, by_writer, killed_load, random_calls, raw

import webdb
from webdb import Link, Page
from webdb.core.sections import section_path
from webdb.core.settings import Settings

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")
from webdb.tools import bulkarrow  # noqa: E402
from webdb.tools.bulkarrow import NotColumnar, bulk_load_arrow  # noqa: E402
from webdb.tools.sectionfiles import section_writer  # noqa: E402

SUFFIXES = (".pbu", ".lbu", ".pbm", ".lbm")


def page_table(pages: list[Page]) -> pa.Table:
    return pa.table(
        {
            "url": pa.array([p.url for p in pages], pa.string()),
            "md5": pa.array([p.md5 for p in pages], pa.binary(16)),
            "status": pa.array([int(p.status) for p in pages], pa.int64()),
            "fetch_time": pa.array([p.fetch_time for p in pages], pa.int64()),
            "next_fetch": pa.array([p.next_fetch for p in pages], pa.int64()),
            "retries": pa.array([p.retries for p in pages], pa.int64()),
            "fetch_interval": pa.array([p.fetch_interval for p in pages], pa.int64()),
            "num_outlinks": pa.array([p.num_outlinks for p in pages], pa.int64()),
            "score": pa.array([float(p.score) for p in pages], pa.float64()),
            "next_score": pa.array([float(p.next_score) for p in pages], pa.float64()),
            "meta": pa.array(
                [json.dumps(p.meta, separators=(",", ":"), sort_keys=True).encode() if p.meta else b"" for p in pages],
                pa.binary(),
            ),
        }
    )


def link_tables(links: list[Link], n: int = 97):
    """The links in tables of n rows (a stream, as a reader of a big file yields them)."""
    for i in range(0, len(links), n):
        ch = links[i : i + n]
        yield pa.table(
            {
                "from_id": pa.array([lk.from_id for lk in ch], pa.binary(16)),
                "url": pa.array([lk.url for lk in ch], pa.string()),
                "anchor": pa.array([lk.anchor for lk in ch], pa.string()),
                "domain_id": pa.array([lk.domain_id for lk in ch], pa.int64()),
            }
        )


def files(db) -> dict[str, bytes]:
    out = {}
    for d, _, fs in os.walk(db.path):
        for f in fs:
            if f.endswith(SUFFIXES):
                with open(os.path.join(d, f), "rb") as fh:
                    out[os.path.relpath(os.path.join(d, f), db.path)] = fh.read()
    return out


def reference_files(w, root) -> dict[str, bytes]:
    """The writer batch's records of each table and section written record by record by
    TableWriter, named as a bulk load names its files: what a bulk load must write, byte for
    byte."""
    s = Settings.from_json(w.identity.get("settings") or {})
    out = {}
    with w.reader() as r:
        for t in TABLES:
            for j, tab in enumerate(r.tables[t]):
                items = [] if tab is None else list(tab.items())
                if not items:
                    continue
                os.makedirs(section_path(str(root), j), exist_ok=True)
                tw = section_writer(str(root), 1, t, s, j)
                tw.add_many([k for k, _ in items], [v for _, v in items])
                tw.close()
                with open(tw.path, "rb") as fh:
                    out[os.path.relpath(tw.path, root)] = fh.read()
    return out


def both(base, k: int, pages, links, **s) -> tuple[webdb.WebDB, webdb.WebDB]:
    """The writer batch of the calls (the definition) and the load of their columns; the load
    of the records (``webdb.bulk_load``) checked to write the same files as the columns."""
    w = by_writer(base / "writer", k, pages, links, **s)
    b = webdb.create(str(base / "col"), sections=k, **s)
    m = bulk_load_arrow(b, page_table(pages), link_tables(links))
    assert m.bulk["input"] == "columns"
    c = webdb.create(str(base / "rec"), sections=k, **s)
    assert webdb.bulk_load(c, iter(pages), iter(links)).bulk["input"] == "records"
    assert files(c) == files(b)
    assert c.manifest().tables == b.manifest().tables and c.manifest().edits == b.manifest().edits
    return w, b


def assert_same(w, b) -> None:
    """``b`` holds the records of the writer batch ``w``, in the files TableWriter would write."""
    assert raw(w) == raw(b)
    fb, fr = files(b), reference_files(w, b.path + "-reference")
    assert fb.keys() == fr.keys() and fb == fr  # every table file byte for byte
    mw, mb = w.manifest(), b.manifest()
    for key in ("sections", "status"):
        assert getattr(mw, key) == getattr(mb, key), key
    with b.reader() as r:
        r.check()


@pytest.mark.timeout(600)
def test_three_loaders_draw_the_same_breakpoints(tmp_path):
    """A sample far smaller than the pages: every later page is a draw, and the writer, the
    bulk load and the columnar load draw the same (webdb.core.sections.Reservoir)."""
    pages, links = random_calls(random.Random(7), 400)
    assert len({p.url for p in pages}) > 40
    s = {"block_size": 256, "breakpoint_sample": 8}
    w = by_writer(tmp_path / "w", 4, pages, links, **s)
    a, b = both(tmp_path, 4, pages, links, **s)
    sections = w.manifest().sections
    assert len(sections.breakpoints) == 3
    assert a.manifest().sections == sections == b.manifest().sections
    assert raw(w) == raw(a) == raw(b)


@pytest.fixture
def small_steps(monkeypatch):
    """Runs of a few dozen records, merge windows of a few: many spilled runs, many windows,
    blocks carried across windows and sections."""
    monkeypatch.setattr(bulkarrow, "_RUN_ROWS", 37)
    monkeypatch.setattr(bulkarrow, "_WINDOW_ROWS", 5)
    monkeypatch.setattr(bulkarrow, "_GATHER_BYTES", 300)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("seed", [1, 2])
def test_columns_equal_the_writer(tmp_path, small_steps, k, seed):
    pages, links = random_calls(random.Random(seed * 10 + k), 400)
    said: list[str] = []
    bulk_load_arrow(
        webdb.create(str(tmp_path / "said"), sections=k), page_table(pages), link_tables(links), progress=said.append
    )
    runs = [int(m.split(" in ")[1].split()[0]) for m in said if " runs " in m]
    assert len(runs) == 2 and min(runs) >= 8, said  # pages and links: many spilled runs
    a, b = both(tmp_path, k, pages, links, block_size=256)
    assert_same(a, b)
    assert raw(b)["links_by_url"] and raw(b)["pages_by_md5"]


def test_batches_smaller_than_a_block(tmp_path, monkeypatch):
    monkeypatch.setattr(bulkarrow, "_WINDOW_ROWS", 1)  # every window far smaller than a block
    pages, links = random_calls(random.Random(3), 150)
    a, b = both(tmp_path, 2, pages, links, block_size=512)
    assert_same(a, b)


@pytest.mark.timeout(900)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pages=st.lists(_page, max_size=30),
    links=st.lists(_link, max_size=60),
    k=st.integers(1, 3),
)
def test_columns_equal_the_writer_props(tmp_path_factory, pages, links, k):
    a, b = both(tmp_path_factory.mktemp("p"), k, pages, links, block_size=64, anchor_max=2)
    assert_same(a, b)


def test_md5s_sharing_their_top_bits(tmp_path):
    """Two page md5s with the same first 8 bytes: the md5 ranks come from a hash lookup."""
    m1, m2 = b"\x01" * 8 + b"\x00" * 8, b"\x01" * 8 + b"\xff" * 8
    pages = [
        Page("http://a.test/1", md5=m1, status=webdb.Status.FETCHED, num_outlinks=1),
        Page("http://a.test/2", md5=m2, status=webdb.Status.FETCHED),
        Page("http://a.test/3"),
    ]
    links = [Link(m, f"http://a.test/{i}", f"{i}") for m in (m1, m2, b"\x01" * 16) for i in (1, 2, 3, 4)]
    a, b = both(tmp_path, 2, pages, links, block_size=64)
    assert_same(a, b)
    assert len(raw(b)["links_by_md5"]) == 6


@pytest.mark.parametrize("weak", ["lengths", "constant"])
def test_url_hash_collisions(tmp_path, monkeypatch, weak):
    """A hash that collides: with ``lengths`` pages' urls are told apart by it but links to
    absent urls of the same length hit a page (the byte comparison must refuse them); with
    ``constant`` the pages collide and pyarrow's lookups take over."""
    import numpy as np

    def lengths(urls):
        return np.asarray(pa.compute.binary_length(urls).to_numpy(zero_copy_only=False), np.uint64)

    def constant(urls):
        return np.zeros(len(urls), np.uint64)

    monkeypatch.setattr(bulkarrow, "_url_hashes", lengths if weak == "lengths" else constant)
    pages = [Page("http://a.test/" + "x" * i, num_outlinks=i % 2) for i in range(20)]
    links = [Link(p.md5, "http://a.test/" + c * i, c) for i, p in enumerate(pages) for c in "xy"]
    a, b = both(tmp_path, 2, pages, links, block_size=64)
    assert_same(a, b)
    assert len(raw(b)["links_by_url"]) == 20  # a y-link survives only at i = 0, where it replaces the x-link


@pytest.mark.parametrize(
    "page, what",
    [
        (Page("http://a.test/x y"), "control or space"),
        (Page("nourl"), "scheme"),
        (Page("http://a.test/", score=float("nan")), "NaN"),
        (Page("http://a.test/", status=9), "status"),
    ],
)
def test_refuses_what_it_cannot_vouch_for(tmp_path, page, what):
    db = webdb.create(str(tmp_path / "db"), sections=2)
    with pytest.raises(NotColumnar, match=what):
        bulk_load_arrow(db, page_table([Page("http://ok.test/"), page]), [])
    assert db.manifest().generation == 0 and files(db) == {}
    tmp = os.path.join(db.path, "tmp")
    assert not os.path.isdir(tmp) or not os.listdir(tmp)
    # The record path names the bad page.
    with pytest.raises(webdb.BadInput):
        webdb.bulk_load(db, [Page("http://ok.test/"), page], [])


def test_refuses_a_bad_link_and_a_db_with_pages(tmp_path):
    db = webdb.create(str(tmp_path / "db"))
    p = Page("http://a.test/")
    with pytest.raises(NotColumnar, match="links 1..1"):
        bulk_load_arrow(db, page_table([p]), link_tables([Link(p.md5, "http://a.test/\x7f")]))
    assert db.manifest().generation == 0 and files(db) == {}
    bulk_load_arrow(db, page_table([p]), [])
    with pytest.raises(webdb.BadInput, match="empty db"):
        bulk_load_arrow(db, page_table([Page("http://b.test/")]), [])
    assert db.manifest().generation == 1


CHILD = """
import random, sys
sys.path.insert(0, {tests!r})
from test_bulkarrow import link_tables, page_table
from test_import import random_calls
from webdb.tools.bulkarrow import bulk_load_arrow
pages, links = random_calls(random.Random(7), 200)
bulk_load_arrow(sys.argv[1], page_table(pages), link_tables(links), block_size=256)
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_leaves_the_empty_db(tmp_path, point):
    db = killed_load(tmp_path, point, CHILD)
    # The next load cleans up what the killed one left and completes.
    pages, links = random_calls(random.Random(7), 200)
    bulk_load_arrow(db, page_table(pages), link_tables(links), block_size=256)
    ref = by_writer(tmp_path / "ref", 2, pages, links, block_size=256)
    assert raw(db) == raw(ref)
    names = {f for _, _, fs in os.walk(db.path) for f in fs if f.endswith(SUFFIXES)}
    assert all(f.startswith("00000001-s0.") for f in names)
    tmp = os.path.join(db.path, "tmp")
    assert not os.path.isdir(tmp) or not os.listdir(tmp)


def _plain_calls() -> tuple[list[Page], list[Link]]:
    """Calls whose dump has no escaped cell (the columnar path takes it)."""
    pages, links = random_calls(random.Random(11), 300)
    pages.append(Page("http://b.test/é", meta={"k": "v é"}))
    links.append(Link(pages[-1].md5, pages[0].url, "é" * 3, -7))
    return pages, links


@pytest.mark.timeout(600)
@pytest.mark.parametrize("plain", [True, False])
def test_cli_import_columnar(tmp_path, capsys, monkeypatch, plain):
    monkeypatch.setattr(bulkarrow, "_READ_BYTES", 1000)  # lines cut across reads
    monkeypatch.setattr(bulkarrow, "_RUN_ROWS", 100)
    pages, links = _plain_calls()
    if not plain:
        links.append(Link(pages[0].md5, pages[1].url, "tab\there"))
    a = by_writer(tmp_path / "a", 2, pages, links, block_size=256)
    for t in ("pages", "links"):
        rc, out, _ = _cli(capsys, "read", a.path, "--dump", t)
        assert rc == 0
        (tmp_path / f"{t}.tsv").write_text(out, encoding="utf-8")
    b = webdb.create(str(tmp_path / "b"), sections=3, block_size=256)
    rc, out, err = _cli(capsys, "import", b.path, "--pages", tmp_path / "pages.tsv", "--links", tmp_path / "links.tsv")
    assert rc == 0, err
    assert raw(b) == raw(a)
    assert b.manifest().bulk["input"] == ("columns" if plain else "records")
    assert "webdb import: sort_links" in err if plain else "record by record" in err
    assert "Traceback" not in err


def test_cli_quiet(tmp_path, capsys):
    p = Page("http://a.test/")
    a = by_writer(tmp_path / "a", 1, [p], [Link(p.md5, p.url, "self")])
    for t in ("pages", "links"):
        rc, out, _ = _cli(capsys, "read", a.path, "--dump", t)
        (tmp_path / f"{t}.tsv").write_text(out, encoding="utf-8")
    b = webdb.create(str(tmp_path / "b"))
    rc, out, err = _cli(
        capsys, "import", b.path, "--pages", tmp_path / "pages.tsv", "--links", tmp_path / "links.tsv", "-q"
    )
    assert rc == 0 and err == "" and "imported" in out
    assert {t: len(v) for t, v in raw(b).items()} == dict.fromkeys(TABLES, 1)


def test_unhex16_and_tsv_refuse_what_they_cannot_parse(tmp_path):
    col = pa.array(["00" * 16, "zz" * 16])
    with pytest.raises(NotColumnar):
        bulkarrow.unhex16(col)
    assert bulkarrow.unhex16(pa.array(["0aF1" * 8])).tobytes() == bytes.fromhex("0aF1" * 8)
    f = tmp_path / "x.tsv"
    cols, types = ["x", "y"], {"x": pa.string(), "y": pa.string()}
    f.write_text("a\tb\nc\n")  # a line without its second column
    with pytest.raises(NotColumnar):
        list(bulkarrow.tsv(str(f), cols, types, stream=True))
    # A blank line is a row of empty cells (not skipped): the url and md5 checks refuse it.
    f.write_text("a\tb\n\nc\td\n")
    rows = [r for t in bulkarrow.tsv(str(f), cols, types, stream=True) for r in t.to_pylist()]
    assert rows[1] == {"x": "", "y": ""} and len(rows) == 3
    with pytest.raises(NotColumnar):
        bulkarrow.unhex16(pa.array(["00" * 16, ""]))


@given(
    st.lists(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), unique=True).map(sorted), max_size=6),
    st.integers(1, 5),
)
@settings(max_examples=150, deadline=None)
def test_windows_merge_runs_in_order(runs: list[list[tuple[int, int]]], rows: int) -> None:
    """The windows of a k-way merge (numeric runs of two key columns, url runs): every run
    taken whole and in order, every key of a window below every key of the later ones, equal
    keys of different runs in one window; each window takes at least one row."""
    import numpy as np

    numeric = [
        bulkarrow._Run([np.array([a for a, _ in r], np.uint64), np.array([b for _, b in r], np.uint64)]) for r in runs
    ]
    urls = [bulkarrow._UrlRun(pa.array([f"http://{a}/{b}".encode() for a, b in r], pa.binary())) for r in runs]
    for kind in (numeric, urls):
        windows = []
        pos = [0] * len(runs)
        for take in bulkarrow._windows(kind, rows):
            assert [lo for lo, _ in take] == pos and sum(hi - lo for lo, hi in take) > 0
            pos = [hi for _, hi in take]
            windows.append(sorted(k for r, (lo, hi) in zip(runs, take) for k in r[lo:hi]))
        assert pos == [len(r) for r in runs]
        assert [k for w in windows for k in w] == sorted(k for r in runs for k in r)
        for a, b in zip(windows, windows[1:]):
            assert a[-1] < b[0]


@given(st.lists(st.integers(0, 40), max_size=300), st.sampled_from([41, 1 << 40, 1 << 62]))
@settings(max_examples=60, deadline=None)
def test_stable_argsort_is_numpys_stable_argsort(keys: list[int], bound: int) -> None:
    """The packed sort (small bounds) and the merge sort it falls back to (keys and positions
    beyond 64 bits) both give np.argsort(kind="stable"): ties keep their order."""
    import numpy as np

    k = np.array(keys, np.int64)
    o = np.argsort(k, kind="stable")
    assert bulkarrow._stable_argsort(k, bound).tolist() == o.tolist()
    # The last position of each run of equal keys, in sorted order (the last call wins).
    want = [int(o[i]) for i in range(len(o)) if i == len(o) - 1 or k[o[i + 1]] != k[o[i]]]
    assert bulkarrow._last_of_runs(k.copy(), bound).tolist() == want
    step = bulkarrow._STEP
    try:
        bulkarrow._STEP = 3  # slices of 3: every slice boundary of the loops
        assert bulkarrow._last_of_runs(k.copy(), bound).tolist() == want
        assert bulkarrow._stable_argsort(k, bound).tolist() == o.tolist()
    finally:
        bulkarrow._STEP = step


@pytest.mark.parametrize("seed", [1, 2])
def test_compiled_and_pure_blocks_are_the_same(tmp_path, small_steps, monkeypatch, seed):
    """The blocks gathered and the urls hashed by _blockc (gather_blocks, hash_values) and by
    their pyarrow/numpy fallback: the same files byte for byte (and both equal bulk_load)."""
    if bulkarrow._c is None:
        pytest.skip("the compiled codec is off (not built, or WEBDB_PURE_PYTHON=1)")
    pages, links = random_calls(random.Random(seed), 300)
    a, b = both(tmp_path / "c", 2, pages, links, block_size=200)
    assert_same(a, b)
    monkeypatch.setattr(bulkarrow, "_c", None)
    assert bulkarrow._gatherer() is bulkarrow._gather_py
    _, p = both(tmp_path / "p", 2, pages, links, block_size=200)
    assert files(p) == files(b) and raw(p) == raw(b)


@given(
    st.lists(st.binary(max_size=20), min_size=1, max_size=40),
    st.integers(1, 3),
    st.randoms(use_true_random=False),
)
@settings(max_examples=80, deadline=None)
def test_gather_blocks_and_hash_values_match_python(values: list[bytes], width: int, rnd) -> None:
    """``_blockc.gather_blocks`` against ``_gather_py`` and ``hash_values`` against numpy, on
    random parts (a variable one taken by index, a fixed one in order), key lengths and cuts;
    rows, offsets and key lengths outside the parts are refused."""
    import numpy as np

    c = bulkarrow._c
    if c is None:
        pytest.skip("the compiled codec is off (not built, or WEBDB_PURE_PYTHON=1)")
    arr = pa.array(values, pa.large_binary())
    n = rnd.randrange(1, 30)
    idx = np.array([rnd.randrange(len(values)) for _ in range(n)], np.int64)
    fixed = np.frombuffer(bytes(rnd.randrange(256) for _ in range(n * width)), np.uint8).reshape(n, width)
    parts = [bulkarrow._var(arr, idx), bulkarrow._fixed(fixed)]
    rlen = bulkarrow._part_lens(parts[0], n) + width
    klen = np.array([rnd.randrange(int(x) + 1) for x in rlen], np.int64)
    ends = np.array(sorted({rnd.randrange(1, n + 1) for _ in range(3)} | {n}), np.int64)
    assert c.gather_blocks(parts, klen, ends) == bulkarrow._gather_py(parts, klen, ends)
    offs = parts[0][1]
    assert np.frombuffer(c.hash_values(arr.buffers()[2] or b"", offs), np.uint64).tolist() == [
        int(x) for x in _numpy_hashes(arr)
    ]
    with pytest.raises(ValueError):
        c.gather_blocks([bulkarrow._var(arr, np.full(n, len(values), np.int64))], klen * 0, ends)
    with pytest.raises(ValueError):
        c.gather_blocks(parts, rlen + 1, ends)  # a key longer than its record
    with pytest.raises(ValueError):
        c.hash_values(b"", offs + 1)  # past the end of the data


def _numpy_hashes(arr):
    saved = bulkarrow._c
    try:
        bulkarrow._c = None
        return bulkarrow._url_hashes(arr)
    finally:
        bulkarrow._c = saved


@pytest.mark.timeout(600)
def test_a_bad_link_while_the_page_tables_are_written(tmp_path, monkeypatch):
    """The page tables are written before the links are read: a link refused in a late chunk
    aborts them, and nothing is left (no table file, no tmp)."""
    monkeypatch.setattr(bulkarrow, "_RUN_ROWS", 40)
    pages, links = random_calls(random.Random(5), 600)
    bad = Link(pages[0].md5, "http://a.test/\x7f")
    db = webdb.create(str(tmp_path / "db"), block_size=64)
    with pytest.raises(NotColumnar, match="links"):
        bulk_load_arrow(db, page_table(pages), link_tables([*links, bad], n=50))
    assert db.manifest().generation == 0 and files(db) == {}
    tmp = os.path.join(db.path, "tmp")
    assert not os.path.isdir(tmp) or not os.listdir(tmp)
    m = bulk_load_arrow(db, page_table(pages), link_tables(links))  # and the db loads afterwards
    assert m.generation == 1


@given(st.binary(max_size=40) | st.text("0123456789abcdefABCDEF g", max_size=40).map(str.encode))
@settings(max_examples=200, deadline=None)
def test_unhex_and_has_control_match_python(data: bytes) -> None:
    """``_blockc.unhex`` decodes what ``bytes.fromhex`` decodes without whitespace, and refuses
    the rest; ``has_control`` is the numpy check of _check_urls."""
    import numpy as np

    c = bulkarrow._c
    if c is None:
        pytest.skip("the compiled codec is off (not built, or WEBDB_PURE_PYTHON=1)")
    try:
        want = bytes.fromhex(data.decode("ascii")) if not set(data) & set(b" \t\n\r\x0b\x0c") else None
    except (ValueError, UnicodeDecodeError):
        want = None
    assert c.unhex(data) == want
    u8 = np.frombuffer(data, np.uint8)
    assert c.has_control(data) == bool(len(u8) and (u8.min() <= 0x20 or (u8 == 0x7F).any()))
