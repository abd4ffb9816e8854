"""Where the kubelet's cgroups are: the cgroup version, the kubepods hierarchy named by the
kubelet's ``cgroupRoot`` and cgroup driver, and the hierarchy holding CPU usage. See
docs/kernel.md#cgroup-layouts, which gives the kubelet's naming rules with their sources.

The kubelet reads ``cgroupRoot`` (``/`` by default, ``/kubelet`` on kind) in cgroupfs form,
adds ``kubepods`` when ``cgroupsPerQOS`` is on (its default), then ``burstable`` or
``besteffort`` for those QoS classes and ``pod<uid>`` for a pod (Guaranteed pods sit in
kubepods itself); the driver turns that internal name into a directory
(k8s.io/kubernetes pkg/kubelet/cm: container_manager_linux.go, qos_container_manager_linux.go,
pod_container_manager_linux.go, cgroup_manager_linux.go ``ToCgroupfs``/``ToSystemd``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from exporter.errors import UserError
from exporter.sources.kernel_files import read_kernel_file

DRIVERS = ("auto", "systemd", "cgroupfs")

Version = Literal["v2", "v1"]
Driver = Literal["systemd", "cgroupfs"]

# cgroup.controllers lists a handful of names.
_MAX_CONTROLLERS_BYTES = 64 << 10

# Why a cgroup source that is on has nothing usable to read: the ``reason`` label of
# ``podres_source_off_reason`` (a bounded set; docs/kernel.md#failures).
OFF_REASONS = ("no_pod_list", "not_mounted", "no_cpuset_controller", "no_kubepods",
               "no_qos_cgroups", "permission_denied", "unreadable")


class CgroupUnavailable(Exception):
    """No usable cgroup hierarchy: the source is off (the message says why, ``reason`` is
    one of ``OFF_REASONS``)."""

    def __init__(self, message: str, reason: str = "no_kubepods") -> None:
        super().__init__(message)
        self.reason = reason


class KubeletCgroups(NamedTuple):
    """How the kubelet names its cgroups: ``cgroupRoot`` (cgroupfs form, ``/`` by default,
    ``/kubelet`` on kind), ``cgroupDriver`` and ``cgroupsPerQOS``, each with where it came
    from (``--cgroup.kubelet-root`` / ``--cgroup.driver``, ``/configz``, or the default)."""

    root: str = "/"
    driver: Driver | None = None  # None: whichever kubepods directory is there
    per_qos: bool = True
    origin: str = "default"

    def describe(self) -> str:
        driver = self.driver or "either driver"
        return f"cgroupRoot {self.root}, {driver} ({self.origin})"


def kubelet_cgroups(configz: object, root_flag: str = "", driver_flag: str = "auto",
                    ) -> KubeletCgroups:
    """The kubelet's cgroup naming from ``/configz`` (``cgroupRoot``, ``cgroupDriver``,
    ``cgroupsPerQOS``), each overridden by its flag when that is set."""
    cfg = configz.get("kubeletconfig", configz) if isinstance(configz, Mapping) else None
    cfg = cfg if isinstance(cfg, Mapping) else {}
    origin = "/configz" if cfg else "default"
    root = cfg.get("cgroupRoot")
    root = root if isinstance(root, str) and root else "/"
    driver: Driver | None = None
    if cfg.get("cgroupDriver") in ("systemd", "cgroupfs"):
        driver = "systemd" if cfg["cgroupDriver"] == "systemd" else "cgroupfs"
    per_qos = cfg.get("cgroupsPerQOS") is not False
    if root_flag:
        root, origin = root_flag, "flags"
    if driver_flag in ("systemd", "cgroupfs"):
        driver, origin = ("systemd" if driver_flag == "systemd" else "cgroupfs"), "flags"
    return KubeletCgroups(root, driver, per_qos, origin)


def cgroup_path(parts: Sequence[str], driver: Driver) -> str:
    """The directory, relative to the hierarchy, of the kubelet's internal cgroup name
    ``parts``, as k8s.io/kubernetes pkg/kubelet/cm/cgroup_manager_linux.go names it:
    ``ToCgroupfs`` joins the parts with ``/``; ``ToSystemd`` writes each ``-`` as ``_``,
    joins the parts with ``-`` and expands the slice (runc's ``systemd.ExpandSlice``: each
    prefix becomes a parent slice), so {kubelet, kubepods, burstable} is
    ``kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice``."""
    if driver == "cgroupfs":
        return "/".join(parts)
    escaped = [p.replace("-", "_") for p in parts]
    return "/".join("-".join(escaped[:i + 1]) + ".slice" for i in range(len(escaped)))


def _root_parts(root: str) -> list[str]:
    """``ParseCgroupfsToCgroupName``: the kubelet reads ``cgroupRoot`` in cgroupfs form
    whatever its driver (container_manager_linux.go, ``NodeAllocatableRoot``)."""
    return [p for p in root.strip("/").split("/") if p]


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    version: Version
    driver: Driver
    base: str  # the hierarchy holding kubepods: the root (v2) or <root>/cpuset (v1)
    root: str = "/"  # the kubelet's cgroupRoot
    # The CPU-accounting hierarchy holding the same tree (v1: cpuacct, mounted apart from
    # cpuset; v2: ``base`` itself); None when there is none (no usage is read).
    usage_base: str | None = None

    @property
    def qos_dirs(self) -> tuple[tuple[str, str], ...]:
        """Each directory holding pod cgroups (Guaranteed, Burstable, BestEffort), relative
        to ``base``, with the name its pod cgroups start with before ``pod<uid>``."""
        kubepods = [*_root_parts(self.root), "kubepods"]
        dirs: list[tuple[str, str]] = []
        for qos in ((), ("burstable",), ("besteffort",)):
            parts = [*kubepods, *qos]
            prefix = "-".join(p.replace("-", "_") for p in parts) + "-" \
                if self.driver == "systemd" else ""
            dirs.append((cgroup_path(parts, self.driver), prefix))
        return tuple(dirs)

    @property
    def kubepods(self) -> str:
        return self.qos_dirs[0][0]


def _isdir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _probe_dir(path: str) -> bool:
    """Whether ``path`` is a directory (not a symlink); raises ``PermissionError`` when a
    parent cannot be searched, which ``os.path.isdir`` would call "no such directory"."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return stat.S_ISDIR(st.st_mode)


