"""The node's CPU topology: from sysfs (injectable root, so tests use fixture trees) or from
a ``topology.json`` file (docs/design.md#sources)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from exporter.errors import SourceError, UserError
from exporter.files import read_file_bytes
from exporter.sources.sysfs_topology import has_cpu_dirs, read_kubelet_topology
from reconciler import kubelet_topology
from reconciler.cpuset import MAX_CPU_ID, CPUSetError, format_cpuset, parse_cpuset
from reconciler.snapshot import CPUInfo, KernelTopology, Topology, TopologyCounts

OPERATIONS: Final = {"sysfs": ("read",), "topology": ("read", "parse")}


def read_sysfs_topology(root: str | Path = "/sys", *, proc: str | Path | None = None,
                        goarch: str | None = None) -> Topology:
    """The CPUs as the kubelet sees them (core, package, NUMA node, uncore cache), memory
    per NUMA node, and what the kernel says beside it (docs/design.md#topology).

    ``root`` is the sysfs mount (``/sys`` on a host, ``/host/sys`` in a DaemonSet, a
    fixture tree in tests); ``proc`` a procfs for ``cpuinfo``, by default the ``proc``
    beside ``root`` when there is one. A tree the kubelet cannot read gives a topology
    with no CPUs and the reason in ``kernel.discover_error``; a root with no CPU
    directory at all is a ``SourceError`` (a wrong ``--sysfs``, not a machine).
    """
    base = Path(root)
    if not has_cpu_dirs(base):
        raise SourceError("sysfs", "read",
                          f"no CPUs found under {base / 'devices' / 'system' / 'cpu'}")
    if proc is None and (base.parent / "proc" / "cpuinfo").is_file():
        proc = base.parent / "proc"
    return read_kubelet_topology(base, proc=proc, goarch=goarch)


def topology_from_json(obj: Any, origin: str = "topology.json") -> Topology:
    """Parse the ``topology.json`` of a fixture directory."""
    if not isinstance(obj, dict) or not isinstance(obj.get("cpus"), list):
        raise SourceError("topology", "parse", f"{origin}: expected an object with a 'cpus' list")
    cpus = []
    seen: set[int] = set()
    for item in obj["cpus"]:
        try:
            uncore = item.get("uncore")
            cpu = CPUInfo(int(item["id"]), int(item.get("core", item["id"])),
                          int(item.get("socket", 0)), int(item.get("numa_node", 0)),
                          None if uncore is None else int(uncore))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            raise SourceError("topology", "parse",
                              f"{origin}: bad CPU entry {_short(item)}") from None
        if not 0 <= cpu.id <= MAX_CPU_ID or cpu.id in seen:
            raise SourceError("topology", "parse", f"{origin}: duplicate or impossible CPU "
                              f"id {cpu.id}")
        seen.add(cpu.id)
        cpus.append(cpu)
    memory = []
    for item in obj.get("memory") or ():
        try:
            memory.append((int(item["numa_node"]), int(item["bytes"])))
        except (KeyError, TypeError, ValueError, OverflowError):
            raise SourceError("topology", "parse",
                              f"{origin}: bad memory entry {_short(item)}") from None
    counts = _counts_from_json(obj.get("counts"), origin)
    kernel = _kernel_from_json(obj.get("kernel"), origin)
    if not cpus and kernel is None:
        raise SourceError("topology", "parse", f"{origin}: no CPUs")
    distances = _distances_from_json(obj.get("distances"), origin)
    if not cpus:  # a machine the kubelet reads no CPU of (docs/design.md#topology)
        return Topology((), tuple(memory), counts=counts, kernel=kernel, distances=distances)
    return replace(kubelet_topology.topology(cpus, tuple(memory), counts=counts,
                                             kernel=kernel), distances=distances)


def _distances_from_json(obj: Any, origin: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """``{"0": [10, 21], "1": [21, 10]}``: each NUMA node's sysfs distance row."""
    if obj is None:
        return ()
    try:
        return tuple(sorted((int(n), tuple(int(d) for d in row)) for n, row in obj.items()))
    except (AttributeError, TypeError, ValueError, OverflowError):
        raise SourceError("topology", "parse",
                          f"{origin}: bad distances {_short(obj)}") from None


def _counts_from_json(obj: Any, origin: str) -> TopologyCounts | None:
    if obj is None:
        return None
    try:
        return TopologyCounts(*(int(obj[k]) for k in TopologyCounts._fields))
    except (KeyError, TypeError, ValueError, OverflowError):
        raise SourceError("topology", "parse", f"{origin}: bad 'counts' {_short(obj)}") from None


def _kernel_from_json(obj: Any, origin: str) -> KernelTopology | None:
    """The kernel's side of a recorded node (docs/design.md#topology)."""
    if obj is None:
        return None
    try:
        error = obj.get("discover_error")
        return KernelTopology(
            online=parse_cpuset(str(obj.get("online", ""))),
            numa_nodes=tuple(sorted(int(n) for n in obj.get("numa_nodes", ()))),
            siblings=tuple(parse_cpuset(str(g)) for g in obj.get("siblings", ())),
            discover_error=None if error is None else str(error)[:500])
    except (AttributeError, TypeError, ValueError, OverflowError, CPUSetError):
        raise SourceError("topology", "parse", f"{origin}: bad 'kernel' {_short(obj)}") from None


def _short(item: object) -> str:
    text = repr(item)
    return text if len(text) <= 120 else text[:117] + "..."


def cpu_to_json(c: CPUInfo) -> dict[str, int]:
    """One CPU of ``topology.json``; ``uncore`` only when known, so files stay as before."""
    out = {"id": c.id, "core": c.core, "socket": c.socket, "numa_node": c.numa_node}
    if c.uncore is not None:
        out["uncore"] = c.uncore
    return out


def topology_to_json(topology: Topology) -> dict[str, Any]:
    """The ``topology.json`` form; the kubelet's counts and the kernel's view only where a
    live read gave them, so hand-written files stay as they are."""
    out: dict[str, Any] = {
        "cpus": [cpu_to_json(c) for c in topology.cpus],
        "memory": [{"numa_node": n, "bytes": b} for n, b in topology.memory],
    }
    if topology.distances:
        out["distances"] = {str(n): list(row) for n, row in topology.distances}
    if topology.counts is not None and topology.counts != kubelet_topology.counts_of(
            topology.cpus):
        out["counts"] = topology.counts._asdict()
    if (kernel := topology.kernel) is not None:
        out["kernel"] = {"online": format_cpuset(kernel.online),
                         "numa_nodes": list(kernel.numa_nodes),
                         "siblings": [format_cpuset(g) for g in kernel.siblings],
                         "discover_error": kernel.discover_error}
    return out


MAX_FILE_BYTES = 16 << 20


def load_topology_file(path: str | Path) -> Topology:
    try:
        text = read_file_bytes(path, MAX_FILE_BYTES).decode("utf-8")
    except UserError as exc:
        raise SourceError("topology", "read", str(exc)) from None
    except UnicodeDecodeError:
        raise SourceError("topology", "read", f"{path}: not UTF-8 text") from None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SourceError("topology", "parse", f"{path}: invalid JSON: {exc}") from None
    return topology_from_json(obj, str(path))


class TopologySource:
    """The topology for a live read: a ``topology.json`` read once, or sysfs, read again
    only when the online CPUs change (one small file decides whether the full read of a
    thousand files is needed)."""

    def __init__(self, *, file: str | None = None, sysfs: str | None = None) -> None:
        self.file = file
        self.sysfs = sysfs
        self._topology: Topology | None = None
        self._key = b""
        # Counts the topologies read: equal generations, equal topology.
        self.generation = 0

    @property
    def name(self) -> str:
        """The source name errors and health are reported under."""
        return "topology" if self.file else "sysfs"

    def read(self) -> Topology:
        """The topology; ``SourceError`` when it cannot be read (asked again next time)."""
        if self.file:
            if self._topology is None:
                self._topology = load_topology_file(self.file)
                self.generation += 1
            return self._topology
        assert self.sysfs is not None
        try:
            key = Path(self.sysfs, "devices/system/cpu/online").read_bytes()
        except OSError:
            key = b"unreadable"
        if self._topology is None or key != self._key:
            self._topology = None
            self._topology = read_sysfs_topology(self.sysfs)
            self._key = key
            self.generation += 1
        return self._topology
