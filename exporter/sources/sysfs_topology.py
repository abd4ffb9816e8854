"""The CPU topology read from sysfs the way the kubelet reads it: cAdvisor's
``GetNodesInfo`` (``lib/utils/sysinfo``, ``lib/utils/sysfs``) and ``GetSockets``, then the
kubelet's ``topology.Discover`` (``reconciler.kubelet_topology``). See
docs/design.md#topology for the rules and their upstream sources.

Each odd rule here is one the kubelet follows on real machines: CPUs come from a NUMA
node's ``cpuN`` links, not ``cpulist``; an unparsable ``cpu/online`` makes every CPU
offline; a CPU without ``core_id`` is skipped; the first unreadable cache file stops a
node's cache walk. Where the dump of a machine lacks the links a live kernel always has,
``cpulist`` (then ``cpumap``) stands in for them.
"""

from __future__ import annotations

import fnmatch
import platform
import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

from reconciler.kubelet_topology import DiscoverError, RawCore, RawNode, discover
from reconciler.snapshot import KernelTopology, Topology

# Go's strings.TrimSpace: ASCII white space plus NEL and NBSP, not Python's \x1c-\x1f.
_GO_SPACE: Final = " \t\n\v\f\r\x85\xa0"
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")
_SCAN_INT = re.compile(r"[ \t\r]*([+-]?[0-9]+)")
_MEMTOTAL = re.compile(r"MemTotal:\s*([0-9]+) kB")
_PHYSICAL_ID = re.compile(r"^physical id\s*:\s*([0-9]+)$", re.M)
_HEX_WORD = re.compile(r"[0-9a-fA-F]{1,16}\Z")
_MAX_TEXT = 1 << 20  # no sysfs file a reader needs is near this


class ReadError(Exception):
    """cAdvisor's read fails: the kubelet's ``Discover`` gets no machine."""


class _Missing(Exception):
    """A file that does not exist, where cAdvisor skips the CPU rather than failing."""


def _read(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_MAX_TEXT).decode("latin-1")
    except FileNotFoundError:
        raise _Missing(str(path)) from None
    except OSError as exc:
        raise ReadError(f"{path}: {exc.strerror or exc}") from None


def _atoi(text: str, path: Path) -> int:
    """``strconv.Atoi`` of a trimmed file: sign and digits only."""
    value = text.strip(_GO_SPACE)
    if not _GO_INT.match(value) or len(value) > 19:
        raise ReadError(f"{path}: {value[:40]!r} is not an integer")
    return int(value)


def _scan_int(text: str) -> int | None:
    """``fmt.Sscanf(text, "%d")``: leading blanks, sign and digits; the rest ignored."""
    m = _SCAN_INT.match(text)
    return int(m.group(1)) if m and len(m.group(1)) <= 19 else None


def _glob(directory: Path, pattern: str) -> list[Path]:
    """``filepath.Glob(dir/pattern)``: matching names in byte order."""
    try:
        names = [p.name for p in directory.iterdir()]
    except OSError:
        return []
    return [directory / n for n in sorted(names) if fnmatch.fnmatchcase(n, pattern)]


def has_cpu_dirs(root: str | Path) -> bool:
    """Whether ``root`` looks like a sysfs mount at all (a ``cpuN`` directory under
    ``devices/system/cpu``): a wrong ``--sysfs`` is the operator's error, not a machine."""
    return bool(_glob(Path(root) / "devices" / "system" / "cpu", "cpu*[0-9]"))


def _online_test(cpu_dir: Path) -> Callable[[int], bool]:
    """``IsCPUOnline``: no ``online`` file, every CPU is online; an empty or unparsable one
    (up to the piece that names the CPU) makes it offline."""
    path = cpu_dir / "online"
    try:
        text = _read(path)
    except _Missing:
        return lambda cpu: True
    except ReadError:
        return lambda cpu: False
    pieces = text.strip(_GO_SPACE).split(",") if text else None

    def online(cpu: int) -> bool:
        if pieces is None:
            return False
        cpu &= 0xFFFF  # cAdvisor keeps CPU ids as uint16
        for piece in pieces:
            bounds = piece.split("-", 2)
            if len(bounds) == 3 or not all(_is_u16(b) for b in bounds):
                return False
            lo, hi = int(bounds[0]), int(bounds[-1])
            if lo > hi:
                return False
            if lo <= cpu <= hi:
                return True
        return False
    return online


