"""A Dask cluster on this machine, for the tests of the Dask transport and the benchmarks."""

from __future__ import annotations

import logging


def start_cluster(k: int, env: dict[str, str] | None = None, wait: float = 120):
    """A LocalCluster of k single-thread worker processes (each under a nanny), worker j
    declaring the resource ``section-j`` (where update_dask places section j); returned once
    every worker is up (within ``wait`` seconds)."""
    import dask
    from distributed import Client, LocalCluster, Nanny

    # A killed worker is closed for good (its nanny too) if the nanny's restart has not joined
    # the scheduler within this time (15 s by default, which a loaded machine can exceed): a
    # bound the restart never reaches, so the test waits on the restart itself.
    dask.config.set({"distributed.deploy.lost-worker-timeout": "10 minutes"})
    # The workers' statistical profiler samples every thread's stack every 10 ms and holds the
    # GIL to do it: ~4% of a section's work (docs/distributed.md, *Dask*).  Nannies hand this
    # config to their workers.
    dask.config.set({"distributed.worker.profile.enabled": False})

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
    try:
        cluster.scale(k)
        with Client(cluster, set_as_default=False) as c:
            c.wait_for_workers(k, timeout=wait)
    except BaseException:
        cluster.close()
        raise
    return cluster
