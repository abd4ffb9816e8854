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
    """The YAML (or JSON) documents of ``text``; a syntax error, or a manifest past the
    limits (:data:`MAX_DOCUMENTS`, :data:`MAX_NODES`), is one UserError line."""
    import yaml

    try:
        return list(yaml.load_all(text, Loader=_bounded_loader()))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{label}: invalid YAML: {exc.problem or exc}{where}") from None
    except yaml.YAMLError as exc:  # a reader error (control characters) spans lines
        raise UserError(f"{label}: invalid YAML: {' '.join(str(exc).split())}") from None
    except _PastLimit as exc:
        raise UserError(f"{label}: {exc}") from None
    except RecursionError:
        raise UserError(f"{label}: invalid YAML: nested too deeply") from None
    except ValueError as exc:  # an integer past int's digit limit
        raise UserError(f"{label}: invalid YAML: {str(exc)[:300]}") from None


# What one manifest may hold (docs/plan.md#manifest-limits): far past any real one, and a
# bound on what a hostile one costs.
MAX_DOCUMENTS = 10_000
MAX_TEMPLATES = 1_000
# Values, counted as the walk of the decoded documents meets them: a YAML alias is counted
# each time it is used, so ten nested lists of ten aliases each (a few hundred bytes) count
# as the 10**10 values they stand for and are refused before anything walks them.
MAX_NODES = 1_000_000


def _bounded_loader() -> type:
    """yaml's SafeLoader, counting documents and the values they expand to (aliases
    included) before constructing each document."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        documents = 0
        nodes = 0

        def construct_document(self, node: yaml.Node) -> Any:
            self.documents += 1
            if self.documents > MAX_DOCUMENTS:
                raise _PastLimit(f"more than {MAX_DOCUMENTS} documents")
            self.nodes += _expanded_size(node, MAX_NODES - self.nodes)
            return super().construct_document(node)

    return BoundedLoader


def _expanded_size(root: Any, budget: int) -> int:
    """How many values ``root`` stands for with every alias expanded; :class:`_PastLimit`
    once past ``budget``, or for an alias inside the value it names. Each distinct node is
    sized once (an alias is the same node object as its anchor), so the count costs the
    size of the text, not of the expansion."""
    import yaml

    sizes: dict[int, int] = {}
    open_ids: set[int] = set()  # the nodes whose children are being sized
    # Iterative post-order: documents nest deeper than the interpreter's stack.
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_sized = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = ([v for pair in node.value for v in pair]
                    if isinstance(node, yaml.MappingNode) else node.value)
        if children_sized:
            open_ids.discard(id(node))
            size = 1 + sum(sizes[id(c)] for c in children)
            if size > budget:
                raise _PastLimit(f"more than {MAX_NODES} values once YAML aliases are "
                                 "expanded (a manifest that large, or an alias bomb)")
            sizes[id(node)] = size
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_ids:
            raise _PastLimit("a YAML alias refers to a value that contains it")
        open_ids.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


class _PastLimit(Exception):
    """A manifest past one of the limits above."""


def load_templates(names: Iterable[str]) -> list[Any]:
    """Every pod template in the given files and directories ('-' is stdin)."""
    return list(load_workloads(names).templates)


def load_workloads(names: Iterable[str]) -> Workloads:
    """Every pod template in the given files and directories ('-' is stdin), and the kinds
    of the objects skipped as not workloads; finding no template at all is an error."""
    from reconciler.manifests import Workloads

    names = list(names)
    found = Workloads.join(workloads_in_documents(load_documents(name),
                                                  "stdin" if name == "-" else name)
                           for name in _manifest_paths(names))
    if len(found.templates) > MAX_TEMPLATES:
        raise UserError(f"{', '.join(names)}: more than {MAX_TEMPLATES} pod templates")
    if not found.templates:
        skipped = skipped_summary(found.skipped)
        raise UserError("no pod templates found in " + ", ".join(names)
                        + (f" ({skipped})" if skipped else ""))
    return found


def workloads_in_documents(docs: Iterable[Any], label: str) -> Workloads:
    """The pod templates and skipped kinds of decoded documents; a bad object is one
    UserError line naming ``label`` and the document."""
    from reconciler.manifests import ManifestError, Workloads, workloads_in_manifest

    parts, templates = [], 0
    for i, doc in enumerate(docs):
        source = label if i == 0 else f"{label} document {i + 1}"
        try:
            part = workloads_in_manifest(doc, source)
        except ManifestError as exc:
            raise UserError(str(exc)) from None
        templates += len(part.templates)
        if templates > MAX_TEMPLATES:
            raise UserError(f"{label}: more than {MAX_TEMPLATES} pod templates")
        parts.append(part)
    return Workloads.join(parts)


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
