"""The simulated nodes of the fleet end-to-end test: each node's kubelet state (written as a
fixture directory, served by ``exporter.sim``), and what its stand-in kubelet publishes to
Prometheus (cAdvisor series with cAdvisor's real label set, resource-manager counters).

Two clusters reuse namespace and pod names: ``shop/web`` runs in cluster a on node-a1 and in
cluster b on node-b1, with different CPU usage.

- node-a1 (cluster a, pod-level managers on): shop/web with the app exclusive (2 CPUs) and
  two sidecars in a 1-CPU pod shared pool busy at 95 %; the app throttled in 20 % of its CFS
  periods, and holding one of the node's two GPUs, whose use a dcgm-exporter stand-in
  publishes (``dcgm_exposition``). Its exporter listens on ``[::1]``.
- node-a2 (a): a db pod with a pod-level budget and a batch worker; its kubelet dies during
  the test.
- node-a3 (a): anomalies: exclusive_overlap (batch/worker inside shop/cart's block) and
  empty_pod_shared_pool (shop/cart); the kubelet counts allocation errors (1.37 names).
- node-a4 (a): the 1.36 reporting pattern (legacy_shared_report of ads/bidder), a v3
  checkpoint (downgrade unsafe), and /pods forbidden (a failing source).
- node-a5 (a): a scrape target without an exporter (up == 0).
- node-b1 (cluster b): shop/web again, sidecars at 30 %, the app throttled in 5 %.
- node-b2 (b): pod-level managers off; a padding pod (1 reclaimable core).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1 << 30

TOPOLOGY = {"cpus": [{"id": i, "core": i, "socket": 0, "numa_node": 0} for i in range(8)],
            "memory": [{"numa_node": 0, "bytes": 64 * GIB}]}
ALLOCATABLE = {"cpuIds": [str(i) for i in range(1, 8)],
               "memory": [{"memoryType": "memory", "size": str(60 * GIB),
                           "topology": {"nodes": [{"ID": "0"}]}}]}


def configz(pod_level: bool) -> dict[str, Any]:
    return {"kubeletconfig": {
        "cpuManagerPolicy": "static", "memoryManagerPolicy": "None",
        "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
        "reservedSystemCPUs": "0",
        "featureGates": {"PodLevelResources": pod_level, "PodLevelResourceManagers": pod_level}}}


def container(name: str, cpus: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if cpus:
        out["cpuIds"] = [str(c) for c in cpus]
    return out


def pod_resources(namespace: str, name: str, containers: list[dict[str, Any]],
                  block: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": namespace, "name": name, "containers": containers}
    if block:
        out["cpuIds"] = [str(c) for c in block]
    return out


def spec(namespace: str, name: str, containers: dict[str, int | None],
         budget: int | None = None) -> dict[str, Any]:
    """A Guaranteed pod: containers with an integer CPU request (= limit) or none."""
    def res(cpu: int | None) -> dict[str, Any]:
        if cpu is None:
            return {}
        q = {"cpu": str(cpu), "memory": "1Gi"}
        return {"requests": q, "limits": q}

    pod: dict[str, Any] = {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}-{name}"},
        "spec": {"containers": [{"name": c, "image": f"{c}:1", "resources": res(cpu)}
                                for c, cpu in containers.items()]},
        "status": {"phase": "Running", "qosClass": "Guaranteed"}}
    if budget is not None:
        q = {"cpu": str(budget), "memory": f"{budget}Gi"}
        pod["spec"]["resources"] = {"requests": q, "limits": q}
    return pod


@dataclass
class Usage:
    """cAdvisor series of one container: CPU seconds per second, CFS periods per second and
    the throttled fraction of them."""

    namespace: str
    pod: str
    container: str
    cpu: float
    periods: float = 0.0
    throttled: float = 0.0


@dataclass
class Node:
    name: str
    cluster: str
    listing: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] | None = None
    pod_level: bool = True
    usage: list[Usage] = field(default_factory=list)
    # kubelet resource-manager counters: (metric name, labels, per-second rate)
    kubelet_counters: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    checkpoint: str | None = None          # cpu_manager_state content
    forbidden: set[str] = field(default_factory=set)
    listen_ipv6: bool = False
    exporter: bool = True                  # False: a scrape target nobody listens on
    devices: list[dict[str, Any]] = field(default_factory=list)  # allocatable devices

    def write_fixture(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        files: dict[str, Any] = {
            "list.json": {"podResources": self.listing},
            "allocatable.json": {**ALLOCATABLE, "devices": self.devices},
            "configz.json": configz(self.pod_level),
            "topology.json": TOPOLOGY,
        }
        if self.pods is not None:
            files["pods.json"] = {"kind": "PodList", "apiVersion": "v1", "items": self.pods}
        for name, obj in files.items():
            (directory / name).write_text(json.dumps(obj))
        return directory


SHOP_WEB = [pod_resources("shop", "web", [container("mesh-proxy"), container("log-shipper"),
                                          container("app", [2, 3])], block=[2, 3, 4])]
# Two GPUs on NUMA node 0 (ids as NVIDIA's device plugin reports them: the UUIDs); the app
# of node-a1's shop/web holds the first.
GPUS = ["GPU-5fd4a1d2-0c1e-4f6a-9a8e-1b2c3d4e5f60", "GPU-77aa0b3c-2d4e-4a1b-8c9d-0e1f2a3b4c5d"]
GPU_DEVICES = [{"resourceName": "nvidia.com/gpu", "deviceIds": [g],
                "topology": {"nodes": [{"ID": "0"}]}} for g in GPUS]
# A third GPU, of NVIDIA's DRA driver, through the claim shop/web-gpu: PodResources names it
# by claim, driver, pool and device (dynamic_resources), dcgm-exporter by the same (dra_*).
DRA_GPU = {"uuid": "GPU-0c9e2f41-6b7d-4e3a-8f21-5a6b7c8d9e0f", "device": "gpu-2",
           "claim": {"claimNamespace": "shop", "claimName": "web-gpu", "claimResources": [
               {"driverName": "gpu.nvidia.com", "poolName": "node-a1", "deviceName": "gpu-2",
                "cdiDevices": [{"name": "k8s.gpu.nvidia.com/device=gpu-2"}]}]}}
SHOP_WEB_GPU = [pod_resources("shop", "web", [
    container("mesh-proxy"), container("log-shipper"),
    {**container("app", [2, 3]), "devices": [GPU_DEVICES[0]],
     "dynamicResources": [DRA_GPU["claim"]]}], block=[2, 3, 4])]
SHOP_WEB_SPEC = [spec("shop", "web", {"mesh-proxy": None, "log-shipper": None, "app": 2},
                      budget=3)]
V3_CHECKPOINT = json.dumps({
    "policyName": "static", "defaultCpuSet": "0-1,5-7",
    "entries": {"uid-ads-bidder": {"bidder": "2-3", "proxy": "4", "shipper": "4"}},
    "podEntries": {"uid-ads-bidder": {"cpuSet": "2-4"}}, "checksum": 1})


def fleet() -> list[Node]:
    return [
        Node("node-a1", "a", SHOP_WEB_GPU, SHOP_WEB_SPEC, listen_ipv6=True,
             devices=GPU_DEVICES, usage=[
            Usage("shop", "web", "mesh-proxy", 0.6, periods=10, throttled=0.5),
            Usage("shop", "web", "log-shipper", 0.35),
            Usage("shop", "web", "app", 1.9, periods=10, throttled=0.2)],
            kubelet_counters=[
                ("resource_manager_allocations_total", {"resource_name": "cpu",
                                                        "source": "pod"}, 0.1),
                ("resource_manager_allocation_errors_total", {"resource_name": "cpu",
                                                              "source": "pod"}, 0.0)]),
        Node("node-a2", "a", [
            pod_resources("db", "pg", [container("exporter"), container("postgres", [4, 5])],
                          block=[4, 5, 6]),
            pod_resources("batch", "worker", [container("worker", [2])])],
            [spec("db", "pg", {"exporter": None, "postgres": 2}, budget=3),
             spec("batch", "worker", {"worker": 1})]),
        Node("node-a3", "a", [
            pod_resources("shop", "cart", [container("mesh-proxy"),
                                           container("app", [2, 3])], block=[2, 3]),
            pod_resources("batch", "worker", [container("worker", [3])])],
            [spec("shop", "cart", {"mesh-proxy": None, "app": 2}, budget=2),
             spec("batch", "worker", {"worker": 1})],
            usage=[Usage("shop", "cart", "app", 1.0)],
            kubelet_counters=[
                ("kubelet_resource_manager_allocation_errors_total",
                 {"resource_name": "cpu", "source": "pod"}, 0.5)]),
        Node("node-a4", "a", [
            pod_resources("ads", "bidder", [container("bidder", [2, 3]),
                                            container("proxy", [4]),
                                            container("shipper", [4])])],
            None, checkpoint=V3_CHECKPOINT, forbidden={"/pods"}),
        Node("node-a5", "a", exporter=False),
        Node("node-b1", "b", SHOP_WEB, SHOP_WEB_SPEC, usage=[
            Usage("shop", "web", "mesh-proxy", 0.2),
            Usage("shop", "web", "log-shipper", 0.1),
            Usage("shop", "web", "app", 1.5, periods=10, throttled=0.05)]),
        Node("node-b2", "b", [
            pod_resources("shop", "legacy", [container("app", [2, 3]),
                                             container("proxy", [4]),
                                             container("shipper", [5])])],
            [spec("shop", "legacy", {"app": 2, "proxy": 1, "shipper": 1})], pod_level=False),
    ]


# --- the stand-in kubelet's Prometheus endpoints --------------------------------------

def _labels(d: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in d.items())


def _stamped(lines: list[str], now: float) -> str:
    """Every sample with the time its value was computed for (Prometheus honours explicit
    timestamps): 5 s rates stay exact however late a loaded machine answers a scrape."""
    ms = int(now * 1000)
    return "\n".join(line if line.startswith("#") else f"{line} {ms}" for line in lines) + "\n"


def cadvisor_exposition(node: Node, t0: float) -> str:
    """/metrics/cadvisor as the kubelet serves it: per container ``container``, ``cpu``,
    ``id``, ``image``, ``name``, ``namespace``, ``pod``; plus the pod's own cgroup
    (``container=""``) and its sandbox, which are not containers."""
    now = time.time()
    elapsed = now - t0
    usage, periods, throttled = [], [], []
    pods: dict[tuple[str, str], float] = {}
    for i, u in enumerate(node.usage):
        base = {"container": u.container, "cpu": "total",
                "id": f"/kubepods.slice/kubepods-pod{u.pod}.slice/cri-containerd-{i:04x}.scope",
                "image": f"docker.io/library/{u.container}:1", "name": f"{i:064x}",
                "namespace": u.namespace, "pod": u.pod}
        usage.append(f"container_cpu_usage_seconds_total{{{_labels(base)}}} "
                     f"{100 + u.cpu * elapsed:.6f}")
        if u.periods:
            del base["cpu"]
            periods.append(f"container_cpu_cfs_periods_total{{{_labels(base)}}} "
                           f"{1000 + u.periods * elapsed:.6f}")
            throttled.append(f"container_cpu_cfs_throttled_periods_total{{{_labels(base)}}} "
                             f"{10 + u.periods * u.throttled * elapsed:.6f}")
        pods[(u.namespace, u.pod)] = pods.get((u.namespace, u.pod), 0.0) + u.cpu
    for (ns, pod), cpu in pods.items():
        cgroup = f"/kubepods.slice/kubepods-pod{pod}.slice"
        usage.append(f'container_cpu_usage_seconds_total{{container="",cpu="total",'
                     f'id="{cgroup}",image="",name="",namespace="{ns}",pod="{pod}"}} '
                     f"{300 + cpu * elapsed:.6f}")
        usage.append(f'container_cpu_usage_seconds_total{{container="",cpu="total",'
                     f'id="{cgroup}/cri-containerd-ffff.scope",image="registry.k8s.io/pause:3.10",'
                     f'name="{"f" * 64}",namespace="{ns}",pod="{pod}"}} {1 + 0.001 * elapsed:.6f}')
    out = ["# TYPE container_cpu_usage_seconds_total counter", *usage]
    if periods:
        out += ["# TYPE container_cpu_cfs_periods_total counter", *periods,
                "# TYPE container_cpu_cfs_throttled_periods_total counter", *throttled]
    return _stamped(out, now)


def dcgm_exposition(node: Node) -> str:
    """GPU utilisation as dcgm-exporter publishes it with its pod mapping on (label names
    from its internal/pkg/transformation/const.go and its default counters): the GPU a
    container holds carries that container's namespace, pod and container; an idle GPU
    carries none."""
    held = {d: (pod["namespace"], pod["name"], c["name"])
            for pod in node.listing for c in pod["containers"]
            for dev in c.get("devices", ()) for d in dev["deviceIds"]}
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
             "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for i, dev in enumerate(node.devices):
        [uuid] = dev["deviceIds"]
        labels = {"gpu": str(i), "UUID": uuid, "pci_bus_id": f"00000000:{0x17 + i:02X}:00.0",
                  "device": f"nvidia{i}", "modelName": "NVIDIA A100-SXM4-40GB",
                  "Hostname": node.name}
        if uuid in held:
            ns, pod, ctr = held[uuid]
            labels.update(container=ctr, namespace=ns, pod=pod)
        lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{_labels(labels)}}} {87 if uuid in held else 3}")
    # A GPU held through a DRA claim: dcgm-exporter's DRA mapping labels it with the pod and
    # the claim device as PodResources' dynamic_resources reports them.
    claims = [(pod, c, claim, r) for pod in node.listing for c in pod["containers"]
              for claim in c.get("dynamicResources", ()) for r in claim["claimResources"]]
    for i, (pod, c, claim, r) in enumerate(claims, start=len(node.devices)):
        labels = {"gpu": str(i), "UUID": DRA_GPU["uuid"], "device": f"nvidia{i}",
                  "modelName": "NVIDIA A100-SXM4-40GB", "Hostname": node.name,
                  "container": c["name"], "dra_claim_name": claim["claimName"],
                  "dra_claim_namespace": claim["claimNamespace"],
                  "dra_device_name": r["deviceName"], "dra_driver_name": r["driverName"],
                  "dra_pool_name": r["poolName"], "namespace": pod["namespace"],
                  "pod": pod["name"]}
        lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{_labels(labels)}}} 64")
    return "\n".join(lines) + "\n"


def resource_exposition(node: Node, t0: float) -> str:
    """/metrics/resource: the same usage under the same name, without cAdvisor's labels."""
    now = time.time()
    elapsed = now - t0
    lines = ["# TYPE container_cpu_usage_seconds_total counter"]
    for u in node.usage:
        lines.append(f'container_cpu_usage_seconds_total{{container="{u.container}",'
                     f'namespace="{u.namespace}",pod="{u.pod}"}} {100 + u.cpu * elapsed:.6f}')
    return _stamped(lines, now)


