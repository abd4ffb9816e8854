"""The node's CPU topology: from sysfs (injectable root, so tests use fixture trees) or from
a ``topology.json`` file (docs/design.md#sources)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

from exporter.errors import SourceError, UserError
from exporter.files import read_file_bytes
from reconciler.cpuset import MAX_CPU_ID, CPUSetError, parse_cpuset
from reconciler.snapshot import CPUInfo, Topology

OPERATIONS: Final = {"sysfs": ("read",), "topology": ("read", "parse")}
_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")
_MEMTOTAL = re.compile(r"MemTotal:\s+(\d+)\s*kB")


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace").strip()


def read_sysfs_topology(root: str | Path = "/sys") -> Topology:
    """Online CPUs with core, package and NUMA node, and memory per NUMA node.

    ``root`` is the sysfs mount (``/sys`` on a host, ``/host/sys`` in a DaemonSet, a
    fixture tree in tests).
    """
    base = Path(root)
    cpu_dir = base / "devices" / "system" / "cpu"
    node_dir = base / "devices" / "system" / "node"
    try:
        online_text = _read(cpu_dir / "online")
        online = parse_cpuset(online_text)
    except FileNotFoundError:
        online = frozenset(int(m.group(1)) for p in _safe_iterdir(cpu_dir)
                           if (m := _CPU_DIR.match(p.name)))
    except (OSError, CPUSetError) as exc:
        raise SourceError("sysfs", "read", f"{cpu_dir / 'online'}: {exc}") from None
    if not online:
        raise SourceError("sysfs", "read", f"no CPUs found under {cpu_dir}")

    numa_of: dict[int, int] = {}
    memory: list[tuple[int, int]] = []
    for node_path in sorted(_safe_iterdir(node_dir), key=lambda p: p.name):
        m = _NODE_DIR.match(node_path.name)
        if not m:
            continue
        node = int(m.group(1))
        try:
            for cpu in parse_cpuset(_read(node_path / "cpulist")):
                numa_of[cpu] = node
        except (OSError, CPUSetError) as exc:
            raise SourceError("sysfs", "read", f"{node_path / 'cpulist'}: {exc}") from None
        try:
            mem = _MEMTOTAL.search(_read(node_path / "meminfo"))
            if mem:
                memory.append((node, int(mem.group(1)) * 1024))
        except OSError:
            pass

    cpus = []
    for cpu in sorted(online):
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        try:
            core = int(_read(topo / "core_id"))
            socket = int(_read(topo / "physical_package_id"))
        except (OSError, ValueError) as exc:
            raise SourceError("sysfs", "read", f"{topo}: {exc}") from None
        cpus.append(CPUInfo(cpu, core, socket, numa_of.get(cpu, 0),
                            _uncore_id(cpu_dir / f"cpu{cpu}")))
    return Topology(tuple(cpus), tuple(memory))


def _uncore_id(cpu_path: Path) -> int | None:
    """The id of the CPU's L3 (uncore) cache, ``cache/index3/id``; ``None`` where the
    kernel does not expose one (no L3, older kernels, some VMs): the CPU manager then puts
    every CPU in one cache."""
    try:
        return int(_read(cpu_path / "cache" / "index3" / "id"))
    except (OSError, ValueError):
        return None


def _safe_iterdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


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
    if not cpus:
        raise SourceError("topology", "parse", f"{origin}: no CPUs")
    return Topology(tuple(sorted(cpus, key=lambda c: c.id)), tuple(memory))


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
    return {
        "cpus": [cpu_to_json(c) for c in topology.cpus],
        "memory": [{"numa_node": n, "bytes": b} for n, b in topology.memory],
    }


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
