from setuptools import Extension, find_packages, setup

setup(
    name="webdb",
    version="0.1.0",
    description="A crawl database of pages and links in sorted, sectioned tables, and a polite crawl loop",
    python_requires=">=3.10",
    packages=find_packages(include=["webdb", "webdb.*", "fetchlist", "fetchlist.*"]),
    # The dashboard's templates and browser files (uPlot vendored with its license).
    package_data={"webdb.serve": ["templates/*.html", "static/*"]},
    # Inner loops in C (docs/design.md "Compiled kernels"), one extension per layer: the block
    # codec's (tables) and the edit and stage kernels' (writer).  Optional: where no compiler or
    # Python headers exist (gcc, python3-dev) the build skips them and webdb runs the same code in
    # pure Python (webdb/tables/block.py, the references in webdb/writer/).
    # Each of several C files, one a concern (blockc.h and stagesc.h list them).
    ext_modules=[
        Extension(
            "webdb.tables._blockc",
            sources=[
                "webdb/tables/_blockc_src/module.c",
                "webdb/tables/_blockc_src/codec.c",
                "webdb/tables/_blockc_src/bulk.c",
                "webdb/tables/_blockc_src/sort.c",
                "webdb/tables/_blockc_src/merge.c",
                "webdb/tables/_blockc_src/pieces.c",
                "webdb/tables/_blockc_src/index.c",
                "webdb/tables/_blockc_src/seek.c",
            ],
            depends=["webdb/tables/_blockc_src/blockc.h"],
            optional=True,
        ),
        Extension(
            "webdb.writer._stagesc",
            sources=[
                "webdb/writer/_stagesc_src/module.c",
                "webdb/writer/_stagesc_src/edits.c",
                "webdb/writer/_stagesc_src/stages.c",
            ],
            depends=["webdb/writer/_stagesc_src/stagesc.h"],
            optional=True,
        ),
    ],
    install_requires=[
        "lz4>=4.3",
        # ISA-L's CRC-32 (python-isal's binary wheels): zlib.crc32's values at ~3x its speed,
        # for every block CRC and the scrub; without it webdb uses zlib's (webdb/tables/block.py).
        # Asked for only where wheels exist: elsewhere pip would build ISA-L (nasm, autotools).
        "isal>=1.6; platform_machine == 'x86_64' or platform_machine == 'AMD64'"
        " or platform_machine == 'aarch64' or platform_machine == 'arm64'",
        "tqdm>=4.66",
        "paramiko>=3.4",
        "fabric>=3.2",
        "requests>=2.31",
        "protego>=0.3",
        "lxml>=5.0",
        "w3lib==2.5.0",
        "mmh3>=4.0",
        "publicsuffixlist>=1.0",
        # fetched content as WARC/1.1 (fetchlist.warc)
        "warcio>=1.7.4",
        # The bulk load (webdb.tools.bulkarrow: Arrow columns, numpy sorts) and `webdb export
        # --format parquet`; wheels exist for every platform webdb runs on (docs/design.md §7).
        "pyarrow>=14",
        "numpy>=1.24",
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "pytest-xdist>=3.6",
            "hypothesis>=6.100",
            "psutil>=5.9",
            "import-linter>=2.1",
            # Pinned: `ruff check` and `ruff format --check` must give the same answer everywhere.
            "ruff==0.17.6",
            # `webdb export --format parquet` and the indexer of docs/indexing.md (tests run both).
            "pyarrow>=14",
            "numpy>=1.24",
            "tantivy>=0.25",
            # bench/plot_rounds.py (the steady-state plot of docs/performance.md; tests run it).
            "matplotlib>=3.7",
            # The Dask transport of `webdb update --dask` (tests/test_dask.py runs a LocalCluster).
            "distributed>=2024.1",
            # `webdb serve` (its templates), driven in a real browser by tests/test_serve.py.
            "jinja2>=3.1",
            "selenium>=4.20",
        ],
        # `webdb serve`: the crawl dashboard's templates.
        "serve": ["jinja2>=3.1"],
        # `webdb update --dask tcp://SCHEDULER:8786`: run updates on an existing Dask cluster.
        "dask": ["distributed>=2024.1"],
        # `pip install webdb[bulk]` and `webdb[export]` keep working: what they added (pyarrow,
        # numpy) is in install_requires.
        "export": [],
        "bulk": [],
        # bench/run.py: the peers (RocksDB, DuckDB; SQLite and GNU sort come with the system), the
        # driver's memory sampling, the columnar load webdb runs there and the steady-state plot;
        # bench/bench_fetch_peers.py: Scrapy, the fetch benchmark's peer (bench/scrapy_peer.py);
        # py-spy, the sampling profiler behind the profiles docs/performance.md cites.
        "bench": [
            "duckdb>=1.0",
            "rocksdict>=0.3",
            "psutil>=5.9",
            "pyarrow>=14",
            "numpy>=1.24",
            "matplotlib>=3.7",
            "scrapy>=2.13",
            "py-spy>=0.3.14",
        ],
    },
    entry_points={"console_scripts": ["webdb=webdb.cli.main:main"]},
    scripts=["bin/webdb-update", "bin/webdb-create", "bin/webdb-read", "bin/webdb-check"],
)
