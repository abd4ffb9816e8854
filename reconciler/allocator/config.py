"""The kubelet configuration the allocator model runs with, validated as the kubelet
validates it at start-up (docs/design.md#allocator)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconciler.cpuset import format_cpuset
from reconciler.kube import KubeletConfig, go_atoi

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


def kubelet_refusal(cfg: KubeletConfig, version: str = "1.37") -> str | None:
    """Why the kubelet ``version``'s topology and CPU managers refuse to be created with
    ``cfg``, from the configuration alone (option names, gates, values, the static policy's
    reservation), or ``None``; what depends on the machine is :class:`ModelConfig`'s and
    the model node's to refuse (docs/design.md#reference)."""
    if cfg.topology_manager_policy not in TOPOLOGY_POLICIES:
        return f'unknown policy: "{cfg.topology_manager_policy}"'  # written as it is
    if cfg.topology_manager_policy != "none":
        refusal = _topology_refusal(cfg.topology_manager_policy_options)
        if refusal:
            return refusal
    return _cpu_refusal(cfg, version)


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
        if self.reserved_cpus:
            cfg["reservedSystemCPUs"] = format_cpuset(self.reserved_cpus)
        elif self.reserved_cpu_m:
            cfg["kubeReserved"] = {"cpu": f"{self.reserved_cpu_m}m"}
        return {"kubeletconfig": cfg}
