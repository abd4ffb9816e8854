"""The kubelet's device manager as the topology manager uses it
(docs/design.md#devices-in-the-model): a node's device-plugin devices with their NUMA
nodes, the hints a device request gives, and which devices an admitted container takes.

Ported from k8s.io/kubernetes v1.37.2 ``pkg/kubelet/cm/devicemanager``: ``topology_hints.go``
(``GetTopologyHints``, ``GetPodTopologyHints``, ``generateDeviceTopologyHints``) and
``manager.go`` (``devicesToAllocate``, ``filterByAffinity``). The kubelet walks Go sets
(random order) and may ask the plugin's ``GetPreferredAllocation``; the model has no plugin
and takes devices in a fixed order instead: NUMA nodes in ``filterByAffinity``'s order,
then device ID.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconciler.allocator.hints import Hint
from reconciler.kube import ContainerSpec, PodSpec, is_extended_resource
from reconciler.snapshot import DeviceAlloc

_NO_TOPOLOGY = -1  # filterByAffinity's fake NUMA node for devices without topology


class DeviceError(ValueError):
    """A device description (``--devices``) that cannot be understood."""


class DevicesUnavailable(Exception):
    """``devicesToAllocate``'s refusal; the message is the kubelet's admission message."""


@dataclass(frozen=True, slots=True)
class Device:
    """One device as its plugin lists it: ID and the NUMA nodes of its topology (empty: the
    plugin gave none)."""

    id: str
    numa: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """The node's healthy device-plugin devices by resource name (what
    ``GetAllocatableResources`` lists). Part of the model's node description beside
    :class:`~reconciler.allocator.topology.CPUTopology`; empty for a node without
    devices."""

    resources: tuple[tuple[str, tuple[Device, ...]], ...] = ()
    # Resources whose plugin answers ``GetPreferredAllocation``, with its order of
    # preference (device IDs): the devices it must include, then these, up to the size.
    preference: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Resources whose plugin asks for ``PreStartContainer`` before a container starts.
    pre_start: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.resources)

    @property
    def by_name(self) -> dict[str, tuple[Device, ...]]:
        return dict(self.resources)

    @classmethod
    def of(cls, devices: Mapping[str, Iterable[Device]],
           preference: Mapping[str, Iterable[str]] | None = None,
           pre_start: Iterable[str] = ()) -> NodeDevices:
        """``preference``: per resource whose plugin offers a preferred allocation, its
        order of the resource's devices; ``pre_start``: resources whose plugin asks for
        ``PreStartContainer``."""
        prefs = {name: tuple(order) for name, order in (preference or {}).items()}
        for name, order in prefs.items():
            known = {d.id for d in devices.get(name, ())}
            if name not in devices or set(order) != known or len(order) != len(known):
                raise DeviceError(f"{name}: a preferred order must list each of its devices "
                                  "once")
        out = []
        for name in sorted(devices):
            devs = tuple(sorted(devices[name], key=lambda d: d.id))
            ids = [d.id for d in devs]
            if len(set(ids)) != len(ids):
                raise DeviceError(f"{name}: a device ID is listed twice")
            out.append((name, devs))
        return cls(tuple(out), tuple(sorted(prefs.items())), frozenset(pre_start))

    @classmethod
    def parse(cls, specs: Iterable[str], numa_nodes: Iterable[int] | None = None
              ) -> NodeDevices:
        """``RESOURCE=NUMA:COUNT[,NUMA:COUNT...]`` per resource (``nvidia.com/gpu=0:2,1:2``:
        two GPUs on NUMA node 0, two on node 1; ``-1:COUNT`` for devices without topology).
        IDs are made up: the resource's last name part and a number (``gpu-0``...)."""
        known = None if numa_nodes is None else frozenset(numa_nodes)
        devices: dict[str, list[Device]] = {}
        for spec in specs:
            name, sep, groups = spec.partition("=")
            name = name.strip()
            if not sep or not groups.strip():
                raise DeviceError(f"--devices {spec!r}: expected RESOURCE=NUMA:COUNT[,...], "
                                  "e.g. nvidia.com/gpu=0:2,1:2")
            if not is_extended_resource(name):
                raise DeviceError(f"--devices {spec!r}: {name!r} is not an extended "
                                  "resource name (DOMAIN/NAME outside kubernetes.io)")
            if name in devices:
                raise DeviceError(f"--devices: {name} is given twice")
            short = re.sub(r"[^A-Za-z0-9]+", "-", name.rsplit("/", 1)[-1]) or "dev"
            devs = devices[name] = []
            for group in groups.split(","):
                numa_s, colon, count_s = group.strip().partition(":")
                try:
                    numa, count = int(numa_s), int(count_s)
                except ValueError:
                    raise DeviceError(f"--devices {spec!r}: {group!r} is not NUMA:COUNT "
                                      "(two integers)") from None
                if not colon or count < 1 or numa < _NO_TOPOLOGY:
                    raise DeviceError(f"--devices {spec!r}: {group!r}: the NUMA node is -1 "
                                      "(no topology) or a node, the count at least 1")
                if known is not None and numa != _NO_TOPOLOGY and numa not in known:
                    raise DeviceError(f"--devices {spec!r}: the node has no NUMA node {numa} "
                                      f"(it has {', '.join(map(str, sorted(known)))})")
                topo = () if numa == _NO_TOPOLOGY else (numa,)
                base = len(devs)
                devs.extend(Device(f"{short}-{base + i}", topo) for i in range(count))
        return cls.of(devices)

    @classmethod
    def from_allocatable(cls, entries: Iterable[DeviceAlloc]) -> NodeDevices:
        """From ``GetAllocatableResources``' devices: one entry per device and NUMA node, so
        a device on two nodes comes twice."""
        numa: dict[str, dict[str, set[int]]] = {}
        for e in entries:
            for dev in e.device_ids:
                numa.setdefault(e.resource_name, {}).setdefault(dev, set()).update(
                    e.numa_nodes)
        return cls.of({name: [Device(d, tuple(sorted(n))) for d, n in devs.items()]
                       for name, devs in numa.items()})

    def free(self) -> dict[str, set[str]]:
        return {name: {d.id for d in devs} for name, devs in self.resources}


