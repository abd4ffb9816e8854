"""``podres-exporter plan``: model pod budgets from manifests before a rollout.

For every pod template (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob):
QoS, pod budget, each container's eligibility and exclusive CPUs, the legacy and pod-level
reservations, the reclaimed cores and the kubelet's admission verdict; with a node
(``--topology FILE`` or ``--topology.shape SxCxT``) the placement the allocator model
predicts; with ``--node`` (a live node through the sources flags, or ``--from DIR``) the
placement on that node as it stands now, seeded from its ledger; with ``--suggest`` a pod
budget for templates without one (docs/plan.md). Objects of other kinds are skipped, counted
by kind in one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from exporter.errors import UserError
from exporter.flags import add_flag
from exporter.options import HistoryOptions, ModelOptions, SourcesOptions, add_output_flag
from exporter.render import COSTS_MORE, human_bytes, reclaimed_cell

if TYPE_CHECKING:
    from reconciler.allocator.live import LiveNode

HELP = "model pod budgets from manifests: legacy vs pod-level CPUs, admission, placement"
# The exit status of --fail-on-refusal: 2 is a usage or input error in every command, so a
# refusal gets a status of its own (docs/plan.md#exit-status).
REFUSED_EXIT = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", dest="files", action="append", required=True,
                        metavar="FILE",
                        help="manifest file or directory (YAML or JSON; '-' reads stdin); "
                        "repeatable")
    ModelOptions.add_flags(parser)
    add_output_flag(parser)
    add_flag(parser, "--suggest", action="store_true", default=False,
             help="propose a pod-level budget for templates that have none")
    add_flag(parser, "--fail-on-refusal", action="store_true", default=False,
             help=f"exit with status {REFUSED_EXIT} when the kubelet would refuse a pod, after "
             "printing the plan (a gate for CI); without it plan exits 0 whatever the "
             "verdicts")
    add_flag(parser, "--node", nargs="?", const="", default=None, metavar="NAME",
             help="place the pods on a live node as it stands now (its free CPUs and "
             "memory, its kubelet configuration when /configz is read), read through the "
             "sources flags or from --from DIR; NAME, when given, is the node's name as "
             "--node-name sets it")
    add_flag(parser, "--from", dest="from_dir", default=None, metavar="DIR",
             help="with --node: read a fixture directory instead of a live node")
    # --topology is the modelled node's flag already; with --node it names the live node's
    # topology.json as in the other commands.
    SourcesOptions.add_flags(parser, only=_SOURCE_FLAGS)
    add_flag(parser, "--fleet", action="store_true", default=False,
             help="place the pods on every node of the history database (--history.url) "
             "as each was last recorded, and rank the nodes by fit (docs/plan.md#fleet)")
    HistoryOptions.add_flags(parser, only=("url",))
    from exporter.commands.plan_fleet import add_flags

    add_flags(parser)


_SOURCE_FLAGS = ("socket", "timeout", "reprobe_interval", "max_receive_bytes", "kubelet_url",
                 "token_file", "ca_file", "insecure_skip_verify", "metrics_interval",
                 "root_dir", "sysfs", "node_name")


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


def node_json(live: LiveNode, name: str) -> dict[str, Any]:
    """The ``node`` object of ``plan --node``: what the placement started from."""
    topo = live.model.topo
    return {
        "name": name,
        "free_cpus": _fmt_cpus(live.free_cpus),
        "free_cpus_by_numa": [{"numa_node": n, "cpus": len(live.free_cpus & cpus)}
                              for n, cpus in topo.numa_cpus.items()],
        "free_memory": [{"numa_node": n, "bytes": b} for n, b in live.free_memory],
        "memory_groups": [list(g) for g in live.memory_groups],
        "free_devices": [{"resource_name": name, "device_id": dev, "numa_nodes": list(numa)}
                         for name, dev, numa in live.free_devices],
        "config": live.model.config.to_configz()["kubeletconfig"],
    }


def to_json(plans: list[Any], *, with_topology: bool, with_suggestion: bool) -> dict[str, Any]:
    pods = []
    for p in plans:
        t = p.template
        entry: dict[str, Any] = {
            "kind": t.kind, "namespace": t.namespace, "name": t.name, "qos": p.qos,
            "budget_cpus": p.budget_cpus, "legacy_cpus": p.legacy_cpus,
            "pod_level_cpus": p.pod_level_cpus, "reclaimed_cpus": p.reclaimed_cpus,
            "admitted": p.admitted, "reason": p.reason, "cause": p.cause,
            "cause_words": p.cause_words, "replicas": t.replicas,
            "memory_bytes": p.memory_bytes or None,
            "missing_devices": list(p.missing_devices), "api_refusal": p.api_refusal,
            "containers": [{"name": c.name, "sidecar": c.sidecar, "eligible": c.eligible,
                            "exclusive_cpus": c.exclusive_cpus, "cpus": _fmt_cpus(c.cpus),
                            "devices": _devices_json(c.devices)}
                           for c in p.containers],
        }
        if with_topology:
            entry["cpus"] = _fmt_cpus(p.cpus)
            entry["numa_nodes"] = list(p.numa_nodes) if p.numa_nodes is not None else None
            entry["memory_numa_nodes"] = list(p.memory_numa) \
                if p.memory_numa is not None else None
        if with_suggestion:
            entry["suggestion"] = _suggestion_json(p.suggestion)
        pods.append(entry)
    total = sum(p.reclaimed_cpus for p in plans if p.admitted)
    return {"pods": pods, "total_reclaimed_cpus": total}


def _devices_json(devices: Any) -> list[dict[str, Any]]:
    """One entry a device: its resource, ID and NUMA nodes (PodResources lists a device
    once per NUMA node)."""
    numa: dict[tuple[str, str], list[int]] = {}
    for d in devices:
        for dev in d.device_ids:
            numa.setdefault((d.resource_name, dev), []).extend(d.numa_nodes)
    return [{"resource_name": r, "device_id": dev, "numa_nodes": sorted(nodes)}
            for (r, dev), nodes in numa.items()]


def _devices_cell(devices: Any) -> str:
    """``nvidia.com/gpu:gpu-1@1`` per device (``@-`` without topology)."""
    return " ".join(
        f"{d['resource_name']}:{d['device_id']}@"
        f"{','.join(map(str, d['numa_nodes'])) or '-'}" for d in _devices_json(devices)) or "-"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def _pod_row(p: Any, with_topology: bool) -> list[str]:
    t = p.template
    row = [t.kind, f"{t.namespace}/{t.name}", p.qos,
           "-" if p.budget_cpus is None else str(p.budget_cpus), str(p.legacy_cpus),
           str(p.pod_level_cpus), reclaimed_cell(p.reclaimed_cpus) if p.admitted else "-",
           _yes(p.admitted), human_bytes(p.memory_bytes) if p.memory_bytes else "-"]
    if with_topology:
        row += [_fmt_cpus(p.cpus) or "-",
                ",".join(map(str, p.numa_nodes)) if p.numa_nodes else "-",
                ",".join(map(str, p.memory_numa)) if p.memory_numa else "-"]
    return [*row, p.reason or ""]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _container_lines(p: Any, with_topology: bool, with_devices: bool = False) -> list[str]:
    rows = [["  CONTAINER", "SIDECAR", "ELIGIBLE", "EXCLUSIVE"] +
            (["CPUS"] if with_topology else []) + (["DEVICES@NUMA"] if with_devices else [])]
    for c in p.containers:
        row = [f"  {c.name}", _yes(c.sidecar), _yes(c.eligible), str(c.exclusive_cpus)]
        if with_topology:
            row.append(_fmt_cpus(c.cpus) or "-")
        if with_devices:
            row.append(_devices_cell(c.devices))
        rows.append(row)
    return _table(rows)


def _cause_lines(p: Any) -> list[str]:
    lines = []
    if p.cause_words and p.cause_words != p.reason:
        lines.append(f"  cause: {p.cause_words}")
    if p.cause_words and p.cause != "duplicate":
        t = p.template
        lines.append(f"  the changes that fit: podres-exporter explain {t.namespace}/{t.name} "
                     "with the same flags")
    if p.api_refusal:
        lines.append(f"  the API server refuses this pod: {p.api_refusal} (pod-level requests "
                     "must cover its containers' requests)")
    if p.missing_devices:
        lines.append(f"  not on this node: {', '.join(p.missing_devices)}: the kubelet admits "
                     "a pod whatever extended resources the node lacks, but the scheduler "
                     "would not place it here")
    return lines


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
    head = ["KIND", "POD", "QOS", "BUDGET", "LEGACY", "POD-LEVEL", "RECLAIMED", "ADMITTED",
            "MEMORY"]
    if with_topology:
        head += ["CPUS", "NUMA", "MEM-NUMA"]
    lines = _table([[*head, "REASON"], *(_pod_row(p, with_topology) for p in plans)])
    if any(p.admitted and p.reclaimed_cpus < 0 for p in plans):
        lines.append(COSTS_MORE)
    with_devices = any(c.devices for p in plans for c in p.containers)
    for p in plans:
        t = p.template
        lines += ["", f"{t.kind} {t.namespace}/{t.name}:"]
        lines += _container_lines(p, with_topology, with_devices)
        lines += _cause_lines(p)
        if with_suggestion:
            lines += _suggestion_lines(p)
    total = sum(p.reclaimed_cpus for p in plans if p.admitted)
    lines += ["", f"total reclaimed CPUs (admitted pods, one per template, net): "
              f"{reclaimed_cell(total)}"]
    return "\n".join(lines)


def _read_node(args: argparse.Namespace) -> tuple[Any, Any]:
    """(snapshot, ledger) of the live node or of ``--from DIR``."""
    import asyncio

    from exporter.assemble import snapshot_from_raw

    node_name = args.node or SourcesOptions.from_args(args).node_name
    if args.from_dir:
        from exporter.commands.snapshot import ledger_from_fixture
        from exporter.sources.fixture import load_fixture_dir

        ledger = ledger_from_fixture(args.from_dir, node_name=node_name)
        return snapshot_from_raw(load_fixture_dir(args.from_dir), node_name).snapshot, ledger
    from exporter.commands.snapshot import read_live

    reading = asyncio.run(read_live(args, "plan"))
    return snapshot_from_raw(reading.raw, node_name).snapshot, reading.ledger


def modelled_node(options: ModelOptions, topology: Any, config: Any, devices: Any
                  ) -> dict[str, Any]:
    """The modelled node ``plan`` and ``explain`` place pods on (``modelled_node`` in
    their JSON): its shape or file, CPUs, memory and devices per NUMA node, and the kubelet
    configuration of the model."""
    return {
        "modelled": options.describe(), "cpus": len(topology.online),
        "memory": [{"numa_node": n, "bytes": topology.memory_of(n)}
                   for n in topology.numa_nodes],
        "memory_per_numa_flag": options.topology_file is None,
        "devices": [{"resource_name": name, "device_id": d.id, "numa_nodes": list(d.numa)}
                    for name, devs in devices.resources for d in devs],
        "config": config.to_configz()["kubeletconfig"],
        "distances": {str(n): list(row) for n, row in topology.distances},
    }


def topology_options_words(cfg: dict[str, Any]) -> str:
    """``, prefer-closest-numa-nodes, max-allowable-numa-nodes=16`` for the topology
    manager's options in a ``/configz`` body (empty without any)."""
    return "".join(f", {name}" if name == "prefer-closest-numa-nodes" else f", {name}={value}"
                   for name, value in sorted(cfg.get("topologyManagerPolicyOptions", {})
                                             .items()))


