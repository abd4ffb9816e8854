"""How each kind of case in the conformance data is run against the model."""

from __future__ import annotations

from typing import Any

from allocator.conformance.fixtures import TOPOLOGIES
from reconciler.allocator import (
    ModelConfig,
    ModelError,
    NodeModel,
    PodPlacement,
    parse_policy_options,
    pod_guaranteed_cpus,
)
from reconciler.allocator.config import MODELLED_OPTIONS
from reconciler.allocator.model import smt_alignment_error
from reconciler.allocator.resize import take_distributed_for_resize
from reconciler.allocator.start import validate_state
from reconciler.allocator.take import (
    _Acc,
    take_by_topology,
    take_distributed,
    take_for_resize,
)
from reconciler.cpuset import format_cpuset, parse_cpuset
from reconciler.kube import ContainerSpec, PodSpec, Resources, cpu_millis, memory_bytes

Result = tuple[str, str]

# Kinds the model has no counterpart for, with the reason.
UNSUPPORTED_KINDS: dict[str, str] = {
    "accumulator_bookkeeping": "internal helper of the Go accumulator (isSatisfied/isFailed "
                               "after hand-fed takes)",
}


def missing_feature(body: dict[str, Any]) -> str:
    """The unmodelled policy option a case turns on, if any (option-parsing cases excepted:
    parsing knows every option)."""
    if body.get("kind") == "parse_options" or "options" not in body:
        return ""
    for option, value in (body["options"] or {}).items():
        if option not in MODELLED_OPTIONS and value == "true":
            return f"policy option {option}"
        if option == "prefer-align-cpus-by-uncorecache" and value == "true" \
                and body.get("topology") not in TOPOLOGIES:
            return "uncore fixture topologies not translated"
    return ""


def _verdict(want: object, got: object) -> Result:
    if want == got:
        return "agree", ""
    return "disagree", f"want {want!r}, got {got!r}"


def free_units(body: dict[str, Any]) -> Result:
    topo = TOPOLOGIES[body["topology"]]
    acc = _Acc(topo, parse_cpuset(body["available"]), 0)
    got: dict[str, list[int]] = {}
    for level in body["expect"]:
        if level == "cpu":
            got[level] = [c for core in acc.cores() for c in sorted(topo.core_cpus[core]
                                                                     & acc.free)]
            continue
        units, order = {"socket": (topo.socket_cpus, acc.sockets),
                        "numa": (topo.numa_cpus, acc.numas),
                        "core": (topo.core_cpus, acc.cores)}[level]
        whole = [u for u in order() if units[u] <= acc.free]
        # The Go test of free sockets sorts before comparing.
        got[level] = sorted(whole) if level == "socket" and len(body["expect"]) == 1 \
            else whole
    return _verdict(body["expect"], got)


def _take_result(body: dict[str, Any], got: frozenset[int] | None) -> Result:
    want = body["expect"]
    if "error" in want:
        return ("agree", "") if got is None else ("disagree", f"took {format_cpuset(got)}")
    if got is None:
        return "disagree", "refused"
    return _verdict(format_cpuset(parse_cpuset(want["cpus"])), format_cpuset(got))


def take_packed(body: dict[str, Any]) -> Result:
    topo = TOPOLOGIES[body["topology"]]
    options = parse_policy_options(body.get("options"))
    got = take_by_topology(topo, parse_cpuset(body["available"]), body["num_cpus"],
                           spread="distribute-cpus-across-cores" in options,
                           uncore="prefer-align-cpus-by-uncorecache" in options)
    return _take_result(body, got)


def take_resize(body: dict[str, Any]) -> Result:
    topo = TOPOLOGIES[body["topology"]]
    options = parse_policy_options(body.get("options"))
    got = take_for_resize(topo, parse_cpuset(body["available"]), body["num_cpus"],
                          parse_cpuset(body["allocated"]), parse_cpuset(body["baseline"]),
                          spread="distribute-cpus-across-cores" in options,
                          uncore="prefer-align-cpus-by-uncorecache" in options)
    return _take_result(body, got)


