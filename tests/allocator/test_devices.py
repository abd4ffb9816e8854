"""The model's device manager (docs/design.md#devices-in-the-model): hints and takes ported
from the kubelet's own test tables, and the topology manager merging them with CPU and
memory hints."""

from __future__ import annotations

import pytest

from reconciler.allocator.devices import (
    Device,
    DeviceError,
    NodeDevices,
    provider_hints,
    take,
    take_choice,
)
from reconciler.allocator.hints import kubelet_merge
from reconciler.allocator.model import ModelConfig, NodeModel, PodPlacement, Rejection
from reconciler.allocator.topology import from_spec
from reconciler.kube import ContainerSpec, PodSpec, Resources, SpecError, pod_spec_from_json
from reconciler.snapshot import DeviceAlloc

GI = 2**30
GPU = "nvidia.com/gpu"


def numa(id_: str, node: int) -> Device:
    """``makeNUMADevice``."""
    return Device(id_, (node,))


# Source: k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/devicemanager/topology_hints_test.go,
# TestGetTopologyHints (getCommonTestCases), NUMA nodes [0, 1]. The cases whose devices are
# already allocated to the container itself (regenerated hints after a kubelet restart) are
# left out: the model admits a pod once.
HINT_CASES = [
    ("Single Request, no alignment",
     {"testdevice": [Device("Dev1"), Device("Dev2"), Device("Dev3"), Device("Dev4")]},
     {"testdevice": 1}, {}, [None]),
    ("Single Request, only one with alignment",
     {"testdevice": [Device("Dev1"), numa("Dev2", 1)]},
     {"testdevice": 1}, {}, [[({1}, True)]]),
    ("Single Request, one device per socket",
     {"testdevice": [numa("Dev1", 0), numa("Dev2", 1)]},
     {"testdevice": 1}, {}, [[({0}, True), ({1}, True), ({0, 1}, False)]]),
    ("Request for 2, one device per socket",
     {"testdevice": [numa("Dev1", 0), numa("Dev2", 1)]},
     {"testdevice": 2}, {}, [[({0, 1}, True)]]),
    ("Request for 2, 2 devices per socket",
     {"testdevice": [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)]},
     {"testdevice": 2}, {}, [[({0}, True), ({1}, True), ({0, 1}, False)]]),
    ("Request for 2, optimal on 1 NUMA node, forced cross-NUMA",
     {"testdevice": [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)]},
     {"testdevice": 2}, {"testdevice": {"Dev1", "Dev2"}}, [[({0, 1}, False)]]),
    ("2 device types, mixed configuration",
     {"testdevice1": [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)],
      "testdevice2": [numa("Dev1", 0)]},
     {"testdevice1": 2, "testdevice2": 1}, {},
     [[({0}, True), ({1}, True), ({0, 1}, False)], [({0}, True)]]),
    ("Single device type, more requested than available",
     {"testdevice": [numa("Dev1", 0), numa("Dev2", 0), numa("Dev3", 1), numa("Dev4", 1)]},
     {"testdevice": 6}, {}, [[]]),
]


@pytest.mark.parametrize(("devices", "request_", "allocated", "expected"),
                         [c[1:] for c in HINT_CASES], ids=[c[0] for c in HINT_CASES])
def test_get_topology_hints(devices, request_, allocated, expected):
    node = NodeDevices.of(devices)
    free = {name: ids - allocated.get(name, set()) for name, ids in node.free().items()}
    got = provider_hints(node, request_, free, {}, [0, 1])
    want = [None if e is None else [(frozenset(m), p) for m, p in e] for e in expected]
    assert list(got) == sorted(request_) and list(got.values()) == want


