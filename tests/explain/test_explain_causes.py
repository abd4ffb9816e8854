"""explain names what the pod asks as the cause where it is (issue 32, the operator's
defects): memory that no NUMA node of the modelled shape holds, a pod budget smaller than one
container, two GPUs on two NUMA nodes; each change offered is admitted by plan run again.
And the operator's rough edges of issue 31: ``explain --node POD`` in either order, the
scratch node said, memory in the snapshot's units."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main
from tests.plan.test_plan_node import _busy_node, _fixture_dir

SHAPE = ["--topology.shape", "2x8x2"]
TWO_GPUS = ["--devices", "nvidia.com/gpu=0:1,1:1"]


def _pod(tmp: Path, name: str, cpu: str, memory: str, *, budget: tuple[str, str] | None = None,
         gpus: int = 0) -> Path:
    block: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        block["nvidia.com/gpu"] = gpus
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "x", "resources": {
        "requests": dict(block), "limits": dict(block)}}]}
    if budget is not None:
        pod_block = {"cpu": budget[0], "memory": budget[1]}
        spec["resources"] = {"requests": pod_block, "limits": dict(pod_block)}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": "default", "name": name}, "spec": spec}))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out: str = capsys.readouterr().out
    return out


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(_run(capsys, *argv, "-o", "json"))
    return out


def _cause_line(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith("cause: "))


def test_memory_no_numa_node_holds_is_named(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """6 CPUs and 100 GiB on the default shape (64 GiB a NUMA node): the kubelet's reason is
    a topology affinity error, but the cause is memory, and the first change is less
    memory, which plan admits; --memory-per-numa 128Gi admits the pod as it is."""
    big = _pod(tmp_path, "big", "6", "100Gi")
    text = _run(capsys, "explain", "-f", str(big), *SHAPE)
    cause = _cause_line(text)
    assert cause.startswith("cause: memory: the pod asks 100 GiB of memory")
    assert "the most one NUMA node has free is 64 GiB" in cause
    assert "--memory-per-numa" in text.splitlines()[0]  # the node line names the flag
    assert "--memory-per-numa SIZE models a node with more" in text
    (e,) = _json(capsys, "explain", "-f", str(big), *SHAPE)["pods"]
    assert e["cause"] == "memory-numa"
    first = e["changes"][0]
    assert first["kind"] == "memory" and first["container_memory_bytes"] == {"app": 64 << 30}
    fixed = _pod(tmp_path, "big", "6", "64Gi")
    (p,) = _json(capsys, "plan", "-f", str(fixed), *SHAPE)["pods"]
    assert p["admitted"] and p["cpus"] == first["cpus"]
    (p,) = _json(capsys, "plan", "-f", str(big), *SHAPE, "--memory-per-numa", "128Gi")["pods"]
    assert p["admitted"] and p["memory_numa_nodes"] == [0]


def test_a_budget_smaller_than_a_container_offers_the_larger_budget(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 2-CPU pod budget around a 4-CPU container, on the scratch node: the budget is the
    cause (the API server refuses such a pod too), and the changes are a budget that covers
    the container or the container brought down to it, never a policy or scope change."""
    tight = _pod(tmp_path, "tight", "4", "1Gi", budget=("2", "2Gi"))
    text = _run(capsys, "explain", "-f", str(tight))
    assert _cause_line(text).startswith("cause: the budget is smaller than container app: it "
                                        "asks 4 CPUs, the pod budget is 2 CPUs")
    assert "not enough free CPUs" not in text
    (e,) = _json(capsys, "explain", "-f", str(tight))["pods"]
    assert e["cause"] == "budget-container"
    assert [(c["kind"], c["pod_cpus"], c["container_cpus"]) for c in e["changes"]] == [
        ("budget", 4, {}), ("cpus", None, {"app": 2})]
    assert not any(c["kubelet"] for c in e["changes"])
    # plan says the same cause under the kubelet's reason.
    table = _run(capsys, "plan", "-f", str(tight))
    assert "  cause: the budget is smaller than container app" in table
    (p,) = _json(capsys, "plan", "-f", str(_pod(tmp_path, "tight", "4", "1Gi",
                                                budget=("4", "2Gi"))))["pods"]
    assert p["admitted"]


