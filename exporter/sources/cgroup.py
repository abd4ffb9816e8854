"""The cpusets the kernel enforces, from the host's cgroup filesystem (``--cgroup.root``,
``/host/sys/fs/cgroup`` in the chart). See docs/kernel.md and docs/design.md#sources.

Layouts read (cgroup v2 first, then the v1 ``cpuset`` controller under ``<root>/cpuset``):

* systemd driver: ``kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
  <runtime>-<id>.scope``, Guaranteed pods directly as ``kubepods.slice/kubepods-pod<uid>
  .slice``; the uid with ``-`` written as ``_``. Scopes ``cri-containerd-<id>.scope``
  (containerd), ``crio-<id>.scope`` (CRI-O; its ``crio-conmon-<id>.scope`` is not a
  container), ``docker-<id>.scope`` (cri-dockerd).
* cgroupfs driver: ``kubepods/<qos>/pod<uid>/<id>`` (CRI-O: ``crio-<id>``), Guaranteed pods
  directly as ``kubepods/pod<uid>``.

Pods and container ids come from the kubelet's ``/pods`` (``status.containerStatuses`` and,
for sidecars, ``status.initContainerStatuses``). The QoS directories are listed once per
poll to find the pods; a container's cgroup is named from its id and runtime, so it costs
one small read, and identical cpuset texts are parsed once. Whatever goes wrong
with one pod or container (gone between listing and reading, unreadable, not a regular
file, not a cpuset) is an entry error beside the others' readings, never an exception.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from exporter.errors import UserError
from exporter.flags import parse_duration
from exporter.sources.cgroup_layout import (
    DRIVERS,
    OFF_REASONS,
    CgroupLayout,
    CgroupUnavailable,
    Driver,
    Version,
    detect_layout,
    kubelet_cgroups,
)
from exporter.sources.kernel_files import read_kernel_file
from exporter.sources.pod_list import each_pod_item
from reconciler.cpuset import MAX_CPU_ID, CPUSetError, parse_cpuset
from reconciler.enforcement import DEFAULT_RECONCILE_PERIOD, EnforcedCpusets

log = logging.getLogger("podres.cgroup")

OPERATIONS: Final = {"cgroup": ("read",)}  # what a poll reads (a source off is no error)

# A cpuset line for 8192 CPUs written as singletons is about 40 KiB.
MAX_CPUSET_BYTES = 64 << 10

# Files holding a cgroup's effective cpuset, in the order tried, per cgroup version. The
# configured ``cpuset.cpus`` is the fallback: equal to the effective set unless a parent
# narrows it.
_EFFECTIVE: dict[Version, tuple[str, ...]] = {
    "v2": ("cpuset.cpus.effective", "cpuset.cpus"),
    "v1": ("cpuset.effective_cpus", "cpuset.cpus"),
}

# A container's cgroup name per driver and runtime (the containerID's scheme); an unknown
# runtime tries them all. CRI-O's "crio-conmon-<id>" (its monitor process) is never read.
_CONTAINER_NAMES: dict[Driver, dict[str, tuple[str, ...]]] = {
    "systemd": {"containerd": ("cri-containerd-{}.scope",), "cri-o": ("crio-{}.scope",),
                "docker": ("docker-{}.scope",)},
    "cgroupfs": {"containerd": ("{}",), "cri-o": ("crio-{}",), "docker": ("{}",)},
}
_RUNTIME_ID = re.compile(r"^([a-z0-9.+-]+)://([0-9a-f]+)$")


# -- what /pods says ------------------------------------------------------------------------

class ContainerRef(NamedTuple):
    name: str
    runtime: str  # "containerd", "cri-o", "docker", …: the containerID's scheme
    id: str


class PodRef(NamedTuple):
    namespace: str
    name: str
    uid: str
    containers: tuple[ContainerRef, ...]


def _running_refs(statuses: object, same: dict[str, str]) -> list[ContainerRef]:
    refs: list[ContainerRef] = []
    if not isinstance(statuses, list):
        return refs
    for st in statuses:
        if not isinstance(st, dict) or not isinstance(st.get("name"), str):
            continue
        state = st.get("state")
        # A finished init container keeps its last containerID, but its cgroup is gone.
        if isinstance(state, dict) and "running" not in state:
            continue
        m = _RUNTIME_ID.match(str(st.get("containerID") or ""))
        if m:
            name, runtime = st["name"], m.group(1)
            refs.append(ContainerRef(same.setdefault(name, name),
                                     same.setdefault(runtime, runtime), m.group(2)))
    return refs


def pod_refs_from_pod_list(obj: object) -> tuple[PodRef, ...]:
    """The running containers of each pod in a ``v1.PodList`` (the kubelet's ``/pods``, as
    ``json.loads`` gives it). Tolerant: an item it cannot use is skipped (the pod-spec
    parser reports bad lists)."""
    items = obj.get("items") if isinstance(obj, dict) else None
    return pod_refs_from_items(items if isinstance(items, list) else ())


def pod_refs_from_body(body: bytes) -> tuple[PodRef, ...] | None:
    """:func:`pod_refs_from_pod_list` of a ``/pods`` body, decoded pod by pod (see
    ``each_pod_item``); ``None`` when the body is not JSON (the poll reports that)."""
    items = each_pod_item(body)
    if items is not None:
        with contextlib.suppress(ValueError, RecursionError):
            return pod_refs_from_items(items)
    try:
        return pod_refs_from_pod_list(json.loads(body))
    except (ValueError, RecursionError):
        return None


def pod_refs_from_items(items: Iterable[object]) -> tuple[PodRef, ...]:
    """The running containers of each pod among a ``v1.PodList``'s items."""
    refs: list[PodRef] = []
    # One object for each namespace, container name and runtime, however many pods repeat
    # it: the refs are kept until /pods changes, and each item is decoded apart (some
    # 0.4 MB of copies on a 1000-pod node).
    same: dict[str, str] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        meta, status = item.get("metadata"), item.get("status")
        if not isinstance(meta, dict) or not isinstance(status, dict):
            continue
        uid = meta.get("uid")
        if not isinstance(uid, str) or not uid:
            continue
        containers = (_running_refs(status.get("initContainerStatuses"), same)
                      + _running_refs(status.get("containerStatuses"), same))
        if containers:
            namespace = str(meta.get("namespace") or "default")
            refs.append(PodRef(same.setdefault(namespace, namespace),
                               str(meta.get("name") or ""), uid, tuple(containers)))
    return tuple(refs)


