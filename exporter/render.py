"""Human-readable tables of a ledger (``snapshot``'s default output)."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.cpuset import format_cpuset
from reconciler.ledger import CPU_POOLS, Ledger


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    text = str(value)
    # Names are operator data; keep one row per line whatever they contain.
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


def render_ledger(ledger: Ledger) -> str:
    out: list[str] = []
    name = ledger.node_name or "(unnamed node)"
    numa = f", {ledger.numa_nodes} NUMA nodes" if ledger.numa_nodes else ""
    out.append(f"Node {name}: {ledger.online_cpus} online CPUs{numa}")
    for key, value in ledger.kubelet:
        if value not in ("", None):
            out.append(f"  {key}: {value}")
    out.append("")
    headers = ["numa", *CPU_POOLS]
    rows: list[list[object]] = [["all", *ledger.cpu_pools.to_json().values()]]
    rows += [[n, *p.to_json().values()] for n, p in ledger.cpu_pools_by_numa]
    out += ["CPU pools", table(headers, rows), ""]
    if ledger.memory_pools:
        out += ["Memory pools (bytes)",
                table(["type", "node_exclusive", "pod_exclusive", "pod_shared"],
                      [[t, *sizes] for t, sizes in ledger.memory_pools]), ""]
    out += ["Pods", table(
        ["namespace", "pod", "cpus", "budget", "pod_excl", "pod_shared", "pod_idle",
         "node_excl", "reclaimed", "reclaimable", "basis"],
        [[p.namespace, p.name, format_cpuset(p.cpus) or "-", p.budget_cpus,
          p.pod_exclusive_cpus, p.pod_shared_cpus, p.pod_idle_cpus, p.node_exclusive_cpus,
          p.reclaimed_cpus, p.reclaimable_cpus, p.estimate_basis] for p in ledger.pods]), ""]
    out += ["Containers", table(
        ["namespace", "pod", "container", "sidecar", "assignment", "memory", "cpus", "n"],
        [[c.namespace, c.pod, c.name, "yes" if c.sidecar else "", c.assignment,
          c.memory_assignment, format_cpuset(c.cpus) or "-", c.cpu_count]
         for c in ledger.containers]), ""]
    out.append(f"Reclaimed cores: {ledger.reclaimed_cpus}    "
               f"Reclaimable cores: {ledger.reclaimable_cpus}")
    if ledger.anomalies:
        out += ["", "Anomalies", table(
            ["kind", "namespace", "pod", "container", "detail"],
            [[a.kind, a.namespace, a.pod, a.container, a.detail] for a in ledger.anomalies])]
    else:
        out.append("Anomalies: none")
    return "\n".join(out) + "\n"
