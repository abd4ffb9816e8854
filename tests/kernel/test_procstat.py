"""/proc/stat parsing: busy and idle per CPU, tolerant of what a kernel or a fixture may
hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.errors import SourceError
from exporter.sources.procstat import (
    MAX_PROC_STAT_BYTES,
    clock_ticks,
    parse_proc_stat,
    read_proc_stat,
    read_proc_stat_file,
)

REAL_SHAPE = """\
cpu  9000 900 3000 100000 500 70 30 20 400 40
cpu0 4000 400 1000 50000 200 30 10 10 300 30
cpu1 5000 500 2000 50000 300 40 20 10 100 10
intr 123456 0 0 0
ctxt 999
btime 1700000000
processes 42
procs_running 1
procs_blocked 0
softirq 1 2 3
"""


def test_busy_excludes_guest_and_idle_includes_iowait() -> None:
    stat = parse_proc_stat(REAL_SHAPE, 100)
    # cpu0: user 4000 + nice 400 + system 1000 + irq 30 + softirq 10 + steal 10; guest
    # (300) and guest_nice (30) are already inside user and nice.
    assert stat.busy == {0: 5450, 1: 7570}
    assert stat.idle == {0: 50200, 1: 50300}
    assert stat.malformed == 0 and stat.user_hz == 100


def test_old_kernels_with_fewer_columns() -> None:
    stat = parse_proc_stat("cpu0 10 20 30 40\ncpu1 1 2 3 4 5 6 7\n", 250)
    assert stat.busy == {0: 60, 1: 1 + 2 + 3 + 6 + 7}
    assert stat.idle == {0: 40, 1: 4 + 5}


@pytest.mark.parametrize("line", [
    "cpu0 1 2 3",            # too few columns
    "cpu0 1 2 x 4",          # not a number
    "cpu0 1 -2 3 4",         # negative
    "cpux 1 2 3 4",          # not a CPU number
    "cpu٣ 1 2 3 4",          # a non-ASCII digit
    "cpu0",                  # nothing
])
def test_malformed_lines_are_skipped_and_counted(line: str) -> None:
    stat = parse_proc_stat(f"cpu  1 1 1 1\n{line}\ncpu1 1 1 1 1\n", 100)
    assert stat.busy == {1: 3} and stat.malformed == 1


def test_duplicate_cpu_is_not_trusted() -> None:
    stat = parse_proc_stat("cpu1 1 1 1 1\ncpu1 2 2 2 2\ncpu2 1 0 0 0\ncpu1 3 3 3 3\n", 100)
    assert stat.busy == {2: 1} and stat.malformed == 3


def test_crlf_and_extra_spacing() -> None:
    stat = parse_proc_stat("cpu0   1  2 3 4 \r\ncpu1\t5 6 7 8\r\n", 100)
    assert stat.busy == {0: 6, 1: 18}


def test_read_from_root(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(REAL_SHAPE)
    stat = read_proc_stat(tmp_path, user_hz=100)
    assert stat.busy[1] == 7570


def test_read_uses_the_system_clock_tick(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(REAL_SHAPE)
    assert read_proc_stat(tmp_path).user_hz == clock_ticks() == os.sysconf("SC_CLK_TCK")


def test_the_real_proc_stat_parses() -> None:
    stat = read_proc_stat("/proc")
    assert stat.busy and stat.malformed == 0
    assert set(stat.busy) == set(stat.idle)


def test_missing_or_empty_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="procstat read"):
        read_proc_stat(tmp_path)
    (tmp_path / "stat").write_text("intr 1\n")
    with pytest.raises(SourceError, match="no per-CPU lines"):
        read_proc_stat(tmp_path)
    (tmp_path / "stat").unlink()
    os.mkfifo(tmp_path / "stat")
    with pytest.raises(SourceError, match="not a regular file"):
        read_proc_stat(tmp_path)


def test_oversized_file_keeps_its_complete_lines(tmp_path: Path) -> None:
    filler = "intr " + "0 " * (MAX_PROC_STAT_BYTES // 2) + "\n"
    (tmp_path / "stat").write_text("cpu0 1 1 1 1\ncpu1 2 2 2 2\n" + filler)
    stat = read_proc_stat(tmp_path, user_hz=100)
    assert stat.busy == {0: 3, 1: 6} and stat.malformed == 0


def test_fixture_proc_stat_file(tmp_path: Path) -> None:
    (tmp_path / "proc_stat").write_text(REAL_SHAPE)
    assert read_proc_stat_file(tmp_path / "proc_stat", 100).busy == {0: 5450, 1: 7570}
