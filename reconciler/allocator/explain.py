"""``explain``: the model's decision path for one pod in plain words, and for a refusal the
smallest changes that the model, run again, admits (pure; docs/explain.md).

Nothing here allocates: every verdict, hint and CPU comes from :class:`NodeModel` itself
(``plan`` without changing the state, the ``on_hint`` hook for the topology manager's
merges). The changes offered are only those a second run of the model admits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from reconciler.allocator.config import ModelConfig, ModelError
from reconciler.allocator.devices import pod_request
from reconciler.allocator.hints import Hint, HintRecord
from reconciler.allocator.live import (
    LiveNodeError,
    free_memory,
    live_node,
    memory_groups,
    pooled_pods,
)
from reconciler.allocator.model import NodeModel, PodPlacement, Rejection
from reconciler.allocator.rules import pod_memory
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.ledger import Ledger
from reconciler.snapshot import NodeSnapshot
from reconciler.units import human_bytes

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
    # "cpus", "smt", "budget", "policy", "scope", "option", "memory", "devices"; "budget+KIND"
    # when a budget too small for its containers is raised together with a change of KIND.
    kind: str
    change: str
    cpus: frozenset[int]
    numa_nodes: tuple[int, ...]
    # The same change as data: whole CPUs for the pod budget and per container, and kubelet
    # configuration fields (as /configz names them) with their new values.
    pod_cpus: int | None = None
    container_cpus: tuple[tuple[str, int], ...] = ()
    kubelet: tuple[tuple[str, str], ...] = ()
    # Memory in bytes ("" for the pod's memory budget, else a container) and device counts
    # (container, resource, count).
    memory: tuple[tuple[str, int], ...] = ()
    devices: tuple[tuple[str, str, int], ...] = ()


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
    # What still refuses the pod once its budget covers its containers (the code of
    # :func:`diagnose`), when a budget too small is not the only cause.
    second_cause: str | None = None

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
    other.seed(model.free, model.mem_free, model.held_groups())
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


def _with(pod: PodSpec, knob: str, change: Callable[[Resources], Resources]) -> PodSpec:
    """``pod`` with ``change`` applied to the resources of ``knob`` ("" for the pod-level
    budget, else a container); its QoS derived again."""
    if not knob:
        assert pod.resources is not None
        return replace(pod, resources=change(pod.resources), qos_class=None)

    def one(c: ContainerSpec) -> ContainerSpec:
        return replace(c, resources=change(c.resources)) if c.name == knob else c

    return replace(pod, containers=tuple(one(c) for c in pod.containers),
                   init_containers=tuple(one(c) for c in pod.init_containers), qos_class=None)


def _with_cpus(pod: PodSpec, knob: str, n: int) -> PodSpec:
    """``pod`` with the CPUs of ``knob`` set to ``n`` whole CPUs, requests equal to
    limits."""
    return _with(pod, knob, lambda r: replace(r, cpu_request_m=n * 1000, cpu_limit_m=n * 1000))


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


def changes_that_fit(model: NodeModel, pod: PodSpec, reason: str,
                     cause: str | None = None) -> tuple[Change, ...]:
    """The smallest changes to the pod (fewer CPUs, a multiple of the threads per core, a
    larger budget, less memory, fewer devices) or to the node's configuration (a laxer
    topology policy, the other scope, an option off) that the model, run again, admits;
    those that act on the cause (:func:`diagnose`) first. A budget smaller than its
    containers is fixed in the pod, never by the node alone: the API server refuses such a
    pod on any node; when no budget alone admits it, the covering budget together with what
    the other cause needs."""
    if cause is None:
        cause = diagnose(model, pod, reason)[0]
    if cause == "duplicate":
        return ()
    if cause in ("budget-container", "budget-containers"):
        return tuple(_budget_changes(model, pod)) or tuple(_covered_changes(model, pod))
    first: tuple[Change, ...] = ()
    if cause in ("memory", "memory-numa"):
        first = tuple(_memory_changes(model, pod))
    elif cause in ("devices", "devices-numa"):
        first = tuple(_device_changes(model, pod))
    return (*first, *_size_changes(model, pod, cause), *_node_changes(model, pod, cause))


# ---- the cause, sharpened by what the pod asks ------------------------------------------------


def diagnose(model: NodeModel, pod: PodSpec, reason: str) -> tuple[str, str]:
    """(code, plain words) of a refusal of ``pod`` on ``model`` as it stands: the kubelet's
    reason (:func:`cause_of`), named more closely where the pod itself says why. A pod
    budget smaller than a container's request is that, whatever the CPU manager said; a
    topology affinity error is memory's or the devices' when the model, run again without
    pinning memory or without the device requests, admits the pod."""
    code, words = cause_of(reason)
    if code == "duplicate":
        return code, words
    short = budget_short(pod)
    if short is not None:
        # The API rule hides whatever else refuses the pod; an operator who raises the
        # budget should not meet a second refusal unannounced.
        still = covered_refusal(model, pod)
        if still is None:
            return short[0], short[1] + _API_RULE
        return short[0], (f"{short[1]}{_API_RULE}; with a budget that covers its containers "
                          f"({still.cover.words}) it is still refused: {still.cause[1]}")
    if code == "topology":
        return _memory_cause(model, pod) or _device_cause(model, pod) or (code, words)
    return code, words


def _millis(m: int) -> str:
    return str(m // 1000) if m % 1000 == 0 else f"{m}m"


def _aggregate(pod: PodSpec, get: Callable[[ContainerSpec], int | None]) -> int:
    """The API server's ``AggregateContainerRequests`` of one resource: the long-running
    containers together, or an ordinary init container beside the sidecars started before
    it, whichever is larger."""
    sidecars = init_peak = 0
    for c in pod.init_containers:
        if c.sidecar:
            sidecars += get(c) or 0
        else:
            init_peak = max(init_peak, sidecars + (get(c) or 0))
    return max(init_peak, sidecars + sum(get(c) or 0 for c in pod.containers))


_API_RULE = ("; the API server refuses such a pod too: pod-level requests must cover its "
             "containers' requests")


def budget_short(pod: PodSpec) -> tuple[str, str] | None:
    """A pod budget (CPU or memory) smaller than one container's request, or than its
    containers' requests together (k8s.io/kubernetes v1.37.2
    pkg/apis/core/validation/validation.go, validatePodResourceConsistency)."""
    r = pod.resources
    if r is None:
        return None
    checks: tuple[tuple[str, int | None, Callable[[ContainerSpec], int | None],
                        Callable[[int], str]], ...] = (
        ("CPUs", r.cpu_request_m, lambda c: c.resources.cpu_request_m, _millis),
        ("of memory", r.memory_request, lambda c: c.resources.memory_request, human_bytes))
    for what, budget, get, show in checks:
        if not budget:
            continue
        asks, name = max(((get(c) or 0, c.name) for c in (*pod.init_containers,
                                                           *pod.containers)), default=(0, ""))
        if asks > budget:
            return ("budget-container", f"the budget is smaller than container {name}: it "
                    f"asks {show(asks)} {what}, the pod budget is {show(budget)} {what}")
        total = _aggregate(pod, get)
        if total > budget:
            return ("budget-containers", f"the budget is smaller than its containers' "
                    f"requests together: they ask {show(total)} {what}, the pod budget is "
                    f"{show(budget)} {what}")
    return None


@dataclass(frozen=True, slots=True)
class Cover:
    """A pod's budgets raised to what its containers ask together."""
    pod: PodSpec
    words: str  # "pod budget: cpu 2 -> 4", with the memory budget's where it grew too
    cpus: int | None  # the new CPU budget in whole CPUs, when it grew
    memory: int | None  # the new memory budget in bytes, when it grew


