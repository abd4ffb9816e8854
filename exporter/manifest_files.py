"""Kubernetes manifests read from files, directories or stdin, as pod templates (for
``plan``, the model-driven simulator and the demo's workload)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.errors import UserError
from exporter.files import read_text_file

if TYPE_CHECKING:
    from reconciler.manifests import Workloads

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_BYTES = 32 << 20


def has_manifests(directory: Path) -> bool:
    return any(p.suffix in MANIFEST_SUFFIXES for p in directory.iterdir())


def _manifest_paths(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        if name == "-":
            out.append(name)
            continue
        path = Path(name)
        if path.is_dir():
            found = sorted(p for p in path.iterdir()
                           if p.suffix in MANIFEST_SUFFIXES and p.is_file())
            if not found:
                raise UserError(f"{path}: no .yaml, .yml or .json files in the directory")
            out.extend(str(p) for p in found)
        elif path.exists():
            out.append(name)
        else:
            raise UserError(f"{name}: no such file")
    return out


def _read_text(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    return read_text_file(name, MAX_BYTES)


def load_documents(name: str) -> list[Any]:
    """The YAML (or JSON) documents of one file; a syntax error is one UserError line."""
    return parse_documents(_read_text(name), "stdin" if name == "-" else name)


def parse_documents(text: str, label: str) -> list[Any]:
    """The YAML (or JSON) documents of ``text``; a syntax error is one UserError line."""
    import yaml

    try:
        return list(yaml.safe_load_all(text))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{label}: invalid YAML: {exc.problem or exc}{where}") from None
    except yaml.YAMLError as exc:  # a reader error (control characters) spans lines
        raise UserError(f"{label}: invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise UserError(f"{label}: invalid YAML: nested too deeply") from None
    except ValueError as exc:  # an integer past int's digit limit
        raise UserError(f"{label}: invalid YAML: {str(exc)[:300]}") from None


def load_templates(names: Iterable[str]) -> list[Any]:
    """Every pod template in the given files and directories ('-' is stdin)."""
    return list(load_workloads(names).templates)


def load_workloads(names: Iterable[str]) -> Workloads:
    """Every pod template in the given files and directories ('-' is stdin), and the kinds
    of the objects skipped as not workloads; finding no template at all is an error."""
    from reconciler.manifests import Workloads

    names = list(names)
    found = Workloads()
    for name in _manifest_paths(names):
        found += workloads_in_documents(load_documents(name),
                                        "stdin" if name == "-" else name)
    if not found.templates:
        skipped = skipped_summary(found.skipped)
        raise UserError("no pod templates found in " + ", ".join(names)
                        + (f" ({skipped})" if skipped else ""))
    return found


def workloads_in_documents(docs: Iterable[Any], label: str) -> Workloads:
    """The pod templates and skipped kinds of decoded documents; a bad object is one
    UserError line naming ``label`` and the document."""
    from reconciler.manifests import ManifestError, Workloads, workloads_in_manifest

    found = Workloads()
    for i, doc in enumerate(docs):
        source = label if i == 0 else f"{label} document {i + 1}"
        try:
            found += workloads_in_manifest(doc, source)
        except ManifestError as exc:
            raise UserError(str(exc)) from None
    return found


def skipped_summary(kinds: Iterable[str]) -> str:
    """One line for the objects that are not workloads, by kind: "skipped 3 objects that
    are not workloads: ConfigMap ×2, Service" (empty when none was skipped)."""
    counts = Counter(kinds)
    total = sum(counts.values())
    if not total:
        return ""
    what = "object that is not a workload" if total == 1 else "objects that are not workloads"
    parts = (kind if n == 1 else f"{kind} ×{n}" for kind, n in sorted(counts.items()))
    return f"skipped {total} {what}: {', '.join(parts)}"
