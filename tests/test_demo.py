"""``webdb demo`` (the README's main command) as a user runs it, and the README's claims about
``make demo``, ``make test`` and ``.ci/run``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

import webdb
from fetchlist.demo_site import DEMO_HOSTS, loopback_ok

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEBDB = [sys.executable, "-m", "webdb.cli.main"]


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


@pytest.mark.skipif(not all(map(loopback_ok, DEMO_HOSTS)), reason="needs 127.0.0.x addresses")
@pytest.mark.timeout(300)
def test_demo_with_no_arguments(tmp_path):
    out = subprocess.run(
        [*WEBDB, "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr  # how long it takes: bench/bench_claims.py
    lines = out.stdout.splitlines()
    assert lines[0].startswith("demo site: ") and "http://127.0.0.2:" in lines[0]
    m = re.match(r"db: (\S+) \(a temporary directory, removed at the end\)", lines[1])
    assert m and m.group(1).startswith(str(tmp_path))
    db_path = m.group(1)
    rounds = [ln for ln in lines if ln.startswith("round ")]
    assert [r.split(":")[0] for r in rounds] == ["round 1", "round 2", "round 3", "round 4"]
    assert all(re.search(r"generate [\d.]+s fetch [\d.]+s update [\d.]+s$", r) for r in rounds)
    assert any(ln.startswith("db stats: ") and "check ok" in ln for ln in lines)
    m = re.search(r"fetched (\d+) of the (\d+) HTML pages a polite crawler can reach", out.stdout)
    assert m and m.group(1) == m.group(2) and int(m.group(2)) > 300
    assert "status: fetched" in out.stdout and "gone" in out.stdout and "redirect_perm" in out.stdout
    assert not os.path.exists(db_path) and os.listdir(tmp_path) == []  # the temporary db is gone
    assert out.stderr == ""


@pytest.mark.skipif(not all(map(loopback_ok, DEMO_HOSTS)), reason="needs 127.0.0.x addresses")
def test_demo_keeps_a_db_given_by_path(tmp_path):
    db = tmp_path / "demo.db"
    out = subprocess.run(
        [*WEBDB, "demo", "--db", str(db), "--rounds", "2", "--pages", "40", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    import json

    data = json.loads(out.stdout)
    assert data["db"] == str(db) and data["kept"] and len(data["crawl"]["rounds"]) == 2
    with webdb.open(str(db)).reader() as r:
        assert r.num_pages == data["stats"]["pages"] > 40 and r.check()["links"] == data["stats"]["links"]
    out = subprocess.run([*WEBDB, "demo", "--db", str(db)], capture_output=True, text=True)
    assert out.returncode == 2 and "demo.db: exists" in out.stderr and "Traceback" not in out.stderr


def test_make_targets_and_ci_are_what_the_readme_says():
    readme = _readme()
    assert "make demo" in readme and "make test" in readme
    assert "`make demo` runs `webdb demo`; `make test` is what CI runs (`.ci/run`)." in readme
    make = shutil.which("make")
    assert make, "GNU make is needed for `make demo` / `make test`"
    # Run as a top-level make even when the suite itself runs under `make test`.
    # (PYTEST_ARGS too: make exports a command-line `make test PYTEST_ARGS=...` to the suite.)
    drop = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "PYTEST_ARGS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    # -B: what a fresh clone runs (the venv and the install are not made yet).
    demo = subprocess.run([make, "-n", "-B", "demo"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert demo.returncode == 0 and demo.stdout.splitlines()[-1].strip() == ".venv/bin/webdb demo"
    # A fresh machine gets its own venv, then the package, never a --user or system install.
    assert "-m venv .venv" in demo.stdout and ".venv/bin/python -m pip install" in demo.stdout
    assert "--user" not in demo.stdout and "--break-system-packages" not in demo.stdout
    test = subprocess.run([make, "-n", "test"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert test.returncode == 0 and test.stdout.splitlines()[-1].strip() == ".venv/bin/python -m pytest -n auto"
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert ci[-1] == "make test" and os.access(os.path.join(ROOT, ".ci", "run"), os.X_OK)
