"""Hand-worked cases from the documented algorithm (docs/design.md#allocator)."""

from __future__ import annotations

from allocator.helpers import ctr, pod
from reconciler.allocator import (
    ModelConfig,
    NodeModel,
    PodPlacement,
    Rejection,
    from_spec,
    take_by_topology,
)
from reconciler.cpuset import parse_cpuset

# The pod scope carves pod blocks only under a topology policy other than none.
POD_SCOPE = ModelConfig(scope="pod", topology_policy="best-effort", reserved_cpus=frozenset({0}))

def S(text: str) -> frozenset[int]:
    return parse_cpuset(text)


def test_spec_numbering_puts_siblings_one_core_count_apart() -> None:
    topo = from_spec("1x4x2")
    assert topo.core_cpus[0] == S("0,4")
    assert topo.threads_per_core == 2
    two = from_spec("2x4x2", numa_per_socket=2)
    assert two.numa_cpus[0] == S("0-1,8-9")
    assert two.numa_cpus[3] == S("6-7,14-15")
    assert two.socket_cpus[1] == S("4-7,12-15")


def test_two_reserved_on_8_smt_cpus_is_one_whole_core() -> None:
    model = NodeModel(from_spec("1x4x2"), ModelConfig(reserved_cpu_m=1500))
    assert model.reserved == S("0,4")
    assert model.allocatable == S("1-3,5-7")


def test_best_fit_packs_the_most_used_core() -> None:
    topo = from_spec("1x4x2")
    # Core 0 is taken, core 1 (1,5) half used: a single CPU goes to its free sibling.
    assert take_by_topology(topo, S("2-3,5-7"), 1) == S("5")


def test_best_fit_packs_the_most_used_numa_node() -> None:
    topo = from_spec("1x4x2", numa_per_socket=2)  # NUMA 0: cores 0,1; NUMA 1: cores 2,3
    # NUMA 1 has one whole core left, NUMA 0 has two: a 2-CPU request goes to NUMA 1.
    available = S("0-2,4-6")
    assert take_by_topology(topo, available, 2) == S("2,6")


def test_whole_cores_preferred_over_split_threads() -> None:
    topo = from_spec("1x4x2")
    # CPU 1 alone (sibling 5 taken) and 3 alone; core 2 (2,6) whole.
    got = take_by_topology(topo, S("1-3,6"), 2)
    assert got == S("2,6")


def test_whole_numa_node_taken_when_a_whole_one_is_needed() -> None:
    topo = from_spec("2x2x1")
    assert take_by_topology(topo, S("0-3"), 3) == S("0-2")
    # Socket 1 already half used: a 1-CPU request packs it.
    assert take_by_topology(topo, S("0-1,3"), 1) == S("3")


def test_full_pcpus_only_rejects_an_odd_request_on_smt() -> None:
    model = NodeModel(from_spec("1x4x2"),
                      ModelConfig(reserved_cpus=S("0,4"), options=frozenset({"full-pcpus-only"})))
    result = model.admit(pod("odd", ctr("app", "3")))
    assert isinstance(result, Rejection)
    assert "SMT Alignment Error" in result.reason
    ok = model.admit(pod("even", ctr("app", "2")))
    assert isinstance(ok, PodPlacement)
    assert ok.containers[0].exclusive == S("1,5")


def test_single_numa_node_rejects_a_pod_that_fits_no_single_node() -> None:
    model = NodeModel(from_spec("2x4x1"),
                      ModelConfig(topology_policy="single-numa-node", reserved_cpus=S("0")))
    result = model.admit(pod("big", ctr("app", "5")))
    assert isinstance(result, Rejection)
    assert "single" in result.reason
    fits = model.admit(pod("small", ctr("app", "4")))
    assert isinstance(fits, PodPlacement)
    assert fits.containers[0].exclusive == S("4-7")


