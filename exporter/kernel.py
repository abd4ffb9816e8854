"""The kernel sources between polls: enforced cpusets checked against the ledger
(``cpuset_drift``) and busy time per pool from ``/proc/stat``. See docs/kernel.md.

One :class:`KernelObserver` lives as long as the daemon; ``poll`` is called once per poll,
after the ledger is made, with the ``/pods`` and ``/configz`` bodies the poll read. It keeps
what must outlive a poll (the drift tracker's state, the previous ``/proc/stat`` sample and
the ledger in force since then, the usage counters) and hands back one
:class:`KernelReport`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from exporter.errors import SourceError
from exporter.options import KernelSourcesOptions
from exporter.sources.cgroup import (
    CgroupReading,
    CgroupSource,
    CgroupUnavailable,
    EntryError,
    LazyRefs,
    PodRef,
    capture_tree,
    cpu_manager_reconcile_period,
    detect_layout,
    kubelet_cgroups,
    pod_refs_from_pod_list,
)
from exporter.sources.kernel_files import read_kernel_file
from exporter.sources.procstat import MAX_PROC_STAT_BYTES, ProcStat, read_proc_stat
from reconciler.cpuset import MAX_CPU_ID, format_cpuset
from reconciler.enforcement import (
    Drift,
    DriftState,
    EnforcedCpusets,
    EnforcementOptions,
    Expectations,
    compare,
    drift_counts,
    expected_cpusets,
    track,
)
from reconciler.kube import KubeletConfig, SpecError, kubelet_config_from_json
from reconciler.ledger import Anomaly, Ledger
from reconciler.usage import CPUHolder, UsageCounters, attribute, busy_fractions, cpu_holders

log = logging.getLogger("podres.cgroup")

# How many polls a cgroup /pods names may be missing (each after a fresh read of /pods,
# while the kubelet's status catches up with a restart) before it counts as a read error.
GONE_POLLS = 2

# Reads /pods again now, out of its schedule, and returns the pods' container references
# (None when it could not be read): the daemon's way to follow a restarted container.
PodsRefresh = Callable[[], "tuple[PodRef, ...] | None"]


@dataclass(frozen=True, slots=True)
class KernelOptions:
    """``--cgroup.root`` / ``--cgroup.driver`` / ``--proc.root`` /
    ``--cgroup.kubelet-root``; a root of ``None`` turns that source off. The driver and the
    kubelet's cgroup root, when set, override what ``/configz`` says."""

    cgroup_root: str | None = "/sys/fs/cgroup"
    cgroup_driver: str = "auto"
    proc_root: str | None = "/proc"
    user_hz: int | None = None  # None: the system's USER_HZ
    cgroup_kubelet_root: str = ""  # "": the kubelet's cgroupRoot from /configz, else "/"

    @classmethod
    def from_flags(cls, flags: KernelSourcesOptions) -> KernelOptions:
        return cls(flags.cgroup_root or None, flags.cgroup_driver, flags.proc_root or None,
                   cgroup_kubelet_root=flags.cgroup_kubelet_root)


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
    cgroup_off_reason: str | None = None  # one of OFF_REASONS while a configured source is off
    # Cumulative CPU time of each container's and pod's own cgroup, in seconds.
    container_usage: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    pod_usage: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # Each CPU's busy share of the last interval (the CPU map's colouring); empty until two
    # /proc/stat samples were read.
    busy: Mapping[int, float] = field(default_factory=dict)

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
        self.cgroup = (CgroupSource(options.cgroup_root, options.cgroup_driver,
                                    options.cgroup_kubelet_root)
                       if options.cgroup_root else None)
        self.drift_state = DriftState()
        self._pod_list: object = None
        self._refs: tuple[PodRef, ...] | None = None
        self._sample: ProcStat | None = None
        self.busy: Mapping[int, float] = {}
        self._holders: dict[int, CPUHolder] = {}
        self._holders_of: Ledger | None = None
        # What the ledger implies each cgroup should run on, for the ledger and the kubelet
        # settings it was worked out from: an unchanged node reuses it (it is a pass over
        # every container, whose entries are built anew each time: docs/design.md#data-path).
        self._expected: Expectations | None = None
        self._expected_of: tuple[Ledger, bool, bool] | None = None
        self._usage: UsageCounters | None = None
        # Cgroups /pods names that were missing, by container id (pod uid), with the
        # number of polls in a row they were.
        self._gone: dict[str, int] = {}

    @property
    def sources(self) -> frozenset[str]:
        """The kernel sources configured, as errors and health report them."""
        return frozenset(name for name, on in (("cgroup", self.cgroup is not None),
                                               ("procstat", bool(self.options.proc_root)))
                         if on)

    def poll(self, ledger: Ledger, pod_list: Any, configz: Any, now: float,
             refresh: PodsRefresh | None = None) -> KernelReport:
        """``pod_list`` and ``configz``: the parsed ``/pods`` and ``/configz`` bodies (``None``
        when not read); ``now``: a monotonic time in seconds; ``refresh``: reads ``/pods``
        afresh when a container's cgroup is gone (a restart gives it a new id)."""
        errors: dict[tuple[str, str], str] = {}
        # Ids past the node's last CPU are refused before a set is built, where the node is
        # known (a topology; without one the online CPUs are only inferred): a hostile
        # "0-1048575" then costs nothing (docs/design.md#cpu-lists).
        last = max((c.id for c in ledger.cpu_map), default=MAX_CPU_ID) \
            if ledger.numa_nodes is not None else MAX_CPU_ID
        usage = self._usage_poll(ledger, errors, last)
        if self.cgroup is None:
            return KernelReport(usage=usage, errors=errors, cgroup_off="--cgroup.root unset",
                                busy=self.busy)
        reading = self._cgroup_read(self.cgroup, self._pod_refs(pod_list), configz, refresh,
                                     last)
        if reading.off is not None:
            self._gone = {}
            return KernelReport(usage=usage, errors=errors, cgroup_off=reading.off,
                                cgroup_off_reason=reading.off_reason, busy=self.busy)
        entry_errors = reading.errors + self._lasting_gone(reading)
        if entry_errors:
            first = entry_errors[0]
            errors[("cgroup", "read")] = (f"cgroup read: {len(entry_errors)} unreadable "
                                          f"entries, first {first.namespace}/{first.pod}: "
                                          f"{first.message}")
        options = EnforcementOptions.from_kubelet_config(
            _config(configz), cpu_manager_reconcile_period(configz))
        self.drift_state, drifts = track(
            self.drift_state, compare(self._expectations(ledger, options), reading.enforced),
            now, options.reconcile_period)
        return KernelReport(drifts, drift_counts(drifts), reading.enforced, usage, errors,
                            entry_errors, busy=self.busy,
                            container_usage=reading.container_usage,
                            pod_usage=reading.pod_usage)

    def _cgroup_read(self, source: CgroupSource, refs: tuple[PodRef, ...] | LazyRefs | None,
                     configz: Any, refresh: PodsRefresh | None, max_cpu: int) -> CgroupReading:
        """One reading; when cgroups /pods names are gone and have not been missing for
        ``GONE_POLLS`` polls yet, ``/pods`` is read afresh and the cgroups again: a
        restarted container is found under its new id within the poll, and a stopped one
        (``waiting``) is no longer looked for."""
        reading = source.read(refs, configz, max_cpu)
        if (refresh is not None and reading.gone
                and any(self._gone.get(g.key, 0) < GONE_POLLS for g in reading.gone)):
            fresh = refresh()
            if fresh is not None:
                log.debug("cgroups gone, /pods read again", extra={
                    "gone": len(reading.gone), "first": reading.gone[0].entry.message})
                reading = source.read(fresh, configz, max_cpu)
        return reading

    def _lasting_gone(self, reading: CgroupReading) -> tuple[EntryError, ...]:
        """The missing cgroups that count as read errors: those missing ``GONE_POLLS``
        polls in a row (a layout the source misreads, or a kubelet whose status does not
        follow its containers); a container that exited or restarted is not one."""
        self._gone = {g.key: self._gone.get(g.key, 0) + 1 for g in reading.gone}
        return tuple(g.entry for g in reading.gone if self._gone[g.key] >= GONE_POLLS)

    def _expectations(self, ledger: Ledger, options: EnforcementOptions) -> Expectations:
        key = (ledger, options.static_policy, options.strict_cpu_reservation)
        cached = self._expected_of
        if (self._expected is None or cached is None or cached[0] is not ledger
                or cached[1:] != key[1:]):
            self._expected, self._expected_of = expected_cpusets(ledger, options), key
        return self._expected

    def _pod_refs(self, pod_list: Any) -> tuple[PodRef, ...] | LazyRefs | None:
        """``pod_list``: the parsed ``/pods``, or its references already taken from it (a
        tuple of ``PodRef``, or what takes them when called: ``LazyRefs``); the same object
        comes back while ``/pods`` is unchanged."""
        if pod_list is None:
            return None
        if isinstance(pod_list, tuple) or callable(pod_list):
            return cast(tuple[PodRef, ...] | LazyRefs, pod_list)
        if pod_list is not self._pod_list:
            self._pod_list, self._refs = pod_list, pod_refs_from_pod_list(pod_list)
        return self._refs

    def _usage_poll(self, ledger: Ledger, errors: dict[tuple[str, str], str],
                    max_cpu: int = MAX_CPU_ID) -> UsageCounters | None:
        """Attribute the interval since the last sample with the ledger in force since then,
        then remember this sample and this ledger for the next interval."""
        if not self.options.proc_root:
            return None
        try:
            sample = read_proc_stat(self.options.proc_root, self.options.user_hz, max_cpu)
        except SourceError as exc:
            errors[(exc.source, exc.operation)] = str(exc)
            return self._usage  # the next good sample is compared with the last good one
        if self._sample is not None:
            shares = busy_fractions(self._sample.busy, self._sample.idle, sample.busy,
                                    sample.idle)
            # A CPU whose counters did not move (no time passed between two samples) keeps
            # its last share; one that left the sample has none.
            self.busy = {cpu: shares[cpu] if cpu in shares else self.busy[cpu]
                         for cpu in sample.busy if cpu in shares or cpu in self.busy}
            usage = self._usage or UsageCounters(sample.user_hz)
            self._usage = usage.add(attribute(self._sample.busy, sample.busy, self._holders),
                                    ((p.namespace, p.name) for p in ledger.pods))
        self._sample = sample
        if ledger is not self._holders_of:  # the reader reuses an unchanged ledger
            self._holders, self._holders_of = cpu_holders(ledger), ledger
        return self._usage


