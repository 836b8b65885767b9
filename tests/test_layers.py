"""The allowed imports between the parts (docs/design.md, *Parts and arrows*) hold: each
import-linter contract of pyproject.toml is run on its own, and the "only these" contracts
name every other part (a new module cannot slip past them)."""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import webdb

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = {
    c["id"]: c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}
# Contracts broken on purpose until another change lands (remove the entry when it does).
PENDING: dict[str, str] = {}
# Of a contract that forbids "every part of webdb but ...": the parts it allows.
ONLY = {
    "crawl-uses-public-api": {"errors", "urls", "rack"},
    "tables-at-the-bottom": {"errors", "tables"},
    "ndfs-stands-alone": {"errors", "ndfs"},
}


def _lint_imports() -> str:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "lint-imports (the import-linter package) is not installed: pip install -e .[test]"
    return exe


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "cid",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=PENDING[c])) if c in PENDING else c
        for c in CONTRACTS
    ],
)
def test_contract_is_kept(cid: str) -> None:
    p = subprocess.run(
        [_lint_imports(), "--config", str(ROOT / "pyproject.toml"), "--contract", cid, "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "KEPT" in p.stdout and "BROKEN" not in p.stdout


@pytest.mark.parametrize("cid", sorted(ONLY))
def test_only_contracts_name_every_other_part(cid: str) -> None:
    parts = {m.name for m in pkgutil.iter_modules(webdb.__path__)}
    assert ONLY[cid] <= parts | {"errors"}
    forbidden = {m.removeprefix("webdb.") for m in CONTRACTS[cid]["forbidden_modules"] if m.startswith("webdb.")}
    assert forbidden == parts - ONLY[cid], f"{cid}: list every part of webdb but {sorted(ONLY[cid])}"


def test_every_part_says_what_it_owns_and_may_import() -> None:
    for pkg in (
        "webdb",
        "webdb.core",
        "webdb.tools",
        "webdb.util",
        "webdb.tables",
        "webdb.writer",
        "webdb.ndfs",
        "webdb.cli",
        "webdb.analysis",
        "fetchlist",
    ):
        doc = __import__(pkg, fromlist=["_"]).__doc__ or ""
        assert "May import" in doc and "Owns" in doc, f"{pkg}/__init__.py docstring: say what it owns and may import"


def test_design_picture_names_every_folder() -> None:
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("## 8. Parts and arrows") :]
    for folder in (
        "webdb/core",
        "webdb/tools",
        "webdb/util",
        "webdb/tables",
        "webdb/writer",
        "webdb/ndfs",
        "webdb/cli",
        "webdb/analysis",
        "fetchlist",
    ):
        assert folder in section, f"docs/design.md *Parts and arrows* does not show {folder}"


def test_webdb_does_not_know_the_crawls_input_until_the_crawl_registers_it() -> None:
    code = (
        "import sys, webdb, webdb.cli.main\n"
        "from webdb.writer.inputs import DEFAULT_INPUT, input_spec, resolve\n"
        "assert 'fetchlist' not in sys.modules, sorted(m for m in sys.modules if m.startswith('fetchlist'))\n"
        "try:\n"
        "    resolve(DEFAULT_INPUT)\n"
        "except webdb.BadInput as e:\n"
        "    print(e)\n"
        "import fetchlist\n"
        "fetchlist.register_inputs()\n"
        "fetchlist.register_inputs()  # again: a no-op\n"
        "from fetchlist.update import apply_segments\n"
        "assert resolve(DEFAULT_INPUT) is apply_segments\n"
        "print(input_spec(DEFAULT_INPUT))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    first, second = p.stdout.splitlines()
    assert "input 'segments' is not registered (registered: calls" in first
    assert second == "fetchlist.update:apply_segments"


def test_register_input_rejects_bad_names_and_a_second_claim() -> None:
    from webdb import BadInput, register_input
    from webdb.writer.inputs import input_spec, registered_inputs, replay_calls, resolve

    assert resolve("calls") is replay_calls and input_spec("x.y:z") == "x.y:z"
    register_input("calls", "webdb.writer.inputs:replay_calls")  # the same claim: fine
    with pytest.raises(BadInput, match="'calls' is already registered as 'webdb.writer.inputs:replay_calls'"):
        register_input("calls", "elsewhere:fn")
    with pytest.raises(BadInput, match="is not MODULE:FUNCTION"):
        register_input("mine", "no_colon")
    with pytest.raises(BadInput, match="without ':'"):
        register_input("a:b", "m:f")
    with pytest.raises(BadInput, match="input 'nosuch' is not registered"):
        resolve("nosuch")
    assert "mine" not in registered_inputs()


def test_the_db_forbids_every_module_of_the_writer_but_the_writer() -> None:
    import webdb.writer

    # The compiled kernels (``_stagesc``) are imported only through ``kernels``.
    parts = {f"webdb.writer.{m.name}" for m in pkgutil.iter_modules(webdb.writer.__path__) if m.name[0] != "_"}
    forbidden = set(CONTRACTS["db-uses-the-writer-not-its-internals"]["forbidden_modules"])
    assert forbidden == parts - {"webdb.writer.writer"}, "list every module of webdb.writer but writer"


def test_no_import_cycle() -> None:
    """No module of webdb or fetchlist imports, even inside a function, a module that imports it
    back, directly or not.  In particular not through the db: webdb.core.db reaches the writer
    through db.writer() and the rack side of the writer reaches webdb.core.db, but never the one
    through the other; and the update driver picks its transport, which never imports it."""
    import grimp

    g = grimp.build_graph("webdb", "fetchlist", cache_dir=None)
    cycles = [
        (m, x)
        for m in sorted(g.modules)
        for x in sorted(g.find_modules_directly_imported_by(m))
        if x != m and g.chain_exists(importer=x, imported=m)
    ]
    assert cycles == [], [g.find_shortest_chain(importer=x, imported=m) for m, x in cycles[:5]]
