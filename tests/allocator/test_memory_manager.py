"""The model's Static memory manager against the rules of the kubelet's
``pkg/kubelet/cm/memorymanager/policy_static.go`` (v1.35.4 to v1.37.2), each case one the
reference differential (``python -m bench.reference --memory``) found the old model getting
wrong (docs/design.md#memory-in-the-model)."""

from __future__ import annotations

from reconciler.allocator import CPUTopology, ModelConfig, NodeModel
from reconciler.allocator.memory_start import StartOutcomes, start_outcomes
from reconciler.allocator.memory_state import MachineState
from reconciler.allocator.placement import PodPlacement, Rejection
from reconciler.allocator.restart import restart
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo, MemoryBlock

GiB = 2**30
MiB = 2**20


def _topo(numa: int, cores: int = 2, memory: int = 4 * GiB,
          hugepages: tuple[tuple[int, str, int], ...] = ()) -> CPUTopology:
    cpus = tuple(CPUInfo(n * cores + i, n * cores + i, 0, n)
                 for n in range(numa) for i in range(cores))
    return CPUTopology(cpus=cpus, memory=tuple((n, memory) for n in range(numa)),
                       hugepages=hugepages)


def _g(cpu_m: int, mem: int, **pages: int) -> Resources:
    huge = tuple(sorted((k.replace("_", "-"), v) for k, v in pages.items()))
    return Resources(cpu_m, cpu_m, mem, mem, hugepages=huge)


def _pod(name: str, *containers: ContainerSpec, inits: tuple[ContainerSpec, ...] = (),
         budget: Resources | None = None) -> PodSpec:
    return PodSpec("default", name, f"uid-{name}", containers, inits, budget)


def _blocks(p: PodPlacement | Rejection, name: str) -> tuple[MemoryBlock, ...]:
    assert isinstance(p, PodPlacement), p
    return dict(p.mem_entries)[name]


def test_without_a_hint_memory_goes_to_the_first_node_with_room_not_the_cpus_node() -> None:
    """Topology policy none: ``Allocate`` takes the default hint (the narrowest preferred
    mask, lowest first), whatever NUMA node the CPUs came from. Reference, 1.37, seed 1
    of the --memory mix: kubelet (0,), model (1,)."""
    model = NodeModel(_topo(2), ModelConfig(reserved_cpus=frozenset({0, 1}),
                                            topology_policy="none"))
    placed = model.admit(_pod("p", ContainerSpec("app", _g(1000, GiB))))
    assert isinstance(placed, PodPlacement)
    assert model.topo.numa_set(placed.containers[0].exclusive) == {1}
    assert placed.containers[0].memory == (MemoryBlock("memory", GiB, (0,)),)


def test_a_block_wider_than_a_node_makes_a_group_that_later_blocks_keep_out_of() -> None:
    """A block on two nodes groups them; a single-node block may then use neither
    (``calculateHints``, ``isAffinityViolatingNUMAAllocations``)."""
    model = NodeModel(_topo(3), ModelConfig(reserved_cpu_m=1000, topology_policy="none"))
    big = model.admit(_pod("big", ContainerSpec("app", _g(1000, 6 * GiB))))
    assert _blocks(big, "app") == (MemoryBlock("memory", 6 * GiB, (0, 1)),)
    small = model.admit(_pod("small", ContainerSpec("app", _g(1000, 256 * MiB))))
    assert _blocks(small, "app") == (MemoryBlock("memory", 256 * MiB, (2,)),)
    summary = model.mem.summary()
    assert summary[0][:2] == (1, (0, 1)) and summary[1][:2] == (1, (0, 1))
    # The group's second node is filled after the first, in node order.
    assert summary[0][2]["memory"] == (0, 4 * GiB)
    assert summary[1][2]["memory"] == (2 * GiB, 2 * GiB)


