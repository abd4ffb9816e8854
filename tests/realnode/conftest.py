"""The real node for the tests (realnode/harness.py, docs/real-node.md). Without root, cgroup
v1, a mount namespace or Go every test here skips with one line; with
PODRES_REQUIRE_REALNODE=1 (CI) that is a failure instead.

Each test is a scenario: `make real-node` prints one line per scenario and
``real node: A/N scenarios agree`` last."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from realnode import build
from realnode.harness import Node, NodeConfig, unavailable

REQUIRED = os.environ.get("PODRES_REQUIRE_REALNODE") == "1"
_built: dict[str, str] = {}


def need_realnode(version: str) -> None:
    """Builds what ``version``'s node needs, or skips (fails under PODRES_REQUIRE_REALNODE=1)."""
    if version not in _built:
        reason = unavailable() or ""
        if not reason:
            try:
                build.fakecri()
                build.kubelet(version)
            except build.RealNodeUnavailable as exc:
                reason = str(exc).splitlines()[0]
        _built[version] = reason
    reason = _built[version]
    if not reason:
        return
    if REQUIRED:
        pytest.fail(f"real node {version} required (PODRES_REQUIRE_REALNODE=1): {reason}",
                    pytrace=False)
    pytest.skip(f"real node {version} unavailable: {reason}")


StartNode = Callable[[NodeConfig], Node]


@pytest.fixture
def start_node() -> Iterator[StartNode]:
    """``start_node(NodeConfig(...))`` builds what is missing, starts the node and stops it
    (every process, mount and cgroup) when the test ends, passed or failed."""
    nodes: list[Node] = []

    def start(config: NodeConfig) -> Node:
        need_realnode(config.version)
        node = Node(config)
        nodes.append(node)
        node.start()
        return node

    try:
        yield start
    finally:
        errors = []
        for node in reversed(nodes):
            try:
                node.stop()
            except Exception as exc:  # every node is stopped even if one fails to
                errors.append(str(exc))
        assert not errors, errors


# ---- one line per scenario ---------------------------------------------------------------

_outcomes: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/realnode/" not in report.nodeid.replace("\\", "/"):
        return
    name = report.nodeid.split("::", 1)[1]
    if report.when == "call" or report.outcome != "passed":
        if report.skipped:
            _outcomes.setdefault(name, "skipped")
        elif report.failed:
            _outcomes[name] = "DISAGREES" if report.when == "call" else "ERROR"
        else:
            _outcomes.setdefault(name, "agrees")


def pytest_unconfigure(config: pytest.Config) -> None:
    """After pytest's own last line, so that the agreement is the run's last line."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not _outcomes or reporter is None:
        return
    reporter.section("real node")
    for name, outcome in _outcomes.items():
        reporter.write_line(f"{outcome:9} {name}")
    agree = sum(o == "agrees" for o in _outcomes.values())
    reporter.write_line(f"real node: {agree}/{len(_outcomes)} scenarios agree")
