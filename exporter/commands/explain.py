"""``podres-exporter explain``: why the model places a pod where it does, or refuses it, in
plain words, and for a refusal the smallest changes the model then admits (docs/explain.md).

Three ways to name the pod: a pod already on a live node (``--node POD``, read through the
sources flags, or ``--from DIR``); a manifest on that node as it stands (``--node -f FILE``);
a manifest on a modelled node (``-f FILE`` with the modelled-node flags ``plan`` takes).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from exporter.errors import UserError
from exporter.flags import add_flag
from exporter.options import ModelOptions, SourcesOptions, add_output_flag

if TYPE_CHECKING:
    from reconciler.allocator.explain import Explanation, HintStep
    from reconciler.allocator.hints import Hint
    from reconciler.allocator.model import NodeModel
    from reconciler.kube import PodSpec

HELP = "why the model places a pod where it does, or refuses it, and what change would fit"
# ``explain -f`` without a node shape: each pod on a node of its own (plan's
# ``_scratch_model``), not on the modelled-node defaults the flags list.
SCRATCH = ("each pod on a scratch node of its own, not on the modelled-node defaults the "
           "flags list: one NUMA node "
           "with just enough CPUs, no reserved CPUs, no CPU manager policy options, memory "
           "manager None, topology manager best-effort (none with --topology-policy none), "
           "--scope as given; only the pod-budget rules can refuse there. Give "
           "--topology.shape SxCxT (or --topology FILE) to model a node")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exporter.commands.plan import _SOURCE_FLAGS

    parser.epilog = f"Without --node or a node shape, -f explains {SCRATCH}."
    parser.add_argument("pod", nargs="?", default=None, metavar="[NAMESPACE/]NAME",
                        help="the pod to explain: with --node and no -f, a pod on the node; "
                        "with -f, one template of the manifests (default: every template)")
    parser.add_argument("-f", "--filename", dest="files", action="append", default=None,
                        metavar="FILE",
                        help="manifest file or directory (YAML or JSON; '-' reads stdin); "
                        "repeatable")
    ModelOptions.add_flags(parser)
    add_output_flag(parser)
    add_flag(parser, "--node", nargs="?", const="", default=None, metavar="NAME",
             help="explain on a live node as it stands now, read through the sources flags "
             "or from --from DIR: a pod it runs (explain --node [NAMESPACE/]NAME: without -f "
             "the one value given is the pod) or the manifests' templates (explain --node "
             "[NAME] -f FILE: NAME, when given, is the node's name as --node-name sets it)")
    add_flag(parser, "--from", dest="from_dir", default=None, metavar="DIR",
             help="with --node: read a fixture directory instead of a live node")
    SourcesOptions.add_flags(parser, only=_SOURCE_FLAGS)


# ---- finding the pod and the node -----------------------------------------------------------


def _matches(selector: str | None, namespace: str, name: str) -> bool:
    if selector is None:
        return True
    if "/" in selector:
        return selector == f"{namespace}/{name}"
    return selector == name


def _templates(args: argparse.Namespace) -> list[Any]:
    import sys

    from exporter.manifest_files import load_workloads, skipped_summary

    found = load_workloads(args.files)
    if found.skipped:
        print(f"podres-exporter explain: {skipped_summary(found.skipped)}", file=sys.stderr)
    templates = list(found.templates)
    if args.pod is not None and not any(_matches(args.pod, t.namespace, t.name)
                                        for t in templates):
        names = ", ".join(f"{t.namespace}/{t.name}" for t in templates)
        raise UserError(f"no template {args.pod} in the manifests (they hold {names})")
    return templates


def _on_model(args: argparse.Namespace, model: NodeModel | None, config: Any) -> list[Any]:
    """Every selected template explained on ``model`` as ``plan`` places them: in order, each
    on the node the earlier ones left; without a node, each alone on a node just big enough
    (only the kubelet's budget rules can refuse it)."""
    from dataclasses import replace

    from reconciler.allocator.explain import explain
    from reconciler.allocator.plan import _scratch_model

    out = []
    for i, t in enumerate(_templates(args)):
        pod = t.pod
        if model is not None and (pod.namespace, pod.name) in model.pods:
            pod = replace(pod, name=f"{pod.name}-{i}")
        node = model if model is not None else _scratch_model(pod, config)
        if _matches(args.pod, t.namespace, t.name):
            out.append((t.kind, explain(node, pod)))
        if model is not None:
            model.admit(pod)
    return out


def _on_node_pod(args: argparse.Namespace, config: Any) -> list[Any]:
    from exporter.commands.plan import _read_node
    from reconciler.allocator.explain import before_pod, explain
    from reconciler.allocator.live import LiveNodeError, live_config
    from reconciler.allocator.model import ModelError

    if args.pod is None:
        raise UserError("--node without -f explains a pod on the node: name it "
                        "([NAMESPACE/]NAME)")
    snapshot, ledger = _read_node(args)
    namespace, name = _pod_on_node(args.pod, snapshot.pod_specs or ())
    try:
        model, spec = before_pod(snapshot, ledger, live_config(snapshot, config), namespace,
                                 name)
    except (LiveNodeError, ModelError) as exc:
        raise UserError(f"--node: {exc}") from None
    return [("Pod", explain(model, spec))]


def _pod_on_node(selector: str, specs: tuple[PodSpec, ...]) -> tuple[str, str]:
    if "/" in selector:
        namespace, _, name = selector.partition("/")
        return namespace, name
    found = [p for p in specs if p.name == selector]
    if len(found) > 1:
        spaces = ", ".join(sorted(p.namespace for p in found))
        raise UserError(f"pod {selector} is in several namespaces ({spaces}): name it as "
                        "NAMESPACE/NAME")
    return (found[0].namespace, selector) if found else ("default", selector)


def _explanations(args: argparse.Namespace) -> tuple[dict[str, Any] | None, list[Any]]:
    """(the node the pods are explained on, as ``plan``'s ``modelled_node`` or the scratch
    node; ``None`` for a live node), and each pod's explanation."""
    options = ModelOptions.from_args(args)
    if args.from_dir and args.node is None:
        raise UserError("--from DIR reads a node: it goes with --node")
    if args.node is None and not args.files:
        raise UserError("name the pod: -f FILE (a manifest), or --node POD (a pod on a node)")
    if args.node is not None and options.shape:
        raise UserError("--node explains on the node as read: --topology.shape does not apply")
    if args.node is None:
        from dataclasses import replace

        from exporter.commands.plan import modelled_node
        from reconciler.allocator.model import NodeModel

        topology, config = options.build()
        if topology is None:
            return {"scratch": SCRATCH}, _on_model(args, None,
                                                   replace(config, reserved_cpus=None))
        devices = options.node_devices(topology)
        return (modelled_node(options, topology, config, devices),
                _on_model(args, NodeModel(topology, config, devices), config))
    if options.distances:
        raise UserError("--topology.distances describes a modelled node: with --node the "
                        "node's own distances (sysfs) are used")
    config = options.build()[1]
    if options.devices:
        raise UserError("--devices describes a modelled node: with --node the node's own "
                        "devices (GetAllocatableResources) are used")
    if not args.files:
        return None, _on_node_pod(args, config)
    from exporter.commands.plan import _live_node

    live, _ = _live_node(args, config)
    return None, _on_model(args, live.model, config)


def _pod_after_node(args: argparse.Namespace) -> None:
    """``explain --node POD``, as the docs write it: ``--node`` takes an optional node name
    (as in ``plan``), so argparse gives it the pod. Without -f and without another
    positional value, that value can only be the pod."""
    if args.node and args.pod is None and not args.files:
        args.pod, args.node = args.node, ""


def run(args: argparse.Namespace) -> int:
    from exporter.commands.plan import modelled_node_line

    _pod_after_node(args)
    node, found = _explanations(args)
    if args.output == "json":
        out: dict[str, Any] = {"pods": [to_json(kind, e) for kind, e in found]}
        if node is not None:
            out["scratch_node" if "scratch" in node else "modelled_node"] = \
                node.get("scratch", node)
        print(json.dumps(out, indent=2))
        return 0
    if node is not None:
        print(f"node: {node['scratch']}\n" if "scratch" in node else modelled_node_line(node))
    print("\n\n".join(render(kind, e, node) for kind, e in found))
    return 0


# ---- output ---------------------------------------------------------------------------------


def _cpus(cpus: frozenset[int] | None) -> str | None:
    from reconciler.cpuset import format_cpuset

    return None if cpus is None else (format_cpuset(cpus) or "-")


def _hints_json(hints: tuple[Hint, ...]) -> list[dict[str, Any]]:
    return [{"numa_nodes": sorted(m), "preferred": p} for m, p in hints]


def _hint_json(h: HintStep) -> dict[str, Any]:
    return {"request": h.request, "cpus": h.cpus, "memory_bytes": h.memory,
            "device_hints": [{"resource_name": n, "hints": _hints_json(hs)}
                             for n, hs in h.device_hints],
            "cpu_hints": _hints_json(h.cpu_hints), "memory_hints": _hints_json(h.memory_hints),
            "chosen": sorted(h.chosen) if h.chosen is not None else None,
            "refusal": h.refusal}


def _configz(c: Any) -> dict[str, Any]:
    """The ``/configz`` body of a model configuration (its kubeletconfig object)."""
    body: dict[str, Any] = c.to_configz()["kubeletconfig"]
    return body


def to_json(kind: str, e: Explanation) -> dict[str, Any]:
    c = e.config
    return {
        "kind": kind, "namespace": e.namespace, "name": e.name, "qos": e.qos,
        "budget_cpus": e.budget_cpus,
        "node": {"cpu_manager_policy": c.cpu_policy, "memory_manager_policy": c.memory_policy,
                 "topology_manager_policy": c.topology_policy, "topology_manager_scope": c.scope,
                 "cpu_manager_policy_options": sorted(c.options),
                 "topology_manager_policy_options": _configz(c).get(
                     "topologyManagerPolicyOptions", {}),
                 "reserved_cpus": _cpus(e.reserved)},
        "path": e.path, "path_words": e.path_words,
        "containers": [{"name": s.name, "role": s.role, "cpu": s.cpu, "memory_bytes": s.memory,
                        "eligible": s.eligible, "why": s.why, "cpus": _cpus(s.cpus)}
                       for s in e.containers],
        "hints": [_hint_json(h) for h in e.hints],
        "options": [{"name": o.name, "meaning": o.meaning, "effect": o.effect}
                    for o in e.options],
        "admitted": e.admitted, "reason": e.reason, "cause": e.cause,
        "cause_words": e.cause_words, "second_cause": e.second_cause, "cpus": _cpus(e.cpus),
        "numa_nodes": list(e.numa_nodes) if e.numa_nodes is not None else None,
        "changes": [{"kind": ch.kind, "change": ch.change, "cpus": _cpus(ch.cpus),
                     "numa_nodes": list(ch.numa_nodes), "pod_cpus": ch.pod_cpus,
                     "container_cpus": dict(ch.container_cpus), "kubelet": dict(ch.kubelet),
                     "pod_memory_bytes": dict(ch.memory).get(""),
                     "container_memory_bytes": {k: v for k, v in ch.memory if k},
                     "container_devices": [{"container": c, "resource_name": r, "count": n}
                                           for c, r, n in ch.devices]}
                    for ch in e.changes],
    }


def _mask(m: frozenset[int]) -> str:
    return "NUMA " + "+".join(map(str, sorted(m)))


def _hint_words(hints: tuple[Hint, ...]) -> str:
    if not hints:
        return "nothing (no NUMA nodes with room)"
    return ", ".join(_mask(m) + (" (preferred)" if p else "") for m, p in hints)


def _size(n: int | None) -> str:
    from exporter.render import human_bytes

    return "-" if not n else human_bytes(n)


def _hint_lines(e: Explanation) -> list[str]:
    policy = e.config.topology_policy
    if policy == "none":
        return ["hints: the topology manager policy is none: no hints are merged, CPUs come "
                "from the whole node"]
    if not e.hints:
        return [f"hints ({policy}): none asked (no exclusive CPUs or pinned memory)"]
    lines = [f"hints (topology manager policy {policy}, scope {e.config.scope}):"]
    for h in e.hints:
        lines.append(f"  {h.request}: {h.cpus} CPU(s), memory {_size(h.memory)}")
        for name, hints in h.device_hints:
            lines.append(f"    device manager offers for {name} {_hint_words(hints)}")
        if h.cpus:
            lines.append(f"    CPU manager offers {_hint_words(h.cpu_hints)}")
        if e.config.memory_policy != "Static":
            lines.append("    memory manager policy None: no memory hints")
        elif h.memory_hints or h.memory:
            lines.append(f"    memory manager offers {_hint_words(h.memory_hints)}")
        chosen = _mask(h.chosen) if h.chosen is not None else h.refusal
        lines.append(f"    chosen: {chosen}")
    return lines


def _container_lines(e: Explanation) -> list[str]:
    from exporter.commands.plan import _table

    rows = [["  CONTAINER", "ROLE", "CPU", "MEMORY", "ELIGIBLE", "CPUS", "WHY"]]
    for s in e.containers:
        rows.append([f"  {s.name}", s.role, s.cpu, _size(s.memory),
                     "yes" if s.eligible else "no", _cpus(s.cpus) or "-", s.why])
    return _table(rows)


def _result_lines(e: Explanation) -> list[str]:
    if e.admitted:
        numa = ",".join(map(str, e.numa_nodes or ())) or "-"
        line = f"result: admitted, CPUs {_cpus(e.cpus)} (NUMA {numa})"
        return [line + (f"; {e.reason}" if e.reason else "")]
    lines = [f"result: refused: {e.reason}", f"cause: {e.cause_words}"]
    if not e.changes and e.second_cause is not None:
        return [*lines, "no change that the model admits was found, alone or together with a "
                "budget that covers the containers"]
    if not e.changes:
        return [*lines, "no single change that the model admits was found"]
    lines.append("changes that fit (each admitted by the model run again):")
    for ch in e.changes:
        numa = ",".join(map(str, ch.numa_nodes)) or "-"
        lines.append(f"  - {ch.change}: admitted, CPUs {_cpus(ch.cpus)} (NUMA {numa})")
    return lines


def _memory_flag_line(e: Explanation, node: dict[str, Any] | None) -> list[str]:
    """Where memory decided on a modelled shape: the flag that sizes its NUMA nodes."""
    if e.cause != "memory-numa" or node is None or not node.get("memory_per_numa_flag"):
        return []
    from exporter.render import human_bytes

    size = human_bytes(node["memory"][0]["bytes"])
    return [f"the modelled node has {size} per NUMA node: --memory-per-numa SIZE models a "
            "node with more"]


def render(kind: str, e: Explanation, node: dict[str, Any] | None = None) -> str:
    from exporter.commands.plan import topology_options_words

    c = e.config
    budget = f", pod budget {e.budget_cpus} CPUs" if e.budget_cpus is not None else ""
    options = ", ".join(sorted(c.options)) or "none"
    lines = [f"{kind} {e.namespace}/{e.name}: {e.qos}{budget}",
             f"node: CPU manager {c.cpu_policy} (options: {options}), memory manager "
             f"{c.memory_policy}, topology manager {c.topology_policy}, scope {c.scope}"
             f"{topology_options_words(_configz(c))}, "
             f"reserved CPUs {_cpus(e.reserved)}",
             f"path: {e.path_words}", "containers:", *_container_lines(e), *_hint_lines(e)]
    if e.options:
        lines.append("options:")
        lines += [f"  {o.name} ({o.meaning}): {o.effect}" for o in e.options]
    return "\n".join(lines + _result_lines(e) + _memory_flag_line(e, node))
