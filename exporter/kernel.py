"""The kernel sources between polls: enforced cpusets checked against the ledger
(``cpuset_drift``) and busy time per pool from ``/proc/stat``. See docs/kernel.md.

One :class:`KernelObserver` lives as long as the daemon; ``poll`` is called once per poll,
after the ledger is made, with the ``/pods`` and ``/configz`` bodies the poll read. It keeps
what must outlive a poll (the drift tracker's state, the previous ``/proc/stat`` sample and
the ledger in force since then, the usage counters) and hands back one
:class:`KernelReport`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.errors import SourceError
from exporter.sources.cgroup import (
    CgroupSource,
    EntryError,
    PodRef,
    cpu_manager_reconcile_period,
    pod_refs_from_pod_list,
)
from exporter.sources.procstat import ProcStat, read_proc_stat
from reconciler.enforcement import (
    Drift,
    DriftState,
    EnforcedCpusets,
    EnforcementOptions,
    drift_counts,
    observe,
)
from reconciler.kube import KubeletConfig, SpecError, kubelet_config_from_json
from reconciler.ledger import Anomaly, Ledger
from reconciler.usage import CPUHolder, UsageCounters, attribute, cpu_holders


@dataclass(frozen=True, slots=True)
class KernelOptions:
    """``--cgroup.root`` / ``--cgroup.driver`` / ``--proc.root``; a root of ``None`` turns
    that source off."""

    cgroup_root: str | None = "/sys/fs/cgroup"
    cgroup_driver: str = "auto"
    proc_root: str | None = "/proc"
    user_hz: int | None = None  # None: the system's USER_HZ


@dataclass(frozen=True, slots=True)
class KernelReport:
    drifts: tuple[Drift, ...] = ()
    drift_counts: Mapping[str, int] = field(default_factory=dict)  # podres_cpuset_drift
    enforced: EnforcedCpusets = field(default_factory=EnforcedCpusets)
    usage: UsageCounters | None = None  # None until two /proc/stat samples were read
    # (source, operation) → message, as the poll's other source errors.
    errors: Mapping[tuple[str, str], str] = field(default_factory=dict)
    entry_errors: tuple[EntryError, ...] = ()
    cgroup_off: str | None = None

    @property
    def anomalies(self) -> tuple[Anomaly, ...]:
        """The ``cpuset_drift`` anomalies to add to the ledger's."""
        return tuple(d.anomaly() for d in self.drifts)


def _config(configz: object) -> KubeletConfig | None:
    if configz is None:
        return None
    try:
        return kubelet_config_from_json(configz)
    except SpecError:
        return None  # the poll reports a bad /configz already


class KernelObserver:
    def __init__(self, options: KernelOptions) -> None:
        self.options = options
        self.cgroup = (CgroupSource(options.cgroup_root, options.cgroup_driver)
                       if options.cgroup_root else None)
        self.drift_state = DriftState()
        self._pod_list: object = None
        self._refs: tuple[PodRef, ...] | None = None
        self._sample: ProcStat | None = None
        self._holders: dict[int, CPUHolder] = {}
        self._holders_of: Ledger | None = None
        self._usage: UsageCounters | None = None

    @property
    def sources(self) -> frozenset[str]:
        """The kernel sources configured, as errors and health report them."""
        return frozenset(name for name, on in (("cgroup", self.cgroup is not None),
                                               ("procstat", bool(self.options.proc_root)))
                         if on)

    def poll(self, ledger: Ledger, pod_list: Any, configz: Any, now: float) -> KernelReport:
        """``pod_list`` and ``configz``: the parsed ``/pods`` and ``/configz`` bodies (``None``
        when not read); ``now``: a monotonic time in seconds."""
        errors: dict[tuple[str, str], str] = {}
        usage = self._usage_poll(ledger, errors)
        if self.cgroup is None:
            return KernelReport(usage=usage, errors=errors, cgroup_off="--cgroup.root unset")
        reading = self.cgroup.read(self._pod_refs(pod_list))
        if reading.off is not None:
            return KernelReport(usage=usage, errors=errors, cgroup_off=reading.off)
        if reading.errors:
            first = reading.errors[0]
            errors[("cgroup", "read")] = (f"cgroup read: {len(reading.errors)} unreadable "
                                          f"entries, first {first.namespace}/{first.pod}: "
                                          f"{first.message}")
        options = EnforcementOptions.from_kubelet_config(
            _config(configz), cpu_manager_reconcile_period(configz))
        self.drift_state, drifts = observe(self.drift_state, ledger, reading.enforced,
                                           options, now)
        return KernelReport(drifts, drift_counts(drifts), reading.enforced, usage, errors,
                            reading.errors)

    def _pod_refs(self, pod_list: Any) -> tuple[PodRef, ...] | None:
        """The reader hands back the same parsed object while ``/pods`` is unchanged."""
        if pod_list is None:
            return None
        if pod_list is not self._pod_list:
            self._pod_list, self._refs = pod_list, pod_refs_from_pod_list(pod_list)
        return self._refs

    def _usage_poll(self, ledger: Ledger, errors: dict[tuple[str, str], str],
                    ) -> UsageCounters | None:
        """Attribute the interval since the last sample with the ledger in force since then,
        then remember this sample and this ledger for the next interval."""
        if not self.options.proc_root:
            return None
        try:
            sample = read_proc_stat(self.options.proc_root, self.options.user_hz)
        except SourceError as exc:
            errors[(exc.source, exc.operation)] = str(exc)
            return self._usage  # the next good sample is compared with the last good one
        if self._sample is not None:
            usage = self._usage or UsageCounters(sample.user_hz)
            self._usage = usage.add(attribute(self._sample.busy, sample.busy, self._holders),
                                    ((p.namespace, p.name) for p in ledger.pods))
        self._sample = sample
        if ledger is not self._holders_of:  # the reader reuses an unchanged ledger
            self._holders, self._holders_of = cpu_holders(ledger), ledger
        return self._usage
