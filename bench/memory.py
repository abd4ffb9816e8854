"""Where the resident memory of ``serve`` goes, for bench.scrape.

Resident memory is measured as the kernel counts it (VmRSS), in processes of this run:

- the import floor: a process that imports the runtime dependencies ``serve`` is built on
  (grpcio, aiohttp, protobuf, SQLAlchemy, prometheus-client) and does nothing else; each of
  them is also imported alone, for its share, over the bare interpreter's;
- ``serve``'s imports: a process that imports what ``serve`` imports (the exporter's own
  modules and the further dependencies they bring) without starting it, with and without
  the history store's (on SQLite, its default, the embedded write path: no SQLAlchemy
  until the dashboard API is queried);
- ``serve`` itself at steady state, with and without its history store.

The differences give the breakdown: interpreter, imports by package, the exporter's own
imports, the node's data and sources at run time (ledger, rendered bodies, connections,
worker threads; ``serve`` without history over its imports), and the history store at run
time (beyond its imports). ``smaps_breakdown`` splits a live process's
anonymous memory further by the allocator that holds it: glibc's main heap, the malloc
arenas of other threads (gRPC's and the worker threads'; glibc maps each at a 64 MiB
boundary), and the rest (Python's object arenas, thread stacks, large buffers).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# protobuf through what generated code imports: ``google.protobuf.message`` alone loads
# none of protobuf's runtime (it measured 0.1 MiB), which any user of a message loads.
FLOOR_PACKAGES = (
    "grpc", "aiohttp", "google.protobuf.internal.builder", "sqlalchemy", "prometheus_client")

# What ``serve`` imports, as exporter/commands/serve.py does when it runs; the history
# store's modules only when it is on. On SQLite they are the embedded write path's, without
# SQLAlchemy: its read store is loaded on the API's first request, which the bench does not
# make.
SERVE_MODULES = (
    "exporter.cli", "exporter.commands.serve", "exporter.commands._sources",
    "exporter.kernel", "exporter.reader", "exporter.runtime", "exporter.service",
    "exporter.web.app", "exporter.web.lifecycle", "exporter.web.webconfig",
)
HISTORY_MODULES = ("exporter.history.api", "exporter.history.embedded",
                   "exporter.history.writer")

_ARENA_ALIGN = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit systems
_RANGE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$")


def vm_rss_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024.0, 1)
    raise RuntimeError(f"no VmRSS for process {pid}")


def imports_rss_mib(modules: tuple[str, ...]) -> float:
    """VmRSS of a fresh interpreter after importing ``modules`` (none: the bare one)."""
    code = "".join(f"import {m}\n" for m in modules)
    code += "from bench.memory import vm_rss_mib\nprint(vm_rss_mib())\n"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={"GRPC_VERBOSITY": "ERROR", "PATH": "/usr/bin:/bin",
                                         "PYTHONPATH": str(Path(__file__).parents[1])})
    return float(out.stdout.split()[-1])


def import_figures() -> dict[str, float]:
    """The bare interpreter, the import floor, each floor package's share and the import
    cost of ``serve``; the smallest of three runs each (imports are deterministic, so the
    minimum is the least disturbed)."""
    def least(modules: tuple[str, ...]) -> float:
        return min(imports_rss_mib(modules) for _ in range(3))

    interpreter = least(())
    figures = {"interpreter_mib": interpreter, "import_floor_mib": least(FLOOR_PACKAGES)}
    for package in FLOOR_PACKAGES:
        name = package.split(".")[1 if package.startswith("google.") else 0]
        figures[f"import_{name}_mib"] = round(least((package,)) - interpreter, 1)
    # What serve loads, and nothing more: it never imports prometheus_client (the exporter
    # renders its exposition itself), which the floor counts.
    figures["serve_imports_mib"] = least(SERVE_MODULES + HISTORY_MODULES)
    figures["serve_imports_no_history_mib"] = least(SERVE_MODULES)
    return figures


def smaps_breakdown(pid: int) -> dict[str, float]:
    """A live process's resident memory by what maps it, in MiB: shared libraries and
    other files, glibc's main heap, the malloc arenas of threads, and the rest of the
    anonymous memory (Python's object arenas, stacks, large buffers)."""
    sizes = {"files_mib": 0, "main_heap_mib": 0, "thread_arenas_mib": 0, "other_anon_mib": 0}
    kind = "other_anon_mib"
    arena_end = 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        match = _RANGE.match(line)
        if match:
            start = int(match[1], 16)
            name = match[3]
            if name == "[heap]":
                kind = "main_heap_mib"
            elif name and not name.startswith("["):
                kind = "files_mib"
            elif not name and (start % _ARENA_ALIGN == 0 or start < arena_end):
                # A thread's arena starts at a 64 MiB boundary and grows within it.
                kind = "thread_arenas_mib"
                arena_end = max(arena_end, start - start % _ARENA_ALIGN + _ARENA_ALIGN)
            else:
                kind = "other_anon_mib"
        elif line.startswith("Rss:"):
            sizes[kind] += int(line.split()[1])
    return {key: round(kb / 1024.0, 1) for key, kb in sizes.items()}