def take_distributed_resize(body: dict[str, Any]) -> Result:
    got = take_distributed_for_resize(
        TOPOLOGIES[body["topology"]], parse_cpuset(body["available"]), body["num_cpus"],
        parse_cpuset(body["allocated"]), parse_cpuset(body["baseline"]),
        body.get("cpu_group_size", 1), align_by_socket=body.get("align_by_socket", False))
    return _take_result(body, got)


def take_distributed_case(body: dict[str, Any]) -> Result:
    topo = TOPOLOGIES[body["topology"]]
    got = take_distributed(topo, parse_cpuset(body["available"]), body["num_cpus"],
                           body.get("cpu_group_size", 1))
    return _take_result(body, got)


def _container(name: str, spec: dict[str, Any], *, init: bool = False) -> ContainerSpec:
    mem = memory_bytes(spec["memory"])
    r = Resources(cpu_millis(spec["cpu_request"]), cpu_millis(spec["cpu_limit"]), mem, mem)
    sidecar = bool(spec.get("sidecar"))
    return ContainerSpec(name, r, sidecar=sidecar, init=init and not sidecar)


def _pod(spec: dict[str, Any]) -> PodSpec:
    return PodSpec(
        "default", "fakePod", "fakePod",
        containers=tuple(_container(f"appContainer-{i}", c)
                         for i, c in enumerate(spec.get("containers", ()))),
        init_containers=tuple(_container(f"initContainer-{i}", c, init=True)
                              for i, c in enumerate(spec.get("init_containers", ()))))


def _node(body: dict[str, Any]) -> NodeModel:
    """A model node in the state the Go case sets up: its reserved CPUs and default set."""
    reserved = parse_cpuset(body["reserved"]) if body.get("reserved") else None
    config = ModelConfig(options=parse_policy_options(body.get("options")),
                         reserved_cpus=reserved,
                         reserved_cpu_m=1000 * body.get("reserved_count", 0),
                         memory_policy="None")
    node = NodeModel(TOPOLOGIES[body["topology"]], config)
    if "default" in body:
        node.free = set(parse_cpuset(body["default"]) - node.reserved)
    return node


def _refusal(body: dict[str, Any], reason: str) -> Result:
    """The model refused: agree when the kubelet's own error text is the reason."""
    want = body["expect"]
    if "error" not in want:
        return "disagree", f"refused: {reason}"
    return ("agree", "") if reason.endswith(want["error"]) else \
        ("disagree", f"want {want['error']!r}, got {reason!r}")


def allocate(body: dict[str, Any]) -> Result:
    node = _node(body)
    pod = _pod(body["pod"])
    if "hint" in body:
        n = pod.containers[0].resources.integer_cpus or 0
        try:
            got = node.allocate_cpus(n, frozenset(body["hint"]))
        except ModelError as exc:
            return _refusal(body, str(exc))
        return _verdict(body["expect"], {"cpus": format_cpuset(got)})
    placed = node.admit(pod)
    if not isinstance(placed, PodPlacement):
        return _refusal(body, placed.reason)
    want = body["expect"]
    got_cpus = placed.containers[0].exclusive
    if want.get("no_alloc"):
        return ("agree", "") if not got_cpus else ("disagree", format_cpuset(got_cpus))
    if "error" in want:
        return "disagree", f"placed on {format_cpuset(got_cpus)}"
    return _verdict(format_cpuset(parse_cpuset(want["cpus"])), format_cpuset(got_cpus))


