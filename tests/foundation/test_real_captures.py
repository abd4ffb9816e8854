"""The real captures (tests/data/realnode, made by ``python -m realnode.capture`` against
real kubelets 1.37.2 and 1.36.3): ``snapshot --from DIR`` alone, with no kubelet, gives the
ledger the kubelet's own ``cpu_manager_state`` in the capture implies, judged as the live
real-node tests judge it (tests/realnode/checks.py), and the counts each scenario's
workload makes (``tree_workload()`` of tests/realnode/test_ledger.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from foundation.helpers import REPO
from tests.realnode.checks import KubeletCPUState, anomalies, assert_ledger_is

CAPTURES = REPO / "tests" / "data" / "realnode"
NAMES = ["1.36-amd-pod", "1.37-amd-pod", "1.37-intel-container"]
RUNNING = {f"{p}-realnode" for p in ("legacy", "pooled", "sidecar", "burst")}
# What each capture's checkpoint holds, pool by pool (the AMD tree: 64 CPUs, CPU 0 reserved;
# the Intel tree: 16 CPUs, one NUMA node, scope container: no pod-level blocks).
POOLS = {
    "1.37-amd-pod": {"reserved": 1, "node_shared": 56, "node_exclusive": 2,
                     "pod_exclusive": 2, "pod_shared": 3, "pod_idle": 0},
    "1.37-intel-container": {"reserved": 1, "node_shared": 11, "node_exclusive": 4,
                             "pod_exclusive": 0, "pod_shared": 0, "pod_idle": 0},
}
POOLS["1.36-amd-pod"] = POOLS["1.37-amd-pod"]


def snapshot(directory: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["snapshot", "--from", str(directory), "--output", "json"]) == 0
    ledger: dict[str, Any] = json.loads(capsys.readouterr().out)
    return ledger


def kubelet_state(directory: Path) -> tuple[KubeletCPUState, dict[str, str]]:
    """The capture's checkpoint, and pod name -> uid from its /pods body."""
    state = KubeletCPUState.decode(json.loads((directory / "cpu_manager_state").read_text()))
    pods = json.loads((directory / "pods.json").read_text())["items"]
    return state, {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def test_every_capture_is_here_and_small() -> None:
    assert sorted(p.name for p in CAPTURES.iterdir() if p.is_dir()) == NAMES
    readme = (CAPTURES / "README.md").read_text()
    for name in NAMES:
        assert f"## {name}" in readme
        size = sum(f.stat().st_size for f in (CAPTURES / name).iterdir())
        assert size < 20_000, (name, size)


@pytest.mark.parametrize("name", NAMES)
def test_the_ledger_is_what_the_kubelets_checkpoint_says(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = snapshot(CAPTURES / name, capsys)
    state, by_name = kubelet_state(CAPTURES / name)
    assert_ledger_is(ledger, state, by_name, RUNNING)
    assert ledger["cpu_pools"] == POOLS[name]


@pytest.mark.parametrize("name", ["1.36-amd-pod", "1.37-amd-pod"])
def test_pod_scope_blocks_and_the_sidecar_on_the_pod_pool(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = snapshot(CAPTURES / name, capsys)
    state, by_name = kubelet_state(CAPTURES / name)
    pods = {p["name"]: p for p in ledger["pods"]}
    for pod, budget in (("pooled-realnode", 3), ("sidecar-realnode", 2)):
        assert len(state.pods[by_name[pod]]) == budget
        assert pods[pod]["budget_cpus"] == budget
    split = {p: (pods[p]["pod_exclusive_cpus"], pods[p]["pod_shared_cpus"]) for p in pods}
    assert split["pooled-realnode"] == (1, 2)
    assert split["sidecar-realnode"] == (1, 1)
    containers = {(c["pod"], c["name"]): c for c in ledger["containers"]}
    proxy = containers["sidecar-realnode", "proxy"]
    assert proxy["sidecar"] is True
    assert proxy["assignment"] == "pod_shared"
    block = state.pods[by_name["sidecar-realnode"]]
    app = state.containers[by_name["sidecar-realnode"]]["app"]
    assert proxy["cpus"] == ",".join(str(c) for c in sorted(block - app))
    assert containers["legacy-realnode", "app"]["assignment"] == "node_exclusive"


def test_136_reports_the_pool_as_each_containers_own(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """1.36 lists each pool container with the pool's CPUs in PodResources; 1.37 lists
    them with none. The same checkpoint either way, so the same ledger, but 1.36's way is
    flagged once per pod."""
    reported = {}
    for name in ("1.36-amd-pod", "1.37-amd-pod"):
        body = json.loads((CAPTURES / name / "list.json").read_text())
        pod = next(p for p in body["podResources"] if p["name"] == "pooled-realnode")
        reported[name] = {c["name"]: c.get("cpuIds", []) for c in pod["containers"]}
    assert reported["1.36-amd-pod"]["log"] and not reported["1.37-amd-pod"]["log"]
    assert anomalies(snapshot(CAPTURES / "1.36-amd-pod", capsys)) == {
        ("legacy_shared_report", "pooled-realnode"),
        ("legacy_shared_report", "sidecar-realnode")}
    assert anomalies(snapshot(CAPTURES / "1.37-amd-pod", capsys)) == set()
    assert anomalies(snapshot(CAPTURES / "1.37-intel-container", capsys)) == set()


def test_container_scope_holds_no_pod_level_block(capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    ledger = snapshot(CAPTURES / "1.37-intel-container", capsys)
    state, _ = kubelet_state(CAPTURES / "1.37-intel-container")
    assert state.pods == {}
    assert [p["cpus"] for p in ledger["pods"]] == [""] * 4
    assert {p["name"]: p["node_exclusive_cpus"] for p in ledger["pods"]} == {
        "legacy-realnode": 2, "pooled-realnode": 1, "sidecar-realnode": 1,
        "burst-realnode": 0}
    assert ledger["node"]["kubelet"]["topology_manager_scope"] == "container"


def test_a_capture_whose_checkpoint_disagrees_fails_the_judge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The judge can fail: the legacy pod's CPUs moved in the checkpoint alone."""
    copy = tmp_path / "capture"
    shutil.copytree(CAPTURES / "1.37-amd-pod", copy)
    ledger = snapshot(copy, capsys)
    state, by_name = kubelet_state(copy)
    moved = {**state.containers, by_name["legacy-realnode"]: {"app": frozenset({9, 10})}}
    with pytest.raises(AssertionError):
        assert_ledger_is(ledger, KubeletCPUState(state.policy, state.default, moved,
                                                 state.pods), by_name, RUNNING)


def test_the_readme_example_is_what_snapshot_prints(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    """README.md shows `snapshot --from` on the 1.36 capture: each line it shows (the
    elided parts are `...`) is a line the command prints."""
    text = (REPO / "README.md").read_text()
    command = "$ podres-exporter snapshot --from tests/data/realnode/1.36-amd-pod\n"
    assert command in text
    shown = text.split(command, 1)[1].split("```", 1)[0].splitlines()
    assert main(["snapshot", "--from", str(CAPTURES / "1.36-amd-pod")]) == 0
    printed = capsys.readouterr().out.splitlines()
    missing = [line for line in shown if line not in ("...", "") and line not in printed]
    assert missing == []
    assert len([line for line in shown if line.startswith("legacy_shared_report")]) == 2