# -- fixture directories (record, snapshot --from) -----------------------------------------

FIXTURE_CGROUP = "cgroup"  # a minimal tree of the files read, usable as --cgroup.root
FIXTURE_PROC_STAT = "proc_stat"


def capture_kernel_files(options: KernelOptions, pod_list: Any, directory: str,
                         configz: Any = None) -> tuple[list[str], list[str]]:
    """Copy what the kernel sources read into a fixture directory: the cgroup files of the
    pods in ``pod_list`` under ``cgroup/`` and ``/proc/stat`` as ``proc_stat``. Returns
    the paths written and, for a source that could not be captured, why (a warning: the
    rest of the fixture stands)."""
    written: list[str] = []
    warnings: list[str] = []
    if options.cgroup_root and pod_list is not None:
        try:
            layout = detect_layout(options.cgroup_root, options.cgroup_driver, kubelet_cgroups(
                configz, options.cgroup_kubelet_root, options.cgroup_driver))
        except CgroupUnavailable as exc:
            warnings.append(f"cgroup/ not captured: {exc}")
        else:
            dest = os.path.join(directory, FIXTURE_CGROUP)
            capture_tree(options.cgroup_root, layout, pod_refs_from_pod_list(pod_list), dest)
            written.append(dest)
    if options.proc_root:
        source = os.path.join(options.proc_root, "stat")
        try:
            data = read_kernel_file(source, MAX_PROC_STAT_BYTES, truncate=True)
        except OSError as exc:
            warnings.append(f"proc_stat not captured: {source}: {exc.strerror or exc}")
        else:
            dest = os.path.join(directory, FIXTURE_PROC_STAT)
            with open(dest, "wb") as f:
                f.write(data)
            written.append(dest)
    return written, warnings


def fixture_enforced(directory: str, pod_list: Any, configz: Any = None,
                     ) -> EnforcedCpusets | None:
    """The enforced cpusets of a fixture directory's ``cgroup/``; None without one."""
    root = os.path.join(directory, FIXTURE_CGROUP)
    if pod_list is None or not os.path.isdir(root):
        return None
    reading = CgroupSource(root).read(pod_refs_from_pod_list(pod_list), configz)
    return reading.enforced if reading.off is None else None


def add_enforced(body: dict[str, Any], enforced: EnforcedCpusets) -> None:
    """``enforced_cpus`` beside each container's ``cpus`` in a ledger's JSON (and each
    pod's, for pods whose cgroup sets a cpuset): what the kernel enforces, ``null`` when it
    could not be read. Additive: podres.ledger/v1 readers ignore it."""
    for entry in body["containers"]:
        cpus = enforced.containers.get((entry["namespace"], entry["pod"], entry["name"]))
        entry["enforced_cpus"] = None if cpus is None else format_cpuset(cpus)
    for entry in body["pods"]:
        cpus = enforced.pods.get((entry["namespace"], entry["name"]))
        if cpus is not None:
            entry["enforced_cpus"] = format_cpuset(cpus)