def container_request(c: ContainerSpec, devices: NodeDevices) -> dict[str, int]:
    """``getContainerDeviceRequest``: the container's limits for resources a device plugin
    serves on this node (others are no business of the device manager's)."""
    served = devices.by_name
    return {name: n for name, n in c.resources.extended if name in served}


def pod_request(pod: PodSpec, devices: NodeDevices) -> dict[str, int]:
    """``getPodDeviceRequest`` (``resource.PodLimits``): per resource, the larger of what
    the long-running containers hold together and what any ordinary init container holds
    beside the sidecars started before it."""
    out: dict[str, int] = {}
    for name in devices.by_name:
        sidecars = init_peak = 0
        for c in pod.init_containers:
            n = c.resources.devices.get(name, 0)
            if c.sidecar:
                sidecars += n
            else:
                init_peak = max(init_peak, sidecars + n)
        apps = sum(c.resources.devices.get(name, 0) for c in pod.containers)
        total = max(init_peak, apps + sidecars)
        if total:
            out[name] = total
    return out


def _has_topology(devs: tuple[Device, ...]) -> bool:
    """``deviceHasTopologyAlignment``."""
    return any(d.numa for d in devs)


def _hint_nodes(devs: tuple[Device, ...], known: frozenset[int], kubelet_version: str
                ) -> list[int]:
    """The NUMA nodes whose masks the hints walk: those holding the resource's devices
    (``deviceNUMANodes``), or, on 1.35, every node of the machine."""
    everything = sorted(known)
    if kubelet_version == "1.35":
        return everything
    return sorted({n for d in devs for n in d.numa} & known) or everything


def generate_hints(devs: tuple[Device, ...], available: Iterable[str], reusable: Iterable[str],
                   request: int, machine_numa: Iterable[int], kubelet_version: str = "1.37"
                   ) -> list[Hint]:
    """``generateDeviceTopologyHints``: every mask of the NUMA nodes that host this
    resource's devices (1.35: of every NUMA node of the machine) with enough available (and
    every reusable) device; preferred when as narrow as the narrowest mask that all
    devices, used or not, could fill."""
    known = frozenset(machine_numa)
    numa_of = {d.id: frozenset(d.numa) for d in devs}
    nodes = _hint_nodes(devs, known, kubelet_version)
    min_size = len(nodes)
    avail = [numa_of[d] for d in available]
    reuse = [numa_of[d] for d in reusable if numa_of[d]]
    found: list[frozenset[int]] = []
    for k in range(1, len(nodes) + 1):
        for combo in itertools.combinations(nodes, k):
            mask = frozenset(combo)
            in_mask = sum(1 for d in devs if mask & numa_of[d.id])
            if in_mask >= request and k < min_size:
                min_size = k
            if any(not (mask & r) for r in reuse):
                continue
            if len(reuse) + sum(1 for a in avail if mask & a) >= request:
                found.append(mask)
    return [(m, len(m) == min_size) for m in found]


