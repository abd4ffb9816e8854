"""``plan --fleet`` at fleet size: ``python -m bench.fleet_plan [--nodes 1000] [--runs 3]
[--distinct]``.

A SQLite history holding ``--nodes`` nodes' placement states, written as their exporters
write them (the embedded write path, one transaction per node): four machine types (16 to
128 CPUs, one to four NUMA nodes, with and without SMT), three kubelet configurations and
ten levels of load (the first CPUs taken by running pods), so about 120 distinct states, as
a fleet of a few machine types is; ``--distinct`` gives every node its own free CPUs (no
two states alike: the cache's worst case).

Timed, ``--runs`` times, in this process over the same file (the median is printed):

- ``floor``: the rows alone (one ``SELECT`` of ``nodes`` joined with ``node_placement``,
  every column fetched), the least any answer must do;
- ``read``: the rows parsed into node states (``fleetread.read_fleet``);
- ``plan``: the whole answer for a 4-CPU Guaranteed pod (read, model each distinct state,
  rank, JSON: ``fleetread.plan_on_fleet`` + ``answer_json``);
- ``cli``: ``podres-exporter plan --fleet -o json`` as a process (imports included), once.

Wall and CPU time (this process's, the child's for ``cli``) are both printed: on a shared
machine the wall time also counts other processes' turns. Ratios are of CPU times.

Figures, never assertions: a table and, as its last line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from exporter.history import open_store
from exporter.history.changes import ChangeSet
from exporter.history.embedded import open_embedded
from exporter.history.fleetread import answer_json, plan_on_fleet, read_fleet
from exporter.history.placement import placement_row
from exporter.history.schema import node_placement, nodes
from exporter.sources.topology import topology_from_json
from reconciler.allocator.config import ModelConfig
from reconciler.allocator.live import NodeState
from reconciler.kube import kubelet_config_from_json
from reconciler.manifests import workloads_in_manifest

# (sockets, cores per socket, threads per core, NUMA nodes per socket)
MACHINES = ((1, 8, 2, 1), (2, 16, 2, 1), (2, 32, 2, 2), (2, 24, 1, 1))
POLICIES = (("single-numa-node", "container"), ("none", "container"), ("best-effort", "pod"))
LEVELS = 10
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "shop", "name": "api"},
       "spec": {"containers": [{"name": "app", "image": "app:1", "resources": {
           "requests": {"cpu": "4", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "1Gi"}}}]}}


def topology(sockets: int, cores: int, threads: int, nps: int) -> dict[str, Any]:
    """CPU ids as Linux numbers them on such machines: the threads of a core are
    ``core`` and ``core + sockets × cores``."""
    per_numa = cores // nps
    cpus = [{"id": t * sockets * cores + s * cores + c, "core": s * cores + c, "socket": s,
             "numa_node": s * nps + c // per_numa}
            for t in range(threads) for s in range(sockets) for c in range(cores)]
    return {"cpus": sorted(cpus, key=lambda c: c["id"]),
            "memory": [{"numa_node": n, "bytes": 64 << 30} for n in range(sockets * nps)]}


def states(count: int, distinct: bool) -> list[tuple[str, NodeState]]:
    out = []
    for i in range(count):
        machine = MACHINES[i % len(MACHINES)]
        policy, scope = POLICIES[(i // len(MACHINES)) % len(POLICIES)]
        level = (i // (len(MACHINES) * len(POLICIES))) % LEVELS
        topo = topology_from_json(topology(*machine))
        online = sorted(c.id for c in topo.cpus)
        taken = set(online[1:1 + level * len(online) // (LEVELS + 2)])
        config = kubelet_config_from_json({"kubeletconfig": {
            "cpuManagerPolicy": "static", "memoryManagerPolicy": "None",
            "topologyManagerPolicy": policy, "topologyManagerScope": scope,
            "reservedSystemCPUs": "0",
            "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True}}})
        free = frozenset(online) - taken - {0}
        # --distinct: a byte less free memory per node, which the cache cannot know is
        # irrelevant here (the memory manager is off), so no two nodes are alike.
        memory = (60 << 30) - (i if distinct else 0)
        out.append((f"node-{i:04d}", NodeState(topo, config, free,
                                               tuple((n, memory) for n, _ in topo.memory))))
    return out


def write(url: str, fleet: list[tuple[str, NodeState]]) -> float:
    store = open_embedded(url)
    started = time.perf_counter()
    at = datetime.now(UTC)
    try:
        for name, s in fleet:
            store.write(name, "bench", [ChangeSet(1, at, at, placement=placement_row(s))])
    finally:
        store.close()
    return time.perf_counter() - started


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``fn`` (the CPU time of this process: on a
    shared machine the wall time also counts the other processes' turns)."""
    wall, cpu = [], []
    for _ in range(runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return statistics.median(wall) * 1000, statistics.median(cpu) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--distinct", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="podres-fleet-plan-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'history.db'}"
        fleet = states(args.nodes, args.distinct)
        write_s = write(url, fleet)
        store = open_store(url, mode="readonly")
        templates = workloads_in_manifest(POD).templates
        fallback = ModelConfig()

        def floor() -> None:
            n, p = nodes, node_placement
            with store.read() as conn:
                conn.execute(select(n.c.name, n.c.last_seen, *p.c).select_from(
                    n.outerjoin(p, p.c.node_id == n.c.id)).order_by(n.c.name)).all()

        def plan() -> dict[str, Any]:
            return answer_json(plan_on_fleet(store, templates, fallback))

        floor()  # warm the page cache and SQLAlchemy's statement cache alike
        figures: dict[str, float] = {}
        for key, fn in (("floor", floor), ("read", lambda: read_fleet(store)), ("plan", plan)):
            figures[f"{key}_ms"], figures[f"{key}_cpu_ms"] = median_ms(fn, args.runs)
        answer = plan()
        distinct = len({s.key or placement_row(s).digest for _, s in fleet})
        pod = Path(tmp) / "pod.json"
        pod.write_text(json.dumps(POD))
        started, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "exporter.cli", "plan", "--fleet", "-f",
                        str(pod), "--history.url", url, "-o", "json"], check=True,
                       stdout=subprocess.DEVNULL)
        figures["cli_ms"] = (time.perf_counter() - started) * 1000
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        figures["cli_cpu_ms"] = (after.ru_utime + after.ru_stime - children.ru_utime
                                 - children.ru_stime) * 1000
        store.close()
    result = {"nodes": args.nodes, "distinct_states": distinct, "write_s": round(write_s, 2),
              **{k: round(v, 1) for k, v in figures.items()},
              "read_over_floor": round(figures["read_cpu_ms"] / figures["floor_cpu_ms"], 2),
              "plan_over_floor": round(figures["plan_cpu_ms"] / figures["floor_cpu_ms"], 2),
              "admitted": sum(1 for n in answer["nodes"] if n["admitted"])}
    print(f"{args.nodes} nodes, {distinct} distinct states; written in {write_s:.1f} s")
    print(f"  {'':<6} {'wall':>9}     {'CPU':>9}     CPU/floor")
    for key in ("floor", "read", "plan"):
        cpu = figures[f"{key}_cpu_ms"]
        print(f"  {key:<6} {figures[f'{key}_ms']:9.1f} ms  {cpu:9.1f} ms  "
              f"{cpu / figures['floor_cpu_ms']:6.1f}x")
    print(f"  cli    {figures['cli_ms']:9.1f} ms  {figures['cli_cpu_ms']:9.1f} ms  "
          "(a process: imports included)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