def test_the_pod_pool_must_not_be_empty_for_a_shared_container() -> None:
    """``validatePodScopeResources``: exclusive requests equal to the pod's memory leave
    nothing for a shared container; the pod scope refuses it (EmptyPodSharedPoolError)."""
    model = NodeModel(_topo(2), ModelConfig(reserved_cpu_m=1000, topology_policy="best-effort",
                                            scope="pod"))
    pod = _pod("pooled", ContainerSpec("app", _g(1000, GiB)), ContainerSpec("side"),
               budget=_g(2000, GiB))
    refused = model.admit(pod)
    assert isinstance(refused, Rejection)
    assert "leaving no memory for shared containers" in refused.reason


def test_pod_level_memory_is_carved_into_exclusive_and_pool_blocks() -> None:
    """``AllocatePod``: the pod's budget on one mask, an exclusive container its own
    request, a container on the pod's pool what is left."""
    model = NodeModel(_topo(2), ModelConfig(reserved_cpu_m=1000, topology_policy="best-effort",
                                            scope="pod"))
    pod = _pod("pooled", ContainerSpec("app", _g(1000, GiB)), ContainerSpec("side"),
               budget=_g(2000, 3 * GiB))
    placed = model.admit(pod)
    assert isinstance(placed, PodPlacement)
    # Node 0 lost a CPU to the reservation: the CPU hint, and so the memory, is node 1.
    assert placed.block_memory == (MemoryBlock("memory", 3 * GiB, (1,)),)
    assert _blocks(placed, "app") == (MemoryBlock("memory", GiB, (1,)),)
    assert _blocks(placed, "side") == (MemoryBlock("memory", 2 * GiB, (1,)),)
    assert model.mem_free == {0: 4 * GiB, 1: GiB}


def test_hugepages_get_blocks_of_their_own_type() -> None:
    """Hugepages are a memory type of their own, with hints and blocks beside memory."""
    pages = ((0, "hugepages-1Gi", GiB), (1, "hugepages-1Gi", 2 * GiB))
    model = NodeModel(_topo(2, hugepages=pages),
                      ModelConfig(reserved_cpu_m=1000, topology_policy="single-numa-node"))
    placed = model.admit(_pod("huge", ContainerSpec("app", _g(1000, GiB,
                                                              hugepages_1Gi=2 * GiB))))
    assert sorted(_blocks(placed, "app")) == [MemoryBlock("hugepages-1Gi", 2 * GiB, (1,)),
                                              MemoryBlock("memory", GiB, (1,))]


def test_an_init_containers_memory_is_reused_then_dropped_when_the_app_is_added() -> None:
    """An ordinary init container's memory is reused by the containers after it on the
    same nodes (``getPodReusableMemory``: the app's 1 GiB takes nothing more), its block
    shrinks by what they reused (``updateInitContainersMemoryBlocks``), and ``AddContainer``
    of the app drops the finished init container from the state, giving back what it still
    held. Reference, 1.37, seed 1000008 of the --memory mix (kubelet one block on the node,
    model two)."""
    model = NodeModel(_topo(2), ModelConfig(reserved_cpu_m=1000, topology_policy="best-effort",
                                            scope="pod"))
    pod = _pod("init", ContainerSpec("app", _g(1000, GiB)),
               inits=(ContainerSpec("init", _g(1000, 2 * GiB), init=True),))
    placed = model.admit(pod)
    assert isinstance(placed, PodPlacement)
    assert dict(placed.mem_entries) == {"app": (MemoryBlock("memory", GiB, (0,)),)}
    assert model.mem_free == {0: 3 * GiB, 1: 4 * GiB}
    assert model.mem.summary()[0][0] == 1
    model.release("default", "init")
    assert model.mem_free == {0: 4 * GiB, 1: 4 * GiB}
    assert model.mem.summary()[0][:2] == (0, (0,))


def test_a_restart_pins_a_pod_level_pods_memory_again_and_the_next_cannot_start() -> None:
    """``AllocatePod`` does not look in the state: a restart reserves the pod's memory once
    more (its hint regenerated from its one container's blocks, the whole pool), and the
    next restart finds the machine state is not what the assignments add up to. (A
    fractional CPU budget, so that no CPU block moves and fails the CPU manager's start
    first.)"""
    model = NodeModel(_topo(2), ModelConfig(reserved_cpu_m=1000, topology_policy="best-effort",
                                            scope="pod"))
    pod = _pod("pooled", ContainerSpec("app"), budget=_g(1500, 2 * GiB))
    placed = model.admit(pod)
    assert isinstance(placed, PodPlacement) and not placed.block
    assert placed.block_memory == (MemoryBlock("memory", 2 * GiB, (0,)),)
    assert restart(model).error is None
    assert model.mem_free == {0: 0, 1: 4 * GiB}
    assert restart(model).error == ("memory manager start: [memorymanager] the expected "
                                    "machine state is different from the real one")


