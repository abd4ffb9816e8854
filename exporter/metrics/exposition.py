"""Prometheus text exposition (format 0.0.4), rendered from the catalogue's families.

The ledger's families are rendered once per ledger change into bytes and served from that
cache; the self-metrics are a few lines rendered per scrape. Label values are escaped, so
any pod or container name is valid exposition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from exporter.metrics.catalogue import (
    FAMILIES,
    ContainerFamily,
    Family,
    KernelFacts,
    KernelFamily,
    NodeFacts,
    NodeFamily,
    PodFamily,
    Sample,
    SelfFamily,
    SelfState,
)
from reconciler.ledger import Ledger

_PER_POD = tuple(f for f in FAMILIES if isinstance(f, PodFamily | ContainerFamily))
_SELF = tuple(f for f in FAMILIES if isinstance(f, SelfFamily))
_KERNEL = tuple(f for f in FAMILIES if isinstance(f, KernelFamily))


class Rendered(NamedTuple):
    text: str
    dropped: int  # series the per-pod cap left out
    pods_series_left: int | None  # what is left of the cap; None: collector pods off


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    value = float(value)
    if value.is_integer() and -1e15 < value < 1e15:  # nearly every sample: test it first
        return str(int(value))
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render_family(family: Family[Any], samples: Iterable[Sample], out: list[str]) -> None:
    name = family.name
    out.append(f"# HELP {name} {escape_help(family.help)}\n# TYPE {name} {family.type}\n")
    if not family.labels:
        out.extend(f"{name} {format_value(value)}\n" for _, value in samples)
        return
    keys = [f'{label}="' for label in family.labels]
    # Namespaces and pod names repeat across a family's series: escape each once.
    escaped: dict[str, str] = {}
    for labels, value in samples:
        pairs = '",'.join([k + (escaped.get(v) or escaped.setdefault(v, escape_label(v)))
                           for k, v in zip(keys, labels, strict=True)])
        out.append(f'{name}{{{pairs}"}} {format_value(value)}\n')


def render_ledger(facts: NodeFacts, *, pods_max_series: int | None) -> Rendered:
    """The ledger's families in catalogue order: the node-level ones and, unless
    ``pods_max_series`` is None (collector ``pods`` off), the per-pod and per-container
    ones capped at that many series."""
    per_pod: dict[str, list[Sample]] = {}
    dropped = 0
    left = None
    if pods_max_series is not None:
        per_pod, dropped, left = _per_pod_samples(facts.ledger, pods_max_series)
    out: list[str] = []
    for family in FAMILIES:
        rows: Iterable[Sample] | None = None
        if isinstance(family, NodeFamily):
            rows = family.samples(facts)
        elif family.name in per_pod:
            rows = per_pod[family.name]
        if rows is not None:
            render_family(family, rows, out)
    return Rendered("".join(out), dropped, left)


def render_kernel(facts: KernelFacts, *, pods_series_left: int | None) -> Rendered:
    """The kernel families in catalogue order; the per-pod ones take at most
    ``pods_series_left`` series (None: collector ``pods`` off, left out)."""
    out: list[str] = []
    dropped = 0
    left = pods_series_left
    for family in _KERNEL:
        rows = family.samples(facts)
        if rows is not None and family.group == "pods":
            if left is None:
                continue
            rows = list(rows)
            dropped += max(0, len(rows) - left)
            rows, left = rows[:left], max(0, left - len(rows))
        if rows is not None:
            render_family(family, rows, out)
    return Rendered("".join(out), dropped, left)


def render_self(state: SelfState) -> str:
    """The exporter's own families, in catalogue order."""
    out: list[str] = []
    for family in _SELF:
        rows = family.samples(state)
        if rows is not None:
            render_family(family, rows, out)
    return "".join(out)


def _per_pod_samples(ledger: Ledger, max_series: int,
                     ) -> tuple[dict[str, list[Sample]], int, int]:
    """Samples of the per-pod and per-container families by family name, at most
    ``max_series`` in all, pod by pod (then container by container) so that a capped
    exposition keeps whole pods; how many series were left out, and what is left of the
    cap."""
    rows: dict[str, list[Sample]] = {f.name: [] for f in _PER_POD}
    budget = max_series
    dropped = 0
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def add(family: Family[Any], samples: Iterable[Sample] | None) -> None:
        nonlocal budget, dropped
        for labels, value in samples or ():
            key = (family.name, tuple(labels))
            if key in seen:
                # A kubelet that lists a pod (or a container name) twice: a repeated
                # series would make Prometheus reject the whole scrape. The first one
                # stands; the ledger reports the overlap as an anomaly.
                continue
            seen.add(key)
            if budget <= 0:
                dropped += 1
                continue
            budget -= 1
            rows[family.name].append((labels, value))

    pods = [f for f in _PER_POD if isinstance(f, PodFamily)]
    containers = [f for f in _PER_POD if isinstance(f, ContainerFamily)]
    for pod in ledger.pods:
        for pod_family in pods:
            add(pod_family, pod_family.samples(pod))
    for container in ledger.containers:
        for container_family in containers:
            add(container_family, container_family.samples(container))
    return rows, dropped, budget


__all__ = ["Rendered", "escape_label", "render_family", "render_kernel", "render_ledger",
           "render_self"]