# Source: v1.37.2 topology_hints_test.go TestTopologyAlignedAllocation: how many devices
# land on each NUMA node for a hint (the cases without a plugin's preferred allocation).
ALIGN_CASES = [
    ("Single Request, no alignment", 1, [Device("Dev1"), Device("Dev2")], {0, 1}, {}),
    ("Request for 1, partial alignment", 1, [Device("Dev1"), numa("Dev2", 1)], {1}, {1: 1}),
    ("Single Request, socket 0", 1, [numa("Dev1", 0), numa("Dev2", 1)], {0}, {0: 1}),
    ("Single Request, socket 1", 1, [numa("Dev1", 0), numa("Dev2", 1)], {1}, {1: 1}),
    ("Request for 2, socket 0", 2,
     [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)], {0}, {0: 2}),
    ("Request for 2, socket 1", 2,
     [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)], {1}, {1: 2}),
    ("Request for 4, unsatisfiable, prefer socket 0", 4,
     [numa(f"Dev{i}", (i + 1) % 2) for i in range(1, 7)], {0}, {0: 3, 1: 1}),
    ("Request for 4, unsatisfiable, prefer socket 1", 4,
     [numa(f"Dev{i}", (i + 1) % 2) for i in range(1, 7)], {1}, {0: 1, 1: 3}),
    ("Request for 4, multisocket", 4,
     [numa(f"Dev{i}", (i - 1) % 4) for i in range(1, 9)], {1, 3}, {1: 2, 3: 2}),
]


@pytest.mark.parametrize(("request_", "devices", "hint", "expected"),
                         [c[1:] for c in ALIGN_CASES], ids=[c[0] for c in ALIGN_CASES])
def test_topology_aligned_allocation(request_, devices, hint, expected):
    devs = NodeDevices.of({"resource": devices}).by_name["resource"]
    free = {d.id for d in devs}
    got = take(devs, "resource", request_, free, set(), frozenset(hint))
    assert len(got) == request_ and not set(got) & free
    alignment: dict[int, int] = {}
    numa_of = {d.id: d.numa for d in devs}
    if any(d.numa for d in devs):
        for d in got:
            for n in numa_of[d][:1]:
                alignment[n] = alignment.get(n, 0) + 1
    assert alignment == expected


def test_take_refuses_with_the_kubelets_words():
    devs = NodeDevices.parse([f"{GPU}=0:1"]).by_name[GPU]
    with pytest.raises(Exception, match=r"^Allocate failed due to requested number of "
                       r"devices unavailable for nvidia.com/gpu. Requested: 2, "
                       r"Available: 1, which is unexpected$"):
        take(devs, GPU, 2, {"gpu-0"}, set(), None)


def test_merge_ands_masks_and_prefers_the_narrowest_non_preferred():
    # Device hints only on node 1, CPU hints only on node 0: the permutations give {1}
    # and {0} (both non-preferred, of the best non-preferred width 1): the lower wins.
    devices = [(frozenset({1}), True), (frozenset({0, 1}), False)]
    cpus = [(frozenset({0}), True), (frozenset({0, 1}), False)]
    assert kubelet_merge("best-effort", [devices, cpus], frozenset({0, 1})) == {0}
    with pytest.raises(Exception, match="Topology locality"):
        kubelet_merge("restricted", [devices, cpus], frozenset({0, 1}))
    # A provider with no possible affinity has a nil mask: the others' mask, never
    # preferred.
    assert kubelet_merge("best-effort", [[], cpus], frozenset({0, 1})) == {0}
    with pytest.raises(Exception, match="Topology locality"):
        kubelet_merge("restricted", [[], cpus], frozenset({0, 1}))
    # No preference (None) changes nothing.
    assert kubelet_merge("single-numa-node", [None, cpus], frozenset({0, 1})) == {0}


# ---- --devices and allocatable -----------------------------------------------------------

def test_parse_devices():
    node = NodeDevices.parse([f"{GPU}=0:2,1:1", "example.com/nic=-1:1"], [0, 1])
    assert node.by_name[GPU] == (Device("gpu-0", (0,)), Device("gpu-1", (0,)),
                                 Device("gpu-2", (1,)))
    assert node.by_name["example.com/nic"] == (Device("nic-0", ()),)


@pytest.mark.parametrize(("spec", "words"), [
    ("nvidia.com/gpu", "expected RESOURCE=NUMA:COUNT"),
    ("gpu=0:1", "not an extended resource"),
    ("nvidia.com/gpu=0:x", "not NUMA:COUNT"),
    ("nvidia.com/gpu=0", "not NUMA:COUNT"),
    ("nvidia.com/gpu=0:0", "the count at least 1"),
    ("nvidia.com/gpu=3:1", "no NUMA node 3"),
])
def test_parse_devices_rejects(spec, words):
    with pytest.raises(DeviceError, match=words):
        NodeDevices.parse([spec], [0, 1])


