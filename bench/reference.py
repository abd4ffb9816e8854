"""The kubelet itself as the reference: random nodes and workloads run through the real CPU,
memory and topology managers (``reference/kubelet``, a Go program linking k8s.io/kubernetes)
and through the project's allocator model, compared placement by placement
(docs/design.md#reference).

    python -m bench.reference --version 1.37 --seed 7 --count 200

prints the first disagreements and every case whose reference request went unanswered for
``--case-timeout`` seconds, then ``reference 1.37: A/N agree`` as its last line. The
reference is built on first use (Go from the machine, modules from the proxy) into
``reference/build/``, and rebuilt when its sources change.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench import reference_budget, reference_cpu, reference_devices, reference_machines
from bench.reference_memory import compare_memory, memory_setup, under_memory, with_memory
from reconciler.allocator import CPUTopology, ModelConfig, ModelError, NodeModel
from reconciler.allocator.config import EXCLUSIVE_OPTIONS
from reconciler.allocator.devices import Device, NodeDevices
from reconciler.allocator.placement import PodPlacement, Rejection
from reconciler.allocator.report import pod_to_json
from reconciler.allocator.restart import restart
from reconciler.cpuset import format_cpuset, parse_cpuset
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "reference" / "kubelet"
BUILD = ROOT / "reference" / "build"
# Each kubelet minor: its patch release, the go.mod that pins it and the build tag that picks
# its version-specific files (reference/kubelet/api_*.go, version_<minor>.go).
VERSIONS: dict[str, tuple[str, str, str]] = {
    "1.35": ("1.35.4", "go.1_35.mod", "kubelet_1_35"),
    "1.36": ("1.36.3", "go.1_36.mod", "kubelet_1_36"),
    "1.37": ("1.37.2", "go.mod", ""),
}
# Static policy options each version accepts (pkg/kubelet/cm/cpumanager/policy_options.go).
# The alpha ones need the CPUManagerPolicyAlphaOptions gate, which the reference turns on.
OPTIONS = ("full-pcpus-only", "distribute-cpus-across-numa", "align-by-socket",
           "distribute-cpus-across-cores", "strict-cpu-reservation",
           "prefer-align-cpus-by-uncorecache")
GiB = 2**30
MiB = 2**20


class _Stopped(Exception):
    """The kubelet and the model both refuse to start after a restart: the case ends."""


class ReferenceUnavailable(RuntimeError):
    """The reference cannot be built here (no Go, or a module or package that fails)."""


# ---- building ----------------------------------------------------------------------------


# The packages a coverage build counts (bench/reference_coverage.py): the kubelet's own, and
# the main package, without which a Go coverage build writes no counters at all.
KUBELET = "k8s.io/kubernetes/pkg/kubelet"
COVERED = ("podres-exporter/reference/kubelet",
           f"{KUBELET}/cm/cpumanager", f"{KUBELET}/cm/cpumanager/topology",
           f"{KUBELET}/cm/cpumanager/state", f"{KUBELET}/cm/memorymanager",
           f"{KUBELET}/cm/memorymanager/state", f"{KUBELET}/cm/topologymanager",
           f"{KUBELET}/cm/topologymanager/bitmask", f"{KUBELET}/cm/devicemanager",
           f"{KUBELET}/apis/podresources")


def binary_path(version: str, *, cover: bool = False, race: bool = False) -> Path:
    return BUILD / f"kubelet-{version}{'-cover' if cover else ''}{'-race' if race else ''}"


def _sources() -> list[Path]:
    return sorted(p for p in SOURCE.iterdir() if p.suffix in (".go", ".mod", ".sum"))


def stale(version: str, *, cover: bool = False, race: bool = False) -> bool:
    out = binary_path(version, cover=cover, race=race)
    if not out.exists():
        return True
    built = out.stat().st_mtime
    return any(p.stat().st_mtime > built for p in _sources())


def go_binary() -> str | None:
    return shutil.which("go") or (
        "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)


def build(version: str, *, quiet: bool = True, cover: bool = False, race: bool = False
          ) -> Path:
    """The reference binary for ``version``, built if missing or older than its sources
    (``cover``: counting statements of :data:`COVERED`; ``race``: with Go's race detector,
    bench/reference_race.py; each a binary of its own).
    Raises :class:`ReferenceUnavailable` with the reason when it cannot be built."""
    if version not in VERSIONS:
        raise ReferenceUnavailable(f"unknown kubelet version {version!r} "
                                   f"(one of {', '.join(VERSIONS)})")
    out = binary_path(version, cover=cover, race=race)
    if not stale(version, cover=cover, race=race):
        return out
    go = go_binary()
    if go is None:
        raise ReferenceUnavailable("no Go toolchain ('go' is not on PATH): the kubelet "
                                   "reference cannot be built")
    _, modfile, tag = VERSIONS[version]
    BUILD.mkdir(parents=True, exist_ok=True)
    # No symbol table or DWARF: nothing reads them, and the link of a kubelet-sized program
    # is the build's longest single-threaded step (docs/performance.md#the-whole-ci-run).
    cmd = [go, "build", f"-modfile={modfile}", "-ldflags=-s -w", "-o", str(out)]
    if cover:
        cmd += ["-cover", f"-coverpkg={','.join(COVERED)}"]
    if race:
        cmd.append("-race")
    if tag:
        cmd.append(f"-tags={tag}")
    cmd.append(".")
    if not quiet:
        print(f"building the kubelet {version} reference: {' '.join(cmd)}", file=sys.stderr)
    done = subprocess.run(cmd, cwd=SOURCE, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReferenceUnavailable(f"building the kubelet {version} reference failed:\n"
                                   f"{done.stderr.strip()[-4000:]}")
    return out


# ---- talking to it -----------------------------------------------------------------------


class ReferenceTimeout(RuntimeError):
    """The reference did not answer a request within its bound; its process is killed."""


class ReferenceCrashed(ReferenceUnavailable):
    """The reference exited while a request of a case was open (a Go panic, exit code 2)."""


# The default bound on one reference request (--case-timeout). The kubelet answers a
# generated case's request in well under a second (bench/reference_budget.py).
CASE_TIMEOUT = 60.0


class Reference:
    """One running reference process: a JSON request in, a JSON answer out."""

    def __init__(self, version: str, binary: Path | None = None,
                 env: Mapping[str, str] | None = None, *, timeout: float | None = None
                 ) -> None:
        """``binary`` replaces the built reference (the coverage build of
        bench/reference_coverage.py), ``env`` its environment (``GOCOVERDIR``); ``timeout``
        bounds each request in seconds (:class:`ReferenceTimeout`), none when ``None``."""
        self.version = version
        self.timeout = timeout
        self._argv = [str(binary or build(version))]
        self._env = None if env is None else {**os.environ, **env}
        self._start()

    def _start(self) -> None:
        # PODRES_REFERENCE_STDERR names a file the process's stderr is appended to (a Go
        # panic, or the goroutine stacks SIGQUIT prints); else it is dropped.
        errors = os.environ.get("PODRES_REFERENCE_STDERR")
        sink = open(errors, "ab") if errors else None  # noqa: SIM115 (the process owns it)
        try:
            self.proc = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=sink or subprocess.DEVNULL, text=True, bufsize=1, env=self._env)
        finally:
            if sink is not None:
                sink.close()
        # A thread reads the answers so that waiting for one can time out: a blocking
        # readline cannot, and SIGALRM belongs to pytest-timeout in the tests.
        self._lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, args=(self.proc, self._lines),
                                        daemon=True)
        self._reader.start()

    @staticmethod
    def _read(proc: subprocess.Popen[str], lines: queue.SimpleQueue[str]) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                lines.put(line)
        lines.put("")  # end of output: the process exited

    def request(self, req: Mapping[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it exited: the end of its output says so below
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            self.kill()
            pod = req.get("pod")
            name = pod.get("metadata", {}).get("name") if isinstance(pod, Mapping) else None
            raise ReferenceTimeout(
                f"the kubelet {self.version} reference did not answer {req.get('op')}"
                f"{f' {name}' if name else ''} within {self.timeout:g} s") from None
        if not line:
            self.proc.wait()
            raise ReferenceCrashed(f"the kubelet {self.version} reference exited during "
                                   f"{req.get('op')} (code {self.proc.returncode})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._reader.join()

    def restart(self) -> None:
        """A fresh process in place of this one (after a :class:`ReferenceTimeout`)."""
        self.close()
        self._start()

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join()

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- random cases ------------------------------------------------------------------------


@dataclass
class Case:
    """A node and a script of operations: ("admit", pod), ("remove", pod), ("restart",),
    ("reconcile",) (bench/reference_cpu.py)."""

    seed: int
    topo: CPUTopology
    config: ModelConfig
    gates: dict[str, bool]
    ops: list[tuple[str, PodSpec | None]] = field(default_factory=list)
    # Memory the kubelet reserves per NUMA node (reservedMemory, memory manager Static): the
    # model's topology holds what is left of each node, the reference its capacity.
    reserved_memory: tuple[tuple[int, int], ...] = ()
    # Device-plugin devices (bench/reference_devices.py); none on most cases.
    devices: NodeDevices = field(default_factory=NodeDevices)
    # Devices their plugins list as Unhealthy, which the model is not told of.
    unhealthy: tuple[tuple[str, tuple[Device, ...]], ...] = ()

    def describe(self) -> str:
        cores = len(self.topo.core_cpus)
        c = self.config
        topo_options = ("prefer-closest," if c.prefer_closest_numa else "") + (
            f"max-numa={c.max_numa_nodes}," if c.max_numa_nodes != 8 else "")
        return (f"seed {self.seed}: {len(self.topo.online)} CPUs, {cores} cores, "
                f"{len(self.topo.numa_nodes)} NUMA, {len(self.topo.socket_cpus)} sockets; "
                f"topology {c.topology_policy}/{c.scope} {topo_options or '-'}, options "
                f"{','.join(sorted(c.options)) or '-'}, reserved "
                f"{format_cpuset(c.reserved_cpus) if c.reserved_cpus else f'{c.reserved_cpu_m}m'}"
                f", pod-level {'on' if c.pod_level else 'off'}"
                f"{'' if c.static else f', CPU policy {c.cpu_policy}'}"
                f"{reference_devices.describe(self.devices)}")


def random_topology(rng: random.Random) -> CPUTopology:
    """1-2 sockets, 1-8 NUMA nodes, SMT on or off, Linux or sequential numbering, L3 per
    NUMA node, per socket or none. Each CPU's core is its kubelet CoreID (the lowest CPU id of
    its core)."""
    sockets = rng.choice((1, 1, 2))
    numa_per_socket = rng.choice((1, 1, 2, 4)) if sockets == 1 else rng.choice((1, 2, 4))
    cores_per_numa = rng.randint(1, 6)
    threads = rng.choice((1, 2))
    linux_order = rng.random() < 0.7
    l3 = rng.choice(("numa", "socket", "none", "pairs"))
    numas = sockets * numa_per_socket
    total_cores = numas * cores_per_numa
    cpus: list[tuple[int, int, int, int]] = []  # (id, core index, socket, numa)
    for core in range(total_cores):
        numa = core // cores_per_numa
        socket = numa // numa_per_socket
        for t in range(threads):
            cpu = t * total_cores + core if linux_order else core * threads + t
            cpus.append((cpu, core, socket, numa))
    lowest: dict[int, int] = {}
    for cpu, core, _, _ in cpus:
        lowest[core] = min(cpu, lowest.get(core, cpu))
    infos = tuple(sorted((CPUInfo(cpu, lowest[core], s, n) for cpu, core, s, n in cpus),
                         key=lambda c: c.id))
    # Without an L3 the kubelet puts each core in its socket's uncore cache
    # (topology.go getUncoreCacheID), so the model is told so; the reference gets the ids.
    uncore = [(cpu, {"numa": n, "socket": s, "pairs": core // 2, "none": s}[l3])
              for cpu, core, s, n in cpus]
    memory = tuple((n, rng.choice((4, 8, 16)) * GiB) for n in range(numas))
    return CPUTopology(cpus=infos, memory=memory, uncore=tuple(sorted(uncore)))


def random_options(rng: random.Random, topology_policy: str, topo: CPUTopology
                   ) -> frozenset[str]:
    chosen: set[str] = set()
    for opt in rng.sample(OPTIONS, rng.randint(0, 3)):
        if any({opt, o} == {a, b} for a, b in EXCLUSIVE_OPTIONS for o in chosen):
            continue
        if opt == "align-by-socket" and (topology_policy == "single-numa-node"
                                         or len(topo.socket_cpus) > len(topo.numa_cpus)):
            continue
        chosen.add(opt)
    return frozenset(chosen)


def _res(cpu_m: int | None, mem: int | None, guaranteed: bool) -> Resources:
    if cpu_m is None and mem is None:
        return Resources()
    if guaranteed:
        return Resources(cpu_m, cpu_m, mem, mem)
    return Resources(cpu_m, None, mem, None)


def random_pod(rng: random.Random, index: int, budget: int) -> PodSpec:
    guaranteed = rng.random() < 0.8
    pod_level = rng.random() < 0.4
    mem = 64 * MiB

    def container(name: str, *, shared_ok: bool) -> ContainerSpec:
        if shared_ok and rng.random() < 0.35:
            return ContainerSpec(name)
        cpu_m = rng.choice((1000, 1000, 2000, 2000, 3000, 4000, 500, 1500))
        if cpu_m >= 1000 and rng.random() < 0.2:
            cpu_m = min(cpu_m * 2, max(1000, budget * 1000))
        return ContainerSpec(name, _res(cpu_m, mem, guaranteed))

    apps = tuple(container(f"app{i}", shared_ok=pod_level) for i in range(rng.randint(1, 3)))
    inits: list[ContainerSpec] = []
    for i in range(rng.choice((0, 0, 0, 1, 2))):
        c = container(f"init{i}", shared_ok=pod_level)
        sidecar = rng.random() < 0.5
        inits.append(ContainerSpec(c.name, c.resources, sidecar=sidecar, init=not sidecar))
    resources = None
    if pod_level:
        whole = sum((c.resources.cpu_request_m or 0) for c in (*apps, *inits) if not c.init)
        cpu_m = (whole // 1000 + rng.randint(0, 2)) * 1000 or 1000
        if rng.random() < 0.1:
            cpu_m += 500
        resources = _res(cpu_m, mem * 8, guaranteed)
    uid = f"uid-{index:04d}"
    return PodSpec("ref", f"pod-{index:04d}", uid, apps, tuple(inits), resources)


def random_distances(rng: random.Random, topo: CPUTopology
                     ) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Uneven symmetric NUMA distances as sysfs gives them: 10 to itself, 11-21 within a
    socket, 20-32 across sockets."""
    nodes = topo.numa_nodes
    socket = {n: topo.by_id[min(topo.numa_cpus[n])].socket for n in nodes}
    d = {(n, n): 10 for n in nodes}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            d[(a, b)] = d[(b, a)] = (rng.randint(11, 21) if socket[a] == socket[b]
                                     else rng.randint(20, 32))
    return tuple((a, tuple(d[(a, b)] for b in nodes)) for a in nodes)


