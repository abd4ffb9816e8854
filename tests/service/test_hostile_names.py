"""Pod and container names no API server would accept, as a lying or buggy kubelet could
report them: the exposition stays valid and every label value round-trips exactly through
an independent parser (prometheus_client) and promtool."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.metrics import exposition
from exporter.metrics.catalogue import BY_NAME, NodeFacts
from exporter.metrics.exposition import escape_label, render_family
from exporter.sources.convert import pods_to_proto
from exporter.sources.fixture import KubeletState, load_fixture_dir
from reconciler.ledger import PodEntries
from reconciler.reconcile import reconcile
from reconciler.snapshot import ContainerAlloc, MemoryBlock, NodeSnapshot, PodAlloc
from tests.conftest import StartSim
from tests.service.conftest import (
    PROMTOOL,
    RunServe,
    needs_promtool,
    parse_exposition,
    promtool_check,
    scenario_root,
    series,
    value,
)

HOSTILE = (
    'q"uo"te', "back\\slash\\", "new\nline\n", "ünïcødé-名前-🙂", "tab\tand\rreturn",
    '}{,= "', "\\n-literal", "\\\\\"", "", " ", "zero\u200bwidth", "a" * 300,
)


def hostile_state() -> KubeletState:
    """Pods named by HOSTILE: one pod-level pod (2 exclusive CPUs, sidecars in a 1-CPU pod
    shared pool), one legacy pod with an exclusive container, one shared pod."""
    base = load_fixture_dir(scenario_root() / "sidecar-hybrid").kubelet
    h = HOSTILE
    pods = [
        PodAlloc(h[0], h[1], (ContainerAlloc(h[2]), ContainerAlloc(h[3]),
                              ContainerAlloc(h[4], (2, 3))), (2, 3, 4)),
        PodAlloc(h[5], h[6], (ContainerAlloc(h[7], (5,)), ContainerAlloc(h[8]))),
        PodAlloc(h[9], h[10], (ContainerAlloc(h[11]),)),
    ]
    return KubeletState(pods_to_proto(pods), base.allocatable)


async def test_hostile_names_end_to_end(start_sim: StartSim, run_serve: RunServe) -> None:
    sim = await start_sim(hostile_state())
    topology = scenario_root() / "sidecar-hybrid" / "topology.json"
    served = await run_serve(sim, "--topology", str(topology), "--poll.interval", "1m")
    samples = await served.wait_for(lambda s: value(s, "podres_up") == 1.0,
                                    what="first poll")
    text = await served.metrics_text()
    h = HOSTILE
    containers = {(dict(k)["namespace"], dict(k)["pod"], dict(k)["container"]): v
                  for k, v in series(samples, "podres_container_cpus").items()}
    assert containers == {(h[0], h[1], h[2]): 1.0, (h[0], h[1], h[3]): 1.0,
                          (h[0], h[1], h[4]): 2.0, (h[5], h[6], h[7]): 1.0,
                          (h[5], h[6], h[8]): 0.0, (h[9], h[10], h[11]): 0.0}
    assert value(samples, "podres_pod_cpus", namespace=h[0], pod=h[1],
                 pool="pod_exclusive") == 2.0
    assert value(samples, "podres_pod_cpus", namespace=h[5], pod=h[6],
                 pool="node_exclusive") == 1.0
    # Every line is one sample or comment: no raw newline leaked out of a label value.
    for line in text.split("\n")[:-1]:
        assert line.startswith(("# HELP ", "# TYPE ", "podres_")), repr(line)

    status, body = await served.get("/api/v1/ledger")
    assert status == 200


    ledger = json.loads(body)
    assert {(c["namespace"], c["pod"], c["name"]) for c in ledger["containers"]} == \
        set(containers)


@needs_promtool
async def test_hostile_names_pass_promtool(start_sim: StartSim, run_serve: RunServe) -> None:
    sim = await start_sim(hostile_state())
    topology = scenario_root() / "sidecar-hybrid" / "topology.json"
    served = await run_serve(sim, "--topology", str(topology), "--poll.interval", "1m")
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    result = promtool_check(await served.metrics_text())
    assert result.returncode == 0, result.stdout + result.stderr


label_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(namespace=label_text, pod=label_text, container=label_text,
       cpus=st.integers(min_value=0, max_value=4096))
def test_any_label_value_round_trips(namespace: str, pod: str, container: str,
                                     cpus: int) -> None:
    out: list[str] = []
    render_family(BY_NAME["podres_container_cpus"],
                  [((namespace, pod, container, "pod_shared"), float(cpus))], out)
    text = "".join(out)
    samples = parse_exposition(text)
    assert samples == {("podres_container_cpus", frozenset({
        ("namespace", namespace), ("pod", pod), ("container", container),
        ("assignment", "pod_shared")})): float(cpus)}
    assert "\n" not in escape_label(namespace + pod + container)


def test_escaping_matches_the_text_format() -> None:
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert escape_label("ünï 🙂") == "ünï 🙂"




async def test_a_kubelet_listing_twice_keeps_the_exposition_valid(
        start_sim: StartSim, run_serve: RunServe) -> None:
    """The same pod listed twice, and two containers of one pod with the same name: no
    series may repeat (Prometheus would reject the whole scrape)."""
    from exporter.pb import api_pb2

    directory = scenario_root() / "sidecar-hybrid"
    good = load_fixture_dir(directory).kubelet
    listing = api_pb2.ListPodResourcesResponse()
    listing.CopyFrom(good.list_response)
    listing.pod_resources.append(good.list_response.pod_resources[0])
    listing.pod_resources.add(name="twins", namespace="x", containers=[
        api_pb2.ContainerResources(name="c", cpu_ids=[5]),
        api_pb2.ContainerResources(name="c", cpu_ids=[6])])
    sim = await start_sim(replace(good, list_response=listing))
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "1m")
    # parse_exposition fails on a repeated series.
    samples = await served.wait_for(lambda s: value(s, "podres_up") == 1.0,
                                    what="first poll")
    assert value(samples, "podres_container_cpus", namespace="x", pod="twins",
                 container="c", assignment="node_exclusive") == 1.0
    assert value(samples, "podres_pod_cpus", namespace="shop", pod="web",
                 pool="pod_exclusive") == 2.0
    if os.access(PROMTOOL, os.X_OK):
        result = promtool_check(await served.metrics_text())
        assert result.returncode == 0, result.stdout + result.stderr


name_text = st.one_of(st.sampled_from((*HOSTILE, "app", "web-0", "default")), label_text)


@settings(max_examples=300, deadline=None)
@given(pods=st.lists(st.tuples(name_text, name_text,
                               st.lists(st.tuples(name_text, st.lists(
                                   st.integers(0, 15), max_size=3)), max_size=3)),
                     max_size=5),
       max_series=st.sampled_from([1000, 3]))
def test_container_lines_render_as_their_samples(
        pods: list[tuple[str, str, list[tuple[str, list[int]]]]], max_series: int) -> None:
    """The per-container series written straight from the entries (the family's
    ``lines``) are the very text rendering its samples gives: any name (escaping), a pod
    listed twice or a container named twice in its pod (each series once), over the cap."""
    snap = NodeSnapshot(tuple(
        PodAlloc(ns, name, tuple(ContainerAlloc(c, tuple(ids)) for c, ids in containers))
        for ns, name, containers in pods))
    facts = NodeFacts(reconcile(snap), {}, None)
    written = exposition.render_ledger(facts, pods_max_series=max_series)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exposition, "_CONTAINER_LINES", ())
        assert exposition.render_ledger(facts, pods_max_series=max_series) == written


def test_container_lines_are_used_for_plain_names_only() -> None:
    family = "podres_container_cpus"
    plain = reconcile(NodeSnapshot((PodAlloc("ns", "p", (ContainerAlloc("c", (1,)),)),)))
    rows = exposition._per_pod_samples(plain, 1000)[0]
    written = rows[family]
    assert isinstance(written, exposition._Written)
    assert "".join(written.pieces) == f'{family}{{namespace="ns",pod="p",container="c",' \
                                      'assignment="node_exclusive"} 1\n'
    hostile = reconcile(NodeSnapshot((PodAlloc("ns", 'p"', (ContainerAlloc("c"),)),)))
    assert exposition._per_pod_samples(hostile, 1000)[0][family] == [
        (("ns", 'p"', "c", "node_shared"), 0)]


@settings(max_examples=300, deadline=None)
@given(pods=st.lists(st.tuples(name_text, name_text,
                               st.lists(st.tuples(name_text, st.lists(
                                   st.integers(0, 15), max_size=3),
                                   st.booleans()), max_size=3),
                               st.lists(st.integers(0, 15), max_size=3)),
                     max_size=5))
def test_what_the_reconciler_tells_renders_as_what_the_text_shows(
        pods: list[tuple[str, str, list[tuple[str, list[int], bool]], list[int]]]) -> None:
    """The container counts and the plain-names fact of DistinctContainers, and the pods
    PodEntries says hold anything, give the very exposition the entries give by
    themselves (plain tuples of them, counted, searched for characters to escape and for
    pods that hold something by the renderer): quotes, backslashes and line breaks in any
    name are still escaped."""
    memory = (MemoryBlock("memory", 1 << 30, (0,)),)
    snap = NodeSnapshot(tuple(
        PodAlloc(ns, f"{name}{i}", tuple(ContainerAlloc(f"{c}{j}", tuple(ids),
                                                        memory if mem else ())
                                         for j, (c, ids, mem) in enumerate(containers)),
                 tuple(block), memory if block else ())
        for i, (ns, name, containers, block) in enumerate(pods)))
    ledger = reconcile(snap)
    assert isinstance(ledger.containers, exposition.DistinctContainers)
    assert isinstance(ledger.pods, PodEntries)
    told = exposition.node_exposition(ledger, pods_max_series=1000)
    shown = exposition.node_exposition(replace(ledger, containers=tuple(ledger.containers),
                                               pods=tuple(ledger.pods)),
                                       pods_max_series=1000)
    assert told == shown
    parse_exposition(told[0].decode())  # valid, each series once
