"""`fab deploy` and `fab check` against real sshd test hosts, twice (idempotent), then a
distributed update that runs from the deployed virtualenvs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from dbutil import batch_a, snapshot
from rackutil import assert_state
from sshd import SSHHost, start_cluster

import webdb
from webdb.errors import BadInput
from webdb.ndfs import parse_config
from webdb.tools.deploy import HOST_EXTRAS, build_sdist, import_names, requirements, source_digest, venv_of
from webdb.writer.inputs import CallRecorder, apply_call

REPO = Path(__file__).resolve().parent.parent
# The test hosts' own python: a plain system python, not the venv running the tests (it has
# no lz4 or the other dependencies).
HOST_PYTHON = "/usr/bin/python3"


def host_python() -> str:
    if not os.access(HOST_PYTHON, os.X_OK):
        pytest.skip(f"{HOST_PYTHON} is not installed")
    return HOST_PYTHON


def snapshot_tree(dest: Path) -> Path:
    """A copy of the source tree: deploy, check and the update all run from it, so edits made
    to the working tree meanwhile (other engineers) cannot change the digest mid-test."""
    for name in ("setup.py", "pyproject.toml", "README.md", "fabfile.py"):
        shutil.copy(REPO / name, dest / name)
    for name in ("bin", "webdb", "fetchlist"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run(argv: list[str], src: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, WEBDB_FAULTS="", PYTHONPATH=str(src))
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=cwd, timeout=300, env=env)


def test_sdist_holds_every_package_the_scripts_and_the_codec_sources(tmp_path: Path) -> None:
    import tarfile

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = build_sdist(str(tmp_path / "a"))
    names = {n.removeprefix("webdb-0.1.0/") for n in tarfile.open(path).getnames()}
    for mod in ("webdb/writer/distributed.py", "webdb/tables/table.py", "webdb/ndfs/ssh.py", "fetchlist/fetch.py"):
        assert mod in names
    assert {"setup.py", "pyproject.toml", "PKG-INFO", "bin/webdb-update"} <= names
    for src, header in (("tables/_blockc_src", "blockc.h"), ("writer/_stagesc_src", "stagesc.h")):
        c_files = {p.relative_to(REPO).as_posix() for p in (REPO / "webdb" / src).iterdir()}
        assert c_files <= names and f"webdb/{src}/{header}" in c_files
    # The same tree gives the same bytes: an unchanged tree is not shipped again.
    assert Path(path).read_bytes() == Path(build_sdist(str(tmp_path / "b"))).read_bytes()
    assert len(source_digest()) == 64
    # The modules a host imports to prove an extra are those of setup.py's extras_require.
    for extra, mods in HOST_EXTRAS.items():
        assert set(import_names(requirements((extra,)))) - set(import_names(requirements())) == set(mods)


def test_deploy_needs_a_virtualenv_python() -> None:
    cfg = parse_config("[host:a]\naddress = x\nroot = /r\npython = python3\n")
    assert venv_of(parse_config("[host:a]\naddress = x\nroot = /r\npython = /v/bin/python\n").hosts["a"]) == "/v"
    with pytest.raises(BadInput, match=r"\[host:a\] python = 'python3'"):
        venv_of(cfg.hosts["a"])


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fab_deploy_and_check_twice_then_update_through_the_install(ssh_hosts: list[SSHHost], tmp_path: Path) -> None:
    hosts = ssh_hosts[:2]
    path = rack_ini(hosts, tmp_path)
    (tmp_path / "src").mkdir()
    src = snapshot_tree(tmp_path / "src")

    def fab(*args: str) -> subprocess.CompletedProcess:
        return run(["-m", "fabric", "-r", str(src), *args], src, tmp_path)

    def webdb_cli(*args: str) -> subprocess.CompletedProcess:
        return run(["-m", "webdb.cli.main", *args], src, tmp_path)

    # The hosts' venvs are built by the hosts' own python, a plain one without lz4: deploy
    # must install the dependencies and prove the install on each host.
    p = fab("deploy", "--ini", str(path), "--base-python", host_python())
    assert p.returncode == 0, p.stdout + p.stderr
    check_first_deploy(p.stdout, hosts, path.read_text())
    digest = re.findall(r"digest (\w+)", p.stdout)
    assert len(set(digest)) == 1
    check_twice_and_deploy_again(fab, path, digest[0])
    update_through_the_install(webdb_cli, hosts, path, tmp_path)

    # A host that is down fails the check with a reason, and so does every host that cannot
    # reach it (edits travel host to host).
    hosts[1].stop()
    try:
        p = fab("check", "--ini", str(path))
        assert p.returncode == 1
        assert re.search(r"h0 +FAILED .*cannot reach h1 from h0", p.stdout), p.stdout
        assert re.search(r"h1 +FAILED .*h1: cannot connect to 127.0.0.3:\d+: connection refused", p.stdout), p.stdout
    finally:
        hosts[1].start()


def check_first_deploy(stdout: str, hosts: list[SSHHost], ini: str) -> None:
    """Each host: a venv of its own made, webdb installed and proved with the compiled codec,
    the section folder made, the config pushed into a private folder."""
    for h in hosts:
        assert re.search(rf"{h.name} +ok .*done venv created, installed, config pushed", stdout), stdout
        assert re.search(rf"{h.name} +ok .*codec compiled, extras none", stdout), stdout
        assert "proved webdb 0.1.0" in stdout
        # Built on the host by its compiler: the venv's python loads both compiled extensions.
        probe = (
            "import webdb.tables._blockc, webdb.writer._stagesc; from webdb.tables import block; "
            "from webdb.writer import kernels; print(block.COMPILED, kernels.COMPILED)"
        )
        venv_py = h.root / ".webdb" / "venv" / "bin" / "python"
        assert subprocess.run([venv_py, "-c", probe], capture_output=True, text=True).stdout == "True True\n"
        cfg = (h.root / ".webdb" / "venv" / "pyvenv.cfg").read_text()
        assert "include-system-site-packages = false" in cfg and str(Path(HOST_PYTHON).parent) in cfg
        assert (h.root / ".webdb" / "venv" / "bin" / "python").exists()
        assert (h.root / "crawl" / f"section-{int(h.name[1:]):04d}").is_dir()
        assert (conf_dir(h) / "hosts.ini").read_text() == ini
        assert conf_dir(h).stat().st_mode & 0o777 == 0o700  # key files pushed here stay private


def check_twice_and_deploy_again(fab, path: Path, digest: str) -> None:
    """``fab check`` passes, a second deploy has nothing to do but proves again, and the check
    passes again."""
    for rerun in (False, True):
        p = fab("check", "--ini", str(path))
        assert p.returncode == 0, p.stdout + p.stderr
        assert p.stdout.count(" ok ") == 2 and f"version 0.1.0, digest {digest}" in p.stdout and "skew" in p.stdout
        assert p.stdout.count("codec compiled, extras none") == 2 and "WARNING" not in p.stdout, p.stdout
        if not rerun:
            p = fab("deploy", "--ini", str(path), "--base-python", host_python())
            assert p.returncode == 0, p.stdout + p.stderr
            assert p.stdout.count("done unchanged") == 2, p.stdout  # idempotent: nothing to do
            assert p.stdout.count("proved webdb 0.1.0") == 2, p.stdout  # ... but proved again
            assert p.stdout.count("codec compiled") == 2, p.stdout
    assert re.search(r"h0 +ok .*host key ssh-ed25519 SHA256:\S+, sections section-0000, locks none", p.stdout), p.stdout


def update_through_the_install(webdb_cli, hosts: list[SSHHost], path: Path, tmp_path: Path) -> None:
    """An update through the deployed install: the agents run the venvs' python and webdb,
    and the rack ends in the state one local writer makes of the same calls."""
    calls = CallRecorder()
    batch_a(calls)
    n = len(calls.calls)
    for j, h in enumerate(hosts):
        with open(h.root / "crawl" / "a.jsonl", "w") as f:
            calls.write(f, j * n // 2, (j + 1) * n // 2)
    p = webdb_cli("create", "--hosts", str(path), "crawl", "--set", "sync=false")
    assert p.returncode == 0, p.stderr
    replay = "webdb.writer.inputs:replay_calls"
    p = webdb_cli("update", "--hosts", str(path), "crawl", "a.jsonl", "--input", replay, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["committed"] and out["generation"] == 1
    for h in hosts:
        info = out["hosts"][h.name]
        assert info["python"] == f"{h.root}/.webdb/venv/bin/python"
        assert info["webdb"].startswith(f"{h.root}/.webdb/venv/lib/"), info["webdb"]

    ref = webdb.create(str(tmp_path / "ref"), sync=False)
    with ref.writer() as w:
        for c in calls.calls:
            apply_call(w, json.loads(c))
    assert_state([h.root for h in hosts], 1, snapshot(ref))


def conf_dir(h: SSHHost) -> Path:
    """The one config folder deploy made under the host's .webdb (per config: hosts-<digest>)."""
    (d,) = (h.root / ".webdb").glob("hosts-*")
    return d


