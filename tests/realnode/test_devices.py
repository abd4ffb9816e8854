"""Devices through the real kubelet's device manager (docs/real-node.md#devices): a device
plugin on the kubelet's own API (realnode/deviceplugin) registers fake GPUs and NICs with
NUMA affinity, static pods ask for them, and the exporter's device ledger, its
``device_numa_misaligned`` anomaly and its ``podres_devices`` series must match the kubelet's
own device checkpoint (``kubelet_internal_checkpoint``, read by realnode/ckptdump with the
kubelet's Go types, not by the exporter's code) and its admission result:

- aligned: each pod's devices on the NUMA node of its CPUs (container and pod scope, the GPU
  plugin answering GetPreferredAllocation, a NIC without topology);
- misaligned under best-effort: the GPUs of NUMA node 0 taken, node 1's CPUs taken, a pod
  asking for a GPU is admitted with its CPUs on node 0 and its GPU on node 1;
- refused under single-numa-node: the same pod is refused (TopologyAffinityError) and the
  exporter shows nothing allocated to it and no anomaly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from realnode import devtools
from realnode.harness import NODE_NAME, Node, NodeConfig, Serve, guaranteed_pod, wait_for
from tests.realnode.checks import anomalies, assert_ledger_is_the_kubelets, cpus, uids
from tests.realnode.conftest import REQUIRED, StartNode

# 2 NUMA nodes of 8 CPUs (0-7, 8-15), ~16 GiB each (its node meminfo); CPU 0 reserved.
TREE = "32em64t-2n8c+dax+nvme+mic+dimms"
NUMA_OF = {c: c // 8 for c in range(16)}
GPU, NIC = "example.com/gpu", "example.com/nic"
# The GPU plugin answers GetPreferredAllocation (it prefers the highest id it may give);
# the NIC plugin does not, and nic2 has no topology.
DEVICES: list[dict[str, Any]] = [
    {"name": GPU, "preferredAllocation": True, "devices": [
        {"id": "gpu0", "numa": [0]}, {"id": "gpu1", "numa": [0]},
        {"id": "gpu2", "numa": [1]}, {"id": "gpu3", "numa": [1]}]},
    {"name": NIC, "devices": [
        {"id": "nic0", "numa": [0]}, {"id": "nic1", "numa": [1]}, {"id": "nic2", "numa": []}]},
]


def need_tools(version: str) -> None:
    """The device plugin and the kubelet ``version``'s checkpoint reader, built if missing;
    a skip without Go (a failure under PODRES_REQUIRE_REALNODE=1)."""
    try:
        devtools.device_plugin_binary()
        devtools.ckptdump_binary(version)
    except devtools.ToolUnavailable as exc:
        reason = str(exc).splitlines()[0]
        if REQUIRED:
            pytest.fail(f"real-node tools required (PODRES_REQUIRE_REALNODE=1): {reason}",
                        pytrace=False)
        pytest.skip(f"real-node tools unavailable: {reason}")


def with_devices(manifest: dict[str, Any], container: str, **devices: int) -> dict[str, Any]:
    """``manifest`` with ``container`` asking for devices (``gpu=1``, ``nic=1``), requests
    equal to limits as the API server wants for extended resources."""
    for c in manifest["spec"]["containers"]:
        if c["name"] == container:
            res = c.setdefault("resources", {"requests": {}, "limits": {}})
            for kind, n in devices.items():
                for side in ("requests", "limits"):
                    res.setdefault(side, {})[f"example.com/{kind}"] = str(n)
    return manifest


@contextmanager
def plugged(node: Node) -> Iterator[devtools.DevicePlugin]:
    """The plugin, serving DEVICES in the kubelet's device-plugin directory (the kubelet's
    fixed /var/lib/kubelet/device-plugins, the node's private one), registered."""
    with devtools.DevicePlugin(node.root / "device-plugins", DEVICES,
                               log=node.logs / "deviceplugin.jsonl") as plugin:
        yield plugin


def published(node: Node, serve: Serve, running: set[str]) -> dict[str, Any]:
    """serve's ledger once it lists exactly ``running`` (SIGHUP: poll at once)."""
    def settled() -> dict[str, Any] | None:
        serve.reload()
        ledger = serve.ledger()
        return ledger if ledger and {p["name"] for p in ledger["pods"]} == running else None
    return wait_for(settled, 30, f"serve to publish {sorted(running)}", interval=0.5)


# ---- the judge: the kubelet's device checkpoint --------------------------------------------

Held = dict[tuple[str, str, str], dict[str, frozenset[int]]]  # (pod, container, resource)


def kubelet_devices(dump: dict[str, Any], names: dict[str, str]) -> Held:
    """Who holds which device on which NUMA nodes, as the device checkpoint says (-1: the
    device has no topology)."""
    held: Held = {}
    by_uid = {uid: name for name, uid in names.items()}
    for e in dump["deviceManager"]["podDeviceEntries"]:
        row = held.setdefault((by_uid[e["podUID"]], e["containerName"], e["resourceName"]), {})
        for numa, ids in e["deviceIDs"].items():
            for i in ids:
                row.setdefault(i, frozenset())
                if int(numa) >= 0:
                    row[i] |= {int(numa)}
    return held


