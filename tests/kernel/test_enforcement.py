"""Expected cpusets from the ledger, their differences with the enforced ones, and the
persistence window that turns a lasting difference into ``cpuset_drift``."""

from __future__ import annotations

import pytest

from kernel.helpers import flat_topology, small_ledger
from reconciler.enforcement import (
    DRIFT_KINDS,
    Comparison,
    DriftState,
    EnforcedCpusets,
    EnforcementOptions,
    compare,
    drift_counts,
    expected_cpusets,
    observe,
    track,
)
from reconciler.kube import KubeletConfig
from reconciler.ledger import Anomaly
from reconciler.reconcile import reconcile
from reconciler.snapshot import ContainerAlloc, NodeSnapshot, PodAlloc

S = frozenset


def test_expectations_by_hand() -> None:
    exp = expected_cpusets(small_ledger(), EnforcementOptions())
    assert dict(exp.containers) == {
        ("default", "app", "main"): ("pod_exclusive", S({2, 3})),
        ("default", "app", "proxy"): ("pod_shared", S({4})),
        ("default", "db", "db"): ("node_exclusive", S({5})),
        # The default set keeps the reserved CPU without strict-cpu-reservation.
        ("default", "db", "log"): ("node_shared", S({0, 1})),
        ("default", "idle", "w"): ("pod_exclusive", S({6})),
    }
    assert dict(exp.pods) == {("default", "app"): S({2, 3, 4}),
                              ("default", "idle"): S({6, 7})}


def test_strict_cpu_reservation_leaves_reserved_out() -> None:
    exp = expected_cpusets(small_ledger(), EnforcementOptions(strict_cpu_reservation=True))
    assert exp.containers[("default", "db", "log")] == ("node_shared", S({1}))
    assert exp.containers[("default", "app", "main")] == ("pod_exclusive", S({2, 3}))


def test_no_static_policy_means_every_cpu() -> None:
    exp = expected_cpusets(small_ledger(), EnforcementOptions(static_policy=False))
    assert exp.containers[("default", "db", "log")] == ("node_shared", S(range(8)))


@pytest.mark.parametrize(("config", "static", "strict"), [
    (None, True, False),
    (KubeletConfig(cpu_manager_policy="static"), True, False),
    (KubeletConfig(cpu_manager_policy="Static",
                   cpu_manager_policy_options=(("strict-cpu-reservation", "true"),)),
     True, True),
    (KubeletConfig(cpu_manager_policy="static",
                   cpu_manager_policy_options=(("strict-cpu-reservation", "false"),)),
     True, False),
    (KubeletConfig(), False, False),
])
def test_options_from_kubelet_config(config: KubeletConfig | None, static: bool,
                                     strict: bool) -> None:
    opts = EnforcementOptions.from_kubelet_config(config, 4.0)
    assert (opts.static_policy, opts.strict_cpu_reservation, opts.reconcile_period) == \
        (static, strict, 4.0)


def enforced_as_expected() -> dict[tuple[str, str, str], frozenset[int]]:
    return {("default", "app", "main"): S({2, 3}), ("default", "app", "proxy"): S({4}),
            ("default", "db", "db"): S({5}), ("default", "db", "log"): S({0, 1}),
            ("default", "idle", "w"): S({6})}


def test_compare_agreeing_and_differing() -> None:
    exp = expected_cpusets(small_ledger(), EnforcementOptions())
    same = compare(exp, EnforcedCpusets(enforced_as_expected(),
                                        {("default", "app"): S({2, 3, 4})}))
    assert same.differences == ()
    assert len(same.observed) == 6 and len(same.subjects) == 7
    bad = enforced_as_expected()
    bad[("default", "app", "proxy")] = S({1, 4})  # also on the node shared pool
    del bad[("default", "db", "db")]  # not read this time
    bad[("other", "pod", "c")] = S({0})  # not in the ledger: ignored
    got = compare(exp, EnforcedCpusets(bad, {("default", "app"): S(range(8)),
                                              ("default", "db"): S({5})}))
    assert [(d.key, d.kind, d.expected, d.enforced) for d in got.differences] == [
        (("default", "app", "proxy"), "pod_shared", S({4}), S({1, 4})),
        (("default", "app", None), "pod", S({2, 3, 4}), S(range(8))),
    ]
    assert ("default", "db", "db") not in got.observed
    assert ("default", "db", None) not in got.subjects  # no block: no expectation


def one_drift(expected: frozenset[int] = S({4}), enforced: frozenset[int] = S({1, 4}),
              ) -> Comparison:
    exp = expected_cpusets(small_ledger(), EnforcementOptions())
    actual = enforced_as_expected()
    actual[("default", "app", "proxy")] = enforced
    comparison = compare(exp, EnforcedCpusets(actual))
    if expected != S({4}):  # as if the ledger had moved the pod's shared pool
        d = comparison.differences[0]
        comparison = Comparison((d._replace(expected=expected),), comparison.observed,
                                comparison.subjects)
    return comparison


