"""Human-readable tables of a ledger (``snapshot``'s default output)."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.anomalies import INFORMATIONAL_KINDS
from reconciler.cpuset import format_cpuset
from reconciler.ledger import CPU_POOLS, ContainerEntry, Ledger

# The one byte formatter (reconciler/units.py), re-exported for the exporter's tables.
from reconciler.units import human_bytes as human_bytes


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# Reclaimed cores are signed (legacy cost - budget, docs/design.md#estimates): a budget
# bigger than what the per-container model would pin reclaims nothing and costs the rest.
# Tables say so in words rather than print "-1"; JSON keeps the signed number.
COSTS_MORE = ("none (+N): the pod budget pins N CPU(s) more than the per-container model "
              "would (docs/design.md#estimates)")


def reclaimed_cell(n: int | None) -> str:
    """A table's reclaimed-cores cell: ``-`` when there is no estimate, ``none (+N)`` when
    the budget costs N CPUs more than the per-container model."""
    if n is None:
        return "-"
    return f"none (+{-n})" if n < 0 else str(n)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    text = str(value)
    # Names are operator data; keep one row per line whatever they contain.
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


# The ledger's kubelet facts (reconciler/node_facts.py, exporter/assemble.py) in words.
_KUBELET_LABELS = {
    "pod_level_resource_managers": "PodLevelResourceManagers gate (/configz)",
    "feature_gate_metric": "PodLevelResourceManagers gate (kubelet_feature_enabled metric)",
    "rpcs_unimplemented": "PodResources RPCs not served",
}


def _kubelet_value(value: object) -> object:
    # A gate is a bool from /configz and "True"/"False" from the metric (str of a bool).
    if isinstance(value, bool) or value in ("True", "False"):
        return "on" if value in (True, "True") else "off"
    return value


def render_ledger(ledger: Ledger) -> str:
    name = ledger.node_name or "(unnamed node)"
    numa = f", {ledger.numa_nodes} NUMA nodes" if ledger.numa_nodes else ""
    out = [f"Node {name}: {ledger.online_cpus} online CPUs{numa}"]
    out += [f"  {_KUBELET_LABELS.get(key, key)}: {_kubelet_value(value)}"
            for key, value in ledger.kubelet if value not in ("", None)]
    out += ["", *_pools(ledger), *_pods(ledger)]
    out += ["Containers", _containers(ledger), ""]
    out += _devices(ledger)
    out.append(f"Reclaimed cores (net): {reclaimed_cell(ledger.reclaimed_cpus)}    "
               f"Reclaimable cores: {ledger.reclaimable_cpus}")
    out += _anomalies(ledger)
    return "\n".join(out) + "\n"


def _containers(ledger: Ledger) -> str:
    """CPU and memory per container: the CPU assignment and set, the memory as a size (the
    container's own, or its pod's pool), with the memory's pool named where it is not the
    CPU assignment's."""
    return table(
        ["namespace", "pod", "container", "sidecar", "assignment", "cpus", "cpu_count",
         "memory"],
        [[c.namespace, c.pod, c.name, "yes" if c.sidecar else "", c.assignment,
          format_cpuset(c.cpus) or "-", c.cpu_count, _memory_cell(c)]
         for c in ledger.containers])


def _memory_cell(c: ContainerEntry) -> str:
    if not c.memory_bytes:
        return "-"
    size = human_bytes(c.memory_bytes)
    return size if c.memory_assignment == c.assignment else f"{size} ({c.memory_assignment})"


def _pools(ledger: Ledger) -> list[str]:
    rows: list[list[object]] = [["all", *ledger.cpu_pools.to_json().values()]]
    rows += [[n, *p.to_json().values()] for n, p in ledger.cpu_pools_by_numa]
    out = ["CPU pools", table(["numa", *CPU_POOLS], rows), ""]
    if ledger.memory_pools:
        out += ["Memory pools",
                table(["type", "node_exclusive", "pod_exclusive", "pod_shared"],
                      [[t, *map(human_bytes, sizes)] for t, sizes in ledger.memory_pools]),
                ""]
    return out


def _pods(ledger: Ledger) -> list[str]:
    out = ["Pods", table(
        ["namespace", "pod", "cpus", "budget", "pod_excl", "pod_shared", "pod_idle",
         "node_excl", "reclaimed", "reclaimable", "basis"],
        [[p.namespace, p.name, format_cpuset(p.cpus) or "-", p.budget_cpus,
          p.pod_exclusive_cpus, p.pod_shared_cpus, p.pod_idle_cpus, p.node_exclusive_cpus,
          reclaimed_cell(p.reclaimed_cpus), p.reclaimable_cpus, p.estimate_basis]
         for p in ledger.pods])]
    if any((p.reclaimed_cpus or 0) < 0 for p in ledger.pods):
        out.append(COSTS_MORE)
    return [*out, ""]


def _shortened(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _devices(ledger: Ledger) -> list[str]:
    """Only on a node with devices (docs/design.md#devices): counts, then holders."""
    devices = ledger.devices
    if not devices.counts and not devices.containers:
        return []
    out = ["Devices", table(
        ["resource", "numa", "allocatable", "assigned", "free"],
        [[c.resource, "-" if c.numa_node is None else c.numa_node, c.allocatable,
          c.assigned, c.free] for c in devices.counts])]
    if devices.dropped_resources:
        out.append(f"({devices.dropped_resources} more resource names not counted)")
    rows: list[list[object]] = []
    for h in devices.containers:
        rows += [[h.namespace, h.pod, h.container, _shortened(d.resource_name),
                  _shortened(",".join(d.device_ids)),
                  ",".join(map(str, d.numa_nodes)) or "-"] for d in h.devices]
        rows += [[h.namespace, h.pod, h.container, _shortened(f"claim {c.claim_name}"),
                  _shortened(f"{c.driver}/{c.pool}/{c.device}"), "-"] for c in h.dynamic]
    if rows:
        out += ["", "Device holders", table(
            ["namespace", "pod", "container", "resource", "devices", "numa"], rows)]
    return [*out, ""]


def _anomalies(ledger: Ledger) -> list[str]:
    """The errors, then the informational kinds apart (docs/design.md#anomalies)."""
    errors = [a for a in ledger.anomalies if a.kind not in INFORMATIONAL_KINDS]
    notes = [a for a in ledger.anomalies if a.kind in INFORMATIONAL_KINDS]
    headers = ["kind", "namespace", "pod", "container", "detail"]
    out = ["", "Anomalies", table(
        headers, [[a.kind, a.namespace, a.pod, a.container, a.detail] for a in errors])] \
        if errors else ["Anomalies: none"]
    if notes:
        out += ["", "Notes (reported as anomalies of an informational kind, not errors: "
                "docs/design.md#anomalies)", table(
                    headers, [[a.kind, a.namespace, a.pod, a.container, a.detail]
                              for a in notes])]
    return out
