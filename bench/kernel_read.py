"""Kernel-source benchmark: ``python -m bench.kernel_read --pods 1000 --cpus 512 [--rounds N]``.

A synthetic node (a tenth of the pods pod-level with a 3-CPU block, a twentieth with one
node-exclusive CPU, the rest shared; four containers each) is written as a cgroup v2 tree
(systemd driver, containerd scopes) and a ``/proc/stat`` under a temporary directory. In
one run it measures, medians over the rounds:

- floor: a bare ``os.open``/``os.read``/``os.close`` of exactly the files the sources read
  (every container's ``cpuset.cpus.effective`` and ``cpu.stat``, every pod's
  ``cpuset.cpus`` and ``cpu.stat``, ``stat``);
- refs: matching ``/pods`` statuses to container ids (``pod_refs_from_pod_list``);
- cgroup: ``CgroupSource.read`` (layout detection, one listing per QoS class, bounded
  reads, cpuset and CPU-time parsing);
- procstat: ``read_proc_stat``;
- domain: expectations, comparison, the persistence tracker and the usage attribution;
- total: refs + cgroup + procstat + domain, the per-poll cost the poll would add.

Prints a table and, as its last line, one JSON object with the figures and the ratio of
``total`` to the floor.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporter.sim.cgroupfs import (
    ProcStatWriter,
    TreeContainer,
    TreePod,
    container_id,
    pod_slice,
    write_cgroup_tree,
)
from exporter.sources.cgroup import CgroupSource, pod_refs_from_pod_list
from exporter.sources.procstat import read_proc_stat
from reconciler.enforcement import (
    DriftState,
    EnforcementOptions,
    compare,
    expected_cpusets,
    track,
)
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
from reconciler.usage import attribute, cpu_holders


def _node(pods: int, cpus: int, per_pod: int) -> tuple[Ledger, dict[str, Any]]:
    """The ledger of a synthetic node and its ``/pods`` body (with container statuses)."""
    free = iter(range(2, cpus))  # 0-1 reserved
    allocs: list[PodAlloc] = []
    items: list[dict[str, Any]] = []
    for i in range(pods):
        names = [f"c{j}" for j in range(per_pod)]
        block: tuple[int, ...] = ()
        own: tuple[int, ...] = ()
        qos = ("Burstable", "BestEffort")[i % 2]
        try:
            if i % 10 == 0:
                block = (next(free), next(free), next(free))
                own, qos = block[:2], "Guaranteed"
            elif i % 20 == 5:
                own, qos = (next(free),), "Guaranteed"
        except StopIteration:
            block = own = ()
        containers = tuple(ContainerAlloc(n, own if j == 0 else ())
                           for j, n in enumerate(names))
        allocs.append(PodAlloc("bench", f"pod-{i}", containers, block))
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/{i}"))
        items.append({
            "metadata": {"namespace": "bench", "name": f"pod-{i}", "uid": uid},
            "status": {"phase": "Running", "qosClass": qos, "containerStatuses": [
                {"name": n, "containerID": f"containerd://{container_id(uid, n)}",
                 "state": {"running": {}}} for n in names]},
        })
    topology = Topology(tuple(CPUInfo(c, c, 0, 0) for c in range(cpus)))
    ledger = reconcile(NodeSnapshot(pods=tuple(allocs), topology=topology,
                                    allocatable=Allocatable(tuple(range(2, cpus)))))
    return ledger, {"kind": "PodList", "items": items}


def write_tree(root: Path, ledger: Ledger, pod_list: dict[str, Any]) -> list[str]:
    """The cgroup tree matching the ledger for the running containers of ``pod_list`` (as
    ``decorate_pod_list`` or a kubelet lists them); returns the files the cgroup source
    reads. Also used by bench.cycle."""
    expectations = expected_cpusets(ledger, EnforcementOptions())
    tree: list[TreePod] = []
    files: list[str] = []
    for item in pod_list["items"]:
        meta, status = item["metadata"], item["status"]
        ns, uid, name = meta["namespace"], meta["uid"], meta["name"]
        qos = status.get("qosClass", "Burstable")
        statuses = [*status.get("initContainerStatuses", ()),
                    *status.get("containerStatuses", ())]
        containers = tuple(
            TreeContainer(container_id(uid, s["name"]),
                          expectations.containers[(ns, name, s["name"])][1])
            for s in statuses if (ns, name, s["name"]) in expectations.containers)
        tree.append(TreePod(uid, qos, expectations.pods.get((ns, name), frozenset()),
                            containers))
        pod_dir = root / pod_slice(uid, qos)
        files += [str(pod_dir / "cpuset.cpus"), str(pod_dir / "cpu.stat")]
        for c in containers:
            scope = pod_dir / f"cri-containerd-{c.id}.scope"
            files += [str(scope / "cpuset.cpus.effective"), str(scope / "cpu.stat")]
    # Every cgroup has used some CPU time: its cpu.stat is read too.
    usage = {key: 1.0 for p in tree for key in (p.uid, *(c.id for c in p.containers))}
    write_cgroup_tree(root, tree, range(len(ledger.cpu_map)), usage=usage)
    return files


def _bare_reads(files: list[str]) -> None:
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 65536)
        finally:
            os.close(fd)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def measure(pods: int, cpus: int, per_pod: int, rounds: int, workdir: Path) -> dict[str, Any]:
    ledger, pod_list = _node(pods, cpus, per_pod)
    root = workdir / "cgroup"
    files = [*write_tree(root, ledger, pod_list), str(workdir / "proc" / "stat")]
    writer = ProcStatWriter(workdir / "proc" / "stat", range(cpus), user_hz=100)
    source = CgroupSource(str(root))
    options = EnforcementOptions()
    holders = cpu_holders(ledger)
    refs = pod_refs_from_pod_list(pod_list)
    before = read_proc_stat(workdir / "proc", user_hz=100)
    state = DriftState()
    figures: dict[str, list[float]] = {k: [] for k in
                                       ("floor", "refs", "cgroup", "procstat", "domain")}
    errors = 0
    for r in range(rounds):
        writer.advance(1.0, dict.fromkeys(range(cpus), 0.5))
        gc.collect()
        figures["floor"].append(_timed(lambda: _bare_reads(files)))
        figures["refs"].append(_timed(lambda: pod_refs_from_pod_list(pod_list)))
        start = time.perf_counter()
        reading = source.read(refs)
        figures["cgroup"].append((time.perf_counter() - start) * 1000.0)
        start = time.perf_counter()
        after = read_proc_stat(workdir / "proc", user_hz=100)
        figures["procstat"].append((time.perf_counter() - start) * 1000.0)
        errors += len(reading.errors)
        start = time.perf_counter()
        comparison = compare(expected_cpusets(ledger, options), reading.enforced)
        state, _ = track(state, comparison, float(r), options.reconcile_period)
        attribute(before.busy, after.busy, holders)
        figures["domain"].append((time.perf_counter() - start) * 1000.0)
        before = after
    med = {k: round(statistics.median(v), 3) for k, v in figures.items()}
    total = med["refs"] + med["cgroup"] + med["procstat"] + med["domain"]
    return {
        "pods": pods, "containers": pods * per_pod, "cpus": cpus, "rounds": rounds,
        "files": len(files), "entry_errors": errors,
        **{f"{k}_ms": v for k, v in med.items()},
        "total_ms": round(total, 3),
        "ratio": round(total / med["floor"], 2) if med["floor"] else None,
    }


def _table(result: dict[str, Any]) -> str:
    lines = [f"node: {result['pods']} pods, {result['containers']} containers, "
             f"{result['cpus']} CPUs; {result['files']} files read per poll; "
             f"{result['rounds']} rounds", "",
             f"{'measure':<10} {'median ms':>10} {'× floor':>8}"]
    for key in ("floor", "refs", "cgroup", "procstat", "domain", "total"):
        ms = result[f"{key}_ms"]
        lines.append(f"{key:<10} {ms:>10.2f} {ms / result['floor_ms']:>8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kernel_read", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--cpus", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--containers-per-pod", type=int, default=4)
    args = parser.parse_args(argv)
    if args.pods < 1 or args.cpus < 4 or args.rounds < 1 or args.containers_per_pod < 1:
        parser.error("need --pods ≥ 1, --cpus ≥ 4, --rounds ≥ 1, --containers-per-pod ≥ 1")
    workdir = Path(tempfile.mkdtemp(prefix="podres-kbench-", dir="/tmp"))
    try:
        result = measure(args.pods, args.cpus, args.containers_per_pod, args.rounds, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(_table(result))
    print(json.dumps(result, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
