"""The sysfs topology reader on fixture trees (tests/foundation/data/sysfs), and the
topology.json form (docs/design.md#sources)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.errors import SourceError
from exporter.sources.topology import (
    load_topology_file,
    read_sysfs_topology,
    topology_from_json,
    topology_to_json,
)
from foundation.helpers import SCENARIOS, arun_cli
from reconciler import kubelet_topology
from reconciler.kubelet_topology import divergences
from reconciler.snapshot import CPUInfo, TopologyCounts

SYSFS = Path(__file__).parent / "data" / "sysfs"


def test_smt_two_socket_tree() -> None:
    topo = read_sysfs_topology(SYSFS / "smt-2socket")
    # sysfs core_id restarts in each package (0, 1, 0, 1); the kubelet names a core after
    # its lowest CPU, so the two packages' cores stay apart.
    assert [(c.id, c.core, c.socket, c.numa_node) for c in topo.cpus] == [
        (0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 1, 1), (3, 3, 1, 1),
        (4, 0, 0, 0), (5, 1, 0, 0), (6, 2, 1, 1), (7, 3, 1, 1)]
    assert topo.online == frozenset(range(8))
    assert topo.numa_nodes == (0, 1)
    assert topo.memory == ((0, 16384000 * 1024), (1, 16384000 * 1024))
    siblings: dict[int, list[int]] = {}
    for c in topo.cpus:
        siblings.setdefault(c.core, []).append(c.id)
    assert sorted(siblings.values()) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert topo.counts == TopologyCounts(cpus=8, cores=4, sockets=2, numa_nodes=2,
                                         uncore_caches=2)


def test_uncore_cache_ids() -> None:
    """A core's first CPU's L3 (shared by fewer CPUs than its NUMA node has) is its uncore
    cache. The first cache that cannot be read (cpu3's ``id``) ends its node's walk: core
    {3, 7} falls back to its socket's id, 1, the same number as socket 0's second L3: the
    kubelet's ids collide there, and so do ours."""
    topo = read_sysfs_topology(SYSFS / "uncore")
    assert [(c.id, c.uncore) for c in topo.cpus] == [
        (0, 0), (1, 1), (2, 2), (3, 1), (4, 0), (5, 1), (6, 2), (7, 1)]
    # Trees without cache directories: every core in its socket's cache.
    assert [c.uncore for c in read_sysfs_topology(SYSFS / "smt-2socket").cpus] == [
        0, 0, 1, 1, 0, 0, 1, 1]
    assert topology_from_json(json.loads(json.dumps(topology_to_json(topo)))) == topo
    from reconciler.allocator import from_snapshot

    model = from_snapshot(topo)
    assert model.uncore_cpus == {0: frozenset({0, 4}), 1: frozenset({1, 5, 3, 7}),
                                 2: frozenset({2, 6})}
    assert from_snapshot(model.to_snapshot()).uncore_cpus == model.uncore_cpus
    # topology.json without uncore ids: the socket's, as the kubelet's getUncoreCacheID.
    bare = topology_from_json({"cpus": [{"id": 0, "socket": 0}, {"id": 1, "socket": 1}]})
    assert from_snapshot(bare).uncore_cpus == {0: frozenset({0}), 1: frozenset({1})}


def test_bad_uncore_in_topology_json() -> None:
    with pytest.raises(SourceError, match="bad CPU entry"):
        topology_from_json({"cpus": [{"id": 0, "uncore": "x"}]})
    topo = topology_from_json({"cpus": [{"id": 0, "uncore": 5}, {"id": 1}]})
    assert [c.uncore for c in topo.cpus] == [5, None]


def test_offline_cpus_are_left_out() -> None:
    topo = read_sysfs_topology(SYSFS / "offline-cpus")
    assert topo.online == frozenset({0, 1, 2, 4, 5, 7})
    assert {c.numa_node for c in topo.cpus} == {0}
    assert topo.memory == ((0, 8192000 * 1024),)


def test_without_online_file_cpus_come_from_directories() -> None:
    topo = read_sysfs_topology(SYSFS / "no-online-file")
    assert topo.online == frozenset(range(4))
    assert topo.memory == ()
    assert {c.numa_node for c in topo.cpus} == {0}  # no NUMA information: node 0


def test_a_cpu_without_topology_files_is_dropped_as_the_kubelet_drops_it() -> None:
    """cAdvisor skips a CPU whose ``core_id`` is missing: the kubelet never assigns it,
    and the topology says so beside the kernel's online CPUs."""
    topo = read_sysfs_topology(SYSFS / "broken-missing-topology")
    assert topo.online == frozenset({0, 1, 3})
    assert topo.kernel is not None and topo.kernel.online == frozenset(range(4))
    kinds = {d.kind: d.cpus for d in divergences(topo)}
    assert kinds == {"cpus_dropped": frozenset({2})}


@pytest.mark.parametrize(("tree", "needle"), [
    ("broken-online", "could not detect number of cpus"),
    ("broken-core-id", "cpu1/topology: 'one' is not an integer"),
])
def test_trees_the_kubelet_cannot_read(tree: str, needle: str) -> None:
    """An unparsable ``cpu/online`` takes every CPU offline for cAdvisor; a ``core_id``
    that is not a number fails its whole read. Either way ``Discover`` has no machine and
    the static policy cannot start: no CPUs, and the reason."""
    topo = read_sysfs_topology(SYSFS / tree)
    assert topo.cpus == () and topo.kernel is not None
    assert topo.kernel.discover_error is not None and needle in topo.kernel.discover_error
    assert "\n" not in topo.kernel.discover_error
    assert [d.kind for d in divergences(topo)] == ["discover_failed"]


def test_empty_or_missing_root(short_tmp: Path) -> None:
    for root in (short_tmp, short_tmp / "absent"):
        with pytest.raises(SourceError, match="no CPUs found"):
            read_sysfs_topology(root)


def test_cpus_come_from_the_node_links_not_cpulist(short_tmp: Path) -> None:
    """cAdvisor reads a node's ``cpuN`` links; ``cpulist`` stands in only where a dump
    lost them, so a bad ``cpulist`` beside good links changes nothing."""
    tree = short_tmp / "sys"
    shutil.copytree(SYSFS / "smt-2socket", tree)
    expected = read_sysfs_topology(tree)
    for cpu in (2, 3, 6, 7):
        (tree / f"devices/system/node/node1/cpu{cpu}").write_text("")
    (tree / "devices/system/node/node1/cpulist").write_text("0-")
    assert read_sysfs_topology(tree).cpus == expected.cpus
    (tree / "devices/system/node/node1/cpu7").unlink()
    (tree / "devices/system/node/node0/cpu7").write_text("")
    moved = {c.id: c.numa_node for c in read_sysfs_topology(tree).cpus}
    assert moved[7] == 0 and moved[3] == 1


def test_host_sysfs_if_present() -> None:
    if not Path("/sys/devices/system/cpu/online").exists():
        pytest.skip("no sysfs here")
    topo = read_sysfs_topology("/sys")
    assert len(topo.cpus) >= 1
    assert len(topo.cpus) <= (os.cpu_count() or 1)


def test_topology_json_round_trip() -> None:
    topo = read_sysfs_topology(SYSFS / "smt-2socket")
    assert topology_from_json(json.loads(json.dumps(topology_to_json(topo)))) == topo


@given(st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 64), st.integers(0, 3),
                          st.integers(0, 7), st.none() | st.integers(0, 255)),
                unique_by=lambda t: t[0], min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 2**50)), max_size=4))
