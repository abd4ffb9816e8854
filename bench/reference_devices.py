"""Device-plugin devices in the random differential (docs/design.md#reference): fake GPUs,
NICs and FPGAs with NUMA affinity (one node, two, or none), served to the kubelet's device
manager by in-process plugins that offer a preferred allocation or not
(reference/kubelet/devices.go), and containers asking for some of them.

The cases of a seed get devices from a random stream of their own, so a seed's machine and
pods are what they were without them. After each step the devices every container holds
are compared. Where ``devicesToAllocate`` walks a Go set the kubelet's pick is one of
several: the kubelet admits first, and the devices it took are handed to the model's
admission (``NodeModel.device_picks``), which takes them container by container where its
:class:`~reconciler.allocator.devices.Choice` allows them and names those it does not.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from reconciler.allocator.devices import Device, NodeDevices
from reconciler.allocator.model import NodeModel, PodPlacement
from reconciler.kube import ContainerSpec, PodSpec

if TYPE_CHECKING:
    from bench.reference import Case

# The share of the default mix's cases that get devices.
SHARE = 0.3
# The share of the cases with devices whose plugins also list devices as Unhealthy: none
# by default (``--unhealthy`` of bench.reference_coverage sets 0.3). The device manager
# counts every device, healthy or not, in its topology hints (deviceHasTopologyAlignment,
# deviceNUMANodes, the narrowest mask holding enough devices), which the model, told of
# the healthy devices alone (what GetAllocatableResources lists), cannot follow: open,
# docs/performance.md#coverage-of-the-kubelets-own-code.
UNHEALTHY_SHARE = 0.0
_KINDS = ("gpu", "nic", "fpga")


def random_devices(rng: random.Random, numa_nodes: tuple[int, ...]) -> NodeDevices:
    """One to three resources of one to eight devices. Each resource's devices sit on one
    NUMA node each, now and then on two, or (one resource in six) have no topology; a few
    devices of a resource with topology may have none. Half the plugins offer a preferred
    allocation, in an order of their own; the others ask for PreStartContainer."""
    devices: dict[str, list[Device]] = {}
    preference: dict[str, list[str]] = {}
    for kind in rng.sample(_KINDS, rng.randint(1, 3)):
        name = f"example.com/{kind}"
        topology = rng.random() >= 1 / 6
        devs = []
        for i in range(rng.randint(1, 8)):
            numa: tuple[int, ...] = ()
            if topology and rng.random() >= 0.1:
                numa = (rng.choice(numa_nodes),)
                if len(numa_nodes) > 1 and rng.random() < 0.1:
                    numa = tuple(sorted(rng.sample(numa_nodes, 2)))
            devs.append(Device(f"{kind}-{i}", numa))
        devices[name] = devs
        if rng.random() < 0.5:
            order = [d.id for d in devs]
            rng.shuffle(order)
            preference[name] = order
    # A plugin without a preferred allocation asks for PreStartContainer instead.
    return NodeDevices.of(devices, preference, set(devices) - set(preference))


def _ask(rng: random.Random, c: ContainerSpec, devices: NodeDevices, most: int
         ) -> ContainerSpec:
    if rng.random() >= 0.4:
        return c
    by_name = devices.by_name
    names = rng.sample(sorted(by_name), rng.randint(1, min(most, len(by_name))))
    extended = tuple(sorted((n, rng.randint(1, min(3, len(by_name[n])))) for n in names))
    return replace(c, resources=replace(c.resources, extended=extended))


def with_devices(case: Case, version: str, seed: int, *, always: bool = False) -> Case:
    """The case with devices on :data:`SHARE` of the seeds (``always``: every seed), and
    containers asking for them."""
    rng = random.Random(f"{version}:{seed}:devices")
    if not always and rng.random() >= SHARE:
        return case
    devices = random_devices(rng, case.topo.numa_nodes)
    done: dict[str, PodSpec] = {}

    def pod(p: PodSpec) -> PodSpec:
        # A container of a pod with pod-level resources asks one resource at most: when
        # such a container's start finds too few devices of one of two, the kubelet's Go map
        # order decides whether the other one was allocated first.
        most = 1 if p.resources is not None and p.resources.is_set else 2
        return replace(p, containers=tuple(_ask(rng, c, devices, most) for c in p.containers),
                       init_containers=tuple(_ask(rng, c, devices, most)
                                             for c in p.init_containers))

    ops: list[tuple[str, PodSpec | None]] = []
    for op, p in case.ops:
        if p is not None:
            p = done.setdefault(p.uid, pod(p))
        ops.append((op, p))
    return replace(case, ops=ops, devices=devices,
                   unhealthy=unhealthy_devices(version, seed, devices, case.topo.numa_nodes))


def unhealthy_devices(version: str, seed: int, devices: NodeDevices,
                      numa_nodes: tuple[int, ...]) -> tuple[tuple[str, tuple[Device, ...]], ...]:
    """On :data:`UNHEALTHY_SHARE` of the cases, one or two more devices of one resource that
    its plugin lists as Unhealthy (from a stream of their own: the healthy devices and the
    pods of a seed stay as they were). The model is told of the healthy devices alone."""
    rng = random.Random(f"{version}:{seed}:unhealthy")
    if not devices or rng.random() >= UNHEALTHY_SHARE:
        return ()
    name = rng.choice(sorted(devices.by_name))
    kind = name.rsplit("/", 1)[-1]
    bad = tuple(Device(f"{kind}-bad{i}", (rng.choice(numa_nodes),) if rng.random() < 0.8
                       else ()) for i in range(rng.randint(1, 2)))
    return ((name, bad),)


def setup_devices(devices: NodeDevices,
                  unhealthy: tuple[tuple[str, tuple[Device, ...]], ...] = ()
                  ) -> list[dict[str, Any]]:
    """The reference's ``devices`` setup: each resource's devices in its plugin's order of
    preference (by ID when it offers none), then those it lists as Unhealthy, and whether
    it asks for PreStartContainer."""
    preference = dict(devices.preference)
    bad = dict(unhealthy)
    out = []
    for name, devs in devices.resources:
        by_id = {d.id: d for d in devs}
        order = preference.get(name, tuple(by_id))
        out.append({"name": name, "preferred": name in preference,
                    "pre_start": name in devices.pre_start,
                    "devices": [{"id": i, "numa": list(by_id[i].numa)} for i in order]
                    + [{"id": d.id, "numa": list(d.numa), "unhealthy": True}
                       for d in bad.get(name, ())]})
    return out


def describe(devices: NodeDevices) -> str:
    if not devices:
        return ""
    preference = dict(devices.preference)
    parts = []
    for name, devs in devices.resources:
        where = ",".join("+".join(map(str, d.numa)) or "-" for d in devs)
        parts.append(f"{name.rsplit('/', 1)[-1]}[{where}]{'p' if name in preference else ''}")
    return "; devices " + " ".join(parts)


Held = dict[str, dict[str, frozenset[str]]]


def _kubelet_held(state: Mapping[str, Any], uid: str) -> Held:
    raw = (state.get("devices") or {}).get(uid) or {}
    return {c: {r: frozenset(ids) for r, ids in by_r.items()} for c, by_r in raw.items()}


def _show(held: Held) -> str:
    return "; ".join(f"{c} {r.rsplit('/', 1)[-1]} {','.join(sorted(ids))}"
                     for c, by_r in sorted(held.items()) for r, ids in sorted(by_r.items())
                     if ids) or "-"


def _model_held(model: NodeModel, key: tuple[str, str]) -> Held:
    out: Held = {}
    for c, by_r in model._dev_held.get(key, {}).items():
        kept = {r: ids for r, ids in by_r.items() if ids}
        if kept:
            out[c] = kept
    return out


def _checkpoint_held(state: Mapping[str, Any], uid: str) -> Held:
    """What the device manager's checkpoint gives ``uid``'s containers: for a refused pod,
    the devices its containers were given before the refusal (each container's allocation
    writes the file; the sweep after the refusal drops them from the state only)."""
    text = (state.get("checkpoints") or {}).get("kubelet_internal_checkpoint")
    if not text:
        return {}
    out: Held = {}
    for entry in json.loads(text).get("Data", {}).get("PodDeviceEntries") or ():
        if entry.get("PodUID") == uid:
            ids = {i for group in (entry.get("DeviceIDs") or {}).values() for i in group}
            out.setdefault(entry["ContainerName"], {})[entry["ResourceName"]] = frozenset(ids)
    return out


def tell_picks(model: NodeModel, state: Mapping[str, Any], pod: PodSpec) -> None:
    """Hand the devices the kubelet gave ``pod``'s containers to the model's admission
    (a refused pod's from the device checkpoint: where its picks decide the refusal, a
    later container's hints being those of what an earlier one left)."""
    held = _kubelet_held(state, pod.uid) or _checkpoint_held(state, pod.uid)
    if held and model.devices:
        model.device_picks[pod.uid] = held


def _held_differs(model: NodeModel, pod: PodSpec, kubelet: Held) -> str | None:
    key = (pod.namespace, pod.name)
    mine = _model_held(model, key)
    misses = model.device_misses.pop(key, [])
    if not misses and kubelet == mine:
        return None
    why = f" (not a choice the model allows: {', '.join(misses)})" if misses else ""
    return f"{pod.name} devices: kubelet {_show(kubelet)}, model {_show(mine)}{why}"


def _start_errors(placed: PodPlacement | None, pod: PodSpec, errors: Mapping[str, str]
                  ) -> str | None:
    kubelet = sorted(errors)
    mine = sorted(c for c, _ in placed.device_errors) if placed else []
    if kubelet == mine:
        return None
    return (f"{pod.name}: containers failing to start for want of devices: kubelet "
            f"{', '.join(kubelet) or '-'} ({'; '.join(errors.values())}), model "
            f"{', '.join(mine) or '-'}")


def compare_devices(model: NodeModel, state: Mapping[str, Any], live: Mapping[str, PodSpec]
                    ) -> list[str]:
    """Differences in the devices each live pod's containers hold, and in the containers
    whose start fails for want of them."""
    out: list[str] = []
    placed = {p.uid: p for p in model.pods.values()}
    errors = state.get("device_start_errors") or {}
    listed = {name: len(devs) for name, devs in model.devices.resources}
    if state.get("device_allocatable", listed) != listed:
        out.append(f"device allocatable: kubelet {state.get('device_allocatable')}, model "
                   f"{listed}")
    # What the predicate admit handler checked the last admission against, after the device
    # manager's UpdatePluginResources: never less than what is allocated, which the healthy
    # devices always cover here.
    if state.get("device_admit_allocatable", listed) != listed:
        out.append(f"device allocatable at admission: kubelet "
                   f"{state.get('device_admit_allocatable')}, model {listed}")
    for uid, pod in live.items():
        p = placed.get(uid)
        kubelet = _kubelet_held(state, uid)
        if p is None:
            if kubelet:
                out.append(f"{pod.name} devices: kubelet {_show(kubelet)}, model no pod")
        elif (why := _held_differs(model, pod, kubelet)) is not None:
            out.append(why)
        if (why := _start_errors(p, pod, errors.get(uid, {}))) is not None:
            out.append(why)
        if (why := _health_differs(model, pod, state)) is not None:
            out.append(why)
    return out


def _health_differs(model: NodeModel, pod: PodSpec, state: Mapping[str, Any]) -> str | None:
    """The pod status' allocated resources (UpdateAllocatedResourcesStatus): each app
    container's devices, every one Healthy, as the model holds them."""
    said = (state.get("device_health") or {}).get(pod.uid)
    if said is None and "device_health" not in state:
        return None  # a reference from before the field
    kubelet = {c: {r: frozenset(ids) for r, ids in by_r.items()}
               for c, by_r in (said or {}).items()}
    held = _model_held(model, (pod.namespace, pod.name))
    mine = {c: {r: frozenset(f"{i}=Healthy" for i in ids) for r, ids in by_r.items()}
            for c, by_r in held.items() if c in {a.name for a in pod.containers}}
    if kubelet == mine:
        return None
    return (f"{pod.name} allocated resources status: kubelet {_show(kubelet)}, model "
            f"{_show(mine)}")