def allocate_uncore(body: dict[str, Any]) -> Result:
    """``TestStaticPolicyAddWithUncoreAlignment``: each app container allocated in turn
    with no hint; the first container's set, or the uncore caches of every container's
    CPUs."""
    topo = TOPOLOGIES[body["topology"]]
    reserved = parse_cpuset(body["reserved"])
    default = parse_cpuset(body["default"])
    config = ModelConfig(options=parse_policy_options(body.get("options")),
                         reserved_cpus=reserved, reserved_cpu_m=1000 * body["reserved_count"],
                         memory_policy="None")
    node = NodeModel(topo, config)
    node.free = set(default - reserved)
    placed = node.admit(_pod(body["pod"]))
    if not isinstance(placed, PodPlacement):
        return "disagree", f"refused: {placed.reason}"
    want = body["expect"]
    if "cpus" in want:
        return _verdict(format_cpuset(parse_cpuset(want["cpus"])),
                        format_cpuset(placed.containers[0].exclusive))
    caches = sorted({topo.uncore_of[c] for p in placed.containers for c in p.exclusive})
    return _verdict(want["uncore_caches"], caches)


def policy_start(body: dict[str, Any]) -> Result:
    """``Start()`` on a restored state: the default set it starts with, or its error; a
    reserved list that disagrees with the reserved count fails ``NewStaticPolicy``."""
    want = body["expect"]
    try:
        node = _node({k: v for k, v in body.items() if k != "default"})
    except ModelError as exc:
        return _verdict(want.get("new_error"), str(exc))
    if "new_error" in want:
        return "disagree", "the policy was created"
    state = {pod: {name: parse_cpuset(cpus) for name, cpus in containers.items()}
             for pod, containers in body["state"].items()}
    default, error = validate_state(
        node.topo, node.reserved, parse_cpuset(body["default"]), state,
        strict="strict-cpu-reservation" in node.config.options)
    if error is not None:
        return _verdict(want.get("error"), error)
    return _verdict(format_cpuset(parse_cpuset(want["default"])) if "default" in want
                    else want, format_cpuset(default))


def hint_regeneration(body: dict[str, Any]) -> Result:
    """Hints for a container already in the state: from the CPUs it holds, through the
    container-scope and the pod-scope entry points (one-container pods)."""
    node = _node({k: v for k, v in body.items() if k != "default"})
    held = parse_cpuset(next(iter(body["assignments"].values())))
    n = body["num_cpus"]
    want = sorted((mask, preferred) for mask, preferred in body["expect"]["hints"])
    got = sorted((sorted(m), p) for m, p in node.held_cpu_hints(n, held))
    pod_hints, _ = node.held_pod_cpu_hints(n, [(n, held)])
    got_pod = sorted((sorted(m), p) for m, p in pod_hints or ())
    return _verdict((want, want), (got, got_pod))


def reallocate_existing(body: dict[str, Any]) -> Result:
    """The container already holds its CPUs (placed there first); admitting it again must
    keep them whatever else is free."""
    node = _node(body)
    held = parse_cpuset(next(iter(body["state"].values())))
    pod = _pod(body["pod"])
    node.free = set(held)
    first = node.admit(pod)
    if not isinstance(first, PodPlacement) or first.containers[0].exclusive != held:
        return "disagree", "could not set up the held CPUs"
    node.free = set(parse_cpuset(body["default"]) - node.reserved)
    again = node.admit(pod)
    if not isinstance(again, PodPlacement):
        return "disagree", f"refused: {again.reason}"
    return _verdict(format_cpuset(parse_cpuset(body["expect"]["cpus"])),
                    format_cpuset(again.containers[0].exclusive))


def allocate_cpus(body: dict[str, Any]) -> Result:
    node = _node(body)
    hint = frozenset(body["hint"]) if "hint" in body else None
    got = node.allocate_cpus(body["num_cpus"], hint)
    return _verdict(format_cpuset(parse_cpuset(body["expect"]["cpus"])), format_cpuset(got))


def cpu_hints(body: dict[str, Any]) -> Result:
    node = _node({k: v for k, v in body.items() if k != "default"})
    hints = node.cpu_hints(body["num_cpus"], parse_cpuset(body["default"]))
    got = sorted((sorted(mask), preferred) for mask, preferred in hints)
    want = sorted((mask, preferred) for mask, preferred in body["expect"]["hints"])
    return _verdict(want, got)


