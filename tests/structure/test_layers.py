"""The import structure of ``exporter/``: the layers of ``.importlinter`` (read from that
file, so they are declared once) hold for every import — function-level imports and modules
loaded by name included, which is where upward imports hide — and no modules import each
other in a cycle."""

from __future__ import annotations

import ast
import configparser
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "exporter"

# Cycles that exist today and are being removed on another branch; each must still exist
# (a stale entry fails), so the list only ever shrinks.
KNOWN_CYCLES: set[frozenset[str]] = set()

Graph = dict[str, set[str]]


def read_layers(config: Path = REPO / ".importlinter") -> list[list[str]]:
    """The exporter layers contract, top first; each layer a list of independent siblings."""
    parser = configparser.ConfigParser()
    parser.read(config, encoding="utf-8")
    section = parser["importlinter:contract:exporter-layers"]
    assert section["containers"].split() == [PACKAGE]
    return [[name.strip() for name in line.split("|")]
            for line in section["layers"].strip().splitlines() if line.strip()]


def read_forbidden(config: Path = REPO / ".importlinter"
                   ) -> dict[str, tuple[list[str], list[str]]]:
    """The forbidden contracts within ``exporter``: name → (sources, forbidden)."""
    parser = configparser.ConfigParser()
    parser.read(config, encoding="utf-8")
    found = {}
    for name in parser.sections():
        section = parser[name]
        if section.get("type") == "forbidden" and name != "importlinter:contract:reconciler-pure":
            found[name.rpartition(":")[2]] = (section["source_modules"].split(),
                                              section["forbidden_modules"].split())
    return found


