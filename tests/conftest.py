"""Shared fixtures.

SSH integration (tests marked ``@pytest.mark.ssh``):

- ``sshd_cluster`` (session): ``SSH_TEST_HOSTS`` (default 4) real sshd processes on
  127.0.0.2, 127.0.0.3, ... (see tests/sshd.py).  If OpenSSH is missing the tests *fail* with
  an install hint; they are never skipped.
- ``ssh_hosts`` (function): the cluster's hosts, all running, with empty data roots.
- an autouse fixture gives every ssh-marked test a throwaway HOME and no ssh agent, so
  nothing can read the developer's ~/.ssh (config, keys, known_hosts).

Under pytest-xdist every worker is its own session: it starts its own cluster (its own ports,
keys, known_hosts and data roots, under the worker's own basetemp), so workers never share a
host.  tests/progress.py prints one line per finished test file and, under ``CI=true``, fails
the session when any test was skipped.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import progress
import pytest
from hypothesis import HealthCheck, settings
from sshd import SSHCluster, SSHDUnavailable, SSHHost, start_cluster

SSH_TEST_HOSTS = int(os.environ.get("SSH_TEST_HOSTS", "4"))

# Hypothesis without its timing checks (a per-example deadline, "generation too slow"): on a
# loaded machine they fail for the load, not for the code.
settings.register_profile("webdb", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("webdb")


def pytest_configure(config: pytest.Config) -> None:
    progress.register(config)


@pytest.fixture(scope="session")
def sshd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHCluster]:
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("sshd"), k=SSH_TEST_HOSTS)
    except SSHDUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    yield cluster
    cluster.stop_all()


@pytest.fixture
def ssh_hosts(sshd_cluster: SSHCluster) -> list[SSHHost]:
    """Every test host running and unpaused, each data root empty."""
    sshd_cluster.ensure_running()
    for h in sshd_cluster:
        for child in h.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    return list(sshd_cluster)


@pytest.fixture(scope="module")
def cluster():
    """A Dask cluster of 3 worker processes on this machine (worker j declares section-j), shared
    by a module's tests (daskutil.start_cluster)."""
    from daskutil import start_cluster

    c = start_cluster(3)
    yield c
    c.close()


@pytest.fixture(autouse=True)
def _no_user_ssh(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """ssh tests run with HOME in a tmp dir and no agent, so ~/.ssh is never consulted."""
    if request.node.get_closest_marker("ssh") is None:
        yield
        return
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("home")
    mp.setenv("HOME", str(home))
    mp.delenv("SSH_AUTH_SOCK", raising=False)
    mp.delenv("SSH_AGENT_PID", raising=False)
    try:
        yield
    finally:
        mp.undo()