def cpu_manager_reconcile_period(configz: object) -> float:
    """``cpuManagerReconcilePeriod`` from a ``/configz`` body, in seconds; the kubelet's
    default (10 s) when absent or unreadable."""
    cfg = configz.get("kubeletconfig", configz) if isinstance(configz, Mapping) else None
    value = cfg.get("cpuManagerReconcilePeriod") if isinstance(cfg, Mapping) else None
    if not isinstance(value, str):
        return DEFAULT_RECONCILE_PERIOD
    try:
        return parse_duration(value)
    except argparse.ArgumentTypeError:
        return DEFAULT_RECONCILE_PERIOD


# -- reading --------------------------------------------------------------------------------

class EntryError(NamedTuple):
    namespace: str
    pod: str
    container: str | None  # None: the pod itself
    message: str


class Gone(NamedTuple):
    """A cgroup ``/pods`` names that is not there: the container exited or restarted under
    a new id, the pod was deleted, or it is not started yet. ``key`` is the container id
    (the pod uid for a pod)."""

    key: str
    entry: EntryError


@dataclass(frozen=True, slots=True)
class CgroupReading:
    enforced: EnforcedCpusets = field(default_factory=EnforcedCpusets)
    errors: tuple[EntryError, ...] = ()
    layout: CgroupLayout | None = None
    off: str | None = None  # why the source is off; None when it read
    off_reason: str | None = None  # one of OFF_REASONS when off
    gone: tuple[Gone, ...] = ()
    # Cumulative CPU time each container's (and pod's) own cgroup has used, in seconds:
    # v1 ``cpuacct.usage``, v2 ``cpu.stat`` ``usage_usec``.
    container_usage: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    pod_usage: Mapping[tuple[str, str], float] = field(default_factory=dict)


