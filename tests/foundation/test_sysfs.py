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
from reconciler.snapshot import CPUInfo, Topology

SYSFS = Path(__file__).parent / "data" / "sysfs"


def test_smt_two_socket_tree() -> None:
    topo = read_sysfs_topology(SYSFS / "smt-2socket")
    assert [(c.id, c.core, c.socket, c.numa_node) for c in topo.cpus] == [
        (0, 0, 0, 0), (1, 1, 0, 0), (2, 0, 1, 1), (3, 1, 1, 1),
        (4, 0, 0, 0), (5, 1, 0, 0), (6, 0, 1, 1), (7, 1, 1, 1)]
    assert topo.online == frozenset(range(8))
    assert topo.numa_nodes == (0, 1)
    assert topo.memory == ((0, 16384000 * 1024), (1, 16384000 * 1024))
    # SMT siblings share (socket, core).
    siblings: dict[tuple[int, int], list[int]] = {}
    for c in topo.cpus:
        siblings.setdefault((c.socket, c.core), []).append(c.id)
    assert sorted(siblings.values()) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_uncore_cache_ids() -> None:
    """``cache/index3/id`` gives each CPU its L3 cache; an unreadable id is unknown."""
    topo = read_sysfs_topology(SYSFS / "uncore")
    assert [(c.id, c.uncore) for c in topo.cpus] == [
        (0, 0), (1, 1), (2, 2), (3, 3), (4, 0), (5, 1), (6, 2), (7, None)]
    # Trees without cache directories leave every id unknown.
    assert {c.uncore for c in read_sysfs_topology(SYSFS / "smt-2socket").cpus} == {None}
    # topology.json carries the ids, and the model groups CPUs by them (unknown: cache 0).
    assert topology_from_json(json.loads(json.dumps(topology_to_json(topo)))) == topo
    assert "uncore" not in topology_to_json(topo)["cpus"][7]
    from reconciler.allocator import from_snapshot

    model = from_snapshot(topo)
    assert model.uncore_cpus == {0: frozenset({0, 4, 7}), 1: frozenset({1, 5}),
                                 2: frozenset({2, 6}), 3: frozenset({3})}
    assert from_snapshot(model.to_snapshot()).uncore_cpus == model.uncore_cpus


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


@pytest.mark.parametrize(("tree", "needle"), [
    ("broken-missing-topology", "cpu2/topology"),
    ("broken-online", "online"),
    ("broken-core-id", "cpu1/topology"),
])
def test_broken_trees_give_a_clear_source_error(tree: str, needle: str) -> None:
    with pytest.raises(SourceError) as info:
        read_sysfs_topology(SYSFS / tree)
    message = str(info.value)
    assert message.startswith("sysfs read: ") and needle in message
    assert "\n" not in message


def test_empty_or_missing_root(short_tmp: Path) -> None:
    for root in (short_tmp, short_tmp / "absent"):
        with pytest.raises(SourceError, match="no CPUs found"):
            read_sysfs_topology(root)


def test_unreadable_cpulist(short_tmp: Path) -> None:
    tree = short_tmp / "sys"
    shutil.copytree(SYSFS / "smt-2socket", tree)
    (tree / "devices/system/node/node1/cpulist").write_text("0-")
    with pytest.raises(SourceError, match="node1/cpulist"):
        read_sysfs_topology(tree)


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
    topo = Topology(tuple(sorted((CPUInfo(*c) for c in cpus), key=lambda c: c.id)),
                    tuple(memory))
    assert topology_from_json(topology_to_json(topo)) == topo


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
    assert run.code == 0 and "Traceback" not in run.err
    assert len(run.err_lines) == 1 and "sysfs read" in run.err_lines[0]
    assert json.loads(run.out)["cpu_pools_by_numa"] == {}