def test_deployed_configs_sharing_a_root_get_their_own_folders(tmp_path: Path) -> None:
    from webdb.writer.section import deploy_dir, section_config

    a = "[host:x]\naddress = 10.0.0.1\nroot = /r\nknown_hosts = keys/known\n\n[sections]\ncount = 1\nhosts = x\n"
    b = a.replace("10.0.0.1", "10.0.0.2")
    da = deploy_dir("/r", parse_config(a, source="/etc/rack/hosts.ini"))
    assert re.fullmatch(r"/r/\.webdb/hosts-[0-9a-f]{8}", da)
    assert da == deploy_dir("/r", parse_config(a + "# a comment\n", source="hosts.ini"))  # same rack, same folder
    assert da != deploy_dir("/r", parse_config(b, source="/etc/rack/hosts.ini"))  # another rack on the root
    assert deploy_dir("/r", parse_config(a, source="/x/rack-b.ini")).startswith("/r/.webdb/rack-b-")
    # An agent on the host resolves the config's relative key paths in that folder.
    root = tmp_path / "root"
    folder = Path(deploy_dir(str(root), parse_config(a.replace("/r", str(root)), source="hosts.ini")))
    folder.mkdir(parents=True)
    # The fields of a SectionSpec that section_config reads.
    spec = SimpleNamespace(root=str(root), base_dir="/coordinator", ini=a.replace("/r", str(root)),
                           ini_source="hosts.ini", local_host="x", config=None)  # fmt: skip
    assert section_config(spec).hosts["x"].known_hosts == folder / "keys" / "known"