def modelled_node_line(node: dict[str, Any]) -> str:
    """One line for a table: what the modelled node has, and the flag that sets its memory
    (a modelled shape's memory per NUMA node is --memory-per-numa, docs/plan.md)."""
    sizes = {m["bytes"] for m in node["memory"]}
    if len(sizes) == 1:
        memory = f"{human_bytes(sizes.pop())} memory per NUMA node"
    else:
        memory = "memory " + ", ".join(f"NUMA {m['numa_node']}: {human_bytes(m['bytes'])}"
                                       for m in node["memory"])
    if node["memory_per_numa_flag"]:
        memory += " (--memory-per-numa)"
    counts: dict[str, int] = {}
    for d in node["devices"]:
        counts[d["resource_name"]] = counts.get(d["resource_name"], 0) + 1
    devices = ", ".join(f"{n} {name}" for name, n in counts.items()) or "no devices"
    cfg = node["config"]
    distances = node.get("distances")
    if distances:
        devices += "; NUMA distances " + ";".join(",".join(map(str, row))
                                                  for row in distances.values())
    return (f"node: modelled {node['modelled']}: {node['cpus']} CPUs on "
            f"{len(node['memory'])} NUMA node(s), {memory}, {devices}; memory manager "
            f"{cfg['memoryManagerPolicy']}, topology manager {cfg['topologyManagerPolicy']} "
            f"(scope {cfg['topologyManagerScope']}{topology_options_words(cfg)}), reserved "
            f"CPUs {cfg.get('reservedSystemCPUs', '-')}\n")


