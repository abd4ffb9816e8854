"""Sizes in words for people: one formatter for every table and message that prints bytes
(``snapshot``, ``history``, ``plan``, ``explain``); JSON outputs keep bytes."""

from __future__ import annotations

_BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def human_bytes(n: int | None) -> str:
    """Bytes in binary units for a table (6442450944 → ``6 GiB``, 1610612736 →
    ``1.5 GiB``, to one decimal); ``-`` for ``None``."""
    if n is None:
        return "-"
    for unit, size in _BINARY_UNITS:
        if abs(n) >= size:
            return f"{n / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} B"