def provider_hints(devices: NodeDevices, request: Mapping[str, int],
                   free: Mapping[str, set[str]], reusable: Mapping[str, set[str]],
                   machine_numa: Iterable[int], kubelet_version: str = "1.37"
                   ) -> dict[str, list[Hint] | None]:
    """``GetTopologyHints``/``GetPodTopologyHints`` for a request with nothing allocated
    yet: per resource (by name), ``None`` (no topology: no preference), ``[]`` (too few
    devices: no possible affinity) or the hints."""
    by_name = devices.by_name
    numa = list(machine_numa)
    out: dict[str, list[Hint] | None] = {}
    for name in sorted(request):
        devs, n = by_name[name], request[name]
        if not _has_topology(devs):
            out[name] = None
            continue
        avail, reuse = free.get(name, set()), reusable.get(name, set())
        if len(avail | reuse) < n:
            out[name] = []
            continue
        out[name] = generate_hints(devs, sorted(avail - reuse), sorted(reuse), n, numa,
                                   kubelet_version)
    return out


def held_hints(devices: NodeDevices, request: Mapping[str, int],
               held: Mapping[str, Iterable[str]], free: Mapping[str, set[str]],
               machine_numa: Iterable[int], kubelet_version: str = "1.37"
               ) -> dict[str, list[Hint] | None]:
    """The hints of a container or pod admitted again (after a kubelet restart): for a
    resource it already holds devices of, regenerated from those alone, or none possible
    (``[]``) when it holds another number than it asks; else as for a new request."""
    by_name = devices.by_name
    numa = list(machine_numa)
    out: dict[str, list[Hint] | None] = {}
    for name in sorted(request):
        allocated = sorted(held.get(name, ()))
        if not allocated or not _has_topology(by_name[name]):
            out.update(provider_hints(devices, {name: request[name]}, free, {}, numa,
                                      kubelet_version))
        elif len(allocated) != request[name]:
            out[name] = []
        else:
            out[name] = generate_hints(by_name[name], allocated, (), request[name], numa,
                                       kubelet_version)
    return out


def unavailable(resource: str, requested: int, available: int) -> str:
    """The admission message when ``devicesToAllocate`` finds too few devices (reason
    ``UnexpectedAdmissionError``)."""
    return (f"Allocate failed due to requested number of devices unavailable for {resource}. "
            f"Requested: {requested}, Available: {available}, which is unexpected")


@dataclass(frozen=True, slots=True)
class Choice:
    """What ``devicesToAllocate`` leaves to chance for one container and resource: it
    always takes ``fixed``, then any ``count`` of ``pool`` (the kubelet walks a Go set
    there, in random order). The model takes one such choice; the kubelet's, whichever it
    is, is one that :meth:`allows`."""

    fixed: frozenset[str]
    pool: frozenset[str]
    count: int

    def allows(self, ids: Iterable[str]) -> bool:
        got = set(ids)
        rest = got - self.fixed
        return self.fixed <= got and len(rest) == self.count and rest <= self.pool


def _preferred(preference: tuple[str, ...], available: Iterable[str], must: list[str],
               size: int) -> list[str]:
    """A plugin's ``GetPreferredAllocation`` as the model knows plugins: the devices it must
    include, then the available ones in its order of preference, up to ``size``."""
    avail = set(available) - set(must)
    extra = [d for d in preference if d in avail][:max(0, size - len(must))]
    return [*must, *extra]


