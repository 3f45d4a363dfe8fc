"""Shared fixtures: paths, and a real coordinator + workers on loopback."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import dependencies  # noqa: E402
import sluice_cluster  # noqa: E402


class _ModuleNotBuilt(pytest.Module):
    """A test file collected without importing it, because the sluice module it imports is not
    built: it skips (fails under CI=true, dependencies.missing) saying what to build."""

    def collect(self):
        dependencies.missing(dependencies.sluice_module_missing())
        return []


def pytest_pycollect_makemodule(module_path, parent):
    """Every test file imports sluice: without the built module, each is collected as
    _ModuleNotBuilt instead of being imported (the default collector otherwise)."""
    if dependencies.sluice_module_missing() is None:
        return None
    return _ModuleNotBuilt.from_parent(parent, path=module_path)


@pytest.fixture
def cluster():
    dependencies.require_binaries()
    c = sluice_cluster.Cluster(num_workers=2)
    yield c
    c.stop()


def pytest_terminal_summary(terminalreporter):
    """Prints the line CTest's SKIP_REGULAR_EXPRESSION looks for (tests/CMakeLists.txt) when
    every test collected skipped and none ran, so that such a file shows as Skipped in CTest
    rather than Passed; with the reasons. Nothing when a test passed, failed or errored (a file
    with some skips passes or fails as its other tests do; `-rs` lists the skips)."""
    stats = terminalreporter.stats
    skipped = stats.get("skipped", [])
    ran = sum(len(stats.get(k, [])) for k in ("passed", "failed", "error", "xfailed", "xpassed"))
    if not skipped or ran:
        return
    reasons = set()
    for report in skipped:
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
        reasons.add(reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason)
    terminalreporter.write_line("SLUICE_PYTEST_ALL_SKIPPED: %d skipped, none ran: %s"
                                % (len(skipped), "; ".join(sorted(reasons))))