def test_raised_only_after_the_period_and_cleared_when_fixed() -> None:
    state = DriftState()
    state, now = track(state, one_drift(), 100.0, 10.0)
    assert now == ()  # just admitted, perhaps: the kubelet may lag one period
    state, now = track(state, one_drift(), 105.0, 10.0)
    assert now == ()
    state, now = track(state, one_drift(), 110.0, 10.0)
    assert [d.key for d in now] == [("default", "app", "proxy")]
    assert now[0].since == 100.0
    anomaly = now[0].anomaly()
    assert isinstance(anomaly, Anomaly)
    assert anomaly[:4] == ("cpuset_drift", "default", "app", "proxy")
    assert "runs on CPUs 1,4" in anomaly.detail and "implies 4" in anomaly.detail
    assert "not its own: 1" in anomaly.detail
    assert drift_counts(now) == {**dict.fromkeys(DRIFT_KINDS, 0), "pod_shared": 1}
    # The enforced set changing while still wrong keeps the clock.
    state, now = track(state, one_drift(enforced=S({1})), 111.0, 10.0)
    assert len(now) == 1 and "missing: 4" in now[0].anomaly().detail
    # Fixed: gone at once, and a new difference starts a new clock.
    fixed = compare(expected_cpusets(small_ledger(), EnforcementOptions()),
                    EnforcedCpusets(enforced_as_expected()))
    state, now = track(state, fixed, 112.0, 10.0)
    assert now == () and not state.pending
    state, now = track(state, one_drift(), 113.0, 10.0)
    assert now == ()


def test_expectation_change_restarts_the_clock() -> None:
    state, _ = track(DriftState(), one_drift(), 0.0, 10.0)
    state, now = track(state, one_drift(expected=S({3, 4})), 9.0, 10.0)
    assert now == ()
    state, now = track(state, one_drift(expected=S({3, 4})), 12.0, 10.0)
    assert now == ()  # only 3 s under the new expectation
    state, now = track(state, one_drift(expected=S({3, 4})), 19.0, 10.0)
    assert len(now) == 1 and now[0].since == 9.0


def test_an_unobserved_subject_keeps_its_clock_but_is_not_reported() -> None:
    state, _ = track(DriftState(), one_drift(), 0.0, 10.0)
    drifting = one_drift()
    unread = Comparison((), drifting.observed - {("default", "app", "proxy")},
                        drifting.subjects)
    state, now = track(state, unread, 20.0, 10.0)
    assert now == () and ("default", "app", "proxy") in state.pending
    state, now = track(state, one_drift(), 21.0, 10.0)
    assert len(now) == 1  # seen again, 21 s after first: no new wait


def test_a_subject_that_left_the_ledger_is_forgotten() -> None:
    state, _ = track(DriftState(), one_drift(), 0.0, 10.0)
    gone = Comparison((), frozenset(), frozenset())
    state, now = track(state, gone, 20.0, 10.0)
    assert now == () and not state.pending


def test_two_observations_needed_even_with_a_zero_period() -> None:
    state, now = track(DriftState(), one_drift(), 5.0, 0.0)
    assert now == ()
    state, now = track(state, one_drift(), 5.0, 0.0)  # the same instant is not a second look
    assert now == ()
    _, now = track(state, one_drift(), 5.5, 0.0)
    assert len(now) == 1


def test_pod_level_drift_names_the_pod() -> None:
    exp = expected_cpusets(small_ledger(), EnforcementOptions())
    cmp = compare(exp, EnforcedCpusets(enforced_as_expected(),
                                       {("default", "idle"): S({6})}))
    state, _ = track(DriftState(), cmp, 0.0, 1.0)
    _, now = track(state, cmp, 1.0, 1.0)
    anomaly = now[0].anomaly()
    assert anomaly[:4] == ("cpuset_drift", "default", "idle", None)
    assert anomaly.detail.startswith("pod cgroup runs on CPUs 6 but the ledger implies 6-7")
    assert drift_counts(now)["pod"] == 1


def test_observe_is_expectations_compare_and_track() -> None:
    ledger = small_ledger()
    actual = enforced_as_expected()
    actual[("default", "db", "db")] = S({5, 6})
    opts = EnforcementOptions(reconcile_period=10.0)
    state, now = observe(DriftState(), ledger, EnforcedCpusets(actual), opts, 0.0)
    assert now == ()
    state, now = observe(state, ledger, EnforcedCpusets(actual), opts, 10.0)
    assert [(d.key, d.kind) for d in now] == [(("default", "db", "db"), "node_exclusive")]
    state, now = observe(state, ledger, EnforcedCpusets(enforced_as_expected()), opts, 20.0)
    assert now == () and not state.pending


def test_empty_expectations_are_not_compared() -> None:
    # app's block is all exclusive: its sidecar has no CPU (empty_pod_shared_pool).
    ledger = reconcile(NodeSnapshot(
        pods=(PodAlloc("default", "app", (ContainerAlloc("main", (0, 1)),
                                          ContainerAlloc("proxy")), (0, 1)),
              PodAlloc("default", "other", (ContainerAlloc("c"),))),
        topology=flat_topology(2)))
    assert "empty_pod_shared_pool" in {a.kind for a in ledger.anomalies}
    exp = expected_cpusets(ledger, EnforcementOptions())
    # Nothing is left for node-shared containers either.
    assert set(exp.containers) == {("default", "app", "main")}
    cmp = compare(exp, EnforcedCpusets({("default", "app", "proxy"): S({0, 1}),
                                        ("default", "other", "c"): S({0, 1})}))
    assert cmp.differences == () and cmp.observed == frozenset()


@pytest.mark.parametrize(("enforced", "drifts"), [
    (S({1}), False),      # CPU 0 held by an init container the API never lists: agrees
    (S({0, 1}), False),   # exactly the pool
    (S({0, 1, 5}), True),  # also on db's exclusive CPU
    (S(), True),          # on nothing at all
])
def test_a_shared_container_drifts_only_off_its_pool(enforced: frozenset[int],
                                                     drifts: bool) -> None:
    exp = expected_cpusets(small_ledger(), EnforcementOptions())
    actual = enforced_as_expected()
    actual[("default", "db", "log")] = enforced
    got = compare(exp, EnforcedCpusets(actual))
    assert [d.key for d in got.differences] == ([("default", "db", "log")] if drifts else [])
