"""Reclaimed and reclaimable cores (docs/design.md#estimates)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from reconciler.kube import PodSpec, Resources


def legacy_cost(containers: Iterable[tuple[bool, int, Resources | None]]) -> int:
    """What the per-container model would have pinned for a pod with a pod block.

    Each item is ``(exclusive, exclusive_cpu_count, spec_resources_or_None)``: exclusive
    containers cost their own CPUs; shared ones ``max(1, ceil(limit, else request))`` when
    the spec is known and 1 otherwise (every sidecar used to pin at least a core).
    """
    cost = 0
    for exclusive, count, resources in containers:
        if exclusive:
            cost += count
        elif resources is not None:
            cost += resources.legacy_cpus()
        else:
            cost += 1
    return cost


def spec_legacy_cost(pod: PodSpec) -> int:
    """The legacy cost of a pod as its spec plans it: eligible containers exclusive with
    their integer CPU request, every other long-running container shared."""
    return legacy_cost((pod.eligible(c), c.resources.integer_cpus or 0, c.resources)
                       for c in pod.long_running)


def reclaimable_cores(exclusive_counts: Sequence[int]) -> int:
    """Cores a pod without a block could give back by moving its 1-CPU padding containers
    into a 1-CPU pod shared pool. The largest exclusive container (first on ties) stays
    exclusive; with k ≥ 2 one-CPU candidates left, k − 1 cores come back."""
    if not exclusive_counts:
        return 0
    # The first of the largest stays; the others of one CPU are the candidates (counted in
    # C: every pod that owns CPUs without a block comes here).
    k = exclusive_counts.count(1) - (max(exclusive_counts) == 1)
    return k - 1 if k >= 2 else 0
