"""The CPU and memory managers' checkpoint files: read-only, format-detected (see
docs/design.md#checkpoints).

``cpu_manager_state``: V2 (``policyName``, ``defaultCpuSet``, ``entries``, ``checksum``), V3
(V2 + top-level ``podEntries``: 1.36 with the gate on; older kubelets refuse it, the
downgrade trap) and V4 (V2 fields inline + ``data``, a JSON *string* holding the real
content, + ``dataChecksum``). ``memory_manager_state``: V1, V2 (+ ``podEntries``) and V3
(+ ``data``). Keys are matched case-insensitively; checksums are never verified; nothing is
ever written.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from exporter.errors import SourceError, UserError
from exporter.files import read_file_bytes
from reconciler.cpuset import MAX_CPU_ID, CPUSetError, parse_cpuset
from reconciler.snapshot import CheckpointFacts

MAX_BYTES = 64 << 20
SOURCE = "checkpoint"
OPERATIONS: dict[str, tuple[str, ...]] = {SOURCE: ("read", "parse")}  # what a poll reads


class CheckpointError(ValueError):
    """A checkpoint file that is not one of the known formats."""


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    numa_affinity: tuple[int, ...]
    type: str
    size: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What every checkpoint has: its detected format and policy name."""

    format: str
    policy_name: str

    @property
    def downgrade_unsafe(self) -> bool:
        return False

    @property
    def file(self) -> str:
        return ""


@dataclass(frozen=True, slots=True)
class CPUCheckpoint(Checkpoint):
    """``format``: "v2" | "v3" | "v4"."""

    default_cpuset: frozenset[int]
    entries: dict[str, dict[str, frozenset[int]]] = field(default_factory=dict)
    pod_entries: dict[str, frozenset[int]] = field(default_factory=dict)

    @property
    def downgrade_unsafe(self) -> bool:
        """A 1.36 V3 file: kubelets before 1.36 refuse to start with it."""
        return self.format == "v3"

    @property
    def file(self) -> str:
        return "cpu_manager_state"


@dataclass(frozen=True, slots=True)
class MemoryCheckpoint(Checkpoint):
    """``format``: "v1" | "v2" | "v3"."""

    machine_state: dict[str, Any] = field(default_factory=dict)
    entries: dict[str, dict[str, tuple[MemoryEntry, ...]]] = field(default_factory=dict)
    pod_entries: dict[str, tuple[MemoryEntry, ...]] = field(default_factory=dict)

    @property
    def downgrade_unsafe(self) -> bool:
        return self.format == "v2"

    @property
    def file(self) -> str:
        return "memory_manager_state"


def _loose(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).replace("_", "").lower(): v for k, v in obj.items()}


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # also numbers past int's digit limit
        raise CheckpointError(f"{what}: invalid JSON: {_reason(exc)}") from None
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{what}: not a JSON object")
    top = _loose(obj)
    data = top.get("data")
    if data is None:
        return top
    if isinstance(data, str):
        try:
            inner = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise CheckpointError(f"{what}: 'data' is not a JSON string: {_reason(exc)}"
                                  ) from None
    else:
        inner = data
    if not isinstance(inner, Mapping):
        raise CheckpointError(f"{what}: 'data' does not hold an object")
    merged = dict(top)
    merged.update(_loose(inner))
    merged["data"] = True
    return merged


def _cpuset(value: object, where: str, max_cpu: int = MAX_CPU_ID) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, str):
        raise CheckpointError(f"{where}: a cpuset must be a string")
    try:
        return parse_cpuset(value, max_cpu)
    except (CPUSetError, ValueError) as exc:  # ValueError: an id past int's digit limit
        raise CheckpointError(f"{where}: {_reason(exc)}") from None


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CheckpointError(f"{where}: expected an object")
    return value


V = TypeVar("V")


def _entry_tables(top: Mapping[str, Any], what: str, parse: Callable[[object, str], V],
                  pod_key: str) -> tuple[dict[str, dict[str, V]], dict[str, V]]:
    """``entries{podUID:{container:value}}`` and ``podEntries{podUID:value}`` (the value
    bare, or wrapped in an object under ``pod_key``), parsed by ``parse``."""
    entries: dict[str, dict[str, V]] = {}
    for uid, containers in _mapping(top.get("entries"), f"{what} entries").items():
        row = _mapping(containers, f"{what} entries.{uid}")
        entries[str(uid)] = {str(c): parse(v, f"{what} entries.{uid}.{c}")
                             for c, v in row.items()}
    pod_entries: dict[str, V] = {}
    for uid, value in _mapping(top.get("podentries"), f"{what} podEntries").items():
        if isinstance(value, Mapping):
            value = _loose(value).get(pod_key)
        pod_entries[str(uid)] = parse(value, f"{what} podEntries.{uid}")
    return entries, pod_entries


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)[:200]


def _format(top: Mapping[str, Any], names: tuple[str, str, str]) -> str:
    """The format generation: plain, with top-level ``podEntries`` (1.36), or with an
    inline ``data`` string (1.37)."""
    if top.get("data") is True:
        return names[2]
    return names[1] if "podentries" in top else names[0]


