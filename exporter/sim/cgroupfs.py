"""The simulator's kernel side: a cgroup v2 tree (systemd driver, containerd scope names,
under the kubelet's default ``cgroupRoot`` or another such as kind's ``/kubelet``) matching
the model's placements, a ``/proc/stat`` that advances with a per-pool load, each cgroup's
own CPU time advancing with it, and the ``containerStatuses`` that tie ``/pods`` to the
tree. See docs/kernel.md.

The tree holds only what the exporter reads: ``cgroup.controllers`` at the root,
``cpuset.cpus`` / ``cpuset.cpus.effective`` in each pod slice and container scope, and
``cpu.stat`` (``usage_usec``) once time has passed. Files are replaced atomically, so a
reader never sees a half-written cpuset.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from exporter.errors import UserError
from exporter.sources.cgroup_layout import cgroup_path
from reconciler.allocator.model import POOLS, NodeModel
from reconciler.allocator.report import report_allocatable, report_pods
from reconciler.cpuset import CPUSetError, format_cpuset, parse_cpuset
from reconciler.reconcile import reconcile
from reconciler.snapshot import NodeSnapshot
from reconciler.usage import CPUHolder, cpu_holders

_QOS_SLICE = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}


def container_id(uid: str, name: str, restarts: int = 0) -> str:
    """A stable 64-hex container id for a pod's container (the sandbox is ``""``); each
    restart gives it a new one, as the runtime does."""
    key = f"{uid}/{name}" + (f"/{restarts}" if restarts else "")
    return hashlib.sha256(key.encode()).hexdigest()


ContainerKey = tuple[str, str, str]  # namespace, pod, container


class TreeContainer(NamedTuple):
    id: str
    cpus: frozenset[int]  # what the kernel enforces (before the parent narrows it)
    key: ContainerKey | None = None  # None: the pod's sandbox


class TreePod(NamedTuple):
    uid: str
    qos: str  # Guaranteed | Burstable | BestEffort
    cpuset: frozenset[int]  # the pod cgroup's own cpuset.cpus; empty: not set
    containers: tuple[TreeContainer, ...]


def pod_slice(uid: str, qos: str, kubelet_root: tuple[str, ...] = ()) -> str:
    """The pod's directory under the root, as the systemd driver names it for the
    kubelet's ``cgroupRoot`` (its components; ``("kubelet",)`` on kind)."""
    klass = _QOS_SLICE.get(qos, "besteffort")
    return cgroup_path([*kubelet_root, "kubepods", *([klass] if klass else []), f"pod{uid}"],
                       "systemd")


def _effective(own: frozenset[int], parent: frozenset[int]) -> frozenset[int]:
    """cgroup v2: a cgroup's effective CPUs are its own within its parent's; with no own
    set, or none left within the parent's, the parent's."""
    narrowed = own & parent
    return narrowed or parent


def _put(path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="ascii") == text:
            return
    except OSError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="ascii")
    os.replace(tmp, path)


