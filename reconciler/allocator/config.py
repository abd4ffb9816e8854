"""The kubelet configuration the allocator model runs with, validated as the kubelet
validates it at start-up (docs/design.md#allocator)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from reconciler.cpuset import format_cpuset
from reconciler.kube import KubeletConfig, SpecError, go_atoi, parse_quantity

TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")
# Every static-policy option the kubelet knows; the model places pods for those in
# MODELLED_OPTIONS and would refuse to pretend for any other.
KNOWN_OPTIONS = ("full-pcpus-only", "distribute-cpus-across-numa", "align-by-socket",
                 "distribute-cpus-across-cores", "strict-cpu-reservation",
                 "prefer-align-cpus-by-uncorecache")
MODELLED_OPTIONS = KNOWN_OPTIONS
# Pairs the kubelet refuses to start with.
EXCLUSIVE_OPTIONS = (("full-pcpus-only", "distribute-cpus-across-cores"),
              ("distribute-cpus-across-numa", "distribute-cpus-across-cores"),
              ("prefer-align-cpus-by-uncorecache", "distribute-cpus-across-cores"),
              ("prefer-align-cpus-by-uncorecache", "distribute-cpus-across-numa"))

# The options behind a feature gate (cpumanager/policy_options.go): an alpha one needs
# CPUManagerPolicyAlphaOptions (off unless set), a beta one CPUManagerPolicyBetaOptions (on
# unless set off). prefer-align-cpus-by-uncorecache went GA in 1.36.
ALPHA_OPTIONS = frozenset({"align-by-socket", "distribute-cpus-across-cores"})
BETA_OPTIONS = {"1.35": frozenset({"distribute-cpus-across-numa",
                                   "prefer-align-cpus-by-uncorecache"}),
                "1.36": frozenset({"distribute-cpus-across-numa"}),
                "1.37": frozenset({"distribute-cpus-across-numa"})}

# The topology manager's policy options (topologymanager/policy_options.go), all GA by 1.35.
TOPOLOGY_OPTIONS = ("prefer-closest-numa-nodes", "max-allowable-numa-nodes")
DEFAULT_MAX_NUMA_NODES = 8  # defaultMaxAllowableNUMANodes
RESIZE_MODES = ("off", "keep", "proposal")
# The allocation manager's refusal (pkg/kubelet/allocation: canResizePod, handlers.go).
RESIZE_INFEASIBLE = ('Infeasible: Resize is infeasible for Guaranteed Pods alongside CPU '
                     'Manager policy "static"')

# The memory manager's policies on Linux (memorymanager/memory_manager.go: NewManager),
# compared as written: "static" is not "Static"; BestEffort is Windows' only.
MEMORY_POLICIES = ("None", "Static")
MEMORY_NO_RESERVATION = "[memorymanager] you should specify the system reserved memory"

# The kubelet minors whose placement the model knows; where they differ the model follows
# ModelConfig.kubelet_version (docs/design.md#allocator).
KUBELET_VERSIONS = ("1.35", "1.36", "1.37")


def version_at_least(version: str, minor: str) -> bool:
    """Whether kubelet ``version`` ("1.36") is ``minor`` or later."""
    return tuple(map(int, version.split("."))) >= tuple(map(int, minor.split(".")))


# strconv.ParseBool's spellings.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class ModelError(ValueError):
    """A model configuration that the kubelet would refuse to start with."""


def parse_policy_options(options: Mapping[str, str] | Iterable[tuple[str, str]] | None
                         ) -> frozenset[str]:
    """The enabled options of a ``cpuManagerPolicyOptions`` map, parsed as the kubelet
    parses it: an unknown name or a value that is not a Go boolean is an error."""
    pairs = options.items() if isinstance(options, Mapping) else (options or ())
    enabled: set[str] = set()
    for name, value in sorted(pairs):
        if name not in KNOWN_OPTIONS:
            raise ModelError(f"unsupported cpuManagerPolicyOptions option: {name!r}")
        if value in _TRUE:
            enabled.add(name)
        elif value not in _FALSE:
            raise ModelError(f"bad value for option {name!r}: {value!r} is not a boolean")
    return frozenset(enabled)


def _topology_refusal(pairs: Iterable[tuple[str, str]]) -> str | None:
    """``NewPolicyOptions`` of the topology manager (topologymanager/policy_options.go)."""
    for name, value in sorted(pairs):
        if name not in TOPOLOGY_OPTIONS:
            return f'unknown Topology Manager Policy option: "{name}"'
        if name == "prefer-closest-numa-nodes" and value not in _TRUE | _FALSE:
            return f'bad value for option "{name}": {value!r} is not a boolean'
        if name == "max-allowable-numa-nodes":
            number = go_atoi(value)
            if number is None:
                return f'unable to convert policy option to integer "{name}": {value!r}'
            if number < DEFAULT_MAX_NUMA_NODES:
                return (f'the minimum value of "{name}" should not be less than '
                        f"{DEFAULT_MAX_NUMA_NODES}")
    return None


def _cpu_refusal(cfg: KubeletConfig, version: str) -> str | None:
    """``NewNonePolicy`` and ``NewStaticPolicyOptions``' checks of each option's name, gate
    and value (cpumanager/policy_none.go, policy_options.go), and ``NewManager``'s of the
    static policy's reservation."""
    pairs = cfg.cpu_manager_policy_options
    policy = cfg.cpu_manager_policy
    if policy not in ("none", "static"):
        # Compared as written (cpu_manager.go: NewManager); the model reads it lowercased.
        return f'unknown policy: "{policy}"'
    if policy == "none":
        if pairs:
            return f"None policy: received unsupported options={dict(pairs)}"
        return None
    if not cfg.reserved_system_cpus and cfg.reserved_cpu_quantity_m() <= 0:
        return ("[cpumanager] the static policy requires systemreserved.cpu + "
                "kubereserved.cpu to be greater than zero")
    for name, value in sorted(pairs):
        if name not in KNOWN_OPTIONS:
            return f'unknown CPU Manager Policy option: "{name}"'
        if name in ALPHA_OPTIONS and cfg.gate("CPUManagerPolicyAlphaOptions") is not True:
            return ("CPU Manager Policy Alpha-level Options not enabled, but option "
                    f'"{name}" provided')
        if name in BETA_OPTIONS.get(version, frozenset()) \
                and cfg.gate("CPUManagerPolicyBetaOptions") is False:
            return ("CPU Manager Policy Beta-level Options not enabled, but option "
                    f'"{name}" provided')
        if value not in _TRUE | _FALSE:
            return f'bad value for option "{name}": {value!r} is not a boolean'
    return None


