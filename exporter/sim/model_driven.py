"""The model-driven simulated kubelet: pods from Kubernetes manifests are placed by the
allocator model (``reconciler.allocator``) as the kubelet would place them, rejected where
it would reject them, and served over the real PodResources socket and HTTPS endpoint in the
reporting style of a chosen kubelet version.

The manifests path (a file or a directory of ``.yaml``/``.yml``/``.json`` files) is polled,
and re-read on SIGHUP: pods that appear are admitted, pods that disappear are released, a pod
whose spec changed is released and admitted again. So churn can be simulated by editing
files.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.errors import UserError
from exporter.manifest_files import has_manifests, load_templates
from exporter.pb import api_pb2
from reconciler.allocator.devices import NodeDevices
from reconciler.allocator.model import ModelConfig, NodeModel, PodPlacement, Rejection
from reconciler.allocator.report import (
    STYLES,
    pod_list_json,
    report_allocatable,
    report_pods,
)
from reconciler.allocator.topology import CPUTopology
from reconciler.kube import PodSpec
from reconciler.manifests import PodTemplate
from reconciler.snapshot import Allocatable, DeviceAlloc, PodAlloc

if TYPE_CHECKING:
    from exporter.sources.fixture import KubeletState



def pods_from_templates(templates: Iterable[PodTemplate]) -> list[PodSpec]:
    """Concrete pods: a bare Pod keeps its name, controllers get ``name-0``, ``name-1``…
    (``replicas`` / ``parallelism``; one for DaemonSet and CronJob)."""
    pods: list[PodSpec] = []
    for t in templates:
        names = [t.name] if t.kind == "Pod" else [f"{t.name}-{i}" for i in range(t.replicas)]
        for name in names:
            uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"podres-sim/{t.namespace}/{name}"))
            pods.append(replace(t.pod, name=name, namespace=t.namespace, uid=uid,
                                qos_class=None))
    return pods


@dataclass
class ChangeReport:
    admitted: list[PodPlacement]
    rejected: list[Rejection]
    released: list[tuple[str, str]]


class ModelDrivenNode:
    """The model plus the bookkeeping a kubelet does around it (rejected pods stay listed
    as Failed in ``/pods``), rendered as a :class:`KubeletState`."""

    def __init__(self, topology: CPUTopology, config: ModelConfig, reporting: str = "1.37",
                 *, node_name: str = "sim-node", devices: NodeDevices | None = None) -> None:
        if reporting not in STYLES:
            raise UserError(f"--reporting must be one of {', '.join(STYLES)}")
        if reporting == "1.35":
            config = replace(config, pod_level=False)
        self.reporting = reporting
        self.node_name = node_name
        self.model = NodeModel(topology, config, devices)
        self.rejected: dict[tuple[str, str], tuple[PodSpec, Rejection]] = {}
        # The kubelet's own counters (docs/design.md#sources), as it would expose them on
        # /metrics.
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    def add(self, pod: PodSpec) -> PodPlacement | Rejection:
        key = (pod.namespace, pod.name)
        self.rejected.pop(key, None)
        result = self.model.admit(pod)
        if isinstance(result, Rejection):
            self.rejected[key] = (pod, result)
        self._count(pod, result)
        return result

    def _inc(self, name: str, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0) + 1

    def _count(self, pod: PodSpec, result: PodPlacement | Rejection) -> None:
        legacy = self.reporting == "1.35"
        prefix = "kubelet_" if self.reporting == "1.37" else ""
        if isinstance(result, Rejection):
            if result.reason.startswith("topology affinity"):
                self._inc("kubelet_topology_manager_admission_errors_total")
            if legacy:
                self._inc("kubelet_cpu_manager_pinning_errors_total")
            else:
                pod_path = self.config.pod_level and self.config.scope == "pod" \
                    and pod.budget_cpus is not None
                source = "pod" if pod_path else "node"
                self._inc(f"{prefix}resource_manager_allocation_errors_total",
                          resource_name="cpu", source=source)
            return
        if legacy:
            for c in result.containers:
                if c.exclusive:
                    self._inc("kubelet_cpu_manager_pinning_requests_total")
            return
        if result.block:
            self._inc(f"{prefix}resource_manager_allocations_total", resource_name="cpu",
                      source="pod")
        for c in result.containers:
            if c.exclusive and not result.block:
                self._inc(f"{prefix}resource_manager_allocations_total",
                          resource_name="cpu", source="node")
            if c.assignment != "node_shared":
                self._inc(f"{prefix}resource_manager_container_assignments",
                          resource_name="cpu", assignment_type=c.assignment)

    def metrics_text(self) -> str:
        """``/metrics``: feature gates and the resource managers' counters."""
        gates = {"PodLevelResources": True,
                 "PodLevelResourceManagers": self.config.pod_level}
        lines = ["# TYPE kubernetes_feature_enabled gauge"]
        for name, on in sorted(gates.items()):
            lines.append(f'kubernetes_feature_enabled{{name="{name}",stage="BETA"}} '
                         f"{1 if on else 0}")
        typed: set[str] = set()
        for (name, labels), value in sorted(self.counters.items()):
            if name not in typed:
                typed.add(name)
                lines.append(f"# TYPE {name} counter")
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.append(f"{name}{{{text}}} {value}" if text else f"{name} {value}")
        return "\n".join(lines) + "\n"

    def delete(self, namespace: str, name: str) -> bool:
        gone = self.rejected.pop((namespace, name), None) is not None
        return self.model.release(namespace, name) is not None or gone

    def sync(self, desired: Sequence[PodSpec]) -> ChangeReport:
        """Make the node run exactly ``desired``: release what went away or changed, then
        admit what is new, in order."""
        want = {(p.namespace, p.name): p for p in desired}
        report = ChangeReport([], [], [])
        current: dict[tuple[str, str], PodSpec] = {k: p.spec for k, p in self.model.pods.items()}
        current.update({k: spec for k, (spec, _) in self.rejected.items()})
        for key, spec in current.items():
            if want.get(key) != spec:
                self.delete(*key)
                report.released.append(key)
        for key, pod in want.items():
            if key in self.model.pods or key in self.rejected:
                continue
            result = self.add(pod)
            if isinstance(result, Rejection):
                report.rejected.append(result)
            else:
                report.admitted.append(result)
        return report

    def state(self) -> KubeletState:
        from exporter.sources.convert import allocatable_to_proto, pods_to_proto
        from exporter.sources.fixture import KubeletState

        pods = report_pods(self.model, self.reporting)
        listing = pods_to_proto(pods)
        alloc = report_allocatable(self.model)
        allocatable = allocatable_to_proto(alloc)
        _set_devices(listing, allocatable, pods, alloc)
        configz = self.config.to_configz()
        kc = configz["kubeletconfig"]
        assert isinstance(kc, dict)
        if self.reporting == "1.35":
            kc["featureGates"] = {"PodLevelResources": True}
        return KubeletState(listing, allocatable,
                            pod_list_json(self.model, self.rejected.values()), configz,
                            self.metrics_text())

    def topology_json(self) -> dict[str, object]:
        return self.model.topo.to_json()

    def summary(self) -> str:
        topo = self.model.topo
        devices = "".join(f", {len(devs)} {name}" for name, devs in self.model.devices.resources)
        return (f"{len(topo.online)} CPUs{devices}, {len(topo.numa_nodes)} NUMA node(s), reporting "
                f"{self.reporting}, scope {self.config.scope}, topology policy "
                f"{self.config.topology_policy}: {len(self.model.pods)} pod(s) placed, "
                f"{len(self.rejected)} rejected")