def test_topology_json_round_trip_property(cpus: list[tuple[int, int, int, int, int | None]],
                                           memory: list[tuple[int, int]]) -> None:
    topo = kubelet_topology.topology((CPUInfo(*c) for c in cpus), tuple(memory))
    assert topology_from_json(topology_to_json(topo)) == topo
    # Each core is named after its lowest CPU and lies in one NUMA node and package.
    for c in topo.cpus:
        mates = [o for o in topo.cpus if o.core == c.core]
        assert min(o.id for o in mates) == c.core
        assert {(o.numa_node, o.socket) for o in mates} == {(c.numa_node, c.socket)}


def test_topology_json_defaults() -> None:
    topo = topology_from_json({"cpus": [{"id": 3}, {"id": 1, "numa_node": 1}]})
    assert [(c.id, c.core, c.socket, c.numa_node) for c in topo.cpus] == [
        (1, 1, 0, 1), (3, 3, 0, 0)]


@pytest.mark.parametrize("obj", [
    None, [], {"cpus": None}, {"cpus": [{"core": 1}]}, {"cpus": [{"id": -1}]},
    {"cpus": [{"id": 0}, {"id": 0}]}, {"cpus": ["zero"]}, {"cpus": [], "memory": [{"x": 1}]},
    {"cpus": []}, {"cpus": [{"id": 2**63 - 1}]}, {"cpus": [{"id": float("inf")}]},
    {"cpus": [{"id": 0, "core": float("-inf")}]},
    {"cpus": [{"id": 0}], "memory": [{"numa_node": 0, "bytes": float("inf")}]},
])
def test_bad_topology_json(obj: Any) -> None:
    with pytest.raises(SourceError):
        topology_from_json(obj)


def test_load_topology_file_errors(short_tmp: Path) -> None:
    with pytest.raises(SourceError, match="topology read"):
        load_topology_file(short_tmp / "absent.json")
    bad = short_tmp / "t.json"
    bad.write_text("{")
    with pytest.raises(SourceError, match="invalid JSON"):
        load_topology_file(bad)


async def test_snapshot_with_sysfs_flag(start_sim: Any) -> None:
    """The live path with --sysfs DIR: the per-NUMA breakdown comes from the tree."""
    sim = await start_sim(SCENARIOS / "sidecar-hybrid")
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--sysfs", str(SYSFS / "smt-2socket"))
    assert run.code == 0 and run.err == "", run.err
    doc = json.loads(run.out)
    assert doc["node"]["online_cpus"] == 8 and doc["node"]["numa_nodes"] == 2
    assert set(doc["cpu_pools_by_numa"]) == {"0", "1"}


async def test_snapshot_with_broken_sysfs_warns(start_sim: Any) -> None:
    sim = await start_sim(SCENARIOS / "sidecar-hybrid")
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--sysfs", str(SYSFS / "broken-missing-topology"))
    assert run.code == 0 and "Traceback" not in run.err, run.err
    # The kubelet drops CPU 2 (no core_id): the ledger follows it, with a warning.
    assert len(run.err_lines) == 1 and "cpus_dropped" in run.err_lines[0], run.err
    doc = json.loads(run.out)
    assert doc["node"]["online_cpus"] == 3 and set(doc["cpu_pools_by_numa"]) == {"0"}
