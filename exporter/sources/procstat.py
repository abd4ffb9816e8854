"""Per-CPU busy and idle time from ``/proc/stat`` (``--proc.root``, ``/host/proc`` in the
chart). See docs/kernel.md.

Each ``cpuN`` line holds cumulative times in USER_HZ ticks (jiffies): ``user nice system
idle iowait irq softirq steal guest guest_nice``. Busy is ``user + nice + system + irq +
softirq + steal``; idle is ``idle + iowait``. ``guest`` and ``guest_nice`` are left out on
purpose: the kernel already counts guest time inside ``user`` and ``nice`` (see
``account_guest_time``), so adding them would count a virtual machine's CPU time twice.
Older kernels print fewer columns; the missing ones count as 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from exporter.errors import SourceError
from exporter.sources.kernel_files import read_kernel_file
from reconciler.cpuset import MAX_CPU_ID, parse_cpu_id

OPERATIONS: Final = {"procstat": ("read",)}  # what a poll reads

# The cpu lines come first; the long lines (intr, softirq) after them are not needed, so a
# bound that is reached only truncates what is not read anyway.
MAX_PROC_STAT_BYTES = 4 << 20

_BUSY = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal
_IDLE = (3, 4)  # idle iowait
_MIN_FIELDS = 4  # user nice system idle: every kernel has these
_MAX_COUNTER_DIGITS = len(str(2**64 - 1))


@dataclass(frozen=True, slots=True)
class ProcStat:
    """One sample: cumulative busy and idle jiffies per online CPU."""

    user_hz: int
    busy: dict[int, int] = field(default_factory=dict)
    idle: dict[int, int] = field(default_factory=dict)
    malformed: int = 0  # cpuN lines that could not be read (skipped)


def _counter(text: str) -> int:
    """A kernel u64 counter: ASCII digits, at most 20 of them (checked before ``int()``,
    which would take thousands of digits, or raise a bare error past 4300)."""
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_COUNTER_DIGITS:
        raise ValueError(text)
    return int(text)


def parse_proc_stat(text: str, user_hz: int, max_cpu: int = MAX_CPU_ID) -> ProcStat:
    """Parse the text of ``/proc/stat``; a malformed ``cpuN`` line (or one past
    ``max_cpu``, the node's last CPU where it is known) is skipped and counted, never
    fatal. The aggregate ``cpu`` line is ignored (per-CPU lines add up to it)."""
    busy: dict[int, int] = {}
    idle: dict[int, int] = {}
    malformed = 0
    twice: set[int] = set()
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        parts = line.split()
        ident = parts[0][3:]
        try:
            # A CPUSetError (a ValueError) for an id of any length; see reconciler/cpuset.py.
            cpu = parse_cpu_id(ident, max_cpu)
            if len(parts) - 1 < _MIN_FIELDS:
                raise ValueError(line)
            values = [_counter(v) for v in parts[1:11]]
        except ValueError:
            malformed += 1
            continue
        values += [0] * (10 - len(values))
        if cpu in busy or cpu in twice:  # the same CPU twice: trust neither line
            malformed += 1 if cpu in twice else 2
            twice.add(cpu)
            continue
        busy[cpu] = sum(values[i] for i in _BUSY)
        idle[cpu] = sum(values[i] for i in _IDLE)
    for cpu in twice:
        del busy[cpu], idle[cpu]
    return ProcStat(user_hz, busy, idle, malformed)


def clock_ticks() -> int:
    """USER_HZ, the unit of ``/proc/stat`` (100 on every mainstream Linux build)."""
    return int(os.sysconf("SC_CLK_TCK"))


def read_proc_stat(proc_root: str | Path = "/proc", user_hz: int | None = None,
                   max_cpu: int = MAX_CPU_ID) -> ProcStat:
    """One sample of ``<proc_root>/stat``; an unreadable file is a ``SourceError``."""
    return read_proc_stat_file(os.path.join(proc_root, "stat"), user_hz, max_cpu)


def read_proc_stat_file(path: str | Path, user_hz: int | None = None,
                        max_cpu: int = MAX_CPU_ID) -> ProcStat:
    """One sample of a ``/proc/stat`` file (also a fixture directory's ``proc_stat``)."""
    hz = user_hz if user_hz is not None else clock_ticks()
    try:
        data = read_kernel_file(str(path), MAX_PROC_STAT_BYTES, truncate=True)
    except OSError as exc:
        raise SourceError("procstat", "read", f"{path}: {exc.strerror or exc}") from None
    if len(data) >= MAX_PROC_STAT_BYTES:
        # A truncated last line is half a line: drop it rather than misread it.
        data = data[:data.rfind(b"\n") + 1]
    stat = parse_proc_stat(data.decode("ascii", errors="replace"), hz, max_cpu)
    if not stat.busy:
        raise SourceError("procstat", "read", f"{path}: no per-CPU lines")
    return stat
