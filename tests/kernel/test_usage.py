"""Busy time per pool and per pod: exact hand-computed attributions and the conservation
property."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.helpers import flat_topology, small_ledger
from reconciler.ledger import CPU_POOLS
from reconciler.reconcile import reconcile
from reconciler.snapshot import ContainerAlloc, NodeSnapshot, PodAlloc
from reconciler.usage import POD_POOLS, CPUHolder, UsageCounters, attribute, cpu_holders

BEFORE = {0: 100, 1: 200, 2: 300, 3: 400, 4: 500, 5: 600, 6: 700, 7: 800}
AFTER = {
    0: 110,  # reserved +10
    1: 230,  # node_shared +30
    2: 350,  # app pod_exclusive +50
    3: 470,  # app pod_exclusive +70
    4: 590,  # app pod_shared +90
    5: 600,  # db node_exclusive, idle: +0
    6: 690,  # went backwards (a reset): 0
    # 7 went offline: 0
    8: 50,  # came online (unknown to the ledger): nothing to compare with
}


def test_holders_by_hand() -> None:
    holders = cpu_holders(small_ledger())
    assert holders == {
        0: CPUHolder("reserved"), 1: CPUHolder("node_shared"),
        2: CPUHolder("pod_exclusive", "default", "app"),
        3: CPUHolder("pod_exclusive", "default", "app"),
        4: CPUHolder("pod_shared", "default", "app"),
        5: CPUHolder("node_exclusive", "default", "db"),
        6: CPUHolder("pod_exclusive", "default", "idle"),
        7: CPUHolder("pod_idle", "default", "idle"),
    }


def test_attribution_by_hand() -> None:
    got = attribute(BEFORE, AFTER, cpu_holders(small_ledger()))
    assert dict(got.pools) == {"reserved": 10, "node_shared": 30, "node_exclusive": 0,
                               "pod_exclusive": 120, "pod_shared": 90, "pod_idle": 0}
    assert dict(got.pods) == {("default", "app", "pod_exclusive"): 120,
                              ("default", "app", "pod_shared"): 90}


def test_pod_idle_and_unknown_cpus() -> None:
    holders = cpu_holders(small_ledger())
    got = attribute({7: 0, 9: 0}, {7: 25, 9: 40}, holders)
    assert got.pools["pod_idle"] == 25 and got.pools["node_shared"] == 40
    assert dict(got.pods) == {("default", "idle", "pod_idle"): 25}


def test_counters_accumulate_in_seconds_and_drop_deleted_pods() -> None:
    holders = cpu_holders(small_ledger())
    counters = UsageCounters(user_hz=100)
    counters = counters.add(attribute(BEFORE, AFTER, holders),
                            [("default", "app"), ("default", "db")])
    assert counters.pool_seconds()["pod_exclusive"] == 1.2
    assert counters.pod_seconds() == {("default", "app", "pod_exclusive"): 1.2,
                                      ("default", "app", "pod_shared"): 0.9}
    again = counters.add(attribute(BEFORE, AFTER, holders), [("default", "db")])
    assert again.pool_seconds()["pod_exclusive"] == 2.4  # pools keep counting
    assert again.pod_seconds() == {}  # app was deleted: its series go
    assert counters.pool_seconds()["pod_exclusive"] == 1.2  # values are immutable


def test_overlapping_blocks_go_to_the_first_owner() -> None:
    ledger = reconcile(NodeSnapshot(
        pods=(PodAlloc("a", "first", (ContainerAlloc("x"),), (0, 1)),
              PodAlloc("b", "second", (ContainerAlloc("y", (1,)),), (1, 2))),
        topology=flat_topology(4)))
    holders = cpu_holders(ledger)
    assert holders[1] == CPUHolder("pod_shared", "a", "first")
    assert holders[2] == CPUHolder("pod_idle", "b", "second")


@st.composite
def ledgers_and_samples(draw: st.DrawFn) -> tuple[object, dict[int, int], dict[int, int]]:
    ncpu = 8
    cpus = st.lists(st.integers(0, ncpu + 1), max_size=3)  # may name CPUs not online
    pods = []
    for i in range(draw(st.integers(0, 4))):
        containers = tuple(ContainerAlloc(f"c{j}", tuple(draw(cpus)))
                           for j in range(draw(st.integers(1, 3))))
        pods.append(PodAlloc("ns", f"p{i}", containers, tuple(draw(cpus))))
    ledger = reconcile(NodeSnapshot(pods=tuple(pods), topology=flat_topology(ncpu)))
    sample = st.dictionaries(st.integers(0, ncpu + 3), st.integers(0, 10**12), max_size=12)
    return ledger, draw(sample), draw(sample)


@settings(max_examples=200, deadline=None)
@given(ledgers_and_samples())
def test_pools_add_up_to_the_busy_delta_of_cpus_in_both_samples(
        case: tuple[object, dict[int, int], dict[int, int]]) -> None:
    ledger, before, after = case
    got = attribute(before, after, cpu_holders(ledger))  # type: ignore[arg-type]
    total = sum(max(0, after[c] - before[c]) for c in after if c in before)
    assert sum(got.pools.values()) == total
    assert set(got.pools) == set(CPU_POOLS)
    assert all(v >= 0 for v in got.pools.values())
    for pool in POD_POOLS:  # every CPU of a pod's pool has its pod
        assert sum(v for k, v in got.pods.items() if k[2] == pool) == got.pools[pool]
    for pool in ("reserved", "node_shared"):
        assert not any(k[2] == pool for k in got.pods)


def test_busy_fractions_by_hand() -> None:
    from reconciler.usage import busy_fractions

    before_busy, before_idle = {0: 100, 1: 50, 2: 10, 3: 5}, {0: 100, 1: 50, 2: 10, 3: 5}
    after_busy = {0: 130, 1: 50, 2: 10, 3: 4, 4: 9}  # CPU 3 reset, CPU 4 new
    after_idle = {0: 110, 1: 150, 2: 10, 3: 9, 4: 1}
    assert busy_fractions(before_busy, before_idle, after_busy, after_idle) == {
        0: 0.75,  # 30 busy of 40
        1: 0.0,   # idle only
    }  # CPU 2 did not move, 3 went backwards, 4 has no earlier sample: no share