def _is_u16(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5 and int(text) <= 0xFFFF


class _Reader:
    """One read of a sysfs tree, as cAdvisor and ``Discover`` make it."""

    def __init__(self, root: Path, goarch: str) -> None:
        self.cpu_dir = root / "devices" / "system" / "cpu"
        self.node_dir = root / "devices" / "system" / "node"
        self.s390x = goarch == "s390x"
        self.online = _online_test(self.cpu_dir)

    def nodes(self) -> tuple[list[RawNode], int, list[int]]:
        """(nodes with their cores, cAdvisor's logical CPU count, every node id)."""
        node_dirs = _glob(self.node_dir, "node*[0-9]")
        if not node_dirs:
            return self._by_package()
        nodes, count, ids = [], 0, []
        for path in node_dirs:
            m = re.search(r"node(\d*)$", path.name)
            if not m or not m.group(1):
                raise ReadError(f"{path}: not a NUMA node directory name")
            node_id = int(m.group(1))
            cores = self._cores(self._node_cpus(path))
            count += sum(len(c[0]) for c in cores)
            self._check_node_files(path)
            nodes.append(RawNode(node_id, self._with_caches(cores)))
            ids.append(node_id)
        return nodes, count, ids

    def _node_cpus(self, node: Path) -> list[int]:
        """The node's CPUs: its ``cpuN`` links (which point at ``cpu/cpuN``), else, in a
        dump that lost them, its ``cpulist`` or ``cpumap``."""
        links = [int(m.group(1)) for p in _glob(node, "cpu*[0-9]")
                 if (m := re.search(r"cpu(\d+)$", p.name))]
        if links:
            return links
        for name, parse in (("cpulist", _parse_list), ("cpumap", _parse_map)):
            try:
                cpus = parse(_read(node / name))
            except (_Missing, ReadError, ValueError):
                continue
            # In byte order of the link names the kernel would have made.
            return sorted(cpus, key=lambda c: f"cpu{c}")
        return []

    def _check_node_files(self, node: Path) -> None:
        """The node files whose bad contents fail cAdvisor's whole read."""
        try:
            if not _MEMTOTAL.search(_read(node / "meminfo").strip(_GO_SPACE)):
                raise ReadError(f"{node / 'meminfo'}: no MemTotal")
        except _Missing:
            pass
        try:
            for part in _read(node / "distance").strip(_GO_SPACE).split(" "):
                if not part.isascii() or not part.isdigit():
                    raise ReadError(f"{node / 'distance'}: {part[:20]!r} is not a distance")
        except _Missing:
            pass
        for page in _glob(node / "hugepages", "*"):
            size = page.name.split("-")[1:2]
            if not size or not size[0].split("kB")[0].isdigit():
                raise ReadError(f"{page}: not a huge page size")
            try:
                if _scan_int(_read(page / "nr_hugepages")) is None:
                    raise ReadError(f"{page / 'nr_hugepages'}: not a number")
            except _Missing:
                raise ReadError(f"{page / 'nr_hugepages'}: missing") from None

    def _by_package(self) -> tuple[list[RawNode], int, list[int]]:
        """``getCPUTopology``: no NUMA directories, one node per package; every ``cpuN``
        directory counts as a CPU, online or not."""
        paths = _glob(self.cpu_dir, "cpu*[0-9]")
        if not paths:
            raise ReadError(f"no CPU is available under {self.cpu_dir}")
        by_package: dict[int, list[int]] = {}
        for path in paths:
            m = re.search(r"cpu(\d+)$", path.name)
            if not m:
                continue
            try:
                package = _atoi(_read(path / "topology" / "physical_package_id"), path)
            except _Missing:
                continue
            by_package.setdefault(package, []).append(int(m.group(1)))
        nodes = [RawNode(p, self._with_caches(self._cores(cpus)))
                 for p, cpus in sorted(by_package.items())]
        return nodes, len(paths), sorted(by_package)

    def _cores(self, cpus: list[int]) -> list[tuple[list[int], int]]:
        """``getCoresInfo``: online CPUs grouped by core id and package (and book and
        drawer on s390x), in the order first met; CPUs missing a file are skipped."""
        cores: dict[tuple[object, ...], tuple[list[int], int]] = {}
        for cpu in cpus:
            if not self.online(cpu):
                continue
            topo = self.cpu_dir / f"cpu{cpu}" / "topology"
            try:
                key: tuple[object, ...] = (_atoi(_read(topo / "core_id"), topo),
                                           _atoi(_read(topo / "physical_package_id"), topo))
                if self.s390x:
                    key += (_read(topo / "book_id").strip(_GO_SPACE),
                            _read(topo / "drawer_id").strip(_GO_SPACE))
            except _Missing:
                continue
            cores.setdefault(key, ([], int(str(key[1]))))[0].append(cpu)
        return list(cores.values())

    def _with_caches(self, cores: list[tuple[list[int], int]]) -> tuple[RawCore, ...]:
        """``addCacheInfo``: each core's first uncore cache, walked core by core until the
        first cache that cannot be read, which ends the node's walk."""
        out = [RawCore(tuple(threads), socket) for threads, socket in cores]
        for i, (threads, _) in enumerate(cores):
            caches = self._caches(threads[0])
            if caches is None:
                break
            per_node = len(cores) * len(threads)
            uncore = [cid for cid, level, cpus in caches if level > 2 and cpus != per_node]
            if uncore:
                out[i] = out[i]._replace(uncore_cache=uncore[0])
        return tuple(out)

    def _caches(self, cpu: int) -> list[tuple[int, int, int]] | None:
        """``GetCacheInfo``: (id, level, CPUs sharing) of every ``indexK``; ``None`` when
        any of them cannot be read."""
        base = self.cpu_dir / f"cpu{cpu}" / "cache"
        out = []
        for index in _glob(base, "index*"):
            try:
                cid = 0 if self.s390x else _scan_int(_read(index / "id"))
                size = re.match(r"[ \t\r]*[+-]?[0-9]+K", _read(index / "size"))
                level = _scan_int(_read(index / "level"))
                _read(index / "type")
                shared = _count_map(_read(index / "shared_cpu_map"))
            except (_Missing, ReadError, ValueError):
                return None
            if cid is None or size is None or level is None:
                return None
            out.append((cid, level, shared))
        if not out and not base.is_dir():
            return None
        return out


def _parse_list(text: str) -> list[int]:
    """A ``cpulist`` (``0-3,8``); NUL bytes and blanks around it are dropped."""
    out: list[int] = []
    body = text.replace("\0", "").strip()
    for piece in filter(None, body.split(",")):
        lo, _, hi = piece.partition("-")
        first, last = int(lo), int(hi or lo)
        if last - first > 65535:
            raise ValueError("range too wide")
        out.extend(range(first, last + 1))
    return out


def _parse_map(text: str) -> list[int]:
    """A ``cpumap`` (comma-separated 32-bit hex words, most significant first)."""
    bits = int(text.replace("\0", "").strip().replace(",", "") or "0", 16)
    return [i for i in range(bits.bit_length()) if bits >> i & 1]


def _count_map(text: str) -> int:
    """CPUs in a ``shared_cpu_map``, as cAdvisor's ``getCPUCount`` counts them."""
    total = 0
    for word in text.split(","):
        word = word.strip(_GO_SPACE)
        if not _HEX_WORD.match(word):
            raise ValueError(f"{word[:20]!r} is not a CPU mask word")
        total += bin(int(word, 16)).count("1")
    return total


def _sockets(proc: Path | None, reader: _Reader) -> int:
    """``GetSockets``: distinct ``physical id`` lines of ``/proc/cpuinfo``, else distinct
    package ids of the online CPUs."""
    if proc is not None:
        try:
            found = set(_PHYSICAL_ID.findall(_read(proc / "cpuinfo")))
            if found:
                return len(found)
        except (_Missing, ReadError):
            pass
    packages = set()
    for path in _glob(reader.cpu_dir, "cpu*[0-9]"):
        m = re.search(r"cpu(\d+)$", path.name)
        if m and reader.online(int(m.group(1))):
            try:
                packages.add(_read(path / "topology" / "physical_package_id").strip(_GO_SPACE))
            except (_Missing, ReadError):
                packages.add("0")
    return len(packages)


def _kernel_online(reader: _Reader) -> frozenset[int]:
    """The CPUs the kernel has online, read leniently (a NUL byte or a stray blank in
    ``cpu/online`` does not take a CPU offline for the kernel, whatever cAdvisor makes of
    it); every ``cpuN`` directory on kernels without the file."""
    dirs = frozenset(int(m.group(1)) for p in _glob(reader.cpu_dir, "cpu*[0-9]")
                     if (m := re.search(r"cpu(\d+)$", p.name)))
    try:
        return frozenset(_parse_list(_read(reader.cpu_dir / "online")))
    except (_Missing, ReadError, ValueError):
        return dirs


def _siblings(reader: _Reader, cpus: frozenset[int]) -> tuple[frozenset[int], ...]:
    groups: set[frozenset[int]] = set()
    for cpu in sorted(cpus):
        try:
            group = frozenset(_parse_list(
                _read(reader.cpu_dir / f"cpu{cpu}" / "topology" / "thread_siblings_list")))
        except (_Missing, ReadError, ValueError):
            continue
        if len(group) > 1:
            groups.add(group & cpus)
    return tuple(sorted(groups, key=min))


def _memory(node_dir: Path, node_ids: list[int]) -> tuple[tuple[int, int], ...]:
    out = []
    for node in node_ids:
        try:
            m = _MEMTOTAL.search(_read(node_dir / f"node{node}" / "meminfo"))
        except (_Missing, ReadError):
            continue
        if m:
            out.append((node, int(m.group(1)) * 1024))
    return tuple(out)


def _distances(node_dir: Path, node_ids: list[int]
               ) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Each node's ``distance`` row as cAdvisor reads it (``Node.Distances``), for the
    topology manager's prefer-closest-numa-nodes; a node without one leaves all out, as the
    option then cannot be used (docs/design.md#allocator)."""
    out = []
    for node in node_ids:
        try:
            row = tuple(int(p) for p in _read(node_dir / f"node{node}" / "distance").split())
        except (_Missing, ReadError, ValueError):
            return ()
        out.append((node, row))
    return tuple(sorted(out))


def read_kubelet_topology(root: str | Path, *, proc: str | Path | None = None,
                          goarch: str | None = None) -> Topology:
    """The kubelet's view of the machine under ``root`` (a sysfs mount), with what the
    kernel says beside it. ``proc`` is a procfs mount for ``/proc/cpuinfo`` (the socket
    count); ``goarch`` the architecture whose rules apply (this machine's by default).

    Never raises for what the tree holds: a machine the kubelet cannot read comes back
    with no CPUs and ``kernel.discover_error`` saying why."""
    arch = goarch or _goarch()
    reader = _Reader(Path(root), arch)
    online = _kernel_online(reader)
    kernel_nodes: list[int] = []
    try:
        nodes, count, kernel_nodes = reader.nodes()
        sockets = _sockets(Path(proc) if proc is not None else None, reader)
        cpus, counts = discover(nodes, count, sockets)
    except (ReadError, DiscoverError) as exc:
        kernel = KernelTopology(online, tuple(kernel_nodes), (), str(exc))
        return Topology((), (), counts=None, kernel=kernel)
    kernel = KernelTopology(online, tuple(sorted(kernel_nodes)),
                            _siblings(reader, online), None)
    # Discover's rows are the kubelet's identity already; grouping them again would move
    # a CPU that two NUMA nodes list away from the core the kubelet gave it.
    return Topology(cpus, _memory(reader.node_dir, kernel_nodes), counts=counts,
                    kernel=kernel, distances=_distances(reader.node_dir, kernel_nodes))


def _goarch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
