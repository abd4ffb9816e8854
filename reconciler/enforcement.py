"""What the kernel should enforce for each container, against what it does (``cpuset_drift``).

Pure: the enforced cpusets are read by ``exporter.sources.cgroup`` and handed in; the caller
passes the time of each observation. See docs/design.md#anomalies and docs/kernel.md.

Expected cpuset of a container, from its ledger assignment (docs/design.md#cpu-pools):

* ``pod_exclusive`` / ``node_exclusive``: its own exclusive slice;
* ``pod_shared``: its pod's shared pool (the pod block minus the pod's exclusive slices);
* ``node_shared``: the node shared pool, plus the reserved CPUs unless the kubelet runs with
  ``strict-cpu-reservation`` (the kubelet's default set keeps them otherwise). Under a CPU
  manager policy other than ``static`` nothing is pinned: every online CPU.

A shared container (``node_shared`` or ``pod_shared``) may run on fewer CPUs than its pool:
CPUs an ordinary init container held stay out of the shared set until that init container
is removed, and the PodResources API never lists init containers, so the ledger counts those
CPUs as shared. Such a container drifts only when it runs on a CPU outside its pool (or on
none); an exclusive slice and a pod block must match exactly.

A pod whose cgroup carries a cpuset of its own (cgroup v2, non-empty ``cpuset.cpus``) is
expected to hold its pod block; pods without a block have no expectation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from reconciler.cpuset import format_cpuset
from reconciler.kube import KubeletConfig
from reconciler.ledger import Anomaly, Ledger

# The kubelet's default --cpu-manager-reconcile-period.
DEFAULT_RECONCILE_PERIOD = 10.0

# The ``kind`` label of ``podres_cpuset_drift``: the drifting container's ledger assignment,
# or ``pod`` for a pod-level cgroup.
DRIFT_KINDS = ("node_exclusive", "pod_exclusive", "pod_shared", "node_shared", "pod")

# (namespace, pod, container); container None for the pod-level cgroup.
DriftKey = tuple[str, str, str | None]


@dataclass(frozen=True, slots=True)
class EnforcementOptions:
    """The kubelet settings that shape what the kernel should enforce."""

    static_policy: bool = True
    strict_cpu_reservation: bool = False
    reconcile_period: float = DEFAULT_RECONCILE_PERIOD  # seconds

    @classmethod
    def from_kubelet_config(cls, config: KubeletConfig | None,
                            reconcile_period: float = DEFAULT_RECONCILE_PERIOD,
                            ) -> EnforcementOptions:
        """Without a configuration the static policy is assumed: the only one under which
        anything is pinned, so the only one under which a container can drift."""
        if config is None:
            return cls(reconcile_period=reconcile_period)
        strict = (config.option("strict-cpu-reservation") or "").strip().lower() == "true"
        return cls(static_policy=config.static_cpu, strict_cpu_reservation=strict,
                   reconcile_period=reconcile_period)


@dataclass(frozen=True, slots=True)
class EnforcedCpusets:
    """What the kernel enforces, keyed by the ledger's names."""

    containers: Mapping[tuple[str, str, str], frozenset[int]] = field(default_factory=dict)
    # Only pods whose cgroup sets a cpuset of its own.
    pods: Mapping[tuple[str, str], frozenset[int]] = field(default_factory=dict)