def _memory_type(name: str) -> bool:
    """A resource the memory manager reserves (``IsHugePageResourceName`` or memory)."""
    return name == "memory" or name.startswith("hugepages-")


def reserved_memory_limits(cfg: KubeletConfig) -> list[tuple[int, str, str]]:
    """``reservedMemory`` as (NUMA node, resource, quantity as written), in its order;
    :class:`ModelError` for an entry that is not a NUMA node and its limits."""
    out = []
    for i, entry in enumerate(cfg.reserved_memory):
        limits = entry.get("limits") or {} if isinstance(entry, Mapping) else None
        numa = entry.get("numaNode", 0) if isinstance(entry, Mapping) else None
        if not isinstance(limits, Mapping) or type(numa) is not int:
            raise ModelError(f"reservedMemory[{i}]: expected a numaNode and its limits, "
                             f"got {entry!r:.60}")
        for name, value in sorted(limits.items()):
            try:
                parse_quantity(value)
            except SpecError as exc:
                raise ModelError(f"reservedMemory[{i}].limits.{name}: {exc}") from None
            out.append((numa, str(name), str(value)))
    return out


def go_quantity(terms: Iterable[str]) -> str:
    """The sum of ``terms`` as Go's ``Quantity.String`` writes it: in the format of the
    term it took it from (a zero sum takes the next term's: ``Quantity.Add``), binary
    (``Mi``, ``Gi``) when that term had a binary suffix."""
    total, binary = Decimal(0), False
    for term in terms:
        if total == 0:
            binary = term.strip()[-2:] in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
        total += parse_quantity(term)
    if total != total.to_integral_value():
        return str(total.normalize())
    n = int(total)
    units: tuple[tuple[str, int], ...] = (
        (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20),
         ("Ki", 2**10)) if binary and abs(n) >= 1024 else ())
    units += (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6),
              ("k", 10**3))
    return next((f"{n // size}{suffix}" for suffix, size in units if n and n % size == 0),
                str(n))


