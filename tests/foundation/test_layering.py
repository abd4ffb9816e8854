"""``reconciler/`` is pure: no imports from ``exporter``, no I/O, clock or network."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from foundation.helpers import REPO

RECONCILER = REPO / "reconciler"
FORBIDDEN_MODULES = {
    "exporter", "os", "socket", "time", "pathlib", "grpc", "aiohttp", "asyncio", "io",
    "subprocess", "shutil", "tempfile", "urllib", "http", "ssl", "requests", "sqlite3",
    "sqlalchemy", "signal", "threading", "multiprocessing", "select", "selectors", "glob",
    "fcntl", "mmap", "random", "secrets", "logging", "google", "yaml",
}
FORBIDDEN_CALLS = {"open", "input", "print", "exec", "eval", "__import__", "breakpoint"}
CLOCK_ATTRS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "time_ns"}


def _files() -> list[Path]:
    files = sorted(RECONCILER.rglob("*.py"))
    assert files, "no reconciler sources found"
    return files


def violations(source: str, name: str = "<test>") -> list[str]:
    tree = ast.parse(source, name)
    found: list[str] = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                modules = [node.module]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{name}:{node.lineno}: calls {func.id}()")
            if isinstance(func, ast.Attribute) and func.attr in CLOCK_ATTRS:
                found.append(f"{name}:{node.lineno}: reads a clock ({func.attr}())")
            if isinstance(func, ast.Name) and func.id == "import_module":
                found.append(f"{name}:{node.lineno}: dynamic import")
        for module in modules:
            top = module.split(".")[0]
            if top in FORBIDDEN_MODULES:
                found.append(f"{name}:{node.lineno}: imports {module}")
            if module in ("datetime", "importlib") or module.startswith("importlib."):
                found.append(f"{name}:{node.lineno}: imports {module}")
    return found


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(REPO)))
def test_reconciler_module_is_pure(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), str(path.relative_to(REPO))) == []


def test_covers_subpackages() -> None:
    assert any(p.parent != RECONCILER for p in _files()) or not any(
        d.is_dir() and d.name != "__pycache__" for d in RECONCILER.iterdir())


@pytest.mark.parametrize("source", [
    "import exporter", "from exporter.pb import api_pb2", "import os.path",
    "from os import path", "import time", "from time import monotonic", "import socket",
    "from pathlib import Path", "import grpc.aio", "import aiohttp", "import asyncio",
    "x = open('f')", "import datetime", "from datetime import datetime",
    "d.datetime.now()", "t.monotonic()",
])
def test_detector_catches(source: str) -> None:
    assert violations(source)


@pytest.mark.parametrize("source", [
    "import math", "from collections import defaultdict", "from reconciler.kube import X",
    "from . import cpuset", "from decimal import Decimal", "x.opened()",
])
def test_detector_allows(source: str) -> None:
    assert violations(source) == []
