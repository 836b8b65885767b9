"""``webdb rank DB [--iterations 10] [--damping 0.85] [--workers W]``: link analysis (PageRank).

Each iteration is one committed batch rewriting every page's score and next_score.

With --hosts (DB is then the db name) each section's contributions are computed where it lives
and every iteration commits on the whole rack; with --dask tcp://HOST:PORT (or hosts.ini's
dask_scheduler) the same runs as tasks on a Dask cluster (docs/analysis.md §5).
"""

from __future__ import annotations

from webdb.cli.common import (
    add_json,
    add_lock_wait,
    add_rack_args,
    emit,
    nonneg_int,
    positive_int,
    rack_failed,
    rack_target,
)


def add_parser(sub) -> None:
    p = sub.add_parser("rank", help="link analysis: iterate page scores", description=__doc__)
    p.add_argument("db")
    p.add_argument(
        "--iterations", type=nonneg_int, default=10, metavar="N", help="iterations, one batch each (default 10)"
    )
    p.add_argument("--damping", type=float, default=0.85, help="damping factor d (default 0.85)")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="W",
        help="processes computing section contributions (default 1)",
    )
    add_lock_wait(p)
    add_rack_args(p, "rank")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    import webdb
    from webdb.analysis.rank import rank

    rack, scheduler = rack_target(args)
    if rack is not None:
        from webdb.analysis.onrack import rank_rack
        from webdb.writer.rack import UpdateFailed

        try:
            res = rank_rack(
                rack,
                args.iterations,
                args.damping,
                dask=scheduler,
                heartbeat_timeout=args.heartbeat_timeout,
                lock_wait=args.lock_wait,
            )
        except UpdateFailed as e:
            return rack_failed("rank", e)
    else:
        res = rank(webdb.open(args.db), args.iterations, args.damping, args.workers, lock_wait=args.lock_wait)
    emit(
        args,
        res,
        "\n".join(
            f"iteration {i + 1}: {x['pages']:,} pages, {x['links']:,} links, L1 change {x['delta']:.6g}"
            for i, x in enumerate(res)
        )
        or "no iterations",
    )
    return 0
