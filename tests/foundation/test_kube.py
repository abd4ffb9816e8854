"""Kubernetes facts: quantities, pod specs (QoS, eligibility, sidecars), kubelet config."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundation.helpers import SCENARIOS, cspec, pspec
from reconciler.kube import (
    ContainerSpec,
    KubeletConfig,
    PodSpec,
    Resources,
    SpecError,
    compute_qos,
    cpu_millis,
    kubelet_config_from_json,
    memory_bytes,
    parse_quantity,
    pod_list_from_json,
    pod_spec_from_json,
)


@pytest.mark.parametrize(("text", "value"), [
    ("1", Decimal(1)), ("500m", Decimal("0.5")), ("2.5", Decimal("2.5")),
    ("1Ki", Decimal(1024)), ("12Gi", Decimal(12 * 2**30)), ("1e3", Decimal(1000)),
    ("1M", Decimal(10**6)), ("100n", Decimal("1e-7")), (" 3 ", Decimal(3)), (4, Decimal(4)),
    (0.25, Decimal("0.25")), ("+1", Decimal(1)), (".5", Decimal("0.5")),
])
def test_parse_quantity(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "-1", "1Qi", "1 Gi", None, True, [],
                                  {}, "1e999999", "Gi", "1ki"])
def test_parse_quantity_rejects(text: object) -> None:
    with pytest.raises(SpecError):
        parse_quantity(text)


def test_cpu_millis_rounds_up_and_memory_bytes() -> None:
    assert cpu_millis("1") == 1000 and cpu_millis("0.0001") == 1 and cpu_millis("250m") == 250
    assert memory_bytes("1Gi") == 2**30 and memory_bytes("1.5") == 2


@given(st.integers(0, 10**6))
def test_millis_round_trip(m: int) -> None:
    assert cpu_millis(f"{m}m") == m


def test_resources_from_json_defaults_request_to_limit() -> None:
    r = Resources.from_json({"limits": {"cpu": "2", "memory": "1Gi"}})
    assert r == Resources(2000, 2000, 2**30, 2**30)
    assert r.guaranteed and r.integer_cpus == 2
    assert Resources.from_json(None) == Resources()
    assert not Resources.from_json({"requests": {"cpu": "2"}}).guaranteed
    with pytest.raises(SpecError):
        Resources.from_json({"requests": ["cpu"]})


@pytest.mark.parametrize(("r", "want"), [
    (Resources(2000, 2000, 1, 1), 2), (Resources(1500, 1500, 1, 1), None),
    (Resources(0, 0, 1, 1), None), (Resources(None, None), None),
])
def test_integer_cpus(r: Resources, want: int | None) -> None:
    assert r.integer_cpus == want


@pytest.mark.parametrize(("r", "want"), [
    (Resources(None, None), 1), (Resources(2500, None), 3), (Resources(500, 2500), 3),
    (Resources(3000, 3000), 3), (Resources(100, None), 1),
])
def test_legacy_cpus(r: Resources, want: int) -> None:
    assert r.legacy_cpus() == want


def test_qos_classes() -> None:
    assert pspec("p", cspec("a", "1")).qos == "Guaranteed"
    assert pspec("p", cspec("a", "1", guaranteed=False)).qos == "Burstable"
    assert pspec("p", ContainerSpec("a")).qos == "BestEffort"
    # Pod-level resources decide when set.
    assert pspec("p", cspec("a", "1", guaranteed=False), budget="2").qos == "Guaranteed"
    assert compute_qos(PodSpec("ns", "p", resources=Resources(1000, None, 1, None),
                               containers=(cspec("a", "1"),))) == "Burstable"
    # The reported class wins.
    assert PodSpec("ns", "p", qos_class="Burstable", containers=(cspec("a", "1"),)).qos == \
        "Burstable"


def test_eligibility() -> None:
    # Guaranteed by its pod-level budget, so each container's own resources decide.
    pod = pspec("p", cspec("app", "2"), cspec("frac", "1500m"),
                cspec("burst", "1", guaranteed=False), budget="5")
    c = {x.name: x for x in pod.containers}
    assert pod.eligible(c["app"]) and not pod.eligible(c["frac"])
    assert not pod.eligible(c["burst"])
    assert not pspec("q", cspec("a", "2"), cspec("b", "1", guaranteed=False)).eligible(
        cspec("a", "2"))
    init = ContainerSpec("init", Resources(1000, 1000, 1, 1), init=True)
    assert not pod.eligible(init)


def test_pod_spec_from_json_sidecars_first() -> None:
    obj = {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
        "spec": {
            "resources": {"requests": {"cpu": "3", "memory": "6Gi"},
                          "limits": {"cpu": "3", "memory": "6Gi"}},
            "initContainers": [{"name": "setup"},
                               {"name": "proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "app", "resources": {"limits": {"cpu": "2",
                                                                   "memory": "4Gi"}}}],
        },
        "status": {"qosClass": "Guaranteed", "phase": "Running"},
    }
    spec = pod_spec_from_json(obj)
    assert [c.name for c in spec.long_running] == ["proxy", "app"]
    assert spec.container("setup") is None and spec.container("proxy").sidecar  # type: ignore[union-attr]
    assert spec.init_containers[0].init and not spec.init_containers[0].sidecar
    assert spec.budget_cpus == 3 and spec.has_pod_cpu_budget and spec.uid == "u-1"
    assert pspec("f", cspec("a", "1"), budget="2500m").budget_cpus is None


def test_pod_list_from_json_errors() -> None:
    with pytest.raises(SpecError):
        pod_list_from_json([])
    with pytest.raises(SpecError):
        pod_list_from_json({"items": {}})
    with pytest.raises(SpecError):
        pod_list_from_json({"items": ["x"]})
    with pytest.raises(SpecError):
        pod_list_from_json({"items": [{"metadata": ["m"], "spec": {}}]})
    assert pod_list_from_json({}) == ()


def test_scenario_pod_list_parses() -> None:
    specs = pod_list_from_json(json.loads((SCENARIOS / "database-pod-scope" / "pods.json")
                                          .read_text()))
    assert specs and all(s.name for s in specs)


def test_kubelet_config_defaults_and_loose_keys() -> None:
    assert kubelet_config_from_json({"kubeletconfig": {}}) == KubeletConfig()
    cfg = kubelet_config_from_json({
        "cpu_manager_policy": "static", "ReservedSystemCPUs": "0,8",
        "featureGates": {"PodLevelResourceManagers": True, "X": False},
        "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
        "kubeReserved": {"cpu": "500m"}, "systemReserved": {"cpu": "1"},
        "topologyManagerScope": "pod"})
    assert cfg.static_cpu and cfg.reserved_system_cpus == frozenset({0, 8})
    assert cfg.pod_level_resource_managers and cfg.gate("X") is False and cfg.gate("Y") is None
    assert cfg.option("full-pcpus-only") == "true"
    assert cfg.reserved_cpu_quantity_m() == 1500
    assert cfg.topology_manager_scope == "pod"
    assert kubelet_config_from_json({"reservedSystemCPUs": ""}).reserved_system_cpus is None


@pytest.mark.parametrize("obj", [[], "x", {"kubeletconfig": []},
                                 {"reservedSystemCPUs": "3-1"}, {"reservedSystemCPUs": 5000},
                                 {"kubeReserved": {"cpu": "abc"}},
                                 {"systemReserved": {"memory": "-1Gi"}},
                                 {"kubeReserved": ["cpu"]}])
def test_kubelet_config_errors(obj: object) -> None:
    with pytest.raises(SpecError):
        kubelet_config_from_json(obj)
