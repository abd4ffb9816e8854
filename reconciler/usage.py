"""CPU busy time per pool and per pod, from two per-CPU samples of ``/proc/stat``.

Pure: the samples (busy jiffies per CPU, read by ``exporter.sources.procstat``) and the
ledger are handed in. Each CPU's busy delta over an interval goes to the pool, and for the
pools a pod holds (``pod_exclusive``, ``pod_shared``, ``pod_idle``, ``node_exclusive``) to
the pod, that held the CPU per the ledger in force during the interval: the one observed at
its start. See docs/design.md#cpu-pools and docs/kernel.md.

Everything is counted in integer jiffies, so the pools always add up exactly to the node's
busy delta; seconds are jiffies / USER_HZ, computed only for publication.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from reconciler.ledger import CPU_POOLS, Ledger

# The pools whose CPUs belong to one pod.
POD_POOLS = ("node_exclusive", "pod_exclusive", "pod_shared", "pod_idle")

PodPoolKey = tuple[str, str, str]  # (namespace, pod, pool)


class CPUHolder(NamedTuple):
    pool: str
    namespace: str | None = None
    pod: str | None = None


def cpu_holders(ledger: Ledger) -> dict[int, CPUHolder]:
    """Every online CPU of the ledger with its pool and, for the pools a pod holds, the pod.

    The owner is the first claimant in ledger order, as in the ledger's own ownership rule:
    for an exclusive CPU the first container whose exclusive set holds it, for a pod's
    shared or idle remainder the first pod whose block holds it.
    """
    by_container: dict[int, tuple[str, str]] = {}
    for c in ledger.containers:
        if c.assignment in ("pod_exclusive", "node_exclusive"):
            for cpu in c.cpus:
                by_container.setdefault(cpu, (c.namespace, c.pod))
    by_block: dict[int, tuple[str, str]] = {}
    for p in ledger.pods:
        for cpu in p.cpus:
            by_block.setdefault(cpu, (p.namespace, p.name))
    holders: dict[int, CPUHolder] = {}
    for cell in ledger.cpu_map:
        owners = by_container if cell.pool in ("pod_exclusive", "node_exclusive") \
            else by_block if cell.pool in ("pod_shared", "pod_idle") else None
        owner = owners.get(cell.id) if owners is not None else None
        holders[cell.id] = CPUHolder(cell.pool, *owner) if owner else CPUHolder(cell.pool)
    return holders


# A CPU the ledger does not know (no topology, and never reported) is in nobody's set: by
# the pool rules it is node_shared.
_UNKNOWN = CPUHolder("node_shared")


@dataclass(frozen=True, slots=True)
class Attribution:
    """Busy jiffies of one interval, per pool and per (namespace, pod, pool)."""

    pools: Mapping[str, int]
    pods: Mapping[PodPoolKey, int]


def attribute(before: Mapping[int, int], after: Mapping[int, int],
              holders: Mapping[int, CPUHolder]) -> Attribution:
    """Busy jiffies per CPU at the interval's start and end → the interval's attribution.

    Only CPUs present in both samples count. A CPU that went offline (or came online) in
    between, or whose counter went backwards (a reset: hot-unplug and replug, or a
    hypervisor quirk), contributes 0 for this interval: the counters published from this
    never decrease, at the price of losing that one CPU-interval.
    """
    pools: dict[str, int] = dict.fromkeys(CPU_POOLS, 0)
    pods: dict[PodPoolKey, int] = {}
    for cpu, end in after.items():
        start = before.get(cpu)
        if start is None or end <= start:
            continue
        delta = end - start
        holder = holders.get(cpu, _UNKNOWN)
        pools[holder.pool] = pools.get(holder.pool, 0) + delta
        if holder.namespace is not None and holder.pod is not None:
            key = (holder.namespace, holder.pod, holder.pool)
            pods[key] = pods.get(key, 0) + delta
    return Attribution(pools, pods)


def busy_fractions(before_busy: Mapping[int, int], before_idle: Mapping[int, int],
                   after_busy: Mapping[int, int], after_idle: Mapping[int, int],
                   ) -> dict[int, float]:
    """Each CPU's busy share of the interval between two samples, in [0, 1]. A CPU missing
    from either sample, or whose counters went backwards or did not move, has no share."""
    shares: dict[int, float] = {}
    for cpu, busy in after_busy.items():
        b0, i0, i1 = before_busy.get(cpu), before_idle.get(cpu), after_idle.get(cpu)
        if b0 is None or i0 is None or i1 is None:
            continue
        busy_delta, idle_delta = busy - b0, i1 - i0
        if busy_delta < 0 or idle_delta < 0 or busy_delta + idle_delta == 0:
            continue
        shares[cpu] = busy_delta / (busy_delta + idle_delta)
    return shares


@dataclass(frozen=True, slots=True)
class UsageCounters:
    """Monotonic busy-jiffy totals since the exporter started (a pure value: ``add``
    returns a new one)."""

    user_hz: int
    pools: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(CPU_POOLS, 0))
    pods: Mapping[PodPoolKey, int] = field(default_factory=dict)

    def add(self, attribution: Attribution, live_pods: Iterable[tuple[str, str]],
            ) -> UsageCounters:
        """Add one interval; pods not in ``live_pods`` (namespace, name) are dropped, so a
        deleted pod's series disappear with it."""
        pools = dict(self.pools)
        for pool, jiffies in attribution.pools.items():
            pools[pool] = pools.get(pool, 0) + jiffies
        live = set(live_pods)
        pods = {k: v for k, v in self.pods.items() if (k[0], k[1]) in live}
        for key, jiffies in attribution.pods.items():
            if (key[0], key[1]) in live:
                pods[key] = pods.get(key, 0) + jiffies
        return UsageCounters(self.user_hz, pools, pods)

    def pool_seconds(self) -> dict[str, float]:
        """``podres_cpu_pool_busy_seconds_total{pool}``."""
        return {pool: jiffies / self.user_hz for pool, jiffies in self.pools.items()}

    def pod_seconds(self) -> dict[PodPoolKey, float]:
        """``podres_pod_cpu_busy_seconds_total{namespace, pod, pool}``."""
        return {key: jiffies / self.user_hz for key, jiffies in self.pods.items()}