_CpusetCache = dict[bytes, frozenset[int]]
# Distinct cpuset texts on a node are few (the shared pools, one per exclusive slice); the
# bound only matters under long churn, where starting afresh is as good as anything.
_CACHE_LIMIT = 4096


def _parse(data: bytes, cache: _CpusetCache, max_cpu: int = MAX_CPU_ID) -> frozenset[int]:
    """A cpuset file's content; identical texts (every node-shared container holds the
    same) give the same set object, parsed once (the cache holds one ``max_cpu``'s).
    Raises ``CPUSetError``, also for an id past ``max_cpu``, the node's last CPU."""
    cpus = cache.get(data)
    if cpus is None:
        try:
            cpus = parse_cpuset(data.decode("ascii"), max_cpu)
        except UnicodeDecodeError:
            raise CPUSetError("not ASCII text") from None
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[data] = cpus
    return cpus


def _read_cpuset(path: str, names: Sequence[str], cache: _CpusetCache,
                 max_cpu: int = MAX_CPU_ID) -> frozenset[int]:
    """The first of ``names`` present in the cgroup ``path``. Raises ``OSError`` or
    ``CPUSetError``; ``FileNotFoundError`` when none of the files is there."""
    missing: FileNotFoundError | None = None
    for name in names:
        try:
            data = read_kernel_file(f"{path}/{name}", MAX_CPUSET_BYTES)
        except FileNotFoundError as exc:
            missing = exc
            continue
        cpus = _parse(data, cache, max_cpu)
        if not cpus:
            raise CPUSetError(f"{name}: empty")
        return cpus
    assert missing is not None
    raise missing


def _pod_dirs(layout: CgroupLayout) -> dict[str, str]:
    """uid → pod cgroup directory, from one listing per QoS directory. A QoS directory that
    cannot be listed for want of permission turns the source off: no pod could be found."""
    dirs: dict[str, str] = {}
    for qos_dir, prefix in layout.qos_dirs:
        parent = os.path.join(layout.base, qos_dir)
        start = len(prefix) + len("pod")
        try:
            with os.scandir(parent) as entries:
                for entry in entries:
                    name = entry.name
                    if layout.driver == "systemd":
                        if not name.endswith(".slice"):
                            continue
                        name = name[:-len(".slice")]
                    if (not name.startswith(prefix + "pod") or len(name) == start
                            or not entry.is_dir(follow_symlinks=False)):
                        continue
                    uid = name[start:]
                    if layout.driver == "systemd":
                        uid = uid.replace("_", "-")
                    dirs.setdefault(uid, entry.path)
        except PermissionError:
            raise CgroupUnavailable(f"{parent}: permission denied (cannot list its pod "
                                    "cgroups)", "permission_denied") from None
        except OSError:
            continue  # a QoS class without pods may have no directory at all
    return dirs