def _affinity_tiers(devs: tuple[Device, ...], available: list[str],
                    hint: frozenset[int] | None) -> tuple[list[str], list[str], list[str]]:
    """``filterByAffinity``: the available devices on the hinted NUMA nodes, those on other
    nodes, those without topology; each ordered by its first node in the kubelet's order
    (hinted nodes with fewer devices first), then by ID. Without a hint, or for a resource
    without topology, every device is in the last list."""
    if hint is None or not _has_topology(devs):
        return [], [], list(available)
    numa_of = {d.id: d.numa for d in devs}
    per_node: dict[int, list[str]] = {}
    for d in available:
        for n in numa_of[d] or (_NO_TOPOLOGY,):
            per_node.setdefault(n, []).append(d)

    def rank(n: int) -> tuple[int, int, int]:
        group = 0 if n in hint else (2 if n == _NO_TOPOLOGY else 1)
        return (group, len(per_node[n]), n)

    nodes = sorted(per_node, key=rank)
    first = {d: min(nodes.index(n) for n in numa_of[d] or (_NO_TOPOLOGY,)) for d in available}
    tiers: tuple[list[str], list[str], list[str]] = ([], [], [])
    for d in sorted(available, key=lambda d: (first[d], d)):
        n = nodes[first[d]]
        tiers[0 if n in hint else (2 if n == _NO_TOPOLOGY else 1)].append(d)
    return tiers


class _Taking:
    """``allocateRemainingFrom`` over the tiers ``devicesToAllocate`` walks: the first tier
    with more devices left than still needed is where the kubelet's choice is random."""

    def __init__(self, needed: int) -> None:
        self.needed = needed
        self.got: list[str] = []
        self.choice: Choice | None = None

    def take_from(self, tier: Iterable[str]) -> bool:
        taken = set(self.got)
        rest = [d for d in tier if d not in taken]
        if len(rest) >= self.needed:
            self.choice = Choice(frozenset(self.got), frozenset(rest), self.needed)
            self.got += rest[:self.needed]
            self.needed = 0
            return True
        self.got += rest
        self.needed -= len(rest)
        return False


def take_choice(devs: tuple[Device, ...], resource: str, needed: int, free: set[str],
                reusable: set[str], hint: frozenset[int] | None,
                preference: tuple[str, ...] | None = None,
                pick: Iterable[str] | None = None) -> tuple[tuple[str, ...], Choice]:
    """``devicesToAllocate``: reusable devices (an init container's) first; then, when too
    few devices are free, the kubelet's refusal; else the free devices by
    ``filterByAffinity`` (on the hinted NUMA nodes, elsewhere, without topology), with the
    plugin's preferred allocation (``preference``: its order, ``None``: it offers none)
    asked among the hinted devices when they are more than needed, else before the others.
    ``pick``: the devices the kubelet took, taken instead of the model's own when the
    choice allows them. Takes the devices out of ``free``/``reusable``; returns them and
    what the kubelet could have taken (:class:`Choice`). Raises
    :class:`DevicesUnavailable`."""
    required = needed
    walk = _Taking(needed)
    if not walk.take_from(sorted(reusable)):
        if len(free) < walk.needed:
            raise DevicesUnavailable(unavailable(resource, walk.needed, len(free)))
        _take_free(walk, devs, free, hint, preference, required)
    assert walk.choice is not None
    got = walk.got
    if pick is not None and walk.choice.allows(pick):
        got = sorted(pick)
    reusable.difference_update(got)
    free.difference_update(got)
    return tuple(got), walk.choice


def _take_free(walk: _Taking, devs: tuple[Device, ...], free: set[str],
               hint: frozenset[int] | None, preference: tuple[str, ...] | None,
               required: int) -> None:
    aligned, unaligned, no_topology = _affinity_tiers(devs, sorted(free), hint)

    def preferred(available: Iterable[str], within: list[str]) -> list[str]:
        if preference is None:
            return []
        chosen = set(_preferred(preference, available, list(walk.got), required))
        return [d for d in within if d in chosen]

    if walk.needed < len(aligned):
        if walk.take_from(preferred([*aligned, *walk.got], aligned)):
            return
        walk.take_from(aligned)
        return
    if walk.take_from(aligned):
        return
    everything = sorted(free)
    if walk.take_from(preferred([*everything, *walk.got], everything)):
        return
    if not walk.take_from(unaligned):
        walk.take_from(no_topology)


