"""The Linux cpuset list format (``0-3,8,10-11``), as used by sysfs and the kubelet."""

from __future__ import annotations

from collections.abc import Iterable

# Generous but finite: no real machine has a million CPUs, and a hostile range such as
# "0-999999999" must not allocate a set of that size.
MAX_CPU_ID = 1 << 20


class CPUSetError(ValueError):
    """A cpuset string that is not in the Linux list format."""


def parse_cpuset(text: str) -> frozenset[int]:
    """Parse ``"0-3,8,10-11"`` into ``{0, 1, 2, 3, 8, 10, 11}``; empty text is the empty set."""
    text = text.strip()
    if not text:
        return frozenset()
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CPUSetError(f"empty element in cpuset {text!r}")
        lo_text, sep, hi_text = part.partition("-")
        # ASCII digits only: int() would also take "1_0", "+1" and non-ASCII digits.
        if not all(t.isascii() and t.isdigit() for t in ((lo_text, hi_text) if sep
                                                         else (lo_text,))):
            raise CPUSetError(f"not a CPU id or range: {part!r}")
        lo = int(lo_text)
        hi = int(hi_text) if sep else lo
        if lo < 0 or hi < lo or hi > MAX_CPU_ID:
            raise CPUSetError(f"impossible CPU range {part!r}")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpuset(cpus: Iterable[int]) -> str:
    """Format CPU ids as the shortest Linux list: ``{0,1,2,3,8}`` → ``"0-3,8"``."""
    ordered = sorted(set(cpus))
    if not ordered:
        return ""
    parts: list[str] = []
    start = prev = ordered[0]
    for cpu in ordered[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)
