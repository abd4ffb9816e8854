"""Acceptance of ``plan --fleet`` (issue 26, item 2): five ``podres-exporter serve``
processes poll five simulated kubelets (real gRPC on unix sockets, real HTTPS for
``/configz``) of different topologies, settings and workloads, all writing one SQLite
history; ``plan --fleet -f pod.yaml --history.url`` over that file ranks the nodes in the
order worked out by hand below (docs/plan.md#fleet)."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# The manifest: one Guaranteed pod asking for 4 whole CPUs.
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"namespace": "shop", "name": "api"},
       "spec": {"containers": [{"name": "app", "image": "app:1", "resources": {
           "requests": {"cpu": "4", "memory": "1Gi"},
           "limits": {"cpu": "4", "memory": "1Gi"}}}]}}


def topology(numa_sizes: list[int]) -> dict[str, Any]:
    """CPUs numbered from 0, one socket per NUMA node, no SMT (a core per CPU)."""
    cpus, first = [], 0
    for numa, size in enumerate(numa_sizes):
        cpus += [{"id": i, "core": i, "socket": numa, "numa_node": numa}
                 for i in range(first, first + size)]
        first += size
    return {"cpus": cpus, "memory": [{"numa_node": n, "bytes": 64 << 30}
                                     for n in range(len(numa_sizes))]}


def configz(cpu_policy: str, topology_policy: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "cpuManagerPolicy": cpu_policy, "memoryManagerPolicy": "None",
        "topologyManagerPolicy": topology_policy, "topologyManagerScope": "container",
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True}}
    if cpu_policy == "static":
        cfg["reservedSystemCPUs"] = "0"
    return {"kubeletconfig": cfg}


def holder(cpus: list[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A running pod ``batch/hog`` whose one container holds ``cpus`` exclusively: its List
    entry and its spec."""
    listing = {"namespace": "batch", "name": "hog", "containers": [
        {"name": "hog", "cpuIds": [str(c) for c in cpus]}]}
    q = {"cpu": str(len(cpus)), "memory": "1Gi"}
    spec = {"metadata": {"namespace": "batch", "name": "hog", "uid": "uid-batch-hog"},
            "spec": {"containers": [{"name": "hog", "image": "hog:1",
                                     "resources": {"requests": q, "limits": q}}]},
            "status": {"phase": "Running", "qosClass": "Guaranteed"}}
    return listing, spec


# Each node, and the hand-worked answer for the 4-CPU pod (reserved CPU 0 where static):
NODES: dict[str, dict[str, Any]] = {
    # 16 CPUs, NUMA 0 = 0-7, NUMA 1 = 8-15, single-numa-node, nothing running. Free: 1-15
    # (7 on NUMA 0, 8 on NUMA 1). Both NUMA nodes can hold 4 CPUs; the topology manager
    # takes the narrowest hint with the lowest node, NUMA 0: admitted on NUMA {0}, 15 - 4
    # = 11 CPUs left.
    "n-big": {"numa": [8, 8], "cpu": "static", "topo": "single-numa-node", "held": []},
    # 8 CPUs, NUMA 0 = socket 0 = 0-3, NUMA 1 = socket 1 = 4-7, topology policy none,
    # nothing running. Free: 1-7. 4 CPUs are a whole socket and socket 1 is wholly free:
    # the take gives 4-7, NUMA {1}; 7 - 4 = 3 left.
    "n-wide": {"numa": [4, 4], "cpu": "static", "topo": "none", "held": []},
    # 8 CPUs on one NUMA node, CPU manager policy none: the pod is admitted into the shared
    # pool, no exclusive CPUs, so it counts as using every NUMA node of the node (one) and
    # leaves 0 CPUs for exclusive allocation.
    "n-none": {"numa": [8], "cpu": "none", "topo": "none", "held": []},
    # 12 CPUs, NUMA 0 = 0-5, NUMA 1 = 6-11, topology policy none; batch/hog holds 3-5 and
    # 9-11. Free: 1-2 (NUMA 0) and 6-8 (NUMA 1), 5 CPUs: no NUMA node has 4, so the take
    # spans both, NUMA {0, 1}, and 1 CPU is left.
    "n-split": {"numa": [6, 6], "cpu": "static", "topo": "none", "held": [3, 4, 5, 9, 10, 11]},
    # 8 CPUs, NUMA 0 = 0-3, NUMA 1 = 4-7, single-numa-node; batch/hog holds 4-7. Free: 1-3,
    # 3 CPUs: no hint can hold 4, the kubelet refuses the pod; nothing taken, 3 left.
    "n-full": {"numa": [4, 4], "cpu": "static", "topo": "single-numa-node",
               "held": [4, 5, 6, 7]},
}
# Admitted first; then fewer NUMA nodes (n-big, n-wide, n-none: 1; n-split: 2); among equal
# NUMA counts more CPUs left (n-big 11 > n-wide 3 > n-none 0); refused last.
EXPECTED = [("n-big", True, [0], 11), ("n-wide", True, [1], 3), ("n-none", True, [0], 0),
            ("n-split", True, [0, 1], 1), ("n-full", False, [], 3)]


