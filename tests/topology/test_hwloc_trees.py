"""Real machines: every sysfs tree of tests/data/hwloc (from hwloc's test suite) read by the
exporter's reader gives the topology the kubelet builds on that machine, CPU by CPU
(docs/design.md#topology)."""

from __future__ import annotations

import json
import random
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.errors import SourceError
from exporter.sources.topology import read_sysfs_topology, topology_from_json, topology_to_json
from reconciler.allocator import from_snapshot
from reconciler.kubelet_topology import divergences

ARCHIVE = Path(__file__).parents[1] / "data" / "hwloc" / "hwloc-trees.tar.xz"
with tarfile.open(ARCHIVE) as _tar:
    NAMES = sorted({Path(m.name).parts[1] for m in _tar.getmembers()
                    if len(Path(m.name).parts) > 2})


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hwloc")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(root, filter="data")
    return root / "hwloc-trees"


def _read(tree: Path) -> Any:
    expected = json.loads((tree / "expected.json").read_text())
    topo = read_sysfs_topology(tree / "sys", goarch=expected.get("goarch") or "amd64")
    return expected, topo


def test_the_archive_holds_the_25_machines() -> None:
    assert len(NAMES) == 25


@pytest.mark.parametrize("name", NAMES)
def test_kubelet_view_of_a_real_machine(trees: Path, name: str) -> None:
    expected, topo = _read(trees / name)
    rows = [{"cpu": c.id, "core": c.core, "socket": c.socket, "numa": c.numa_node,
             "uncore": c.uncore} for c in topo.cpus]
    assert rows == expected["cpus"]
    assert topo.kernel is not None
    error = topo.kernel.discover_error
    assert (error is None) == (expected["kubelet_discover_error"] is None), error
    if error is None:
        counts = expected["counts"]
        assert topo.counts is not None
        assert tuple(topo.counts) == (counts["NumCPUs"], counts["NumCores"],
                                      counts["NumSockets"], counts["NumNUMANodes"],
                                      counts["NumUncoreCache"])
    if expected.get("topology_nodes") is not None:
        assert list(topo.kernel.numa_nodes) == sorted(expected["topology_nodes"])
    # The model partitions the machine the same way (cores, sockets, NUMA, uncore).
    if topo.cpus:
        model = from_snapshot(topo)
        assert {frozenset(v) for v in model.core_cpus.values()} == _groups(rows, "core")
        assert {frozenset(v) for v in model.numa_cpus.values()} == _groups(rows, "numa")
        assert {frozenset(v) for v in model.uncore_cpus.values()} == _groups(rows, "uncore")
    # What a recorded node keeps of it reads back the same.
    assert topology_from_json(json.loads(json.dumps(topology_to_json(topo)))) == topo


def _groups(rows: list[dict[str, int]], key: str) -> set[frozenset[int]]:
    out: dict[int, set[int]] = {}
    for r in rows:
        out.setdefault(r[key], set()).add(r["cpu"])
    return {frozenset(v) for v in out.values()}


def test_core_ids_restart_per_package_and_node(trees: Path) -> None:
    """The commonest fault of a raw ``core_id``: on this 4-package, 8-node AMD machine the
    ids restart in every node, and 64 CPUs would merge into 8 cores."""
    _, topo = _read(trees / "64amd64-4s2n4ca2co")
    raw = {int((trees / "64amd64-4s2n4ca2co/sys/devices/system/cpu" / f"cpu{c.id}" /
                "topology/core_id").read_text()) for c in topo.cpus}
    assert len(raw) < 16 and len({c.core for c in topo.cpus}) == 64


