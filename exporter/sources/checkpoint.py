"""The CPU and memory managers' checkpoint files (SPEC §2.4): read-only, format-detected.

``cpu_manager_state``: V2 (``policyName``, ``defaultCpuSet``, ``entries``, ``checksum``), V3
(V2 + top-level ``podEntries``: 1.36 with the gate on; older kubelets refuse it, the
downgrade trap) and V4 (V2 fields inline + ``data``, a JSON *string* holding the real
content, + ``dataChecksum``). ``memory_manager_state``: V1, V2 (+ ``podEntries``) and V3
(+ ``data``). Keys are matched case-insensitively; checksums are never verified; nothing is
ever written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from exporter.errors import SourceError
from reconciler.cpuset import CPUSetError, parse_cpuset

MAX_BYTES = 64 << 20


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
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{what}: invalid JSON: {exc}") from None
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{what}: not a JSON object")
    top = _loose(obj)
    data = top.get("data")
    if data is None:
        return top
    if isinstance(data, str):
        try:
            inner = json.loads(data)
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{what}: 'data' is not a JSON string: {exc}") from None
    else:
        inner = data
    if not isinstance(inner, Mapping):
        raise CheckpointError(f"{what}: 'data' does not hold an object")
    merged = dict(top)
    merged.update(_loose(inner))
    merged["data"] = True
    return merged


def _cpuset(value: object, where: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, str):
        raise CheckpointError(f"{where}: a cpuset must be a string")
    try:
        return parse_cpuset(value)
    except CPUSetError as exc:
        raise CheckpointError(f"{where}: {exc}") from None


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


def _format(top: Mapping[str, Any], names: tuple[str, str, str]) -> str:
    """The format generation (SPEC §2.4): plain, with top-level ``podEntries`` (1.36), or
    with an inline ``data`` string (1.37)."""
    if top.get("data") is True:
        return names[2]
    return names[1] if "podentries" in top else names[0]


def parse_cpu_checkpoint(text: str) -> CPUCheckpoint:
    what = "cpu_manager_state"
    top = _load(text, what)
    if "policyname" not in top:
        raise CheckpointError(f"{what}: no policyName (not a CPU manager checkpoint)")
    entries, pod_entries = _entry_tables(top, what, _cpuset, "cpuset")
    fmt = _format(top, ("v2", "v3", "v4"))
    return CPUCheckpoint(fmt, str(top.get("policyname") or ""),
                         _cpuset(top.get("defaultcpuset"), f"{what} defaultCpuSet"),
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


def parse_memory_checkpoint(text: str) -> MemoryCheckpoint:
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


def _read(path: str | Path) -> str:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_BYTES:
            raise SourceError("checkpoint", "read", f"{p}: larger than {MAX_BYTES >> 20} MiB")
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SourceError("checkpoint", "read", f"{p}: not UTF-8 text") from None
    except OSError as exc:
        raise SourceError("checkpoint", "read", f"{p}: {exc.strerror or exc}") from None


def read_cpu_checkpoint(path: str | Path) -> CPUCheckpoint:
    """Read (never write) a ``cpu_manager_state``; errors are ``SourceError``."""
    try:
        return parse_cpu_checkpoint(_read(path))
    except CheckpointError as exc:
        raise SourceError("checkpoint", "parse", f"{path}: {exc}") from None


def read_memory_checkpoint(path: str | Path) -> MemoryCheckpoint:
    try:
        return parse_memory_checkpoint(_read(path))
    except CheckpointError as exc:
        raise SourceError("checkpoint", "parse", f"{path}: {exc}") from None
