"""The suite's own rules, run on a small throwaway session: one line per finished test file
instead of dots, and under CI=true a skipped test fails the run (tests/progress.py), with and
without pytest-xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SESSION = {
    "test_one.py": "import pytest\n\n\ndef test_a():\n    pass\n\n\ndef test_b():\n    pytest.skip('no frobnicator')\n",
    "test_two.py": "def test_c():\n    pass\n\n\ndef test_d():\n    assert 1 == 2\n",
}


def session(tmp_path: Path, ci: bool, *args: str) -> subprocess.CompletedProcess:
    for name, text in SESSION.items():
        (tmp_path / name).write_text(text)
    env = {
        k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS") and not k.startswith("PYTEST_XDIST")
    }
    env["PYTHONPATH"] = str(HERE)
    if ci:
        env["CI"] = "true"
    argv = [sys.executable, "-m", "pytest", "-p", "progress", "-p", "no:cacheprovider", "-c", os.devnull]
    argv += ["--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "tmp"), *args, str(tmp_path)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_one_line_per_file_and_skips_fail_under_ci(tmp_path: Path, xdist: list[str]) -> None:
    p = session(tmp_path, True, "-q", *xdist)
    lines = p.stdout.splitlines()
    assert any(ln.startswith("test_one.py: 1 passed, 1 skipped (") for ln in lines), p.stdout
    assert any(ln.startswith("test_two.py: 1 passed, 1 failed (") for ln in lines), p.stdout
    assert not any(set(ln.strip()) <= set(".sF") for ln in lines if ln.strip()), p.stdout  # no line of letters
    assert p.returncode == 1
    assert "skipped under CI=true" in p.stdout and "test_one.py::test_b: Skipped: no frobnicator" in p.stdout
    assert "FAILED test_two.py::test_d - assert 1 == 2" in p.stdout, p.stdout  # the summary names it


def test_a_skip_fails_only_under_ci(tmp_path: Path) -> None:
    deselect = ["--deselect", "test_two.py::test_d"]
    p = session(tmp_path, False, *deselect)
    assert p.returncode == 0 and "skipped under CI=true" not in p.stdout, p.stdout
    p = session(tmp_path, True, *deselect)
    assert p.returncode == 1 and "SKIPPED test_one.py::test_b: Skipped: no frobnicator" in p.stdout, p.stdout