def test_the_kernel_and_the_kubelet_disagree_where_hwloc_saw_it(trees: Path) -> None:
    """Divergences on real trees: offline-cpu CPUs without ``core_id``, more than 8 NUMA
    nodes, an unreadable machine."""
    _, offlines = _read(trees / "16em64t-4s2c2t-offlines")
    kinds = {d.kind: d for d in divergences(offlines)}
    assert set(kinds) == {"cpus_dropped"}
    assert kinds["cpus_dropped"].cpus == frozenset({2, 5, 13, 14})
    _, many = _read(trees / "128ia64-17n4s2c")
    assert [d.kind for d in divergences(many, topology_policy="best-effort")] == [
        "numa_nodes_over_limit"]
    assert divergences(many, topology_policy="none") == ()
    assert divergences(many, topology_policy="best-effort", max_numa_nodes=17) == ()
    _, fake = _read(trees / "4fake-4gr1nu1pu")
    assert [d.kind for d in divergences(fake)] == ["discover_failed"]


def _files(tree: Path) -> Iterator[Path]:
    return (p for p in sorted(tree.rglob("*")) if p.is_file())


@pytest.mark.parametrize("name", NAMES)
def test_a_damaged_tree_never_raises_anything_but_a_source_error(
        trees: Path, name: str, tmp_path: Path) -> None:
    """Reading any tree, cut or garbled anywhere, gives a topology or a SourceError."""
    rng = random.Random(name)
    copy = tmp_path / "sys"
    shutil.copytree(trees / name / "sys", copy)
    files = list(_files(copy))
    for _ in range(12):
        target = rng.choice(files)
        if not target.exists():
            continue
        action = rng.randrange(4)
        if action == 0:
            target.unlink()
        elif action == 1:
            target.write_bytes(rng.randbytes(rng.randrange(0, 64)))
        elif action == 2:
            target.write_text("9" * 5000)
        else:
            target.write_text("0-4294967296,\0x")
        try:
            topo = read_sysfs_topology(copy)
        except SourceError:
            continue
        assert topo.kernel is not None
        assert all(c.core in topo.online for c in topo.cpus)


def test_numa_distances_steer_prefer_closest_numa_nodes(trees: Path) -> None:
    """sysfs nodeN/distance rows, as cAdvisor reads them, reach the model: on a 4-socket
    AMD machine of 8 NUMA nodes (distances 16 and 22) the topology manager's
    prefer-closest-numa-nodes picks the close pair where plain narrowest picks the lower
    bitmask (docs/design.md#allocator)."""
    from reconciler.allocator import ModelConfig, NodeModel
    from reconciler.kube import ContainerSpec, PodSpec, Resources

    tree = trees / "64amd64-4p2n4ca2co" / "sys"
    topo = read_sysfs_topology(tree, goarch="amd64")
    node_dir = tree / "devices" / "system" / "node"
    assert topo.distances == tuple(
        (n, tuple(int(d) for d in (node_dir / f"node{n}" / "distance").read_text().split()))
        for n in range(8))
    model_topo = from_snapshot(topo)

    def pod(name: str, cpus: int) -> PodSpec:
        r = Resources(cpus * 1000, cpus * 1000, 2**20, 2**20)
        return PodSpec("d", name, name, (ContainerSpec("app", r),))

    chosen = {}
    for closest in (False, True):
        model = NodeModel(model_topo, ModelConfig(
            topology_policy="best-effort", memory_policy="None", reserved_cpu_m=1000,
            prefer_closest_numa=closest))
        for name in ("fill1", "fill2"):  # nodes 1 and 2 (node 0 has a reserved CPU)
            model.admit(pod(name, 8))
        placed = model.admit(pod("wide", 12))
        assert not isinstance(placed, str) and placed.numa_hint is not None
        chosen[closest] = placed.numa_hint
    assert chosen == {False: {0, 3}, True: {0, 4}}
    assert [model_topo.average_distance(m) for m in (chosen[False], chosen[True])] == [16, 13]
    # A tree without distance files: the option cannot be used, as in the kubelet.
    bare = read_sysfs_topology(trees / "4fake-4gr1nu1pu" / "sys", goarch="amd64")
    assert bare.distances == ()
