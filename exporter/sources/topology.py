"""The node's CPU topology: from sysfs (injectable root, so tests use fixture trees) or from
a ``topology.json`` file (SPEC §4.2)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

from exporter.errors import SourceError
from reconciler.cpuset import CPUSetError, parse_cpuset
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
        cpus.append(CPUInfo(cpu, core, socket, numa_of.get(cpu, 0)))
    return Topology(tuple(cpus), tuple(memory))


def _safe_iterdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def topology_from_json(obj: Any, origin: str = "topology.json") -> Topology:
    """Parse the ``topology.json`` of a fixture directory (SPEC §4.2)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("cpus"), list):
        raise SourceError("topology", "parse", f"{origin}: expected an object with a 'cpus' list")
    cpus = []
    seen: set[int] = set()
    for item in obj["cpus"]:
        try:
            cpu = CPUInfo(int(item["id"]), int(item.get("core", item["id"])),
                          int(item.get("socket", 0)), int(item.get("numa_node", 0)))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise SourceError("topology", "parse",
                              f"{origin}: bad CPU entry {item!r}") from None
        if cpu.id < 0 or cpu.id in seen:
            raise SourceError("topology", "parse", f"{origin}: duplicate or negative CPU id "
                              f"{cpu.id}")
        seen.add(cpu.id)
        cpus.append(cpu)
    memory = []
    for item in obj.get("memory") or ():
        try:
            memory.append((int(item["numa_node"]), int(item["bytes"])))
        except (KeyError, TypeError, ValueError):
            raise SourceError("topology", "parse",
                              f"{origin}: bad memory entry {item!r}") from None
    return Topology(tuple(sorted(cpus, key=lambda c: c.id)), tuple(memory))


def topology_to_json(topology: Topology) -> dict[str, Any]:
    return {
        "cpus": [{"id": c.id, "core": c.core, "socket": c.socket, "numa_node": c.numa_node}
                 for c in topology.cpus],
        "memory": [{"numa_node": n, "bytes": b} for n, b in topology.memory],
    }


def load_topology_file(path: str | Path) -> Topology:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError("topology", "read", f"{path}: {exc.strerror or exc}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError("topology", "parse", f"{path}: invalid JSON: {exc}") from None
    return topology_from_json(obj, str(path))