def exporter_devices(ledger: dict[str, Any]) -> Held:
    held: Held = {}
    for c in ledger["devices"]["containers"]:
        for d in c["devices"]:
            row = held.setdefault((c["pod"], c["container"], d["resource"]), {})
            for i in d["device_ids"]:
                row[i] = row.get(i, frozenset()) | frozenset(d["numa_nodes"])
    return held


def expected_counts(held: Held) -> dict[str, dict[str, dict[str, int]]]:
    """``devices.by_resource`` as it must be: the plugin's devices per NUMA node ("none"
    without topology), those the checkpoint gives someone assigned, the rest free."""
    taken = {(r, i) for (_, _, r), ids in held.items() for i in ids}
    out: dict[str, dict[str, dict[str, int]]] = {}
    for res in DEVICES:
        for d in res["devices"]:
            for numa in [str(n) for n in d["numa"]] or ["none"]:
                row = out.setdefault(res["name"], {}).setdefault(
                    numa, {"allocatable": 0, "assigned": 0, "free": 0})
                row["allocatable"] += 1
                row["assigned" if (res["name"], d["id"]) in taken else "free"] += 1
    return out


def assert_devices_are_the_kubelets(ledger: dict[str, Any], node: Node, serve: Serve,
                                    version: str, running: set[str]) -> Held:
    """The exporter's device ledger and ``podres_devices`` equal the kubelet's device
    checkpoint; its CPU ledger equals ``cpu_manager_state`` (tests/realnode/checks.py)."""
    assert_ledger_is_the_kubelets(ledger, node, running)
    dump = devtools.ckptdump(version, node.root, node.root / "device-plugins")
    registered = {r: sorted(d["id"] for d in res["devices"])
                  for res in DEVICES for r in [res["name"]]}
    assert dump["deviceManager"]["registeredDevices"] == registered
    held = kubelet_devices(dump, uids(node))
    assert exporter_devices(ledger) == held
    by_resource = expected_counts(held)
    assert ledger["devices"]["by_resource"] == by_resource
    series = devtools.metric_samples(serve.metrics(), "podres_devices")
    want = {(r, "" if n == "none" else n, state): float(v)
            for r, nodes in by_resource.items() for n, row in nodes.items()
            for state, v in row.items()}
    got = {(dict(k)["resource"], dict(k)["numa_node"], dict(k)["state"]): v
           for k, v in series.items()}
    assert got == want
    return held


def anomaly_series(serve: Serve) -> dict[str, float]:
    return {dict(k)["kind"]: v
            for k, v in devtools.metric_samples(serve.metrics(), "podres_anomalies").items()}


def numa_of(cpuset: str) -> set[int]:
    return {NUMA_OF[c] for c in cpus(cpuset)}


# ---- the scenarios -------------------------------------------------------------------------

VERSIONS = ("1.37", "1.36")


def start(start_node: StartNode, version: str, policy: str, scope: str) -> Node:
    need_tools(version)
    return start_node(NodeConfig(version=version, tree=TREE, scope=scope, pod_level=True,
                                 topology_policy=policy, memory_policy="Static", extra={
                                     "reservedMemory": [
                                         {"numaNode": 0, "limits": {"memory": "1024Mi"}},
                                         {"numaNode": 1, "limits": {"memory": "100Mi"}}]}))


