"""Paths an operator or a hostile user can hand to webdb — a full disk, symlink loops, /proc,
read-only locations, a stray folder in the db, a FIFO in place of a file — each ends in one
clear error naming the path (CLI: exit 2, no traceback), and the db stays at its old state."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from dbutil import make_db, snapshot

import webdb
from webdb import DiskFull, Page
from webdb.errors import WebDBError


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webdb.cli.main", *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 2 MiB tmpfs (the way tests/test_ndfs_ssh.py makes one): the suite runs as root."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    assert p.returncode == 0, f"mounting a tmpfs needs root: {p.stderr}"
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def fill(db, n: int = 40000) -> None:
    with db.writer() as w:
        for i in range(n):
            w.add_page(Page(f"http://full{i % 97}.example/{'x' * 40}/{i}"))


@pytest.mark.timeout(300)
def test_disk_full_api_raises_diskfull_and_keeps_the_old_state(tiny_fs):
    db = make_db(tiny_fs / "db", sync=False)
    before = snapshot(db)
    with pytest.raises(DiskFull) as e:
        fill(db)
    err = e.value
    assert err.host and str(tiny_fs) in err.path and err.needed > 0 and err.free is not None
    assert "no space left" in str(err) and err.path in str(err)
    db = webdb.open(str(tiny_fs / "db"))
    assert snapshot(db) == before
    with db.reader() as r:
        r.check()
    assert not os.listdir(tiny_fs / "db" / "tmp") if (tiny_fs / "db" / "tmp").exists() else True


@pytest.mark.timeout(300)
def test_disk_full_cli_exit_2(tiny_fs, tmp_path):
    make_db(tiny_fs / "db", sync=False)
    before = snapshot(webdb.open(str(tiny_fs / "db")))
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://seed{i % 89}.example/{'y' * 40}/{i}\n" for i in range(40000)))
    p = cli("inject", tiny_fs / "db", seeds)
    assert p.returncode == 2, p.stderr
    assert "no space left" in p.stderr and str(tiny_fs) in p.stderr and "Traceback" not in p.stderr
    assert snapshot(webdb.open(str(tiny_fs / "db"))) == before


def _fill_up(path) -> None:
    """Write ``path`` until the file system has no page left."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e


@pytest.mark.timeout(300)
def test_disk_full_taking_the_writer_lock_names_it_and_lets_go(tiny_fs, tmp_path):
    """No room for the lock's holder line: DiskFull naming DB/LOCK, and the flock is let go,
    so once space is freed the same process writes again."""
    db = make_db(tiny_fs / "db", sync=False)
    before = snapshot(db)
    _fill_up(tiny_fs / "filler")
    with pytest.raises(DiskFull, match=f"{tiny_fs / 'db' / 'LOCK'}: no space left") as e:
        with db.writer() as w:
            w.add_page(Page("http://after.example/"))
    assert e.value.path == str(tiny_fs / "db" / "LOCK")
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("http://seed.example/\n")
    p = cli("inject", tiny_fs / "db", seeds)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "LOCK: no space left" in p.stderr, p.stderr
    os.remove(tiny_fs / "filler")
    with db.writer() as w:  # the same process: its failed attempt holds nothing
        w.add_page(Page("http://after.example/"))
    assert {p.url for p in snapshot(db)["pages"]} == {p.url for p in before["pages"]} | {"http://after.example/"}


def test_symlink_loop_proc_and_fifo_paths(tmp_path):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (loop, "/proc/self", "/proc/self/status", fifo, tmp_path / "missing"):
        with pytest.raises(WebDBError, match=str(path)):
            webdb.open(str(path))
        p = cli("read", path, "--stats")
        assert p.returncode == 2 and str(path) in p.stderr and "Traceback" not in p.stderr, p.stderr
    for path in (loop / "db", "/proc/self/db", fifo / "db"):
        with pytest.raises(WebDBError):
            webdb.create(str(path))
        p = cli("create", path)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr


def test_fifo_in_place_of_small_files_does_not_hang(tmp_path):
    make_db(tmp_path / "db")
    for name in ("CURRENT", "webdb.json"):
        f = tmp_path / "db" / name
        good = f.read_bytes()
        f.unlink()
        os.mkfifo(f)
        with pytest.raises(WebDBError, match=name):
            webdb.open(str(tmp_path / "db")).reader()
        f.unlink()
        f.write_bytes(good)


def test_read_only_mount(tmp_path):
    """A read-only file system (a bind mount remounted ro): readers work, a writer says why."""
    db = make_db(tmp_path / "db")
    before = snapshot(db)
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "--bind", str(tmp_path / "db"), str(mnt)], capture_output=True).returncode:
        # Not root: a read-only mode is read-only for us (root writes through modes, hence the mount).
        os.chmod(tmp_path / "db", 0o555)
        try:
            with pytest.raises(WebDBError, match=str(tmp_path / "db")):
                with db.writer() as w:
                    w.add_page(Page("http://ro.example/"))
        finally:
            os.chmod(tmp_path / "db", 0o755)
        assert snapshot(db) == before
        return
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], check=True, capture_output=True)
        ro = webdb.open(str(mnt))
        assert snapshot(ro) == before
        with pytest.raises(WebDBError, match=str(mnt)):
            ro.writer()
        p = cli("inject", mnt, tmp_path / "nothing.txt")
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_stray_section_folder(tmp_path):
    db = make_db(tmp_path / "db")
    (tmp_path / "db" / "section-foo").mkdir()
    with pytest.raises(WebDBError, match="section-foo"):
        db.writer()
    p = cli("check", tmp_path / "db")
    assert p.returncode in (1, 2) and "section-foo" in (p.stdout + p.stderr) and "Traceback" not in p.stderr
