"""The model-driven simulated kubelet serves devices over the real PodResources socket:
each container's devices with their NUMA node in List and Get, the node's devices in
GetAllocatableResources, one ContainerDevices a device and NUMA node as the kubelet's
``containerDevicesFromResourceDeviceInstances`` (v1.37.2) builds them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from allocator.helpers import gpu_split_node
from exporter.sources.podresources import PodResourcesClient

SPLIT = Path(__file__).resolve().parents[1] / "data" / "devices" / "gpu-split.yaml"


def _devices(entries: Any) -> list[tuple[str, tuple[str, ...], tuple[int, ...]]]:
    return sorted((d.resource_name, tuple(d.device_ids), tuple(n.ID for n in d.topology.nodes))
                  for d in entries)


_node = gpu_split_node


async def test_list_get_and_allocatable_carry_devices(start_sim: Any) -> None:
    sim = await start_sim(_node("best-effort").state())
    client = PodResourcesClient(sim.socket_path)
    try:
        listing = await client.list()
        worker = await client.get("ml", "gpu-worker")
        allocatable = await client.allocatable()
    finally:
        await client.close()
    pods = {p.name: p for p in listing.pod_resources}
    (notebook,) = pods["gpu-shared"].containers
    assert _devices(notebook.devices) == [("nvidia.com/gpu", ("gpu-0",), (0,))]
    assert worker is not None
    (trainer,) = worker.containers
    assert sorted(trainer.cpu_ids) == [0, 1]
    assert _devices(trainer.devices) == [("nvidia.com/gpu", ("gpu-1",), (1,))]
    assert allocatable is not None
    assert _devices(allocatable.devices) == [("nvidia.com/gpu", ("gpu-0",), (0,)),
                                             ("nvidia.com/gpu", ("gpu-1",), (1,))]


async def test_single_numa_node_refuses_the_worker(start_sim: Any) -> None:
    node = _node("single-numa-node")
    assert [r.name for _, r in node.rejected.values()] == ["gpu-worker"]
    sim = await start_sim(node.state())
    client = PodResourcesClient(sim.socket_path)
    try:
        listing = await client.list()
    finally:
        await client.close()
    assert [p.name for p in listing.pod_resources] == ["gpu-shared"]


def test_sim_command_rejects_bad_devices(short_tmp: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "sim", "--topology.shape", "2x4x1",
         "--devices", "nvidia.com/gpu=7:1", "--socket", str(short_tmp / "k.sock")],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "no NUMA node 7" in proc.stderr