def rack_ini(hosts: list[SSHHost], tmp_path: Path) -> Path:
    ini = "[ndfs]\ndb = crawl\nconnect_timeout = 5\ntimeout = 10\n\n"
    for h in hosts:
        ini += h.ini().replace(f"python = {sys.executable}", f"python = {h.root}/.webdb/venv/bin/python")
    ini += f"\n[sections]\ncount = {len(hosts)}\nhosts = {', '.join(h.name for h in hosts)}\n"
    path = tmp_path / "hosts.ini"
    path.write_text(ini)
    return path


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_deploy_from_a_wheelhouse_reports_a_broken_host_with_its_own_error(
    ssh_hosts: list[SSHHost], tmp_path: Path
) -> None:
    """Dependencies shipped from a local wheelhouse (hosts install with --no-index); a host
    whose venv cannot import a dependency fails with the host's own error; a plain deploy
    followed by --deps installs again (the marker covers the dependency mode)."""
    hosts = ssh_hosts[:2]
    path = rack_ini(hosts, tmp_path)
    (tmp_path / "src").mkdir()
    src = snapshot_tree(tmp_path / "src")
    house = tmp_path / "wheels"

    def fab(*args: str) -> subprocess.CompletedProcess:
        return run(["-m", "fabric", "-r", str(src), *args], src, tmp_path)

    p = fab("deploy", "--ini", str(path), "--base-python", host_python(), "--wheelhouse", str(house))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("proved webdb 0.1.0") == 2, p.stdout
    assert any(f.name.startswith("lz4-") for f in house.iterdir())
    for h in hosts:
        assert any(f.name.startswith("lz4-") for f in (conf_dir(h) / "wheels").iterdir())

    # Break lz4 in h1's venv: the deploy reinstalls, still cannot import, and says why.
    (lz4,) = (hosts[1].root / ".webdb" / "venv" / "lib").glob("python3*/site-packages/lz4/__init__.py")
    lz4.write_text("raise ImportError('lz4 is broken on this host')\n")
    p = fab("deploy", "--ini", str(path), "--base-python", host_python(), "--wheelhouse", str(house))
    assert p.returncode == 1, p.stdout + p.stderr
    assert re.search(r"h0 +ok .*done unchanged", p.stdout), p.stdout
    line = next(ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("h1"))
    assert "FAILED" in line and "ImportError: lz4 is broken on this host" in line, line
    assert f"remove {hosts[1].root}/.webdb/venv" in line
    assert "Traceback" not in p.stderr

    # --deps after a plain deploy is a different dependency set: it installs (and repairs h0).
    p = fab("deploy", "--ini", str(path), "--base-python", host_python(), "--wheelhouse", str(house), "--deps",
            "--only", "h0")  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"h0 +ok .*done installed", p.stdout), p.stdout


def test_fab_with_a_missing_ini_is_one_line(tmp_path: Path) -> None:
    src = REPO
    for task in ("deploy", "check"):
        p = run(["-m", "fabric", "-r", str(src), task, "--ini", str(tmp_path / "nope.ini")], src, tmp_path)
        assert p.returncode == 2, p.stdout + p.stderr
        assert p.stderr.strip() == f"fab {task}: error: {tmp_path / 'nope.ini'}: no such hosts.ini", p.stderr


COMPILER = re.compile(r"(^|-)(gcc|cc|c\+\+|g\+\+|cpp|c89|c99|clang)(-[\d.]+)?$")