class Difference(NamedTuple):
    key: DriftKey
    kind: str  # one of DRIFT_KINDS
    expected: frozenset[int]
    enforced: frozenset[int]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One observation: what differs, which subjects could be observed at all, and every
    subject the ledger lists (observed or not)."""

    differences: tuple[Difference, ...]
    observed: frozenset[DriftKey]
    subjects: frozenset[DriftKey]


@dataclass(frozen=True, slots=True)
class Expectations:
    containers: Mapping[tuple[str, str, str], tuple[str, frozenset[int]]]  # → (kind, cpus)
    pods: Mapping[tuple[str, str], frozenset[int]]


def expected_cpusets(ledger: Ledger, options: EnforcementOptions) -> Expectations:
    """The cpuset each listed container (and each pod with a block) should run on. A name
    listed twice keeps its first entry, as ownership does. An empty expectation (a pod
    shared pool with no CPU left, a node with no shared CPU) cannot be enforced by any
    cgroup and is left out: ``empty_pod_shared_pool`` already tells of the first."""
    online = frozenset(cell.id for cell in ledger.cpu_map)
    if options.static_policy:
        shared_pools = {"node_shared"} if options.strict_cpu_reservation \
            else {"node_shared", "reserved"}
        node_shared = frozenset(c.id for c in ledger.cpu_map if c.pool in shared_pools)
    else:
        node_shared = online
    containers: dict[tuple[str, str, str], tuple[str, frozenset[int]]] = {}
    for c in ledger.containers:
        cpus = node_shared if c.assignment == "node_shared" else c.cpus
        if cpus:
            containers.setdefault((c.namespace, c.pod, c.name), (c.assignment, cpus))
    pods: dict[tuple[str, str], frozenset[int]] = {}
    for p in ledger.pods:
        if p.cpus:
            pods.setdefault((p.namespace, p.name), p.cpus)
    return Expectations(containers, pods)


def compare(expectations: Expectations, enforced: EnforcedCpusets) -> Comparison:
    """Subjects present on both sides; a ledger entry without a reading is not observed,
    a cgroup the ledger does not list is ignored."""
    differences: list[Difference] = []
    observed: set[DriftKey] = set()
    subjects: set[DriftKey] = set(expectations.containers)
    subjects.update((namespace, pod, None) for namespace, pod in expectations.pods)
    # Most containers share one expected set (the node shared pool) and, read through one
    # parse cache, one enforced set object: compare each pair of objects once.
    same: dict[tuple[int, int], bool] = {}
    for key, (kind, want) in expectations.containers.items():
        got = enforced.containers.get(key)
        if got is None:
            continue
        observed.add(key)
        pair = (id(got), id(want))
        equal = same.get(pair)
        if equal is None:
            equal = same[pair] = _agrees(kind, want, got)
        if not equal:
            differences.append(Difference(key, kind, want, got))
    for (namespace, pod), want in expectations.pods.items():
        got = enforced.pods.get((namespace, pod))
        if got is None:
            continue
        pkey: DriftKey = (namespace, pod, None)
        observed.add(pkey)
        if got != want:
            differences.append(Difference(pkey, "pod", want, got))
    return Comparison(tuple(differences), frozenset(observed), frozenset(subjects))


def _agrees(kind: str, want: frozenset[int], got: frozenset[int]) -> bool:
    if kind in _SHARED:
        return bool(got) and got <= want
    return got == want


_SHARED = frozenset({"node_shared", "pod_shared"})


class Drift(NamedTuple):
    """A difference being watched; ``since`` is when it was first seen with this
    expectation."""

    key: DriftKey
    kind: str
    expected: frozenset[int]
    enforced: frozenset[int]
    since: float

    def anomaly(self) -> Anomaly:
        namespace, pod, container = self.key
        extra = self.enforced - self.expected
        missing = self.expected - self.enforced
        notes = []
        if extra:
            notes.append(f"not its own: {format_cpuset(extra)}")
        if missing:
            notes.append(f"missing: {format_cpuset(missing)}")
        subject = "pod cgroup" if container is None else f"{self.kind} container"
        return Anomaly(
            "cpuset_drift", namespace, pod, container,
            f"{subject} runs on CPUs {format_cpuset(self.enforced) or '(none)'} but the "
            f"ledger implies {format_cpuset(self.expected) or '(none)'} "
            f"({'; '.join(notes)})")


@dataclass(frozen=True, slots=True)
class DriftState:
    """The tracker's memory between polls: every difference seen and not yet fixed."""

    pending: Mapping[DriftKey, Drift] = field(default_factory=dict)


def track(state: DriftState, comparison: Comparison, now: float, period: float,
          ) -> tuple[DriftState, tuple[Drift, ...]]:
    """Fold one observation (taken at ``now``, a monotonic time in seconds) into the state;
    returns the new state and the drifts to report now.

    A difference is reported once it has been seen in two observations at least ``period``
    apart (the kubelet's CPU manager reconcile period: it may legitimately lag that long,
    e.g. right after an admission). Its clock restarts whenever the expected set changes,
    since the kubelet then gets a new period to catch up; a change of the enforced set alone
    keeps the clock. A subject observed without a difference is cleared; one the ledger
    still lists but that could not be observed this time (a read error) keeps its clock but
    is not reported, for want of evidence; one the ledger no longer lists is forgotten.
    """
    pending: dict[DriftKey, Drift] = {}
    current: list[Drift] = []
    for diff in comparison.differences:
        old = state.pending.get(diff.key)
        since = old.since if old is not None and old.expected == diff.expected else now
        drift = Drift(diff.key, diff.kind, diff.expected, diff.enforced, since)
        pending[diff.key] = drift
        if now > since and now - since >= period:
            current.append(drift)
    for key, old in state.pending.items():
        if (key not in comparison.observed and key in comparison.subjects
                and key not in pending):
            pending[key] = old
    return DriftState(pending), tuple(current)


def observe(state: DriftState, ledger: Ledger, enforced: EnforcedCpusets,
            options: EnforcementOptions, now: float) -> tuple[DriftState, tuple[Drift, ...]]:
    """One poll's enforcement check: expectations from ``ledger``, comparison with
    ``enforced``, then :func:`track` over ``options.reconcile_period``."""
    comparison = compare(expected_cpusets(ledger, options), enforced)
    return track(state, comparison, now, options.reconcile_period)


def drift_counts(drifts: tuple[Drift, ...]) -> dict[str, int]:
    """Current drifts per kind, every kind present (the ``podres_cpuset_drift`` gauge)."""
    counts = dict.fromkeys(DRIFT_KINDS, 0)
    for d in drifts:
        counts[d.kind] += 1
    return counts
