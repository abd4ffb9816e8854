"""Machines whose sockets or cores are of unequal size (CPUs offline): the kubelet counts a
socket free when its free CPUs number ``NumCPUs / NumSockets`` and a core when they number
``NumCPUs / NumCores`` (``isSocketFree``, ``isCoreFree``), and takes such a unit with all
its CPUs, busy ones included (docs/design.md#allocator).

Source of every expected value: the scenario run through the reference (the kubelet's own
code, bench/reference.py) of v1.35.4, v1.36.3 and v1.37.2, which agree; the machines are
the smallest that show each rule.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from exporter.sources.topology import read_sysfs_topology
from reconciler.allocator import (
    CPUTopology,
    ModelConfig,
    ModelError,
    NodeModel,
    from_snapshot,
    take_by_topology,
)
from reconciler.allocator.placement import PodPlacement, Rejection
from reconciler.allocator.restart import restart
from reconciler.allocator.take import policy_taker
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo

GiB = 2**30


def _machine(rows: list[tuple[int, int, int, int]]) -> CPUTopology:
    return CPUTopology(cpus=tuple(CPUInfo(*r) for r in rows), memory=((0, 8 * GiB),))


# One NUMA node over two sockets, socket 0 of CPUs 0-3 and socket 1 of CPUs 4-5 (one
# thread per core): CPUsPerSocket is 6 / 2 = 3.
UNEQUAL_SOCKETS = _machine([(c, c, 0 if c < 4 else 1, 0) for c in range(6)])
# One socket, cores {0,4} {1,5} {2} {3,7}: CPU 6, the sibling of 2, is offline, so
# CPUsPerCore is 7 / 4 = 1.
OFFLINE_SIBLING = _machine([(0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 0, 0), (3, 3, 0, 0),
                            (4, 0, 0, 0), (5, 1, 0, 0), (7, 3, 0, 0)])


def _g(cpus: int) -> Resources:
    return Resources(cpus * 1000, cpus * 1000, 64 * 2**20, 64 * 2**20)


def _pod(i: int, *cpus: int) -> PodSpec:
    apps = tuple(ContainerSpec(f"app{j}", _g(n)) for j, n in enumerate(cpus))
    return PodSpec("ns", f"p{i}", f"uid-{i}", apps)


def _model(topo: CPUTopology, reserved: set[int], *options: str,
           version: str = "1.37") -> NodeModel:
    return NodeModel(topo, ModelConfig(cpu_policy="static", topology_policy="none",
                                       options=frozenset(options),
                                       reserved_cpus=frozenset(reserved),
                                       kubelet_version=version))


def test_per_unit_sizes_are_the_kubelets_integer_averages() -> None:
    assert UNEQUAL_SOCKETS.cpus_per_socket == 3
    assert OFFLINE_SIBLING.threads_per_core == 1
    assert OFFLINE_SIBLING.cpus_per_socket == 7


def test_a_larger_socket_with_its_average_free_is_taken_whole_busy_cpu_included() -> None:
    """Socket 0 has 3 of its 4 CPUs free, the machine's average: the kubelet claims all 4
    for a 4-CPU request, CPU 0 (in use) included. Counting a socket free only when all
    its CPUs are gives 1,2,4,5."""
    assert take_by_topology(UNEQUAL_SOCKETS, {1, 2, 3, 4, 5}, 4) == {0, 1, 2, 3}


def test_a_smaller_socket_is_never_free() -> None:
    """Socket 1 (2 CPUs, both free) is not the average 3, so it is not taken whole: the
    cores come socket by socket, the one with fewer free CPUs first, ties to the lower id.
    Counting it free takes 4,5."""
    assert take_by_topology(UNEQUAL_SOCKETS, {2, 3, 4, 5}, 2) == {2, 3}


def test_a_core_with_one_free_thread_is_free_when_cpus_per_core_is_one() -> None:
    """CPUsPerCore is 1: core {0,4} with CPU 0 in use counts free and is taken whole; the
    naive count takes the one-thread core {2} and then CPU 4."""
    assert take_by_topology(OFFLINE_SIBLING, {1, 2, 3, 4, 5, 7}, 2) == {0, 4}


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_the_reserved_cpu_in_a_core_taken_whole_is_handed_out(version: str) -> None:
    model = _model(OFFLINE_SIBLING, {0}, version=version)
    placed = model.admit(_pod(1, 2))
    assert isinstance(placed, PodPlacement)
    assert placed.containers[0].exclusive == {0, 4}
    assert model.default_set == {1, 2, 3, 5, 7}


def test_a_cpu_held_twice_is_back_in_the_default_set_when_one_holder_goes() -> None:
    """p1 gets CPU 0; p2 then claims core {0,4} whole (CPU 4 its only free thread). When p1
    goes the kubelet puts 0 back in its default set though p2 holds it, and a restart then
    refuses the overlap."""
    model = _model(OFFLINE_SIBLING, {2})
    first = model.admit(_pod(1, 1))
    second = model.admit(_pod(2, 2))
    assert isinstance(first, PodPlacement) and isinstance(second, PodPlacement)
    assert first.exclusive == {0} and second.exclusive == {0, 4}
    assert model.default_set == {1, 2, 3, 5, 7}
    model.release("ns", "p1")
    assert model.default_set == {0, 1, 2, 3, 5, 7}
    assert restart(model, "1.37").error == (
        'cpu manager start: pod: uid-2, container: app0 cpuset: "0,4" overlaps with default '
        'cpuset "0-3,5,7"')


def test_a_refused_pod_gives_back_the_cpus_it_claimed_while_in_use() -> None:
    """p2's first container claims core {0,4} (0 is p1's), its second cannot be placed: the
    sweep after the refusal returns both to the default set, 0 while p1 still holds it."""
    model = _model(OFFLINE_SIBLING, {2})
    assert isinstance(model.admit(_pod(1, 1)), PodPlacement)
    assert isinstance(model.admit(_pod(2, 2, 9)), Rejection)
    assert model.default_set == {0, 1, 2, 3, 4, 5, 7}
    assert restart(model, "1.37").error == (
        'cpu manager start: pod: uid-1, container: app0 cpuset: "0" overlaps with default '
        'cpuset "0-5,7"')


def test_a_reserved_cpu_given_back_under_strict_reservation_stays_in_the_default_set() -> None:
    model = _model(OFFLINE_SIBLING, {0}, "strict-cpu-reservation")
    assert isinstance(model.admit(_pod(1, 2)), PodPlacement)
    model.release("ns", "p1")
    assert model.default_set == {0, 1, 2, 3, 4, 5, 7}
    assert restart(model, "1.37").error == (
        'cpu manager start: some of strictly reserved cpus: "0" are present in '
        'defaultCpuSet: "0-5,7"')


def test_unequal_numa_nodes_are_free_by_their_own_size() -> None:
    """``isNUMANodeFree`` compares with the node's own CPUs: the smaller node (2 CPUs) is
    taken whole for a request of 3, the larger one (4 CPUs, one busy) is not."""
    topo = _machine([(c, c, 0 if c < 4 else 1, 0 if c < 4 else 1) for c in range(6)])
    topo = CPUTopology(topo.cpus, memory=((0, 8 * GiB), (1, 8 * GiB)))
    assert take_by_topology(topo, {1, 2, 3, 4, 5}, 3) == {1, 4, 5}


def test_the_distributed_take_follows_the_same_counts() -> None:
    """Each NUMA node's share is packed with the same rules: a request that fits one node
    is the packed take."""
    take = policy_taker(OFFLINE_SIBLING, frozenset({"distribute-cpus-across-numa"}))
    assert take(OFFLINE_SIBLING, frozenset({1, 2, 3, 4, 5, 7}), 2) == {0, 4}


# Two NUMA nodes: {0,4} {1} (CPU 5 offline) and {2,6} {3,7}: CPUsPerCore 7 / 4 = 1.
TWO_NODES = CPUTopology(cpus=tuple(CPUInfo(c, core, 0, numa) for c, core, numa in (
    (0, 0, 0), (1, 1, 0), (4, 0, 0), (2, 2, 1), (6, 2, 1), (3, 3, 1), (7, 3, 1))),
    memory=((0, 8 * GiB), (1, 8 * GiB)))
# One NUMA node, cores {0,3} {2,5} {4}: CPUsPerCore 5 / 3 = 1.
FIVE = _machine([(0, 0, 0, 0), (2, 2, 0, 0), (3, 0, 0, 0), (4, 4, 0, 0), (5, 2, 0, 0)])


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_a_hinted_take_can_give_more_cpus_than_were_free(version: str) -> None:
    """allocateCPUs counts nothing before its takes: with 3 CPUs free (3, 6, 7) the hinted
    take of node 1 claims core {2,6} whole (2 is p3's) and a 4-CPU pod is admitted."""
    model = NodeModel(TWO_NODES, ModelConfig(
        cpu_policy="static", memory_policy="None", topology_policy="best-effort",
        reserved_cpus=frozenset({0}), kubelet_version=version))
    for i, want in enumerate(({1}, {4}, {2})):
        placed = model.admit(_pod(i, 1))
        assert isinstance(placed, PodPlacement) and placed.exclusive == want
    assert model.free == {3, 6, 7}
    placed = model.admit(_pod(3, 4))
    assert isinstance(placed, PodPlacement) and placed.exclusive == {2, 3, 6, 7}
    assert model.default_set == {0}


def _pod_level(version: str, *options: str) -> NodeModel:
    return NodeModel(FIVE, ModelConfig(
        cpu_policy="static", memory_policy="None", topology_policy="best-effort",
        scope="pod", pod_level=True, reserved_cpus=frozenset({0}), kubelet_version=version,
        options=frozenset(options)))


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_a_pod_blocks_slice_claimed_outside_the_block_stays_in_the_default_set(
        version: str) -> None:
    """With prefer-align-cpus-by-uncorecache the block is the cache's free cores, 2-5. The
    slice of app0 takes core {0,3} whole, 0 reserved and outside the block: the kubelet
    carves slices inside the block and leaves the default set alone, so 0 stays in it."""
    model = _pod_level(version, "prefer-align-cpus-by-uncorecache")
    pod = PodSpec("ns", "p", "uid-p", (ContainerSpec("app0", _g(2)),), (), _g(4))
    placed = model.admit(pod)
    assert isinstance(placed, PodPlacement)
    assert placed.block == {2, 3, 4, 5} and placed.containers[0].exclusive == {0, 3}
    assert model.default_set == {0}
    model.release("ns", "p")
    assert model.default_set == {0, 2, 3, 4, 5} and model.free == {2, 3, 4, 5}


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_a_later_slice_takes_from_the_block_not_from_an_init_slice_outside_it(
        version: str) -> None:
    """init0's slice is core {2,5} (5 outside the block); app0's pool is the block again,
    0, 2, 3, 4, where core {2,5} has one CPU and counts whole. Taking from the block and
    init0's slice (5 too) gives 0,4."""
    model = _pod_level(version)
    pod = PodSpec("ns", "p", "uid-p", (ContainerSpec("app0", _g(2)), ContainerSpec("app1")),
                  (ContainerSpec("init0", _g(2), init=True),), _g(4))
    placed = model.admit(pod)
    assert isinstance(placed, PodPlacement)
    assert dict(placed.init_slices) == {"init0": {2, 5}}
    assert {c.name: c.cpus for c in placed.containers} == {"app0": {2, 5},
                                                           "app1": {0, 3, 4}}


def test_a_restart_names_either_entry_that_overlaps_the_default_set() -> None:
    """p1's init container i0 and its app a0 (reusing i0's CPUs) hold 0,4; p3 claims core
    {0,4} whole, and when p3 goes 0 and 4 are back in the default set. validateState walks
    Go maps: the reference named i0 in 4 of 6 runs (1.35.4, 1.37.2) and a0 in the others."""
    model = _model(OFFLINE_SIBLING, {7}, version="1.37")
    p0 = _pod(0, 2, 1)
    p1 = PodSpec("ns", "p1", "uid-1", (ContainerSpec("a0", _g(2)), ContainerSpec("a1", _g(2))),
                 (ContainerSpec("i0", _g(2), init=True),))
    p3 = _pod(3, 1, 2)
    for pod in (p0, p1):
        assert isinstance(model.admit(pod), PodPlacement)
    model.release("ns", "p0")
    assert isinstance(model.admit(p3), PodPlacement)
    model.release("ns", "p3")
    result = restart(model, "1.37")
    assert {result.error, result.may_fail} == {
        f'cpu manager start: pod: uid-1, container: {name} cpuset: "0,4" overlaps with '
        'default cpuset "0,2-4,7"' for name in ("i0", "a0")}


# Real machines from hwloc's test suite (tests/data/hwloc): on each, the placements below
# are the reference's (1.35.4 and 1.37.2, reserved CPUs as kubeReserved, topology policy
# none, one pod after the other).
ARCHIVE = Path(__file__).parents[1] / "data" / "hwloc" / "hwloc-trees.tar.xz"
TREES = {
    # 4 sockets of 4, 2, 2 and 4 CPUs (CPUs 2, 5, 13, 14 offline), cores of one and two
    # threads: CPUsPerSocket 3, CPUsPerCore 12 / 7 = 1. The two one-thread cores are the
    # kubelet's free cores, so it reserves them (counting whole cores it would take 1,9).
    "16em64t-4s2c2t-offlines": (2, [(2, {1, 9}), (4, {0, 4, 8, 12})], {6, 10}),
    # A hybrid CPU: 6 P-cores of two threads, 8 E-cores of one: CPUsPerCore 20 / 14 = 1. The
    # last pod takes P-core {2,3} whole, CPU 2 the previous pod's.
    "20em64t-hybrid-1p6c2t+2ca4co1t": (1, [(4, {13, 14, 15, 16}), (5, {0, 1, 17, 18, 19}),
                                           (1, {2}), (2, {2, 3})], {12}),
}
# CPU 0 and its node offline: the CPUs left are on one socket, but cAdvisor counts the
# packages of /proc/cpuinfo, so NumSockets is 2 beside one NUMA node.
OFFLINE_NODE0 = "offline-cpu0-node0"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hwloc")
    with tarfile.open(ARCHIVE) as tar:
        members = [m for m in tar.getmembers()
                   if len(Path(m.name).parts) > 1
                   and Path(m.name).parts[1] in {*TREES, OFFLINE_NODE0}]
        tar.extractall(root, members=members, filter="data")
    return root / "hwloc-trees"


@pytest.mark.parametrize("name", sorted(TREES))
def test_real_machines_with_cpus_offline(trees: Path, name: str) -> None:
    reserved_cpus, pods, reserved = TREES[name]
    topo = from_snapshot(read_sysfs_topology(trees / name / "sys", goarch="amd64"))
    model = NodeModel(topo, ModelConfig(cpu_policy="static", topology_policy="none",
                                        reserved_cpu_m=reserved_cpus * 1000))
    assert model.reserved == reserved
    for i, (cpus, want) in enumerate(pods):
        placed = model.admit(_pod(i, cpus))
        assert isinstance(placed, PodPlacement) and placed.exclusive == want, i


def test_align_by_socket_is_checked_against_the_kubelets_counts(trees: Path) -> None:
    """policy_options.go (v1.35.4-v1.37.2) ValidateStaticPolicyOptions refuses align-by-socket
    when ``topology.NumSockets > topology.NumNUMANodes``: its counts, 2 and 1 here, though
    every CPU left is on one socket of one node."""
    topo = from_snapshot(read_sysfs_topology(trees / OFFLINE_NODE0 / "sys", goarch="amd64"))
    assert len(topo.socket_cpus) == 1 and topo.kubelet_counts.sockets == 2
    config = ModelConfig(cpu_policy="static", topology_policy="none", reserved_cpu_m=1000,
                         options=frozenset({"align-by-socket"}))
    with pytest.raises(ModelError, match="align-by-socket is not compatible"):
        NodeModel(topo, config)
