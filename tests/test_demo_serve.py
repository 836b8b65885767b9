"""`webdb demo --serve` and the README's "Using it" walk-through: inject → generate → fetch →
update → read by hand against the served site, then Ctrl-C stops the server cleanly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import sigint_default

import webdb

ROOT = Path(__file__).resolve().parent.parent
WEBDB = [sys.executable, "-m", "webdb.cli.main"]


def walkthrough() -> list[list[str]]:
    """The commands of the README's code block that follows the one starting the server."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("webdb demo --serve", 1)[1].split("```")[2]
    cmds = []
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("webdb "):
            cmds.append(line.split()[1:])
    return cmds


@pytest.mark.timeout(300)
def test_demo_serve_and_the_readme_walkthrough(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [*WEBDB, "demo", "--serve", "--pages", "60"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,  # Ctrl-C must reach it even if the suite runs in the background
    )
    try:
        lines = []
        for line in server.stdout:  # wait for the server to say it serves: no sleeping
            lines.append(line)
            if line.startswith("serving on "):
                break
        assert lines and lines[-1].startswith("serving on http://127.0.0.2:"), "".join(lines) + server.stderr.read()
        seeds = (tmp_path / "demo-seeds.txt").read_text().split()
        assert seeds and all(re.match(r"http://127\.0\.0\.\d:\d+/", u) for u in seeds)

        cmds = walkthrough()
        assert [c[0] for c in cmds] == ["inject", "generate", "fetch", "update", "read"], cmds
        for argv in cmds:
            p = subprocess.run([*WEBDB, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=240)
            assert p.returncode == 0, f"webdb {' '.join(argv)}: {p.stdout}{p.stderr}"
            assert "Traceback" not in p.stderr
        stats = json.loads(
            subprocess.run(
                [*WEBDB, "read", "demo.db", "--stats", "--json"], cwd=tmp_path, capture_output=True, text=True
            ).stdout
        )
        assert stats["fetched"] >= len(seeds) - 1 and stats["pages"] > stats["fetched"]  # links found
        with webdb.open(str(tmp_path / "demo.db")).reader() as r:
            assert r.check()["pages"] == stats["pages"]
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, out + err
    assert "Traceback" not in err and err.strip() == "stopped"


def test_demo_serve_rejects_a_busy_port_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run(
            [*WEBDB, "demo", "--serve", "--port", str(port)], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
    assert p.returncode == 2 and p.stderr.startswith(f"webdb demo: error: --port {port}: cannot serve on")
    assert len(p.stderr.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "demo-seeds.txt")
