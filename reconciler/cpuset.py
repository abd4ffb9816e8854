"""The Linux cpuset list format (``0-3,8,10-11``), as used by sysfs and the kubelet.

Every text read from outside (cgroup files, configz, checkpoints, fixtures, flags) goes
through ``parse_cpuset``, so it must cost time linear in the text and memory bounded by the
CPUs it names, whatever the text holds (docs/design.md#cpu-lists):

* a number is measured before ``int()`` sees it: past ``MAX_CPU_ID``'s digits it is refused
  (Python's ``int()`` itself raises a bare ``ValueError`` past 4300 digits);
* ranges are sorted and merged first and each CPU id is materialised once, so 64 KiB of
  overlapping ``0-1048575`` ranges cost one pass over the text and one 1M-id expansion,
  not one per range;
* where the node is known the caller gives ``max_cpu`` (its highest CPU id) and an id past
  it is refused before anything is expanded: a hostile ``0-1048575`` on a 64-CPU node costs
  nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

# Generous but finite: no real machine has a million CPUs, and a hostile range such as
# "0-999999999" must not allocate a set of that size.
MAX_CPU_ID = 1 << 20
_MAX_DIGITS = len(str(MAX_CPU_ID))
_SHOWN = 40  # characters of a bad element quoted in an error


class CPUSetError(ValueError):
    """A cpuset string that is not in the Linux list format."""


def _quote(text: str) -> str:
    """``text`` for an error message, cut so that a 64 KiB element gives one short line."""
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _cpu_id(text: str, max_cpu: int) -> int:
    """The id, or a ``CPUSetError`` whose message does not repeat ``text``."""
    # ASCII digits only: int() would also take "1_0", "+1" and non-ASCII digits.
    if not (text.isascii() and text.isdigit()):
        raise CPUSetError("not a CPU id")
    digits = text.lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        raise CPUSetError(f"a {len(digits)}-digit CPU id, past the largest possible id "
                          f"{MAX_CPU_ID}")
    cpu = int(digits)
    if cpu > max_cpu:
        raise CPUSetError(f"CPU id {cpu} is past the node's last CPU {max_cpu}")
    return cpu


def parse_cpu_id(text: str, max_cpu: int = MAX_CPU_ID) -> int:
    """One CPU id in ASCII digits, at most ``max_cpu``; anything else is a ``CPUSetError``
    (never int()'s digit-limit ``ValueError``). Costs time linear in ``text``."""
    try:
        return _cpu_id(text, max_cpu)
    except CPUSetError as exc:
        raise CPUSetError(f"{_quote(text)}: {exc}") from None


def _range(part: str, max_cpu: int) -> tuple[int, int]:
    lo_text, sep, hi_text = part.partition("-")
    try:
        lo = _cpu_id(lo_text, max_cpu)
        hi = _cpu_id(hi_text, max_cpu) if sep else lo
    except CPUSetError as exc:
        raise CPUSetError(f"impossible CPU range {_quote(part)}: {exc}") from None
    if hi < lo:
        raise CPUSetError(f"impossible CPU range {_quote(part)}: it ends before it starts")
    return lo, hi


def cpu_ranges(text: str, max_cpu: int = MAX_CPU_ID) -> list[tuple[int, int]]:
    """The disjoint, sorted, inclusive ``(first, last)`` ranges ``text`` names, merged
    (overlapping or adjacent ranges become one) without expanding any of them."""
    text = text.strip()
    if not text:
        return []
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CPUSetError(f"empty element in cpuset {_quote(text)}")
        ranges.append(_range(part, max_cpu))
    ranges.sort()
    merged = [ranges[0]]
    for lo, hi in ranges[1:]:
        last_lo, last_hi = merged[-1]
        if lo <= last_hi + 1:
            if hi > last_hi:
                merged[-1] = (last_lo, hi)
        else:
            merged.append((lo, hi))
    return merged


def parse_cpuset(text: str, max_cpu: int = MAX_CPU_ID) -> frozenset[int]:
    """Parse ``"0-3,8,10-11"`` into ``{0, 1, 2, 3, 8, 10, 11}``; empty text is the empty set.

    ``max_cpu``: the highest CPU id accepted, the node's last CPU where it is known. Raises
    ``CPUSetError`` for anything else (a ``ValueError``)."""
    return frozenset(chain.from_iterable(range(lo, hi + 1)
                                         for lo, hi in cpu_ranges(text, max_cpu)))


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
