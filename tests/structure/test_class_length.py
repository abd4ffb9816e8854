"""No class in ``reconciler/``, ``exporter/`` or ``bench/`` is over 300 lines (the generated
``exporter/pb`` is exempt): a class that long holds more than one concern, and the concerns
are split into classes of their own (docs/design.md#structure)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECKED = ("reconciler", "exporter", "bench")
EXEMPT = (REPO / "exporter" / "pb",)
MAX_LINES = 300


def long_classes(source: str, name: str, limit: int = MAX_LINES) -> list[str]:
    """``path:line Class (N lines)`` of every class in ``source`` (nested ones too) longer
    than ``limit`` lines, from its ``class`` line (or first decorator) to its last."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.ClassDef):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            assert node.end_lineno is not None
            lines = node.end_lineno - start + 1
            if lines > limit:
                found.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def _sources() -> list[Path]:
    files = [path for tree in CHECKED for path in sorted((REPO / tree).rglob("*.py"))
             if not any(path.is_relative_to(exempt) for exempt in EXEMPT)]
    assert len(files) > 20, "the source trees were not found"
    return files


def test_no_class_is_over_300_lines() -> None:
    found = [line for path in _sources()
             for line in long_classes(path.read_text(encoding="utf-8"),
                                      str(path.relative_to(REPO)))]
    assert not found, "split these by concern (over 300 lines):\n" + "\n".join(found)


def test_the_rule_catches_a_long_class_and_passes_one_at_the_limit() -> None:
    def klass(methods: int, decorated: bool = False) -> str:
        # Each method is 3 lines; with the class line, 1 + 3 * methods lines.
        body = "".join(f"    def m{i}(self):\n        x = {i}\n        return x\n"
                       for i in range(methods))
        return ("@dataclass\n" if decorated else "") + f"class Long:\n{body}"

    assert long_classes(klass(99), "ok.py") == []  # 298 lines
    assert long_classes(klass(100), "long.py") == ["long.py:1 Long (301 lines)"]
    assert long_classes(klass(99, decorated=True) + "    y = 1\n    z = 2\n", "d.py") == [
        "d.py:2 Long (301 lines)"]
    nested = "def f():\n    " + klass(100).replace("\n", "\n    ")
    assert long_classes(nested, "n.py") == ["n.py:2 Long (301 lines)"]


def test_the_exempt_tree_is_the_generated_code_only() -> None:
    files = _sources()
    assert not any("pb" in path.relative_to(REPO).parts for path in files)
    assert REPO / "exporter" / "service.py" in files