def take(devs: tuple[Device, ...], resource: str, needed: int, free: set[str],
         reusable: set[str], hint: frozenset[int] | None,
         preference: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """:func:`take_choice`'s devices alone."""
    return take_choice(devs, resource, needed, free, reusable, hint, preference)[0]


def report(devs_by_name: Mapping[str, tuple[Device, ...]], resource: str,
           ids: Iterable[str]) -> tuple[DeviceAlloc, ...]:
    """``containerDevicesFromResourceDeviceInstances``: one entry per device and NUMA node
    (one without topology for a device that has none)."""
    numa_of = {d.id: d.numa for d in devs_by_name[resource]}
    out: list[DeviceAlloc] = []
    for d in sorted(ids):
        nodes = numa_of.get(d, ())
        if not nodes:
            out.append(DeviceAlloc(resource, (d,), ()))
        out.extend(DeviceAlloc(resource, (d,), (n,)) for n in nodes)
    return tuple(out)


def allocatable(devices: NodeDevices) -> tuple[DeviceAlloc, ...]:
    """``GetAllocatableResources``' devices: every healthy device, one entry per NUMA
    node."""
    by_name = devices.by_name
    return tuple(e for name, devs in devices.resources
                 for e in report(by_name, name, (d.id for d in devs)))


class DeviceWork:
    """One pod's tentative device take, applied to the node only when the pod is admitted:
    the free devices left, the devices its ordinary init containers hand on to later
    containers (``devicesToReuse``), what each container took, and what the kubelet could
    have taken instead (:class:`Choice`, by container and resource). ``picks``: the devices
    the kubelet took (by container and resource), taken where the model's choice allows
    them; ``misses`` names those it does not."""

    def __init__(self, devices: NodeDevices, free: Mapping[str, set[str]],
                 numa_nodes: Iterable[int], kubelet_version: str = "1.37",
                 picks: Mapping[str, Mapping[str, frozenset[str]]] | None = None) -> None:
        self.devices = devices
        self._by_name = devices.by_name
        self._preference = dict(devices.preference)
        self._numa = tuple(numa_nodes)
        self._version = kubelet_version
        self.free = {name: set(ids) for name, ids in free.items()}
        self.reusable: dict[str, set[str]] = {}
        self.containers: dict[str, dict[str, frozenset[str]]] = {}
        self.choices: dict[tuple[str, str], Choice] = {}
        self._picks = picks or {}
        self.misses: list[str] = []
        # What the device manager's checkpoint holds of this pod, by resource: it writes
        # one after each container it gives devices to, so a refusal later in the
        # admission (the CPU or memory manager's) leaves them in the file
        # (docs/design.md#devices-in-the-model).
        self.checkpointed: dict[str, frozenset[str]] = {}
        # Whether a placement path has walked the pod's containers through ``take`` yet.
        self.walked = False

    @property
    def taken(self) -> dict[str, set[str]]:
        """Every device the pod holds, by resource."""
        out: dict[str, set[str]] = {}
        for held in self.containers.values():
            for name, ids in held.items():
                out.setdefault(name, set()).update(ids)
        return out

    def container_hints(self, c: ContainerSpec) -> dict[str, list[Hint] | None]:
        return provider_hints(self.devices, container_request(c, self.devices), self.free,
                              self.reusable, self._numa, self._version)

    def pod_hints(self, pod: PodSpec) -> dict[str, list[Hint] | None]:
        return provider_hints(self.devices, pod_request(pod, self.devices), self.free, {},
                              self._numa, self._version)

    def unstartable(self, pod_uid: str, c: ContainerSpec) -> str | None:
        """Why ``GetDeviceRunContainerOptions`` fails a container that holds no devices yet:
        it asks ``PreStartContainer`` of each plugin that wants it before it allocates, and
        with nothing allocated that fails (``callPreStartContainerIfNeeded``)."""
        for name in sorted(container_request(c, self.devices)):
            if name in self.devices.pre_start:
                return (f"no devices found allocated in local cache for pod {pod_uid}, "
                        f"container {c.name}, resource {name}")
        return None

    def take(self, c: ContainerSpec, hint: frozenset[int] | None, ordinary_init: bool
             ) -> tuple[DeviceAlloc, ...]:
        """``Allocate`` for one container; raises :class:`DevicesUnavailable`."""
        out: list[DeviceAlloc] = []
        for name, n in sorted(container_request(c, self.devices).items()):
            reusable = self.reusable.setdefault(name, set())
            pick = self._picks.get(c.name, {}).get(name)
            got, choice = take_choice(self._by_name[name], name, n,
                                      self.free.setdefault(name, set()), reusable, hint,
                                      self._preference.get(name), pick)
            if pick is not None and not choice.allows(pick):
                self.misses.append(f"{c.name}/{name}")
            self.containers.setdefault(c.name, {})[name] = frozenset(got)
            self.choices[(c.name, name)] = choice
            if ordinary_init:
                reusable.update(got)
            out.extend(report(self._by_name, name, got))
        if out:
            self.checkpointed = {name: frozenset(ids) for name, ids in self.taken.items()}
        return tuple(out)
