"""``EditLog.apply_fetch_block`` (webdb.writer.columns) against the calls it stands for: the same
edit files byte for byte — records, sequence numbers, spills — with numpy and without, and a
bad row or link refused exactly as the calls refuse it."""

from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path

import pytest

import webdb
from webdb.core.sections import Sections
from webdb.core.settings import DEFAULTS
from webdb.writer import columns, kernels
from webdb.writer.columns import FetchBlock
from webdb.writer.engine import stage_job
from webdb.writer.writer import EditLog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import roundtsv  # noqa: E402

np = pytest.importorskip("numpy")

SECS = Sections(2, [b"http://m"])


def block(rng: random.Random, rows: int) -> FetchBlock:
    """Rows of fetches, some failed, with outlinks: short and long anchors, non-ASCII text."""
    urls, fetched, md5s, times, nlinks = [], [], [], [], []
    data = bytearray()
    us, ue, as_, ae = [], [], [], []
    words = ["a", "home", "ü", "新闻", "x" * 40, "é" * 70]
    for i in range(rows):
        urls.append(f"http://{rng.choice('abmxz')}.com/{i}/{rng.random()}")
        times.append(rng.randrange(1, 1 << 40))
        ok = rng.random() < 0.85
        fetched.append(ok)
        md5s.append(rng.randbytes(16) if ok else b"")
        m = rng.randrange(0, 40) if ok else 0
        nlinks.append(m)
        for _ in range(m):
            u = f"http://{rng.choice('abmxz')}{rng.randrange(50)}.com/{rng.choice(words)}".encode()
            a = " ".join(rng.choice(words) for _ in range(rng.randrange(0, 5))).encode()
            us.append(len(data))
            data += u
            ue.append(len(data))
            data += b"\x1f"
            as_.append(len(data))
            data += a
            ae.append(len(data))
            data += b"\x1e"
    return FetchBlock(urls, fetched, md5s, times, nlinks, bytes(data), us, ue, as_, ae)


def edit_files(tmp: Path, name: str, apply) -> dict[str, str]:
    """Digests of the edit files an EditLog routes (two sections, a small memory budget so
    that the sort buffers spill many times) after ``apply(log)``."""
    s = DEFAULTS.replace(memory_mb=1, anchor_max=60)
    job = stage_job(str(tmp / name / "db"), "B", 1, SECS, s, str(tmp / name / "tmp"), 1)
    job.outbox = str(tmp / name / "out")
    log = EditLog(s, SECS, str(tmp / name / "api"), producer=1)
    log.route_as_you_go(job)
    apply(log)
    log.route(job)
    out = {}
    for d, _, fs in os.walk(job.outbox):
        for f in fs:
            p = os.path.join(d, f)
            out[os.path.relpath(p, job.outbox)] = hashlib.sha1(Path(p).read_bytes()).hexdigest()
    return out


def by_calls(blocks, **kw):
    def apply(log: EditLog) -> None:
        for b in blocks:
            for r, links in b.calls():
                log.apply_fetch(r)
                if links is not None:
                    log.add_outlinks(r.md5, links, next_fetch=r.fetch_time, **kw)

    return apply