def _live_node(args: argparse.Namespace, fallback: Any) -> tuple[LiveNode, str]:
    from reconciler.allocator.live import LiveNodeError, live_config, live_node
    from reconciler.allocator.model import ModelError

    snapshot, ledger = _read_node(args)
    try:
        live = live_node(snapshot, ledger, live_config(snapshot, fallback))
    except (LiveNodeError, ModelError) as exc:
        raise UserError(f"--node: {exc}") from None
    # `--node NAME` names the node, whatever the sources call it (--node-name, /pods).
    return live, args.node or ledger.node_name


def refused(plans: list[Any]) -> list[str]:
    """``namespace/name`` of every template whose pod the kubelet would refuse, or the API
    server would (a budget smaller than its containers)."""
    return [f"{p.template.namespace}/{p.template.name}" for p in plans
            if not p.admitted or p.api_refusal]


def run(args: argparse.Namespace) -> int:
    from exporter.manifest_files import load_workloads, skipped_summary
    from reconciler.allocator.plan import plan_templates

    found = load_workloads(args.files)
    if found.skipped:
        print(f"podres-exporter plan: {skipped_summary(found.skipped)}", file=sys.stderr)
    templates = list(found.templates)
    if args.fleet:
        return _fleet(args, templates)
    on_node = args.node is not None
    if args.from_dir and not on_node:
        raise UserError("--from DIR reads a node: it goes with --node")
    if args.from_dir:
        from exporter.commands._sources import refuse_ignored_with_from

        refuse_ignored_with_from(args, keep=("node_name",))
    options = ModelOptions.from_args(args)
    if on_node and options.shape:
        raise UserError("--node places pods on the node as read: --topology.shape does not "
                        "apply")
    if on_node and options.distances:
        raise UserError("--topology.distances describes a modelled node: with --node the "
                        "node's own distances (sysfs) are used")
    topology, config = options.build() if not on_node else (None, options.build()[1])
    if on_node and options.devices:
        raise UserError("--devices describes a modelled node: with --node the node's own "
                        "devices (GetAllocatableResources) are used")
    devices = options.node_devices(topology)
    live, name = None, ""
    if on_node:
        live, name = _live_node(args, config)
    elif topology is None:
        # Without a node shape there is nothing to reserve from.
        from dataclasses import replace

        config = replace(config, reserved_cpus=None)
    plans = plan_templates(templates, config, topology=topology,
                           want_suggestion=args.suggest,
                           node=live.model if live is not None else None, devices=devices)
    modelled = modelled_node(options, topology, config, devices) \
        if topology is not None else None
    _print(args, plans, live, name, modelled)
    if args.fail_on_refusal:
        names = refused(plans)
        if names:
            print(f"podres-exporter plan: refused: {', '.join(names)}", file=sys.stderr)
            return REFUSED_EXIT
    return 0


