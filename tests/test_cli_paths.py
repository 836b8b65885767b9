"""Every subcommand's path arguments given a missing path, a path of the wrong kind (a file
where a folder is needed and the reverse), an unusable path (under a file: the tests run as
root, which reads files whatever their mode, so "unreadable" is made this way) and /proc
paths: exit 2, one line on stderr naming the path, no traceback, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import webdb
from webdb.cli.main import COMMANDS

MISSING = "missing"  # a path whose folder does not exist either
FILE = "file"  # an existing file
DIR = "dir"  # an existing (non-empty) directory
UNDER_FILE = "under-file"  # a path below a file: ENOTDIR for every use
PROC = "proc"  # /proc: a file that cannot be replaced, a folder that cannot hold files

INPUT_FILE = (MISSING, DIR, UNDER_FILE)  # a file the command reads
INPUT_DIR = (MISSING, FILE, UNDER_FILE)  # a db or segment the command reads
CREATED_DIR = (FILE, UNDER_FILE, PROC)  # a db or folder made if missing
OUTPUT_FILE = (MISSING, DIR, UNDER_FILE, PROC)  # a file the command writes


def bad_path(tmp: Path, kind: str) -> str:
    return {
        MISSING: str(tmp / "no-such-folder" / "x"),
        FILE: str(tmp / "a-file"),
        DIR: str(tmp / "a-dir"),
        UNDER_FILE: str(tmp / "a-file" / "x"),
        PROC: "/proc/self/x" if kind == PROC else "",
    }[kind]


# (command, argument, kinds, argv builder given the bad path)
CASES: list[tuple[str, str, tuple[str, ...], Callable[[str], list[str]]]] = [
    ("create", "DB", CREATED_DIR, lambda p: ["create", p]),
    ("create", "--hosts", INPUT_FILE, lambda p: ["create", "--hosts", p, "crawl"]),
    ("read", "DB", INPUT_DIR, lambda p: ["read", p, "--stats"]),
    ("read", "--mount", INPUT_DIR, lambda p: ["read", "db", "--stats", "--mount", p]),
    ("check", "DB", INPUT_DIR, lambda p: ["check", p]),
    ("inject", "DB", CREATED_DIR, lambda p: ["inject", p, "seeds.txt"]),
    ("inject", "FILE", INPUT_FILE, lambda p: ["inject", "db", p]),
    ("inject", "--filter", INPUT_FILE, lambda p: ["inject", "db", "seeds.txt", "--filter", p]),
    ("inject", "--www-rules", INPUT_FILE, lambda p: ["inject", "db", "seeds.txt", "--www-rules", p]),
    ("inject", "--focus-rules", INPUT_FILE, lambda p: ["inject", "db", "seeds.txt", "--focus-rules", p]),
    ("inject", "--hosts", INPUT_FILE, lambda p: ["inject", "--hosts", p, "crawl", "seeds.txt"]),
    ("generate", "DB", INPUT_DIR, lambda p: ["generate", p, "segs"]),
    ("generate", "SEGMENTS_DIR", CREATED_DIR, lambda p: ["generate", "db", p]),
    ("generate", "--filter", INPUT_FILE, lambda p: ["generate", "db", "segs", "--filter", p]),
    ("generate", "--hosts", INPUT_FILE, lambda p: ["generate", "--hosts", p, "crawl", "segs"]),
    ("fetch", "SEGMENT", INPUT_DIR, lambda p: ["fetch", p]),
    ("update", "DB", INPUT_DIR, lambda p: ["update", p, "a-dir"]),
    ("update", "INPUT", INPUT_DIR, lambda p: ["update", "db", p]),
    ("update", "--hosts", INPUT_FILE, lambda p: ["update", "--hosts", p, "crawl", "x"]),
    ("crawl", "DB", CREATED_DIR, lambda p: ["crawl", p, "--seeds", "seeds.txt", "--rounds", "0"]),
    ("crawl", "--seeds", INPUT_FILE, lambda p: ["crawl", "db", "--seeds", p, "--rounds", "0"]),
    ("crawl", "--segments", CREATED_DIR, lambda p: ["crawl", "db", "--segments", p, "--rounds", "0"]),
    ("crawl", "--filter", INPUT_FILE, lambda p: ["crawl", "db", "--filter", p, "--rounds", "0"]),
    ("demo", "--db", CREATED_DIR, lambda p: ["demo", "--db", p, "--rounds", "1", "--pages", "5"]),
    ("rebalance", "DB", INPUT_DIR, lambda p: ["rebalance", p, "--sections", "2"]),
    ("compact", "DB", INPUT_DIR, lambda p: ["compact", p]),
    ("rank", "DB", INPUT_DIR, lambda p: ["rank", p]),
    ("dedup", "DB", INPUT_DIR, lambda p: ["dedup", p]),
    ("prefixes", "DB", INPUT_DIR, lambda p: ["prefixes", p]),
    ("filters", "DB", INPUT_DIR, lambda p: ["filters", p, "--out", "out.txt"]),
    ("filters", "--out", OUTPUT_FILE, lambda p: ["filters", "db", "--out", p]),
    ("filters", "--disabled", INPUT_FILE, lambda p: ["filters", "db", "--out", "out.txt", "--disabled", p]),
    ("import", "DB", INPUT_DIR, lambda p: ["import", p, "--pages", "a-file"]),
    ("import", "--pages", INPUT_FILE, lambda p: ["import", "db", "--pages", p]),
    ("import", "--links", INPUT_FILE, lambda p: ["import", "db", "--pages", "a-file", "--links", p]),
    ("unlock", "DB", INPUT_DIR, lambda p: ["unlock", p]),
    ("recover", "DB", INPUT_DIR, lambda p: ["recover", p]),
    ("recover", "DB --to", INPUT_DIR, lambda p: ["recover", p, "--to", "0"]),
    ("export", "DB", INPUT_DIR, lambda p: ["export", p]),
    ("export", "--mount", INPUT_DIR, lambda p: ["export", "db", "--mount", p]),
    ("export", "--segments", INPUT_DIR, lambda p: ["export", "db", "--segments", p]),
    ("export", "--out", OUTPUT_FILE, lambda p: ["export", "db", "--out", p]),
    ("segment", "upgrade SEGMENT", INPUT_DIR, lambda p: ["segment", "upgrade", p]),
    ("serve", "DB", INPUT_DIR, lambda p: ["serve", p, "--port", "0"]),
    ("serve", "--mount", INPUT_DIR, lambda p: ["serve", "db", "--port", "0", "--mount", p]),
]


def test_every_subcommand_has_cases() -> None:
    assert {c for c, *_ in CASES} == set(COMMANDS)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    t = tmp_path_factory.mktemp("template")
    with webdb.create(str(t / "db"), sync=False).writer() as w:
        w.add_page(webdb.Page("http://a.example/"))
    (t / "seeds.txt").write_text("http://b.example/\n")
    (t / "a-file").write_text("+.\n")
    (t / "a-dir").mkdir()
    (t / "a-dir" / "keep").write_text("")
    return t


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("command", "arg", "kinds", "argv"), CASES, ids=[f"{c}-{a}" for c, a, *_ in CASES])
def test_bad_paths_are_one_line_and_exit_2(
    command: str, arg: str, kinds: tuple[str, ...], argv: Callable[[str], list[str]], template: Path, tmp_path: Path
) -> None:
    for kind in kinds:
        work = tmp_path / kind
        subprocess.run(["cp", "-a", str(template), str(work)], check=True)
        before = listing(work)
        path = bad_path(work, kind)
        p = subprocess.run(
            [sys.executable, "-m", "webdb.cli.main", *argv(path)],
            capture_output=True,
            text=True,
            cwd=work,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, WEBDB_FAULTS=""),
        )
        err = p.stderr.strip()
        what = f"webdb {' '.join(argv(path))} ({kind})"
        assert p.returncode == 2, f"{what}: exit {p.returncode}\n{p.stdout}{p.stderr}"
        assert "Traceback" not in err, f"{what}:\n{err}"
        assert len(err.splitlines()) == 1, f"{what}: not one line:\n{err}"
        assert err.startswith(f"webdb {command}: error:"), f"{what}: {err}"
        assert path in err or os.path.abspath(os.path.join(work, path)) in err, f"{what}: path not named: {err}"
        left = {x for x in listing(work) - before if not x.startswith("db/")}
        assert not left, f"{what}: left {sorted(left)}"