def _exists(path: str) -> bool | None:
    """Whether ``path`` is there; ``None`` when that cannot be told (permission)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return None
    return True


def _describe(exc: Exception, path: str) -> str:
    if isinstance(exc, PermissionError):
        return f"{exc.filename or path}: permission denied"
    if isinstance(exc, FileNotFoundError):
        if _exists(path) is False:
            return f"cgroup {path} is gone (the container exited, or is not started yet)"
        return f"no cpuset file in {path} (cpuset controller not enabled there?)"
    if isinstance(exc, CPUSetError):
        return f"{path}: unreadable cpuset: {exc}"
    if isinstance(exc, OSError):
        return f"{path}: {exc.strerror or exc}"
    return f"{path}: {exc}"


# The CPU time a cgroup has used: the file and how to read it, per cgroup version.
_USAGE_FILE: dict[Version, str] = {"v1": "cpuacct.usage", "v2": "cpu.stat"}
_USAGE_LINE = b"usage_usec "


def _usage_seconds(data: bytes, version: Version) -> float:
    """v1 ``cpuacct.usage``: nanoseconds; v2 ``cpu.stat``: the ``usage_usec`` line, in
    microseconds. Raises ``ValueError`` on anything else."""
    if version == "v1":
        return int(data.strip()) / 1e9
    for line in data.splitlines():
        if line.startswith(_USAGE_LINE):
            return int(line[len(_USAGE_LINE):].strip()) / 1e6
    raise ValueError("no usage_usec line")


class _PodReader:
    """Reads one poll's pods into the accumulators."""

    def __init__(self, layout: CgroupLayout, cache: _CpusetCache,
                 max_cpu: int = MAX_CPU_ID) -> None:
        self.layout = layout
        self.cache = cache
        self.max_cpu = max_cpu
        self.names = _EFFECTIVE[layout.version]
        self.scopes = _CONTAINER_NAMES[layout.driver]
        self.every_scope = tuple(dict.fromkeys(n for names in self.scopes.values()
                                               for n in names))
        self.containers: dict[tuple[str, str, str], frozenset[int]] = {}
        self.pods: dict[tuple[str, str], frozenset[int]] = {}
        self.errors: list[EntryError] = []
        self.gone: list[Gone] = []
        self.container_usage: dict[tuple[str, str, str], float] = {}
        self.pod_usage: dict[tuple[str, str], float] = {}

    def pod(self, ref: PodRef, pod_dir: str | None) -> None:
        if pod_dir is None:
            self.gone.append(Gone(ref.uid, EntryError(
                ref.namespace, ref.name, None, f"no pod cgroup for uid {ref.uid} (the pod "
                "was deleted, or is not started yet)")))
            return
        if self.layout.version == "v2":
            self._pod_cpuset(ref, pod_dir)
        usage = self._usage(pod_dir, ref.namespace, ref.name, None)
        if usage is not None:
            self.pod_usage.setdefault((ref.namespace, ref.name), usage)
        for c in ref.containers:
            key = (ref.namespace, ref.name, c.name)
            try:
                path, cpus = self._container(pod_dir, c)
            except (OSError, CPUSetError) as exc:
                path = f"{pod_dir}/{self._scope_names(c)[0].format(c.id)}"
                entry = EntryError(*key, _describe(exc, path))
                if isinstance(exc, FileNotFoundError) and _exists(path) is False:
                    self.gone.append(Gone(c.id, entry))
                else:
                    self.errors.append(entry)
                continue
            if key not in self.containers:
                self.containers[key] = cpus
                usage = self._usage(path, *key)
                if usage is not None:
                    self.container_usage[key] = usage

    def _scope_names(self, c: ContainerRef) -> tuple[str, ...]:
        return self.scopes.get(c.runtime, self.every_scope)

    def _container(self, pod_dir: str, c: ContainerRef) -> tuple[str, frozenset[int]]:
        """The container's cgroup directory and enforced cpuset."""
        names = self._scope_names(c)
        for scope in names[:-1]:  # an unknown runtime: the first scope that is there
            path = f"{pod_dir}/{scope.format(c.id)}"
            try:
                return path, _read_cpuset(path, self.names, self.cache, self.max_cpu)
            except FileNotFoundError:
                continue
        path = f"{pod_dir}/{names[-1].format(c.id)}"
        return path, _read_cpuset(path, self.names, self.cache, self.max_cpu)

    def _usage(self, path: str, namespace: str, pod: str, container: str | None,
               ) -> float | None:
        """The CPU time used by the cgroup at ``path`` (in the cpuset hierarchy), read from
        the same cgroup in the CPU-accounting hierarchy; None when there is none."""
        layout = self.layout
        if layout.usage_base is None:
            return None
        if layout.usage_base != layout.base:
            path = layout.usage_base + path[len(layout.base):]
        try:
            data = read_kernel_file(f"{path}/{_USAGE_FILE[layout.version]}",
                                    MAX_CPUSET_BYTES)
            return _usage_seconds(data, layout.version)
        except FileNotFoundError:
            return None  # gone meanwhile, or no CPU accounting there: no reading
        except (OSError, ValueError) as exc:
            message = (f"{path}/{_USAGE_FILE[layout.version]}: permission denied"
                       if isinstance(exc, PermissionError)
                       else f"{path}/{_USAGE_FILE[layout.version]}: unreadable CPU usage: "
                       f"{exc.strerror if isinstance(exc, OSError) else exc}")
            self.errors.append(EntryError(namespace, pod, container, message))
            return None

    def _pod_cpuset(self, ref: PodRef, pod_dir: str) -> None:
        """cgroup v2 only: an empty ``cpuset.cpus`` there means "not set" (inherited),
        which v1 cannot express (its pod cpusets are always filled in)."""
        try:
            cpus = _parse(read_kernel_file(f"{pod_dir}/cpuset.cpus", MAX_CPUSET_BYTES),
                          self.cache, self.max_cpu)
        except FileNotFoundError:
            return
        except (OSError, CPUSetError) as exc:
            self.errors.append(EntryError(ref.namespace, ref.name, None,
                                          _describe(exc, pod_dir)))
            return
        if cpus:
            self.pods.setdefault((ref.namespace, ref.name), cpus)


