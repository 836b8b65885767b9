"""``webdb rank DB --iterations N [--damping 0.85] [--workers W]``: link analysis (PageRank).

Each iteration is one committed batch rewriting every page's score and next_score.
"""

from __future__ import annotations

from webdb.cli.common import add_json, emit


def add_parser(sub) -> None:
    p = sub.add_parser("rank", help="link analysis: iterate page scores", description=__doc__)
    p.add_argument("db")
    p.add_argument("--iterations", type=int, default=10, help="iterations, one batch each (default 10)")
    p.add_argument("--damping", type=float, default=0.85, help="damping factor d (default 0.85)")
    p.add_argument("--workers", type=int, default=1, help="processes computing section contributions")
    add_json(p)
    p.set_defaults(run=run)


def run(args) -> int:
    import webdb
    from webdb.analysis.rank import rank

    res = rank(webdb.open(args.db), args.iterations, args.damping, args.workers)
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