def _put_cpuset(directory: Path, own: frozenset[int], effective: frozenset[int]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _put(directory / "cpuset.cpus", format_cpuset(own) + "\n")
    _put(directory / "cpuset.cpus.effective", format_cpuset(effective) + "\n")


def write_cgroup_tree(root: str | Path, pods: Iterable[TreePod], online: Iterable[int],
                      kubelet_root: tuple[str, ...] = (),
                      usage: Mapping[str, float] | None = None) -> None:
    """Make ``root`` hold exactly these pods (pod slices no longer listed are removed).
    ``usage``: CPU seconds by container id (and pod uid), written as ``cpu.stat``."""
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    _put(base / "cgroup.controllers", "cpuset cpu io memory pids\n")
    everything = frozenset(online)
    kubepods = base / cgroup_path([*kubelet_root, "kubepods"], "systemd")
    _put_cpuset(kubepods, frozenset(), everything)
    spent = usage or {}

    def put_usage(directory: Path, key: str) -> None:
        if key in spent:
            _put(directory / "cpu.stat", f"usage_usec {int(spent[key] * 1e6)}\n"
                 "user_usec 0\nsystem_usec 0\n")

    wanted: set[Path] = set()
    for pod in pods:
        pod_dir = base / pod_slice(pod.uid, pod.qos, kubelet_root)
        wanted.add(pod_dir)
        pod_effective = _effective(pod.cpuset, everything)
        _put_cpuset(pod_dir, pod.cpuset, pod_effective)
        put_usage(pod_dir, pod.uid)
        scopes = {f"cri-containerd-{c.id}.scope" for c in pod.containers}
        for c in pod.containers:
            _put_cpuset(pod_dir / f"cri-containerd-{c.id}.scope", c.cpus,
                        _effective(c.cpus, pod_effective))
            put_usage(pod_dir / f"cri-containerd-{c.id}.scope", c.id)
        for stale in pod_dir.glob("cri-containerd-*.scope"):
            if stale.name not in scopes:
                shutil.rmtree(stale, ignore_errors=True)
    for slice_dir in kubepods.rglob("*-pod*.slice"):
        if slice_dir not in wanted:
            shutil.rmtree(slice_dir, ignore_errors=True)


def model_tree(model: NodeModel, *,
               drift: Mapping[tuple[str, str, str], frozenset[int]] | None = None,
               pod_cpusets: bool = True,
               restarts: Mapping[ContainerKey, int] | None = None) -> list[TreePod]:
    """The tree a kubelet would have made for the model's placements: an exclusive
    container on its slice, a pod-shared one on its pod's shared pool, any other on the
    node's default set; the pod slice of a pod with a block set to the block (when
    ``pod_cpusets``). ``drift`` overrides what chosen containers (namespace, pod, name)
    run on, as a misbehaving runtime would; ``restarts`` how often chosen containers were
    restarted (each restart is a new id). Each pod also gets its sandbox scope."""
    default = model.default_set
    overrides = drift or {}
    restarted = restarts or {}
    pods: list[TreePod] = []
    for p in model.pods.values():
        containers = [TreeContainer(container_id(p.uid, ""), default)]
        for c in p.containers:
            cpus = c.exclusive or (p.shared_pool if c.assignment == "pod_shared" else default)
            key = (p.namespace, p.name, c.name)
            cpus = overrides.get(key, cpus)
            containers.append(TreeContainer(container_id(p.uid, c.name, restarted.get(key, 0)),
                                            cpus, key))
        pods.append(TreePod(p.uid, p.spec.qos, p.block if pod_cpusets else frozenset(),
                            tuple(containers)))
    return pods


def _status(c: Mapping[str, Any], uid: str, running: bool, restarts: int = 0,
            ) -> dict[str, Any]:
    name = str(c.get("name", ""))
    state: dict[str, Any] = {"running": {}} if running else \
        {"terminated": {"exitCode": 0, "reason": "Completed"}}
    return {"name": name,
            "containerID": f"containerd://{container_id(uid, name, restarts)}",
            "ready": running, "restartCount": restarts, "state": state}


def decorate_pod_list(pod_list: Mapping[str, Any],
                      restarts: Mapping[ContainerKey, int] | None = None) -> dict[str, Any]:
    """A copy of a ``/pods`` body with the container statuses of its running pods, their
    ids matching :func:`model_tree` with the same ``restarts`` (sidecars running,
    ordinary init containers done)."""
    restarted = restarts or {}
    items = []
    for item in pod_list.get("items") or ():
        item = dict(item)
        status = dict(item.get("status") or {})
        spec = item.get("spec") or {}
        meta = item.get("metadata") or {}
        uid = str(meta.get("uid", ""))

        def count(c: Mapping[str, Any], meta: Mapping[str, Any] = meta) -> int:
            return restarted.get((str(meta.get("namespace", "default")),
                                  str(meta.get("name", "")), str(c.get("name", ""))), 0)

        if status.get("phase", "Running") == "Running":
            status["containerStatuses"] = [_status(c, uid, True, count(c))
                                           for c in spec.get("containers") or ()]
            inits = spec.get("initContainers") or ()
            if inits:
                status["initContainerStatuses"] = [
                    _status(c, uid, c.get("restartPolicy") == "Always", count(c))
                    for c in inits]
        item["status"] = status
        items.append(item)
    return {**pod_list, "items": items}


def model_cpu_holders(model: NodeModel) -> dict[int, CPUHolder]:
    """Who holds each CPU in the model: the ledger of its own 1.37 report, which reproduces
    the model's placements exactly (the allocator round-trip tests hold it to that)."""
    return cpu_holders(reconcile(NodeSnapshot(
        pods=report_pods(model, "1.37"), allocatable=report_allocatable(model),
        topology=model.topo.to_snapshot())))


def per_cpu_load(holders: Mapping[int, CPUHolder], load_by_pool: Mapping[str, float],
                 ) -> dict[int, float]:
    """Busy fraction (0..1) of each CPU from the load of the pool holding it."""
    return {cpu: min(1.0, max(0.0, load_by_pool.get(h.pool, 0.0)))
            for cpu, h in holders.items()}


class ProcStatWriter:
    """A ``/proc/stat`` whose per-CPU times advance by ``advance(seconds, load)``: a CPU
    with load ``f`` gains ``f * seconds`` busy (three quarters ``user``, a quarter
    ``system``) and the rest idle. Times are kept exact and written in whole ticks."""

    def __init__(self, path: str | Path, cpus: Iterable[int], user_hz: int = 100) -> None:
        self.path = Path(path)
        self.user_hz = user_hz
        self.cpus = sorted(set(cpus))
        # Seconds per CPU: [user, system, idle]
        self.times: dict[int, list[float]] = {cpu: [0.0, 0.0, 0.0] for cpu in self.cpus}
        self.write()

    def advance(self, seconds: float, load: Mapping[int, float]) -> None:
        for cpu, t in self.times.items():
            busy = seconds * min(1.0, max(0.0, load.get(cpu, 0.0)))
            t[0] += busy * 0.75
            t[1] += busy * 0.25
            t[2] += seconds - busy
        self.write()

    def _line(self, name: str, user: float, system: float, idle: float) -> str:
        hz = self.user_hz
        return (f"{name} {int(user * hz)} 0 {int(system * hz)} {int(idle * hz)} 0 0 0 0 0 0")

    def write(self) -> None:
        lines = [self._line("cpu", *(sum(t[i] for t in self.times.values())
                                     for i in range(3)))]
        lines += [self._line(f"cpu{cpu}", *self.times[cpu]) for cpu in self.cpus]
        lines += ["intr 0", "ctxt 0", "btime 0", "processes 0", "procs_running 1",
                  "procs_blocked 0"]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _put(self.path, "\n".join(lines) + "\n")


def parse_pool_loads(text: str) -> dict[str, float]:
    """``"pod_shared=0.9,node_shared=0.3"`` → busy fraction per pool (flag ``--load``)."""
    loads: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        pool, sep, value = part.partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = -1.0
        if not sep or pool.strip() not in POOLS or not 0.0 <= fraction <= 1.0:
            raise UserError(f"--load {part!r}: expected POOL=FRACTION with POOL one of "
                            f"{', '.join(POOLS)} and FRACTION in 0..1")
        loads[pool.strip()] = fraction
    return loads


def parse_drift(text: str) -> dict[tuple[str, str, str], frozenset[int]]:
    """``"shop/web-0/proxy=0-3"`` → the CPUs that container is made to run on (flag
    ``--drift``; several separated by ``;``, since cpusets hold commas)."""
    drift: dict[tuple[str, str, str], frozenset[int]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        target, _, cpus = part.partition("=")
        names = target.split("/")
        try:
            cpuset = parse_cpuset(cpus)
        except CPUSetError:
            cpuset = frozenset()
        if len(names) != 3 or not all(names) or not cpuset:
            raise UserError(f"--drift {part!r}: expected NAMESPACE/POD/CONTAINER=CPUSET")
        drift[(names[0], names[1], names[2])] = cpuset
    return drift


class SimKernel:
    """The simulator's kernel files kept in step with its model: ``sync`` after the
    placements change (rewrites the cgroup tree, re-derives each CPU's load), ``tick`` as
    time passes (advances ``/proc/stat`` and each cgroup's own CPU time).

    A container's CPU time is the busy time of the CPUs it runs on, shared evenly with the
    other containers running on exactly the same set (every node-shared container holds
    the same one); the sandbox uses none, and a pod's is the sum of its containers'. So the
    containers' usage adds up to the busy time of the CPUs containers run on."""

    def __init__(self, model: NodeModel, cgroup_root: str | Path, proc_stat: str | Path, *,
                 load_by_pool: Mapping[str, float], user_hz: int = 100,
                 drift: Mapping[tuple[str, str, str], frozenset[int]] | None = None,
                 kubelet_root: tuple[str, ...] = ()) -> None:
        self.model = model
        self.cgroup_root = Path(cgroup_root)
        self.load_by_pool = dict(load_by_pool)
        self.drift = dict(drift or {})
        self.kubelet_root = kubelet_root
        self.restarts: dict[ContainerKey, int] = {}
        self.writer = ProcStatWriter(proc_stat, model.topo.online, user_hz)
        self._load: dict[int, float] = {}
        self._tree: list[TreePod] = []
        self.usage: dict[str, float] = {}  # CPU seconds by container id and pod uid
        self.sync()

    def sync(self) -> None:
        self._tree = model_tree(self.model, drift=self.drift, restarts=self.restarts)
        self._load = per_cpu_load(model_cpu_holders(self.model), self.load_by_pool)
        self._write()

    def restart(self, key: ContainerKey) -> None:
        """The container restarts: a new id, its cgroup anew (its CPU time from 0)."""
        self.restarts[key] = self.restarts.get(key, 0) + 1
        self.sync()

    def decorate(self, pod_list: Mapping[str, Any]) -> dict[str, Any]:
        """:func:`decorate_pod_list` with this kernel's restarts."""
        return decorate_pod_list(pod_list, self.restarts)

    def _write(self) -> None:
        write_cgroup_tree(self.cgroup_root, self._tree, self.model.topo.online,
                          self.kubelet_root, self.usage)

    def tick(self, seconds: float) -> None:
        self.writer.advance(seconds, self._load)
        sharing: dict[frozenset[int], int] = {}
        for pod in self._tree:
            for c in pod.containers:
                if c.key is not None:
                    sharing[c.cpus] = sharing.get(c.cpus, 0) + 1
        live = {c.id for pod in self._tree for c in pod.containers} | {
            pod.uid for pod in self._tree}
        self.usage = {k: v for k, v in self.usage.items() if k in live}
        for pod in self._tree:
            spent = 0.0
            for c in pod.containers:
                if c.key is None:
                    continue
                busy = seconds * sum(self._load.get(cpu, 0.0) for cpu in c.cpus) \
                    / sharing[c.cpus]
                self.usage[c.id] = self.usage.get(c.id, 0.0) + busy
                spent += busy
            self.usage[pod.uid] = self.usage.get(pod.uid, 0.0) + spent
        self._write()

    async def run(self, interval: float = 1.0) -> None:
        """Advance ``/proc/stat`` as real time passes, until cancelled."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            self.tick(now - last)
            last = now
