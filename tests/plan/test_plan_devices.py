"""plan with device-plugin devices: --devices on a modelled node, extended resources in
manifests, each container's devices and their NUMA nodes in the table and the JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main

SPLIT = Path(__file__).resolve().parents[1] / "data" / "devices" / "gpu-split.yaml"
NODE = ("--topology.shape", "2x4x1", "--reserved", "4-6", "--devices",
        "nvidia.com/gpu=0:1,1:1")


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", "-f", str(SPLIT), *NODE, *args, "--output", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_best_effort_splits_cpus_and_gpu(capsys: pytest.CaptureFixture[str],
                                        scope: str) -> None:
    report = _json(capsys, "--topology-policy", "best-effort", "--scope", scope)
    shared, worker = report["pods"]
    assert shared["admitted"] and worker["admitted"]
    assert shared["containers"][0]["devices"] == [
        {"resource_name": "nvidia.com/gpu", "device_id": "gpu-0", "numa_nodes": [0]}]
    (trainer,) = worker["containers"]
    assert trainer["cpus"] == "0-1" and worker["numa_nodes"] == [0]
    assert trainer["devices"] == [
        {"resource_name": "nvidia.com/gpu", "device_id": "gpu-1", "numa_nodes": [1]}]


@pytest.mark.parametrize("policy", ["restricted", "single-numa-node"])
def test_aligning_policies_refuse(capsys: pytest.CaptureFixture[str], policy: str) -> None:
    report = _json(capsys, "--topology-policy", policy)
    shared, worker = report["pods"]
    assert shared["admitted"] and not worker["admitted"]
    assert "Resources cannot be allocated with Topology locality" in worker["reason"]
    assert worker["containers"][0]["devices"] == []


def test_table_shows_devices_and_numa(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(SPLIT), *NODE, "--topology-policy", "best-effort"]) == 0
    out = capsys.readouterr().out
    assert "DEVICES@NUMA" in out
    lines = out.splitlines()
    trainer = next(ln for ln in lines if ln.strip().startswith("trainer"))
    assert trainer.split()[-2:] == ["0-1", "nvidia.com/gpu:gpu-1@1"]
    notebook = next(ln for ln in lines if ln.strip().startswith("notebook"))
    assert notebook.split()[-1] == "nvidia.com/gpu:gpu-0@0"


def test_too_many_gpus_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("kind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n  - name: c\n"
                    "    resources:\n      limits: {nvidia.com/gpu: 3}\n")
    # Under single-numa-node (plan's default) the topology manager refuses first: the
    # device manager has no possible affinity to offer.
    assert main(["plan", "-f", str(path), *NODE, "--output", "json"]) == 0
    (pod,) = json.loads(capsys.readouterr().out)["pods"]
    assert "Topology locality" in pod["reason"]
    assert main(["plan", "-f", str(path), *NODE, "--topology-policy", "best-effort",
                 "--output", "json"]) == 0
    (pod,) = json.loads(capsys.readouterr().out)["pods"]
    assert not pod["admitted"]
    assert pod["reason"].endswith("Allocate failed due to requested number of devices "
                                  "unavailable for nvidia.com/gpu. Requested: 3, Available: "
                                  "2, which is unexpected")


@pytest.mark.parametrize(("flags", "words"), [
    (("--devices", "nvidia.com/gpu=0:1"), "--devices describes a modelled node"),
    (("--topology.shape", "2x4x1", "--devices", "nvidia.com/gpu=2:1"), "no NUMA node 2"),
    (("--topology.shape", "2x4x1", "--devices", "gpu=0:1"), "not an extended resource"),
    (("--topology.shape", "2x4x1", "--devices", "nvidia.com/gpu=0:1;nvidia.com/gpu=1:1"),
     "given twice"),
])
def test_bad_devices_give_one_clear_line(capsys: pytest.CaptureFixture[str],
                                         flags: tuple[str, ...], words: str) -> None:
    assert main(["plan", "-f", str(SPLIT), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_help_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "nvidia.com/gpu=0:2,1:2" in capsys.readouterr().out


def test_explain_shows_the_device_hints_and_a_change_that_fits(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-f", str(SPLIT), *NODE, "--scope", "container",
                 "--topology-policy", "restricted", "--output", "json"]) == 0
    pods = {p["name"]: p for p in json.loads(capsys.readouterr().out)["pods"]}
    worker = pods["gpu-worker"]
    assert not worker["admitted"]
    (hint,) = worker["hints"]
    assert hint["device_hints"] == [{"resource_name": "nvidia.com/gpu", "hints": [
        {"numa_nodes": [1], "preferred": True}, {"numa_nodes": [0, 1], "preferred": False}]}]
    assert hint["cpu_hints"][0] == {"numa_nodes": [0], "preferred": True}
    kubelet = [c["kubelet"] for c in worker["changes"]]
    assert {"topologyManagerPolicy": "best-effort"} in kubelet
    # Fewer CPUs fit NUMA node 1 beside its GPU: CPU 7, the one left there.
    assert {"cpus": "7", "numa_nodes": [1]} in [
        {"cpus": c["cpus"], "numa_nodes": c["numa_nodes"]} for c in worker["changes"]]


@pytest.mark.parametrize(("limits", "words"), [
    ("requests: {nvidia.com/gpu: 1}\n      limits: {nvidia.com/gpu: 2}",
     "nvidia.com/gpu: the request must equal the limit for an extended resource"),
    ("limits: {nvidia.com/gpu: 1.5}", "nvidia.com/gpu: an extended resource takes a whole count"),
])
def test_bad_extended_resources_give_one_clear_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], limits: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: Pod\nmetadata: {name: bad}\nspec:\n  containers:\n  - name: c\n"
                    f"    resources:\n      {limits}\n")
    assert main(["plan", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and "(Pod bad)" in err and len(err.strip().splitlines()) == 1