def _devices_to_proto(devices: Iterable[DeviceAlloc]) -> list[api_pb2.ContainerDevices]:
    return [api_pb2.ContainerDevices(
        resource_name=d.resource_name, device_ids=list(d.device_ids),
        topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in d.numa_nodes])
        if d.numa_nodes else None) for d in devices]


def _set_devices(listing: api_pb2.ListPodResourcesResponse,
                 allocatable: api_pb2.AllocatableResourcesResponse,
                 pods: Sequence[PodAlloc], alloc: Allocatable) -> None:
    """Each container's devices and the node's, as the kubelet reports them
    (``containerDevicesFromResourceDeviceInstances``: one entry a device and NUMA node).
    Replaces what is there, so it holds whether or not the conversion fills them."""
    for pod_pb, pod in zip(listing.pod_resources, pods, strict=True):
        for c_pb, c in zip(pod_pb.containers, pod.containers, strict=True):
            del c_pb.devices[:]
            c_pb.devices.extend(_devices_to_proto(c.devices))
    del allocatable.devices[:]
    allocatable.devices.extend(_devices_to_proto(alloc.devices))


# ---- manifests on disk ---------------------------------------------------------------


def fingerprint(path: Path) -> bytes:
    """Changes when a file under ``path`` (a file or a directory) changes."""
    h = hashlib.blake2b(digest_size=16)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f}:{st.st_mtime_ns}:{st.st_size}\n".encode())
    return h.digest()


def desired_pods(path: str | None) -> list[PodSpec]:
    """The pods the manifests at ``path`` describe (none for an empty directory)."""
    if not path:
        return []
    p = Path(path)
    if p.is_dir() and not has_manifests(p):
        return []
    return pods_from_templates(load_templates([path]))
