"""`serve`, started as the DaemonSet starts it, over a real kubelet's life
(docs/real-node.md#serve): static pods added and removed while it runs, the kubelet
restarted (its socket gone, then back, its checkpoint reloaded), the exporter restarted, a
pod the kubelet refuses, and `doctor` on the node. One kubelet (1.37 on a 64-CPU AMD tree,
pod scope, pod-level gate on) for the whole module; the tests run in order."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from realnode.harness import (
    NODE_NAME,
    Node,
    NodeConfig,
    Serve,
    guaranteed_pod,
    wait_for,
)
from tests.realnode.checks import KubeletCPUState, agreeing, anomalies, uids
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
    # The kubelet's /pods with no pod yet (items: null) is no failing source.
    assert "source failing" not in serve.log.read_text()


def running_now(node: Node) -> set[str]:
    return {n for n, phase in node.phases().items() if phase == "Running"}


def test_a_kubelet_restart(node: Node, serve: Serve) -> None:
    """The socket goes and serve says the kubelet is down; the kubelet comes back, reloads
    its checkpoint and admits its static pods again. A legacy pod keeps its CPUs. A pod-level
    pod with containers on its shared pool is refused: the second admission asks hints from
    what each container holds, and a pool container holds CPUs while it asks for none
    (policy_static.go GetPodTopologyHints: "CPUs already allocated to container with
    different number than request"), so single-numa-node fails the pod; the model's restart
    says the same (reconciler/allocator/restart.py). serve then agrees with the kubelet."""
    legacy = node.add_pod(tree_workload()["legacy"])
    running = running_now(node) | {legacy}
    node.wait_pods(dict.fromkeys(running, "Running"))
    agreed(node, serve, running)
    before = KubeletCPUState.read(node)
    uid = uids(node)
    node.stop_kubelet()
    assert not node.socket_answers()

    def down() -> bool:
        serve.reload()
        return bool(re.search(r"^podres_up 0(\.0)?$", serve.metrics(), re.M))
    wait_for(down, 30, "serve to say the kubelet is down")
    node.start_kubelet()
    pooled = f"pooled-{NODE_NAME}"
    pods = node.wait_pods({**dict.fromkeys(running, "Running"), pooled: "Failed"})
    status = pods[pooled]["status"]
    assert status.get("reason") == "TopologyAffinityError", status
    assert "pod-level resources failed admission" in status.get("message", ""), status
    running.discard(pooled)
    assert anomalies(agreed(node, serve, running)) == set()
    after = KubeletCPUState.read(node)
    assert after.containers[uid[legacy]] == before.containers[uid[legacy]]
    assert uid[pooled] not in after.containers and uid[pooled] not in after.pods
    node.remove_pod("pooled")
    wait_for(lambda: pooled not in node.phases(), 60, "the refused pod to go")


def test_an_exporter_restart(node: Node, serve: Serve) -> None:
    """serve started again, with the same environment and history file, publishes the same
    ledger."""
    running = running_now(node)
    first = agreed(node, serve, running)
    node.restart_serve(serve)
    second = agreed(node, serve, running)

    def same(key: str) -> list[str]:
        return sorted(json.dumps(x, sort_keys=True) for x in first[key]), \
            sorted(json.dumps(x, sort_keys=True) for x in second[key])
    for key in ("pods", "containers", "anomalies"):
        assert same(key)[0] == same(key)[1], key
    assert first["cpu_pools"] == second["cpu_pools"]


def test_a_pod_the_kubelet_refuses(node: Node, serve: Serve) -> None:
    """Nine CPUs on a machine of eight CPUs per NUMA node, under single-numa-node: the
    kubelet fails the pod (TopologyAffinityError) and holds nothing for it; the exporter
    does not count it and the other pods are unchanged."""
    running = running_now(node)
    refused = node.add_pod(guaranteed_pod("toobig", cpu="9"))
    pods = wait_for(lambda: {p["metadata"]["name"]: p for p in node.pods()
                             if p["metadata"]["name"] == refused
                             and p.get("status", {}).get("phase") == "Failed"},
                    60, "the kubelet to refuse the pod")
    status = pods[refused]["status"]
    assert status.get("reason") == "TopologyAffinityError", status
    uid = pods[refused]["metadata"]["uid"]
    state = KubeletCPUState.read(node)
    assert uid not in state.containers and uid not in state.pods
    ledger = agreed(node, serve, running)
    assert refused not in {p["name"] for p in ledger["pods"]}
    assert anomalies(ledger) == set()
    node.remove_pod("toobig")
    wait_for(lambda: refused not in node.phases(), 60, "the refused pod to go")


def test_doctor_on_the_real_node(node: Node) -> None:
    """Every check reads the real kubelet. Two fail, rightly: the memory manager (None
    here), and the CPU topology: this AMD machine's kernel pairs CPUs 0-1, 2-3, ... as
    thread siblings (compute units) with distinct core_ids, and the kubelet counts 64
    cores, so full-pcpus-only would not keep the pairs together."""
    done = node.exporter("doctor", "-o", "json")
    assert done.returncode == 1, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    failing = {n for n, c in checks.items() if c["status"] != "pass"}
    assert failing == {"Static memory manager policy", "kubelet's view of the CPU topology"}
    assert "siblings_split" in checks["kubelet's view of the CPU topology"]["detail"]
    assert "64 CPUs allocatable" not in checks["reserved CPUs leave room"]["detail"]
    assert "63 CPUs allocatable" in checks["reserved CPUs leave room"]["detail"]
