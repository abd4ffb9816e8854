"""``podres-exporter plan``: model pod budgets from manifests before a rollout.

For every pod template (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob):
QoS, pod budget, each container's eligibility and exclusive CPUs, the legacy and pod-level
reservations, the reclaimed cores and the kubelet's admission verdict; with a node
(``--topology FILE`` or ``--topology.shape SxCxT``) the placement the allocator model
predicts; with ``--suggest`` a pod budget for templates without one. Objects of other kinds
are skipped, counted by kind in one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from exporter.flags import add_flag
from exporter.options import ModelOptions, add_output_flag

HELP = "model pod budgets from manifests: legacy vs pod-level CPUs, admission, placement"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", dest="files", action="append", required=True,
                        metavar="FILE",
                        help="manifest file or directory (YAML or JSON; '-' reads stdin); "
                        "repeatable")
    ModelOptions.add_flags(parser)
    add_output_flag(parser)
    add_flag(parser, "--suggest", action="store_true", default=False,
             help="propose a pod-level budget for templates that have none")


def _fmt_cpus(cpus: frozenset[int] | None) -> str | None:
    from reconciler.cpuset import format_cpuset

    return None if cpus is None else format_cpuset(cpus)


def _suggestion_json(s: Any) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"budget_cpus": s.budget_cpus, "resources": s.resources(),
            "move_to_shared_pool": list(s.shared_containers), "saving_cpus": s.saving_cpus,
            "admitted": s.admitted, "reason": s.reason, "yaml": suggestion_yaml(s)}


def suggestion_yaml(s: Any) -> str:
    import yaml

    return yaml.safe_dump({"spec": {"resources": s.resources()}}, sort_keys=False,
                          default_flow_style=False)


def to_json(plans: list[Any], *, with_topology: bool, with_suggestion: bool) -> dict[str, Any]:
    pods = []
    for p in plans:
        t = p.template
        entry: dict[str, Any] = {
            "kind": t.kind, "namespace": t.namespace, "name": t.name, "qos": p.qos,
            "budget_cpus": p.budget_cpus, "legacy_cpus": p.legacy_cpus,
            "pod_level_cpus": p.pod_level_cpus, "reclaimed_cpus": p.reclaimed_cpus,
            "admitted": p.admitted, "reason": p.reason, "replicas": t.replicas,
            "containers": [{"name": c.name, "sidecar": c.sidecar, "eligible": c.eligible,
                            "exclusive_cpus": c.exclusive_cpus, "cpus": _fmt_cpus(c.cpus)}
                           for c in p.containers],
        }
        if with_topology:
            entry["cpus"] = _fmt_cpus(p.cpus)
            entry["numa_nodes"] = list(p.numa_nodes) if p.numa_nodes is not None else None
        if with_suggestion:
            entry["suggestion"] = _suggestion_json(p.suggestion)
        pods.append(entry)
    total = sum(p.reclaimed_cpus for p in plans if p.admitted)
    return {"pods": pods, "total_reclaimed_cpus": total}


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def _pod_row(p: Any, with_topology: bool) -> list[str]:
    t = p.template
    row = [t.kind, f"{t.namespace}/{t.name}", p.qos,
           "-" if p.budget_cpus is None else str(p.budget_cpus), str(p.legacy_cpus),
           str(p.pod_level_cpus), str(p.reclaimed_cpus), _yes(p.admitted)]
    if with_topology:
        row += [_fmt_cpus(p.cpus) or "-",
                ",".join(map(str, p.numa_nodes)) if p.numa_nodes else "-"]
    return [*row, p.reason or ""]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _container_lines(p: Any, with_topology: bool) -> list[str]:
    rows = [["  CONTAINER", "SIDECAR", "ELIGIBLE", "EXCLUSIVE"] +
            (["CPUS"] if with_topology else [])]
    for c in p.containers:
        row = [f"  {c.name}", _yes(c.sidecar), _yes(c.eligible), str(c.exclusive_cpus)]
        if with_topology:
            row.append(_fmt_cpus(c.cpus) or "-")
        rows.append(row)
    return _table(rows)


def _suggestion_lines(p: Any) -> list[str]:
    s = p.suggestion
    if s is None:
        if p.template.pod.has_pod_cpu_budget:
            return []
        why = "the pod is not Guaranteed" if p.qos != "Guaranteed" else \
            "every container needs its own cores"
        return [f"  no suggestion: {why}"]
    verdict = "" if s.admitted else f" (the kubelet would reject it: {s.reason})"
    saving = f"saves {s.saving_cpus} CPU(s)" if s.saving_cpus > 0 else "no saving"
    lines = [f"  suggested pod budget: {s.budget_cpus} CPUs, {saving}{verdict}; "
             "add to the pod template:"]
    lines += ["    " + ln for ln in suggestion_yaml(s).rstrip().splitlines()]
    if s.shared_containers:
        lines.append("  and remove the cpu request and limit of "
                     f"{', '.join(s.shared_containers)} so they run in the pod shared pool")
    return lines


def render_table(plans: list[Any], *, with_topology: bool, with_suggestion: bool) -> str:
    head = ["KIND", "POD", "QOS", "BUDGET", "LEGACY", "POD-LEVEL", "RECLAIMED", "ADMITTED"]
    if with_topology:
        head += ["CPUS", "NUMA"]
    lines = _table([[*head, "REASON"], *(_pod_row(p, with_topology) for p in plans)])
    for p in plans:
        t = p.template
        lines += ["", f"{t.kind} {t.namespace}/{t.name}:"]
        lines += _container_lines(p, with_topology)
        if with_suggestion:
            lines += _suggestion_lines(p)
    total = sum(p.reclaimed_cpus for p in plans if p.admitted)
    lines += ["", f"total reclaimed CPUs (one pod per template): {total}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from exporter.manifest_files import load_workloads, skipped_summary
    from reconciler.allocator.plan import plan_templates

    found = load_workloads(args.files)
    if found.skipped:
        print(f"podres-exporter plan: {skipped_summary(found.skipped)}", file=sys.stderr)
    templates = list(found.templates)
    topology, config = ModelOptions.from_args(args).build()
    if topology is None:
        # Without a node shape there is nothing to reserve from.
        from dataclasses import replace

        config = replace(config, reserved_cpus=None)
    plans = plan_templates(templates, config, topology=topology,
                           want_suggestion=args.suggest)
    with_topology = topology is not None
    if args.output == "json":
        print(json.dumps(to_json(plans, with_topology=with_topology,
                                 with_suggestion=args.suggest), indent=2))
    else:
        print(render_table(plans, with_topology=with_topology, with_suggestion=args.suggest))
    return 0
