"""What the static CPU policy checks when the kubelet starts with a restored checkpoint
(``staticPolicy.validateState``, ``pkg/kubelet/cm/cpumanager/policy_static.go``): a state
it refuses keeps the kubelet from starting, which is why the exporter and the model must
refuse the same states, with the same words (docs/design.md#allocator)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.allocator.topology import CPUTopology
from reconciler.cpuset import format_cpuset

Assignments = Mapping[str, Mapping[str, frozenset[int]]]  # pod uid → container → CPUs


def validate_state(topo: CPUTopology, reserved: frozenset[int], default: frozenset[int],
                   assignments: Assignments, *, strict: bool,
                   pod_sets: Iterable[frozenset[int]] = ()) -> tuple[frozenset[int], str | None]:
    """The default set the policy starts with and ``None``, or the kubelet's error.

    An empty default set with no assignment is a fresh state: every CPU (less the reserved
    ones under ``strict-cpu-reservation``). ``pod_sets`` are the pod-level blocks of a
    checkpoint written with ``PodLevelResourceManagers`` on, which also account for CPUs.
    """
    all_cpus = topo.online - reserved if strict else topo.online
    if not default:
        if assignments:
            return default, "default cpuset cannot be empty"
        return all_cpus, None
    if strict:
        inside = reserved & default
        if inside:
            return default, (f'some of strictly reserved cpus: "{format_cpuset(inside)}" are '
                             f'present in defaultCpuSet: "{format_cpuset(default)}"')
    elif reserved & default != reserved:
        return default, (f'not all reserved cpus: "{format_cpuset(reserved)}" are present in '
                         f'defaultCpuSet: "{format_cpuset(default)}"')
    for pod, containers in assignments.items():
        for container, cpus in containers.items():
            if cpus & default:
                return default, (f'pod: {pod}, container: {container} cpuset: '
                                 f'"{format_cpuset(cpus)}" overlaps with default cpuset '
                                 f'"{format_cpuset(default)}"')
    known = set(default)
    for containers in assignments.values():
        for cpus in containers.values():
            known |= cpus
    for block in pod_sets:
        known |= block
    if known != all_cpus:
        return default, (f'current set of available CPUs "{format_cpuset(all_cpus)}" doesn\'t '
                         f'match with CPUs in state "{format_cpuset(known)}"')
    return default, None