def _usage_base(root: str, version: Version, base: str) -> str | None:
    """Where per-cgroup CPU usage is: v2's ``cpu.stat`` is in every cgroup of the unified
    tree; v1's ``cpuacct.usage`` is in the cpuacct hierarchy, mounted alone or with cpu
    (``cpu,cpuacct``, usually with ``cpuacct`` a symlink to it)."""
    if version == "v2":
        return base
    for name in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            return path
    return None


def _version(root: str) -> tuple[Version, str]:
    controllers = os.path.join(root, "cgroup.controllers")
    try:
        try:
            os.lstat(controllers)
        except (FileNotFoundError, NotADirectoryError):
            if _probe_dir(os.path.join(root, "cpuset")):
                return "v1", os.path.join(root, "cpuset")
        else:
            available = read_kernel_file(controllers, _MAX_CONTROLLERS_BYTES).decode(
                "ascii", "replace").split()
            if "cpuset" not in available:
                raise CgroupUnavailable(f"the cpuset controller is not enabled in {root} "
                                        "(cgroup v2)", "no_cpuset_controller")
            return "v2", root
    except PermissionError as exc:
        raise CgroupUnavailable(f"{exc.filename or root}: permission denied (run the "
                                "exporter as root, with the host's cgroup filesystem "
                                "mounted read-only)", "permission_denied") from None
    except OSError as exc:
        raise CgroupUnavailable(f"{controllers}: {exc.strerror or exc}", "unreadable") \
            from None
    raise CgroupUnavailable(f"{root} is not a cgroup mount (neither cgroup.controllers "
                            "nor cpuset/ under it); mount the host's /sys/fs/cgroup "
                            "read-only and point --cgroup.root at it", "not_mounted")


def detect_layout(root: str, driver: str = "auto",
                  kubelet: KubeletCgroups | None = None) -> CgroupLayout:
    """cgroup v2 when ``<root>/cgroup.controllers`` exists, else the v1 ``cpuset``
    controller at ``<root>/cpuset``; the kubepods directory named by the kubelet's
    ``cgroupRoot`` and driver (``kubelet``; ``driver`` when it is not given), the driver
    found from which one is there when it is not known."""
    if driver not in DRIVERS:
        raise UserError(f"--cgroup.driver must be one of {', '.join(DRIVERS)}")
    if kubelet is None:
        kubelet = kubelet_cgroups(None, "", driver)
    version, base = _version(root)
    if not kubelet.per_qos:
        raise CgroupUnavailable("the kubelet runs with cgroupsPerQOS: false: it makes no "
                                "pod cgroups to read", "no_qos_cgroups")
    drivers: tuple[Driver, ...] = (kubelet.driver,) if kubelet.driver else (
        "systemd", "cgroupfs")
    looked: list[str] = []
    for d in drivers:
        layout = CgroupLayout(version, d, base, kubelet.root, _usage_base(root, version, base))
        path = os.path.join(base, layout.kubepods)
        try:
            if _probe_dir(path):
                return layout
        except PermissionError:
            raise CgroupUnavailable(f"{path}: permission denied", "permission_denied") \
                from None
        looked.append(path)
    raise CgroupUnavailable(f"no kubepods hierarchy for {kubelet.describe()}: looked for "
                            f"{' and '.join(looked)}", "no_kubepods")