def kubelet_exposition(node: Node, t0: float) -> str:
    now = time.time()
    elapsed = now - t0
    lines = []
    for name, labels, rate in node.kubelet_counters:
        lines += [f"# TYPE {name} counter", f"{name}{{{_labels(labels)}}} {rate * elapsed:.6f}"]
    lines.append(f'kubernetes_feature_enabled{{name="PodLevelResourceManagers",stage="BETA"}} '
                 f"{1 if node.pod_level else 0}")
    return _stamped(lines, now)


# --- the node's kernel files (--cgroup.root, --proc.root) ------------------------------

# Busy fraction of every CPU of a pool (the simulated /proc/stat): the kernel panels' values.
POOL_LOAD = {"reserved": 0.1, "node_shared": 0.2, "pod_exclusive": 0.3, "pod_shared": 0.9,
             "node_exclusive": 0.6, "pod_idle": 0.0}


class KernelFiles:
    """A node's cgroup tree, exactly what its ledger implies (so no cpuset_drift), and a
    /proc/stat whose CPUs are busy at their pool's POOL_LOAD; ``tick`` as time passes."""

    def __init__(self, fixture: Path, workdir: Path) -> None:
        from exporter.commands.snapshot import ledger_from_fixture
        from exporter.sim.cgroupfs import ProcStatWriter, per_cpu_load, write_cgroup_tree
        from reconciler.enforcement import EnforcementOptions, expected_cpusets
        from reconciler.usage import cpu_holders

        ledger = ledger_from_fixture(str(fixture))
        online = [cell.id for cell in ledger.cpu_map]
        self.cgroup_root = workdir / "cgroup"
        self.proc_root = workdir / "proc"
        write_cgroup_tree(self.cgroup_root, _tree(fixture, ledger, expected_cpusets(
            ledger, EnforcementOptions())), online)
        self.load = per_cpu_load(cpu_holders(ledger), POOL_LOAD)
        self.online = online
        ProcStatWriter(self.proc_root / "stat", online)  # there before the exporter starts

    def clock_spec(self) -> dict[str, Any]:
        """What :func:`run_clock` needs to advance this node's /proc/stat."""
        return {"path": str(self.proc_root / "stat"), "cpus": self.online,
                "load": {str(cpu): f for cpu, f in self.load.items()}}


