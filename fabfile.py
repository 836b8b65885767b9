"""Fabric tasks for a webdb rack (docs/operations.md, *Running a rack*).

    fab deploy --ini hosts.ini [--base-python python3] [--deps] [--db crawl]
    fab check  --ini hosts.ini [--max-skew 2] [--min-free-mb 100]

``deploy`` installs this source tree into the virtualenv each host's ``python`` names, creates
the data roots and share-group directories, and pushes the config; ``check`` verifies every
host (ssh, version, disk, clock, config, host-to-host ssh).  Both are idempotent, print one
line per host, and exit 1 if any host failed.  The logic is in webdb/deploy.py.
"""

from fabric import task
from invoke.exceptions import Exit

from webdb.deploy import check as check_hosts
from webdb.deploy import deploy as deploy_hosts
from webdb.deploy import report


def _hosts(spec: str) -> list[str] | None:
    return [h.strip() for h in spec.split(",") if h.strip()] or None


@task(
    help={
        "ini": "hosts.ini of the rack",
        "base-python": "python that creates the virtualenvs",
        "deps": "let pip install dependencies from an index (default: the host's own packages)",
        "db": "db name whose directories to create (default: [ndfs] db)",
        "only": "comma-separated hosts",
    }
)
def deploy(c, ini="hosts.ini", base_python="python3", deps=False, db="", only=""):
    """Install webdb, create directories, push the config on every host of hosts.ini."""
    res = deploy_hosts(ini, db=db or None, base_python=base_python, deps=deps, hosts=_hosts(only))
    print(report(res))
    if not res.ok:
        raise Exit(code=1)


@task(
    help={
        "ini": "hosts.ini of the rack",
        "max-skew": "clock tolerance, seconds",
        "min-free-mb": "free disk wanted under each root",
        "only": "comma-separated hosts",
    }
)
def check(c, ini="hosts.ini", max_skew=2.0, min_free_mb=100, only=""):
    """Check every host: ssh, version, disk free, clock, config, host-to-host ssh."""
    res = check_hosts(ini, max_skew=float(max_skew), min_free_mb=int(min_free_mb), hosts=_hosts(only))
    print(report(res))
    if not res.ok:
        raise Exit(code=1)