def parse_cpu_checkpoint(text: str, max_cpu: int = MAX_CPU_ID) -> CPUCheckpoint:
    """``max_cpu``: the node's last CPU where it is known; a cpuset naming one past it is
    refused before any set is built (docs/design.md#cpu-lists)."""
    what = "cpu_manager_state"
    top = _load(text, what)
    if "policyname" not in top:
        raise CheckpointError(f"{what}: no policyName (not a CPU manager checkpoint)")
    entries, pod_entries = _entry_tables(top, what, partial(_cpuset, max_cpu=max_cpu),
                                         "cpuset")
    fmt = _format(top, ("v2", "v3", "v4"))
    return CPUCheckpoint(fmt, str(top.get("policyname") or ""),
                         _cpuset(top.get("defaultcpuset"), f"{what} defaultCpuSet", max_cpu),
                         entries, pod_entries)


def _blocks(value: object, where: str) -> tuple[MemoryEntry, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise CheckpointError(f"{where}: expected a list of memory blocks")
    out = []
    for block in value:
        if not isinstance(block, Mapping):
            raise CheckpointError(f"{where}: a memory block is not an object")
        b = _loose(block)
        numa = b.get("numaaffinity") or []
        size = b.get("size", 0)
        if not isinstance(numa, list) or not all(isinstance(n, int) for n in numa) \
                or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise CheckpointError(f"{where}: malformed memory block")
        out.append(MemoryEntry(tuple(numa), str(b.get("type") or "memory"), size))
    return tuple(out)


def parse_memory_checkpoint(text: str, max_cpu: int = MAX_CPU_ID) -> MemoryCheckpoint:
    """``max_cpu`` is not used: memory blocks name NUMA nodes, not CPUs."""
    what = "memory_manager_state"
    top = _load(text, what)
    if "policyname" not in top:
        raise CheckpointError(f"{what}: no policyName (not a memory manager checkpoint)")
    entries, pod_entries = _entry_tables(top, what, _blocks, "memoryblocks")
    fmt = _format(top, ("v1", "v2", "v3"))
    machine = top.get("machinestate")
    return MemoryCheckpoint(fmt, str(top.get("policyname") or ""),
                            dict(machine) if isinstance(machine, Mapping) else {},
                            entries, pod_entries)


PARSERS: dict[str, Callable[[str, int], Checkpoint]] = {
    "cpu_manager_state": parse_cpu_checkpoint,
    "memory_manager_state": parse_memory_checkpoint,
}


def parse_checkpoint(name: str, data: bytes, max_cpu: int = MAX_CPU_ID) -> Checkpoint:
    """Parse the checkpoint file ``name`` from its bytes; ``CheckpointError`` when it is
    not one of the known formats (or names a CPU past ``max_cpu``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{name}: not UTF-8 text") from None
    return PARSERS[name](text, max_cpu)


def checkpoint_facts(files: Iterable[tuple[str, bytes]], max_cpu: int = MAX_CPU_ID,
                     ) -> tuple[CheckpointFacts, list[SourceError]]:
    """Formats and the downgrade trap of the files present, and an error for each file
    that cannot be parsed. An unparsable file has no format (the last good one would be a
    lie), and makes "downgrade-unsafe" unknown unless another file already is unsafe."""
    formats: list[tuple[str, str]] = []
    unsafe: list[bool] = []
    errors: list[SourceError] = []
    for name, data in sorted(files):
        try:
            parsed = parse_checkpoint(name, data, max_cpu)
        except CheckpointError as exc:
            errors.append(SourceError(SOURCE, "parse", str(exc)))
            continue
        formats.append((name, parsed.format))
        unsafe.append(parsed.downgrade_unsafe)
    verdict: bool | None
    if any(unsafe):
        verdict = True
    elif errors or not unsafe:
        verdict = None
    else:
        verdict = False
    return CheckpointFacts(tuple(formats), verdict), errors


class CheckpointFiles:
    """The checkpoint files under the kubelet's root directory, read as bytes. A file is
    read again only when its inode, size or modification time changed (the kubelet
    replaces it by a rename), and then in a worker thread: a file of many megabytes must
    not hold up the event loop that answers scrapes."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._cache: dict[str, tuple[tuple[int, int, int], bytes]] = {}

    async def read(self) -> tuple[tuple[str, bytes], ...]:
        """``(name, bytes)`` of each file present; ``SourceError`` when one that exists
        cannot be read."""
        found: list[tuple[str, bytes]] = []
        for name in PARSERS:
            path = self.root / name
            try:
                st = os.stat(path)
            except FileNotFoundError:
                self._cache.pop(name, None)
                continue
            except OSError as exc:
                raise SourceError(SOURCE, "read", f"{path}: {exc.strerror or exc}") from None
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            cached = self._cache.get(name)
            if cached is None or cached[0] != stamp:
                try:
                    cached = (stamp, await asyncio.to_thread(read_file_bytes, path, MAX_BYTES))
                except UserError as exc:
                    self._cache.pop(name, None)
                    raise SourceError(SOURCE, "read", str(exc)) from None
                self._cache[name] = cached
            found.append((name, cached[1]))
        return tuple(found)