def drop_in(node: Node, *manifests: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each pod in turn, once the one before is settled (the order makes the placement)."""
    want: dict[str, str] = {}
    pods: dict[str, dict[str, Any]] = {}
    for m in manifests:
        name = node.add_pod(m)
        want[name] = "Running"

        def settled(name: str = name) -> dict[str, Any] | None:
            try:
                got = {p["metadata"]["name"]: p for p in node.pods()}
            except OSError:  # the read-only port comes up after the PodResources socket
                return None
            return got if got.get(name, {}).get("status", {}).get("phase") in (
                "Running", "Failed") else None
        pods = wait_for(settled, 60, f"{name} admitted or refused")
    return pods


@pytest.mark.parametrize("scope", ["container", "pod"])
@pytest.mark.parametrize("version", VERSIONS)
def test_devices_aligned(start_node: StartNode, version: str, scope: str) -> None:
    node = start(start_node, version, "best-effort", scope)
    with plugged(node) as plugin:
        workload = [
            with_devices(guaranteed_pod("train", cpu="2", memory="256Mi"), "app", gpu=1),
            with_devices(guaranteed_pod("edge", cpu="1", memory="256Mi"), "app", gpu=1, nic=1),
        ]
        if not refuses_pooled(version, scope):
            # A pod-level pod: the GPU container exclusive, two containers on its pool.
            workload.append(with_devices(guaranteed_pod(
                "pooled", memory="256Mi", containers=(("app", "1"), ("log", None),
                                                      ("mesh", None)),
                pod_resources=("3", "1Gi")), "app", gpu=1))
        pods = drop_in(node, *workload)
        running = set(pods)
        assert {n: (p["status"]["phase"], p["status"].get("message")) for n, p in pods.items()} \
            == dict.fromkeys(running, ("Running", None))
        serve = node.start_serve()
        try:
            ledger = published(node, serve, running)
            held = assert_devices_are_the_kubelets(ledger, node, serve, version, running)
            # Aligned, by the kubelet's own files: every device with topology sits on the
            # NUMA node of its container's CPUs.
            state = devtools.ckptdump(version, node.root)["cpuManager"]
            names = uids(node)
            for (pod, container, _), ids in held.items():
                where = numa_of(state["entries"][names[pod]][container])
                for numa in ids.values():
                    assert numa <= where, (pod, container, ids, where)
            # The kubelet asked the GPU plugin which GPU to give when it had a choice.
            assert plugin.events("preferred"), plugin.events()
            assert anomalies(ledger) == expected_aligned_anomalies(version, scope)
            series = anomaly_series(serve)
            assert series["device_numa_misaligned"] == 0
        finally:
            serve.stop()


def refuses_pooled(version: str, scope: str) -> bool:
    """1.36 under the container scope refuses a pod-level pod with containers on its pool
    once any NUMA node holds memory for one container alone (its own exclusive container's,
    or another pod's): such a container gets no hint from any provider, so the default one
    (every NUMA node), and the Static policy refuses a multi-node affinity over a node with
    single-node allocations ("[memorymanager] preferred hint violates NUMA node
    allocation", UnexpectedAdmissionError). 1.37 admits it."""
    return version == "1.36" and scope == "container"


def expected_aligned_anomalies(version: str, scope: str) -> set[tuple[str, str]]:
    """1.36 reports a pod-level pod's pool once per container on it (the 1.36 pattern)."""
    if version == "1.36" and scope == "pod":
        return {("legacy_shared_report", f"pooled-{NODE_NAME}")}
    return set()


def contended() -> list[dict[str, Any]]:
    """NUMA node 1's CPUs taken, then both GPUs of node 0, then a pod asking for a GPU: only
    node 1 has one, only node 0 has CPUs."""
    return [
        guaranteed_pod("filler", cpu="8", memory="256Mi"),
        with_devices(guaranteed_pod("gpuhog", cpu="1", memory="256Mi"), "app", gpu=2),
        with_devices(guaranteed_pod("late", cpu="2", memory="256Mi"), "app", gpu=1),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_devices_misaligned_under_best_effort(start_node: StartNode, version: str) -> None:
    """Then the kubelet restarts: its device-plugin directory is emptied, the plugin
    registers again, the device checkpoint is reloaded, and the exporter shows the same."""
    node = start(start_node, version, "best-effort", "container")
    with plugged(node) as plugin:
        pods = drop_in(node, *contended())
        running = set(pods)
        assert {n: p["status"]["phase"] for n, p in pods.items()} == dict.fromkeys(
            running, "Running")
        serve = node.start_serve()
        try:
            late = f"late-{NODE_NAME}"
            first: Held = {}
            for restarted in (False, True):
                if restarted:
                    node.restart_kubelet()
                    plugin.wait_registered(2)
                    node.wait_pods(dict.fromkeys(running, "Running"))
                ledger = published(node, serve, running)
                held = assert_devices_are_the_kubelets(ledger, node, serve, version, running)
                assert held == (first or held)  # the restart keeps every allocation
                first = held
                # Misaligned, by the kubelet's own files: CPUs on node 0, its GPU on node 1.
                state = devtools.ckptdump(version, node.root)["cpuManager"]
                cpus_at = numa_of(state["entries"][uids(node)[late]]["app"])
                gpu_at = set().union(*held[(late, "app", GPU)].values())
                assert cpus_at == {0} and gpu_at == {1}, (restarted, cpus_at, gpu_at)
                assert anomalies(ledger) == {("device_numa_misaligned", late)}
                (found,) = ledger["anomalies"]
                assert found["container"] == "app"
                assert "best-effort" in found["detail"]
                assert anomaly_series(serve)["device_numa_misaligned"] == 1
        finally:
            serve.stop()
    # The plugin removed its sockets when it stopped.
    assert not list((node.root / "device-plugins").glob("fake-*.sock"))


@pytest.mark.parametrize("version", VERSIONS)
def test_devices_refused_under_single_numa_node(start_node: StartNode, version: str) -> None:
    node = start(start_node, version, "single-numa-node", "container")
    with plugged(node):
        pods = drop_in(node, *contended())
        late = f"late-{NODE_NAME}"
        status = pods[late]["status"]
        assert (status["phase"], status.get("reason")) == ("Failed", "TopologyAffinityError")
        running = set(pods) - {late}
        serve = node.start_serve()
        try:
            ledger = published(node, serve, running)
            held = assert_devices_are_the_kubelets(ledger, node, serve, version, running)
            # Nothing allocated to it: not in the checkpoint, not in the ledger.
            assert not [k for k in held if k[0] == late]
            assert late not in {c["pod"] for c in ledger["containers"]}
            assert anomalies(ledger) == set()
            assert anomaly_series(serve)["device_numa_misaligned"] == 0
        finally:
            serve.stop()
