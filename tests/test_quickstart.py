"""The README's two commands from a clean clone, with a python that is not the one running the
tests: the system ``/usr/bin/python3`` (Debian's, PEP 668 in force, no venv active) and a python
from a foreign virtualenv that is active (``VIRTUAL_ENV`` and PATH).  ``make demo`` must crawl the
demo site and check the db; ``make test`` must install and run the suite (a small selection here,
through ``PYTEST_ARGS``, so the suite does not run itself).  Both build the clone's own ``.venv``
and never install with ``--user`` or ``--break-system-packages``, nor into the active venv.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"
# What the clone's inner `make test` runs: a quick file, so the suite does not run itself.
INNER_TESTS = "tests/test_tables.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"needs a system python at {SYSTEM_PYTHON}"),
]


def _env(path: str, virtual_env: Path | None = None) -> dict[str, str]:
    """A login-like environment: this user's HOME (and pip config), no venv unless given, no
    make or python variables inherited from the run of the suite itself."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST_")}
    env["PATH"] = path
    if virtual_env is not None:
        env["VIRTUAL_ENV"] = str(virtual_env)
    return env


def _clone(dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True, capture_output=True, timeout=120)
    assert not (dest / ".venv").exists()
    return dest


def _make(clone: Path, env: dict[str, str], *args: str) -> str:
    p = subprocess.run(["make", *args], cwd=clone, env=env, capture_output=True, text=True, timeout=1500)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"`make {' '.join(args)}` in {clone} exited {p.returncode}:\n{out[-4000:]}"
    assert "--user" not in out and "--break-system-packages" not in out, out[-4000:]
    return p.stdout


def _two_commands(clone: Path, env: dict[str, str]) -> None:
    demo = _make(clone, env, "demo")
    m = re.search(r"fetched ([\d,]+) of the ([\d,]+) HTML pages a polite crawler can reach", demo)
    assert m and m.group(1) == m.group(2) and int(m.group(2).replace(",", "")) > 300, demo[-3000:]
    assert any(ln.startswith("db stats: ") and "check ok" in ln for ln in demo.splitlines()), demo[-3000:]
    test = _make(clone, env, "test", f"PYTEST_ARGS=-q -p no:cacheprovider {INNER_TESTS}")
    assert re.search(rf"{re.escape(INNER_TESTS)}: \d+ passed", test) and " failed" not in test, test[-3000:]
    # The package lives in the clone's own venv, imported from the clone.
    p = subprocess.run(
        [str(clone / ".venv/bin/python"), "-c", "import webdb, lz4; print(webdb.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=clone.parent,
        timeout=60,
    )
    assert p.returncode == 0 and p.stdout.strip().startswith(str(clone)), p.stdout + p.stderr


def _cannot_import_webdb(python: str, env: dict[str, str], cwd: Path) -> bool:
    p = subprocess.run([python, "-c", "import webdb"], capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    return p.returncode != 0 and "No module named 'webdb'" in p.stderr


@pytest.mark.timeout(1800)
def test_readme_commands_with_the_system_python(tmp_path: Path) -> None:
    """Debian's python3 with EXTERNALLY-MANAGED: a bare `pip install` would be refused."""
    env = _env("/usr/bin:/bin")
    assert shutil.which("python3", path=env["PATH"]) == SYSTEM_PYTHON
    _two_commands(_clone(tmp_path / "clone"), env)
    assert _cannot_import_webdb(SYSTEM_PYTHON, env, tmp_path), "webdb was installed into the system python"


@pytest.mark.timeout(1800)
def test_readme_commands_inside_a_foreign_virtualenv(tmp_path: Path) -> None:
    """A user's own venv is active; the Makefile still builds and uses the clone's .venv."""
    foreign = tmp_path / "foreign"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(foreign)], check=True, capture_output=True, timeout=300)
    env = _env(f"{foreign / 'bin'}:/usr/bin:/bin", virtual_env=foreign)
    assert shutil.which("python3", path=env["PATH"]) == str(foreign / "bin" / "python3")
    _two_commands(_clone(tmp_path / "clone"), env)
    assert _cannot_import_webdb(str(foreign / "bin" / "python"), env, tmp_path), (
        "webdb was installed into the active venv"
    )