def allocatable_reservation(cfg: KubeletConfig) -> dict[str, list[str] | None]:
    """``GetNodeAllocatableReservation``'s memory types (node_container_manager_linux.go):
    systemReserved + kubeReserved + evictionHard's memory.available, as the terms of each
    sum; ``None`` for memory when the threshold is a share of the machine's capacity, or
    not a quantity (which the kubelet refuses before its memory manager)."""
    out: dict[str, list[str]] = {}
    for pairs in (cfg.system_reserved, cfg.kube_reserved):
        for name, value in pairs:
            if _memory_type(name):
                out.setdefault(name, []).append(value)
    threshold = dict(cfg.eviction_hard).get("memory.available")
    # parseThresholdStatement ignores 0% and 100% (eviction/helpers.go).
    if threshold is None or threshold in ("0%", "100%"):
        return dict(out)
    try:
        parse_quantity(threshold)
    except SpecError:
        return {**out, "memory": None}
    out.setdefault("memory", []).append(threshold)
    return dict(out)


def _reservation_refusal(cfg: KubeletConfig) -> str | None:
    """``getSystemReservedMemory`` and ``NewPolicyStatic``'s check of the Static policy's
    reservation, less its machine's part (a NUMA node the machine lacks: the model node's):
    each memory type's reservedMemory must add up to the node allocatable's reservation of
    it, be whole bytes, and reserve some memory."""
    try:
        limits = reserved_memory_limits(cfg)
    except ModelError as exc:
        return str(exc)
    totals: dict[str, list[str]] = {}
    for _, name, value in limits:
        totals.setdefault(name, []).insert(0, value)  # a later entry's format wins
    allocatable = allocatable_reservation(cfg)
    for name in sorted(set(totals) | set(allocatable)):
        want = allocatable.get(name, [])
        if want is None:
            continue  # a share of the capacity: the machine's to decide
        got = totals.get(name, [])
        if sum(map(parse_quantity, got), Decimal(0)) != sum(map(parse_quantity, want),
                                                            Decimal(0)):
            return (f'the total amount "{go_quantity(got)}" of type "{name}" is not equal '
                    f'to the value "{go_quantity(want)}" determined by Node Allocatable '
                    "feature")
    # convertReserved: every quantity as an int64, a later entry of a node and type in
    # place of an earlier one.
    sizes = [(numa, name, parse_quantity(value)) for numa, name, value in limits]
    if any(q != q.to_integral_value() or q >= 2**63 for _, _, q in sizes):
        return "could not covert a variable of type Quantity to int64"  # sic
    converted = {(numa, name): q for numa, name, q in sizes}
    if sum(q for (_, name), q in converted.items() if name == "memory") <= 0:
        return MEMORY_NO_RESERVATION
    return None


def _memory_refusal(cfg: KubeletConfig) -> str | None:
    """The memory manager's ``NewManager`` (memorymanager/memory_manager.go) on Linux."""
    policy = cfg.memory_manager_policy
    if policy == "BestEffort":
        return 'policy "BestEffort" is not available for platform "linux"'
    if policy not in MEMORY_POLICIES:
        return f'unknown policy: "{policy}"'  # written as it is: the model reads it lowercased
    return _reservation_refusal(cfg) if policy == "Static" else None


