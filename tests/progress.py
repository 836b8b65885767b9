"""Two session-wide plugins for the suite, registered by tests/conftest.py.

``FileProgress``: one line per finished test file (``tests/test_x.py: 23 passed, 1 failed
(41.2 s of test time)``) instead of a dot per test, with or without pytest-xdist: under xdist
the controller learns each file's test count from the workers' collection and prints the line
when the file's last test is torn down, whichever worker ran it.

``SkipsFailInCI``: with ``CI=true`` (``1``/``yes``) in the environment a skipped test fails the
session (exit 1), and the summary lists every skip with its reason; a skip on a developer's
machine stays a skip.  CI installs what the tests need (``make deps``), so a skip there means a
test silently did not run.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest

ORDER = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _outcome(rep: pytest.TestReport, seen: str | None) -> str | None:
    """The test's outcome so far, given this phase's report and the earlier phases' outcome."""
    if hasattr(rep, "wasxfail"):
        return "xfailed" if rep.skipped else "xpassed"
    if rep.failed:
        return "failed" if rep.when == "call" else (seen if seen == "failed" else "error")
    if rep.skipped:
        return "skipped"
    return seen or ("passed" if rep.when == "call" else None)


class FileProgress:
    """Counts reports per file; prints a file's line once all its tests are done."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.total: Counter[str] = Counter()
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.seconds: Counter[str] = Counter()
        self.outcome: dict[str, str | None] = {}
        self.printed: set[str] = set()

    def pytest_sessionstart(self) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None and self.config.get_verbosity() <= 0:
            tr.showfspath = False  # no "tests/test_x.py " header: the file's line comes at its end

    def _expect(self, nodeids: list[str]) -> None:
        if not self.total:
            self.total.update(_file(n) for n in nodeids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._expect([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self._expect(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config):
        # No per-test letter: the per-file lines are the progress, the summary names failures
        # and skips.  The category still counts in the final tally; -v keeps pytest's own lines.
        if config.get_verbosity() > 0 or hasattr(report, "wasxfail"):
            return None
        if report.failed:
            return ("failed", "", "FAILED") if report.when == "call" else ("error", "", "ERROR")
        if report.skipped:
            return "skipped", "", "SKIPPED"
        return ("passed", "", "PASSED") if report.when == "call" else ("", "", "")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        f = _file(report.nodeid)
        self.seconds[f] += report.duration
        self.outcome[report.nodeid] = _outcome(report, self.outcome.get(report.nodeid))
        if report.when != "teardown":
            return
        self.counts[f][self.outcome.pop(report.nodeid, None) or "passed"] += 1
        if sum(self.counts[f].values()) >= self.total.get(f, 0):
            self._print(f)

    def pytest_sessionfinish(self) -> None:
        for f in list(self.counts):  # files cut short (a crashed worker, -x, Ctrl-C)
            self._print(f, unfinished=True)

    def _print(self, f: str, unfinished: bool = False) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if f in self.printed or tr is None:
            return
        self.printed.add(f)
        c = self.counts[f]
        parts = [f"{c[k]} {k}" for k in ORDER if c[k]]
        of = f" of {self.total[f]}" if unfinished and self.total.get(f) else ""
        red = c["failed"] or c["error"]
        tr.ensure_newline()
        tr.write_line(
            f"{f}: {', '.join(parts)}{of} ({self.seconds[f]:.1f} s of test time)",
            red=bool(red),
            green=not red and not unfinished,
        )


def register(config: pytest.Config) -> None:
    """Register both plugins on the controller (xdist workers only send their reports)."""
    if hasattr(config, "workerinput"):
        return
    config.pluginmanager.register(FileProgress(config), "webdb-file-progress")
    if in_ci():
        config.pluginmanager.register(SkipsFailInCI(), "webdb-skips-fail-in-ci")


def pytest_configure(config: pytest.Config) -> None:
    """As a plugin of its own (``-p progress``), e.g. for a session outside this suite."""
    register(config)


class SkipsFailInCI:
    """Under CI=true, any skipped test fails the session; the reasons are listed."""

    def __init__(self) -> None:
        self.skips: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            lr = report.longrepr  # (path, line, reason); a list once it crossed from an xdist worker
            reason = lr[2] if isinstance(lr, (tuple, list)) else str(lr)
            self.skips.append((report.nodeid, reason))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.skips:
            return
        terminalreporter.section("skipped under CI=true: each one is a failure", sep="=", red=True, bold=True)
        for nodeid, reason in self.skips:
            terminalreporter.write_line(f"SKIPPED {nodeid}: {reason}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.skips and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
