"""``explain``: the model's decision path for one pod in plain words, and for a refusal the
smallest changes that the model, run again, admits (pure; docs/explain.md).

Nothing here allocates: every verdict, hint and CPU comes from :class:`NodeModel` itself
(``plan`` without changing the state, the ``on_hint`` hook for the topology manager's
merges). The changes offered are only those a second run of the model admits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from reconciler.allocator.config import ModelConfig, ModelError
from reconciler.allocator.hints import Hint, HintRecord
from reconciler.allocator.live import LiveNodeError, free_memory, live_node, pooled_pods
from reconciler.allocator.model import NodeModel, PodPlacement, Rejection
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.ledger import Ledger
from reconciler.snapshot import NodeSnapshot

# What each static-policy option does to a take, in plain words (docs/design.md#allocator).
OPTION_MEANING = {
    "full-pcpus-only": "whole physical cores only: a request must be a multiple of the "
                       "threads per core",
    "distribute-cpus-across-numa": "the CPUs are spread evenly over the NUMA nodes of the "
                                   "hint",
    "align-by-socket": "the hinted NUMA nodes widen to their whole sockets",
    "distribute-cpus-across-cores": "one thread per core first, siblings last",
    "strict-cpu-reservation": "the reserved CPUs are kept out of the shared pool too",
    "prefer-align-cpus-by-uncorecache": "CPUs sharing one uncore (L3) cache are taken first",
}

PATH_WORDS = {
    "none": "the CPU manager policy is none: every container runs on the node's shared pool",
    "legacy": "per-container exclusive CPUs taken from the node's free CPUs (no pod-level "
              "CPU budget, or the kubelet's pod-level resource managers are off)",
    "pod": "pod scope with a pod budget: one NUMA-aligned block of the budget, exclusive "
           "slices carved from it, the rest of it the pod shared pool",
    "container": "container scope with a pod budget: eligible containers take exclusive CPUs "
                 "from the node's free CPUs, the others run on the node's shared pool",
}

# (code, pattern of the kubelet's reason, plain words); first match wins.
_CAUSES: tuple[tuple[str, str, str], ...] = (
    ("smt-multiple", r"not multiple cpus per core",
     "full-pcpus-only: the request is not a multiple of the threads per core"),
    ("smt-physical", r"not enough free physical CPUs",
     "full-pcpus-only: not enough free whole cores"),
    ("topology", r"topology affinity error",
     "the topology manager policy accepts no NUMA placement the free CPUs and memory allow"),
    ("cpus", r"not enough cpus available", "not enough free CPUs"),
    ("devices", r"requested number of devices unavailable",
     "not enough free devices of a resource the pod asks for"),
    ("memory", r"insufficient memory", "not enough free memory on the NUMA nodes chosen"),
    ("budget", r"pod budget|empty pod shared pool",
     "the pod budget does not cover its containers"),
    ("memory-budget", r"memory over budget",
     "the containers' memory exceeds the pod memory budget"),
    ("duplicate", r"already placed", "a pod with this name is already on the node"),
)
# Candidate sizes tried for "fewer CPUs" or "a larger budget": the nearest admitted size
# is almost always within a few steps; this bounds a pod asking thousands of CPUs.
MAX_TRIES = 256
# From strictest to laxest: a refusal under one policy may be admitted under a laxer one.
_LAXER = ("single-numa-node", "restricted", "best-effort", "none")


@dataclass(frozen=True, slots=True)
class ContainerStep:
    name: str
    role: str  # "init", "sidecar" or "app"
    cpu: str  # the CPU request as written ("-" when none)
    memory: int | None  # memory limit in bytes
    eligible: bool
    why: str
    cpus: frozenset[int] | None = None  # where it runs, when admitted


@dataclass(frozen=True, slots=True)
class HintStep:
    request: str  # "pod" or "container NAME"
    cpus: int
    memory: int
    cpu_hints: tuple[Hint, ...]
    memory_hints: tuple[Hint, ...]
    chosen: frozenset[int] | None
    refusal: str | None
    # The device manager's hints per resource asked (docs/design.md#devices-in-the-model).
    device_hints: tuple[tuple[str, tuple[Hint, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class OptionEffect:
    name: str
    meaning: str
    effect: str  # what running the model without it shows


@dataclass(frozen=True, slots=True)
class Change:
    kind: str  # "cpus", "smt", "budget", "policy", "scope", "option"
    change: str
    cpus: frozenset[int]
    numa_nodes: tuple[int, ...]
    # The same change as data: whole CPUs for the pod budget and per container, and kubelet
    # configuration fields (as /configz names them) with their new values.
    pod_cpus: int | None = None
    container_cpus: tuple[tuple[str, int], ...] = ()
    kubelet: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Explanation:
    namespace: str
    name: str
    qos: str
    budget_cpus: int | None
    config: ModelConfig
    reserved: frozenset[int]
    path: str
    containers: tuple[ContainerStep, ...]
    hints: tuple[HintStep, ...]
    options: tuple[OptionEffect, ...]
    admitted: bool
    reason: str | None
    cause: str | None
    cause_words: str | None
    cpus: frozenset[int] | None
    numa_nodes: tuple[int, ...] | None
    changes: tuple[Change, ...]

    @property
    def path_words(self) -> str:
        return PATH_WORDS[self.path]


# ---- running the model ----------------------------------------------------------------------


def _run(model: NodeModel, pod: PodSpec, hints: list[HintRecord] | None = None
         ) -> PodPlacement | Rejection:
    """The model's verdict on ``pod`` without changing its state."""
    model.on_hint = hints.append if hints is not None else None
    try:
        result = model.plan(pod)
    finally:
        model.on_hint = None
    return result if isinstance(result, Rejection) else result[0]


