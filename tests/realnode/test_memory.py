"""Memory through the real kubelet's memory manager (docs/real-node.md#memory):
``memoryManagerPolicy: Static`` with memory reserved on each NUMA node (kubeReserved 1Gi +
evictionHard 100Mi = 1024Mi on node 0 + 100Mi on node 1), on a real machine's tree whose
``nodeN/meminfo`` gives the kubelet real sizes (2 NUMA nodes of 16 GiB). The exporter's
memory ledger (pools, pods, containers, ``podres_memory_bytes`` and
``podres_pod_memory_bytes``) must equal the kubelet's ``memory_manager_state``, read by
realnode/ckptdump with the kubelet's own Go types, and ``plan --node``'s free memory per NUMA
node must be the state's free memory:

- pods with memory under both topology manager scopes: a plain Guaranteed pod, one with two
  exclusive containers, a pod-level pod whose exclusive container and two containers on its
  pool hold the pod's memory;
- a block bigger than any NUMA node: the kubelet puts it on a group of nodes, fills them in
  order, and puts every later block on the same group.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from realnode import devtools
from realnode.harness import NODE_NAME, Node, NodeConfig, guaranteed_pod
from tests.realnode.checks import anomalies, assert_ledger_is_the_kubelets, uids
from tests.realnode.conftest import StartNode
from tests.realnode.test_devices import (
    TREE,
    VERSIONS,
    drop_in,
    need_tools,
    published,
    refuses_pooled,
)

GiB, MiB = 2**30, 2**20
POOLS = ("node_exclusive", "pod_exclusive", "pod_shared")


def start(start_node: StartNode, version: str, scope: str) -> Node:
    need_tools(version)
    return start_node(NodeConfig(version=version, tree=TREE, scope=scope, pod_level=True,
                                 topology_policy="best-effort", memory_policy="Static", extra={
                                     "reservedMemory": [
                                         {"numaNode": 0, "limits": {"memory": "1024Mi"}},
                                         {"numaNode": 1, "limits": {"memory": "100Mi"}}]}))


# ---- the judge: the kubelet's memory_manager_state with the pods' specs --------------------

Rows = dict[tuple[str, str, str], int]  # (pod, pool, memory type) -> bytes


def _by_type(blocks: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for b in blocks:
        out[b["type"]] = out.get(b["type"], 0) + b["size"]
    return out


def _own_memory(pod: dict[str, Any]) -> set[str]:
    """The containers whose spec gives them memory of their own (the others share)."""
    return {c["name"] for c in pod["spec"].get("containers", []) + pod["spec"].get(
        "initContainers", []) if "memory" in (c.get("resources") or {}).get("limits", {})}


def kubelet_memory(state: dict[str, Any], pods: dict[str, dict[str, Any]],
                   ) -> tuple[Rows, dict[tuple[str, str], str]]:
    """Each pod's memory by pool and type, and each container's memory assignment, as the
    state says: a pod with a pod-level entry holds that block, its containers with memory of
    their own are pod_exclusive (their entries), the others pod_shared (the rest of the
    block; each of their entries holds that same rest); a pod without one holds its
    containers' entries, node_exclusive."""
    rows: Rows = {}
    assignment: dict[tuple[str, str], str] = {}
    by_uid = {p["metadata"]["uid"]: name for name, p in pods.items()}
    for uid, containers in state["entries"].items():
        if uid not in by_uid:
            continue  # not running: a refused pod the kubelet has not swept yet
        name = by_uid[uid]
        own = _own_memory(pods[name])
        if uid in state["podEntries"]:
            total = _by_type(state["podEntries"][uid])
            exclusive = _by_type([b for c, bl in containers.items() if c in own for b in bl])
            for mtype, size in exclusive.items():
                rows[(name, "pod_exclusive", mtype)] = size
            for mtype, size in total.items():
                if size - exclusive.get(mtype, 0):
                    rows[(name, "pod_shared", mtype)] = size - exclusive.get(mtype, 0)
            for c in containers:
                assignment[(name, c)] = "pod_exclusive" if c in own else "pod_shared"
        else:
            for mtype, size in _by_type([b for bl in containers.values() for b in bl]).items():
                rows[(name, "node_exclusive", mtype)] = size
            for c in containers:
                assignment[(name, c)] = "node_exclusive"
    return rows, assignment


def pools_of(rows: Rows) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (_, pool, mtype), size in rows.items():
        out.setdefault(mtype, dict.fromkeys(POOLS, 0))[pool] += size
    return out


