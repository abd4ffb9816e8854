"""Periodic look at the kubelet's checkpoint files for ``serve``: their formats and the
downgrade trap. Read-only; a file is re-parsed only when its size or mtime changed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from exporter.errors import SourceError
from exporter.sources.checkpoint import (
    CheckpointError,
    read_cpu_checkpoint,
    read_memory_checkpoint,
)

OPERATIONS: Final = {"checkpoint": ("read", "parse")}
Probe = Callable[[], tuple[dict[str, str], bool | None]]


def checkpoint_probe(root: str | Path) -> Probe:
    readers = {"cpu_manager_state": read_cpu_checkpoint,
               "memory_manager_state": read_memory_checkpoint}
    cache: dict[str, tuple[tuple[int, int], str, bool]] = {}

    def probe() -> tuple[dict[str, str], bool | None]:
        formats: dict[str, str] = {}
        unsafe: list[bool] = []
        for name, read in readers.items():
            path = Path(root, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                cache.pop(name, None)
                continue
            except OSError as exc:
                raise SourceError("checkpoint", "read", f"{path}: {exc.strerror}") from None
            stamp = (st.st_size, st.st_mtime_ns)
            if name not in cache or cache[name][0] != stamp:
                try:
                    parsed = read(path)
                except (CheckpointError, OSError, UnicodeDecodeError) as exc:
                    raise SourceError("checkpoint", "parse", f"{path}: {exc}") from None
                cache[name] = (stamp, parsed.format, parsed.downgrade_unsafe)
            formats[name] = cache[name][1]
            unsafe.append(cache[name][2])
        return formats, (any(unsafe) if unsafe else None)

    return probe
