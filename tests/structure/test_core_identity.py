"""One core identity, the kubelet's (docs/design.md#topology): no module but
``reconciler/kubelet_topology.py`` makes cores out of CPUs, and none reads sysfs
``core_id`` but the reader that hands it to that module."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / "reconciler" / "kubelet_topology.py"
READER = REPO / "exporter" / "sources" / "sysfs_topology.py"
PLACE_ATTRS = {"socket", "numa_node"}


def _sources() -> Iterator[Path]:
    for top in ("reconciler", "exporter", "bench"):
        for path in sorted((REPO / top).rglob("*.py")):
            if path not in (HOME, READER) and "pb" not in path.parts:
                yield path


def _attrs(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def offences(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module groups CPUs by core: a tuple key of ``.core`` with the socket or NUMA
    node, or a ``setdefault``/``groupby`` keyed on ``.core``; and ``core_id`` read."""
    found = []
    for node in ast.walk(tree):
        # A key: a short tuple of nothing but attributes (a record built field by field,
        # such as a CPU map cell, is not one).
        if isinstance(node, ast.Tuple) and len(node.elts) <= 3 and all(
                isinstance(e, ast.Attribute) for e in node.elts):
            names = {e.attr for e in node.elts if isinstance(e, ast.Attribute)}
            if "core" in names and names & PLACE_ATTRS:
                found.append((node.lineno, "a core keyed with its socket or NUMA node"))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("setdefault", "groupby") and node.args
                and "core" in _attrs(node.args[0])):
            found.append((node.lineno, "CPUs grouped by core"))
        if isinstance(node, ast.Constant) and node.value == "core_id":
            found.append((node.lineno, "sysfs core_id read outside the topology reader"))
    return found


def test_no_module_groups_cpus_into_cores_its_own_way() -> None:
    bad = [f"{path.relative_to(REPO)}:{line}: {what}" for path in _sources()
           for line, what in offences(ast.parse(path.read_text(encoding="utf-8")))]
    assert bad == []


def test_the_check_finds_what_it_looks_for() -> None:
    """Each pattern the structure test refuses, written the ways the project once had."""
    samples = [
        "cores.setdefault((c.socket, c.core), set()).add(c.id)",
        "by_core.setdefault((c.numa_node, c.core), []).append(c.id)",
        "groups.setdefault(c.core, []).append(c.id)",
        "x = open(p / 'core_id').read()",
        "reserved = [c for c in cpus if (c.core, c.socket) == (f.core, f.socket)]",
    ]
    for sample in samples:
        assert offences(ast.parse(sample)), sample
    assert offences(ast.parse("core_of = {c.id: c.core for c in cpus}")) == []
