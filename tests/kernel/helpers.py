"""Hand-built cgroup fixture trees and ledgers for the kernel-source tests."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from allocator.strategies import random_pod

from exporter.sim.model_driven import ModelDrivenNode
from reconciler.allocator import ModelConfig, from_spec
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import (
    Allocatable,
    ContainerAlloc,
    CPUInfo,
    NodeSnapshot,
    PodAlloc,
    Topology,
)

HEX = "0123456789abcdef"


def cid(n: int) -> str:
    """A 64-hex container id."""
    return (f"{n:x}" * 64)[:64] if n else "0" * 64


@dataclass
class FixtureContainer:
    name: str
    id: str
    cpus: str | None  # file content; None: no cpuset file at all
    runtime: str = "containerd"


@dataclass
class FixturePod:
    namespace: str
    name: str
    uid: str
    qos: str  # guaranteed | burstable | besteffort
    containers: list[FixtureContainer] = field(default_factory=list)
    cpuset: str = ""  # the pod cgroup's cpuset.cpus (v2: empty = not set)


def pod_dir(base: Path, driver: str, pod: FixturePod, root: tuple[str, ...] = ()) -> Path:
    """The pod's cgroup, written out by hand for the kubelet's ``cgroupRoot`` ``root`` (its
    components; ``()`` for ``/``): e.g. kind's ``("kubelet",)`` under systemd is
    ``kubelet.slice/kubelet-kubepods.slice/…``."""
    if driver == "systemd":
        uid = pod.uid.replace("-", "_")
        head = "".join(f"{part}-" for part in root)
        top = base
        for i in range(len(root)):
            top = top / ("-".join(root[:i + 1]) + ".slice")
        top = top / f"{head}kubepods.slice"
        if pod.qos == "guaranteed":
            return top / f"{head}kubepods-pod{uid}.slice"
        return (top / f"{head}kubepods-{pod.qos}.slice"
                / f"{head}kubepods-{pod.qos}-pod{uid}.slice")
    top = base.joinpath(*root, "kubepods")
    if pod.qos == "guaranteed":
        return top / f"pod{pod.uid}"
    return top / pod.qos / f"pod{pod.uid}"


def container_dir_name(driver: str, c: FixtureContainer) -> str:
    prefix = {"containerd": "cri-containerd-", "cri-o": "crio-"}[c.runtime]
    if driver == "systemd":
        return f"{prefix}{c.id}.scope"
    return f"crio-{c.id}" if c.runtime == "cri-o" else c.id


def write_tree(root: Path, version: str, driver: str, pods: list[FixturePod],
               kubelet_root: tuple[str, ...] = (), usage: dict[str, int] | None = None,
               ) -> Path:
    """A cgroup tree as the kernel shows it; returns the hierarchy holding kubepods.
    ``usage``: container id (or pod uid) → CPU time in microseconds, written where the
    kernel keeps it (v2 ``cpu.stat``, v1 ``cpuacct/…/cpuacct.usage`` in nanoseconds)."""
    if version == "v2":
        root.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        base = root
        effective = "cpuset.cpus.effective"
    else:
        base = root / "cpuset"
        (root / "memory").mkdir(parents=True, exist_ok=True)
        effective = "cpuset.effective_cpus"
    usage = usage or {}

    def put_usage(d: Path, key: str) -> None:
        if key not in usage:
            return
        if version == "v2":
            (d / "cpu.stat").write_text(f"usage_usec {usage[key]}\nuser_usec 0\n"
                                        "system_usec 0\n")
        else:
            acct = root / "cpuacct" / d.relative_to(base)
            acct.mkdir(parents=True, exist_ok=True)
            (acct / "cpuacct.usage").write_text(f"{usage[key] * 1000}\n")

    probe = FixturePod("", "", "x", "guaranteed")
    pod_dir(base, driver, probe, kubelet_root).parent.mkdir(parents=True, exist_ok=True)
    for pod in pods:
        d = pod_dir(base, driver, pod, kubelet_root)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpuset.cpus").write_text(pod.cpuset + "\n")
        put_usage(d, pod.uid)
        # The sandbox: a cgroup /pods does not list.
        sandbox = FixtureContainer("", "f" * 64, "0-63", pod.containers[0].runtime
                                   if pod.containers else "containerd")
        for c in [sandbox, *pod.containers]:
            cd = d / container_dir_name(driver, c)
            cd.mkdir()
            put_usage(cd, c.id)
            if c.cpus is not None:
                (cd / effective).write_text(c.cpus)
                (cd / "cpuset.cpus").write_text(c.cpus)
            if c.runtime == "cri-o":  # CRI-O's monitor: never a container
                conmon = d / (f"crio-conmon-{c.id}.scope" if driver == "systemd"
                              else f"crio-conmon-{c.id}")
                conmon.mkdir()
                (conmon / effective).write_text("0-63\n")
    return base


def pod_list(pods: list[FixturePod]) -> dict[str, object]:
    """The /pods body naming these pods' containers (first one as a sidecar)."""
    items = []
    for pod in pods:
        statuses = [{"name": c.name, "containerID": f"{c.runtime}://{c.id}",
                     "state": {"running": {}}} for c in pod.containers]
        items.append({
            "metadata": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid},
            "spec": {},
            "status": {"phase": "Running", "qosClass": pod.qos.capitalize(),
                       "initContainerStatuses": statuses[:1],
                       "containerStatuses": statuses[1:]},
        })
    return {"kind": "PodList", "items": items}


def flat_topology(n: int) -> Topology:
    return Topology(tuple(CPUInfo(i, i, 0, 0) for i in range(n)))


def small_ledger(*, reserved: tuple[int, ...] = (0,)) -> Ledger:
    """8 CPUs, CPU 0 reserved:

    * default/app: block 2-4; main exclusive 2-3, proxy pod-shared (4);
    * default/db: no block; db node-exclusive 5, log node-shared;
    * default/idle: block 6-7; w exclusive 6, 7 idle (no shared container);
    * node shared pool: 1.
    """
    pods = (
        PodAlloc("default", "app", (ContainerAlloc("main", (2, 3)), ContainerAlloc("proxy")),
                 (2, 3, 4)),
        PodAlloc("default", "db", (ContainerAlloc("db", (5,)), ContainerAlloc("log"))),
        PodAlloc("default", "idle", (ContainerAlloc("w", (6,)),), (6, 7)),
    )
    allocatable = Allocatable(tuple(i for i in range(8) if i not in reserved))
    return reconcile(NodeSnapshot(pods=pods, allocatable=allocatable,
                                  topology=flat_topology(8)))


def place(style: str, scope: str, seed: int, options: frozenset[str] = frozenset(),
          ) -> ModelDrivenNode:
    config = ModelConfig(scope=scope, topology_policy="single-numa-node",
                         reserved_cpu_m=2000, options=options)
    node = ModelDrivenNode(from_spec("2x8x2", numa_per_socket=2), config, style)
    rng = random.Random(seed)
    for i in range(20):
        node.add(random_pod(rng, f"p{i}", min_shared=2 if style == "1.36" else 0,
                            namespace=rng.choice(["shop", "db"])))
        if node.model.pods and rng.random() < 0.15:
            node.delete(*rng.choice(sorted(node.model.pods)))
    return node