def _many_numa(rng: random.Random) -> CPUTopology:
    """A machine past the topology manager's default limit: 10 or 12 NUMA nodes of 1-2
    cores, two sockets of as many, SMT on or off (some lose CPUs afterwards,
    bench/reference_machines.py)."""
    numas = rng.choice((10, 12))
    cores, threads = rng.randint(1, 2), rng.choice((1, 2))
    total = numas * cores
    infos = tuple(sorted((CPUInfo(t * total + core, core, int(core // cores >= numas // 2),
                                  core // cores)
                          for core in range(total) for t in range(threads)),
                         key=lambda c: c.id))
    return CPUTopology(cpus=infos, memory=tuple((n, 8 * GiB) for n in range(numas)),
                       uncore=tuple((c.id, c.numa_node) for c in infos))


def _with_topology_options(case: Case, version: str, seed: int, *, many_numa: bool = True
                           ) -> Case:
    """The topology manager's options, from a random stream of their own (the cases of
    earlier seeds keep their machines and pods): NUMA distances on every machine,
    prefer-closest-numa-nodes on some, now and then a machine of 10 or 12 NUMA nodes
    with or without max-allowable-numa-nodes, and on a share of seeds some CPUs offline
    (bench/reference_machines.py)."""
    rng = random.Random(f"{version}:{seed}:topology-options")
    topo = case.topo
    many = rng.random() < 0.08 and many_numa
    if many:
        topo = _many_numa(rng)
    topo = CPUTopology(topo.cpus, topo.memory, topo.uncore, topo.counts,
                       random_distances(rng, topo))
    numas = len(topo.numa_nodes)
    max_numa = 8
    if numas > 8:
        max_numa = rng.choice((8, numas, 16))
    elif rng.random() < 0.1:
        max_numa = rng.choice((8, 12))
    closest = rng.random() < 0.4
    config = replace(case.config, prefer_closest_numa=closest, max_numa_nodes=max_numa)
    # Only a new machine loses the reserved set drawn for the old one (an earlier test of
    # "topo is not case.topo" dropped every explicit set, the distances making a new topology).
    if many and config.reserved_cpus:
        config = replace(config, reserved_cpus=None, reserved_cpu_m=1000)
    return reference_machines.with_offline_cpus(replace(case, topo=topo, config=config),
                                                version, seed)


def random_case(seed: int, version: str, *, ops: int = 12, memory: bool | None = False,
                topology_options: bool = True, devices: bool | None = None,
                budget: bool = True) -> Case:
    """``memory``: under the Static memory manager (``reference_memory.with_memory``) on
    every case (``True``), none (``False``) or a share of them (``None``,
    ``reference_memory.SHARE``);
    ``topology_options``: with the topology manager's options and NUMA distances
    (:func:`_with_topology_options`), the none CPU policy and reconcile steps
    (bench/reference_cpu.py); off, the case of a seed as it was before them, and before
    devices; ``devices``: device-plugin devices on every case (``True``), none (``False``)
    or on a share of them (``None``, bench/reference_devices.py); ``budget``: each pod
    within what the kubelet merges in well under a second (bench/reference_budget.py), off
    as drawn."""
    case = _random_case(seed, version, ops=ops)
    if memory is None:
        memory = under_memory(version, seed)
    if topology_options:
        # No machine past 8 NUMA nodes with memory: the topology manager's merge walks every
        # permutation of the CPU and memory hints, 4,095 masks each on 12 nodes, which the
        # kubelet itself takes minutes over.
        case = _with_topology_options(case, version, seed, many_numa=not memory)
        case = reference_cpu.with_cpu_manager(case, version, seed)
        if devices is not False:
            case = reference_devices.with_devices(case, version, seed, always=bool(devices))
    if memory:
        case = with_memory(case, version, seed)
    return reference_budget.within_budget(case) if budget else case


def _random_case(seed: int, version: str, *, ops: int = 12) -> Case:
    rng = random.Random(f"{version}:{seed}")
    topo = random_topology(rng)
    topology_policy = rng.choice(("none", "best-effort", "restricted", "single-numa-node"))
    scope = rng.choice(("container", "pod"))
    options = random_options(rng, topology_policy, topo)
    online = sorted(topo.online)
    reserved_cpus: frozenset[int] | None = None
    reserved_m = 0
    if rng.random() < 0.3:
        reserved_cpus = frozenset(rng.sample(online, rng.randint(1, max(1, len(online) // 4))))
    else:
        reserved_m = rng.choice((1000, 1000, 2000, 1500))
    pod_level = version != "1.35" and rng.random() < 0.7
    config = ModelConfig(cpu_policy="static", memory_policy="None",
                         topology_policy=topology_policy, scope=scope, options=options,
                         reserved_cpus=reserved_cpus, reserved_cpu_m=reserved_m,
                         pod_level=pod_level, kubelet_version=version)
    gates = {"CPUManagerPolicyAlphaOptions": True, "CPUManagerPolicyBetaOptions": True,
             "PodLevelResources": True}
    if version != "1.35":
        gates["PodLevelResourceManagers"] = pod_level
    case = Case(seed, topo, config, gates)
    live: list[PodSpec] = []
    budget = max(1, len(online) // 3)
    for i in range(ops):
        roll = rng.random()
        if live and roll < 0.2:
            case.ops.append(("remove", live.pop(rng.randrange(len(live)))))
        elif live and roll < 0.3:
            case.ops.append(("restart", None))
        else:
            pod = random_pod(rng, i, budget)
            live.append(pod)
            case.ops.append(("admit", pod))
    return case


# ---- one case through both ---------------------------------------------------------------


def setup_request(case: Case) -> dict[str, Any]:
    c = case.config
    cpus = [{"id": cpu.id, "core": cpu.core, "socket": cpu.socket, "numa": cpu.numa_node,
             # A cache that is the socket's is sent as none: the kubelet then takes the
             # socket id (getUncoreCacheID), the same grouping.
             "l3": (case.topo.uncore_of[cpu.id] if case.topo.uncore
                    and case.topo.uncore_of[cpu.id] != cpu.socket else -1)}
            for cpu in case.topo.cpus]
    topology_options = {}
    if c.prefer_closest_numa:
        topology_options["prefer-closest-numa-nodes"] = "true"
    if c.max_numa_nodes != 8:
        topology_options["max-allowable-numa-nodes"] = str(c.max_numa_nodes)
    setup: dict[str, Any] = {
        "distances": {str(n): list(row) for n, row in case.topo.distances},
        "topology_options": topology_options,
        "cpus": cpus,
        **memory_setup(case),
        "cpu_policy": c.cpu_policy, "cpu_policy_options": {o: "true" for o in c.options},
        "topology_policy": c.topology_policy, "topology_scope": c.scope,
        "memory_policy": c.memory_policy, "feature_gates": case.gates,
    }
    if case.devices:
        setup["devices"] = reference_devices.setup_devices(case.devices, case.unhealthy)
    if c.reserved_cpus:
        setup["reserved_cpus"] = format_cpuset(c.reserved_cpus)
    else:
        setup["reserved_cpu"] = f"{c.reserved_cpu_m}m"
    return {"op": "setup", "setup": setup}


def model_view(model: NodeModel) -> tuple[dict[str, dict[str, frozenset[int]]],
                                         dict[str, frozenset[int]]]:
    """What the kubelet's CPU manager state would hold, as the model has it: per container
    its exclusive CPUs, or for a container on its pod's shared pool that pool; per pod its
    pod-level block."""
    containers: dict[str, dict[str, frozenset[int]]] = {}
    pods: dict[str, frozenset[int]] = {}
    for p in model.pods.values():
        for c in p.containers:
            cpus = c.exclusive or (c.cpus if c.assignment == "pod_shared" else frozenset())
            if cpus:
                containers.setdefault(p.uid, {})[c.name] = cpus
        if p.block:
            pods[p.uid] = p.block
    return containers, pods


def compare(model: NodeModel, state: Mapping[str, Any], live: Mapping[str, PodSpec]
            ) -> list[str]:
    """Differences between the model and the reference's CPU state, as CPU sets: each
    long-running container's set, each pod-level set, the default set."""
    out: list[str] = []
    containers, pods = model_view(model)
    for uid, pod in live.items():
        ref = {name: parse_cpuset(s) for name, s in (state["containers"].get(uid) or {}).items()}
        for c in pod.long_running:
            want = ref.get(c.name, frozenset())
            got = containers.get(uid, {}).get(c.name, frozenset())
            if want != got:
                out.append(f"{pod.name}/{c.name}: kubelet {format_cpuset(want) or '-'}, "
                           f"model {format_cpuset(got) or '-'}")
        want_pod = parse_cpuset(state["pods"].get(uid, ""))
        got_pod = pods.get(uid, frozenset())
        if want_pod != got_pod:
            out.append(f"{pod.name} pod-level: kubelet {format_cpuset(want_pod) or '-'}, "
                       f"model {format_cpuset(got_pod) or '-'}")
    if model.memory_enabled:
        out += compare_memory(model, state, live)
    if model.devices:
        out += reference_devices.compare_devices(model, state, live)
    return (out + reference_cpu.compare_default(model, state)
            + reference_cpu.compare_answers(model, state, live))


@dataclass
class Outcome:
    case: Case
    disagreements: list[str]
    skipped: str = ""  # why the case was not compared (a setup both refuse)
    # The first step that disagreed: its operation and pod (None for setup and restart).
    op: str = ""
    pod: PodSpec | None = None
    # The reference did not answer within its bound: never an agreement, its one
    # disagreement says so.
    timed_out: bool = False

    @property
    def agrees(self) -> bool:
        return not self.disagreements


def run_case(ref: Reference, case: Case) -> Outcome:
    answer = ref.request(setup_request(case))
    try:
        model = NodeModel(case.topo, case.config, case.devices)
    except ModelError as exc:
        if answer.get("ok"):
            return Outcome(case, [f"setup: kubelet starts, model refuses: {exc}"], op="setup")
        return Outcome(case, [], skipped=f"both refuse the setup ({exc})")
    if not answer.get("ok"):
        return Outcome(case, [f"setup: model starts, kubelet refuses: {answer.get('error')}"],
                       op="setup")
    live: dict[str, PodSpec] = {}
    for step, (op, pod) in enumerate(case.ops):
        if op == "reconcile":
            rng = random.Random(f"{case.seed}:reconcile:{step}")
            if problems := reference_cpu.reconcile_step(ref, model, live, rng):
                return Outcome(case, [f"step {step} reconcile: {p}" for p in problems], op=op)
            continue
        try:
            problems = _step(ref, model, live, op, pod)
        except _Stopped:
            break
        if problems:
            where = f"step {step} {op}{' ' + pod.name if pod else ''}"
            return Outcome(case, [f"{where}: {p}" for p in problems], op=op, pod=pod)
    return Outcome(case, [])


def _step(ref: Reference, model: NodeModel, live: dict[str, PodSpec], op: str,
          pod: PodSpec | None) -> list[str]:
    if op == "admit" and pod is not None:
        answer = ref.request({"op": "admit", "pod": pod_to_json(pod)})
        if "state" not in answer:
            raise ReferenceUnavailable(f"admit: {answer.get('error')}")
        reference_devices.tell_picks(model, answer["state"], pod)
        placed = model.admit(pod)
        if answer["ok"] != isinstance(placed, PodPlacement):
            if isinstance(placed, Rejection):
                return [f"kubelet admits, model rejects: {placed.reason}"]
            return [f"kubelet rejects ({answer.get('reason')}: {answer.get('error')}), "
                    "model admits"]
        if answer["ok"]:
            live[pod.uid] = pod
        return compare(model, answer["state"], live)
    if op == "remove" and pod is not None:
        if pod.uid not in live:
            return []
        answer = ref.request({"op": "remove", "pod_uid": pod.uid})
        model.release(pod.namespace, pod.name)
        del live[pod.uid]
        return compare(model, answer["state"], live)
    answer = ref.request({"op": "restart"})
    expected = restart(model, ref.version)
    if not answer.get("ok"):
        # ``may_fail``: an outcome of Go's map order the model allows beside its own start.
        if answer.get("error") in {expected.error, expected.may_fail} - {None}:
            raise _Stopped  # both refuse to start: nothing left to compare
        return [f"kubelet restart fails: {answer.get('error')}; model: "
                f"{expected.error or 'starts'}"]
    if expected.error is not None:
        return [f"kubelet restarts, model fails to: {expected.error}"]
    kubelet = {r["uid"]: r for r in answer.get("readmitted", [])}
    out = []
    for again in expected.readmitted:
        said = kubelet.get(again.uid)
        if said is not None and said["admitted"] != again.admitted:
            out.append(f"after a restart the kubelet {'admits' if said['admitted'] else 'refuses'}"
                       f" {again.uid} ({said.get('reason')}: {said.get('message')}), the "
                       f"model {'admits' if again.admitted else 'refuses'} ({again.reason})")
        if not again.admitted:
            live.pop(again.uid, None)
    return out or compare(model, answer["state"], live)


def run(version: str, seed: int, count: int, ref: Reference | None = None, *,
        memory: bool | None = None, devices: bool | None = None,
        timeout: float | None = CASE_TIMEOUT) -> Iterator[Outcome]:
    """``count`` random workloads from ``seed``, on ``ref`` when given (else a fresh one
    whose requests are bounded by ``timeout`` seconds); ``memory`` and ``devices``: as
    :func:`random_case` (by default a share of the cases has each). A case the reference
    does not answer in time is a timed-out outcome, one during which it exits a disagreement
    (``op`` "crash"), and the next case runs on a fresh process."""
    if ref is None:
        with Reference(version, timeout=timeout) as own:
            yield from run(version, seed, count, own, memory=memory, devices=devices)
        return
    for i in range(count):
        case = random_case(seed * 1_000_003 + i, version, memory=memory, devices=devices)
        try:
            outcome = run_case(ref, case)
        except ReferenceTimeout as exc:
            ref.restart()
            outcome = Outcome(case, [f"{exc} (killed and restarted)"], timed_out=True)
        except ReferenceCrashed as exc:
            # A disagreement of its own: the seed is printed and the run goes on.
            ref.restart()
            outcome = Outcome(case, [f"{exc}; restarted (PODRES_REFERENCE_STDERR keeps "
                                     "its panic)"], op="crash")
        yield outcome


def workload_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a run of random workloads (this module's and bench.reference_race's):
    the kubelet minor, the first seed, how many workloads (refused below 1 when parsed) and
    the memory and device mixes."""
    parser.add_argument("--version", default="1.37", choices=sorted(VERSIONS),
                        help="kubelet minor to check against (default 1.37)")
    parser.add_argument("--seed", type=int, default=1, help="first random seed (default 1)")
    parser.add_argument("--count", type=at_least_one, default=100,
                        help="random workloads to run, at least 1 (default 100)")
    parser.add_argument("--memory", action="store_true",
                        help="run every workload under the Static memory manager, with "
                             "reserved memory and hugepages per NUMA node, and compare memory "
                             "blocks and machine state too (by default one in four is)")
    parser.add_argument("--devices", action="store_true",
                        help="give every workload device-plugin devices (by default a share "
                             "of them has some) and compare each container's devices")


def at_least_one(text: str) -> int:
    """An argparse type: a count of random cases, refused below 1 (a run of none would
    print 0/0 agree and exit 0)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return count


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reference",
        description="Run N random nodes and workloads through the real kubelet's CPU, memory "
                    "and topology managers and through the allocator model, and compare "
                    "them placement by placement (docs/design.md#reference).")
    workload_flags(parser)
    parser.add_argument("--case-timeout", type=float, default=CASE_TIMEOUT, metavar="S",
                        help="seconds the reference may take to answer one request of a "
                             "case before it is killed and restarted and the case counts as "
                             f"timed out (default {CASE_TIMEOUT:g})")
    parser.add_argument("--build-only", action="store_true",
                        help="build the reference for --version if needed, and stop")
    parser.add_argument("--show", type=int, default=5,
                        help="disagreements to print in full (default 5)")
    args = parser.parse_args(argv)
    if not args.case_timeout > 0:
        parser.error("--case-timeout must be more than 0 seconds")
    try:
        started = time.monotonic()
        stale_before = stale(args.version)
        path = build(args.version, quiet=False)
    except ReferenceUnavailable as exc:
        print(f"reference {args.version}: unavailable: {exc}", file=sys.stderr)
        return 2
    if args.build_only:
        what = f"built in {time.monotonic() - started:.0f} s" if stale_before else "up to date"
        print(f"reference {args.version}: {path.relative_to(ROOT)} {what}")
        return 0
    started = time.monotonic()
    agree = shown = skipped = timed_out = 0
    for outcome in run(args.version, args.seed, args.count, memory=args.memory or None,
                       devices=args.devices or None, timeout=args.case_timeout):
        if outcome.agrees:
            agree += 1
            skipped += bool(outcome.skipped)
            continue
        if outcome.timed_out:
            # Every one is printed: a timed-out case says nothing about agreement.
            timed_out += 1
            print(f"timed out: {outcome.case.describe()}\n  {outcome.disagreements[0]}")
            continue
        if shown < args.show:
            shown += 1
            print(f"disagreement: {outcome.case.describe()}")
            for line in outcome.disagreements[:5]:
                print(f"  {line}")
    took = time.monotonic() - started
    print(f"({args.count} workloads from seed {args.seed} in {took:.1f} s; {skipped} setups "
          f"both refuse; {timed_out} timed out)")
    print(f"reference {args.version}: {agree}/{args.count} agree")
    return 0 if agree == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
