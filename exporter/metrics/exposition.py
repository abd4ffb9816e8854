"""Prometheus text exposition (format 0.0.4), rendered from the catalogue.

The ledger's families are rendered once per ledger change into bytes and served from that
cache; the self-metrics are a few lines rendered per scrape. Label values are escaped, so
any pod or container name is valid exposition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from exporter.metrics.catalogue import BY_NAME, FAMILIES, Family
from reconciler.ledger import ASSIGNMENTS, MEMORY_POOLS, Ledger

Sample = tuple[Sequence[str], float]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def render_family(family: Family, samples: Iterable[Sample], out: list[str]) -> None:
    out.append(f"# HELP {family.name} {escape_help(family.help)}\n")
    out.append(f"# TYPE {family.name} {family.type}\n")
    for labels, value in samples:
        if family.labels:
            pairs = ",".join(f'{k}="{escape_label(v)}"'
                             for k, v in zip(family.labels, labels, strict=True))
            out.append(f"{family.name}{{{pairs}}} {format_value(value)}\n")
        else:
            out.append(f"{family.name} {format_value(value)}\n")


def ledger_samples(ledger: Ledger, checkpoints: Mapping[str, str] | None = None,
                   downgrade_unsafe: bool | None = None,
                   ) -> dict[str, list[Sample]]:
    """Node-level families of the ledger (group ``node``, except the counters that live in
    the service)."""
    s: dict[str, list[Sample]] = {}
    if ledger.cpu_pools_by_numa:
        s["podres_cpus"] = [((pool, str(numa)), float(n))
                            for numa, counts in ledger.cpu_pools_by_numa
                            for pool, n in counts.to_json().items()]
    else:
        s["podres_cpus"] = [((pool, ""), float(n))
                            for pool, n in ledger.cpu_pools.to_json().items()]
    s["podres_memory_bytes"] = [((pool, mtype), float(size))
                                for mtype, sizes in ledger.memory_pools
                                for pool, size in zip(MEMORY_POOLS, sizes, strict=True)]
    cpu_counts: Counter[str] = Counter(c.assignment for c in ledger.containers)
    mem_counts: Counter[str] = Counter(c.memory_assignment for c in ledger.containers)
    s["podres_containers"] = [
        ((resource, a), float(counts.get(a, 0)))
        for resource, counts in (("cpu", cpu_counts), ("memory", mem_counts))
        for a in ASSIGNMENTS]
    s["podres_reclaimed_cpus"] = [((), float(ledger.reclaimed_cpus))]
    s["podres_reclaimable_cpus"] = [((), float(ledger.reclaimable_cpus))]
    s["podres_anomalies"] = [((kind,), float(n))
                             for kind, n in ledger.anomaly_counts().items()]
    kubelet = dict(ledger.kubelet)
    if "cpu_manager_policy" in kubelet:
        s["podres_kubelet_info"] = [((
            str(kubelet.get("cpu_manager_policy", "")),
            str(kubelet.get("memory_manager_policy", "")),
            str(kubelet.get("topology_manager_policy", "")),
            str(kubelet.get("topology_manager_scope", "")),
            str(kubelet.get("pod_level_resource_managers", "")).lower(),
        ), 1.0)]
    if checkpoints:
        s["podres_checkpoint_info"] = [((f, fmt), 1.0) for f, fmt in sorted(checkpoints.items())]
    if downgrade_unsafe is not None:
        s["podres_checkpoint_downgrade_unsafe"] = [((), 1.0 if downgrade_unsafe else 0.0)]
    return s


def pod_samples(ledger: Ledger, max_series: int) -> tuple[dict[str, list[Sample]], int]:
    """Per-pod and per-container families, capped at ``max_series`` series in all; returns
    the samples and how many series were left out."""
    s: dict[str, list[Sample]] = {"podres_pod_cpus": [], "podres_pod_reclaimed_cpus": [],
                                  "podres_container_cpus": [], "podres_pod_memory_bytes": []}
    budget = max_series
    dropped = 0
    seen: set[tuple[str, tuple[str, ...]]] = set()

    def add(name: str, labels: Sequence[str], value: float) -> None:
        nonlocal budget, dropped
        key = (name, tuple(labels))
        if key in seen:
            # A kubelet that lists a pod (or a container name) twice: a repeated series
            # would make Prometheus reject the whole scrape. The first one stands; the
            # ledger reports the overlap as an anomaly.
            return
        seen.add(key)
        if budget <= 0:
            dropped += 1
            return
        budget -= 1
        s[name].append((labels, value))

    for p in ledger.pods:
        for pool, n in (("pod_exclusive", p.pod_exclusive_cpus), ("pod_shared", p.pod_shared_cpus),
                        ("pod_idle", p.pod_idle_cpus), ("node_exclusive", p.node_exclusive_cpus)):
            if n:
                add("podres_pod_cpus", (p.namespace, p.name, pool), float(n))
        if p.reclaimed_cpus is not None:
            add("podres_pod_reclaimed_cpus", (p.namespace, p.name), float(p.reclaimed_cpus))
        for pool, mtype, size in p.memory:
            add("podres_pod_memory_bytes", (p.namespace, p.name, pool, mtype), float(size))
    for c in ledger.containers:
        add("podres_container_cpus", (c.namespace, c.pod, c.name, c.assignment),
            float(c.cpu_count))
    return s, dropped


def render(samples: Mapping[str, Sequence[Sample]], *, group: str | None = None,
           always: Iterable[str] = ()) -> str:
    """Render the families present in ``samples`` in catalogue order. Families named in
    ``always`` are written even without samples (HELP/TYPE only)."""
    keep = set(always)
    out: list[str] = []
    for family in FAMILIES:
        if group is not None and family.group != group:
            continue
        rows = samples.get(family.name)
        if rows is None and family.name not in keep:
            continue
        render_family(family, rows or (), out)
    return "".join(out)


__all__ = ["BY_NAME", "escape_label", "ledger_samples", "pod_samples", "render"]
