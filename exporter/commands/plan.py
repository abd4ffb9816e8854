"""``podres-exporter plan``: model pod budgets from manifests before a rollout.

For every pod template (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob):
QoS, pod budget, each container's eligibility and exclusive CPUs, the legacy and pod-level
reservations, the reclaimed cores and the kubelet's admission verdict; with ``--topology``
the placement the allocator model predicts; with ``--suggest`` a pod budget for templates
without one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from exporter.errors import UserError
from exporter.flags import add_flag

HELP = "model pod budgets from manifests: legacy vs pod-level CPUs, admission, placement"

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_BYTES = 32 << 20


def add_model_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                    *, scope_default: str = "pod") -> None:
    """Flags describing the modelled node (shared with the model-driven simulator)."""
    add_flag(parser, "--topology", default=None, metavar="SxCxT",
             help="sockets x cores per socket x threads per core of the modelled node, "
             "e.g. 2x16x2")
    add_flag(parser, "--numa-per-socket", default=1, type=int, metavar="N",
             help="NUMA nodes per socket of the modelled node")
    add_flag(parser, "--scope", default=scope_default, choices=("pod", "container"),
             help="topology manager scope")
    add_flag(parser, "--topology-policy", default="single-numa-node",
             choices=("none", "best-effort", "restricted", "single-numa-node"),
             help="topology manager policy")
    add_flag(parser, "--reserved", default="0", metavar="CPUSET",
             help="reservedSystemCPUs of the modelled node (Linux list format; '' for none)")
    add_flag(parser, "--cpu-policy-options", default="", metavar="OPT[,OPT]",
             help="CPU manager policy options: full-pcpus-only, distribute-cpus-across-numa, "
             "strict-cpu-reservation")


def model_from_args(args: argparse.Namespace, *, pod_level: bool = True) -> tuple[Any, Any]:
    """(CPUTopology or None, ModelConfig) from the model flags; bad values are UserErrors."""
    from reconciler.allocator import ModelConfig, ModelError, TopologyError, from_spec
    from reconciler.cpuset import CPUSetError, parse_cpuset

    topology = None
    if args.topology:
        try:
            topology = from_spec(args.topology, numa_per_socket=args.numa_per_socket)
        except TopologyError as exc:
            raise UserError(str(exc)) from None
    try:
        reserved = parse_cpuset(args.reserved or "")
    except CPUSetError as exc:
        raise UserError(f"--reserved: {exc}") from None
    options = frozenset(o.strip() for o in (args.cpu_policy_options or "").split(",")
                        if o.strip())
    try:
        config = ModelConfig(topology_policy=args.topology_policy, scope=args.scope,
                             options=options, reserved_cpus=reserved or None,
                             pod_level=pod_level)
        if topology is not None:
            unknown = reserved - topology.online
            if unknown:
                raise UserError(f"--reserved: CPUs {args.reserved} are not on a "
                                f"{len(topology.online)}-CPU {args.topology} node")
    except ModelError as exc:
        raise UserError(str(exc)) from None
    return topology, config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", dest="files", action="append", required=True,
                        metavar="FILE",
                        help="manifest file or directory (YAML or JSON; '-' reads stdin); "
                        "repeatable")
    add_model_flags(parser)
    add_flag(parser, "--output", "-o", default="table", choices=("table", "json"),
             help="output format")
    add_flag(parser, "--suggest", action="store_true", default=False,
             help="propose a pod-level budget for templates that have none")


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
    from exporter.files import read_text_file

    return read_text_file(name, MAX_BYTES)


def load_documents(name: str) -> list[Any]:
    """The YAML (or JSON) documents of one file; a syntax error is one UserError line."""
    import yaml

    text = _read_text(name)
    label = "stdin" if name == "-" else name
    try:
        return list(yaml.safe_load_all(text))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise UserError(f"{label}: invalid YAML: {exc.problem or exc}{where}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{label}: invalid YAML: {exc}") from None


def load_templates(names: Iterable[str]) -> list[Any]:
    """Every pod template in the given files and directories."""
    from reconciler.manifests import ManifestError, templates_from_manifest

    templates: list[Any] = []
    for name in _manifest_paths(names):
        label = "stdin" if name == "-" else name
        for i, doc in enumerate(load_documents(name)):
            source = label if i == 0 else f"{label} document {i + 1}"
            try:
                templates.extend(templates_from_manifest(doc, source))
            except ManifestError as exc:
                raise UserError(str(exc)) from None
    return templates


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


def render_table(plans: list[Any], *, with_topology: bool, with_suggestion: bool) -> str:
    head = ["KIND", "POD", "QOS", "BUDGET", "LEGACY", "POD-LEVEL", "RECLAIMED", "ADMITTED"]
    if with_topology:
        head += ["CPUS", "NUMA"]
    head.append("REASON")
    lines: list[str] = []
    rows = [head]
    for p in plans:
        t = p.template
        row = [t.kind, f"{t.namespace}/{t.name}", p.qos,
               "-" if p.budget_cpus is None else str(p.budget_cpus), str(p.legacy_cpus),
               str(p.pod_level_cpus), str(p.reclaimed_cpus), "yes" if p.admitted else "no"]
        if with_topology:
            row += [_fmt_cpus(p.cpus) or "-",
                    ",".join(map(str, p.numa_nodes)) if p.numa_nodes else "-"]
        row.append(p.reason or "")
        rows.append(row)
    lines += _table(rows)
    for p in plans:
        t = p.template
        lines.append("")
        lines.append(f"{t.kind} {t.namespace}/{t.name}:")
        crow = [["  CONTAINER", "SIDECAR", "ELIGIBLE", "EXCLUSIVE"] +
                (["CPUS"] if with_topology else [])]
        for c in p.containers:
            r = [f"  {c.name}", "yes" if c.sidecar else "no", "yes" if c.eligible else "no",
                 str(c.exclusive_cpus)]
            if with_topology:
                r.append(_fmt_cpus(c.cpus) or "-")
            crow.append(r)
        lines += _table(crow)
        s = p.suggestion
        if with_suggestion and s is not None:
            verdict = "" if s.admitted else f" (the kubelet would reject it: {s.reason})"
            saving = f"saves {s.saving_cpus} CPU(s)" if s.saving_cpus > 0 else "no saving"
            lines.append(f"  suggested pod budget: {s.budget_cpus} CPUs, {saving}{verdict}; "
                         "add to the pod template:")
            lines += ["    " + ln for ln in suggestion_yaml(s).rstrip().splitlines()]
            if s.shared_containers:
                lines.append("  and remove the cpu request and limit of "
                             f"{', '.join(s.shared_containers)} so they run in the pod "
                             "shared pool")
        elif with_suggestion and not p.template.pod.has_pod_cpu_budget:
            why = "the pod is not Guaranteed" if p.qos != "Guaranteed" else \
                "every container needs its own cores"
            lines.append(f"  no suggestion: {why}")
    total = sum(p.reclaimed_cpus for p in plans if p.admitted)
    lines.append("")
    lines.append(f"total reclaimed CPUs (one pod per template): {total}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from reconciler.allocator.plan import plan_templates

    templates = load_templates(args.files)
    if not templates:
        raise UserError("no pod templates found in " + ", ".join(args.files))
    topology, config = model_from_args(args)
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