def init_reuse(body: dict[str, Any]) -> Result:
    node = _node(body)
    placed = node.admit(_pod(body["pod"]))
    if not isinstance(placed, PodPlacement):
        return "disagree", f"refused: {placed.reason}"
    got = {"default_after_alloc": format_cpuset(node.default_set)}
    if "default_after_remove_init" in body["expect"]:
        node.remove_init_containers(placed.namespace, placed.name)
        got["default_after_remove_init"] = format_cpuset(node.default_set)
    want = {k: format_cpuset(parse_cpuset(v)) for k, v in body["expect"].items()}
    return _verdict(want, got)


def init_containers(body: dict[str, Any]) -> Result:
    """Each app container's set, and the final default set: the initial one minus every
    container's CPUs, the init containers' included."""
    node = _node(body)
    before = node.default_set
    placed = node.admit(_pod(body["pod"]))
    if not isinstance(placed, PodPlacement):
        return "disagree", f"refused: {placed.reason}"
    want_app = [format_cpuset(parse_cpuset(c)) for c in body["expect"]["app_cpus"]]
    got_app = [format_cpuset(c.exclusive) for c in placed.containers]
    every = frozenset().union(*(parse_cpuset(c) for c in body["expect"]["init_cpus"]),
                              *(parse_cpuset(c) for c in body["expect"]["app_cpus"]))
    return _verdict((want_app, format_cpuset(before - every)),
                    (got_app, format_cpuset(node.default_set)))


def remove_from_state(body: dict[str, Any]) -> Result:
    """``RemoveContainer`` on a hand-built state: the default set after it, and whether the
    container is still assigned."""
    state = {uid: {name: parse_cpuset(cpus) for name, cpus in containers.items()}
             for uid, containers in body["state"].items()}
    node = NodeModel.from_checkpoint(TOPOLOGIES[body["topology"]], state,
                                     parse_cpuset(body["default"]))
    key = (body["pod_uid"], body["container"])
    node.remove_container(*key)
    want = {"default": format_cpuset(parse_cpuset(body["expect"]["default"])),
            "still_assigned": body["expect"]["still_assigned"]}
    return _verdict(want, {"default": format_cpuset(node.default_set),
                           "still_assigned": key in node.checkpointed})


def initial_default_set(body: dict[str, Any]) -> Result:
    node = _node(body)
    return _verdict(format_cpuset(parse_cpuset(body["expect"]["cpus"])),
                    format_cpuset(node.default_set))


def parse_options(body: dict[str, Any]) -> Result:
    try:
        got: dict[str, Any] = {"options": sorted(parse_policy_options(body["options"]))}
    except ModelError:
        got = {"error": True}
    return _verdict(body["expect"], got)


def pod_cpus(body: dict[str, Any]) -> Result:
    return _verdict(body["expect"]["cpus"], pod_guaranteed_cpus(_pod(body["pod"])))


def error_text(body: dict[str, Any]) -> Result:
    got = smt_alignment_error(body["requested"], body["per_core"], body.get("available"))
    return _verdict(body["expect"]["text"], got)


def policy_name(body: dict[str, Any]) -> Result:
    return _verdict(body["expect"]["name"], ModelConfig().cpu_policy)


HANDLERS = {
    "free_units": free_units,
    "take_packed": take_packed,
    "take_distributed": take_distributed_case,
    "take_resize": take_resize,
    "take_distributed_resize": take_distributed_resize,
    "allocate": allocate,
    "allocate_cpus": allocate_cpus,
    "reallocate_existing": reallocate_existing,
    "allocate_uncore": allocate_uncore,
    "policy_start": policy_start,
    "hint_regeneration": hint_regeneration,
    "cpu_hints": cpu_hints,
    "init_reuse": init_reuse,
    "initial_default_set": initial_default_set,
    "remove_from_state": remove_from_state,
    "init_containers": init_containers,
    "parse_options": parse_options,
    "pod_guaranteed_cpus": pod_cpus,
    "policy_name": policy_name,
    "error_text": error_text,
}
