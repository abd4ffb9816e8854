"""The random cases kept where the kubelet answers quickly (bench/reference_budget.py,
docs/design.md#reference): the topology manager's merge walks the product of its hint lists,
and a generated pod whose lists could make that product exceed the budget loses resource
kinds until it fits. No Go here: the figures the bound is checked against were read from the
reference's own log (PODRES_REFERENCE_STDERR) on the case that stalled."""

from __future__ import annotations

from dataclasses import replace

from bench.reference import Case, random_case
from bench.reference_budget import MERGE_BUDGET, merge_bound, merge_lists
from reconciler.kube import PodSpec

STALLED = 8800026480  # 1.37, --memory --devices: pod-0008 stalls the kubelet's merge


def _pod(case: Case, name: str) -> PodSpec:
    return next(p for _, p in case.ops if p is not None and p.name == name)


def test_the_case_that_stalled_is_over_the_budget_as_drawn() -> None:
    raw = random_case(STALLED, "1.37", memory=True, devices=True, budget=False)
    pod = _pod(raw, "pod-0008")
    assert merge_lists(raw, pod) == [{"cpu": 2, "memory": 256 << 20, "hugepages-1Gi": 2 << 30,
                                      "hugepages-2Mi": 2 << 30}]
    # The kubelet's lists for it on that node: cpu 228 hints, memory and both hugepage sizes
    # 230 each (2.8e9 permutations). The bound may count more, never fewer.
    assert merge_bound(raw, pod) >= 228 * 230**3


def test_the_generator_fits_it_keeping_cpu_and_memory() -> None:
    case = random_case(STALLED, "1.37", memory=True, devices=True)
    pod = _pod(case, "pod-0008")
    assert merge_lists(case, pod) == [{"cpu": 2, "memory": 256 << 20}]
    assert all(c.resources.hugepages == () for c in pod.containers)
    assert all(merge_bound(case, p) <= MERGE_BUDGET for _, p in case.ops if p is not None)


def test_device_resources_go_before_hugepages() -> None:
    # 1.37 seed 8800026633 of the combined mix: cpu, memory and a GPU on 8 NUMA nodes.
    raw = random_case(8800026633, "1.37", memory=True, devices=True, budget=False)
    pod = _pod(raw, "pod-0011")
    assert set(merge_lists(raw, pod)[0]) == {"cpu", "memory", "example.com/gpu"}
    assert merge_bound(raw, pod) > MERGE_BUDGET
    fitted = _pod(random_case(8800026633, "1.37", memory=True, devices=True), "pod-0011")
    assert all(c.resources.extended == () for c in fitted.containers)


def test_cases_within_the_budget_are_as_drawn() -> None:
    # Most cases are untouched: only pods over the budget change.
    same = sum(random_case(s, "1.37", memory=True) == random_case(s, "1.37", memory=True,
                                                                   budget=False)
               for s in range(8800026400, 8800026460))
    assert same >= 55


def test_the_none_topology_policy_merges_nothing() -> None:
    raw = random_case(STALLED, "1.37", memory=True, devices=True, budget=False)
    none = replace(raw, config=replace(raw.config, topology_policy="none"))
    assert merge_lists(none, _pod(none, "pod-0008")) == []
    assert merge_bound(none, _pod(none, "pod-0008")) == 1
