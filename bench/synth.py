"""A synthetic node: N pods on T CPUs, as a kubelet with pod-level resource managers on
would report it.

The mix follows what the exporter is for: pod-level hybrids (an app with exclusive CPUs and
1–3 sidecars in a pod shared pool), legacy padded pods (every sidecar pins a whole core),
and shared pods (nothing exclusive). Exclusive CPUs come from the free pool core by core;
when it runs out, further pods are shared ones. Shared pods take up the container count so
that the node has ``containers_per_pod × N`` containers in total. Deterministic for a seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from exporter.sim.cgroupfs import container_id
from exporter.sources.convert import allocatable_to_proto, pods_to_proto
from exporter.sources.fixture import KubeletState
from reconciler import kubelet_topology
from reconciler.kube import compute_qos, pod_spec_from_json
from reconciler.kubelet_topology import core_groups
from reconciler.snapshot import (
    Allocatable,
    ContainerAlloc,
    CPUInfo,
    MemoryBlock,
    PodAlloc,
    Topology,
)

GI = 2**30
SIDECAR_NAMES = ("istio-proxy", "fluent-bit", "metrics-exporter")


@dataclass(frozen=True)
class SyntheticNode:
    state: KubeletState
    topology: Topology
    pods: tuple[PodAlloc, ...]
    reserved: frozenset[int]
    kinds: dict[str, int]  # pod kind → count

    @property
    def containers(self) -> int:
        return sum(len(p.containers) for p in self.pods)


def make_topology(cpus: int, *, smt: int = 2) -> Topology:
    """``cpus`` CPUs over 1–2 sockets and 1–4 NUMA nodes, numbered as Linux does on x86:
    the first threads of every core, then their siblings."""
    if cpus < 1:
        raise ValueError("a node needs at least one CPU")
    if cpus % smt:
        smt = 1
    cores = cpus // smt
    sockets = 2 if cores >= 8 and cores % 2 == 0 else 1
    numa = sockets * (2 if cores >= 32 and cores % (sockets * 2) == 0 else 1)
    per_socket, per_numa = cores // sockets, cores // numa
    out = [CPUInfo(t * cores + c, c, c // per_socket, c // per_numa)
           for t in range(smt) for c in range(cores)]
    memory = tuple((n, 256 * GI) for n in range(numa))
    return kubelet_topology.topology(out, memory)


class _Pool:
    """Free CPUs handed out NUMA-aligned (one node per request, nodes in turn), whole cores
    first, up to ``limit`` CPUs in all so that the node keeps a shared pool."""

    def __init__(self, topology: Topology, reserved: frozenset[int], limit: int) -> None:
        numa_of = topology.numa_of()
        self.free: dict[int, list[int]] = {}
        for core, ids in core_groups(topology.cpus).items():
            if free := sorted(ids - reserved):
                self.free.setdefault(numa_of[core], []).extend(free)
        self.free = dict(sorted(self.free.items()))
        self.left = limit
        self.turn = 0

    def take(self, n: int) -> tuple[int, ...] | None:
        if n > self.left:
            return None
        nodes = sorted(self.free)
        for step in range(len(nodes)):
            node = nodes[(self.turn + step) % len(nodes)]
            if len(self.free[node]) >= n:
                taken, self.free[node] = self.free[node][:n], self.free[node][n:]
                self.turn += 1
                self.left -= n
                return tuple(taken)
        return None


def _mem(size: int, node: int = 0) -> tuple[MemoryBlock, ...]:
    return (MemoryBlock("memory", size, (node,)),)


def generate(pods: int, cpus: int, *, seed: int = 1, containers_per_pod: int = 4,
             hybrid_share: float = 0.10, legacy_share: float = 0.05,
             exclusive_share: float = 0.75) -> SyntheticNode:
    rng = random.Random(seed)
    topology = make_topology(cpus)
    numa_of = topology.numa_of()
    # Reserve the first core (both threads) as reservedSystemCPUs would.
    first = topology.cpus[0]
    reserved = frozenset(c.id for c in topology.cpus if c.core == first.core)
    pool = _Pool(topology, reserved, int((cpus - len(reserved)) * exclusive_share))
    kinds = {"hybrid": 0, "legacy": 0, "shared": 0}
    plan: list[str] = []
    for _ in range(pods):
        r = rng.random()
        plan.append("hybrid" if r < hybrid_share else
                    "legacy" if r < hybrid_share + legacy_share else "shared")

    built: list[PodAlloc | None] = []
    for index, kind in enumerate(plan):
        namespace = f"team-{index % 37:02d}"
        name = f"{kind}-{index:05d}-{rng.getrandbits(32):08x}"
        sidecars = rng.randint(1, 3)
        app = rng.choice((1, 2, 2, 4))
        pod: PodAlloc | None = None
        if kind == "hybrid":
            block = pool.take(app + 1)
            if block is not None:
                node = numa_of[block[0]]
                containers = tuple(ContainerAlloc(SIDECAR_NAMES[i]) for i in range(sidecars))
                containers += (ContainerAlloc("app", block[:app], _mem(app * 2 * GI, node)),)
                pod = PodAlloc(namespace, name, containers, block,
                               _mem((app * 2 + sidecars) * GI, node))
        elif kind == "legacy":
            cpus_ = pool.take(app + sidecars)
            if cpus_ is not None:
                node = numa_of[cpus_[0]]
                containers = tuple(ContainerAlloc(SIDECAR_NAMES[i], (cpus_[app + i],),
                                                  _mem(GI // 4, node))
                                   for i in range(sidecars))
                containers += (ContainerAlloc("app", cpus_[:app], _mem(app * 2 * GI, node)),)
                pod = PodAlloc(namespace, name, containers)
        if pod is None:
            kind = "shared"
            plan[index] = kind
        kinds[kind] += 1
        built.append(pod)

    # Shared pods make up the container count: at least one container each.
    fixed = sum(len(p.containers) for p in built if p is not None)
    n_shared = sum(1 for p in built if p is None)
    left = max(containers_per_pod * pods - fixed, n_shared)
    result: list[PodAlloc] = []
    seen_shared = 0
    for index, p in enumerate(built):
        if p is None:
            share = left // n_shared + (1 if seen_shared < left % n_shared else 0)
            seen_shared += 1
            names = ["app", *(f"sidecar-{i}" for i in range(1, share))]
            p = PodAlloc(f"team-{index % 37:02d}", f"shared-{index:05d}",
                         tuple(ContainerAlloc(n) for n in names))
        result.append(p)

    allocatable = Allocatable(tuple(sorted(topology.online - reserved)),
                              tuple(MemoryBlock("memory", b, (n,)) for n, b in topology.memory))
    state = KubeletState(pods_to_proto(result), allocatable_to_proto(allocatable),
                         pod_list=pod_list(result), configz=_configz(reserved))
    return SyntheticNode(state, topology, tuple(result), reserved, kinds)


def _resources(cpu: str, memory: str, *, limits: bool = True) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    return {"requests": requests, "limits": dict(requests)} if limits else {
        "requests": requests}


def pod_list(pods: tuple[PodAlloc, ...] | list[PodAlloc]) -> dict[str, Any]:
    """The ``/pods`` body matching the synthetic allocations: hybrids have a pod-level
    budget and burstable sidecars, legacy pods are Guaranteed container by container,
    shared pods are Burstable. Every item carries what a kubelet's ``/pods`` carries
    (labels, annotations, owner references, full container specs, conditions and container
    statuses; no managed fields, which the kubelet does not serve), about 10 KB a pod, so
    that fetching and decoding it weighs what it weighs on a node."""
    items = []
    for index, p in enumerate(pods):
        app = next((c for c in p.containers if c.name == "app"), None)
        sidecars = [c for c in p.containers if c.name != "app"]
        app_cpus = len(app.cpu_ids) if app is not None else 0
        spec: dict[str, Any]
        if p.cpu_ids:  # hybrid
            spec = {
                "resources": _resources(str(len(p.cpu_ids)),
                                        f"{(app_cpus * 2 + len(sidecars))}Gi"),
                "initContainers": [{"name": c.name, "restartPolicy": "Always",
                                    "resources": _resources("100m", "128Mi", limits=False)}
                                   for c in sidecars],
                "containers": [{"name": "app",
                                "resources": _resources(str(app_cpus), f"{app_cpus * 2}Gi")}],
            }
        elif app is not None and app.cpu_ids:  # legacy padded
            spec = {
                "initContainers": [{"name": c.name, "restartPolicy": "Always",
                                    "resources": _resources("1", "256Mi")} for c in sidecars],
                "containers": [{"name": "app",
                                "resources": _resources(str(app_cpus), f"{app_cpus * 2}Gi")}],
            }
        else:
            spec = {"containers": [{"name": c.name,
                                    "resources": _resources("100m", "64Mi", limits=False)}
                                   for c in p.containers]}
        items.append(_pod_item(p, spec, index))
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


_TS = "2026-11-30T08:00:00Z"


def _container_detail(container: dict[str, Any], pod: PodAlloc, index: int) -> dict[str, Any]:
    """A container spec as the API server defaults it, around its name and resources."""
    name = container["name"]
    env: list[dict[str, Any]] = [
        {"name": f"APP_SETTING_{k:02d}", "value": f"{pod.name}-{name}-value-{k:04d}"}
        for k in range(3)]
    env += [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                            "fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
            {"name": "GOMAXPROCS", "valueFrom": {"resourceFieldRef": {
                "containerName": name, "divisor": "1", "resource": "limits.cpu"}}}]
    probe = {"failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1,
             "timeoutSeconds": 1}
    return {
        **container,
        "image": f"registry.example.com/{pod.namespace}/{name}:v1.{index % 50}.3",
        "imagePullPolicy": "IfNotPresent",
        "command": [f"/usr/local/bin/{name}"],
        "args": ["--config=/etc/app/config.yaml", "--log-format=json", "--listen=:8080"],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"},
                  {"containerPort": 9090, "name": "metrics", "protocol": "TCP"}],
        "env": env,
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                          "initialDelaySeconds": 10, **probe},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                           **probe},
        "volumeMounts": [
            {"mountPath": "/etc/app", "name": "config", "readOnly": True},
            {"mountPath": "/var/lib/app", "name": "data"},
            {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
             "name": f"kube-api-access-{index:05d}", "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _container_status(container: dict[str, Any], pod: PodAlloc, uid: str, index: int,
                      ) -> dict[str, Any]:
    name = container["name"]
    return {"name": name, "ready": True, "restartCount": index % 3, "started": True,
            "image": f"registry.example.com/{pod.namespace}/{name}:v1.{index % 50}.3",
            "imageID": f"registry.example.com/{pod.namespace}/{name}@sha256:"
                       f"{container_id(uid, 'image:' + name)}",
            "containerID": f"containerd://{container_id(uid, name)}",
            "state": {"running": {"startedAt": _TS}},
            "lastState": {}}


def _pod_item(pod: PodAlloc, spec: dict[str, Any], index: int) -> dict[str, Any]:
    uid = f"uid-{pod.namespace}-{pod.name}"
    app = pod.name.rsplit("-", 1)[0]
    spec["containers"] = [_container_detail(c, pod, index) for c in spec["containers"]]
    if "initContainers" in spec:
        spec["initContainers"] = [_container_detail(c, pod, index)
                                  for c in spec["initContainers"]]
    spec.update({
        "volumes": [{"name": "config", "configMap": {"name": f"{app}-config",
                                                     "defaultMode": 420}},
                    {"name": "data", "emptyDir": {}},
                    {"name": f"kube-api-access-{index:05d}", "projected": {
                        "defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607,
                                                     "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [
                                {"key": "ca.crt", "path": "ca.crt"}]}}]}}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
        "nodeName": "bench", "schedulerName": "default-scheduler", "priority": 0,
        "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
        "securityContext": {"fsGroup": 2000, "runAsUser": 1000},
        "tolerations": [{"effect": "NoExecute", "key": f"node.kubernetes.io/{t}",
                         "operator": "Exists", "tolerationSeconds": 300}
                        for t in ("not-ready", "unreachable")],
    })
    item: dict[str, Any] = {"metadata": {
        "name": pod.name, "generateName": f"{app}-", "namespace": pod.namespace, "uid": uid,
        "resourceVersion": str(100000 + index), "creationTimestamp": _TS,
        "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": pod.name,
                   "app.kubernetes.io/part-of": pod.namespace,
                   "app.kubernetes.io/version": f"v1.{index % 50}.3",
                   "pod-template-hash": f"{index * 2654435761 % 2**32:08x}"[:10],
                   "security.istio.io/tlsMode": "istio"},
        "annotations": {"kubernetes.io/config.seen": _TS, "kubernetes.io/config.source": "api",
                        "prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                        "checksum/config": container_id(uid, "config"),
                        "sidecar.istio.io/status": '{"initContainers":null,"containers":'
                        '["istio-proxy"],"volumes":["istio-envoy","istio-data",'
                        '"istio-podinfo","istio-token","istiod-ca-cert"],'
                        '"imagePullSecrets":null,"revision":"default"}'},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app,
                             "uid": f"rs-{pod.namespace}-{app}", "controller": True,
                             "blockOwnerDeletion": True}]},
        "spec": spec}
    pod_spec = pod_spec_from_json(item)
    conditions = [{"type": t, "status": "True", "lastProbeTime": None,
                   "lastTransitionTime": _TS}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                            "ContainersReady", "PodScheduled")]
    status: dict[str, Any] = {
        "phase": "Running", "conditions": conditions, "hostIP": "10.0.0.10",
        "hostIPs": [{"ip": "10.0.0.10"}], "podIP": f"10.244.{index // 250}.{index % 250}",
        "podIPs": [{"ip": f"10.244.{index // 250}.{index % 250}"}], "startTime": _TS,
        "qosClass": compute_qos(pod_spec),
        "containerStatuses": [_container_status(c, pod, uid, index)
                              for c in spec["containers"]]}
    if "initContainers" in spec:
        status["initContainerStatuses"] = [_container_status(c, pod, uid, index)
                                           for c in spec["initContainers"]]
    item["status"] = status
    return item


def _configz(reserved: frozenset[int]) -> dict[str, Any]:
    from reconciler.cpuset import format_cpuset

    return {"kubeletconfig": {
        "cpuManagerPolicy": "static", "memoryManagerPolicy": "Static",
        "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
        "reservedSystemCPUs": format_cpuset(reserved),
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    }}