def variant(model: NodeModel, **changes: object) -> NodeModel | None:
    """The same node (its free CPUs and memory as they stand) under another kubelet
    configuration; ``None`` when the kubelet would refuse to start with it."""
    try:
        other = NodeModel(model.topo, replace(model.config, **changes),  # type: ignore[arg-type]
                          model.devices)
    except ModelError:
        return None
    other.seed(model.free, model.mem_free)
    other.dev_free = {name: set(ids) for name, ids in model.dev_free.items()}
    return other


def _path(pod: PodSpec, config: ModelConfig) -> str:
    """Which of the model's paths the pod takes (the routing of ``NodeModel._place``, in
    words only)."""
    if not config.static:
        return "none"
    if not (config.pod_level and pod.has_pod_cpu_budget) or not pod.guaranteed \
            or pod.budget_cpus is None:
        return "legacy"
    return config.scope


# ---- containers -----------------------------------------------------------------------------


def _cpu_text(r: Resources) -> str:
    m = r.cpu_request_m
    if m is None:
        return "-"
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def _why(pod: PodSpec, c: ContainerSpec, eligible: bool) -> str:
    r = c.resources
    if eligible:
        return f"exclusive: Guaranteed pod, {r.integer_cpus} whole CPU(s) requested"
    if not pod.guaranteed:
        return f"shared: the pod is {pod.qos}, not Guaranteed"
    if c.init and not c.sidecar:
        return "ordinary init container: its CPUs, if any, are reused by later containers"
    if r.cpu_request_m is None:
        return "shared: no CPU request of its own"
    if r.integer_cpus is None:
        return "shared: a fractional CPU request"
    return "shared: requests differ from limits"


def _containers(pod: PodSpec, placed: PodPlacement | None) -> tuple[ContainerStep, ...]:
    where = {c.name: c.cpus for c in placed.containers} if placed is not None else {}
    out = []
    for c in (*pod.init_containers, *pod.containers):
        role = "sidecar" if c.sidecar else ("init" if c.init else "app")
        eligible = pod.eligible(c)
        out.append(ContainerStep(c.name, role, _cpu_text(c.resources), c.resources.memory_limit,
                                 eligible, _why(pod, c, eligible), where.get(c.name)))
    return tuple(out)


def _hint_steps(records: list[HintRecord]) -> tuple[HintStep, ...]:
    steps = []
    for r in records:
        providers = list(r.providers)
        cpu = providers.pop(0) if r.cpus > 0 and providers else []
        mem = providers.pop(0) if providers else []
        steps.append(HintStep(r.what, r.cpus, r.memory, tuple(cpu), tuple(mem), r.chosen,
                              r.refusal, tuple((n, tuple(h)) for n, h in r.devices)))
    return tuple(steps)


# ---- options --------------------------------------------------------------------------------


def _option_effects(model: NodeModel, pod: PodSpec, result: PodPlacement | Rejection
                    ) -> tuple[OptionEffect, ...]:
    """Each enabled option, and what the model does without it."""
    out = []
    for name in sorted(model.config.options):
        other = variant(model, options=model.config.options - {name})
        effect = "the kubelet would not start without it" if other is None else \
            _compare(result, _run(other, pod))
        out.append(OptionEffect(name, OPTION_MEANING.get(name, ""), effect))
    return tuple(out)


def _compare(with_it: PodPlacement | Rejection, without: PodPlacement | Rejection) -> str:
    from reconciler.cpuset import format_cpuset

    if isinstance(with_it, Rejection):
        if isinstance(without, PodPlacement):
            return f"decided the refusal: without it the pod is admitted on CPUs " \
                   f"{format_cpuset(without.held) or '-'}"
        return "no effect on the verdict: without it the pod is refused too"
    if isinstance(without, Rejection):
        return f"without it the pod would be refused: {without.reason}"
    if without.held != with_it.held:
        return f"shaped the take: without it the CPUs would be " \
               f"{format_cpuset(without.held) or '-'}"
    return "no effect on this pod's CPUs"


