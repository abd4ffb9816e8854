"""Pods that report nothing take the reconciler's short path and get the very entries the
full path would give them."""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import replace

from hypothesis import given

from exporter.pb import api_pb2
from exporter.sources.convert import pods_from_proto, pods_to_proto
from foundation.helpers import cspec, ctr, mem, pod, pspec, snapshot, topology
from foundation.test_reconcile_properties import SETTINGS, snapshots
from reconciler import reconcile as R
from reconciler.anomalies import Anomaly, AnomalyLog
from reconciler.checks import pod_checks
from reconciler.classify import cpu_less_view, node_unknown_cpus
from reconciler.devices import DeviceChecks
from reconciler.entries import pod_entries
from reconciler.ledger import (
    ASSIGNMENTS,
    ContainerEntry,
    ContainerRun,
    DistinctContainers,
    NodeSharedPod,
    PodEntries,
    PodEntry,
    each_entry,
)
from reconciler.memory import no_memory
from reconciler.node_facts import node_facts
from reconciler.ownership import Ownership
from reconciler.placement_checks import PlacementChecks
from reconciler.snapshot import NodeSnapshot, Topology


def test_plain_pods_get_the_full_path_entries() -> None:
    """A pod that reports nothing: every field as the full path gives it (the fast path was
    checked against the previous implementation on 600 hostile snapshots when written)."""
    topo = topology(8)
    spec = pspec("p", cspec("app", "2"), sidecars=[cspec("proxy", sidecar=True)])
    ledger = R.reconcile(snapshot(pod("p", ctr("proxy"), ctr("app")), pod("q", ctr("x")),
                                  topo=topo, specs=[spec]))
    assert [c.to_json() for c in ledger.containers] == [
        {"namespace": "default", "pod": "p", "name": "proxy", "sidecar": True,
         "assignment": "node_shared", "memory_assignment": "node_shared", "cpus": "",
         "cpu_count": 0},
        {"namespace": "default", "pod": "p", "name": "app", "sidecar": False,
         "assignment": "node_shared", "memory_assignment": "node_shared", "cpus": "",
         "cpu_count": 0},
        {"namespace": "default", "pod": "q", "name": "x", "sidecar": False,
         "assignment": "node_shared", "memory_assignment": "node_shared", "cpus": "",
         "cpu_count": 0}]
    assert [p.to_json() for p in ledger.pods] == [
        {"namespace": "default", "name": "p", "cpus": "", "budget_cpus": None,
         "pod_exclusive_cpus": 0, "pod_shared_cpus": 0, "pod_idle_cpus": 0,
         "node_exclusive_cpus": 0, "reclaimed_cpus": None, "reclaimable_cpus": 0,
         "estimate_basis": "spec"},
        {"namespace": "default", "name": "q", "cpus": "", "budget_cpus": None,
         "pod_exclusive_cpus": 0, "pod_shared_cpus": 0, "pod_idle_cpus": 0,
         "node_exclusive_cpus": 0, "reclaimed_cpus": None, "reclaimable_cpus": 0,
         "estimate_basis": "podresources"}]
    assert ledger.pods[0].uid == "uid-p" and ledger.pods[1].uid == ""
    assert all(c.memory_bytes == 0 for c in ledger.containers)
    # Spec anomalies are still checked for pods that report nothing.
    from foundation.helpers import STATIC
    guaranteed = pspec("p", cspec("app", "2"))
    ledger = R.reconcile(snapshot(pod("p", ctr("app")), topo=topo, specs=[guaranteed],
                                  config=STATIC))
    assert [(a.kind, a.container) for a in ledger.anomalies] == [("missing_exclusive", "app")]


def test_convert_shares_plain_containers_safely() -> None:
    listing = pods_to_proto([pod("a", ctr("app"), ctr("proxy")),
                             pod("b", ctr("app", [1])), pod("c", ctr("app"))])
    pods = pods_from_proto(api_pb2.ListPodResourcesResponse.FromString(
        listing.SerializeToString()))
    assert pods[0].containers[0] is pods[2].containers[0]  # one object for a plain "app"
    assert pods[1].containers[0].cpu_ids == (1,)
    assert [c.name for p in pods for c in p.containers] == ["app", "proxy", "app", "app"]


