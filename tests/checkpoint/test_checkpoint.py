"""Checkpoint format detection (docs/design.md#checkpoints), read-only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.errors import SourceError
from exporter.sources.checkpoint import (
    CheckpointError,
    CheckpointFiles,
    CPUCheckpoint,
    MemoryCheckpoint,
    checkpoint_facts,
    parse_checkpoint,
    parse_cpu_checkpoint,
    parse_memory_checkpoint,
)
from reconciler.cpuset import parse_cpuset
from reconciler.snapshot import CheckpointFacts

DATA = Path(__file__).parent / "data"


def read_cpu_checkpoint(path: Path) -> CPUCheckpoint:
    cp = parse_checkpoint("cpu_manager_state", path.read_bytes())
    assert isinstance(cp, CPUCheckpoint)
    return cp


def read_memory_checkpoint(path: Path) -> MemoryCheckpoint:
    cp = parse_checkpoint("memory_manager_state", path.read_bytes())
    assert isinstance(cp, MemoryCheckpoint)
    return cp


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


async def test_reading_never_writes(tmp_path: Path) -> None:
    target = tmp_path / "cpu_manager_state"
    target.write_text((DATA / "cpu_v3").read_text())
    os.chmod(target, 0o444)
    before = target.stat().st_mtime_ns
    assert await CheckpointFiles(tmp_path).read() == (("cpu_manager_state",
                                                       target.read_bytes()),)
    assert target.stat().st_mtime_ns == before


async def test_files_follow_a_rename_over(tmp_path: Path) -> None:
    """The kubelet writes aside and renames over: a new inode is read again even when
    size and mtime happen to match."""
    files = CheckpointFiles(tmp_path)
    target = tmp_path / "cpu_manager_state"
    target.write_bytes(b"A" * 10)
    assert await files.read() == (("cpu_manager_state", b"A" * 10),)
    aside = tmp_path / "aside"
    aside.write_bytes(b"B" * 10)
    stat = target.stat()
    os.utime(aside, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(aside, target)
    assert await files.read() == (("cpu_manager_state", b"B" * 10),)
    target.unlink()
    assert await files.read() == ()


async def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "memory_manager_state")
    with pytest.raises(SourceError, match="not a regular file"):
        await CheckpointFiles(tmp_path).read()


def test_facts_of_good_files() -> None:
    facts, errors = checkpoint_facts([
        ("memory_manager_state", (DATA / "mem_v1").read_bytes()),
        ("cpu_manager_state", (DATA / "cpu_v3").read_bytes())])
    assert errors == []
    assert facts == CheckpointFacts((("cpu_manager_state", "v3"),
                                     ("memory_manager_state", "v1")), True)
    assert checkpoint_facts([])[0] == CheckpointFacts((), None)
    safe, _ = checkpoint_facts([("cpu_manager_state", (DATA / "cpu_v4").read_bytes())])
    assert safe.downgrade_unsafe is False


def test_a_corrupt_file_has_no_format_and_an_unknown_verdict() -> None:
    """Not the last good format: the file's format is simply not known while corrupt."""
    facts, errors = checkpoint_facts([
        ("cpu_manager_state", b"{not json"),
        ("memory_manager_state", (DATA / "mem_v1").read_bytes())])
    assert facts.formats == (("memory_manager_state", "v1"),)
    assert facts.downgrade_unsafe is None
    assert [(e.source, e.operation) for e in errors] == [("checkpoint", "parse")]
    assert "cpu_manager_state" in str(errors[0])
    # One unsafe file is enough to know the answer, whatever the other holds.
    unsafe, _ = checkpoint_facts([("cpu_manager_state", (DATA / "cpu_v3").read_bytes()),
                                  ("memory_manager_state", b"\xff\xfe")])
    assert unsafe.downgrade_unsafe is True


@pytest.mark.parametrize("data", [
    b'{"policyName": "static", "defaultCpuSet": "' + b"9" * 5000 + b'"}',
    b'{"policyName": "static", "checksum": ' + b"9" * 5000 + b"}",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"policyName": "static", "data": "' + b"[" * 50_000 + b'"}',
    b"\xff\xfe not text",
])
def test_hostile_checkpoint_bytes_are_parse_errors(data: bytes) -> None:
    with pytest.raises(CheckpointError):
        parse_checkpoint("cpu_manager_state", data)
    facts, errors = checkpoint_facts([("cpu_manager_state", data)])
    assert facts.formats == () and len(errors) == 1


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
