"""The take, the hints and full-pcpus-only where the real kubelet showed the model wrong
(docs/design.md#reference); each case names its source: an upstream test, or the runner's
seed and kubelet version that found it."""

from __future__ import annotations

import pytest

from reconciler.allocator import CPUTopology, ModelConfig, ModelError, NodeModel
from reconciler.allocator.hints import MaskTable, merge
from reconciler.allocator.placement import PodPlacement, Rejection
from reconciler.allocator.take import _go_combinations, policy_taker, take_distributed
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo

GiB = 2**30
DISTRIBUTE_ALIGN = frozenset({"distribute-cpus-across-numa", "align-by-socket"})


def _g(cpu_m: int) -> Resources:
    return Resources(cpu_m, cpu_m, 64 * 2**20, 64 * 2**20)


def _dual_socket_multi_numa_ht_type2() -> CPUTopology:
    """policy_test.go topoDualSocketMultiNumaPerSocketHTType2 (v1.37.2): 80 CPUs, CPU i
    (i < 40) on core i, socket i % 2, NUMA node i % 4; CPU 40 + i its sibling."""
    return CPUTopology(cpus=tuple(CPUInfo(i, i % 40, i % 2, i % 4) for i in range(80)),
                       memory=tuple((n, 8 * GiB) for n in range(4)))


# policy_static_test.go TestPolicyWithAlignBySocketAndDistributeCPUsAcrossNUMAEnabled
# (v1.37.2): (description, default CPU set, align-by-socket, expected CPUs) for 6 CPUs.
ALIGN_BY_SOCKET_CASES = [
    ("AlignBySocket and DistributeCPUsAcrossNUMA both enabled", set(range(1, 16)), True,
     {1, 3, 5, 7, 9, 11}),
    ("AlignBySocket takes priority over DistributeCPUsAcrossNUMA",
     {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17}, True, {1, 3, 5, 7, 9, 13}),
    ("AlignBySocket isn't enabled", {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17}, False,
     {1, 4, 5, 8, 9, 12}),
    ("No assignment that satisfy AlignBySocket", {1, 2, 3, 4, 5, 8, 9, 12, 13}, True,
     {1, 4, 5, 8, 9, 12}),
]


@pytest.mark.parametrize(("available", "align", "want"),
                         [c[1:] for c in ALIGN_BY_SOCKET_CASES],
                         ids=[c[0] for c in ALIGN_BY_SOCKET_CASES])
def test_distributed_take_with_align_by_socket_1_37(available: set[int], align: bool,
                                                    want: set[int]) -> None:
    topo = _dual_socket_multi_numa_ht_type2()
    assert take_distributed(topo, available, 6, 1, align_by_socket=align,
                            cap_share=True) == want
    options = DISTRIBUTE_ALIGN if align else frozenset({"distribute-cpus-across-numa"})
    assert policy_taker(topo, options, "1.37")(topo, frozenset(available), 6) == want


def test_distributed_take_ignores_align_by_socket_before_1_37() -> None:
    """Source: the first case above run through the reference, kubelet 1.36.3, which
    spreads over NUMA nodes 1 and 2 across both sockets (cpu_assignment.go of 1.35.4 and
    1.36.3 has no alignBySocket in takeByTopologyNUMADistributed)."""
    topo = _dual_socket_multi_numa_ht_type2()
    available = frozenset(range(1, 16))
    for version in ("1.35", "1.36"):
        got = policy_taker(topo, DISTRIBUTE_ALIGN, version)(topo, available, 6)
        assert got == {1, 2, 5, 6, 9, 10}


def test_the_kubelet_version_is_checked() -> None:
    with pytest.raises(ModelError, match="kubelet version"):
        ModelConfig(kubelet_version="1.34")