def _print(args: argparse.Namespace, plans: list[Any], live: LiveNode | None, name: str,
           modelled: dict[str, Any] | None) -> None:
    with_topology = modelled is not None or live is not None
    if args.output == "json":
        out = to_json(plans, with_topology=with_topology, with_suggestion=args.suggest)
        if live is not None:
            out["node"] = node_json(live, name)
        if modelled is not None:
            out["modelled_node"] = modelled
        print(json.dumps(out, indent=2))
        return
    if live is not None:
        print(_node_line(live, name))
    if modelled is not None:
        print(modelled_node_line(modelled))
    print(render_table(plans, with_topology=with_topology, with_suggestion=args.suggest))


def _fleet(args: argparse.Namespace, templates: list[Any]) -> int:
    from exporter.commands.plan_fleet import check_args, run_fleet

    options = ModelOptions.from_args(args)
    check_args(args, options)
    # A node whose /configz was not read is modelled with the policy flags.
    return run_fleet(args, templates, options.build()[1])


def _node_line(live: LiveNode, name: str) -> str:
    topo = live.model.topo
    per_numa = ", ".join(f"NUMA {n}: {len(live.free_cpus & cpus)}"
                         for n, cpus in topo.numa_cpus.items())
    return (f"node {name}: free CPUs {_fmt_cpus(live.free_cpus) or '-'} ({per_numa}); "
            "pods placed on it as it stands now\n")
