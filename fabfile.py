"""Fabric tasks for a webdb rack (docs/operations.md, *Running a rack*).

    fab deploy --ini hosts.ini [--base-python python3] [--wheelhouse DIR] [--deps] [--db crawl]
               [--extras dask] [--require-compiled]
    fab check  --ini hosts.ini [--max-skew 2] [--min-free-mb 100] [--db crawl] [--require-compiled]

``deploy`` builds each host's virtualenv from the host's own python, installs the dependencies
and this source tree (a source distribution the host's pip builds, compiling the block codec
with the host's compiler), proves the install on the host (imports, ``webdb --version``, the
codec), creates the data roots and share-group directories, and pushes the config; ``check``
verifies every host (ssh and host key, version, codec and extras, disk, clock, section roots,
locks, config, host-to-host ssh).  Both are idempotent, print one line per host and a WARNING
naming the hosts that run the pure-Python codec, and exit 1 if any host failed.  The logic is
in webdb/tools/deploy.py.
"""

from fabric import task
from invoke.exceptions import Exit

from webdb.errors import WebDBError
from webdb.tools.deploy import check as check_hosts
from webdb.tools.deploy import deploy as deploy_hosts
from webdb.tools.deploy import parse_extras, report


def _hosts(spec: str) -> list[str] | None:
    return [h.strip() for h in spec.split(",") if h.strip()] or None


@task(
    help={
        "ini": "hosts.ini of the rack",
        "base-python": "the python on each host that creates the virtualenv (default: the host's python3)",
        "wheelhouse": "download the dependencies into this local directory and ship them (hosts need no index)",
        "deps": "also upgrade installed dependencies to the newest the index or wheelhouse offers",
        "db": "db name whose directories to create (default: [ndfs] db)",
        "only": "comma-separated hosts",
        "extras": "comma-separated extras to install and prove too: dask (pyarrow and numpy come with every install)",
        "require-compiled": "fail a host that cannot build the compiled block codec (default: warn)",
    }
)
def deploy(c, ini="hosts.ini", base_python="python3", wheelhouse="", deps=False, db="", only="", extras="",
           require_compiled=False):  # fmt: skip
    """Install and prove webdb, create directories, push the config on every host of hosts.ini."""
    try:
        res = deploy_hosts(ini, db=db or None, base_python=base_python, deps=deps, wheelhouse=wheelhouse or None,
                           hosts=_hosts(only), extras=parse_extras(extras),
                           require_compiled=require_compiled)  # fmt: skip
    except WebDBError as e:
        raise Exit(f"fab deploy: error: {e}", code=2) from None
    print(report(res))
    if not res.ok:
        raise Exit(code=1)


@task(
    help={
        "ini": "hosts.ini of the rack",
        "max-skew": "clock tolerance, seconds",
        "min-free-mb": "free disk wanted under each root",
        "db": "db name whose section roots and locks to check (default: [ndfs] db)",
        "only": "comma-separated hosts",
        "require-compiled": "fail a host that runs the pure-Python block codec (default: warn)",
    }
)
def check(c, ini="hosts.ini", max_skew=2.0, min_free_mb=100, db="", only="", require_compiled=False):
    """Check every host: ssh and host key, version, codec, disk, clock, section roots, locks, config, peers."""
    try:
        res = check_hosts(ini, db=db or None, max_skew=float(max_skew), min_free_mb=int(min_free_mb),
                          hosts=_hosts(only), require_compiled=require_compiled)  # fmt: skip
    except WebDBError as e:
        raise Exit(f"fab check: error: {e}", code=2) from None
    print(report(res))
    if not res.ok:
        raise Exit(code=1)
