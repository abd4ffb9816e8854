"""Kubernetes facts the reconciler and the allocator model need: resource quantities, the
parts of a pod spec that decide QoS and exclusive-CPU eligibility, and kubelet config.

Parsing here works on already-decoded JSON (dicts), so it stays pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, TypeGuard

from reconciler.cpuset import MAX_CPU_ID, CPUSetError, parse_cpuset

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
            "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}


def _is_map(obj: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(obj, Mapping)``, quick for the dicts that decoded JSON is made of."""
    return type(obj) is dict or isinstance(obj, Mapping)


class SpecError(ValueError):
    """A pod spec or kubelet config value that cannot be understood."""


_QUANTITY = re.compile(
    r"^(?P<num>[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes resource quantity (``"500m"``, ``"2"``, ``"12Gi"``, ``"1e3"``, ``4``)."""
    if isinstance(value, bool):
        raise SpecError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise SpecError(f"not a quantity: {value!r}")
    match = _QUANTITY.match(text)
    if not match:
        raise SpecError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match["num"])
    except InvalidOperation:
        raise SpecError(f"not a quantity: {value!r}") from None
    if number > Decimal("1e30"):
        raise SpecError(f"quantity out of range: {value!r}")
    suffix = match["suffix"] or ""
    return number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


# A node's pod specs repeat a handful of quantity strings ("100m", "64Mi") thousands of
# times: remember the parsed values (bounded, so hostile input cannot grow it forever).
_MILLIS: dict[str, int] = {}
_BYTES: dict[str, int] = {}
_CACHE_MAX = 4096


def _remember(cache: dict[str, int], key: str, value: int) -> int:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


def cpu_millis(value: object) -> int:
    """CPU quantity in millicores, rounded up as the kubelet does."""
    if type(value) is str:
        cached = _MILLIS.get(value)
        if cached is not None:
            return cached
        return _remember(_MILLIS, value, math.ceil(parse_quantity(value) * 1000))
    return math.ceil(parse_quantity(value) * 1000)


def memory_bytes(value: object) -> int:
    if type(value) is str:
        cached = _BYTES.get(value)
        if cached is not None:
            return cached
        return _remember(_BYTES, value, math.ceil(parse_quantity(value)))
    return math.ceil(parse_quantity(value))


@dataclass(frozen=True, slots=True)
class Resources:
    """The CPU and memory of one ``resources`` block; ``None`` where not set. A request left
    unset while its limit is set defaults to the limit, as the API server does."""

    cpu_request_m: int | None = None
    cpu_limit_m: int | None = None
    memory_request: int | None = None
    memory_limit: int | None = None
    # Extended resources (``nvidia.com/gpu``) as (name, count), sorted by name: the API
    # server holds their request equal to their limit, so one count says both.
    extended: tuple[tuple[str, int], ...] = ()
    # Hugepages (``hugepages-2Mi``, ``hugepages-1Gi``) as (name, bytes), sorted: the API
    # server holds their request equal to their limit.
    hugepages: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_json(cls, obj: object) -> Resources:
        if not _is_map(obj):
            return cls()
        requests = obj.get("requests") or {}
        limits = obj.get("limits") or {}
        if not _is_map(requests) or not _is_map(limits):
            raise SpecError("resources.requests/limits must be objects")
        cpu_limit = cpu_millis(limits["cpu"]) if "cpu" in limits else None
        mem_limit = memory_bytes(limits["memory"]) if "memory" in limits else None
        cpu_request = cpu_millis(requests["cpu"]) if "cpu" in requests else cpu_limit
        mem_request = memory_bytes(requests["memory"]) if "memory" in requests else mem_limit
        return cls(cpu_request, cpu_limit, mem_request, mem_limit, _extended(requests, limits),
                   _hugepages(requests, limits))

    @property
    def devices(self) -> dict[str, int]:
        """Extended resources by name: what a device plugin's resources are asked as."""
        return dict(self.extended)

    @property
    def is_set(self) -> bool:
        # A zero quantity counts as unset, as the API server's QoS derivation has it.
        return any(v for v in (self.cpu_request_m, self.cpu_limit_m,
                               self.memory_request, self.memory_limit))

    @property
    def guaranteed(self) -> bool:
        """Requests equal limits for both CPU and memory (and both are set and non-zero:
        a zero CPU quantity is no limit, so such a pod is Burstable)."""
        return (bool(self.cpu_limit_m) and bool(self.memory_limit)
                and self.cpu_request_m == self.cpu_limit_m
                and self.memory_request == self.memory_limit)

    @property
    def integer_cpus(self) -> int | None:
        """The CPU request in whole CPUs when it is a positive integer, else ``None``."""
        m = self.cpu_request_m
        if m is None or m <= 0 or m % 1000:
            return None
        return m // 1000

    def legacy_cpus(self) -> int:
        """What the per-container model would pin for a shared container
        (docs/design.md#estimates)."""
        m = self.cpu_limit_m if self.cpu_limit_m is not None else self.cpu_request_m
        return max(1, math.ceil((m or 0) / 1000))


