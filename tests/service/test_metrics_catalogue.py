"""The catalogue owns every family and its samples: each producer is exercised, nothing
else in the exporter names a family, a bad declaration fails at import, and the counters
whose label values are known start at 0."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest

from exporter.commands.snapshot import ledger_from_fixture
from exporter.metrics.catalogue import (
    BY_NAME,
    FAMILIES,
    Family,
    KernelFacts,
    NodeFacts,
    NodeFamily,
    SelfFamily,
    SelfState,
    _checked,
)
from exporter.metrics.exposition import render_kernel, render_ledger, render_self
from exporter.reader import NodeReader, SourceOptions
from exporter.service import SOURCE_OPERATIONS, Exporter
from reconciler.devices import ContainerDevices, DeviceCount, DeviceLedger
from reconciler.kubelet_topology import Divergence
from reconciler.ledger import ANOMALY_KINDS
from reconciler.snapshot import ClaimDevice, DeviceAlloc
from tests.service.conftest import REPO, parse_exposition, scenario_root, series, value

STATE = SelfState(
    up=True, last_success=1.7e9, poll_duration=0.25, source_up={"podresources": True},
    source_errors={("podresources", "List"): 2}, anomalies_observed={"unknown_cpu": 1},
    source_operations=[("podresources", "List"), ("podresources", "GetAllocatableResources")],
    pods_dropped_total=0, history_pending=3, history_dropped_total=0, version="1.2.3")


KERNEL = KernelFacts({"pod_shared": 1.5}, {("default", "a", "pod_shared"): 1.5,
                                           ("default", "b", "pod_exclusive"): 2.0},
                     {"pod_shared": 1}, {"cgroup": "permission_denied"},
                     {("default", "b", "main"): 1.25}, {("default", "b"): 1.5})


# default/b/main holds GPU-1 (listed twice, as an init container's reused device is) and a
# device of a resource podres_devices does not count (past the 64 names, or malformed).
HOLDERS = (
    ContainerDevices("default", "b", "main", (
        DeviceAlloc("nvidia.com/gpu", ("GPU-1",), (1,)),
        DeviceAlloc("nvidia.com/gpu", ("GPU-1",), (1,)),
        DeviceAlloc("not counted", ("x",), ())), ()),
    ContainerDevices("default", "c", "app", (DeviceAlloc("intel.com/sriov", ("vf-0", "vf-1"),
                                                         ()),), ()),
    # A GPU of NVIDIA's DRA driver through a claim, listed twice (two requests of the claim
    # sharing it): one series.
    ContainerDevices("default", "d", "trainer", (), (
        ClaimDevice("default", "one-gpu", "gpu.nvidia.com", "node-1", "gpu-0", share_id="a"),
        ClaimDevice("default", "one-gpu", "gpu.nvidia.com", "node-1", "gpu-0", share_id="b"))),
)


def facts() -> NodeFacts:
    ledger = ledger_from_fixture(str(scenario_root() / "sidecar-hybrid"))
    # A topology read from sysfs where the kubelet drops CPU 3 (docs/design.md#topology).
    ledger = replace(ledger, topology_divergences=(
        Divergence("cpus_dropped", frozenset({3}), "dropped", "fix it"),),
        devices=DeviceLedger(containers=HOLDERS,
                             counts=(DeviceCount("nvidia.com/gpu", 1, 2, 1, 1),
                                     DeviceCount("intel.com/sriov", None, 4, 0, 4)),
                             dropped_resources=3))
    return NodeFacts(ledger, {"cpu_manager_state": "v3"}, downgrade_unsafe=True)


def test_every_family_is_produced_with_its_declared_labels() -> None:
    text, dropped, left = render_ledger(facts(), pods_max_series=1000)
    text += render_kernel(KERNEL, pods_series_left=left).text + render_self(STATE)
    assert dropped == 0
    samples = parse_exposition(text)  # the official parser; also refuses repeated series
    for family in FAMILIES:
        found = series(samples, family.name)
        assert found, f"{family.name} produced no sample"
        for labels in found:
            assert sorted(name for name, _ in labels) == sorted(family.labels), family.name
    assert value(samples, "podres_checkpoint_info", file="cpu_manager_state",
                 format="v3") == 1.0
    assert value(samples, "podres_checkpoint_downgrade_unsafe") == 1.0
    assert value(samples, "podres_history_pending_writes") == 3.0
    assert value(samples, "podres_build_info", version="1.2.3") == 1.0
    assert value(samples, "podres_topology_divergence", kind="cpus_dropped") == 1.0
    assert value(samples, "podres_topology_divergence", kind="siblings_split") == 0.0
    assert value(samples, "podres_devices", resource="nvidia.com/gpu", numa_node="1",
                 state="free") == 1.0
    assert value(samples, "podres_devices", resource="intel.com/sriov", numa_node="",
                 state="allocatable") == 4.0
    assert value(samples, "podres_device_resources_dropped") == 3.0
    assert value(samples, "podres_container_device_info", namespace="default", pod="b",
                 container="main", resource="nvidia.com/gpu", device_id="GPU-1") == 1.0
    assert len(series(samples, "podres_container_device_info")) == 3  # GPU-1, vf-0, vf-1
    assert value(samples, "podres_container_dra_device_info", namespace="default", pod="d",
                 container="trainer", dra_claim_namespace="default", dra_claim_name="one-gpu",
                 dra_driver_name="gpu.nvidia.com", dra_pool_name="node-1",
                 dra_device_name="gpu-0") == 1.0
    assert len(series(samples, "podres_container_dra_device_info")) == 1


def test_container_devices_are_per_pod_series() -> None:
    """Within the per-pod cap (after the ledger's per-pod families), and off with the
    collector: the cap's count says what was left out."""
    full, dropped, left = render_ledger(facts(), pods_max_series=1000)
    assert dropped == 0 and "podres_container_device_info{" in full
    per_pod = 1000 - (left or 0) - 4  # 3 device series and 1 claim device series
    text, dropped, left = render_ledger(facts(), pods_max_series=per_pod + 1)
    assert (dropped, left) == (3, 0)
    assert text.count("podres_container_device_info{") == 1
    assert "podres_container_dra_device_info{" not in text
    assert "podres_container_device_info" not in render_ledger(
        facts(), pods_max_series=None)[0]


def test_families_render_in_catalogue_order() -> None:
    text = (render_ledger(facts(), pods_max_series=1000)[0]
            + render_kernel(KERNEL, pods_series_left=1000)[0] + render_self(STATE))
    typed = [line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    ledger_part = [f.name for f in FAMILIES if not isinstance(f, SelfFamily)]
    self_part = [f.name for f in FAMILIES if isinstance(f, SelfFamily)]
    assert typed == ledger_part + self_part


def test_absent_facts_leave_their_families_out() -> None:
    bare = replace(facts(), checkpoints={}, downgrade_unsafe=None)
    bare = replace(bare, ledger=replace(bare.ledger, topology_divergences=None))
    text = render_ledger(bare, pods_max_series=None)[0]
    text += render_self(replace(STATE, last_success=None, history_pending=None,
                                history_dropped_total=None))
    for name in ("podres_checkpoint_info", "podres_checkpoint_downgrade_unsafe",
                 "podres_last_success_timestamp_seconds", "podres_history_pending_writes",
                 "podres_history_dropped_writes_total", "podres_pod_cpus",
                 "podres_container_cpus", "podres_topology_divergence"):
        assert f"# HELP {name} " not in text, name


def test_the_series_cap_keeps_whole_pods_first() -> None:
    full = parse_exposition(render_ledger(facts(), pods_max_series=1000)[0])
    per_pod = {k for k in full if BY_NAME[k[0]].group == "pods"}
    text, dropped, _ = render_ledger(facts(), pods_max_series=2)
    capped = {k for k in parse_exposition(text) if BY_NAME[k[0]].group == "pods"}
    assert len(capped) == 2 and dropped == len(per_pod) - 2
    assert {name for name, _ in capped} == {"podres_pod_cpus"}  # the pod's own series first


def test_kernel_families_take_what_the_ledger_left_of_the_cap() -> None:
    capped = render_kernel(KERNEL, pods_series_left=1)
    # The cap is shared by every per-pod kernel family, in catalogue order: the busy
    # time's second series, the container's and the pod's usage are left out.
    assert capped.dropped == 3 and capped.pods_series_left == 0
    assert len(series(parse_exposition(capped.text), "podres_pod_cpu_busy_seconds_total")) == 1
    samples = parse_exposition(render_kernel(KERNEL, pods_series_left=None).text)
    assert not series(samples, "podres_pod_cpu_busy_seconds_total")  # collector pods off
    # Every pool and every drift kind from the start, so that rate() and increase() work.
    assert value(samples, "podres_cpu_pool_busy_seconds_total", pool="reserved") == 0.0
    assert value(samples, "podres_cpuset_drift", kind="pod_shared") == 1.0
    assert value(samples, "podres_cpuset_drift", kind="pod") == 0.0
    off = render_kernel(KernelFacts(None, {}, None), pods_series_left=10)
    assert off.text == ""  # both kernel sources off: no family at all


def test_labelled_counters_start_at_zero() -> None:
    samples = parse_exposition(render_self(STATE))
    observed = series(samples, "podres_anomalies_observed_total")
    assert {dict(k)["kind"]: v for k, v in observed.items()} == \
        {kind: (1.0 if kind == "unknown_cpu" else 0.0) for kind in ANOMALY_KINDS}
    errors = series(samples, "podres_source_errors_total")
    assert {(dict(k)["source"], dict(k)["operation"]): v for k, v in errors.items()} == \
        {("podresources", "List"): 2.0, ("podresources", "GetAllocatableResources"): 0.0}


def test_configured_sources_have_their_operations_at_zero_before_any_poll(
        short_tmp: Path) -> None:
    """Known from the configuration alone: a first failure at the first poll is already an
    increase from 0."""
    reader = NodeReader(SourceOptions(socket=str(short_tmp / "none.sock"),
                                      kubelet_url="https://127.0.0.1:9", token_file=None,
                                      sysfs=None, topology_file="/nonexistent.json",
                                      kubelet_root=str(short_tmp)))
    exporter = Exporter(reader)
    samples = parse_exposition(b"".join(exporter.metrics_body()).decode())
    errors = {(dict(k)["source"], dict(k)["operation"]): v
              for k, v in series(samples, "podres_source_errors_total").items()}
    expected = {(s, op) for s in ("podresources", "kubelet", "topology", "checkpoint",
                                  "exporter") for op in SOURCE_OPERATIONS[s]}
    assert set(errors) == expected and set(errors.values()) == {0.0}
    assert ("kubelet", "pods") in expected and ("podresources", "List") in expected
    assert value(samples, "podres_up") == 0.0


def test_no_module_but_the_catalogue_names_a_family() -> None:
    """A rename is one edit: no other module of the exporter holds a family's name as a
    string of its own."""
    offenders = []
    for path in sorted((REPO / "exporter").rglob("*.py")):
        if path.name == "catalogue.py" and path.parent.name == "metrics":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in BY_NAME:
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value}")
    assert offenders == []


def _family(name: str, kind: Literal["gauge", "counter"] = "gauge",
            labels: tuple[str, ...] = ()) -> Family[NodeFacts]:
    return NodeFamily(name, kind, "help", labels, "node", lambda n: [])


@pytest.mark.parametrize("families, error", [
    ((_family("podres_a"), _family("podres_a")), "declared twice"),
    ((_family("podres_Bad"),), "malformed"),
    ((_family("node_cpus"),), "malformed"),
    ((_family("podres_events", "counter"),), "_total"),
    ((_family("podres_a", labels=("pod", "pod")),), "label names"),
    ((_family("podres_a", labels=("bad-label",)),), "label names"),
    ((Family("podres_a", "gauge", "help", (), "node", lambda n: []),), "Node/Pod"),
])
def test_a_bad_declaration_fails_at_import(families: tuple[Family[NodeFacts], ...],
                                           error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        _checked(families)


def test_a_repeated_pod_or_container_gives_each_series_once() -> None:
    """A kubelet listing a pod twice, or two containers of one pod under one name: one
    series each (Prometheus refuses a scrape that repeats one), within the cap or over it."""
    ledger = facts().ledger
    pod, container = ledger.pods[0], ledger.containers[0]
    twice = replace(ledger, pods=(*ledger.pods, pod), containers=(*ledger.containers, container))
    full = render_ledger(replace(facts(), ledger=twice), pods_max_series=1000)
    once = parse_exposition(render_ledger(facts(), pods_max_series=1000).text)
    per_pod = {k for k in parse_exposition(full.text) if BY_NAME[k[0]].group == "pods"}
    assert per_pod == {k for k in once if BY_NAME[k[0]].group == "pods"}
    assert full.dropped == 0 and full.pods_series_left == 1000 - len(per_pod)
    capped = render_ledger(replace(facts(), ledger=twice), pods_max_series=len(per_pod) - 1)
    assert len(parse_exposition(capped.text)) == len(parse_exposition(full.text)) - 1
    assert capped.dropped == 1 and capped.pods_series_left == 0


def test_node_exposition_is_the_ledger_with_its_checkpoint_facts() -> None:
    from exporter.metrics.exposition import node_exposition
    from reconciler.snapshot import CheckpointFacts

    ledger = replace(facts().ledger, checkpoints=CheckpointFacts(
        (("cpu_manager_state", "v3"),), downgrade_unsafe=True))
    body, dropped, left = node_exposition(ledger, pods_max_series=1000)
    assert body.decode("utf-8") == render_ledger(facts(), pods_max_series=1000).text
    assert (dropped, left) == render_ledger(facts(), pods_max_series=1000)[1:]
    bare = node_exposition(replace(ledger, checkpoints=None), pods_max_series=None)[0]
    assert b"podres_checkpoint_info" not in bare and b"podres_container_cpus" not in bare