def test_pod_budget_carves_exclusive_and_shared_pool() -> None:
    model = NodeModel(from_spec("1x8x1"),
                      ModelConfig(scope="pod", reserved_cpus=S("0"),
                                  topology_policy="single-numa-node"))
    p = pod("db", ctr("main", "3", "2Gi"), ctr("proxy"), ctr("shipper"), budget="5")
    got = model.admit(p)
    assert isinstance(got, PodPlacement), got
    assert got.block == S("1-5")
    by_name = {c.name: c for c in got.containers}
    assert by_name["main"].assignment == "pod_exclusive"
    assert by_name["main"].exclusive == S("1-3")
    assert got.shared_pool == S("4-5")
    assert by_name["proxy"].assignment == "pod_shared"
    assert by_name["proxy"].cpus == S("4-5")
    pools = model.pools()
    assert pools == {"reserved": 1, "node_shared": 2, "node_exclusive": 0, "pod_exclusive": 3,
                     "pod_shared": 2, "pod_idle": 0}


def test_empty_pod_shared_pool_is_rejected() -> None:
    model = NodeModel(from_spec("1x8x1"), POD_SCOPE)
    p = pod("full", ctr("main", "3"), ctr("proxy"), budget="3")
    got = model.admit(p)
    assert isinstance(got, Rejection)
    assert got.reason.startswith("empty pod shared pool")
    assert model.free == set(S("1-7"))


def test_no_shared_container_leaves_the_remainder_idle() -> None:
    model = NodeModel(from_spec("1x8x1"), POD_SCOPE)
    got = model.admit(pod("idle", ctr("main", "2"), budget="4"))
    assert isinstance(got, PodPlacement)
    assert model.pools()["pod_idle"] == 2


def test_motivating_example_pins_three_not_four() -> None:
    model = NodeModel(from_spec("1x8x1"), POD_SCOPE)
    web = pod("web", ctr("app", "2", "4Gi"),
              init=(ctr("mesh-proxy", sidecar=True), ctr("log-shipper", sidecar=True)),
              budget="3", budget_mem="6Gi")
    got = model.admit(web)
    assert isinstance(got, PodPlacement)
    assert [c.name for c in got.containers] == ["mesh-proxy", "log-shipper", "app"]
    assert len(got.block) == 3
    legacy = NodeModel(from_spec("1x8x1"), ModelConfig(reserved_cpus=S("0"), pod_level=False))
    old = pod("web", ctr("app", "2", "4Gi"),
              init=(ctr("mesh-proxy", "1", sidecar=True), ctr("log-shipper", "1", sidecar=True)))
    placed = legacy.admit(old)
    assert isinstance(placed, PodPlacement)
    assert len(placed.exclusive) == 4
    assert all(c.assignment == "node_exclusive" for c in placed.containers)


def test_sidecar_slices_come_before_app_slices() -> None:
    model = NodeModel(from_spec("1x8x1"), POD_SCOPE)
    p = pod("p", ctr("app", "2"), init=(ctr("side", "1", sidecar=True),), budget="4")
    got = model.admit(p)
    assert isinstance(got, PodPlacement)
    by = {c.name: c for c in got.containers}
    assert by["side"].exclusive == S("1")
    assert by["app"].exclusive == S("2-3")


def test_init_container_cpus_are_reused_by_app_containers() -> None:
    model = NodeModel(from_spec("1x8x1"), ModelConfig(reserved_cpus=S("0")))
    p = pod("p", ctr("app", "2"), init=(ctr("setup", "4", init=True),))
    got = model.admit(p)
    assert isinstance(got, PodPlacement)
    assert got.containers[0].exclusive <= S("1-4")
    # The init container's other CPUs stay out of the shared pool until the kubelet removes
    # the init container (TestStaticPolicyReuseCPUs), though the ledger sees them as shared.
    assert got.init_held == S("1-4") - got.containers[0].exclusive
    assert model.free == set(S("5-7"))
    assert model.pools()["node_shared"] == 5
    assert model.remove_init_containers("default", "p") == got.init_held
    assert model.free == set(S("1-7")) - got.containers[0].exclusive
    assert model.remove_init_containers("default", "p") == frozenset()


def test_sidecar_cpus_are_not_reused() -> None:
    model = NodeModel(from_spec("1x8x1"), ModelConfig(reserved_cpus=S("0")))
    p = pod("p", ctr("app", "2"), init=(ctr("side", "2", sidecar=True),))
    got = model.admit(p)
    assert isinstance(got, PodPlacement)
    by = {c.name: c for c in got.containers}
    assert not by["side"].exclusive & by["app"].exclusive
    assert len(got.exclusive) == 4


