"""Bounded reads of operator-supplied and kubelet-written files: regular files only, never
a hang on a FIFO nor an endless read of a device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.errors import SourceError, UserError
from exporter.files import read_file_bytes, read_text_file
from exporter.sources.topology import load_topology_file


def test_a_regular_file(short_tmp: Path) -> None:
    (short_tmp / "f").write_bytes(b"abc")
    assert read_file_bytes(short_tmp / "f", 3) == b"abc"
    assert read_text_file(short_tmp / "f", 3) == "abc"


def test_the_limit_is_on_what_is_read(short_tmp: Path) -> None:
    (short_tmp / "f").write_bytes(b"abcd")
    with pytest.raises(UserError, match="larger than 3 bytes"):
        read_file_bytes(short_tmp / "f", 3)


def test_a_fifo_is_refused_without_waiting_for_a_writer(short_tmp: Path) -> None:
    os.mkfifo(short_tmp / "fifo")
    with pytest.raises(UserError, match="not a regular file"):
        read_file_bytes(short_tmp / "fifo", 1 << 20)
    with pytest.raises(SourceError, match="not a regular file"):
        load_topology_file(short_tmp / "fifo")


def test_a_link_to_a_device_is_refused(short_tmp: Path) -> None:
    (short_tmp / "zero").symlink_to("/dev/zero")
    with pytest.raises(UserError, match="not a regular file"):
        read_file_bytes(short_tmp / "zero", 1 << 20)


def test_missing_and_binary_files_name_the_file(short_tmp: Path) -> None:
    with pytest.raises(UserError, match="absent"):
        read_file_bytes(short_tmp / "absent", 10)
    (short_tmp / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="bin: not UTF-8"):
        read_text_file(short_tmp / "bin", 10)
