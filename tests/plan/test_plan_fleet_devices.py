"""plan --fleet with devices and staleness (issues 31 and 32): nodes are written by the
history's own writer (device intervals and placement states, as serve writes them) into a
SQLite file, and plan --fleet is run as the CLI. Only nodes that have the GPUs a pod asks for
are ranked, each other one says why it is out; a node whose exporter stopped is marked stale
and ranked after the fresh ones; --devices beside --fleet is refused in one line."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main
from exporter.history import HistoryWriter, open_store
from reconciler.allocator.live import NodeState
from reconciler.kube import KubeletConfig
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import (
    Allocatable,
    ContainerAlloc,
    CPUInfo,
    DeviceAlloc,
    NodeSnapshot,
    PodAlloc,
    Topology,
)

GPU = "nvidia.com/gpu"
# 2 NUMA nodes of 4 CPUs (0-3, 4-7), 32 GiB of memory each; CPU 0 reserved.
TOPO = Topology(tuple(CPUInfo(i, i, i // 4, i // 4) for i in range(8)),
                memory=((0, 32 << 30), (1, 32 << 30)))
CONFIG = KubeletConfig(cpu_manager_policy="static", topology_manager_policy="single-numa-node",
                       topology_manager_scope="pod", reserved_system_cpus=frozenset({0}))


def _ledger(*devices: DeviceAlloc) -> Ledger:
    pods = (PodAlloc("ml", "holder", (ContainerAlloc("c", (), (), devices),)),) \
        if devices else ()
    return reconcile(NodeSnapshot(pods=pods, topology=TOPO,
                                  allocatable=Allocatable(tuple(range(1, 8))),
                                  kubelet_config=CONFIG))


STATE = NodeState(TOPO, CONFIG, frozenset(range(1, 8)), ((0, 16 << 30), (1, 16 << 30)))


async def _node(url: str, name: str, held: list[tuple[DeviceAlloc, ...]],
                holding: tuple[DeviceAlloc, ...], last_seen: datetime,
                state: NodeState = STATE) -> None:
    """One node's history: each of ``held`` held by a pod and given back (a closed
    interval), then ``holding`` held now (open), the last write at ``last_seen``."""
    store = open_store(url)
    writer = HistoryWriter(store, name, summary_interval=3600)
    await writer.start()
    at = last_seen - timedelta(seconds=10 * (2 * len(held) + 2))
    for devices in held:
        writer.submit(_ledger(*devices), at, state)
        writer.submit(_ledger(), at + timedelta(seconds=5), state)
        at += timedelta(seconds=10)
    writer.submit(_ledger(*holding), last_seen, state)
    await writer.close()
    store.close()


def _gpu(dev: str, numa: int) -> DeviceAlloc:
    return DeviceAlloc(GPU, (dev,), (numa,))


@pytest.fixture
async def fleet(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    now = datetime.now(UTC)  # when the fixture runs: a module-wide clock goes stale under load
    fresh = now - timedelta(seconds=10)
    # Two GPUs seen on NUMA node 0, both free now: a 2-GPU pod fits on NUMA node 0.
    await _node(url, "gpu-a", [(_gpu("GPU-0", 0), _gpu("GPU-1", 0))], (), fresh)
    # The same, but its exporter stopped an hour ago.
    await _node(url, "gpu-old", [(_gpu("GPU-0", 0), _gpu("GPU-1", 0))], (),
                now - timedelta(hours=1))
    # One GPU on each NUMA node (seen one at a time): single-numa-node cannot align two.
    await _node(url, "gpu-split", [(_gpu("GPU-0", 0),), (_gpu("GPU-1", 1),)], (), fresh)
    # Two GPUs on NUMA node 0, one of them held now.
    await _node(url, "gpu-busy", [(_gpu("GPU-0", 0),)], (_gpu("GPU-1", 0),), fresh)
    # Never a device: not a candidate for a GPU pod, whatever its free CPUs.
    await _node(url, "cpu-only", [], (), fresh)
    return url


def _manifest(tmp: Path, gpus: int, memory: str = "1Gi") -> Path:
    block: dict[str, Any] = {"cpu": "2", "memory": memory}
    if gpus:
        block[GPU] = gpus
    path = tmp / f"pod-{gpus}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "ml", "name": "trainer"}, "spec": {"containers": [{
            "name": "train", "image": "x", "resources": {"requests": block,
                                                         "limits": block}}]}}))
    return path


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", "--fleet", *argv]) == 0
    out: str = capsys.readouterr().out
    return out


def test_only_nodes_with_the_devices_are_ranked(fleet: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    answer = json.loads(_plan(capsys, "-f", str(_manifest(tmp_path, 2)), "--history.url",
                              fleet, "-o", "json"))
    got = [(n["node"], n["admitted"], n["excluded"], n["stale"]) for n in answer["nodes"]]
    assert got == [("gpu-a", True, False, False), ("gpu-old", True, False, True),
                   ("gpu-busy", False, False, False), ("gpu-split", False, False, False),
                   ("cpu-only", False, True, False)]
    by = {n["node"]: n for n in answer["nodes"]}
    assert by["gpu-a"]["pods"][0]["devices"] == [
        {"container": "train", "resource_name": GPU, "device_ids": [dev], "numa_nodes": [0]}
        for dev in ("GPU-0", "GPU-1")]
    assert by["gpu-a"]["devices"] == [{"resource_name": GPU, "known": 2, "free": 2}]
    assert by["gpu-busy"]["devices"] == [{"resource_name": GPU, "known": 2, "free": 1}]
    # The device manager offers no NUMA node with two free GPUs: under single-numa-node the
    # topology manager refuses first (the kubelet's words), the devices are the cause.
    assert "Topology locality" in by["gpu-busy"]["reason"]
    assert by["gpu-busy"]["cause"].startswith("devices: the pod asks 2 nvidia.com/gpu (free: "
                                              "NUMA 0: 1)")
    assert by["gpu-split"]["cause"].startswith("devices: the pod asks 2 nvidia.com/gpu")
    assert by["cpu-only"]["reason"] == ("no nvidia.com/gpu (a pod asks 2) on this node: none "
                                        "in its device records")
    assert by["cpu-only"]["cpus_left"] is None and by["cpu-only"]["pods"] == []
    table = _plan(capsys, "-f", str(_manifest(tmp_path, 2)), "--history.url", fleet)
    rows = {ln.split()[1]: ln for ln in table.splitlines()[1:6]}
    assert rows["cpu-only"].split()[2] == "out"
    assert "no nvidia.com/gpu (a pod asks 2) on this node" in rows["cpu-only"]


def test_staleness_is_shown_and_ranked(fleet: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A pod without devices fits everywhere: the stale node comes after every fresh one
    that fits, and the table says how long ago each node was seen."""
    pod = str(_manifest(tmp_path, 0))
    answer = json.loads(_plan(capsys, "-f", pod, "--history.url", fleet, "-o", "json"))
    assert answer["stale_after_seconds"] == 300
    names = [n["node"] for n in answer["nodes"]]
    assert names[-1] == "gpu-old" and all(n["admitted"] for n in answer["nodes"])
    old = answer["nodes"][-1]
    assert old["stale"] and 3500 <= old["age_seconds"] <= 3700 + 600
    table = _plan(capsys, "-f", pod, "--history.url", fleet)
    head, *rows = table.splitlines()
    assert "LAST-SEEN" in head.split()
    old_row = next(r for r in rows if r.split()[1:2] == ["gpu-old"])
    assert "1h ago STALE" in old_row
    assert "stale: last seen more than 5m ago (--fleet.stale-after)" in table
    # A bound of two hours: every node is fresh, and ranked as such (by name, all alike).
    answer = json.loads(_plan(capsys, "-f", pod, "--history.url", fleet,
                              "--fleet.stale-after", "2h", "-o", "json"))
    assert not any(n["stale"] for n in answer["nodes"])
    assert [n["node"] for n in answer["nodes"]] == sorted(names)