def test_container_scope_with_budget_uses_node_pool() -> None:
    model = NodeModel(from_spec("1x8x1"), ModelConfig(scope="container", reserved_cpus=S("0")))
    p = pod("p", ctr("app", "2"), ctr("proxy"), budget="3")
    got = model.admit(p)
    assert isinstance(got, PodPlacement)
    assert got.block == frozenset()
    by = {c.name: c for c in got.containers}
    assert by["app"].assignment == "node_exclusive"
    assert by["proxy"].assignment == "node_shared"


def test_fractional_budget_gets_no_exclusive_cpus() -> None:
    model = NodeModel(from_spec("1x8x1"), POD_SCOPE)
    got = model.admit(pod("p", ctr("app", "2"), budget="2500m"))
    assert isinstance(got, PodPlacement)
    assert got.exclusive == frozenset()
    assert "fractional" in got.note


def test_budget_smaller_than_exclusive_slices_is_rejected() -> None:
    model = NodeModel(from_spec("1x8x1"), POD_SCOPE)
    got = model.admit(pod("p", ctr("a", "2"), ctr("b", "2"), budget="3"))
    # The kubelet checks nothing but the shared pool before it takes the block: the second
    # slice fails to fit in it, and the block stays out of the default set.
    assert isinstance(got, Rejection)
    assert "container b: not enough cpus available" in got.reason
    assert len(got.leaked) == 3 and model.free == set(S("1-7")) - got.leaked


def test_not_enough_cpus_is_rejected_and_state_kept() -> None:
    model = NodeModel(from_spec("1x4x1"), ModelConfig(reserved_cpus=S("0")))
    assert isinstance(model.admit(pod("a", ctr("x", "2"))), PodPlacement)
    before = set(model.free)
    got = model.admit(pod("b", ctr("x", "2")))
    assert isinstance(got, Rejection)
    assert "not enough cpus available to satisfy request" in got.reason
    assert model.free == before


def test_release_returns_the_whole_block() -> None:
    model = NodeModel(from_spec("1x8x1"), POD_SCOPE)
    start_mem = dict(model.mem_free)
    got = model.admit(pod("p", ctr("app", "2", "2Gi"), ctr("proxy"), budget="4"))
    assert isinstance(got, PodPlacement)
    assert model.release("default", "p") is not None
    assert model.free == set(S("1-7"))
    assert model.mem_free == start_mem
    assert model.release("default", "p") is None


def test_distribute_across_numa_spreads_evenly() -> None:
    model = NodeModel(from_spec("1x8x1", numa_per_socket=2),
                      ModelConfig(options=frozenset({"distribute-cpus-across-numa"})))
    got = model.admit(pod("p", ctr("app", "6")))
    assert isinstance(got, PodPlacement)
    ex = got.containers[0].exclusive
    assert len(ex & S("0-3")) == 3 and len(ex & S("4-7")) == 3
    small = model.admit(pod("q", ctr("app", "1")))
    assert isinstance(small, PodPlacement)


def test_none_policy_gives_nothing_exclusive() -> None:
    model = NodeModel(from_spec("1x4x1"), ModelConfig(cpu_policy="none"))
    got = model.admit(pod("p", ctr("app", "2")))
    assert isinstance(got, PodPlacement)
    assert got.exclusive == frozenset()
    assert model.allocatable == frozenset()


def test_best_effort_admits_across_numa_nodes() -> None:
    model = NodeModel(from_spec("2x4x1"), ModelConfig(topology_policy="best-effort"))
    got = model.admit(pod("p", ctr("app", "6")))
    assert isinstance(got, PodPlacement)
    assert len(got.numa_nodes(model.topo)) == 2
    model2 = NodeModel(from_spec("2x4x1"),
                       ModelConfig(topology_policy="restricted", memory_policy="None"))
    assert isinstance(model2.admit(pod("a", ctr("app", "3"))), PodPlacement)
    # 5 CPUs cannot fit one node; the preferred hint is both nodes: still admitted.
    assert isinstance(model2.admit(pod("b", ctr("app", "5"))), PodPlacement)
    # With the Static memory manager, 1Gi prefers one node: the merged hint is not preferred.
    model3 = NodeModel(from_spec("2x4x1"), ModelConfig(topology_policy="restricted"))
    assert isinstance(model3.admit(pod("c", ctr("app", "5"))), Rejection)
