"""The placement state of each node (``node_placement``, migration 0004): written by every
write path (embedded, SQLAlchemy on SQLite and PostgreSQL), replaced only when its digest
changes, read back equal for ``plan --fleet``; and the ranking's cache and misuse."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.history.changes import ChangeSet
from exporter.history.fleetread import read_fleet
from exporter.history.placement import (
    kubelet_config_to_json,
    placement_row,
    state_from_row,
)
from exporter.sources.topology import topology_from_json
from reconciler.allocator import fleet
from reconciler.allocator.config import ModelConfig
from reconciler.allocator.live import NodeState
from reconciler.kube import KubeletConfig, kubelet_config_from_json
from reconciler.manifests import workloads_in_manifest
from tests.history.backends import History

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
TOPOLOGY = topology_from_json({
    "cpus": [{"id": i, "core": i, "socket": i // 4, "numa_node": i // 4} for i in range(8)],
    "memory": [{"numa_node": 0, "bytes": 32 << 30}, {"numa_node": 1, "bytes": 32 << 30}]})
CONFIG = kubelet_config_from_json({"kubeletconfig": {
    "cpuManagerPolicy": "static", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
    "memoryManagerPolicy": "Static", "topologyManagerPolicy": "single-numa-node",
    "topologyManagerScope": "pod", "reservedSystemCPUs": "0",
    "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    "kubeReserved": {"memory": "1Gi"},
    "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}]}})


def state(free: frozenset[int], config: KubeletConfig | None = CONFIG) -> NodeState:
    return NodeState(TOPOLOGY, config, free, ((0, 20 << 30), (1, 30 << 30)))


def write(history: History, node: str, seq: int, at: datetime, s: NodeState,
          writer: str = "w1") -> None:
    history.write(node, writer, [ChangeSet(seq, at, at, placement=placement_row(s))])


def test_kubelet_config_round_trips() -> None:
    assert kubelet_config_from_json(kubelet_config_to_json(CONFIG)) == CONFIG
    bare = KubeletConfig()
    assert kubelet_config_from_json(kubelet_config_to_json(bare)) == bare


def test_placement_state_is_written_when_it_changes(history: History) -> None:
    first = state(frozenset(range(1, 8)))
    write(history, "node-1", 1, T0, first)
    # A restarted exporter (another writer) records the same state: the row stays as it
    # was, its time too.
    write(history, "node-1", 1, T0 + timedelta(minutes=5), first, writer="w2")
    [node] = read_fleet(history.reader)
    assert node.recorded_at == T0
    assert node.state is not None
    assert node.state.key == placement_row(first).digest
    assert (node.state.topology.cpus, node.state.config, node.state.free_cpus,
            node.state.free_memory) == (TOPOLOGY.cpus, CONFIG, first.free_cpus,
                                        first.free_memory)
    # A pod took CPUs 4-7: the row is replaced.
    later = T0 + timedelta(minutes=10)
    write(history, "node-1", 2, later, state(frozenset(range(1, 4))), writer="w2")
    [node] = read_fleet(history.reader)
    assert node.recorded_at == later
    assert node.state is not None and node.state.free_cpus == frozenset({1, 2, 3})


def test_memory_groups_are_recorded_and_read_back(history: History) -> None:
    """The NUMA groups of a node's memory blocks travel with its state, so ``plan --fleet``
    keeps a multi-node block's group apart as ``plan --node`` does; a state without groups
    keeps the text (and digest) it had before groups were recorded."""
    plain = state(frozenset(range(1, 8)))
    assert placement_row(plain).free_memory == "[[0,21474836480],[1,32212254720]]"
    grouped = NodeState(TOPOLOGY, CONFIG, frozenset({1, 2}), ((0, 1 << 30), (1, 2 << 30)),
                        memory_groups=((0, 1),))
    write(history, "node-1", 1, T0, grouped)
    [node] = read_fleet(history.reader)
    assert node.state is not None and node.state.memory_groups == ((0, 1),)
    assert node.state.key != placement_row(replace(grouped, memory_groups=())).digest
    row = placement_row(grouped)
    for bad in ('[[0, 1, 5]]', '[[0]]', '[7]', '[[0, 1, ["x"]]]'):
        with pytest.raises(ValueError):
            state_from_row(row.digest, row.topology, row.kubelet_config, row.free_cpus, bad)


def test_nodes_without_state_are_listed_last(history: History, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    write(history, "node-b", 1, T0, state(frozenset(range(1, 8))))
    write(history, "node-c", 1, T0, state(frozenset({1, 2, 3})))  # NUMA 0 only
    history.write("node-a", "w1", [ChangeSet(1, T0, T0, summary=None)])  # no topology known
    manifest = tmp_path / "pod.json"
    q = {"cpu": "4", "memory": "1Gi"}
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "api", "namespace": "shop"}, "spec": {"containers": [{
            "name": "app", "image": "a", "resources": {"requests": q, "limits": q}}]}}))
    assert main(["plan", "--fleet", "-f", str(manifest), "--history.url", history.url,
                 "-o", "json"]) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    # node-b: 4-7, a whole NUMA node and socket, free: admitted on NUMA 1. node-c: 3 free
    # CPUs, refused. node-a: nothing recorded to model it from.
    assert [(n["node"], n["admitted"]) for n in nodes] == [
        ("node-b", True), ("node-c", False), ("node-a", None)]
    assert nodes[0]["numa_nodes"] == [1] and nodes[0]["pods"][0]["cpus"] == "4-7"
    assert "no placement state recorded" in nodes[2]["reason"]
    assert main(["plan", "--fleet", "-f", str(manifest), "--history.url", history.url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["RANK", "NODE", "FITS"]
    assert [line.split()[1] for line in table[1:4]] == ["node-b", "node-c", "node-a"]


def test_a_row_that_is_not_a_state_is_refused() -> None:
    row = placement_row(state(frozenset({1})))
    with pytest.raises(ValueError, match="no CPUs"):
        state_from_row(row.digest, json.dumps({"cpus": []}), row.kubelet_config,
                       row.free_cpus, row.free_memory)
    with pytest.raises(ValueError):
        state_from_row(row.digest, row.topology, row.kubelet_config, "1-x", row.free_memory)


def test_nodes_of_equal_state_are_modelled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = fleet._fit

    def counting(name: str, *args: Any) -> Any:
        calls.append(name)
        return real(name, *args)

    monkeypatch.setattr(fleet, "_fit", counting)
    busy, idle = state(frozenset({1, 2, 3})), state(frozenset(range(1, 8)))
    nodes = [(f"n{i:02d}", NodeState(s.topology, s.config, s.free_cpus, s.free_memory,
                                     key=placement_row(s).digest))
             for i, s in enumerate([busy, idle] * 5)]
    q = {"cpu": "2", "memory": "1Gi"}
    [template] = workloads_in_manifest({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "api", "namespace": "shop"}, "spec": {"containers": [{
            "name": "app", "image": "a", "resources": {"requests": q, "limits": q}}]}}
    ).templates
    fits = fleet.plan_fleet([template], nodes, ModelConfig())
    assert calls == ["n00", "n01"]
    # Both place the pod on NUMA 0 (single-numa-node, the lowest node that holds 2 CPUs):
    # idle nodes (7 free, 2 taken: 5 left) before busy ones (3 free: 1 left), by name.
    assert [(f.node, f.cpus_left) for f in fits] == (
        [(f"n{i:02d}", 5) for i in range(1, 10, 2)] + [(f"n{i:02d}", 1) for i in range(0, 10, 2)])


def test_plan_fleet_misuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": "p"}, "spec": {"containers": [
                                        {"name": "c", "image": "i"}]}}))
    assert main(["plan", "--fleet", "--node", "-f", str(manifest)]) == 2
    assert "--node does not apply" in capsys.readouterr().err
    assert main(["plan", "--fleet", "--topology.shape", "1x4x1", "-f", str(manifest)]) == 2
    assert "--topology.shape do not apply" in capsys.readouterr().err
    missing = tmp_path / "none.db"
    assert main(["plan", "--fleet", "-f", str(manifest), "--history.url",
                 f"sqlite:///{missing}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not missing.exists()


async def test_fleet_plan_api_route_answers_as_the_cli(
        history: History, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from exporter.history.api import add_routes

    if history.backend != "embedded":
        pytest.skip("one backend is enough: the route reads through the SQLAlchemy store")
    write(history, "node-b", 1, T0, state(frozenset(range(1, 8))))
    write(history, "node-c", 1, T0, state(frozenset({1, 2, 3})))
    q = {"cpu": "4", "memory": "1Gi"}
    manifest = ("apiVersion: v1\nkind: Pod\nmetadata: {name: api, namespace: shop}\n"
                "spec:\n  containers:\n  - name: app\n    image: a\n"
                f"    resources: {{requests: {json.dumps(q)}, limits: {json.dumps(q)}}}\n")
    (tmp_path / "pod.yaml").write_text(manifest)
    assert main(["plan", "--fleet", "-f", str(tmp_path / "pod.yaml"), "--history.url",
                 history.url, "-o", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    app = web.Application()
    add_routes(app, history.reader)
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/api/v1/fleet/plan", data=manifest)
        assert resp.status == 200
        assert await resp.json() == cli
        for body, status, words in ((b"kind: [", 400, "invalid YAML"),
                                    (b"kind: Service\n", 400, "no pod templates"),
                                    (b"\xff", 400, "UTF-8"),
                                    (b"x" * ((1 << 20) + 1), 413, "larger")):
            resp = await client.post("/api/v1/fleet/plan", data=body,
                                     headers={"Content-Type": "application/yaml"})
            assert resp.status == status
            assert words in (await resp.json())["error"]
        resp = await client.get("/api/v1/openapi.json")
        doc = await resp.json()
        assert "post" in doc["paths"]["/api/v1/fleet/plan"]


async def test_the_writer_queues_the_state_only_when_it_changes(history: History) -> None:
    from exporter.history.writer import HistoryWriter
    from tests.history.histsim import SimNode

    sim = SimNode("n1", 1, pods=5)
    writer = HistoryWriter(history, "n1", summary_interval=3600)
    await writer.start()
    idle, busy = state(frozenset(range(1, 8))), state(frozenset({1, 2, 3}))
    ledger = sim.ledger()
    writer.submit(ledger, T0, idle)
    await writer.flush()
    written = writer.rows_written_total
    # The same ledger and state again: nothing to write.
    for i in range(1, 5):
        writer.submit(ledger, T0 + timedelta(seconds=i), idle)
    await writer.flush()
    assert writer.rows_written_total == written
    # The same ledger, another state (a pod this ledger does not show took CPUs): one row.
    writer.submit(ledger, T0 + timedelta(seconds=10), busy)
    await writer.flush()
    assert writer.rows_written_total == written + 1
    # A ledger without a state (topology unreadable for a poll) keeps the last one.
    writer.submit(ledger, T0 + timedelta(seconds=11))
    await writer.flush()
    assert writer.rows_written_total == written + 1
    await writer.close()
    [node] = read_fleet(history.reader)
    assert node.state is not None and node.state.free_cpus == frozenset({1, 2, 3})
    assert node.recorded_at == T0 + timedelta(seconds=10)
