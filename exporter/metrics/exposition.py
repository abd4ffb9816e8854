"""Prometheus text exposition (format 0.0.4), rendered from the catalogue's families.

The ledger's families are rendered once per ledger change into bytes and served from that
cache; the self-metrics are a few lines rendered per scrape. Label values are escaped, so
any pod or container name is valid exposition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter, methodcaller
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
from reconciler.ledger import ContainerEntry, DistinctContainers, Ledger, PodEntries

_PER_POD = tuple(f for f in FAMILIES if isinstance(f, PodFamily | ContainerFamily))
_POD_FAMILIES = tuple(f for f in FAMILIES if isinstance(f, PodFamily))
_CONTAINER_FAMILIES = tuple(f for f in FAMILIES if isinstance(f, ContainerFamily))
_CONTAINER_LINES = tuple(f for f in _CONTAINER_FAMILIES if f.lines is not None)
_SELF = tuple(f for f in FAMILIES if isinstance(f, SelfFamily))
_KERNEL = tuple(f for f in FAMILIES if isinstance(f, KernelFamily))


class _Written(NamedTuple):
    """A family's series lines, written by its ``lines`` in pieces (see ``Family``)."""

    pieces: list[str]


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


class _Escaped(dict[str, str]):
    """Label values escaped, each once: namespaces and pod names repeat across series."""

    def __missing__(self, value: str) -> str:
        self[value] = escaped = escape_label(value)
        return escaped


class _Values(dict[float, str]):
    """Sample values formatted, line end included, each once: a node's values are a few
    small counts. Equal values format alike (``format_value`` reads only the number), so
    the value is a sound key."""

    def __missing__(self, value: float) -> str:
        self[value] = text = format_value(value) + "\n"
        return text


def _header(family: Family[Any]) -> str:
    name = family.name
    return f"# HELP {name} {escape_help(family.help)}\n# TYPE {name} {family.type}\n"


def render_family(family: Family[Any], samples: Iterable[Sample], out: list[str]) -> None:
    name = family.name
    out.append(_header(family))
    values = _Values()
    if not family.labels:
        out.extend(f"{name} {values[value]}" for _, value in samples)
        return
    rows = samples if isinstance(samples, list) else list(samples)
    # One %-template per family: a series line is a single formatting of its label values.
    series = name + "{" + ",".join(f'{label}="%s"' for label in family.labels) + "} "
    text = "".join([series % labels + values[value] for labels, value in rows])
    if not _verbatim(text, len(rows), len(family.labels)):
        escaped = _Escaped().__getitem__
        text = "".join([series % tuple(map(escaped, labels)) + values[value]
                        for labels, value in rows])
    out.append(text)


def _verbatim(text: str, lines: int, labels: int) -> bool:
    """Whether series lines rendered from unescaped label values need no escaping: true
    exactly when no value held a backslash, a newline or a double quote, which shows in
    the counts of those characters (the rest of a line has none, but for its two quotes
    per label and its final newline). Names from a kubelet almost never need escaping;
    checking the whole text at once is cheaper than escaping every value."""
    return ("\\" not in text and text.count("\n") == lines
            and text.count('"') == 2 * labels * lines)


def render_ledger(facts: NodeFacts, *, pods_max_series: int | None) -> Rendered:
    """The ledger's families in catalogue order: the node-level ones and, unless
    ``pods_max_series`` is None (collector ``pods`` off), the per-pod and per-container
    ones capped at that many series. A node-level family of group ``pods`` (a series per
    container, read from the ledger's other parts) takes what the per-pod ones left."""
    parts, dropped, left = _ledger_parts(facts, pods_max_series)
    return Rendered("".join(parts), dropped, left)


def _ledger_parts(facts: NodeFacts, pods_max_series: int | None,
                  ) -> tuple[list[str], int, int | None]:
    """``render_ledger``'s text in pieces, not yet joined."""
    per_pod: Mapping[str, list[Sample] | _Written] = {}
    dropped = 0
    left = None
    if pods_max_series is not None:
        per_pod, dropped, left = _per_pod_samples(facts.ledger, pods_max_series)
    out: list[str] = []
    for family in FAMILIES:
        rows: Iterable[Sample] | _Written | None = None
        if isinstance(family, NodeFamily) and family.group == "pods":
            if left is None:
                continue
            rows = list(family.samples(facts) or ())
            dropped += max(0, len(rows) - left)
            rows, left = rows[:left], max(0, left - len(rows))
        elif isinstance(family, NodeFamily):
            rows = family.samples(facts)
        elif family.name in per_pod:
            rows = per_pod[family.name]
        if isinstance(rows, _Written):  # series lines already written
            out.append(_header(family))
            out += rows.pieces
        elif rows is not None:
            render_family(family, rows, out)
    return out, dropped, left