# ---- refusals: the smallest changes that fit --------------------------------------------------


def cause_of(reason: str) -> tuple[str, str]:
    """(code, plain words) of a refusal reason of the model."""
    for code, pattern, words in _CAUSES:
        if re.search(pattern, reason):
            return code, words
    return "other", reason


def _with_cpus(pod: PodSpec, knob: str, n: int) -> PodSpec:
    """``pod`` with the CPUs of ``knob`` ("" for the pod budget, else a container) set to
    ``n`` whole CPUs, requests equal to limits."""
    def set_cpu(r: Resources) -> Resources:
        return replace(r, cpu_request_m=n * 1000, cpu_limit_m=n * 1000)

    if not knob:
        assert pod.resources is not None
        return replace(pod, resources=set_cpu(pod.resources), qos_class=None)

    def one(c: ContainerSpec) -> ContainerSpec:
        return replace(c, resources=set_cpu(c.resources)) if c.name == knob else c

    return replace(pod, containers=tuple(one(c) for c in pod.containers),
                   init_containers=tuple(one(c) for c in pod.init_containers), qos_class=None)


def _knob(pod: PodSpec, config: ModelConfig) -> tuple[str, int] | None:
    """What a change of size acts on: the pod budget on a pod-level path, else the largest
    exclusive container (name, CPUs)."""
    if _path(pod, config) in ("pod", "container") and pod.budget_cpus is not None:
        return "", pod.budget_cpus
    return _largest_exclusive(pod)


def _largest_exclusive(pod: PodSpec) -> tuple[str, int] | None:
    sized = [(c.resources.integer_cpus or 0, c.name) for c in pod.long_running
             if pod.eligible(c)]
    if not sized:
        return None
    n, name = max(sized)
    return name, n


def _label(knob: str) -> str:
    return "pod budget" if not knob else f"container {knob}"


def _admitted(model: NodeModel, pod: PodSpec) -> PodPlacement | None:
    result = _run(model, pod)
    return result if isinstance(result, PodPlacement) else None


def _change(model: NodeModel, pod: PodSpec, kind: str, words: str,
            sizes: dict[str, int] | None = None,
            kubelet: dict[str, str] | None = None) -> Change | None:
    """The change, when the model (``model``, or the pod resized on it) admits it."""
    sizes = sizes or {}
    for target, n in sizes.items():
        pod = _with_cpus(pod, target, n)
    got = _admitted(model, pod)
    if got is None:
        return None
    return Change(kind, words, got.held, tuple(sorted(got.numa_nodes(model.topo))),
                  sizes.get(""), tuple((k, v) for k, v in sizes.items() if k),
                  tuple((kubelet or {}).items()))


def _size_changes(model: NodeModel, pod: PodSpec, cause: str) -> Iterator[Change]:
    knob = _knob(pod, model.config)
    if knob is None:
        return
    name, n = knob
    tpc = model.topo.threads_per_core
    if cause == "smt-multiple" and n % tpc:
        up = n + tpc - n % tpc
        got = _change(model, pod, "smt", f"{_label(name)}: cpu {n} -> {up} (a multiple of "
                      f"the {tpc} threads per core)", {name: up})
        if got is not None:
            yield got
    if cause == "budget" and not name:
        yield from _first(_change(model, pod, "budget", f"pod budget: cpu {n} -> {b}",
                                  {"": b}) for b in range(n + 1, n + MAX_TRIES))
        return
    start = min(n - 1, len(model.free))
    yield from _first(_change(model, pod, "cpus", f"fewer CPUs: {words}", sizes)
                      for m in range(start, max(0, start - MAX_TRIES), -1)
                      for words, sizes in _smaller(pod, name, n, m))


def _first(changes: Iterator[Change | None]) -> Iterator[Change]:
    """The first change admitted, if any (the candidates come nearest first)."""
    got = next((c for c in changes if c is not None), None)
    if got is not None:
        yield got


def _smaller(pod: PodSpec, name: str, n: int, m: int) -> Iterator[tuple[str, dict[str, int]]]:
    """``m`` CPUs instead of ``n`` on the knob; for a pod budget, also with the largest
    exclusive container shrunk by as much (the budget alone may not go below what the
    exclusive containers need)."""
    yield f"{_label(name)}: cpu {n} -> {m}", {name: m}
    if name:
        return
    inner = _largest_exclusive(pod)
    if inner is None or inner[1] - (n - m) < 1:
        return
    c, k = inner
    yield (f"pod budget: cpu {n} -> {m} and container {c}: cpu {k} -> {k - (n - m)}",
           {"": m, c: k - (n - m)})