def run_clock(specs: list[dict[str, Any]], period: float = 0.25) -> None:
    """Advance every node's /proc/stat as real time passes, until killed. Run in a process
    of its own (``python fleet_nodes.py SPECS_JSON``): in the test's process, threads
    answering queries delayed it by seconds and every busy fraction read low."""
    from exporter.sim.cgroupfs import ProcStatWriter

    writers = [(ProcStatWriter(s["path"], s["cpus"]),
                {int(cpu): f for cpu, f in s["load"].items()}) for s in specs]
    last = time.monotonic()
    while True:
        time.sleep(period)
        now = time.monotonic()
        for writer, load in writers:
            writer.advance(now - last, load)
        last = now


def _tree(fixture: Path, ledger: Any, expected: Any) -> list[Any]:
    """The pods of the fixture's /pods as the kubelet's cgroups hold them: each container
    (and the sandbox, on the node's shared CPUs) on what the ledger expects."""
    from exporter.sim.cgroupfs import TreeContainer, TreePod, container_id

    path = fixture / "pods.json"
    items = json.loads(path.read_text())["items"] if path.exists() else []
    shared = frozenset(c.id for c in ledger.cpu_map if c.pool in ("node_shared", "reserved"))
    pods = []
    for item in items:
        meta, spec_ = item["metadata"], item["spec"]
        key = (meta["namespace"], meta["name"])
        uid = meta["uid"]
        names = [c["name"] for c in spec_.get("initContainers", []) + spec_["containers"]]
        containers = [TreeContainer(container_id(uid, ""), shared)] + [
            TreeContainer(container_id(uid, n),
                          expected.containers.get((*key, n), ("", shared))[1])
            for n in names]
        qos = item.get("status", {}).get("qosClass", "Guaranteed")
        pods.append(TreePod(uid, qos, expected.pods.get(key, frozenset()), tuple(containers)))
    return pods


if __name__ == "__main__":
    import sys

    run_clock(json.loads(sys.argv[1]))