def write_fixture(directory: Path, node: dict[str, Any]) -> Path:
    directory.mkdir(parents=True)
    total = sum(node["numa"])
    listing, pods = [], []
    if node["held"]:
        entry, spec = holder(node["held"])
        listing.append(entry)
        pods.append(spec)
    start = 1 if node["cpu"] == "static" else 0
    files = {
        "list.json": {"podResources": listing},
        "allocatable.json": {"cpuIds": [str(c) for c in range(start, total)]},
        "configz.json": configz(node["cpu"], node["topo"]),
        "topology.json": topology(node["numa"]),
        "pods.json": {"kind": "PodList", "apiVersion": "v1", "items": pods},
    }
    for name, obj in files.items():
        (directory / name).write_text(json.dumps(obj))
    return directory


async def _wait_for_rows(db: Path, count: int, procs: list[Any], logs: list[Path]) -> None:
    deadline = time.monotonic() + 120  # only stops a broken test from hanging
    while True:
        if db.exists():
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                try:
                    n = conn.execute("SELECT count(*) FROM node_placement").fetchone()[0]
                except sqlite3.OperationalError:  # the schema is being created
                    n = 0
            if n == count:
                return
        dead = [p for p in procs if p.returncode is not None]
        if dead or time.monotonic() > deadline:
            tails = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in logs)
            raise AssertionError(f"placement rows not written ({len(dead)} exited)\n{tails}")
        await asyncio.sleep(0.2)


async def _plan(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter.cli", "plan", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_plan_fleet_ranks_nodes_written_by_serve(tmp_path: Path, start_sim: Any) -> None:
    db = tmp_path / "history.db"
    url = f"sqlite:///{db}"
    procs, logs = [], []
    token = tmp_path / "token"
    token.write_text("fleet-plan-token\n")
    try:
        for name, node in NODES.items():
            fixture = write_fixture(tmp_path / name, node)
            sim = await start_sim(fixture, http=True, socket_name=f"{name}.sock")
            log = tmp_path / f"{name}.log"
            logs.append(log)
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "exporter.cli", "serve",
                "--web.listen-address", "127.0.0.1:0", "--node-name", name,
                "--podresources.socket", sim.socket_path,
                "--kubelet.url", sim.http_url, "--kubelet.ca-file", str(sim.cert_path),
                "--kubelet.token-file", str(token),
                "--topology", str(fixture / "topology.json"),
                "--poll.interval", "500ms", "--history.url", url,
                "--cgroup.root", "", "--proc.root", "", "--log.level", "warn",
                stdout=log.open("wb"), stderr=asyncio.subprocess.STDOUT,
                env=dict(os.environ, GRPC_VERBOSITY="ERROR", PYTHONPATH=str(REPO))))
        await _wait_for_rows(db, len(NODES), procs, logs)
    finally:
        for p in procs:
            if p.returncode is None:
                p.terminate()
        for p in procs:
            await p.wait()

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(json.dumps(POD))
    code, out, err = await _plan("--fleet", "-f", str(manifest), "--history.url", url,
                                 "-o", "json")
    assert code == 0, err
    answer = json.loads(out)
    got = [(n["node"], n["admitted"], n["numa_nodes"], n["cpus_left"])
           for n in answer["nodes"]]
    assert got == EXPECTED
    assert all(n["config"] == "recorded" for n in answer["nodes"])
    assert [n["rank"] for n in answer["nodes"]] == [1, 2, 3, 4, 5]
    by_name = {n["node"]: n for n in answer["nodes"]}
    assert by_name["n-wide"]["pods"][0]["cpus"] == "4-7"
    assert by_name["n-full"]["reason"]  # the kubelet's words for the refusal

    code, table, err = await _plan("--fleet", "-f", str(manifest), "--history.url", url)
    assert code == 0, err
    rows = [line.split()[:3] for line in table.splitlines()[1:6]]
    assert rows == [[str(i + 1), name, "yes" if ok else "no"]
                    for i, (name, ok, _, _) in enumerate(EXPECTED)]