def read_enforced(layout: CgroupLayout, pods: Iterable[PodRef],
                  cache: _CpusetCache | None = None, max_cpu: int = MAX_CPU_ID,
                  ) -> CgroupReading:
    """The enforced cpuset and CPU usage of every running container of ``pods`` (and of
    each pod's cgroup), with an error entry for each one that could not be read and a
    ``Gone`` entry for each cgroup that is not there. ``cache`` (parsed cpuset texts) may
    be kept from one poll to the next, for one ``max_cpu`` (the node's last CPU: a cpuset
    naming a CPU past it is an error entry). Raises ``CgroupUnavailable`` when the pod
    cgroups cannot be listed."""
    dirs = _pod_dirs(layout)
    reader = _PodReader(layout, {} if cache is None else cache, max_cpu)
    for ref in pods:
        reader.pod(ref, dirs.get(ref.uid))
    return CgroupReading(EnforcedCpusets(reader.containers, reader.pods),
                         tuple(reader.errors), layout, gone=tuple(reader.gone),
                         container_usage=reader.container_usage, pod_usage=reader.pod_usage)


def capture_tree(root: str, layout: CgroupLayout, pods: Iterable[PodRef], dest: str) -> int:
    """Copy the files this source reads for ``pods`` (and only those) from ``root`` into
    ``dest``, paths kept, so that ``dest`` serves as ``--cgroup.root`` for a fixture
    directory's ``cgroup/`` (``record``). Returns the number of files copied; files that
    cannot be read are left out, as the reading would show them."""
    wanted: list[str] = [os.path.join(root, "cgroup.controllers")] \
        if layout.version == "v2" else []
    dirs = _pod_dirs(layout)
    scopes = _CONTAINER_NAMES[layout.driver]
    every = tuple(dict.fromkeys(n for names in scopes.values() for n in names))
    for qos_dir, _ in layout.qos_dirs:
        os.makedirs(os.path.join(dest, os.path.relpath(os.path.join(layout.base, qos_dir),
                                                       root)), exist_ok=True)
    usage = _USAGE_FILE[layout.version]

    def with_usage(path: str, names: Iterable[str]) -> list[str]:
        files = [f"{path}/{name}" for name in names]
        if layout.usage_base is not None:
            files.append(f"{layout.usage_base}{path[len(layout.base):]}/{usage}")
        return files

    for ref in pods:
        pod_dir = dirs.get(ref.uid)
        if pod_dir is None:
            continue
        wanted += with_usage(pod_dir, ("cpuset.cpus",))
        for c in ref.containers:
            for scope in scopes.get(c.runtime, every):
                wanted += with_usage(f"{pod_dir}/{scope.format(c.id)}",
                                     _EFFECTIVE[layout.version])
    copied = 0
    for path in dict.fromkeys(wanted):
        try:
            data = read_kernel_file(path, MAX_CPUSET_BYTES)
        except OSError:
            continue
        target = os.path.join(dest, os.path.relpath(path, root))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(data)
        copied += 1
    return copied


