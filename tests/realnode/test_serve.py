"""`serve`, started as the DaemonSet starts it, over a real kubelet's life
(docs/real-node.md#serve): static pods added and removed while it runs, the kubelet
restarted (its socket gone, then back, its checkpoint reloaded), the exporter restarted, a
pod the kubelet refuses, and `doctor` on the node. One kubelet (1.37 on a 64-CPU AMD tree,
pod scope, pod-level gate on) for the whole module; the tests run in order."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from realnode.harness import (
    NODE_NAME,
    Node,
    NodeConfig,
    Serve,
)
from tests.realnode.checks import agreeing, anomalies
from tests.realnode.conftest import need_realnode
from tests.realnode.test_ledger import AMD, tree_workload

CONFIG = NodeConfig(version="1.37", tree=AMD, scope="pod", pod_level=True,
                    topology_policy="single-numa-node")


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    need_realnode(CONFIG.version)
    with Node(CONFIG) as n:
        yield n


@pytest.fixture(scope="module")
def serve(node: Node) -> Iterator[Serve]:
    s = node.start_serve()
    try:
        yield s
    finally:
        s.stop()


def agreed(node: Node, serve: Serve, running: set[str]) -> dict[str, Any]:
    """serve's ledger, polled at once (SIGHUP) until it is the kubelet's."""
    def read() -> dict[str, Any] | None:
        serve.reload()
        return serve.ledger()
    return agreeing(read, node, running)[0]


def test_static_pods_added_and_removed_while_serve_runs(node: Node, serve: Serve) -> None:
    running: set[str] = set()
    workload = tree_workload()
    for manifest in workload.values():
        running.add(node.add_pod(manifest))
        node.wait_pods(dict.fromkeys(running, "Running"))
        assert anomalies(agreed(node, serve, running)) == set()
    for name in ("legacy", "sidecar"):
        node.remove_pod(name)
        running.discard(f"{name}-{NODE_NAME}")
        node.wait_pods(dict.fromkeys(running, "Running"))
        assert anomalies(agreed(node, serve, running)) == set()
    assert re.search(r"^podres_up 1(\.0)?$", serve.metrics(), re.M)
