"""The project's design lives in docs/design.md: every reference to one of its sections
resolves to a heading there, and nothing points at a document outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache",
        ".hypothesis", "__pycache__"}
TEXT = {".py", ".md", ".yaml", ".yml", ".json", ".js", ".html", ".css", ".proto", ".toml",
        ".tpl", ".txt", ".ini", ""}


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def repo_texts() -> list[tuple[Path, str]]:
    found = []
    for path in REPO.rglob("*"):
        if SKIP & set(path.relative_to(REPO).parts) or not path.is_file():
            continue
        if path.suffix not in TEXT:
            continue
        try:
            found.append((path, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue
    return found


def test_every_design_reference_names_a_section() -> None:
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    anchors = {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", design, re.M)}
    missing = [(str(path.relative_to(REPO)), anchor) for path, text in repo_texts()
               for anchor in re.findall(r"design\.md#([\w\-]+)", text)
               if anchor not in anchors]
    assert not missing, missing


def test_no_reference_to_a_document_outside_the_repository() -> None:
    marker = "SPEC " + "§"  # spelled in two parts so this file does not match itself
    offenders = [str(path.relative_to(REPO)) for path, text in repo_texts() if marker in text]
    assert not offenders, offenders