def test_containers_are_marked_distinct_only_when_named_once() -> None:
    """The marker that spares the exposition its search for repeated series: pods listed
    once, each naming its containers once; not a pod listed twice (plain or reporting
    CPUs), nor a name used twice in a pod, wherever it comes in List."""
    topo = topology(8)
    web = [pod(f"web-{i}", ctr("app"), ctr("proxy")) for i in range(3)]
    db = pod("db", ctr("pg", [1]), ctr("proxy"))
    ledger = R.reconcile(snapshot(*web, db, topo=topo))
    assert isinstance(ledger.containers, DistinctContainers)
    assert ledger.containers == tuple(ledger.containers)
    for pods in ([*web, web[0]], [db, *web, db],
                 [*web, pod("twins", ctr("c", [1]), ctr("c", [2]))],
                 [pod("twins", ctr("c"), ctr("c")), *web]):
        containers = R.reconcile(snapshot(*pods, topo=topo)).containers
        assert type(containers) is tuple, pods


def _named_once(snap: NodeSnapshot) -> NodeSnapshot:
    """``snap`` with every pod and each pod's containers named apart (a suffix on each
    name, whatever characters it holds): its ledger gets DistinctContainers."""
    return replace(snap, pods=tuple(
        p._replace(name=f"{p.name}{i}", containers=tuple(
            c._replace(name=f"{c.name}{j}") for j, c in enumerate(p.containers)))
        for i, p in enumerate(snap.pods)))


@SETTINGS
@given(snapshots())
def test_distinct_containers_carry_what_their_entries_show(
        case: tuple[NodeSnapshot, Topology | None]) -> None:
    """The counts and the plain-names fact the reconciler hands the exposition are what a
    pass over the entries (and the names listed) finds, whatever the pods report and
    their names hold."""
    snap = _named_once(case[0])
    containers = R.reconcile(snap).containers
    assert isinstance(containers, DistinctContainers)
    cpu = Counter(c.assignment for c in containers)
    memory = Counter(c.memory_assignment for c in containers)
    assert containers.cpu_counts == tuple(cpu[a] for a in ASSIGNMENTS)
    assert containers.memory_counts == tuple(memory[a] for a in ASSIGNMENTS)
    assert sum(containers.cpu_counts) == sum(containers.memory_counts) == len(containers)
    listed = "".join(f"{p.namespace}{p.name}" + "".join(c.name for c in p.containers)
                     for p in snap.pods)
    assert containers.plain_names == (not any(ch in listed for ch in '\\"\n'))
    # The facts survive a copy (pickle, as multiprocessing would do).
    copy = pickle.loads(pickle.dumps(containers))
    assert copy == containers and type(copy) is DistinctContainers
    assert (copy.cpu_counts, copy.memory_counts, copy.plain_names) == \
        (containers.cpu_counts, containers.memory_counts, containers.plain_names)


def test_pods_that_report_nothing_are_kept_unbuilt_until_read() -> None:
    """Each pod that reports nothing is one NodeSharedPod among the built entries of the
    others, in List order; read (iterated or indexed), the sequence is the entries the
    full path builds, equal to and hashed as their plain tuple."""
    topo = topology(8)
    spec = pspec("w-1", cspec("app", "1"), sidecars=[cspec("proxy", sidecar=True)])
    web = [pod(f"w-{i}", ctr("proxy"), ctr("app")) for i in range(3)]
    db = pod("db", ctr("pg", [1]), ctr("proxy"))
    ledger = R.reconcile(snapshot(web[0], db, *web[1:], pod("empty"), topo=topo,
                                  specs=[spec]))
    containers = ledger.containers
    assert isinstance(containers, DistinctContainers)
    kinds = [(type(r).__name__, r.pod) for r in containers.runs]
    assert kinds == [("NodeSharedPod", "w-0"), ("ContainerEntry", "db"),
                     ("ContainerEntry", "db"), ("NodeSharedPod", "w-1"),
                     ("NodeSharedPod", "w-2"), ("NodeSharedPod", "empty")]
    assert containers.runs[3] == NodeSharedPod("default", "w-1", web[1].containers,
                                               frozenset({"proxy"}))
    entries = tuple(containers)
    assert len(containers) == len(entries) == 8
    assert [(c.pod, c.name, c.sidecar, c.assignment) for c in entries] == [
        ("w-0", "proxy", False, "node_shared"), ("w-0", "app", False, "node_shared"),
        ("db", "pg", False, "node_exclusive"), ("db", "proxy", False, "node_shared"),
        ("w-1", "proxy", True, "node_shared"), ("w-1", "app", False, "node_shared"),
        ("w-2", "proxy", False, "node_shared"), ("w-2", "app", False, "node_shared")]
    assert [containers[i] for i in range(len(containers))] == list(entries)
    assert containers[2:4] == entries[2:4] and containers[-1] == entries[-1]
    assert containers == entries and entries == containers and containers != entries[1:]
    assert hash(containers) == hash(entries) and repr(containers) == repr(entries)
    assert tuple(containers) == entries  # iterated again after indexing kept them


