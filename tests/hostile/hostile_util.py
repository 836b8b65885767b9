"""Shared by the hostile-input suite: run the CLI, check the documented error."""

from __future__ import annotations

import subprocess
import sys

WEBDB = [sys.executable, "-m", "webdb.cli.main"]


def cli(*args: str, cwd: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*WEBDB, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def assert_error(out: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit status 2, one error line naming the input (every fragment in it), no traceback."""
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr  # reported once
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]