def by_blocks(blocks, **kw):
    def apply(log: EditLog) -> None:
        for b in blocks:
            log.apply_fetch_block(b, **kw)

    return apply


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_block_edits_equal_the_calls(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    blocks = [block(rng, rng.randrange(0, 120)) for _ in range(8)]
    kw = {"fetch_interval": 1234, "score": 0.5, "domain_id": -7}
    want = edit_files(tmp_path, "calls", by_calls(blocks, **kw))
    assert sum(1 for n in want if "/st1/" in n) > 4 and sum(1 for n in want if "/st3/" in n) > 4  # spills
    assert edit_files(tmp_path, "numpy", by_blocks(blocks, **kw)) == want
    monkeypatch.setattr(kernels, "stagesc", None)  # numpy, without the compiled helpers (their references)
    assert edit_files(tmp_path, "numpy-python", by_blocks(blocks, **kw)) == want
    monkeypatch.setattr(columns, "NUMPY", False)  # the pure-Python path
    assert edit_files(tmp_path, "python", by_blocks(blocks, **kw)) == want


@pytest.mark.timeout(120)
def test_a_bad_link_url_is_named_and_what_came_before_it_stays(tmp_path: Path) -> None:
    rng = random.Random(5)
    good = block(rng, 30)
    b = block(rng, 30)
    i = next(i for i, m in enumerate(b.nlinks) if m > 2)
    bad = sum(b.nlinks[:i]) + 1
    d = bytearray(b.data)
    d[b.url_start[bad] + 9] = 0x20  # a space inside a link url
    b.data = bytes(d)
    url = b.data[b.url_start[bad] : b.url_end[bad]].decode()

    def apply(how):
        def run(log: EditLog) -> None:
            how([good])(log)
            with pytest.raises(webdb.BadInput, match="control or space"):
                how([b])(log)

        return run

    assert edit_files(tmp_path, "numpy", apply(by_blocks)) == edit_files(tmp_path, "calls", apply(by_calls))
    assert " " in url


@pytest.mark.timeout(120)
def test_offsets_outside_the_data_go_call_by_call(tmp_path: Path) -> None:
    """A link whose offsets fall outside ``data``: the block path declines and the calls (which
    slice as Python does) name the link, after the same edits as the calls."""
    rng = random.Random(6)
    b = block(rng, 30)
    bad = next(i for i, m in enumerate(b.nlinks) if m)
    first = sum(b.nlinks[:bad])
    b.url_end = list(b.url_end)
    b.url_end[first] = len(b.data) + 5  # the url runs into its anchor (0x1f): refused

    def apply(how):
        def run(log: EditLog) -> None:
            with pytest.raises(webdb.BadInput):
                how([b])(log)

        return run

    assert edit_files(tmp_path, "numpy", apply(by_blocks)) == edit_files(tmp_path, "calls", apply(by_calls))


@pytest.mark.timeout(120)
def test_round_tsv_blocks_equal_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/roundtsv.py a block at a time and line by line: the same edit files; a bad line
    is named by its line number either way."""
    rng = random.Random(9)
    lines = []
    for b in [block(rng, 200)]:
        for r, links in b.calls():
            out = "\x1e".join(f"{u}\x1f{a}" for u, a in links or [])
            lines.append(
                f"{r.url}\t{'1' if links is not None else '0'}\t{(r.md5 or b'').hex()}\t{r.fetch_time}\t{out}\n"
            )
    path = tmp_path / "round.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    monkeypatch.setattr(roundtsv, "BLOCK_BYTES", 2000)
    blocks = edit_files(tmp_path, "blocks", lambda log: roundtsv.apply_round_tsv(log, [str(path)], share=[0, 1]))
    monkeypatch.setattr(roundtsv, "np", None)
    monkeypatch.setattr(columns, "NUMPY", False)
    assert edit_files(tmp_path, "lines", lambda log: roundtsv.apply_round_tsv(log, [str(path)], share=[0, 1])) == blocks
    monkeypatch.undo()
    monkeypatch.setattr(roundtsv, "BLOCK_BYTES", 2000)
    path.write_text("".join(lines[:57]) + "http://q.com/\t1\tnot-hex\t5\t\n" + "".join(lines[57:]), encoding="utf-8")
    with pytest.raises(webdb.BadInput, match=f"{path}:58: not a round.tsv line"):
        edit_files(tmp_path, "bad", lambda log: roundtsv.apply_round_tsv(log, [str(path)]))


@pytest.mark.timeout(120)
def test_a_db_without_breakpoints_samples_every_url_as_the_calls_do(tmp_path: Path) -> None:
    """Before the first load of a k-section db the writer samples URLs (the breakpoints come
    from the sample): a block then goes call by call, so the sample is the calls' own."""
    rng = random.Random(11)
    blocks = [block(rng, 40) for _ in range(3)]
    s = DEFAULTS.replace(breakpoint_sample=50)
    samples = []
    for how in (by_calls(blocks), by_blocks(blocks)):
        log = EditLog(s, Sections(2), str(tmp_path / f"api{len(samples)}"))
        how(log)
        samples.append((log.sample(), log.edits))
        log.discard()
    assert samples[0] == samples[1] and len(samples[0][0]) == 50