def cover(pod: PodSpec) -> Cover | None:
    """``pod`` with the smallest budgets the API server accepts around its containers (whole
    CPUs: a fractional budget takes no pod-level path); ``None`` when they already cover."""
    r = pod.resources
    if r is None:
        return None
    words: list[str] = []
    cpus = memory = None
    need = _aggregate(pod, lambda c: c.resources.cpu_request_m)
    if r.cpu_request_m and need > r.cpu_request_m:
        cpus = -(-need // 1000)
        pod = _with_cpus(pod, "", cpus)
        words.append(f"pod budget: cpu {_millis(r.cpu_request_m)} -> {cpus}")
    need = _aggregate(pod, lambda c: c.resources.memory_request)
    if r.memory_request and need > r.memory_request:
        memory = need
        pod = _with_memory(pod, "", memory)
        words.append(f"pod memory budget: memory {human_bytes(r.memory_request)} -> "
                     f"{human_bytes(memory)}")
    return Cover(pod, " and ".join(words), cpus, memory) if words else None


@dataclass(frozen=True, slots=True)
class CoveredRefusal:
    cover: Cover
    reason: str  # the model's reason for the covered pod
    cause: tuple[str, str]  # its :func:`diagnose`


def covered_refusal(model: NodeModel, pod: PodSpec) -> CoveredRefusal | None:
    """The refusal that remains once the pod's budgets cover its containers: a budget too
    small can hide a second cause (devices or memory no NUMA node holds) that no budget
    fixes; ``None`` when the covered pod is admitted."""
    covered = cover(pod)
    if covered is None or budget_short(covered.pod) is not None:
        return None
    result = _run(model, covered.pod)
    if not isinstance(result, Rejection):
        return None
    return CoveredRefusal(covered, result.reason, diagnose(model, covered.pod, result.reason))


def pinned_memory(pod: PodSpec, config: ModelConfig) -> int:
    """The memory the Static memory manager pins for the pod: its memory budget on a
    pod-level path, else what its containers' limits add up to."""
    if _path(pod, config) in ("pod", "container") and pod.resources is not None \
            and pod.resources.memory_limit:
        return pod.resources.memory_limit
    return pod_memory(pod)


def _memory_cause(model: NodeModel, pod: PodSpec) -> tuple[str, str] | None:
    need = pinned_memory(pod, model.config)
    if not model.memory_enabled or not need:
        return None
    other = variant(model, memory_policy="None")
    if other is None or _admitted(other, pod) is None:
        return None
    most = max(model.mem_free.values(), default=0)
    free = ", ".join(f"NUMA {n}: {human_bytes(b)}" for n, b in sorted(model.mem_free.items()))
    return ("memory-numa", f"memory: the pod asks {human_bytes(need)} of memory and the most "
            f"one NUMA node has free is {human_bytes(most)} ({free}); the "
            f"{model.config.topology_policy} topology policy accepts no NUMA placement that "
            "holds its CPUs and its memory (without pinned memory it would be admitted)")


def _without_devices(pod: PodSpec) -> PodSpec:
    def bare(c: ContainerSpec) -> ContainerSpec:
        return replace(c, resources=replace(c.resources, extended=()))

    return replace(pod, containers=tuple(bare(c) for c in pod.containers),
                   init_containers=tuple(bare(c) for c in pod.init_containers))


def _device_cause(model: NodeModel, pod: PodSpec) -> tuple[str, str] | None:
    asked = pod_request(pod, model.devices)
    if not asked or _admitted(model, _without_devices(pod)) is None:
        return None
    by_name = model.devices.by_name
    parts = []
    for name, n in sorted(asked.items()):
        per_numa: dict[str, int] = {}
        for d in by_name[name]:
            if d.id in model.dev_free.get(name, ()):
                key = "+".join(map(str, d.numa)) or "no topology"
                per_numa[key] = per_numa.get(key, 0) + 1
        free = ", ".join(f"NUMA {k}: {v}" for k, v in sorted(per_numa.items())) or "none"
        parts.append(f"{n} {name} (free: {free})")
    return ("devices-numa", f"devices: the pod asks {'; '.join(parts)}; the "
            f"{model.config.topology_policy} topology policy accepts no NUMA placement that "
            "holds its devices with its CPUs and memory (without the devices it would be "
            "admitted)")


def _budget_changes(model: NodeModel, pod: PodSpec) -> Iterator[Change]:
    """A budget that covers the containers (the nearest admitted), or the container
    brought down to the budget."""
    r = pod.resources
    assert r is not None
    if r.cpu_request_m and pod.budget_cpus is not None:
        n = pod.budget_cpus
        yield from _first(_change(model, pod, "budget", f"pod budget: cpu {n} -> {b}",
                                  {"": b}) for b in range(n + 1, n + MAX_TRIES))
        big = max(((c.resources.integer_cpus or 0, c.name) for c in pod.long_running),
                  default=(0, ""))
        if big[0] > n:
            yield from _first(iter([_change(model, pod, "cpus", f"container {big[1]}: cpu "
                                            f"{big[0]} -> {n}", {big[1]: n})]))
    if r.memory_request and _aggregate(pod, lambda c: c.resources.memory_request) \
            > r.memory_request:
        total = _aggregate(pod, lambda c: c.resources.memory_request)
        yield from _first(iter([_memory_change(model, pod, "", r.memory_request, total,
                                               "pod memory budget")]))


def _covered_changes(model: NodeModel, pod: PodSpec) -> Iterator[Change]:
    """No budget alone admits the pod: the covering budget together with each change that
    admits the covered pod. Those that resize the CPU budget again are left out (the
    budget search has tried the sizes alone), and so is any the API server would refuse."""
    still = covered_refusal(model, pod)
    if still is None:
        return
    c = still.cover
    for then in changes_that_fit(model, c.pod, still.reason, still.cause[0]):
        if then.pod_cpus is not None:
            continue
        memory = dict((("", c.memory),) if c.memory is not None else ())
        memory.update(then.memory)
        both = replace(then, kind=f"budget+{then.kind}",
                       change=f"{c.words}, together with {then.change}", pod_cpus=c.cpus,
                       memory=tuple(memory.items()))
        if budget_short(_applied(pod, both)) is None:
            yield both


def _applied(pod: PodSpec, ch: Change) -> PodSpec:
    """``pod`` with the sizes of ``ch`` written in."""
    if ch.pod_cpus is not None:
        pod = _with_cpus(pod, "", ch.pod_cpus)
    for knob, n in ch.container_cpus:
        pod = _with_cpus(pod, knob, n)
    for knob, n in ch.memory:
        pod = _with_memory(pod, knob, n)
    for container, name, n in ch.devices:
        pod = _with_device_count(pod, container, name, n)
    return pod


def _with_memory(pod: PodSpec, knob: str, n: int) -> PodSpec:
    """``pod`` with the memory of ``knob`` set to ``n`` bytes, request equal to limit."""
    return _with(pod, knob, lambda r: replace(r, memory_request=n, memory_limit=n))


def _memory_change(model: NodeModel, pod: PodSpec, knob: str, old: int, new: int,
                   label: str) -> Change | None:
    got = _admitted(model, _with_memory(pod, knob, new))
    if got is None:
        return None
    return Change("memory", f"{label}: memory {human_bytes(old)} -> {human_bytes(new)}",
                  got.held, tuple(sorted(got.numa_nodes(model.topo))),
                  memory=((knob, new),))


def _memory_changes(model: NodeModel, pod: PodSpec) -> Iterator[Change]:
    """Less memory: the pod's memory budget on a pod-level path, else the container with
    the most, down to what the NUMA nodes have free (one node, then the two with the most,
    ...), the nearest admitted."""
    need = pinned_memory(pod, model.config)
    r = pod.resources
    if r is not None and r.memory_limit and need == r.memory_limit:
        knob, label, own = "", "pod memory budget", need
    else:
        own, knob = max(((c.resources.memory_limit or 0, c.name) for c in pod.long_running),
                        default=(0, ""))
        label = f"container {knob}"
    free = sorted(model.mem_free.values(), reverse=True)
    fits = sorted({sum(free[:k]) for k in range(1, len(free) + 1)}, reverse=True)
    yield from _first(_memory_change(model, pod, knob, own, own - (need - t), label)
                      for t in fits if 0 < t < need and own - (need - t) > 0)


def _with_device_count(pod: PodSpec, container: str, name: str, n: int) -> PodSpec:
    def one(c: ContainerSpec) -> ContainerSpec:
        if c.name != container:
            return c
        extended = tuple((k, n if k == name else v) for k, v in c.resources.extended)
        return replace(c, resources=replace(c.resources, extended=extended))

    return replace(pod, containers=tuple(one(c) for c in pod.containers),
                   init_containers=tuple(one(c) for c in pod.init_containers))


def _device_changes(model: NodeModel, pod: PodSpec) -> Iterator[Change]:
    """Fewer devices: per resource asked, the container asking the most, one device fewer
    at a time, the nearest admitted."""
    for name in sorted(pod_request(pod, model.devices)):
        n, container = max((c.resources.devices.get(name, 0), c.name)
                           for c in (*pod.init_containers, *pod.containers))
        yield from _first(_device_change(model, pod, container, name, n, m)
                          for m in range(n - 1, 0, -1))


def _device_change(model: NodeModel, pod: PodSpec, container: str, name: str, old: int,
                   new: int) -> Change | None:
    got = _admitted(model, _with_device_count(pod, container, name, new))
    if got is None:
        return None
    return Change("devices", f"fewer devices: container {container}: {name} {old} -> {new}",
                  got.held, tuple(sorted(got.numa_nodes(model.topo))),
                  devices=((container, name, new),))


# ---- the whole story ------------------------------------------------------------------------


def explain(model: NodeModel, pod: PodSpec) -> Explanation:
    """The model's decision path for ``pod`` on ``model`` as it stands (unchanged)."""
    records: list[HintRecord] = []
    result = _run(model, pod, records)
    placed = result if isinstance(result, PodPlacement) else None
    reason = result.reason if isinstance(result, Rejection) else (result.note or None)
    cause = diagnose(model, pod, result.reason) if isinstance(result, Rejection) else None
    still = covered_refusal(model, pod) if cause and cause[0].startswith("budget-") else None
    return Explanation(
        namespace=pod.namespace, name=pod.name, qos=pod.qos, budget_cpus=pod.budget_cpus,
        config=model.config, reserved=model.reserved, path=_path(pod, model.config),
        containers=_containers(pod, placed), hints=_hint_steps(records),
        options=_option_effects(model, pod, result), admitted=placed is not None,
        reason=reason, cause=cause[0] if cause else None,
        cause_words=cause[1] if cause else None,
        cpus=placed.held if placed is not None else None,
        numa_nodes=tuple(sorted(placed.numa_nodes(model.topo))) if placed else None,
        changes=changes_that_fit(model, pod, result.reason, cause[0])
        if isinstance(result, Rejection) and cause else (),
        second_cause=still.cause[0] if still is not None else None)


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
    rest, pooled = replace(snapshot, pods=others), pooled_pods(ledger)
    live.model.seed(live.model.free | held, free_memory(rest, snapshot.topology, pooled),
                    memory_groups(rest, snapshot.topology, pooled))
    return live.model, spec