def test_from_allocatable_joins_a_device_on_two_nodes():
    node = NodeDevices.from_allocatable([DeviceAlloc(GPU, ("a",), (0,)),
                                         DeviceAlloc(GPU, ("a",), (1,)),
                                         DeviceAlloc(GPU, ("b",), (1,))])
    assert node.by_name[GPU] == (Device("a", (0, 1)), Device("b", (1,)))


# ---- pod specs ----------------------------------------------------------------------------

def test_pod_json_keeps_extended_resources():
    spec = pod_spec_from_json({
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {"containers": [{"name": "c", "resources": {
            "limits": {"cpu": "2", "memory": "1Gi", GPU: "1", "hugepages-2Mi": "2Mi"}}}]}})
    r = spec.containers[0].resources
    assert r.extended == ((GPU, 1),) and r.devices == {GPU: 1}
    assert spec.guaranteed


@pytest.mark.parametrize(("resources", "words"), [
    ({"requests": {GPU: "1"}, "limits": {GPU: "2"}}, "must equal the limit"),
    ({"limits": {GPU: "500m"}}, "whole count"),
])
def test_pod_json_rejects_bad_extended_resources(resources, words):
    with pytest.raises(SpecError, match=words):
        pod_spec_from_json({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "c", "resources": resources}]}})


# ---- the model ----------------------------------------------------------------------------

def gpu_pod(name: str, cpus: int | None = None, gpus: int = 1, *,
            init: tuple[ContainerSpec, ...] = ()) -> PodSpec:
    ext = ((GPU, gpus),) if gpus else ()
    r = Resources(cpus * 1000, cpus * 1000, GI, GI, ext) if cpus else \
        Resources(None, None, None, None, ext)
    return PodSpec("default", name, uid=f"uid-{name}",
                   containers=(ContainerSpec("main", r),), init_containers=init)


def key_node(policy: str, **kw: object) -> NodeModel:
    """The acceptance setup (docs/design.md#devices-in-the-model): 2 NUMA nodes of 4 CPUs,
    CPUs 4-6 of NUMA node 1 reserved, one GPU on each NUMA node."""
    cfg = ModelConfig(topology_policy=policy, reserved_cpus=frozenset({4, 5, 6}), **kw)
    return NodeModel(from_spec("2x4x1"), cfg, NodeDevices.parse([f"{GPU}=0:1,1:1"]))


def devices_of(p: PodPlacement | Rejection) -> tuple[DeviceAlloc, ...]:
    assert isinstance(p, PodPlacement), p
    return p.containers[0].devices


def test_best_effort_admits_cpus_on_node_0_and_the_gpu_on_node_1():
    m = key_node("best-effort")
    assert devices_of(m.admit(gpu_pod("gpu-shared"))) == (DeviceAlloc(GPU, ("gpu-0",), (0,)),)
    worker = m.admit(gpu_pod("gpu-worker", 2))
    assert devices_of(worker) == (DeviceAlloc(GPU, ("gpu-1",), (1,)),)
    assert isinstance(worker, PodPlacement)
    assert worker.containers[0].exclusive == {0, 1}
    assert worker.containers[0].memory[0].numa_nodes == (0,)
    assert worker.numa_hint == {0}


@pytest.mark.parametrize("policy", ["restricted", "single-numa-node"])
def test_aligning_policies_refuse_the_split(policy):
    m = key_node(policy)
    m.admit(gpu_pod("gpu-shared"))
    free = set(m.free)
    got = m.admit(gpu_pod("gpu-worker", 2))
    assert isinstance(got, Rejection)
    assert "Resources cannot be allocated with Topology locality" in got.reason
    assert m.free == free and m.dev_free == {GPU: {"gpu-1"}}


def test_free_gpus_on_both_nodes_align_with_the_cpus():
    m = key_node("single-numa-node")
    got = m.admit(gpu_pod("gpu-worker", 1))
    assert isinstance(got, PodPlacement)
    assert devices_of(got) == (DeviceAlloc(GPU, ("gpu-0",), (0,)),)
    assert got.containers[0].exclusive == {0}
    # Node 0 has 3 CPUs left, node 1 one (and its GPU): a 1-CPU GPU pod goes to node 1.
    got = m.admit(gpu_pod("second", 1))
    assert isinstance(got, PodPlacement)
    assert devices_of(got) == (DeviceAlloc(GPU, ("gpu-1",), (1,)),)
    assert got.containers[0].exclusive == {7}


