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

import argparse
import asyncio
import contextlib
import hashlib
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.errors import UserError
from exporter.flags import add_flag, parse_duration
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

if TYPE_CHECKING:
    from exporter.sources.fixture import KubeletState

REPORTING = STYLES


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
                 *, node_name: str = "sim-node") -> None:
        if reporting not in REPORTING:
            raise UserError(f"--reporting must be one of {', '.join(REPORTING)}")
        if reporting == "1.35":
            config = replace(config, pod_level=False)
        self.reporting = reporting
        self.node_name = node_name
        self.model = NodeModel(topology, config)
        self.rejected: dict[tuple[str, str], tuple[PodSpec, Rejection]] = {}
        # The kubelet's own counters (SPEC §2.5), as it would expose them on /metrics.
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

        listing = pods_to_proto(report_pods(self.model, self.reporting))
        allocatable = allocatable_to_proto(report_allocatable(self.model))
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
        return (f"{len(topo.online)} CPUs, {len(topo.numa_nodes)} NUMA node(s), reporting "
                f"{self.reporting}, scope {self.config.scope}, topology policy "
                f"{self.config.topology_policy}: {len(self.model.pods)} pod(s) placed, "
                f"{len(self.rejected)} rejected")


# ---- command line ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The model-driven flags of ``sim`` (``--socket``/``--http-listen`` are sim's own)."""
    from exporter.commands.plan import add_model_flags

    add_model_flags(parser)
    add_flag(parser, "--manifests", default=None, metavar="PATH",
             help="manifest file or directory of pods to place (polled for changes)")
    add_flag(parser, "--reporting", default="1.37", choices=REPORTING,
             help="which kubelet's reporting style to serve")
    add_flag(parser, "--manifests-poll", default="1s", type=parse_duration,
             metavar="DURATION", help="how often the manifests path is checked for changes")
    add_flag(parser, "--topology-file", default=None, metavar="FILE",
             help="also write the modelled node's topology.json here (for the exporter's "
             "--topology)")


def _fingerprint(path: Path) -> bytes:
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
    if not path:
        return []
    from exporter.commands.plan import load_templates

    p = Path(path)
    if p.is_dir() and not any(x.suffix in (".yaml", ".yml", ".json") for x in p.iterdir()):
        return []
    return pods_from_templates(load_templates([path]))


def _print_changes(report: ChangeReport) -> None:
    for ns, name in report.released:
        print(f"sim: released {ns}/{name}", file=sys.stderr, flush=True)
    for placement in report.admitted:
        print(f"sim: placed {placement.namespace}/{placement.name}", file=sys.stderr,
              flush=True)
    for r in report.rejected:
        print(f"sim: rejected {r.namespace}/{r.name}: {r.reason}", file=sys.stderr, flush=True)


def node_from_args(args: argparse.Namespace) -> ModelDrivenNode:
    from exporter.commands.plan import model_from_args

    topology, config = model_from_args(args)
    assert topology is not None
    return ModelDrivenNode(topology, config, args.reporting)


async def _serve(args: argparse.Namespace) -> int:
    import json

    from exporter.commands.sim import misbehaviour_from_args, serve_until_stopped
    from exporter.sim.server import SimKubelet

    node = node_from_args(args)
    if args.manifests and not Path(args.manifests).exists():
        raise UserError(f"--manifests {args.manifests}: no such file or directory")
    _print_changes(node.sync(desired_pods(args.manifests)))
    if args.topology_file:
        Path(args.topology_file).write_text(json.dumps(node.topology_json(), indent=1),
                                            encoding="utf-8")
    print(f"sim: model-driven node {args.topology}: {node.summary()}", flush=True)
    sim = SimKubelet(node.state(), socket_path=args.socket, http_listen=args.http_listen,
                     token=getattr(args, "token", None),
                     misbehaviour=misbehaviour_from_args(args))

    def reload() -> None:
        _print_changes(node.sync(desired_pods(args.manifests)))
        sim.set_state(node.state())

    async def poll() -> None:
        path = Path(args.manifests)
        last = _fingerprint(path)
        while True:
            await asyncio.sleep(args.manifests_poll)
            try:
                now = _fingerprint(path) if path.exists() else b""
            except OSError:
                continue
            if now == last:
                continue
            last = now
            try:
                reload()
            except UserError as exc:
                print(f"sim: manifests not applied, still serving the previous state: {exc}",
                      file=sys.stderr, flush=True)

    task = asyncio.create_task(poll()) if args.manifests else None
    try:
        await serve_until_stopped(sim, reload)
    except OSError as exc:
        raise UserError(f"cannot listen: {exc}") from None
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_serve(args))