def test_reserved_cpus_are_taken_as_the_options_take() -> None:
    """Source: reference runner, kubelet 1.35.4, seed 555001697 (policy_static.go
    NewStaticPolicy reserves through p.takeByTopology): under distribute-cpus-across-cores
    2000m reserves CPUs 0 and 1, not the siblings 0 and 5."""
    topo = CPUTopology(cpus=tuple(CPUInfo(t * 5 + i, i, 0, 0) for t in range(2)
                                  for i in range(5)), memory=((0, 8 * GiB),))
    spread = ModelConfig(options=frozenset({"distribute-cpus-across-cores"}),
                         reserved_cpu_m=2000)
    assert NodeModel(topo, spread).reserved == {0, 1}
    assert NodeModel(topo, ModelConfig(reserved_cpu_m=2000)).reserved == {0, 5}


def test_full_pcpus_only_counts_the_default_set_without_smt() -> None:
    """Source: reference runner, kubelet 1.37.2, seed 555001818 (policy_static.go
    enforceSMTAlignment counts the default set less the reserved cores, with one CPU per
    core too; CPUs an init container left to reuse are not in it)."""
    topo = CPUTopology(cpus=tuple(CPUInfo(i, i, 0, 0) for i in range(6)),
                       memory=((0, 8 * GiB),))
    config = ModelConfig(topology_policy="single-numa-node", memory_policy="None",
                         options=frozenset({"full-pcpus-only"}), reserved_cpu_m=1000)
    pod = PodSpec("ref", "p", "uid-p",
                  (ContainerSpec("app1", _g(1000)), ContainerSpec("app2", _g(4000))),
                  init_containers=(ContainerSpec("init0", _g(3000), init=True),))
    placed = NodeModel(topo, config).admit(pod)
    assert isinstance(placed, Rejection)
    assert ("not enough free physical CPUs: available physical CPUs = 2, requested CPUs = 4"
            in placed.reason)
    # Without the option the same pod fits: the reused CPUs make up the difference.
    plain = NodeModel(topo, ModelConfig(topology_policy="single-numa-node",
                                        memory_policy="None", reserved_cpu_m=1000))
    assert isinstance(plain.admit(pod), PodPlacement)


def test_masks_of_one_width_go_by_bitmask_value() -> None:
    """Source: topologymanager/bitmask/bitmask.go IsNarrowerThan -> IsLessThan (v1.35.4,
    v1.37.2): equal counts compare as integers; found by the reference runner, kubelet
    1.35.4, seed 777002527 (a pod preferred on {0,3} and {1,2} goes to {1,2})."""
    table = MaskTable([0, 1, 2, 3])
    pairs = [set(m) for m, w in zip(table.masks, table.width, strict=True) if w == 2]
    assert pairs == [{0, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}]
    hints = [(frozenset({0, 3}), True), (frozenset({1, 2}), True)]
    ordered = sorted(hints, key=lambda h: table.masks.index(h[0]))
    assert merge("restricted", [ordered], frozenset(range(4))) == {1, 2}


def test_combinations_share_slices_as_in_go() -> None:
    """cpu_assignment.go iterateCombinations (v1.35.4-v1.37.2) appends to one prefix slice
    per level: from a 3-long prefix (capacity 4) every 4-subset writes the same array."""
    walk = _go_combinations([3, 4, 5, 6, 7], 4)
    first = next(walk)
    assert first[:4] == [3, 4, 5, 6]
    assert next(walk)[:4] == [3, 4, 5, 7]
    assert first[:4] == [3, 4, 5, 7]  # the slice kept for the first subset
    assert [tuple(c[:2]) for c in _go_combinations([0, 1, 2], 2)] == [(0, 1), (0, 2), (1, 2)]


def test_distributed_take_keeps_the_combination_go_kept() -> None:
    """Source: reference runner, kubelet 1.36.3, seed 31337094096 (pods without pod-level
    resources, no restarts): four NUMA nodes of one CPU each balance equally, the first
    combination {3,4,5,6} is kept, and the next one, {3,4,5,7}, overwrites it."""
    topo = CPUTopology(cpus=tuple(CPUInfo(i, i, i // 4, i) for i in range(8)),
                       memory=tuple((n, GiB) for n in range(8)))
    for version in ("1.35", "1.36", "1.37"):
        taker = policy_taker(topo, frozenset({"distribute-cpus-across-numa"}), version)
        assert taker(topo, frozenset({3, 4, 5, 6, 7}), 4) == {3, 4, 5, 7}