# Takes a node's container references from its /pods when called; None: no pod list.
LazyRefs = Callable[[], Sequence[PodRef] | None]
_NO_POD_LIST = ("no pod list from the kubelet's /pods to match cgroups to containers (set "
                "--kubelet.url)")


class CgroupSource:
    """The source as the poll uses it: off (said once in the log, until it works again)
    without a pod list or without a usable cgroup hierarchy, with the reason."""

    def __init__(self, root: str = "/sys/fs/cgroup", driver: str = "auto",
                 kubelet_root: str = "") -> None:
        if driver not in DRIVERS:
            raise UserError(f"--cgroup.driver must be one of {', '.join(DRIVERS)}")
        self.root = root
        self.driver = driver
        self.kubelet_root = kubelet_root
        self._said: str | None = None
        self._cache: _CpusetCache = {}
        self._max_cpu = MAX_CPU_ID

    def read(self, pods: Sequence[PodRef] | LazyRefs | None, configz: object = None,
             max_cpu: int = MAX_CPU_ID) -> CgroupReading:
        """``pods``: the references, or what takes them from ``/pods`` when first needed
        (None: a body that is not a pod list); ``configz``: the kubelet's parsed
        ``/configz``, for its ``cgroupRoot`` and ``cgroupDriver`` (the flags, when set,
        win); ``max_cpu``: the node's last CPU."""
        if pods is None:
            return self._off(_NO_POD_LIST, "no_pod_list")
        try:
            layout = detect_layout(self.root, self.driver, kubelet_cgroups(
                configz, self.kubelet_root, self.driver))
            # Only once there are cgroups to match: a node whose hierarchy has no kubepods
            # (or none readable) never takes, nor holds, a reference per container.
            if callable(pods):
                pods = pods()
                if pods is None:
                    return self._off(_NO_POD_LIST, "no_pod_list")
            if max_cpu != self._max_cpu:  # the cache holds sets checked against the old bound
                self._cache, self._max_cpu = {}, max_cpu
            reading = read_enforced(layout, pods, self._cache, max_cpu)
        except CgroupUnavailable as exc:
            return self._off(str(exc), exc.reason)
        self._said = None
        return reading

    def _off(self, reason: str, code: str) -> CgroupReading:
        assert code in OFF_REASONS
        message = f"cgroup source off: {reason}"
        if message != self._said:
            log.warning("%s", message)
            self._said = message
        return CgroupReading(off=message, off_reason=code)


__all__ = [  # the layout's names are used through this module too
    "DRIVERS", "OFF_REASONS", "CgroupLayout", "CgroupReading", "CgroupSource",
    "CgroupUnavailable", "ContainerRef", "Driver", "EntryError", "Gone", "LazyRefs", "PodRef",
    "Version",
    "capture_tree", "cpu_manager_reconcile_period", "detect_layout", "kubelet_cgroups",
    "pod_refs_from_body", "pod_refs_from_items", "pod_refs_from_pod_list", "read_enforced",
]
