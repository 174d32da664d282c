"""A skipped test proves nothing, so a run with a skip nobody allowed fails.

Every skip (and xfail) must match an entry of tests/allowed_skips.toml: the test (a glob on its node
id) or a marker it carries, a regular expression its skip reason must contain, where it is allowed,
and why. An xpass always fails: its xfail marker is stale. The run's exit status becomes 1 and the
terminal summary names each unallowed outcome.

Where an entry applies (`runs`):
  all    every run, CI included (a skip no machine CI runs on can avoid)
  local  only with RLJOB_SKIP_POLICY=local: a tool that CI installs (scripts/install-system-deps.sh,
         which scripts/test.sh runs first) may be missing on a machine where pytest is run directly

Environment: RLJOB_SKIP_POLICY=strict (default) or local; RLJOB_ALLOWED_SKIPS=<path> reads
another allow-list (the policy's own tests use it).
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

DEFAULT_ALLOW_LIST = Path(__file__).with_name("allowed_skips.toml")
POLICY_ENV = "RLJOB_SKIP_POLICY"
ALLOW_LIST_ENV = "RLJOB_ALLOWED_SKIPS"
MODES = ("strict", "local")
PLUGIN_NAME = "rljob-skip-policy"


@dataclass(frozen=True)
class Allowance:
    runs: str  # "all" or "local"
    reason: re.Pattern[str]
    why: str
    test: str | None = None  # glob on the node id
    marker: str | None = None

    def matches(self, nodeid: str, markers: set[str], reason: str) -> bool:
        if self.test is not None and not fnmatch.fnmatchcase(nodeid, self.test):
            return False
        if self.marker is not None and self.marker not in markers:
            return False
        return self.reason.search(reason) is not None


def load_allow_list(path: Path) -> list[Allowance]:
    """Entries of the allow-list; a malformed entry is a usage error that names it."""
    try:
        entries = tomllib.loads(path.read_text()).get("allow", [])
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise pytest.UsageError(f"skip policy: cannot read {path}: {e}") from e
    allowances = []
    for i, entry in enumerate(entries):
        where = f"{path} [[allow]] #{i + 1}"
        unknown = set(entry) - {"test", "marker", "reason", "runs", "why"}
        if unknown:
            raise pytest.UsageError(f"skip policy: {where}: unknown keys {sorted(unknown)}")
        if not (entry.get("test") or entry.get("marker")):
            raise pytest.UsageError(f"skip policy: {where}: needs `test` (a node-id glob) or `marker`")
        if entry.get("runs") not in ("all", "local"):
            raise pytest.UsageError(f'skip policy: {where}: `runs` must be "all" or "local"')
        if not entry.get("reason") or not entry.get("why"):
            raise pytest.UsageError(f"skip policy: {where}: `reason` (a regex) and `why` are required")
        try:
            reason = re.compile(entry["reason"])
        except re.error as e:
            raise pytest.UsageError(f"skip policy: {where}: `reason` is not a regular expression: {e}") from e
        allowances.append(
            Allowance(runs=entry["runs"], reason=reason, why=entry["why"], test=entry.get("test"), marker=entry.get("marker"))
        )
    return allowances


def policy_mode() -> str:
    mode = os.environ.get(POLICY_ENV, "strict") or "strict"
    if mode not in MODES:
        raise pytest.UsageError(f"skip policy: {POLICY_ENV}={mode!r}; use one of {', '.join(MODES)}")
    return mode


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


class SkipPolicy:
    def __init__(self, allowances: list[Allowance], mode: str) -> None:
        self.allowances = [a for a in allowances if a.runs == "all" or mode == "local"]
        self.mode = mode
        self.violations: list[tuple[str, str, str]] = []  # (outcome, node id, reason)
        self.allowed: list[tuple[str, str, str]] = []

    def _judge(self, outcome: str, nodeid: str, markers: set[str], reason: str) -> None:
        allowed = outcome != "xpassed" and any(a.matches(nodeid, markers, reason) for a in self.allowances)
        (self.allowed if allowed else self.violations).append((outcome, nodeid, reason))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:  # a module-level skip or importorskip: every test in it is gone
            self._judge("skipped", report.nodeid, set(), _skip_reason(report))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        markers = {k for k, v in report.keywords.items() if v}
        xfail_reason = getattr(report, "wasxfail", None)
        if report.skipped and xfail_reason is not None:
            self._judge("xfailed", report.nodeid, markers, xfail_reason)
        elif report.skipped:
            self._judge("skipped", report.nodeid, markers, _skip_reason(report))
        elif report.passed and xfail_reason is not None and report.when == "call":
            self._judge("xpassed", report.nodeid, markers, xfail_reason)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.violations and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.violations:
            return
        tr = terminalreporter
        tr.section("skip policy: outcomes no entry of the allow-list permits", sep="=", red=True, bold=True)
        for outcome, nodeid, reason in self.violations:
            tr.write_line(f"{outcome.upper()} {nodeid}: {reason}")
        tr.write_line(
            f"{len(self.violations)} unallowed (policy {self.mode}): make the test run, or add an entry with its "
            f"reason to {os.environ.get(ALLOW_LIST_ENV) or DEFAULT_ALLOW_LIST}"
            + ("; on a machine without CI's system packages, RLJOB_SKIP_POLICY=local" if self.mode == "strict" else "")
        )


def install(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    path = Path(os.environ.get(ALLOW_LIST_ENV) or DEFAULT_ALLOW_LIST)
    config.pluginmanager.register(SkipPolicy(load_allow_list(path), policy_mode()), PLUGIN_NAME)


def pytest_configure(config: pytest.Config) -> None:
    """So `-p tests.skip_policy` installs it where tests/conftest.py is not loaded."""
    install(config)