def assert_memory_is_the_kubelets(node: Node, version: str, running: set[str],
                                  ) -> dict[str, Any]:
    """serve's ledger and series, and plan --node, against memory_manager_state; the
    state."""
    serve = node.start_serve()
    try:
        ledger = published(node, serve, running)
        assert_ledger_is_the_kubelets(ledger, node, running)
        state = devtools.ckptdump(version, node.root)["memoryManager"]
        assert state["policyName"] == "Static"
        pods = {p["metadata"]["name"]: p for p in node.pods()
                if p["metadata"]["name"] in running}
        rows, assignment = kubelet_memory(state, pods)
        assert rows, "the scenario holds no memory: it proves nothing"
        # The node's pools.
        assert {t: p for t, p in ledger["memory_pools"].items() if any(p.values())} \
            == pools_of(rows)
        # Each container's memory assignment.
        shown = {(c["pod"], c["name"]): c["memory_assignment"] for c in ledger["containers"]}
        for key, pool in assignment.items():
            assert shown[key] == pool, (key, shown[key], pool)
        assert all(a == "node_shared" for k, a in shown.items() if k not in assignment), shown
        metrics = serve.metrics()
        # podres_pod_memory_bytes: the pods' rows exactly.
        series = {(d["pod"], d["pool"], d["memory_type"]): int(v)
                  for k, v in devtools.metric_samples(metrics, "podres_pod_memory_bytes").items()
                  for d in [dict(k)] if v}
        assert series == rows
        # podres_memory_bytes: the pools.
        node_series: dict[str, dict[str, int]] = {}
        for k, v in devtools.metric_samples(metrics, "podres_memory_bytes").items():
            d = dict(k)
            node_series.setdefault(d["memory_type"], dict.fromkeys(POOLS, 0))[d["pool"]] = int(v)
        assert {t: p for t, p in node_series.items() if any(p.values())} == pools_of(rows)
        assert_checkpoint_facts(metrics, node, version)
    finally:
        serve.stop()
    assert_free_memory_is_the_kubelets(node, state, {p["metadata"]["uid"] for p in pods.values()})
    return ledger


def assert_checkpoint_facts(metrics: str, node: Node, version: str) -> None:
    """The exporter's own parser (exporter/sources/checkpoint.py) names each file's format
    as the kubelet's types read it, and the downgrade trap (the 1.36 podEntries formats)."""
    dump = devtools.ckptdump(version, node.root)
    formats = {"cpu_manager_state": dump["cpuManager"]["format"],
               "memory_manager_state": dump["memoryManager"]["format"]}
    shown = {dict(k)["file"]: dict(k)["format"]
             for k in devtools.metric_samples(metrics, "podres_checkpoint_info")}
    assert shown == formats
    trap = formats["cpu_manager_state"] == "v3" or formats["memory_manager_state"] == "v2"
    (unsafe,) = devtools.metric_samples(metrics, "podres_checkpoint_downgrade_unsafe").values()
    assert unsafe == (1.0 if trap else 0.0)


def stale_memory(state: dict[str, Any], running: set[str]) -> dict[int, int]:
    """What the state still holds per NUMA node for pods the kubelet does not run (uids not
    in ``running``): 1.36 reserves a refused pod's first container and keeps it until a
    later sweep. No PodResources answer shows it, so the exporter cannot."""
    held: dict[int, int] = {}
    for uid, containers in state["entries"].items():
        if uid in running:
            continue
        for blocks in containers.values():
            for b in blocks:
                if b["type"] == "memory" and len(b["numaAffinity"]) == 1:
                    n = b["numaAffinity"][0]
                    held[n] = held.get(n, 0) + b["size"]
    return held


def assert_free_memory_is_the_kubelets(node: Node, state: dict[str, Any],
                                       running: set[str]) -> None:
    """plan --node seeds its model with the memory the kubelet has left per NUMA node (less
    what the kubelet holds for pods it does not run, see ``stale_memory``) and with the NUMA
    groups its blocks hold (``cells`` of the nodes with assignments)."""
    manifest = node.workdir / "plan-probe.json"
    manifest.write_text(json.dumps(guaranteed_pod("probe", cpu="1", memory="64Mi")))
    done = node.exporter("plan", "--node", "-f", str(manifest), "-o", "json")
    assert done.returncode == 0, done.stderr
    seeded = json.loads(done.stdout)["node"]
    free = {m["numa_node"]: m["bytes"] for m in seeded["free_memory"]}
    stale = stale_memory(state, running)
    kubelet = {int(n): s["memoryMap"]["memory"]["free"] + stale.get(int(n), 0)
               for n, s in state["machineState"].items()}
    assert free == kubelet
    if not stale:  # blocks of pods it does not run hold their groups too
        groups = {tuple(sorted(s["cells"])) for s in state["machineState"].values()
                  if s.get("numberOfAssignments")}
        assert {tuple(g) for g in seeded["memory_groups"]} == groups


