"""The whole tree is `ruff check` and `ruff format --check` clean, with the ruff pinned in
setup.py's test extras (another version may format differently)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_ruff_is_the_pinned_version() -> None:
    pin = re.search(r'"ruff==([^"]+)"', (ROOT / "setup.py").read_text())
    assert pin, "setup.py's test extras pin ruff (ruff==X.Y.Z)"
    p = ruff("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["ruff", pin.group(1)], f"{p.stdout.strip()}, but setup.py pins {pin.group(1)}"


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_clean(args: list[str]) -> None:
    p = ruff(*args, "--no-cache")
    assert p.returncode == 0, (
        f"`ruff {' '.join(args)}` is not clean (fix with `ruff format` / `ruff check --fix`):\n{p.stdout}{p.stderr}"
    )
