"""Devices end to end (docs/design.md#devices): a fixture node with GPUs on two NUMA nodes
served by the simulated kubelet over a real unix socket and HTTPS, ``serve`` scraped over
HTTP: the device gauges, the misalignment anomaly under best-effort and never under
single-numa-node, the ledger's devices, and a clean ``promtool check metrics``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from allocator.helpers import gpu_split_node

from tests.conftest import StartSim
from tests.service.conftest import (
    REPO,
    TOKEN,
    RunServe,
    Served,
    needs_promtool,
    promtool_check,
    series,
    value,
)

GPU_NODE = REPO / "tests" / "data" / "devices" / "gpu-best-effort"


async def serve(start_sim: StartSim, run_serve: RunServe, directory: Path) -> Served:
    sim = await start_sim(directory, http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "1m")
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    return served


def with_policy(tmp: Path, policy: str) -> Path:
    directory = tmp / policy
    shutil.copytree(GPU_NODE, directory)
    config = json.loads((directory / "configz.json").read_text())
    config["kubeletconfig"]["topologyManagerPolicy"] = policy
    (directory / "configz.json").write_text(json.dumps(config))
    return directory


async def test_gpu_node_under_best_effort(start_sim: StartSim, run_serve: RunServe) -> None:
    served = await serve(start_sim, run_serve, GPU_NODE)
    samples = await served.metrics()
    gpu = {(dict(k)["numa_node"], dict(k)["state"]): v
           for k, v in series(samples, "podres_devices", resource="nvidia.com/gpu").items()}
    assert gpu == {("0", "allocatable"): 2, ("0", "assigned"): 0, ("0", "free"): 2,
                   ("1", "allocatable"): 2, ("1", "assigned"): 2, ("1", "free"): 0}
    assert value(samples, "podres_devices", resource="intel.com/sriov", numa_node="",
                 state="free") == 1
    assert value(samples, "podres_device_resources_dropped") == 0
    assert value(samples, "podres_anomalies", kind="device_numa_misaligned") == 1
    # No per-pod or per-device label anywhere in the device families.
    for name in ("podres_devices", "podres_device_resources_dropped"):
        for labels in series(samples, name):
            assert {k for k, _ in labels} <= {"resource", "numa_node", "state"}
    status, body = await served.get("/api/v1/ledger")
    assert status == 200
    doc = json.loads(body)
    assert [(a["kind"], a["pod"], a["container"]) for a in doc["anomalies"]] == [
        ("device_numa_misaligned", "trainer", "train")]
    assert doc["devices"]["by_resource"]["nvidia.com/gpu"]["1"] == {
        "allocatable": 2, "assigned": 2, "free": 0}
    serve_ = next(c for c in doc["devices"]["containers"] if c["container"] == "serve")
    assert serve_["dynamic_resources"][0]["device"] == "eth1"
    status, body = await served.get("/api/v1/devices")
    assert status == 200 and json.loads(body) == doc["devices"]


async def test_single_numa_node_never_raises(start_sim: StartSim, run_serve: RunServe,
                                             tmp_path: Path) -> None:
    served = await serve(start_sim, run_serve, with_policy(tmp_path, "single-numa-node"))
    samples = await served.metrics()
    assert value(samples, "podres_anomalies", kind="device_numa_misaligned") == 0
    assert value(samples, "podres_devices", resource="nvidia.com/gpu", numa_node="1",
                 state="assigned") == 2
    status, _ = await served.get("/api/v1/devices", auth=None)
    assert status == 200  # no users configured: open, as /api/v1/ledger


@needs_promtool
async def test_promtool_check_metrics_with_devices(start_sim: StartSim,
                                                   run_serve: RunServe) -> None:
    served = await serve(start_sim, run_serve, GPU_NODE)
    result = promtool_check(await served.metrics_text())
    assert result.returncode == 0, result.stdout + result.stderr


# ---- issue 26's acceptance: the model's own placement, served and judged -------------------

async def _serve_model(node: Any, start_sim: StartSim, run_serve: RunServe,
                       tmp: Path) -> Served:
    topology = tmp / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    sim = await start_sim(node.state(), http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(topology), "--poll.interval", "1m")
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    return served


async def test_the_model_admits_a_misaligned_gpu_pod_and_the_ledger_says_so(
        start_sim: StartSim, run_serve: RunServe, tmp_path: Path) -> None:
    node = gpu_split_node("best-effort")
    placed = node.model.pods[("ml", "gpu-worker")]
    (trainer,) = placed.containers
    topo = node.model.topo
    # The model (the kubelet's best-effort merge) admits CPUs on node 0, the GPU on node 1.
    assert topo.numa_set(trainer.exclusive) == {0}
    assert [(d.resource_name, d.numa_nodes) for d in trainer.devices] == [
        ("nvidia.com/gpu", (1,))]
    served = await _serve_model(node, start_sim, run_serve, tmp_path)
    samples = await served.metrics()
    assert value(samples, "podres_anomalies", kind="device_numa_misaligned") == 1
    status, body = await served.get("/api/v1/ledger")
    assert status == 200
    found = [(a["namespace"], a["pod"], a["container"]) for a in json.loads(body)["anomalies"]
             if a["kind"] == "device_numa_misaligned"]
    assert found == [("ml", "gpu-worker", trainer.name)]


async def test_single_numa_node_refuses_it_and_never_raises(
        start_sim: StartSim, run_serve: RunServe, tmp_path: Path) -> None:
    node = gpu_split_node("single-numa-node")
    assert ("ml", "gpu-worker") not in node.model.pods
    served = await _serve_model(node, start_sim, run_serve, tmp_path)
    samples = await served.metrics()
    assert value(samples, "podres_anomalies", kind="device_numa_misaligned") == 0
