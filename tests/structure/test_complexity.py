"""No function in ``reconciler/`` or ``exporter/`` is rated worse than C by radon's cyclomatic
complexity (the generated ``exporter/pb`` is exempt; the dashboards generator lives outside
both trees). ``make test`` runs the same check with the radon command line."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_rank, cc_visit

REPO = Path(__file__).resolve().parents[2]
CHECKED = ("reconciler", "exporter")
EXEMPT = (REPO / "exporter" / "pb",)
WORST_ALLOWED = "C"


def too_complex(source: str, name: str) -> list[str]:
    """``path:line name rank (complexity)`` of every block in ``source`` rated worse than
    ``WORST_ALLOWED``, as ``radon cc`` lists them (functions, methods and classes)."""
    return [f"{name}:{block.lineno} {block.fullname} {cc_rank(block.complexity)} "
            f"({block.complexity})"
            for block in cc_visit(source)
            if cc_rank(block.complexity) > WORST_ALLOWED]


def _sources() -> list[Path]:
    files = [path for tree in CHECKED for path in sorted((REPO / tree).rglob("*.py"))
             if not any(path.is_relative_to(exempt) for exempt in EXEMPT)]
    assert len(files) > 20, "the source trees were not found"
    return files


def test_no_function_is_rated_worse_than_c() -> None:
    found = [line for path in _sources()
             for line in too_complex(path.read_text(encoding="utf-8"),
                                     str(path.relative_to(REPO)))]
    assert not found, "split these (radon grade worse than C):\n" + "\n".join(found)


def test_the_check_flags_a_d_function_and_passes_a_c_one() -> None:
    def function(branches: int) -> str:
        body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(branches))
        return f"def f(x):\n{body}    return -1\n"

    assert too_complex(function(19), "c.py") == []  # complexity 20: grade C
    assert too_complex(function(20), "d.py") == ["d.py:1 f D (21)"]


def test_methods_are_checked_with_their_class_name() -> None:
    body = "".join(f"        if x == {i}:\n            return {i}\n" for i in range(40))
    source = f"class K:\n    def m(self, x):\n{body}        return -1\n"
    assert "m.py:2 K.m F (41)" in too_complex(source, "m.py")


def test_the_exempt_tree_is_the_generated_code_only() -> None:
    files = _sources()
    assert not any("pb" in path.relative_to(REPO).parts for path in files)
    assert REPO / "reconciler" / "reconcile.py" in files
    assert REPO / "exporter" / "cli.py" in files