def test_a_restart_kills_a_pod_level_pod_whose_hint_is_the_whole_machine() -> None:
    """Blocks that no longer match the pod's request regenerate no hint; best-effort then
    merges the whole machine, which breaks the single-node group of the pod's own memory
    (``isAffinityViolatingNUMAAllocations``): ``AllocatePod`` fails and the pod is killed."""
    model = NodeModel(_topo(2), ModelConfig(reserved_cpu_m=1000, topology_policy="best-effort",
                                            scope="pod"))
    pod = _pod("pooled", ContainerSpec("app", _g(500, GiB)), ContainerSpec("b", _g(1000, GiB)),
               budget=_g(1500, 2 * GiB))
    assert isinstance(model.admit(pod), PodPlacement)
    again = restart(model)
    assert again.error is None and [r.admitted for r in again.readmitted] == [False]
    assert model.mem_free == {0: 4 * GiB, 1: 4 * GiB}


# ``validateState`` walks pods and each pod's containers as Go maps (memory_start.py): which
# block a node under blocks of different NUMA sets meets last decides its group, so the
# model works out which outcomes some order gives.

def _state(*steps: tuple[MemoryBlock, ...]) -> MachineState:
    """The machine state the allocation left: the steps applied in the order given."""
    state = MachineState.fresh({n: {"memory": 4 * GiB} for n in range(3)})
    for step in steps:
        for b in step:
            state.update(frozenset(b.numa_nodes), b.memory_type, b.size)
    return state


WIDE = (MemoryBlock("memory", 6 * GiB, (0, 1)),)
NARROW = (MemoryBlock("memory", GiB, (0,)),)
FRESH = MachineState.fresh({n: {"memory": 4 * GiB} for n in range(3)})


def test_one_group_per_node_always_starts() -> None:
    other = (MemoryBlock("memory", GiB, (2,)),)
    assert start_outcomes(_state(WIDE, other), [[WIDE], [other]], FRESH) == \
        StartOutcomes(may_start=True, may_fail=False)


def test_a_node_under_two_groups_starts_or_not_as_the_walk_goes() -> None:
    # One pod's two containers, or two pods: either may come last.
    assert start_outcomes(_state(WIDE, NARROW), [[WIDE, NARROW]], FRESH) == \
        StartOutcomes(may_start=True, may_fail=True)
    assert start_outcomes(_state(WIDE, NARROW), [[WIDE], [NARROW]], FRESH) == \
        StartOutcomes(may_start=True, may_fail=True)


def test_a_group_no_order_restores_never_starts() -> None:
    # One container's blocks are a slice: node 0 always ends in the group {0, 1}, while
    # the restored state says {0}.
    one_step = NARROW + WIDE
    actual = _state(WIDE, NARROW)
    assert start_outcomes(actual, [[one_step]], FRESH) == \
        StartOutcomes(may_start=False, may_fail=True)


def test_the_walk_keeps_a_pods_containers_together() -> None:
    # Node 1 must end in B's group {1, 2}, after A's first container; node 2 in A's second
    # container's {2}, after B: only A1, B, A2 gives both, which splits pod A.
    a1, a2 = (MemoryBlock("memory", GiB, (0, 1)),), (MemoryBlock("memory", GiB, (2,)),)
    b = (MemoryBlock("memory", GiB, (1, 2)),)
    actual = _state(a1, b, a2)
    assert start_outcomes(actual, [[a1, a2], [b]], FRESH) == \
        StartOutcomes(may_start=False, may_fail=True)
    assert start_outcomes(actual, [[a1], [a2], [b]], FRESH).may_start