def test_more_devices_than_free_is_refused_like_the_kubelet():
    m = key_node("best-effort")
    m.admit(gpu_pod("gpu-shared"))
    got = m.admit(gpu_pod("two", 1, gpus=2))
    assert isinstance(got, Rejection)
    assert got.reason.endswith("Allocate failed due to requested number of devices "
                               "unavailable for nvidia.com/gpu. Requested: 2, Available: 1, "
                               "which is unexpected")
    assert m.dev_free == {GPU: {"gpu-1"}}


def test_release_returns_the_devices():
    m = key_node("best-effort")
    m.admit(gpu_pod("a"))
    m.admit(gpu_pod("b"))
    assert m.dev_free == {GPU: set()}
    m.release("default", "a")
    assert m.dev_free == {GPU: {"gpu-0"}}
    assert devices_of(m.admit(gpu_pod("c"))) == (DeviceAlloc(GPU, ("gpu-0",), (0,)),)


def test_cpu_policy_none_still_hands_out_devices():
    m = key_node("none", cpu_policy="none")
    assert devices_of(m.admit(gpu_pod("a", 2))) == (DeviceAlloc(GPU, ("gpu-0",), (0,)),)


def test_pod_scope_aligns_the_pod():
    m = key_node("single-numa-node", scope="pod")
    m.admit(gpu_pod("gpu-shared"))
    got = m.admit(gpu_pod("one", 1))
    assert isinstance(got, PodPlacement)
    assert got.containers[0].exclusive == {7}
    assert devices_of(got) == (DeviceAlloc(GPU, ("gpu-1",), (1,)),)


def test_an_init_containers_devices_are_reused():
    init = ContainerSpec("setup", Resources(1000, 1000, GI, GI, ((GPU, 1),)), init=True)
    m = key_node("best-effort")
    got = m.admit(gpu_pod("p", 1, init=(init,)))
    assert devices_of(got) == (DeviceAlloc(GPU, ("gpu-0",), (0,)),)
    assert m.dev_free == {GPU: {"gpu-1"}}


def test_extended_resources_no_plugin_serves_are_not_devices():
    m = key_node("best-effort")
    pod = PodSpec("default", "x", containers=(ContainerSpec(
        "main", Resources(None, None, None, None, (("example.com/foo", 3),))),))
    assert devices_of(m.admit(pod)) == ()


