"""The exporter's ledger against the real kubelet's CPU manager (docs/real-node.md#ledger):
on the host's CPUs and on two real machines' trees, for both topology manager scopes, with
PodLevelResourceManagers on and off, on 1.37 and 1.36. One kubelet start per case: the
workload is dropped in as static pods, the exporter runs `snapshot` as the DaemonSet would,
and its ledger must equal the kubelet's `cpu_manager_state` with only the anomalies the case
makes."""

from __future__ import annotations

from typing import Any

import pytest

from realnode.harness import (
    NODE_NAME,
    Node,
    NodeConfig,
    burstable_pod,
    guaranteed_pod,
)
from tests.realnode.checks import agreeing, anomalies
from tests.realnode.conftest import StartNode

INTEL = "16em64t-4s2c2t"  # 4 sockets x 2 cores x 2 threads, one NUMA node
AMD = "64amd64-4s2n4ca2co"  # 4 packages x 2 NUMA nodes, 4 L3 caches per package


def tree_workload() -> dict[str, dict[str, Any]]:
    """A legacy pod, a pod-level pod with two containers on its shared pool, one with an
    exclusive app and a sidecar on the pool, and a burstable pod."""
    return {
        "legacy": guaranteed_pod("legacy", cpu="2"),
        "pooled": guaranteed_pod("pooled", containers=(("app", "1"), ("log", None),
                                                       ("mesh", None)),
                                 pod_resources=("3", "384Mi")),
        "sidecar": guaranteed_pod("sidecar", containers=(("app", "1"),),
                                  sidecars=(("proxy", None),), pod_resources=("2", "256Mi")),
        "burst": burstable_pod("burst"),
    }


def host_workload() -> dict[str, dict[str, Any]]:
    """The host has two CPUs, CPU 0 reserved, so one CPU to allocate: one pod-level pod of
    one CPU shared by two containers, and a BestEffort pod."""
    return {
        "pooled": guaranteed_pod("pooled", containers=(("log", None), ("mesh", None)),
                                 pod_resources=("1", "128Mi")),
        "besteffort": burstable_pod("besteffort", cpu=None),
    }


def drop_in(node: Node, workload: dict[str, dict[str, Any]]) -> set[str]:
    names = {node.add_pod(m) for m in workload.values()}
    node.wait_pods(dict.fromkeys(names, "Running"))
    return names


CASES = [
    # version, tree, scope, PodLevelResourceManagers
    ("1.37", AMD, "pod", True),
    ("1.37", AMD, "container", True),
    ("1.37", AMD, "pod", False),
    ("1.37", INTEL, "pod", True),
    ("1.37", None, "pod", True),
    ("1.36", AMD, "pod", True),
    ("1.36", INTEL, "container", True),
    ("1.36", None, "pod", False),
]


@pytest.mark.parametrize(("version", "tree", "scope", "gate"), CASES,
                         ids=[f"{v}-{t or 'host'}-{s}-{'gate' if g else 'nogate'}"
                              for v, t, s, g in CASES])
def test_the_ledger_is_the_kubelets_cpu_manager(start_node: StartNode, version: str,
                                                tree: str | None, scope: str,
                                                gate: bool) -> None:
    node = start_node(NodeConfig(version=version, tree=tree, scope=scope, pod_level=gate,
                                 topology_policy="single-numa-node"))
    running = drop_in(node, tree_workload() if tree else host_workload())
    ledger, state = agreeing(node.snapshot, node, running)
    found = anomalies(ledger)
    assert found == expected_anomalies(version, scope, gate, state, node), found


def expected_anomalies(version: str, scope: str, gate: bool, state: Any,
                       node: Node) -> set[tuple[str, str]]:
    """1.36 with the gate on holds a pod-level block but reports none: each container on
    the pool lists it as its own CPUs, which the exporter flags (two containers listing the
    same pool; a sidecar without requests listing CPUs)."""
    if version == "1.36" and gate and scope == "pod":
        pooled = ("pooled", "sidecar") if node.config.tree else ("pooled",)
        return {("legacy_shared_report", f"{p}-{NODE_NAME}") for p in pooled}
    return set()