def node_exposition(ledger: Ledger, *, pods_max_series: int | None,
                    ) -> tuple[bytes, int, int | None]:
    """What ``serve`` publishes when the ledger changes: the ledger's families with the
    checkpoint facts it carries, encoded; how many per-pod series the cap dropped, and how
    many it leaves for the kernel's per-pod series."""
    checkpoints = ledger.checkpoints
    facts = NodeFacts(ledger, dict(checkpoints.formats) if checkpoints else {},
                      checkpoints.downgrade_unsafe if checkpoints else None)
    parts, dropped, series_left = _ledger_parts(facts, pods_max_series)
    # Encoded piece by piece and joined once: the body (~0.5 MB on a busy node) is the only
    # large block made, not a text of its size as well, whose fresh pages cost more to
    # fault in than the encoding itself.
    return b"".join(map(_utf8, parts)), dropped, series_left


_utf8 = methodcaller("encode", "utf-8")


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
                     ) -> tuple[Mapping[str, list[Sample] | _Written], int, int]:
    """Samples of the per-pod and per-container families by family name (or a family's
    series lines, written by its ``lines``), at most ``max_series`` in all; how many
    series were left out, and what is left of the cap. A node within the cap and without
    repeated series (the common case) takes one call of each family for all its pods or
    containers."""
    containers = ledger.containers
    # Only the pods that hold anything give per-pod series, in order: told by the
    # reconciler, or all of them looked at.
    pods = ledger.pods.held if isinstance(ledger.pods, PodEntries) else ledger.pods
    rows = {f.name: list(f.samples(pods) or ()) for f in _POD_FAMILIES}
    rows.update({f.name: list(f.samples(containers) or ()) for f in _CONTAINER_FAMILIES
                 if f not in _CONTAINER_LINES})
    # A family with ``lines`` has a series per container.
    count = sum(map(len, rows.values())) + len(containers) * len(_CONTAINER_LINES)
    if count > max_series or not all(map(_distinct, rows.values())):
        return _capped_samples(ledger, max_series)
    out: dict[str, list[Sample] | _Written] = dict(rows)
    # Containers named once in their pod, of pods listed once, give such a family distinct
    # series; were a name repeated, its samples tell whether a series is.
    plain = False  # no label value needs escaping: told by the reconciler, or the text shows
    if isinstance(containers, DistinctContainers):
        named_once, plain = True, containers.plain_names
    else:
        named_once = len(set(map(_CONTAINER_KEY, containers))) == len(containers)
    for family in _CONTAINER_LINES:
        assert family.lines is not None
        if named_once:
            pieces = family.lines(family.name, containers, _Values())
            if plain:
                out[family.name] = _Written(pieces)
                continue
            text = "".join(pieces)
            if _verbatim(text, len(containers), len(family.labels)):
                out[family.name] = _Written([text])
                continue
        samples = out[family.name] = list(family.samples(containers) or ())
        if not _distinct(samples):
            return _capped_samples(ledger, max_series)
    return out, 0, max_series - count


_CONTAINER_KEY = itemgetter(*map(ContainerEntry._fields.index, ("namespace", "pod", "name")))


def _distinct(samples: list[Sample]) -> bool:
    return len(set(map(itemgetter(0), samples))) == len(samples)


def _capped_samples(ledger: Ledger, max_series: int,
                    ) -> tuple[dict[str, list[Sample]], int, int]:
    """``_per_pod_samples`` pod by pod (then container by container), so that a capped
    exposition keeps whole pods; a series repeated by a kubelet that lists a pod or a
    container name twice is kept once."""
    rows: dict[str, list[Sample]] = {f.name: [] for f in _PER_POD}
    budget = max_series
    dropped = 0
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def add(family: Family[Any], samples: Iterable[Sample] | None) -> None:
        nonlocal budget, dropped
        for labels, value in samples or ():
            key = (family.name, labels)
            if key in seen:
                # A repeated series would make Prometheus reject the whole scrape. The
                # first one stands; the ledger reports the overlap as an anomaly.
                continue
            seen.add(key)
            if budget <= 0:
                dropped += 1
                continue
            budget -= 1
            rows[family.name].append((labels, value))

    for pod in ledger.pods:
        for pod_family in _POD_FAMILIES:
            add(pod_family, pod_family.samples((pod,)))
    for container in ledger.containers:
        for container_family in _CONTAINER_FAMILIES:
            add(container_family, container_family.samples((container,)))
    return rows, dropped, budget


__all__ = ["Rendered", "escape_label", "node_exposition", "render_family", "render_kernel",
           "render_ledger", "render_self"]
