"""Checkpoint format detection (SPEC §2.4), read-only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.errors import SourceError
from exporter.sources.checkpoint import (
    CheckpointError,
    parse_cpu_checkpoint,
    parse_memory_checkpoint,
    read_cpu_checkpoint,
    read_memory_checkpoint,
)
from reconciler.cpuset import parse_cpuset

DATA = Path(__file__).parent / "data"


def test_cpu_v2() -> None:
    cp = read_cpu_checkpoint(DATA / "cpu_v2")
    assert cp.format == "v2"
    assert not cp.downgrade_unsafe
    assert cp.policy_name == "static"
    assert cp.default_cpuset == parse_cpuset("0-1,6-7")
    assert cp.entries["uid-a"]["app"] == parse_cpuset("2-3")
    assert cp.pod_entries == {}


def test_cpu_v3_is_the_downgrade_trap() -> None:
    cp = read_cpu_checkpoint(DATA / "cpu_v3")
    assert cp.format == "v3"
    assert cp.downgrade_unsafe
    assert cp.pod_entries["uid-web"] == parse_cpuset("2-4")
    # Every container of a pod-level pod has a row; the shared ones carry the pool.
    assert cp.entries["uid-web"]["mesh-proxy"] == parse_cpuset("4")


def test_cpu_v4_reads_the_inline_data_string() -> None:
    cp = read_cpu_checkpoint(DATA / "cpu_v4")
    assert cp.format == "v4"
    assert not cp.downgrade_unsafe
    assert cp.pod_entries["uid-web"] == parse_cpuset("2-4")


def test_key_case_is_tolerated() -> None:
    cp = read_cpu_checkpoint(DATA / "cpu_oddcase")
    assert cp.default_cpuset == parse_cpuset("0-3")
    assert cp.pod_entries == {"u": parse_cpuset("1")}
    assert cp.format == "v3"


@pytest.mark.parametrize(("name", "fmt", "unsafe"),
                         [("mem_v1", "v1", False), ("mem_v2", "v2", True),
                          ("mem_v3", "v3", False)])
def test_memory_formats(name: str, fmt: str, unsafe: bool) -> None:
    cp = read_memory_checkpoint(DATA / name)
    assert cp.format == fmt
    assert cp.downgrade_unsafe is unsafe
    assert cp.entries["uid-a"]["app"][0].size == 4294967296
    assert cp.entries["uid-a"]["app"][0].numa_affinity == (0,)
    if fmt != "v1":
        assert cp.pod_entries["uid-a"][0].size == 6442450944


def test_reading_never_writes(tmp_path: Path) -> None:
    target = tmp_path / "cpu_manager_state"
    target.write_text((DATA / "cpu_v3").read_text())
    os.chmod(target, 0o444)
    before = target.stat().st_mtime_ns
    read_cpu_checkpoint(target)
    assert target.stat().st_mtime_ns == before


@pytest.mark.parametrize("text", ["", "[]", "{", '{"entries": {}}',
                                  '{"policyName": "static", "defaultCpuSet": "3-1"}',
                                  '{"policyName": "static", "data": "{nope"}',
                                  '{"policyName": "static", "entries": {"u": {"c": 5}}}'])
def test_malformed_cpu_checkpoints_are_clear_errors(text: str) -> None:
    with pytest.raises(CheckpointError):
        parse_cpu_checkpoint(text)


@pytest.mark.parametrize("text", [
    "null",
    '{"policyName": "Static", "entries": {"u": {"c": 1}}}',
    '{"policyName": "Static", "entries": {"u": {"c": [{"size": -1}]}}}',
])
def test_malformed_memory_checkpoints_are_clear_errors(text: str) -> None:
    with pytest.raises(CheckpointError):
        parse_memory_checkpoint(text)


def test_missing_file_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="cpu_manager_state"):
        read_cpu_checkpoint(tmp_path / "cpu_manager_state")
    bad = tmp_path / "memory_manager_state"
    bad.write_text("not json")
    with pytest.raises(SourceError, match="invalid JSON"):
        read_memory_checkpoint(bad)
