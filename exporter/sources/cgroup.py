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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

from exporter.errors import UserError
from exporter.flags import parse_duration
from exporter.sources.kernel_files import read_kernel_file
from exporter.sources.pod_list import each_pod_item
from reconciler.cpuset import MAX_CPU_ID, CPUSetError, parse_cpuset
from reconciler.enforcement import DEFAULT_RECONCILE_PERIOD, EnforcedCpusets

log = logging.getLogger("podres.cgroup")

DRIVERS = ("auto", "systemd", "cgroupfs")
OPERATIONS: Final = {"cgroup": ("read",)}  # what a poll reads (a source off is no error)

# A cpuset line for 8192 CPUs written as singletons is about 40 KiB.
MAX_CPUSET_BYTES = 64 << 10

Version = Literal["v2", "v1"]
Driver = Literal["systemd", "cgroupfs"]

# Files holding a cgroup's effective cpuset, in the order tried, per cgroup version. The
# configured ``cpuset.cpus`` is the fallback: equal to the effective set unless a parent
# narrows it.
_EFFECTIVE: dict[Version, tuple[str, ...]] = {
    "v2": ("cpuset.cpus.effective", "cpuset.cpus"),
    "v1": ("cpuset.effective_cpus", "cpuset.cpus"),
}

_QOS_DIRS: dict[Driver, tuple[str, ...]] = {
    "systemd": ("kubepods.slice", "kubepods.slice/kubepods-burstable.slice",
                "kubepods.slice/kubepods-besteffort.slice"),
    "cgroupfs": ("kubepods", "kubepods/burstable", "kubepods/besteffort"),
}
_POD_DIR: dict[Driver, re.Pattern[str]] = {
    "systemd": re.compile(r"^kubepods(?:-burstable|-besteffort)?-pod([0-9A-Za-z_]+)\.slice$"),
    "cgroupfs": re.compile(r"^pod([0-9A-Za-z-]+)$"),
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


# -- the layout -----------------------------------------------------------------------------

class CgroupUnavailable(Exception):
    """No usable cgroup hierarchy: the source is off (the message says why)."""


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    version: Version
    driver: Driver
    base: str  # the hierarchy holding kubepods: the root (v2) or <root>/cpuset (v1)


def _isdir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def detect_layout(root: str, driver: str = "auto") -> CgroupLayout:
    """cgroup v2 when ``<root>/cgroup.controllers`` exists, else the v1 ``cpuset``
    controller at ``<root>/cpuset``; the driver from which kubepods directory is there."""
    if driver not in DRIVERS:
        raise UserError(f"--cgroup.driver must be one of {', '.join(DRIVERS)}")
    version: Version
    controllers = os.path.join(root, "cgroup.controllers")
    if os.path.exists(controllers):
        try:
            available = read_kernel_file(controllers, MAX_CPUSET_BYTES).decode(
                "ascii", "replace").split()
        except OSError as exc:
            raise CgroupUnavailable(f"{controllers}: {exc.strerror or exc}") from None
        if "cpuset" not in available:
            raise CgroupUnavailable(f"the cpuset controller is not enabled in {root} "
                                    "(cgroup v2)")
        version, base = "v2", root
    elif _isdir(os.path.join(root, "cpuset")):
        version, base = "v1", os.path.join(root, "cpuset")
    else:
        raise CgroupUnavailable(f"{root} is not a cgroup mount (neither cgroup.controllers "
                                "nor cpuset/ under it); mount the host's /sys/fs/cgroup "
                                "read-only and point --cgroup.root at it")
    found: list[Driver] = [d for d in ("systemd", "cgroupfs")
                           if _isdir(os.path.join(base, _QOS_DIRS[d][0]))]
    if driver == "auto":
        if not found:
            raise CgroupUnavailable(f"no kubepods hierarchy under {base} (looked for "
                                    "kubepods.slice and kubepods)")
        return CgroupLayout(version, found[0], base)
    chosen: Driver = "systemd" if driver == "systemd" else "cgroupfs"
    if chosen not in found:
        raise CgroupUnavailable(f"no {_QOS_DIRS[chosen][0]} under {base} "
                                f"(--cgroup.driver {driver})")
    return CgroupLayout(version, chosen, base)


# -- reading --------------------------------------------------------------------------------

class EntryError(NamedTuple):
    namespace: str
    pod: str
    container: str | None  # None: the pod itself
    message: str


@dataclass(frozen=True, slots=True)
class CgroupReading:
    enforced: EnforcedCpusets = field(default_factory=EnforcedCpusets)
    errors: tuple[EntryError, ...] = ()
    layout: CgroupLayout | None = None
    off: str | None = None  # why the source is off; None when it read


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
    """uid → pod cgroup directory, from one listing per QoS directory."""
    pattern = _POD_DIR[layout.driver]
    dirs: dict[str, str] = {}
    for qos_dir in _QOS_DIRS[layout.driver]:
        parent = os.path.join(layout.base, qos_dir)
        try:
            with os.scandir(parent) as entries:
                for entry in entries:
                    m = pattern.match(entry.name)
                    if m and entry.is_dir(follow_symlinks=False):
                        uid = m.group(1).replace("_", "-") if layout.driver == "systemd" \
                            else m.group(1)
                        dirs.setdefault(uid, entry.path)
        except OSError:
            continue  # a QoS class without pods may have no directory at all
    return dirs


def _describe(exc: Exception, path: str) -> str:
    if isinstance(exc, FileNotFoundError):
        if not os.path.isdir(path):
            return f"cgroup {path} is gone (the container exited, or is not started yet)"
        return f"no cpuset file in {path} (cpuset controller not enabled there?)"
    if isinstance(exc, CPUSetError):
        return f"{path}: unreadable cpuset: {exc}"
    if isinstance(exc, OSError):
        return f"{path}: {exc.strerror or exc}"
    return f"{path}: {exc}"


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

    def pod(self, ref: PodRef, pod_dir: str | None) -> None:
        if pod_dir is None:
            self.errors.append(EntryError(ref.namespace, ref.name, None,
                                          f"no pod cgroup for uid {ref.uid}"))
            return
        if self.layout.version == "v2":
            self._pod_cpuset(ref, pod_dir)
        for c in ref.containers:
            key = (ref.namespace, ref.name, c.name)
            try:
                self.containers.setdefault(key, self._container(pod_dir, c))
            except (OSError, CPUSetError) as exc:
                self.errors.append(EntryError(*key, _describe(
                    exc, f"{pod_dir}/{self._scope_names(c)[0].format(c.id)}")))

    def _scope_names(self, c: ContainerRef) -> tuple[str, ...]:
        return self.scopes.get(c.runtime, self.every_scope)

    def _container(self, pod_dir: str, c: ContainerRef) -> frozenset[int]:
        names = self._scope_names(c)
        for scope in names[:-1]:  # an unknown runtime: the first scope that is there
            try:
                return _read_cpuset(f"{pod_dir}/{scope.format(c.id)}", self.names, self.cache,
                                    self.max_cpu)
            except FileNotFoundError:
                continue
        return _read_cpuset(f"{pod_dir}/{names[-1].format(c.id)}", self.names, self.cache,
                                    self.max_cpu)

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
    """The enforced cpuset of every running container of ``pods`` (and of each pod whose
    cgroup sets one), with an error entry for each one that could not be read. ``cache``
    (parsed cpuset texts) may be kept from one poll to the next, for one ``max_cpu`` (the
    node's last CPU: a cpuset naming a CPU past it is an error entry)."""
    dirs = _pod_dirs(layout)
    reader = _PodReader(layout, {} if cache is None else cache, max_cpu)
    for ref in pods:
        reader.pod(ref, dirs.get(ref.uid))
    return CgroupReading(EnforcedCpusets(reader.containers, reader.pods),
                         tuple(reader.errors), layout)


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
    for qos_dir in _QOS_DIRS[layout.driver]:
        os.makedirs(os.path.join(dest, os.path.relpath(os.path.join(layout.base, qos_dir),
                                                       root)), exist_ok=True)
    for ref in pods:
        pod_dir = dirs.get(ref.uid)
        if pod_dir is None:
            continue
        wanted.append(f"{pod_dir}/cpuset.cpus")
        for c in ref.containers:
            for scope in scopes.get(c.runtime, every):
                wanted += [f"{pod_dir}/{scope.format(c.id)}/{name}"
                           for name in _EFFECTIVE[layout.version]]
    copied = 0
    for path in wanted:
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


class CgroupSource:
    """The source as the poll uses it: off (said once in the log, until it works again)
    without a pod list or without a cgroup mount."""

    def __init__(self, root: str = "/sys/fs/cgroup", driver: str = "auto") -> None:
        if driver not in DRIVERS:
            raise UserError(f"--cgroup.driver must be one of {', '.join(DRIVERS)}")
        self.root = root
        self.driver = driver
        self._said: str | None = None
        self._cache: _CpusetCache = {}
        self._max_cpu = MAX_CPU_ID

    def read(self, pods: Sequence[PodRef] | None, max_cpu: int = MAX_CPU_ID,
             ) -> CgroupReading:
        if pods is None:
            return self._off("no pod list from the kubelet's /pods to match cgroups to "
                             "containers (set --kubelet.url)")
        try:
            layout = detect_layout(self.root, self.driver)
        except CgroupUnavailable as exc:
            return self._off(str(exc))
        self._said = None
        if max_cpu != self._max_cpu:  # the cache holds sets checked against the old bound
            self._cache, self._max_cpu = {}, max_cpu
        return read_enforced(layout, pods, self._cache, max_cpu)

    def _off(self, reason: str) -> CgroupReading:
        message = f"cgroup source off: {reason}"
        if message != self._said:
            log.warning("%s", message)
            self._said = message
        return CgroupReading(off=message)