def kubelet_refusal(cfg: KubeletConfig, version: str = "1.37") -> str | None:
    """Why the kubelet ``version``'s topology, CPU and memory managers refuse to be created
    with ``cfg``, from the configuration alone (policy and option names, gates, values, the
    static policy's CPU reservation, the Static policy's memory reservation), or ``None``;
    what depends on the machine is :class:`ModelConfig`'s and the model node's to refuse
    (docs/design.md#reference)."""
    if cfg.topology_manager_policy not in TOPOLOGY_POLICIES:
        return f'unknown policy: "{cfg.topology_manager_policy}"'  # written as it is
    if cfg.topology_manager_policy != "none":
        refusal = _topology_refusal(cfg.topology_manager_policy_options)
        if refusal:
            return refusal
    return _cpu_refusal(cfg, version) or _memory_refusal(cfg)


def _reserved_bytes(cfg: KubeletConfig) -> tuple[tuple[int, str, int], ...]:
    """reservedMemory in bytes; none when it cannot be read (kubelet_refusal names it)."""
    try:
        return tuple((numa, name, int(parse_quantity(value)))
                     for numa, name, value in reserved_memory_limits(cfg))
    except ModelError:
        return ()


def _true(pairs: Iterable[tuple[str, str]], name: str) -> bool:
    return any(key == name and value in _TRUE for key, value in pairs)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    cpu_policy: str = "static"  # "static" | "none"
    memory_policy: str = "Static"  # "Static" | "None"
    topology_policy: str = "none"
    scope: str = "container"
    options: frozenset[str] = frozenset()
    reserved_cpus: frozenset[int] | None = None  # reservedSystemCPUs
    reserved_cpu_m: int = 0  # kubeReserved.cpu + systemReserved.cpu, when no explicit set
    pod_level: bool = True  # PodLevelResourceManagers (and PodLevelResources) on
    kubelet_version: str = "1.37"  # one of KUBELET_VERSIONS
    # topologyManagerPolicyOptions: prefer-closest-numa-nodes (NUMA distances break ties
    # between equally wide masks) and max-allowable-numa-nodes (the NUMA-node limit).
    prefer_closest_numa: bool = False
    max_numa_nodes: int = DEFAULT_MAX_NUMA_NODES
    # An in-place CPU resize of a Guaranteed pod's exclusive CPUs (docs/design.md#allocator):
    # "off", what every released kubelet (1.35-1.37) does by default: refused as infeasible;
    # "keep", with the alpha gate InPlacePodVerticalScalingExclusiveCPUs on: admitted, and the
    # static policy leaves the CPUs as they are; "proposal": grown or shrunk around the CPUs
    # kept, as the upstream work proposes and no released static policy does.
    exclusive_cpu_resize: str = "off"
    # reservedMemory as (NUMA node, resource, bytes): the Static memory manager refuses a
    # NUMA node the machine lacks (the model node checks it); the topology's memory is
    # already what the reservation leaves.
    reserved_memory: tuple[tuple[int, str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.cpu_policy not in ("static", "none"):
            raise ModelError(f"unknown CPU manager policy {self.cpu_policy!r}")
        if self.memory_policy not in ("Static", "None"):
            raise ModelError(f"unknown memory manager policy {self.memory_policy!r}")
        if self.topology_policy not in TOPOLOGY_POLICIES:
            raise ModelError(f"unknown topology manager policy {self.topology_policy!r} "
                             f"(one of {', '.join(TOPOLOGY_POLICIES)})")
        if self.scope not in SCOPES:
            raise ModelError(f"unknown topology manager scope {self.scope!r} (pod|container)")
        if self.kubelet_version not in KUBELET_VERSIONS:
            raise ModelError(f"kubelet version {self.kubelet_version!r} is not modelled "
                             f"(one of {', '.join(KUBELET_VERSIONS)})")
        if self.exclusive_cpu_resize not in RESIZE_MODES:
            raise ModelError(f"exclusive_cpu_resize {self.exclusive_cpu_resize!r} is not one "
                             f"of {', '.join(RESIZE_MODES)}")
        # NewManager reads no option under the none policy (topology_manager.go).
        if self.topology_policy != "none" and self.max_numa_nodes < DEFAULT_MAX_NUMA_NODES:
            raise ModelError(f'the minimum value of "max-allowable-numa-nodes" should not be '
                             f"less than {DEFAULT_MAX_NUMA_NODES}")
        unknown = sorted(self.options - set(KNOWN_OPTIONS))
        if unknown:
            raise ModelError(f"unknown CPU manager policy option(s) {', '.join(unknown)}")
        for a, b in EXCLUSIVE_OPTIONS:
            if a in self.options and b in self.options:
                raise ModelError(f"static policy options {a} and {b} can not be used "
                                 "together")
        if "align-by-socket" in self.options and self.topology_policy == "single-numa-node":
            raise ModelError("topology manager single-numa-node policy is incompatible with "
                             "the CPU manager align-by-socket policy option")
        unmodelled = sorted(self.options - set(MODELLED_OPTIONS))
        if unmodelled:
            raise ModelError(f"CPU manager policy option(s) {', '.join(unmodelled)} are not "
                             "modelled: the placement would not be the kubelet's")

    @property
    def static(self) -> bool:
        return self.cpu_policy == "static"

    @classmethod
    def from_kubelet_config(cls, cfg: KubeletConfig) -> ModelConfig:
        read_options = cfg.topology_manager_policy.lower() != "none"
        return cls(
            cpu_policy=cfg.cpu_manager_policy.lower(),
            memory_policy="Static" if cfg.memory_manager_policy.lower() == "static" else "None",
            topology_policy=cfg.topology_manager_policy.lower(),
            scope=cfg.topology_manager_scope.lower(),
            options=parse_policy_options(cfg.cpu_manager_policy_options),
            reserved_cpus=cfg.reserved_system_cpus,
            reserved_cpu_m=cfg.reserved_cpu_quantity_m(),
            pod_level=cfg.pod_level_resource_managers,
            # The none policy's NewManager reads no option (topology_manager.go).
            prefer_closest_numa=read_options and _true(cfg.topology_manager_policy_options,
                                                        "prefer-closest-numa-nodes"),
            max_numa_nodes=(read_options and cfg.max_numa_nodes()) or DEFAULT_MAX_NUMA_NODES,
            reserved_memory=_reserved_bytes(cfg),
        )

    def to_configz(self) -> dict[str, object]:
        """The ``/configz`` body a kubelet with this configuration serves."""
        gates = {"PodLevelResources": True, "PodLevelResourceManagers": self.pod_level}
        if self.options & ALPHA_OPTIONS:
            # An alpha option needs its gate, or the kubelet would not start (kubelet_refusal).
            gates["CPUManagerPolicyAlphaOptions"] = True
        cfg: dict[str, object] = {
            "cpuManagerPolicy": self.cpu_policy,
            "cpuManagerPolicyOptions": {o: "true" for o in sorted(self.options)},
            "memoryManagerPolicy": self.memory_policy,
            "topologyManagerPolicy": self.topology_policy,
            "topologyManagerScope": self.scope,
            "featureGates": gates,
        }
        topology_options = {}
        if self.prefer_closest_numa:
            topology_options["prefer-closest-numa-nodes"] = "true"
        if self.max_numa_nodes != DEFAULT_MAX_NUMA_NODES:
            topology_options["max-allowable-numa-nodes"] = str(self.max_numa_nodes)
        if topology_options:
            cfg["topologyManagerPolicyOptions"] = topology_options
        reserved: dict[str, str] = {}
        if self.reserved_cpus:
            cfg["reservedSystemCPUs"] = format_cpuset(self.reserved_cpus)
        elif self.reserved_cpu_m:
            reserved["cpu"] = f"{self.reserved_cpu_m}m"
        if self.reserved_memory:
            # The node allocatable's reservation of each memory type is what reservedMemory
            # adds up to, or the kubelet would not start (kubelet_refusal).
            nodes: dict[int, dict[str, str]] = {}
            sums: dict[str, int] = {}
            for numa, name, size in self.reserved_memory:
                nodes.setdefault(numa, {})[name] = str(size)
                sums[name] = sums.get(name, 0) + size
            cfg["reservedMemory"] = [{"numaNode": n, "limits": limits}
                                     for n, limits in nodes.items()]
            reserved.update((name, str(size)) for name, size in sums.items())
        if reserved:
            cfg["kubeReserved"] = reserved
        return {"kubeletconfig": cfg}