def test_two_gpus_on_two_numa_nodes_blame_the_devices(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpus = _pod(tmp_path, "gpu2", "2", "1Gi", gpus=2)
    text = _run(capsys, "explain", "-f", str(gpus), *SHAPE, *TWO_GPUS)
    cause = _cause_line(text)
    assert cause.startswith("cause: devices: the pod asks 2 nvidia.com/gpu (free: NUMA 0: 1, "
                            "NUMA 1: 1)")
    (e,) = _json(capsys, "explain", "-f", str(gpus), *SHAPE, *TWO_GPUS)["pods"]
    assert e["cause"] == "devices-numa"
    first = e["changes"][0]
    assert first["kind"] == "devices"
    assert first["container_devices"] == [
        {"container": "app", "resource_name": "nvidia.com/gpu", "count": 1}]
    (p,) = _json(capsys, "plan", "-f", str(_pod(tmp_path, "gpu2", "2", "1Gi", gpus=1)),
                 *SHAPE, *TWO_GPUS)["pods"]
    assert p["admitted"] and p["cpus"] == first["cpus"]


def test_a_short_budget_and_blocking_devices_name_both_causes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 2-CPU budget around a 4-CPU container asking 2 GPUs, one on each NUMA node, under
    single-numa-node: no larger budget alone admits it (the GPUs still span two NUMA nodes),
    so the cause names both, and the changes offered are the covering budget together with
    what the devices need, each of which plan then admits on the CPUs predicted."""
    both = _pod(tmp_path, "both", "4", "1Gi", budget=("2", "2Gi"), gpus=2)
    text = _run(capsys, "explain", "-f", str(both), *SHAPE, *TWO_GPUS)
    cause = _cause_line(text)
    assert cause.startswith("cause: the budget is smaller than container app: it asks 4 CPUs")
    assert "with a budget that covers its containers (pod budget: cpu 2 -> 4) it is still " \
           "refused: devices: the pod asks 2 nvidia.com/gpu (free: NUMA 0: 1, NUMA 1: 1)" \
           in cause
    assert "no single change" not in text
    assert "  - pod budget: cpu 2 -> 4, together with fewer devices: container app: " \
           "nvidia.com/gpu 2 -> 1: admitted" in text
    (e,) = _json(capsys, "explain", "-f", str(both), *SHAPE, *TWO_GPUS)["pods"]
    assert (e["cause"], e["second_cause"]) == ("budget-container", "devices-numa")
    assert [(c["kind"], c["pod_cpus"], c["kubelet"]) for c in e["changes"]] == [
        ("budget+devices", 4, {}),
        ("budget+policy", 4, {"topologyManagerPolicy": "best-effort"})]
    assert e["changes"][0]["container_devices"] == [
        {"container": "app", "resource_name": "nvidia.com/gpu", "count": 1}]
    for i, change in enumerate(e["changes"]):
        gpus = {d["resource_name"]: d["count"] for d in change["container_devices"]}
        (tmp_path / str(i)).mkdir()
        fixed = _pod(tmp_path / str(i), "both", "4", "1Gi", budget=(str(change["pod_cpus"]), "2Gi"),
                     gpus=gpus.get("nvidia.com/gpu", 2))
        policy = change["kubelet"].get("topologyManagerPolicy", "single-numa-node")
        (p,) = _json(capsys, "plan", "-f", str(fixed), *SHAPE, *TWO_GPUS,
                     "--topology-policy", policy)["pods"]
        assert p["admitted"] and p["cpus"] == change["cpus"], change
    # plan names both causes under the kubelet's reason too.
    table = _run(capsys, "plan", "-f", str(both), *SHAPE, *TWO_GPUS)
    assert "it is still refused: devices: the pod asks 2 nvidia.com/gpu" in table


def test_memory_in_the_snapshots_units(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """6 TiB is '6 TiB' in explain and plan tables, as snapshot prints sizes, not '6144Gi'."""
    huge = _pod(tmp_path, "huge", "2", "6Ti")
    for argv in (["explain", "-f", str(huge), *SHAPE], ["plan", "-f", str(huge), *SHAPE]):
        text = _run(capsys, *argv)
        assert "6 TiB" in text and "6144Gi" not in text, argv


@pytest.mark.parametrize("argv", [
    ["--node", "default/busy", "--from", "DIR"],
    ["default/busy", "--node", "--from", "DIR"],
    ["--node", "busy", "--from", "DIR"],
    ["--from", "DIR", "--node", "busy"],
    ["--node", "worker-7", "default/busy", "--from", "DIR"],
], ids=["node-first", "pod-first", "bare-name", "from-first", "node-named"])
def test_explain_node_pod_as_the_readme_writes_it(argv: list[str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    directory = _fixture_dir(tmp_path, _busy_node())
    text = _run(capsys, "explain", *[str(directory) if a == "DIR" else a for a in argv])
    assert text.startswith("Pod default/busy: Guaranteed")
    assert "result: admitted" in text


def test_the_scratch_node_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without a shape explain's node is not the defaults --help lists: both say so."""
    tight = _pod(tmp_path, "tight", "4", "1Gi", budget=("2", "2Gi"))
    text = _run(capsys, "explain", "-f", str(tight))
    assert text.startswith("node: each pod on a scratch node of its own, not on the "
                           "modelled-node defaults the flags list")
    assert "memory manager None" in text.splitlines()[0]
    (e,) = [json.loads(_run(capsys, "explain", "-f", str(tight), "-o", "json"))]
    assert "scratch node" in e["scratch_node"]
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    assert "scratch node" in " ".join(capsys.readouterr().out.split())
