"""NodeReader against the simulated kubelet: a full read, the content-hash shortcut when
nothing changed, a full recompute when anything did, and optional sources failing softly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.errors import SourceError
from exporter.reader import NodeReader, SourceOptions
from exporter.sim.server import Misbehaviour
from exporter.sources.fixture import KubeletState, load_fixture_dir
from foundation.helpers import SCENARIOS

DB = SCENARIOS / "database-pod-scope"
HYBRID = SCENARIOS / "sidecar-hybrid"


@pytest.fixture
async def reader_for() -> Any:
    readers: list[NodeReader] = []

    def make(sim: Any, folder: Path = DB, **kw: Any) -> NodeReader:
        options = SourceOptions(socket=sim.socket_path, sysfs=None,
                                topology_file=str(folder / "topology.json"), token_file=None,
                                **kw)
        if sim.http_url and "kubelet_url" not in kw:
            options.kubelet_url = sim.http_url
            options.ca_file = str(sim.cert_path)
        reader = NodeReader(options)
        readers.append(reader)
        return reader

    yield make
    for r in readers:
        await r.close()


async def test_unchanged_node_is_not_recomputed(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB, http=True)
    reader = reader_for(sim)
    first = await reader.read()
    assert first.changed and first.errors == {}
    second = await reader.read()
    assert not second.changed
    assert second.ledger is first.ledger
    assert second.raw.kubelet.list_response == first.raw.kubelet.list_response


async def test_any_change_means_a_full_recompute(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB, http=True)
    reader = reader_for(sim)
    before = (await reader.read()).ledger
    base = load_fixture_dir(DB).kubelet
    # PodResources change.
    sim.set_state(load_fixture_dir(HYBRID).kubelet)
    changed = await reader.read()
    assert changed.changed and [p.name for p in changed.ledger.pods] == ["web"]
    # Back to the original: equal to the first ledger, computed afresh.
    sim.set_state(base)
    again = await reader.read()
    assert again.changed and again.ledger == before
    # Only the pod specs change: recomputed too.
    pods = dict(base.pod_list or {})
    pods["items"] = []
    sim.set_state(KubeletState(base.list_response, base.allocatable, pods, base.configz))
    spec_change = await reader.read()
    assert spec_change.changed
    # The kubelet lists no pods any more: no spec is known for any of them.
    assert {p.estimate_basis for p in spec_change.ledger.pods} == {"podresources"}
    assert {p.budget_cpus for p in spec_change.ledger.pods} == {None}


async def test_optional_kubelet_failures_are_errors_not_exceptions(start_sim: Any,
                                                                   reader_for: Any) -> None:
    sim = await start_sim(DB, http=True, misbehaviour=Misbehaviour(
        forbidden_paths={"/pods", "/configz", "/metrics"}))
    reader = reader_for(sim)
    reading = await reader.read()
    assert set(reading.errors) == {("kubelet", "pods"), ("kubelet", "configz"),
                                   ("kubelet", "metrics")}
    assert all("HTTP 403" in m for m in reading.errors.values())
    assert {p.estimate_basis for p in reading.ledger.pods} == {"podresources"}


async def test_invalid_json_from_kubelet(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB, http=True)
    sim._pods_body = b"{broken"  # the kubelet sends garbage
    reader = reader_for(sim)
    reading = await reader.read()
    assert "invalid JSON" in reading.errors[("kubelet", "pods")]
    assert reading.ledger.pods  # PodResources still reconciled


async def test_list_failure_raises_source_error(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB)
    reader = reader_for(sim)
    await reader.read()
    await sim.stop_grpc()
    with pytest.raises(SourceError):
        await reader.read()


async def test_topology_file_and_node_name(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB)
    reader = reader_for(sim, node_name="n-1")
    ledger = (await reader.read()).ledger
    assert ledger.node_name == "n-1" and ledger.numa_nodes is not None


async def test_sysfs_topology(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(HYBRID)
    sysfs = Path(__file__).parent / "data" / "sysfs" / "smt-2socket"
    reader = NodeReader(SourceOptions(socket=sim.socket_path, sysfs=str(sysfs)))
    try:
        first = await reader.read()
        assert first.ledger.online_cpus == 8 and first.ledger.numa_nodes == 2
        assert not (await reader.read()).changed
    finally:
        await reader.close()


@pytest.mark.timeout(60)
async def test_reader_recovers_after_a_kubelet_outage(start_sim: Any, reader_for: Any) -> None:
    """The socket goes away (kubelet down) and comes back as a new file: the same reader
    reads again, without being recreated."""
    import asyncio

    sim = await start_sim(HYBRID)
    reader = reader_for(sim, folder=HYBRID)
    before = (await reader.read()).ledger
    await sim.stop_grpc()
    with pytest.raises(SourceError, match="does not exist"):
        await reader.read()
    await sim.start_grpc()
    for _ in range(100):  # bounded: the channel redials with a backoff of at most 2 s
        try:
            reading = await reader.read()
            break
        except SourceError:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("the reader never read the restarted kubelet")
    assert reading.ledger == before