def bin_without_a_compiler(dest: Path) -> Path:
    """A directory of links to every program of /usr/bin but the C and C++ compilers: the
    PATH of a host where gcc is not installed (its python, pip and coreutils are)."""
    dest.mkdir()
    for f in os.listdir("/usr/bin"):
        if not COMPILER.search(f):
            (dest / f).symlink_to(Path("/usr/bin") / f)
    return dest


@pytest.mark.ssh
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_deploy_and_check_name_the_host_without_a_compiler(tmp_path: Path) -> None:
    """h1's sessions have a PATH without gcc: deploy installs the pure-Python fallback there
    and says so per host and in a WARNING (a failure with --require-compiled), as does check;
    the extras asked for are installed and proved on both; once h1 has a compiler again the
    next deploy builds the codec there."""
    cluster = start_cluster(tmp_path / "sshd", k=2, first_address=60)
    try:
        hosts = list(cluster)
        hosts[1].stop()
        hosts[1].env = {"PATH": str(bin_without_a_compiler(tmp_path / "nocc-bin"))}
        hosts[1].start()
        with hosts[1].fabric_connection() as c:  # the precondition, from the host's own shell
            assert c.run("command -v x86_64-linux-gnu-gcc gcc cc || true", hide=True, in_stream=False).stdout == ""
        path = rack_ini(hosts, tmp_path)
        (tmp_path / "src").mkdir()
        src = snapshot_tree(tmp_path / "src")

        def fab(*args: str) -> subprocess.CompletedProcess:
            return run(["-m", "fabric", "-r", str(src), *args], src, tmp_path)

        def line(out: str, host: str) -> str:
            return next(ln for ln in out.splitlines() if ln.lstrip().startswith(host + " "))

        fallback = "codec FALLBACK pure Python (merges 5-8x slower): no C compiler: x86_64-linux-gnu-gcc is not on PATH"
        warning = "WARNING: 1 of 2 hosts run the pure-Python block codec, not webdb.tables._blockc: h1 "
        p = fab("deploy", "--ini", str(path), "--base-python", host_python(), "--extras", "dask")
        assert p.returncode == 0, p.stdout + p.stderr
        assert re.search(r"h0 +ok .*codec compiled, extras dask$", line(p.stdout, "h0")), p.stdout
        assert re.search(r"h1 +ok .*" + re.escape(fallback), line(p.stdout, "h1")), p.stdout
        assert line(p.stdout, "h1").endswith("; install gcc, extras dask"), p.stdout
        assert warning in p.stdout, p.stdout
        site = [next((h.root / ".webdb" / "venv" / "lib").glob("python3*/site-packages")) for h in hosts]
        assert list((site[0] / "webdb" / "tables").glob("_blockc*.so")) and (site[0] / "pyarrow").is_dir()
        assert not list((site[1] / "webdb" / "tables").glob("_blockc*.so")) and (site[1] / "pyarrow").is_dir()

        p = fab("check", "--ini", str(path))
        assert p.returncode == 0, p.stdout + p.stderr
        assert "codec compiled, extras dask" in line(p.stdout, "h0"), p.stdout
        assert fallback in line(p.stdout, "h1") and warning in p.stdout, p.stdout
        p = fab("check", "--ini", str(path), "--require-compiled")
        assert p.returncode == 1, p.stdout + p.stderr
        assert re.search(r"h0 +ok ", p.stdout), p.stdout
        assert "FAILED" in line(p.stdout, "h1") and "runs the pure-Python block codec: no C compiler" in p.stdout
        p = fab("deploy", "--ini", str(path), "--base-python", host_python(), "--extras", "dask",
                "--require-compiled", "--only", "h1")  # fmt: skip
        assert p.returncode == 1, p.stdout + p.stderr
        assert "h1: the compiled block codec is required: no C compiler" in line(p.stdout, "h1"), p.stdout
        assert "Traceback" not in p.stderr

        # gcc on h1's PATH again: the install is current, but the codec missing, so it builds.
        hosts[1].stop()
        hosts[1].env = {}
        hosts[1].start()
        p = fab("deploy", "--ini", str(path), "--base-python", host_python(), "--extras", "dask", "--only", "h1")
        assert p.returncode == 0, p.stdout + p.stderr
        assert re.search(r"h1 +ok .*done rebuilt, .*codec compiled, extras dask$", p.stdout), p.stdout
        assert list((site[1] / "webdb" / "tables").glob("_blockc*.so"))
        p = fab("deploy", "--ini", str(path), "--extras", "nope")
        assert p.returncode == 2 and "extras 'nope': not an extra a host can install" in p.stderr, p.stderr
    finally:
        cluster.stop_all()
