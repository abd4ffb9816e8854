"""The kubelet's init-container rules: sizing, budgets and the CPUs init containers hold."""

from __future__ import annotations

from allocator.helpers import ctr, pod
from reconciler.allocator import (
    ModelConfig,
    NodeModel,
    PodPlacement,
    Rejection,
    from_spec,
    pod_guaranteed_cpus,
)
from reconciler.cpuset import parse_cpuset as S


def _model() -> NodeModel:
    return NodeModel(from_spec("1x16x1"), ModelConfig(scope="pod", topology_policy="best-effort",
                                                      memory_policy="None"))


def test_a_regular_init_container_counts_the_sidecars_started_before_it() -> None:
    p = pod("p", ctr("app", "1"),
            init=(ctr("side", "2", sidecar=True), ctr("setup", "3", init=True),
                  ctr("late", "1", sidecar=True)))
    assert pod_guaranteed_cpus(p) == 5  # side (2) beside setup (3); long-running 4


def test_an_exclusive_init_container_must_fit_beside_earlier_sidecars() -> None:
    p = pod("p", ctr("app", "1"),
            init=(ctr("side", "2", sidecar=True), ctr("setup", "3", init=True)), budget="4")
    model = _model()
    got = model.admit(p)
    # The kubelet takes the block, then fails to carve 3 CPUs out of the 2 the sidecar left,
    # and keeps the block out of the default set (docs/design.md#allocator).
    assert isinstance(got, Rejection)
    assert "container setup: not enough cpus available" in got.reason
    assert len(got.leaked) == 4 and not got.leaked & model.default_set
    fits = pod("q", ctr("app", "1"),
               init=(ctr("setup", "3", init=True), ctr("side", "2", sidecar=True)), budget="4")
    assert isinstance(_model().admit(fits), PodPlacement)


def test_a_shared_init_container_after_sidecars_using_the_budget_is_refused() -> None:
    p = pod("p", ctr("app"),
            init=(ctr("side", "2", sidecar=True), ctr("setup", "500m", init=True)),
            budget="2")
    got = _model().admit(p)
    assert isinstance(got, Rejection)
    assert "empty pod shared pool" in got.reason


def test_zero_cpu_is_no_limit_so_the_pod_is_burstable() -> None:
    p = pod("p", ctr("app", "0"))
    assert p.qos == "Burstable"
    got = NodeModel(from_spec("1x4x1")).admit(p)
    assert isinstance(got, PodPlacement) and not got.exclusive


def test_unreused_init_cpus_stay_held_until_the_pod_goes() -> None:
    model = NodeModel(from_spec("1x4x2"))
    got = model.admit(pod("p", ctr("app", "2"), init=(ctr("setup", "4", init=True),)))
    assert isinstance(got, PodPlacement)
    assert got.containers[0].exclusive == S("0,4")
    assert got.init_held == S("1,5")
    assert model.default_set == S("2,3,6,7")
    model.release("default", "p")
    assert model.default_set == S("0-7")


def test_admitting_the_same_pod_again_keeps_its_placement() -> None:
    model = NodeModel(from_spec("1x4x2"))
    p = pod("p", ctr("app", "2"))
    first = model.admit(p)
    assert isinstance(first, PodPlacement)
    free = set(model.free)
    assert model.admit(p) is first
    assert model.free == free
    other = model.admit(pod("p", ctr("app", "3")))
    assert isinstance(other, Rejection) and "already placed" in other.reason