@SETTINGS
@given(snapshots())
def test_unbuilt_entries_read_as_the_built_ones(
        case: tuple[NodeSnapshot, Topology | None]) -> None:
    """Whatever the pods report: iterating, indexing and the length agree, there is an
    entry for every listed container in List order, and only pods that report nothing
    are kept unbuilt."""
    snap = _named_once(case[0])
    containers = R.reconcile(snap).containers
    assert isinstance(containers, DistinctContainers)
    built = tuple(each_entry(containers.runs))
    assert tuple(containers) == built == tuple(containers[i] for i in range(len(built)))
    assert len(containers) == len(built) == sum(len(p.containers) for p in snap.pods)
    assert [(c.namespace, c.pod, c.name) for c in built] == [
        (p.namespace, p.name, c.name) for p in snap.pods for c in p.containers]
    for run in containers.runs:
        if isinstance(run, NodeSharedPod):
            assert all(not c.cpu_ids and not c.memory for c in run.containers)


def test_a_name_that_needs_escaping_anywhere_makes_the_names_not_plain() -> None:
    topo = topology(8)
    plain = R.reconcile(snapshot(pod("p", ctr("app", [1])), pod("q", ctr("app")),
                                 topo=topo)).containers
    assert isinstance(plain, DistinctContainers) and plain.plain_names
    for hostile in ('a"b', "a\\b", "a\nb"):
        for pods in ([pod(hostile, ctr("app")), pod("q", ctr("app"))],
                     [pod("p", ctr("app")), pod("q", ctr(hostile, [2]))],
                     [pod("p", ctr("app")), pod("q", ctr("app"), namespace=hostile)]):
            containers = R.reconcile(snapshot(*pods, topo=topo)).containers
            assert isinstance(containers, DistinctContainers), pods
            assert not containers.plain_names, pods


@given(snapshots())
@SETTINGS
def test_pod_entries_say_which_pods_hold_anything(
        case: tuple[NodeSnapshot, Topology | None]) -> None:
    """PodEntries.holding: every entry left out holds no CPU, no memory and no estimate (it
    gives no per-pod series and adds nothing to a total); the ledger's totals are those of
    all its entries; and the marker survives a copy."""
    ledger = R.reconcile(case[0])
    pods = ledger.pods
    assert isinstance(pods, PodEntries) and pods == tuple(pods)
    assert list(pods.holding) == sorted(set(pods.holding))
    for index, entry in enumerate(pods):
        if index not in pods.holding:
            assert not (entry.cpus or entry.pod_exclusive_cpus or entry.pod_shared_cpus
                        or entry.pod_idle_cpus or entry.node_exclusive_cpus
                        or entry.reclaimed_cpus or entry.reclaimable_cpus or entry.memory)
    assert ledger.reclaimed_cpus == sum(p.reclaimed_cpus or 0 for p in pods)
    assert ledger.reclaimable_cpus == sum(p.reclaimable_cpus or 0 for p in pods)
    copy = pickle.loads(pickle.dumps(pods))
    assert copy == pods and type(copy) is PodEntries and copy.holding == pods.holding


def _pod_by_pod(snap: NodeSnapshot) -> tuple[list[PodEntry], list[ContainerEntry],
                                              tuple[Anomaly, ...]]:
    """The ledger's pods, containers and anomalies with every pod taken through the full
    path one by one, as reconcile did before it told the pods that report nothing apart in
    bulk (``_as_plain``)."""
    facts = node_facts(snap)
    ownership = Ownership(snap.pods)
    log = AnomalyLog()
    log.extend(-1, node_unknown_cpus(snap, facts.online))
    placement = PlacementChecks.for_node(facts)
    devices = DeviceChecks.for_node(facts)
    runs: list[ContainerRun] = []
    pods: list[PodEntry] = []
    for index, p in enumerate(snap.pods):
        cpus = bool(p.cpu_ids) or any(c.cpu_ids for c in p.containers)
        memory = bool(p.memory) or any(c.memory for c in p.containers)
        spec = facts.specs.get((p.namespace, p.name))
        if cpus or memory:
            pods.append(R._reconcile_pod(index, p, spec, cpus, memory, facts, ownership, log,
                                         runs, placement, devices)[2])
            continue
        # What the full path finds for a pod that reports nothing: its spec's anomalies
        # only (placement and devices have nothing of it to check).
        view = cpu_less_view(p, spec)
        claim, claimed = ownership.claim(index, view)
        log.extend(index, [*claimed, *pod_checks(view, claim, facts)])
        pods.append(pod_entries(view, claim, no_memory(len(p.containers)), runs))
    if placement is not None:
        for index, found in placement.finish(ownership.owner):
            log.extend(index, found)
    return pods, list(each_entry(runs)), log.ordered()