def forbidden_imports(graph: Graph, sources: list[str], forbidden: list[str]) -> list[str]:
    """Each module of ``sources`` (or under one) that reaches a module of ``forbidden`` (or
    under one) through the graph, directly or not: the chain that does."""
    def under(module: str, roots: list[str]) -> bool:
        return any(module == r or module.startswith(r + ".") for r in roots)

    found = []
    for start in sorted(m for m in graph if under(m, sources)):
        seen, paths = {start}, [[start]]
        while paths:
            path = paths.pop(0)
            for nxt in sorted(graph.get(path[-1], ())):
                if under(nxt, forbidden):
                    found.append(" -> ".join([*path, nxt]))
                elif nxt not in seen:
                    seen.add(nxt)
                    paths.append([*path, nxt])
    return found


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[:len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported(node: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        target = _resolve(node, module, is_package)
        yield target
        yield from (f"{target}.{alias.name}" for alias in node.names)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value  # importlib.import_module("exporter.x") and friends


def imports_of(path: Path, module: str, known: Mapping[str, Path]) -> set[str]:
    """Every module of ``known`` that ``path`` imports, at any depth of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found = {name for node in ast.walk(tree) for name in _imported(node, module, is_package)}
    return {name for name in found if name in known and name != module}


def import_graph(root: Path, package: str = PACKAGE) -> Graph:
    files = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    return {name: imports_of(path, name, files) for name, path in files.items()}


def cycles(graph: Graph) -> set[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_of(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    for depth, siblings in enumerate(layers):
        for sibling in siblings:
            full = f"{PACKAGE}.{sibling}"
            if module == full or module.startswith(full + "."):
                return depth, sibling
    return None


def violations(graph: Graph, layers: list[list[str]]) -> list[str]:
    """Imports from a lower layer to a higher one, or between independent siblings."""
    found = []
    for source, targets in sorted(graph.items()):
        here = layer_of(source, layers)
        for target in sorted(targets):
            there = layer_of(target, layers)
            if here is None or there is None:
                continue  # the package root, or an unplaced module (reported on its own)
            if there[0] < here[0]:
                found.append(f"{source} imports {target}, a higher layer")
            elif there[0] == here[0] and there[1] != here[1]:
                found.append(f"{source} imports {target}, an independent sibling")
    return found


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(REPO)


def test_every_module_has_a_layer(graph: Graph) -> None:
    layers = read_layers()
    unplaced = [m for m in graph if m != PACKAGE and layer_of(m, layers) is None]
    assert not unplaced, f"add these modules to a layer in .importlinter: {unplaced}"


def test_no_import_runs_up_or_sideways(graph: Graph) -> None:
    assert violations(graph, read_layers()) == []


def test_the_test_tools_and_the_serving_layer_stay_apart(graph: Graph) -> None:
    """The simulated kubelet and the demo node (exporter/sim, exporter/demo) are below
    nothing they test: the serving layer (web, the poll loop and its parts, ``serve``)
    never loads them, and they never load it (they reach it over its socket and HTTP, as
    any client does); .importlinter's forbidden contracts, checked here through
    function-level imports too."""
    contracts = read_forbidden()
    assert set(contracts) >= {"serving-without-test-tools", "test-tools-without-serving"}
    for name, (sources, forbidden) in sorted(contracts.items()):
        assert forbidden_imports(graph, sources, forbidden) == [], name


def test_the_forbidden_check_sees_an_indirect_import(tmp_path: Path) -> None:
    """A serving module that reaches the simulator through a function-level import of a
    module that imports it is caught, with the chain."""
    _write(tmp_path, {
        "exporter/__init__.py": "",
        "exporter/web.py": "def f():\n    from exporter import helper\n",
        "exporter/helper.py": "from exporter.sim.server import x\n",
        "exporter/sim/__init__.py": "",
        "exporter/sim/server.py": "x = 1\n",
    })
    graph = import_graph(tmp_path)
    assert forbidden_imports(graph, ["exporter.web"], ["exporter.sim"]) == [
        "exporter.web -> exporter.helper -> exporter.sim.server"]
    assert forbidden_imports(graph, ["exporter.sim"], ["exporter.web"]) == []


def reached_twice(graph: Graph, module: str, within: str) -> list[str]:
    """The modules under ``within`` that ``module`` imports itself and also reaches through
    another of its imports under ``within``: a walk that comes back to a room it left."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    direct = sorted(t for t in graph[module] if t.startswith(within + "."))
    return [f"{target} (also through {other})" for target in direct for other in direct
            if other != target and target in reach(other)]


def test_one_pass_from_raw_inputs_to_the_snapshot(graph: Graph) -> None:
    """assemble.py only assembles (docs/design.md#data-path): each raw source is decoded by
    its own source module, and assemble calls each decoder once; it never also reaches, by
    itself, a module a decoder uses (as it once called sources/convert beside podresources,
    which calls convert too)."""
    assert reached_twice(graph, "exporter.assemble", "exporter.sources") == []
    source = (REPO / "exporter" / "assemble.py").read_text(encoding="utf-8")
    imported = {name for node in ast.walk(ast.parse(source))
                for name in _imported(node, "exporter.assemble", False)}
    decoding = {"json", "msgspec", "google.protobuf", "exporter.pb"}
    assert imported & decoding == set(), "assemble.py decodes: move it to the source"


def test_a_walk_back_into_a_module_is_seen(tmp_path: Path) -> None:
    _write(tmp_path, {
        "exporter/__init__.py": "",
        "exporter/assemble.py": "from exporter.sources import convert, podresources\n",
        "exporter/sources/__init__.py": "",
        "exporter/sources/podresources.py": "from exporter.sources.convert import f\n",
        "exporter/sources/convert.py": "def f():\n    return 1\n",
    })
    graph = import_graph(tmp_path)
    assert reached_twice(graph, "exporter.assemble", "exporter.sources") == [
        "exporter.sources.convert (also through exporter.sources.podresources)"]


def test_no_import_cycles(graph: Graph) -> None:
    found = cycles(graph)
    assert found - KNOWN_CYCLES == set()
    stale = KNOWN_CYCLES - found
    assert not stale, f"these cycles are gone: remove them from KNOWN_CYCLES: {stale}"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_sees_lazy_and_by_name_imports(tmp_path: Path) -> None:
    """What the old code did: a function-level import back up, and a module loaded by its
    name that imports its loader back. Both must be seen, as violations and as a cycle."""
    _write(tmp_path, {
        "exporter/__init__.py": "",
        "exporter/commands/__init__.py": "",
        "exporter/commands/plan.py": "import importlib\n\n"
                                     "def load():\n"
                                     "    return importlib.import_module('exporter.sim.model')\n",
        "exporter/sim/__init__.py": "",
        "exporter/sim/model.py": "def flags():\n"
                                 "    from exporter.commands.plan import load\n"
                                 "    return load\n",
        "exporter/errors.py": "from . import sim\n",
    })
    graph = import_graph(tmp_path)
    assert graph["exporter.commands.plan"] == {"exporter.sim.model"}
    assert graph["exporter.sim.model"] == {"exporter.commands.plan"}
    assert graph["exporter.errors"] == {"exporter", "exporter.sim"}
    assert frozenset({"exporter.commands.plan", "exporter.sim.model"}) in cycles(graph)
    layers = [["commands"], ["sim"], ["errors"]]
    assert violations(graph, layers) == [
        "exporter.errors imports exporter.sim, a higher layer",
        "exporter.sim.model imports exporter.commands.plan, a higher layer",
    ]
    assert violations(graph, [["commands", "sim"], ["errors"]]) == [
        "exporter.commands.plan imports exporter.sim.model, an independent sibling",
        "exporter.errors imports exporter.sim, a higher layer",
        "exporter.sim.model imports exporter.commands.plan, an independent sibling",
    ]


def test_import_linter_contracts_hold() -> None:
    """The same contracts through import-linter itself (what ``lint-imports`` runs)."""
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed: pip install import-linter")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([str(lint), "--no-cache", "--config", str(REPO / ".importlinter")],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
