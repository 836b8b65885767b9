"""A Dask cluster on this machine for the tests of the Dask transport."""

from __future__ import annotations

import logging


def start_cluster(k: int, env: dict[str, str] | None = None):
    """A LocalCluster of k worker processes (each under a nanny); worker j declares section-j."""
    import dask
    from distributed import Client, LocalCluster, Nanny

    # A killed worker is closed for good (its nanny too) if the nanny's restart has not joined
    # the scheduler within this time (15 s by default, which a loaded machine can exceed): a
    # bound the restart never reaches, so the test waits on the restart itself.
    dask.config.set({"distributed.deploy.lost-worker-timeout": "10 minutes"})

    cluster = LocalCluster(
        n_workers=0,
        processes=True,
        threads_per_worker=1,
        dashboard_address=None,
        silence_logs=logging.ERROR,
        # Without a dashboard the scheduler still serves its HTTP routes, on 8787 unless told:
        # a free loopback port keeps clusters started side by side from contending for it.
        scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
    )
    for j in range(k):
        cluster.worker_spec[f"section-{j}"] = {
            "cls": Nanny,
            "options": {"nthreads": 1, "resources": {f"section-{j}": 1}, "env": dict(env or {}), "memory_limit": 0},
        }
    cluster.scale(k)
    with Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(k, timeout=120)
    return cluster
