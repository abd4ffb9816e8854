"""Round trip: the model-driven simulator places pods and writes the cgroup tree a kubelet
would have made; the cgroup source reads it back and the enforcement check finds exactly
the ledger's expectations, and exactly one drift (after the window) when one is injected."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.errors import UserError
from exporter.sim.cgroupfs import (
    ProcStatWriter,
    SimKernel,
    container_id,
    decorate_pod_list,
    model_cpu_holders,
    model_tree,
    parse_drift,
    parse_pool_loads,
    per_cpu_load,
    write_cgroup_tree,
)
from exporter.sim.model_driven import ModelDrivenNode
from exporter.sources.cgroup import CgroupSource, pod_refs_from_pod_list
from exporter.sources.procstat import read_proc_stat
from kernel.helpers import place
from reconciler.allocator.report import report_allocatable, report_pods
from reconciler.enforcement import (
    DriftState,
    EnforcementOptions,
    compare,
    expected_cpusets,
    track,
)
from reconciler.kube import kubelet_config_from_json, pod_list_from_json
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import NodeSnapshot
from reconciler.usage import UsageCounters, attribute, cpu_holders


def ledger_of(node: ModelDrivenNode) -> tuple[Ledger, EnforcementOptions]:
    state = node.state()
    config = kubelet_config_from_json(state.configz)
    ledger = reconcile(NodeSnapshot(
        pods=report_pods(node.model, node.reporting),
        allocatable=report_allocatable(node.model),
        topology=node.model.topo.to_snapshot(),
        pod_specs=pod_list_from_json(state.pod_list),
        kubelet_config=config))
    return ledger, EnforcementOptions.from_kubelet_config(config, 10.0)


def refs(node: ModelDrivenNode) -> object:
    return pod_refs_from_pod_list(decorate_pod_list(node.state().pod_list))


@pytest.mark.parametrize(("style", "scope", "seed", "options"), [
    ("1.37", "pod", 1, frozenset()),
    ("1.37", "pod", 2, frozenset({"strict-cpu-reservation"})),
    ("1.37", "container", 3, frozenset()),
    ("1.36", "pod", 4, frozenset()),
    ("1.35", "pod", 5, frozenset({"strict-cpu-reservation"})),
])
def test_tree_read_back_equals_the_ledgers_expectations(
        tmp_path: Path, style: str, scope: str, seed: int, options: frozenset[str]) -> None:
    node = place(style, scope, seed, options)
    # A node with pods in every role and a shared pool left (an empty one cannot be written
    # to a cgroup: the container would inherit its parent's CPUs).
    assert node.model.pods and node.model.default_set
    write_cgroup_tree(tmp_path, model_tree(node.model), node.model.topo.online)
    ledger, opts = ledger_of(node)
    reading = CgroupSource(str(tmp_path)).read(refs(node))  # type: ignore[arg-type]
    assert reading.off is None and reading.errors == ()
    expectations = expected_cpusets(ledger, opts)
    # CPUs an ordinary init container still holds are out of every shared set, and the
    # ledger (which never sees init containers) counts them as shared: exactly those differ.
    init_held = frozenset().union(*(p.init_held for p in node.model.pods.values()))
    assert {k: (v[1] - init_held if v[0] in ("node_shared", "pod_shared") else v[1])
            for k, v in expectations.containers.items()} == dict(reading.enforced.containers)
    cmp = compare(expectations, reading.enforced)
    assert cmp.differences == ()
    assert len(cmp.observed) == len(ledger.containers) + len(reading.enforced.pods)


def test_injected_drift_is_raised_after_the_window_and_cleared_when_fixed(
        tmp_path: Path) -> None:
    node = place("1.37", "pod", 1)
    ledger, opts = ledger_of(node)
    victim = next(c for c in ledger.containers if c.assignment == "pod_exclusive")
    key = (victim.namespace, victim.pod, victim.name)
    wrong = frozenset(node.model.default_set)
    source = CgroupSource(str(tmp_path))
    expectations = expected_cpusets(ledger, opts)

    def poll(state: DriftState, now: float) -> tuple[DriftState, list[tuple[str, ...]]]:
        reading = source.read(refs(node))  # type: ignore[arg-type]
        assert reading.errors == ()
        state, drifts = track(state, compare(expectations, reading.enforced), now,
                              opts.reconcile_period)
        return state, [d.anomaly()[:4] for d in drifts]

    write_cgroup_tree(tmp_path, model_tree(node.model, drift={key: wrong}),
                      node.model.topo.online)
    state, found = poll(DriftState(), 0.0)
    assert found == []
    state, found = poll(state, 6.0)
    assert found == []
    state, found = poll(state, 10.0)
    assert found == [("cpuset_drift", *key)]
    write_cgroup_tree(tmp_path, model_tree(node.model), node.model.topo.online)
    state, found = poll(state, 12.0)
    assert found == [] and not state.pending


def test_released_pods_leave_the_tree(tmp_path: Path) -> None:
    node = place("1.37", "pod", 1)
    write_cgroup_tree(tmp_path, model_tree(node.model), node.model.topo.online)
    gone = sorted(node.model.pods)[0]
    node.delete(*gone)
    write_cgroup_tree(tmp_path, model_tree(node.model), node.model.topo.online)
    reading = CgroupSource(str(tmp_path)).read(refs(node))  # type: ignore[arg-type]
    assert reading.errors == ()
    assert not any(k[:2] == gone for k in reading.enforced.containers)
    slices = list((tmp_path / "kubepods.slice").rglob("kubepods-*pod*.slice"))
    assert len(slices) == len(node.model.pods)


def test_proc_stat_writer_load_per_pool_comes_back(tmp_path: Path) -> None:
    node = place("1.37", "pod", 1)
    ledger, _ = ledger_of(node)
    holders = cpu_holders(ledger)
    load = {"reserved": 0.1, "node_shared": 0.5, "pod_exclusive": 0.9, "pod_shared": 0.3,
            "node_exclusive": 0.7, "pod_idle": 0.0}
    writer = ProcStatWriter(tmp_path / "stat", node.model.topo.online, user_hz=100)
    counters = UsageCounters(user_hz=100)
    before = read_proc_stat(tmp_path, user_hz=100)
    for _ in range(3):
        writer.advance(20.0, per_cpu_load(holders, load))
        after = read_proc_stat(tmp_path, user_hz=100)
        counters = counters.add(attribute(before.busy, after.busy, holders),
                                [(p.namespace, p.name) for p in ledger.pods])
        before = after
    pools = ledger.cpu_pools.to_json()
    for pool, seconds in counters.pool_seconds().items():
        # rate over 60 s per CPU of the pool; ticks are floored per field (2 per CPU-write)
        want = load[pool] * 60.0 * pools[pool]
        assert abs(seconds - want) <= 0.02 * 3 * pools[pool] + 1e-9, (pool, seconds, want)
    assert all(v >= 0 for v in counters.pod_seconds().values())


def test_model_holders_match_the_ledger_of_any_reporting_style() -> None:
    for style, seed in (("1.37", 1), ("1.36", 4)):
        node = place(style, "pod", seed)
        ledger, _ = ledger_of(node)
        assert model_cpu_holders(node.model) == cpu_holders(ledger)


def test_decorated_pod_list_running_pods_only() -> None:
    body = {"kind": "PodList", "items": [
        {"metadata": {"namespace": "a", "name": "ok", "uid": "u1"},
         "spec": {"initContainers": [{"name": "setup"},
                                     {"name": "mesh", "restartPolicy": "Always"}],
                  "containers": [{"name": "app"}]},
         "status": {"phase": "Running"}},
        {"metadata": {"namespace": "a", "name": "rejected", "uid": "u2"},
         "spec": {"containers": [{"name": "app"}]},
         "status": {"phase": "Failed"}},
    ]}
    decorated = decorate_pod_list(body)
    assert "containerStatuses" not in body["items"][0]["status"]  # a copy
    assert [(r.name, [(c.name, c.id) for c in r.containers])
            for r in pod_refs_from_pod_list(decorated)] == [
        ("ok", [("mesh", container_id("u1", "mesh")), ("app", container_id("u1", "app"))])]


def test_sim_kernel_keeps_in_step_with_the_model(tmp_path: Path) -> None:
    node = place("1.37", "pod", 1)
    ledger, opts = ledger_of(node)
    victim = next(c for c in ledger.containers if c.assignment == "node_exclusive")
    drift = parse_drift(f"{victim.namespace}/{victim.pod}/{victim.name}=0-1")
    kernel = SimKernel(node.model, tmp_path / "cg", tmp_path / "proc" / "stat",
                       load_by_pool=parse_pool_loads("node_exclusive=1, pod_shared=0.5"),
                       drift=drift)
    before = read_proc_stat(tmp_path / "proc", user_hz=100)
    kernel.tick(10.0)
    after = read_proc_stat(tmp_path / "proc", user_hz=100)
    got = attribute(before.busy, after.busy, cpu_holders(ledger)).pools
    pools = ledger.cpu_pools.to_json()
    assert got["node_exclusive"] == 1000 * pools["node_exclusive"]
    assert abs(got["pod_shared"] - 500 * pools["pod_shared"]) <= 2 * pools["pod_shared"]
    assert got["node_shared"] == got["pod_exclusive"] == 0
    reading = CgroupSource(str(tmp_path / "cg")).read(refs(node))  # type: ignore[arg-type]
    diffs = compare(expected_cpusets(ledger, opts), reading.enforced).differences
    assert [(d.key, d.enforced) for d in diffs] == [(next(iter(drift)), frozenset({0, 1}))]
    node.delete(victim.namespace, victim.pod)
    kernel.sync()
    assert not any(k[:2] == (victim.namespace, victim.pod)
                   for k in CgroupSource(str(tmp_path / "cg")).read(
                       refs(node)).enforced.containers)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["pod_shared", "pod_shared=2", "nope=0.5", "pod_shared=x"])
def test_bad_load_flag(text: str) -> None:
    with pytest.raises(UserError, match="--load"):
        parse_pool_loads(text)


@pytest.mark.parametrize("text", ["a/b=0-1", "a/b/c=", "a/b/c=x", "a//c=1", "a/b/c"])
def test_bad_drift_flag(text: str) -> None:
    with pytest.raises(UserError, match="--drift"):
        parse_drift(text)


def test_flags_parse() -> None:
    assert parse_pool_loads("pod_shared=0.9, node_shared=0.3,") == \
        {"pod_shared": 0.9, "node_shared": 0.3}
    assert parse_drift("a/b/c=0-1; d/e/f=3") == {("a", "b", "c"): frozenset({0, 1}),
                                                ("d", "e", "f"): frozenset({3})}