def test_pod_scope_with_a_budget_takes_devices_on_the_block():
    m = key_node("single-numa-node", scope="pod")
    m.admit(gpu_pod("gpu-shared"))
    budget = Resources(1000, 1000, GI, GI)
    worker = PodSpec("default", "w", uid="uid-w", resources=budget, containers=(
        ContainerSpec("main", Resources(None, None, GI // 2, GI // 2, ((GPU, 1),))),))
    got = m.admit(worker)
    assert isinstance(got, PodPlacement) and got.path == "pod"
    assert got.block == {7}
    assert devices_of(got) == (DeviceAlloc(GPU, ("gpu-1",), (1,)),)


def test_live_node_reads_allocatable_devices_and_those_held():
    """plan --node: the node's devices from GetAllocatableResources, less those its
    containers are listed with."""
    from reconciler.allocator.live import live_node
    from reconciler.allocator.report import report_allocatable, report_pods
    from reconciler.reconcile import reconcile
    from reconciler.snapshot import NodeSnapshot

    m = key_node("best-effort")
    m.admit(gpu_pod("gpu-shared"))
    snapshot = NodeSnapshot(report_pods(m, "1.37"), "n", report_allocatable(m),
                            m.topo.to_snapshot())
    assert snapshot.allocatable is not None
    assert snapshot.allocatable.devices == (DeviceAlloc(GPU, ("gpu-0",), (0,)),
                                            DeviceAlloc(GPU, ("gpu-1",), (1,)))
    live = live_node(snapshot, reconcile(snapshot), m.config)
    assert live.model.dev_free == {GPU: {"gpu-1"}}
    assert live.free_devices == ((GPU, "gpu-1", (1,)),)
    worker = live.model.admit(gpu_pod("gpu-worker", 2))
    assert devices_of(worker) == (DeviceAlloc(GPU, ("gpu-1",), (1,)),)
    assert isinstance(worker, PodPlacement) and worker.containers[0].exclusive == {0, 1}


def test_pod_json_round_trips_extended_resources():
    from reconciler.allocator.report import pod_to_json

    spec = gpu_pod("w", 2, gpus=2)
    obj = pod_to_json(spec)
    limits = obj["spec"]["containers"][0]["resources"]["limits"]
    assert limits[GPU] == "2"
    assert pod_spec_from_json(obj).containers[0].resources.extended == ((GPU, 2),)


def _spec(inits: list[dict[str, int]], apps: list[dict[str, int]]) -> PodSpec:
    def c(name: str, ext: dict[str, int], init: bool) -> ContainerSpec:
        return ContainerSpec(name, Resources(2000, 2000, GI, GI, tuple(sorted(ext.items()))),
                             init=init)

    return PodSpec("d", "p", init_containers=tuple(c(f"i{i}", e, True)
                                                   for i, e in enumerate(inits)),
                   containers=tuple(c(f"a{i}", e, False) for i, e in enumerate(apps)))


# Source: v1.37.2 topology_hints_test.go TestGetPodDeviceRequest (ordinary init containers).
POD_REQUEST_CASES = [
    ("empty pod", [], [], {}),
    ("Init container requests device plugin resource", [{"gpu": 2}], [], {"gpu": 2}),
    ("Init containers request device plugin resource", [{"gpu": 2}, {"gpu": 4}], [],
     {"gpu": 4}),
    ("User container requests device plugin resource", [], [{"gpu": 2}], {"gpu": 2}),
    ("Init containers and user containers request the same amount of device plugin "
     "resources", [{"gpu": 2, "nic": 2}], [{"gpu": 1, "nic": 1}, {"gpu": 1, "nic": 1}],
     {"gpu": 2, "nic": 2}),
    ("Init containers request more device plugin resources than user containers",
     [{"gpu": 2, "nic": 1}, {"gpu": 3, "nic": 2}], [{"gpu": 1, "nic": 1}, {"gpu": 1}],
     {"gpu": 3, "nic": 2}),
    ("User containers request more device plugin resources than init containers",
     [{"gpu": 2, "nic": 1}, {"gpu": 2, "nic": 1}], [{"gpu": 3, "nic": 2}, {"gpu": 3, "nic": 2}],
     {"gpu": 6, "nic": 4}),
]


@pytest.mark.parametrize(("inits", "apps", "expected"), [c[1:] for c in POD_REQUEST_CASES],
                         ids=[c[0] for c in POD_REQUEST_CASES])
def test_get_pod_device_request(inits, apps, expected):
    from reconciler.allocator.devices import pod_request

    node = NodeDevices.of({"gpu": [numa("g", 0)], "nic": [numa("n", 0)]})
    assert pod_request(_spec(inits, apps), node) == expected


def test_merge_agrees_with_the_kubelets_own_merge():
    """600 random merges (1-4 NUMA nodes, 1-3 providers, with no-preference and
    no-possible-affinity providers) as the kubelet's ``Policy.Merge`` answered them
    (tests/allocator/merge_cases/record.py)."""
    import json
    from pathlib import Path

    from reconciler.allocator.hints import HintError

    doc = json.loads((Path(__file__).with_name("merge_cases") / "cases.json").read_text())
    assert len(doc["cases"]) == 600
    for case in doc["cases"]:
        providers = [None if p is None else [(frozenset(h["mask"]), h["preferred"]) for h in p]
                     for p in case["providers"]]
        want = case["kubelet"]
        try:
            got = kubelet_merge(case["policy"], providers, frozenset(case["nodes"]))
        except HintError:
            assert not want["admit"], case
            continue
        assert want["admit"], case
        assert got == (None if want["mask"] is None else frozenset(want["mask"])), case


def _many(*groups: tuple[range, int]) -> list[Device]:
    return [numa(f"Dev{i}", node) for ids, node in groups for i in ids]


# Source: v1.37.2 topology_hints_test.go TestTopologyAlignedAllocation, the cases with a
# plugin's preferred allocation. The kubelet's test plugin answers a fixed list; the model
# knows a plugin by its order of preference, so that list comes first in it, then the rest
# by ID.
PREFERRED_CASES = [
    ("Request for 5, socket 0, preferred aligned accepted", 5,
     _many((range(0, 100), 0), (range(100, 200), 1)), {0},
     ["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
     ["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"], {0: 5}),
    ("Request for 5, socket 0, preferred aligned accepted, unaligned ignored", 5,
     _many((range(0, 100), 0), (range(100, 200), 1)), {0},
     ["Dev0", "Dev19", "Dev83", "Dev150", "Dev186"], ["Dev0", "Dev19", "Dev83"], {0: 5}),
    ("Request for 5, multisocket, preferred accepted", 5,
     _many((range(0, 3), 0), (range(3, 100), 1)), {0},
     ["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
     ["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"], {0: 3, 1: 2}),
]


@pytest.mark.parametrize(("request_", "devices", "hint", "plugin", "expected", "alignment"),
                         [c[1:] for c in PREFERRED_CASES], ids=[c[0] for c in PREFERRED_CASES])
def test_preferred_allocation(request_, devices, hint, plugin, expected, alignment):
    node = NodeDevices.of({"resource": devices}, {
        "resource": plugin + sorted({d.id for d in devices} - set(plugin))})
    devs = node.by_name["resource"]
    got, choice = take_choice(devs, "resource", request_, {d.id for d in devs}, set(),
                              frozenset(hint), dict(node.preference)["resource"])
    assert set(expected) <= set(got) and len(got) == request_
    numa_of = {d.id: d.numa[0] for d in devs}
    counted: dict[int, int] = {}
    for d in got:
        counted[numa_of[d]] = counted.get(numa_of[d], 0) + 1
    assert counted == alignment
    # With a preference for every device the kubelet's pick is fixed.
    assert choice.allows(got) and len(choice.pool) == choice.count


def test_without_a_preference_any_aligned_pick_is_the_kubelets():
    # Four GPUs on NUMA node 0 and the hint {0}: the kubelet takes any two of them (Go set
    # order), never one of node 1.
    devs = NodeDevices.of({GPU: [numa(f"g{i}", 0) for i in range(4)] + [numa("g9", 1)]}
                          ).by_name[GPU]
    got, choice = take_choice(devs, GPU, 2, {d.id for d in devs}, set(), frozenset({0}))
    assert choice.allows(got) and choice.allows({"g2", "g3"}) and choice.allows({"g0", "g3"})
    assert not choice.allows({"g0", "g9"}) and not choice.allows({"g0"})


def test_hints_span_every_numa_node_on_1_35_only():
    # Two GPUs on NUMA node 0 of a three-node machine, one asked. 1.36 and 1.37 walk only
    # the nodes that hold the resource's devices (deviceNUMANodes); 1.35.4 walks every NUMA
    # node of the machine, so a merge can land on a mask holding nodes without a GPU.
    node = NodeDevices.of({GPU: [numa("g0", 0), numa("g1", 0)]})
    free = node.free()
    narrow = provider_hints(node, {GPU: 1}, free, {}, [0, 1, 2], "1.37")
    wide = provider_hints(node, {GPU: 1}, free, {}, [0, 1, 2], "1.35")
    assert narrow == {GPU: [(frozenset({0}), True)]}
    assert wide == {GPU: [(frozenset({0}), True), (frozenset({0, 1}), False),
                          (frozenset({0, 2}), False), (frozenset({0, 1, 2}), False)]}


def test_the_kubelets_pick_is_taken_where_the_choice_allows_it():
    topo = from_spec("2x2x1")
    node = NodeDevices.of({GPU: [numa(f"g{i}", 0) for i in range(3)]})
    m = NodeModel(topo, ModelConfig(topology_policy="best-effort"), node)

    def pod(name: str) -> PodSpec:
        return PodSpec("default", name, f"uid-{name}", (ContainerSpec(
            "app", Resources(1000, 1000, GI, GI, ((GPU, 1),))),))

    m.device_picks["uid-p"] = {"app": {GPU: frozenset({"g2"})}}
    placed = m.admit(pod("p"))
    assert isinstance(placed, PodPlacement)
    assert [d.device_ids for d in placed.containers[0].devices] == [("g2",)]
    assert m.dev_free == {GPU: {"g0", "g1"}} and not m.device_picks and not m.device_misses
    # A pick the kubelet could not have made (a taken device) is named, not taken.
    m.device_picks["uid-q"] = {"app": {GPU: frozenset({"g2"})}}
    assert isinstance(m.admit(pod("q")), PodPlacement)
    assert m.device_misses == {("default", "q"): ["app/" + GPU]}
    m.release("default", "q")
    m.release("default", "p")
    assert m.dev_free == {GPU: {"g0", "g1", "g2"}} and not m.device_misses