@given(snapshots())
@SETTINGS
def test_pods_told_apart_in_bulk_get_the_pod_by_pod_ledger(
        case: tuple[NodeSnapshot, Topology | None]) -> None:
    """The bulk pass over the pods that report nothing gives the very entries, containers
    and anomalies of every pod taken one by one through the full path, with and without
    pod specs."""
    snap = case[0]
    for variant in (snap, replace(snap, pod_specs=None)):
        ledger = R.reconcile(variant)
        pods, containers, anomalies = _pod_by_pod(variant)
        assert list(ledger.pods) == pods
        assert list(ledger.containers) == containers
        assert ledger.anomalies == anomalies
        assert list(ledger.pods.holding) == [  # type: ignore[attr-defined]
            i for i, p in enumerate(variant.pods)
            if p.cpu_ids or p.memory or any(c.cpu_ids or c.memory for c in p.containers)]


def test_pods_told_apart_in_bulk_on_a_node_with_specs() -> None:
    """Pods that report nothing among pods that do, each with a spec or not, a name listed
    twice, under the static policy: the pod-by-pod ledger."""
    from foundation.helpers import STATIC
    topo = topology(8)
    pods = [pod("web-0", ctr("app"), ctr("proxy")), pod("db", ctr("pg", [1, 2]), ctr("proxy")),
            pod("web-1", ctr("app"), ctr("proxy")), pod("web-0", ctr("app")),
            pod("g", ctr("app", [3])), pod("h", ctr("app"))]
    specs = [pspec("web-0", cspec("app", "2"), sidecars=[cspec("proxy", sidecar=True)]),
             pspec("db", cspec("pg", "2")), pspec("h", cspec("app", "1"))]
    snap = snapshot(*pods, topo=topo, specs=specs, config=STATIC)
    ledger = R.reconcile(snap)
    assert (list(ledger.pods), list(ledger.containers), ledger.anomalies) == _pod_by_pod(snap)
    # web-0's sidecar has no resources: not a Guaranteed pod, nothing is missing.
    assert [(a.kind, a.pod) for a in ledger.anomalies] == [("missing_exclusive", "h")]
    assert ledger.pods.holding == (1, 4)  # type: ignore[attr-defined]


def test_memory_shapes_are_shared_only_where_nothing_differs() -> None:
    """Pods of one memory shape share one PodMemory; another spec limit, another block, or
    a result with anomalies (they name their pod) is worked out for its own pod."""
    from reconciler.memory import MemoryShapes, pod_memory
    gi = 2**30
    same = [pod(f"web-{i}", ctr("app", memory=[mem(2 * gi)]), ctr("proxy"),
                memory=[mem(3 * gi)]) for i in range(3)]
    other = pod("web-9", ctr("app", memory=[mem(2 * gi, "memory", 1)]), ctr("proxy"),
                memory=[mem(3 * gi)])
    over = [pod(f"big-{i}", ctr("app", memory=[mem(4 * gi)]), memory=[mem(3 * gi)])
            for i in range(2)]
    small = pspec("web-2", cspec("app", "2"), budget="2", budget_memory="2Gi")
    specs = {"web-2": small}
    shapes = MemoryShapes()
    results = [shapes.of(p, specs.get(p.name), False) for p in [*same, other, *over]]
    assert results == [pod_memory(p, specs.get(p.name), False) for p in [*same, other, *over]]
    assert results[0][0] is results[1][0]  # one shape, one object
    assert results[2][1] and results[2][0] is not results[0][0]  # over its own limit
    assert results[3][0] is not results[0][0]  # another NUMA node
    assert [a.pod for _, found in results[4:] for a in found] == ["big-0", "big-1"]
