"""plan on a modelled node is memory- and device-aware (issue 32): the memory per NUMA node is
a flag whose default --help states, the output names the node's memory, each pod's pinned
memory and its NUMA nodes, and a refusal's cause names memory where memory decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main

SHAPE = ["--topology.shape", "2x8x2"]


def _pod(tmp: Path, cpu: str, memory: str, gpus: int = 0) -> Path:
    block: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        block["nvidia.com/gpu"] = gpus
    path = tmp / "pod.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "default", "name": "big"}, "spec": {"containers": [{
            "name": "app", "image": "x", "resources": {"requests": block,
                                                       "limits": block}}]}}))
    return path


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", *argv]) == 0
    text: str = capsys.readouterr().out
    return text


def test_help_states_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--memory-per-numa SIZE memory of each NUMA node of a modelled shape" in text
    assert "(default: 64Gi;" in text


def test_the_node_line_names_its_memory(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod(tmp_path, "2", "1Gi")
    first = _out(capsys, "-f", str(pod), *SHAPE).splitlines()[0]
    assert first.startswith("node: modelled 2x8x2: 32 CPUs on 2 NUMA node(s), 64 GiB memory "
                            "per NUMA node (--memory-per-numa), no devices; memory manager "
                            "Static")
    text = _out(capsys, "-f", str(pod), *SHAPE, "--memory-per-numa", "96Gi")
    assert "96 GiB memory per NUMA node" in text.splitlines()[0]
    report = json.loads(_out(capsys, "-f", str(pod), *SHAPE, "--memory-per-numa", "96Gi",
                             "-o", "json"))
    assert report["modelled_node"]["memory"] == [{"numa_node": 0, "bytes": 96 << 30},
                                                 {"numa_node": 1, "bytes": 96 << 30}]
    (p,) = report["pods"]
    assert (p["memory_bytes"], p["memory_numa_nodes"]) == (1 << 30, [0])


def test_memory_larger_than_a_numa_node_is_named(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """6 CPUs and 100 GiB: refused on the default shape with memory named as the cause;
    admitted on NUMA node 0 with 128 GiB a node."""
    pod = _pod(tmp_path, "6", "100Gi")
    text = _out(capsys, "-f", str(pod), *SHAPE)
    row = next(ln for ln in text.splitlines() if ln.startswith("Pod "))
    assert row.split()[7:9] == ["no", "100"]  # ADMITTED, MEMORY (100 GiB)
    assert "  cause: memory: the pod asks 100 GiB of memory and the most one NUMA node has " \
        "free is 64 GiB" in text
    (p,) = json.loads(_out(capsys, "-f", str(pod), *SHAPE, "-o", "json"))["pods"]
    assert p["cause"] == "memory-numa" and "topology affinity error" in p["reason"]
    (p,) = json.loads(_out(capsys, "-f", str(pod), *SHAPE, "--memory-per-numa", "128Gi",
                           "-o", "json"))["pods"]
    assert p["admitted"] and p["memory_numa_nodes"] == [0]


@pytest.mark.parametrize(("argv", "words"), [
    (["--memory-per-numa", "lots"], "--memory-per-numa 'lots': expected a positive size"),
    (["--memory-per-numa", "0"], "--memory-per-numa '0': expected a positive size"),
    (["--memory-per-numa", "-1Gi"], "expected a positive size"),
])
def test_bad_memory_is_one_line(argv: list[str], words: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(_pod(tmp_path, "2", "1Gi")), *SHAPE, *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_memory_per_numa_is_for_a_shape(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps({"cpus": [
        {"id": i, "core": i, "socket": 0, "numa_node": 0} for i in range(4)]}))
    assert main(["plan", "-f", str(_pod(tmp_path, "2", "1Gi")), "--topology", str(topology),
                 "--memory-per-numa", "8Gi"]) == 2
    err = capsys.readouterr().err
    assert "--memory-per-numa sizes a modelled shape" in err and len(err.splitlines()) == 1
    assert "a --topology FILE gives" in err


def test_memory_per_numa_without_any_node_names_the_shape_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --topology, the line says what to add, not that a file was given."""
    assert main(["plan", "-f", str(_pod(tmp_path, "2", "1Gi")),
                 "--memory-per-numa", "8Gi"]) == 2
    err = capsys.readouterr().err
    assert "--topology.shape" in err and "--topology FILE" not in err
    assert len(err.splitlines()) == 1


def test_devices_the_node_lacks_are_said(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The kubelet admits a pod whatever extended resources the node lacks
    (removeMissingExtendedResources): plan admits it and says the scheduler would not."""
    pod = _pod(tmp_path, "2", "1Gi", gpus=2)
    text = _out(capsys, "-f", str(pod), *SHAPE)
    assert "  not on this node: nvidia.com/gpu:" in text
    (p,) = json.loads(_out(capsys, "-f", str(pod), *SHAPE, "-o", "json"))["pods"]
    assert p["admitted"] and p["missing_devices"] == ["nvidia.com/gpu"]
    (p,) = json.loads(_out(capsys, "-f", str(pod), *SHAPE, "--devices",
                           "nvidia.com/gpu=0:2", "-o", "json"))["pods"]
    assert p["missing_devices"] == []


def test_a_budget_the_api_server_refuses_is_a_refusal(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Under container scope the kubelet admits a 4-CPU container in a 2-CPU pod budget,
    but the API server never creates such a pod: plan says so, and --fail-on-refusal
    fails on it."""
    path = tmp_path / "tight.yaml"
    block = {"cpu": "4", "memory": "1Gi"}
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "default", "name": "tight"}, "spec": {
            "resources": {"requests": {"cpu": "2", "memory": "2Gi"},
                          "limits": {"cpu": "2", "memory": "2Gi"}},
            "containers": [{"name": "app", "image": "x", "resources": {
                "requests": block, "limits": block}}]}}))
    argv = ["-f", str(path), *SHAPE, "--scope", "container"]
    text = _out(capsys, *argv)
    assert "  the API server refuses this pod: the budget is smaller than container app: it " \
        "asks 4 CPUs, the pod budget is 2 CPUs" in text
    (p,) = json.loads(_out(capsys, *argv, "-o", "json"))["pods"]
    assert p["admitted"] and p["api_refusal"].startswith("the budget is smaller")
    assert main(["plan", *argv, "--fail-on-refusal"]) == 3
    assert "refused: default/tight" in capsys.readouterr().err