def is_extended_resource(name: str) -> bool:
    """The API's ``IsExtendedResourceName``: a domain-prefixed name outside
    ``kubernetes.io``, not a quota ``requests.`` name."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _hugepages(requests: Mapping[Any, Any], limits: Mapping[Any, Any]
               ) -> tuple[tuple[str, int], ...]:
    """Hugepages of one ``resources`` block: the request, or else the limit, in bytes."""
    names = {n for n in (*requests, *limits) if isinstance(n, str) and n.startswith("hugepages-")}
    out = []
    for name in sorted(names):
        size = memory_bytes(requests[name] if name in requests else limits[name])
        if size:
            out.append((name, size))
    return tuple(out)


def _extended(requests: Mapping[Any, Any], limits: Mapping[Any, Any]
              ) -> tuple[tuple[str, int], ...]:
    """Extended resources of one ``resources`` block, validated as the API server does:
    whole counts, the request (when given) equal to the limit."""
    names = [n for n in (*requests, *limits) if isinstance(n, str) and "/" in n]
    if not names:
        return ()
    out: dict[str, int] = {}
    for name in sorted(set(names)):
        if not is_extended_resource(name):
            continue
        values = {parse_quantity(src[name]) for src in (requests, limits) if name in src}
        if len(values) > 1:
            raise SpecError(f"{name}: the request must equal the limit for an extended "
                            "resource")
        value = values.pop()
        if value != value.to_integral_value() or value < 0:
            raise SpecError(f"{name}: an extended resource takes a whole count, not "
                            f"{value}")
        if value:
            out[name] = int(value)
    return tuple(out.items())


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    name: str
    resources: Resources = Resources()
    sidecar: bool = False  # a restartable init container (restartPolicy: Always)
    init: bool = False  # an ordinary init container: runs to completion, never listed


@dataclass(frozen=True, slots=True)
class PodSpec:
    namespace: str
    name: str
    uid: str = ""
    containers: tuple[ContainerSpec, ...] = ()
    init_containers: tuple[ContainerSpec, ...] = ()  # sidecars and ordinary init containers
    resources: Resources | None = None  # pod-level .spec.resources
    qos_class: str | None = None  # status.qosClass as reported
    phase: str | None = None
    # Derived once: every container's eligibility asks for the pod's class, and deriving it
    # reads every container, so asking each time made planning quadratic in containers.
    _qos: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_qos", self.qos_class or compute_qos(self))

    @property
    def sidecars(self) -> tuple[ContainerSpec, ...]:
        return tuple(c for c in self.init_containers if c.sidecar)

    @property
    def long_running(self) -> tuple[ContainerSpec, ...]:
        """Containers in PodResources ``List`` order: sidecars first, then app containers."""
        return self.sidecars + self.containers

    @property
    def qos(self) -> str:
        return self._qos

    @property
    def guaranteed(self) -> bool:
        return self.qos == "Guaranteed"

    @property
    def budget_cpus(self) -> int | None:
        """The integer pod-level CPU budget; ``None`` without one or when fractional."""
        if self.resources is None:
            return None
        return self.resources.integer_cpus

    @property
    def has_pod_cpu_budget(self) -> bool:
        return self.resources is not None and self.resources.cpu_request_m is not None

    def container(self, name: str) -> ContainerSpec | None:
        for c in self.long_running:
            if c.name == name:
                return c
        return None

    def eligible(self, container: ContainerSpec) -> bool:
        """Whether the static policy would give this container exclusive CPUs
        (docs/design.md#allocator)."""
        if container.init and not container.sidecar:
            return False
        if not self.guaranteed:
            return False
        r = container.resources
        return r.guaranteed and r.integer_cpus is not None


def compute_qos(pod: PodSpec) -> str:
    """The QoS class as the API server derives it; pod-level resources decide when set."""
    if pod.resources is not None and pod.resources.is_set:
        return "Guaranteed" if pod.resources.guaranteed else "Burstable"
    everything = pod.containers + pod.init_containers
    if all(not c.resources.is_set for c in everything):
        return "BestEffort"
    if all(c.resources.guaranteed for c in everything):
        return "Guaranteed"
    return "Burstable"


def _container_from_json(obj: object, *, init: bool) -> ContainerSpec:
    if not _is_map(obj) or not isinstance(obj.get("name"), str):
        raise SpecError("a container without a name")
    sidecar = init and obj.get("restartPolicy") == "Always"
    return ContainerSpec(
        name=obj["name"],
        resources=Resources.from_json(obj.get("resources")),
        sidecar=sidecar,
        init=init and not sidecar,
    )


def pod_spec_from_json(obj: Mapping[str, Any]) -> PodSpec:
    """One item of a ``v1.PodList`` (or a bare Pod manifest)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not _is_map(meta) or not _is_map(spec):
        raise SpecError("pod without metadata/spec objects")
    if not _is_map(status):
        status = {}
    pod_resources = spec.get("resources")
    return PodSpec(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        containers=tuple(_container_from_json(c, init=False)
                         for c in spec.get("containers") or ()),
        init_containers=tuple(_container_from_json(c, init=True)
                              for c in spec.get("initContainers") or ()),
        resources=Resources.from_json(pod_resources) if _is_map(pod_resources)
        else None,
        qos_class=status.get("qosClass") if isinstance(status.get("qosClass"), str) else None,
        phase=status.get("phase") if isinstance(status.get("phase"), str) else None,
    )


def pod_list_from_json(obj: object) -> tuple[PodSpec, ...]:
    """A ``v1.PodList`` as the kubelet's ``/pods`` returns it (with no pod, ``items`` is
    null: the kubelet encodes an empty Go slice as null)."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("items", []), list | None):
        raise SpecError("not a PodList: expected an object with an 'items' list")
    return pod_specs_from_items(obj.get("items") or ())