# ---- the scenarios -------------------------------------------------------------------------


def pooled() -> dict[str, Any]:
    """A pod-level pod: an exclusive container and two on the pod's pool."""
    return guaranteed_pod("pooled", memory="768Mi", pod_resources=("3", "2Gi"),
                          containers=(("app", "1"), ("log", None), ("mesh", None)))


def workload(version: str, scope: str) -> list[dict[str, Any]]:
    pods = [guaranteed_pod("plain", cpu="2", memory="1Gi"),
            guaranteed_pod("pair", memory="512Mi", containers=(("a", "1"), ("b", "1")))]
    return pods if refuses_pooled(version, scope) else [*pods, pooled()]


@pytest.mark.parametrize("scope", ["container", "pod"])
@pytest.mark.parametrize("version", VERSIONS)
def test_memory_ledger_is_memory_manager_state(start_node: StartNode, version: str,
                                               scope: str) -> None:
    node = start(start_node, version, scope)
    pods = drop_in(node, *workload(version, scope))
    running = set(pods)
    assert {n: p["status"]["phase"] for n, p in pods.items()} == dict.fromkeys(
        running, "Running")
    ledger = assert_memory_is_the_kubelets(node, version, running)
    # Real sizes: the machine state holds the tree's NUMA node sizes, less what is reserved.
    state = devtools.ckptdump(version, node.root)["memoryManager"]
    memory = {int(n): s["memoryMap"]["memory"] for n, s in state["machineState"].items()}
    assert memory[0]["total"] == 16747124 * 1024  # node0/meminfo MemTotal
    assert memory[1]["total"] == 16777216 * 1024
    assert (memory[0]["systemReserved"], memory[1]["systemReserved"]) == (1024 * MiB, 100 * MiB)
    assert anomalies(ledger) == expected_anomalies(version, scope)


def expected_anomalies(version: str, scope: str) -> set[tuple[str, str]]:
    """1.36 reports a pod-level pod's pool once per container on it (the 1.36 pattern)."""
    if version == "1.36" and scope == "pod":
        return {("legacy_shared_report", f"pooled-{NODE_NAME}")}
    return set()


@pytest.mark.parametrize("version", VERSIONS)
def test_memory_over_a_group_of_numa_nodes(start_node: StartNode, version: str) -> None:
    """16Gi fits no NUMA node (~15 and ~16 GiB allocatable): the kubelet gives the container
    both, fills node 0 first, and every later block joins the group. plan --node must see
    node 0 full (it once counted a group's blocks evenly on its nodes)."""
    node = start(start_node, version, "container")
    pods = drop_in(node, guaranteed_pod("big", cpu="2", memory="16Gi"),
                   guaranteed_pod("pair", memory="512Mi", containers=(("a", "1"), ("b", "1"))))
    running = set(pods)
    assert {n: p["status"]["phase"] for n, p in pods.items()} == dict.fromkeys(
        running, "Running")
    ledger = assert_memory_is_the_kubelets(node, version, running)
    state = devtools.ckptdump(version, node.root)["memoryManager"]
    names = uids(node)
    blocks = [b for c in state["entries"][names[f"big-{NODE_NAME}"]].values() for b in c]
    assert [b["numaAffinity"] for b in blocks] == [[0, 1]]
    assert state["machineState"]["0"]["memoryMap"]["memory"]["free"] == 0
    assert anomalies(ledger) == set()


def test_memory_1_36_refuses_a_pod_level_pod_under_the_container_scope(
        start_node: StartNode) -> None:
    """What the exporter shows for the pod 1.36 refuses (see ``refuses_pooled``): not the
    pod, no anomaly, the running pods' memory as the kubelet holds it."""
    node = start(start_node, "1.36", "container")
    pods = drop_in(node, guaranteed_pod("plain", cpu="2", memory="1Gi"), pooled())
    refused = f"pooled-{NODE_NAME}"
    status = pods[refused]["status"]
    assert status["phase"] == "Failed"
    assert "preferred hint violates NUMA node allocation" in status["message"]
    running = set(pods) - {refused}
    ledger = assert_memory_is_the_kubelets(node, "1.36", running)
    assert refused not in {c["pod"] for c in ledger["containers"]}
    assert anomalies(ledger) == set()
    # The kubelet still holds the refused pod's exclusive container (768Mi on one node).
    state = devtools.ckptdump("1.36", node.root)["memoryManager"]
    running_uids = {p["metadata"]["uid"] for n, p in pods.items() if n in running}
    assert sum(stale_memory(state, running_uids).values()) == 768 * MiB