async def test_memory_is_modelled_and_named(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Nodes under the Static memory manager with the free memory recorded: a 20 GiB pod
    fits where a NUMA node has 24 GiB free, and the other node's cause names memory."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    static = replace(CONFIG, memory_manager_policy="Static")
    now = datetime.now(UTC)  # when the fixture runs: a module-wide clock goes stale under load
    fresh = now - timedelta(seconds=10)
    for name, free in (("mem-big", 24 << 30), ("mem-small", 12 << 30)):
        await _node(url, name, [], (), fresh, NodeState(
            TOPO, static, frozenset(range(1, 8)), ((0, free), (1, free))))
    answer = json.loads(_plan(capsys, "-f", str(_manifest(tmp_path, 0, "20Gi")),
                              "--history.url", url, "-o", "json"))
    big, small = answer["nodes"]
    assert (big["node"], big["admitted"]) == ("mem-big", True)
    assert big["pods"][0]["memory_numa_nodes"] == [0]
    assert (small["node"], small["admitted"]) == ("mem-small", False)
    assert small["cause"].startswith("memory: the pod asks 20 GiB of memory and the most one "
                                     "NUMA node has free is 12 GiB")


@pytest.mark.parametrize(("argv", "words"), [
    (["--devices", "nvidia.com/gpu=0:2"], "--devices does not apply"),
    (["--memory-per-numa", "8Gi"], "--memory-per-numa does not apply"),
    (["--topology.distances", "10,21;21,10"], "--topology.distances does not apply"),
    (["--fleet.stale-after", "soon"], "invalid duration 'soon'"),
])
def test_node_flags_beside_fleet_are_refused(argv: list[str], words: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    try:
        code = main(["plan", "--fleet", "-f", str(_manifest(tmp_path, 1)), "--history.url",
                     url, *argv])
    except SystemExit as exc:  # argparse's own errors exit from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