def pod_specs_from_items(items: Iterable[object]) -> tuple[PodSpec, ...]:
    """The items of a ``v1.PodList``, however they were decoded."""
    pods = []
    for item in items:
        if not _is_map(item):
            raise SpecError("PodList item is not an object")
        pods.append(pod_spec_from_json(item))
    return tuple(pods)


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    """The kubelet configuration fields that shape CPU and memory placement (v1beta1)."""

    cpu_manager_policy: str = "none"
    cpu_manager_policy_options: tuple[tuple[str, str], ...] = ()
    reserved_system_cpus: frozenset[int] | None = None
    memory_manager_policy: str = "None"
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    topology_manager_policy_options: tuple[tuple[str, str], ...] = ()
    feature_gates: tuple[tuple[str, bool], ...] = ()
    kube_reserved: tuple[tuple[str, str], ...] = ()
    system_reserved: tuple[tuple[str, str], ...] = ()
    reserved_memory: tuple[Any, ...] = field(default=())
    # evictionHard (signal -> threshold): its memory.available is part of the node
    # allocatable's memory reservation, which reservedMemory must add up to.
    eviction_hard: tuple[tuple[str, str], ...] = ()

    def gate(self, name: str) -> bool | None:
        """A feature gate's explicit setting, ``None`` when the config does not list it."""
        for key, value in self.feature_gates:
            if key == name:
                return value
        return None

    def option(self, name: str) -> str | None:
        for key, value in self.cpu_manager_policy_options:
            if key == name:
                return value
        return None

    def max_numa_nodes(self) -> int | None:
        """The topology manager's ``max-allowable-numa-nodes`` option, when set and a
        number."""
        for key, value in self.topology_manager_policy_options:
            if key == "max-allowable-numa-nodes":
                return go_atoi(value)  # "+9" is 9; "-3" the kubelet refuses
        return None

    @property
    def static_cpu(self) -> bool:
        return self.cpu_manager_policy.lower() == "static"

    @property
    def pod_level_resource_managers(self) -> bool:
        return bool(self.gate("PodLevelResourceManagers"))

    def reserved_cpu_quantity_m(self) -> int:
        """kubeReserved.cpu + systemReserved.cpu, in millicores."""
        total = 0
        for pairs in (self.kube_reserved, self.system_reserved):
            for key, value in pairs:
                if key == "cpu":
                    total += cpu_millis(value)
        return total