def _node_changes(model: NodeModel, pod: PodSpec, cause: str) -> Iterator[Change]:
    cfg = model.config
    tried: list[tuple[str, str, dict[str, object], dict[str, str]]] = []
    if cfg.topology_policy in _LAXER:
        tried += [("policy", f"topologyManagerPolicy: {cfg.topology_policy} -> {p}",
                   {"topology_policy": p}, {"topologyManagerPolicy": p})
                  for p in _LAXER[_LAXER.index(cfg.topology_policy) + 1:]]
    scope = "container" if cfg.scope == "pod" else "pod"
    tried.append(("scope", f"topologyManagerScope: {cfg.scope} -> {scope}",
                  {"scope": scope}, {"topologyManagerScope": scope}))
    if cause.startswith("smt") and "full-pcpus-only" in cfg.options:
        tried.append(("option", "cpuManagerPolicyOptions: full-pcpus-only off",
                      {"options": cfg.options - {"full-pcpus-only"}},
                      {"cpuManagerPolicyOptions": ",".join(sorted(
                          cfg.options - {"full-pcpus-only"}))}))
    done: set[str] = set()
    for kind, words, config, kubelet in tried:
        other = variant(model, **config)
        got = _change(other, pod, kind, words, kubelet=kubelet) \
            if other is not None and kind not in done else None
        if got is not None:
            done.add(kind)  # the nearest laxer policy only
            yield got


def changes_that_fit(model: NodeModel, pod: PodSpec, reason: str) -> tuple[Change, ...]:
    """The smallest changes to the pod (fewer CPUs, a multiple of the threads per core, a
    larger budget) or to the node's configuration (a laxer topology policy, the other scope,
    an option off) that the model, run again, admits."""
    cause, _ = cause_of(reason)
    if cause == "duplicate":
        return ()
    return (*_size_changes(model, pod, cause), *_node_changes(model, pod, cause))


# ---- the whole story ------------------------------------------------------------------------


def explain(model: NodeModel, pod: PodSpec) -> Explanation:
    """The model's decision path for ``pod`` on ``model`` as it stands (unchanged)."""
    records: list[HintRecord] = []
    result = _run(model, pod, records)
    placed = result if isinstance(result, PodPlacement) else None
    reason = result.reason if isinstance(result, Rejection) else (result.note or None)
    cause = cause_of(result.reason) if isinstance(result, Rejection) else None
    return Explanation(
        namespace=pod.namespace, name=pod.name, qos=pod.qos, budget_cpus=pod.budget_cpus,
        config=model.config, reserved=model.reserved, path=_path(pod, model.config),
        containers=_containers(pod, placed), hints=_hint_steps(records),
        options=_option_effects(model, pod, result), admitted=placed is not None,
        reason=reason, cause=cause[0] if cause else None,
        cause_words=cause[1] if cause else None,
        cpus=placed.held if placed is not None else None,
        numa_nodes=tuple(sorted(placed.numa_nodes(model.topo))) if placed else None,
        changes=changes_that_fit(model, pod, result.reason)
        if isinstance(result, Rejection) else ())


# ---- a pod already on a live node -------------------------------------------------------------


def _owned_by(owner: str, namespace: str, name: str) -> bool:
    return owner == f"{namespace}/{name}" or owner.startswith(f"{namespace}/{name}/")


def before_pod(snapshot: NodeSnapshot, ledger: Ledger, config: ModelConfig, namespace: str,
               name: str) -> tuple[NodeModel, PodSpec]:
    """The live node as it stands with one of its pods taken off again (its CPUs and memory
    back in the free pools), and that pod's spec: what the model sees when it admits the pod
    now. Other pods may have come and gone since the kubelet admitted it, so the CPUs can
    differ from those it holds (docs/explain.md#a-pod-on-a-node)."""
    spec = next((p for p in snapshot.pod_specs or ()
                 if (p.namespace, p.name) == (namespace, name)), None)
    if spec is None:
        raise LiveNodeError(f"no pod {namespace}/{name} in the kubelet's pod list" if
                            snapshot.pod_specs is not None else
                            "the pods' specs are unknown: the kubelet's /pods was not read")
    live = live_node(snapshot, ledger, config)
    held = {c.id for c in ledger.cpu_map if _owned_by(c.owner, namespace, name)}
    # The memory the other pods leave, counted as live_node counts every pod's.
    others = tuple(p for p in snapshot.pods if (p.namespace, p.name) != (namespace, name))
    assert snapshot.topology is not None  # live_node refuses a node without one
    mem = free_memory(replace(snapshot, pods=others), snapshot.topology, pooled_pods(ledger))
    live.model.seed(live.model.free | held, mem)
    return live.model, spec
