"""Builders and comparisons shared by the foundation tests."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.kube import (
    ContainerSpec,
    KubeletConfig,
    PodSpec,
    Resources,
    cpu_millis,
    memory_bytes,
)
from reconciler.ledger import Ledger
from reconciler.snapshot import (
    Allocatable,
    ContainerAlloc,
    CPUInfo,
    MemoryBlock,
    NodeSnapshot,
    PodAlloc,
    Topology,
)

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "tests" / "data" / "scenarios"
SCENARIO_NAMES = sorted(p.name for p in SCENARIOS.iterdir() if (p / "expect.json").exists())
CLI = str(Path(sys.executable).with_name("podres-exporter"))
GI = 2**30


# -- scenario comparison (tests/data/scenarios/README.md) ----------------------------------

def compare_expect(ledger: Mapping[str, Any], expect: Mapping[str, Any]) -> list[str]:
    """Differences between a ledger JSON object and a scenario's expect.json, as the
    scenarios README describes; empty when they agree."""
    problems: list[str] = []
    for key in ("cpu_pools", "cpu_pools_by_numa", "reclaimed_cpus", "reclaimable_cpus"):
        if key in expect and ledger.get(key) != expect[key]:
            problems.append(f"{key}: got {ledger.get(key)!r}, want {expect[key]!r}")
    for mtype, pools in (expect.get("memory_pools") or {}).items():
        got = ledger["memory_pools"].get(mtype)
        if got != pools:
            problems.append(f"memory_pools[{mtype}]: got {got!r}, want {pools!r}")
    containers = {f"{c['namespace']}/{c['pod']}/{c['name']}": c for c in ledger["containers"]}
    for key, fields in (expect.get("containers") or {}).items():
        problems += _compare_fields(f"containers[{key}]", containers.get(key), fields)
    pods = {f"{p['namespace']}/{p['name']}": p for p in ledger["pods"]}
    for key, fields in (expect.get("pods") or {}).items():
        problems += _compare_fields(f"pods[{key}]", pods.get(key), fields)
    if "anomaly_kinds" in expect:
        kinds = sorted({a["kind"] for a in ledger["anomalies"]})
        if kinds != expect["anomaly_kinds"]:
            problems.append(f"anomaly_kinds: got {kinds}, want {expect['anomaly_kinds']}")
    return problems


def _compare_fields(where: str, got: Mapping[str, Any] | None,
                    want: Mapping[str, Any]) -> list[str]:
    if got is None:
        return [f"{where}: missing from the ledger"]
    return [f"{where}.{k}: got {got.get(k)!r}, want {v!r}" for k, v in want.items()
            if got.get(k) != v]


def load_expect(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((SCENARIOS / name / "expect.json").read_text())
    return result


# -- running the real CLI ------------------------------------------------------------------

@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    env["GRPC_VERBOSITY"] = "ERROR"
    env.update(extra or {})
    return env


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60,
            prefix: Sequence[str] = ()) -> Run:
    """The installed console script in a subprocess (the way an operator runs it)."""
    proc = subprocess.run([*prefix, CLI, *args], capture_output=True, text=True,
                          env=cli_env(env), timeout=timeout, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


async def arun_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60,
                   prefix: Sequence[str] = ()) -> Run:
    """``run_cli`` from inside an event loop (a simulator runs in the test's loop)."""
    proc = await asyncio.create_subprocess_exec(
        *prefix, CLI, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=cli_env(env))
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


def assert_one_clear_line(run: Run, *needles: str) -> str:
    """Non-zero exit, exactly one line on stderr, no traceback, each needle in it."""
    assert run.code != 0, run
    assert "Traceback" not in run.err, run.err
    assert len(run.err_lines) == 1, run.err
    line = run.err_lines[0]
    for needle in needles:
        assert needle.lower() in line.lower(), line
    return line


# -- hand-built snapshots ------------------------------------------------------------------

def topology(cpus: int, *, numa: int = 1, sockets: int = 1, smt: int = 1,
             memory_per_node: int = 64 * GI) -> Topology:
    """``cpus`` CPUs numbered as Linux does on x86 (first threads of every core, then the
    siblings), spread evenly over sockets and NUMA nodes."""
    cores = cpus // smt
    per_socket = cores // sockets
    per_numa = cores // numa
    out = []
    for thread in range(smt):
        for core in range(cores):
            out.append(CPUInfo(thread * cores + core, core, core // per_socket,
                               core // per_numa))
    return Topology(tuple(sorted(out, key=lambda c: c.id)),
                    tuple((n, memory_per_node) for n in range(numa)))


def mem(size: int, mtype: str = "memory", *nodes: int) -> MemoryBlock:
    return MemoryBlock(mtype, size, tuple(nodes))


def ctr(name: str, cpus: Iterable[int] = (), memory: Iterable[MemoryBlock] = ()
        ) -> ContainerAlloc:
    return ContainerAlloc(name, tuple(cpus), tuple(memory))


def pod(name: str, *containers: ContainerAlloc, cpus: Iterable[int] = (),
        memory: Iterable[MemoryBlock] = (), namespace: str = "default") -> PodAlloc:
    return PodAlloc(namespace, name, tuple(containers), tuple(cpus), tuple(memory))


def res(cpu: str | None = None, memory: str | None = None, *,
        guaranteed: bool = True) -> Resources:
    c = cpu_millis(cpu) if cpu is not None else None
    m = memory_bytes(memory) if memory is not None else None
    return Resources(c, c, m, m) if guaranteed else Resources(c, None, m, None)


def cspec(name: str, cpu: str | None = None, memory: str | None = "1Gi", *,
          sidecar: bool = False, guaranteed: bool = True) -> ContainerSpec:
    r = res(cpu, memory, guaranteed=guaranteed) if cpu is not None else Resources()
    return ContainerSpec(name, r, sidecar=sidecar)


def pspec(name: str, *containers: ContainerSpec, budget: str | None = None,
          budget_memory: str = "8Gi", sidecars: Sequence[ContainerSpec] = (),
          namespace: str = "default") -> PodSpec:
    return PodSpec(namespace, name, uid=f"uid-{name}", containers=tuple(containers),
                   init_containers=tuple(sidecars),
                   resources=res(budget, budget_memory) if budget is not None else None)


STATIC = KubeletConfig(cpu_manager_policy="static", memory_manager_policy="Static",
                       topology_manager_policy="single-numa-node",
                       topology_manager_scope="pod")


def snapshot(*pods: PodAlloc, topo: Topology | None = None, allocatable: Iterable[int] = (),
             specs: Sequence[PodSpec] | None = None, config: KubeletConfig | None = None,
             ) -> NodeSnapshot:
    alloc = tuple(allocatable)
    return NodeSnapshot(pods=tuple(pods), allocatable=Allocatable(alloc) if alloc else None,
                        topology=topo, pod_specs=tuple(specs) if specs is not None else None,
                        kubelet_config=config)


def kinds(ledger: Ledger) -> list[str]:
    return sorted({a.kind for a in ledger.anomalies})


def check_invariants(ledger: Ledger, topo: Topology | None = None) -> None:
    """The one-pool-per-CPU invariants of docs/design.md#cpu-pools that every ledger must keep."""
    doc = ledger.to_json()
    json.dumps(doc)  # serialisable whatever the names hold
    assert ledger.cpu_pools.total == ledger.online_cpus
    cells = [c.id for c in ledger.cpu_map]
    assert len(cells) == len(set(cells)) == ledger.online_cpus
    counted: dict[str, int] = {}
    for cell in ledger.cpu_map:
        counted[cell.pool] = counted.get(cell.pool, 0) + 1
    assert {k: v for k, v in ledger.cpu_pools.to_json().items() if v} == counted
    if topo is not None:
        assert set(cells) == set(topo.online)
        per_node: dict[int, int] = {}
        for c in topo.cpus:
            per_node[c.numa_node] = per_node.get(c.numa_node, 0) + 1
        by_numa = dict(ledger.cpu_pools_by_numa)
        assert set(by_numa) == set(per_node)
        for node, counts in by_numa.items():
            assert counts.total == per_node[node]
        for pool in ledger.cpu_pools.to_json():
            assert sum(getattr(p, pool) for p in by_numa.values()) == \
                getattr(ledger.cpu_pools, pool)