def go_atoi(value: str) -> int | None:
    """``strconv.Atoi``, as the kubelet reads a number option: an optional sign and ASCII
    digits, else ``None``."""
    digits = value[1:] if value[:1] in ("+", "-") else value
    if not digits or not (digits.isascii() and digits.isdigit()):
        return None
    return int(value)


def _pairs(obj: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(obj, Mapping):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in obj.items()))


def _reserved_quantities(name: str, obj: object) -> tuple[tuple[str, str], ...]:
    """``kubeReserved`` / ``systemReserved``: resource name → quantity. The kubelet refuses
    to start with anything else, so anything else is not a configuration it runs with."""
    if obj is None:
        return ()
    if not isinstance(obj, Mapping):
        raise SpecError(f"{name}: expected a map of resource quantities, got {obj!r:.60}")
    for key, value in obj.items():
        try:
            parse_quantity(value)
        except SpecError as exc:
            raise SpecError(f"{name}.{key}: {exc}") from None
    return _pairs(obj)


def _reserved_system_cpus(value: object, max_cpu: int) -> frozenset[int] | None:
    if value is None:
        return None
    if not isinstance(value, str):
        # configz renders it as a string; a number here is not a CPU list the kubelet took.
        raise SpecError(f"reservedSystemCPUs: expected a CPU list such as \"0-1\", "
                        f"got {value!r:.60}")
    try:
        return parse_cpuset(value, max_cpu) or None
    except CPUSetError as exc:
        raise SpecError(f"reservedSystemCPUs: {exc}") from None


def kubelet_config_from_json(obj: object, *, max_cpu: int = MAX_CPU_ID) -> KubeletConfig:
    """The body of the kubelet's ``/configz`` (``{"kubeletconfig": {...}}``) or the bare
    configuration object; ``max_cpu``: the node's last CPU where it is known (reserved
    CPUs past it are refused before a set is built)."""
    if not isinstance(obj, Mapping):
        raise SpecError("configz is not a JSON object")
    cfg = obj.get("kubeletconfig", obj)
    if not isinstance(cfg, Mapping):
        raise SpecError("configz 'kubeletconfig' is not an object")
    # configz is camelCase, but hand-written fixtures are not always: match keys loosely.
    loose = {str(k).replace("_", "").lower(): v for k, v in cfg.items()}

    def get(name: str, default: Any = None) -> Any:
        return loose.get(name.lower(), default)

    gates_obj = get("featureGates") or {}
    gates = tuple(sorted((str(k), bool(v)) for k, v in gates_obj.items())) \
        if isinstance(gates_obj, Mapping) else ()
    reserved_memory = get("reservedMemory") or ()
    return KubeletConfig(
        cpu_manager_policy=str(get("cpuManagerPolicy") or "none"),
        cpu_manager_policy_options=_pairs(get("cpuManagerPolicyOptions")),
        topology_manager_policy_options=_pairs(get("topologyManagerPolicyOptions")),
        reserved_system_cpus=_reserved_system_cpus(get("reservedSystemCPUs"), max_cpu),
        memory_manager_policy=str(get("memoryManagerPolicy") or "None"),
        topology_manager_policy=str(get("topologyManagerPolicy") or "none"),
        topology_manager_scope=str(get("topologyManagerScope") or "container"),
        feature_gates=gates,
        kube_reserved=_reserved_quantities("kubeReserved", get("kubeReserved")),
        system_reserved=_reserved_quantities("systemReserved", get("systemReserved")),
        reserved_memory=tuple(reserved_memory) if isinstance(reserved_memory, list) else (),
        eviction_hard=_pairs(get("evictionHard")),
    )
