"""The poll loop (exporter.service.Exporter): what it publishes and when. podres_up turns 1 only
once that poll's ledger is published, and a poll that breaks inside the exporter leaves no
source outcome standing."""

from __future__ import annotations

import asyncio

import pytest

from exporter.published import PublishedState
from exporter.reader import NodeReader, Poll, SourceOptions
from exporter.service import Exporter, ServiceOptions
from tests.conftest import StartSim
from tests.service.conftest import scenario_root, without_pods

SCENARIO = "database-pod-scope"


async def test_no_source_health_after_a_poll_that_failed_inside_the_exporter(
        start_sim: StartSim) -> None:
    """When the poll itself breaks (a bug), no source outcome is known: podres_source_up
    is absent, not the last poll's values."""
    directory = scenario_root() / SCENARIO
    sim = await start_sim(directory)

    class Breaking(NodeReader):
        broken = False

        async def poll(self, now: float | None = None) -> Poll:
            if self.broken:
                raise RuntimeError("a bug")
            return await super().poll(now)

    reader = Breaking(SourceOptions(socket=sim.socket_path, sysfs=None,
                                    topology_file=str(directory / "topology.json")))
    exporter = Exporter(reader, ServiceOptions(poll_interval=0.01))
    stop = asyncio.Event()
    try:
        assert await exporter.poll_once()
        assert "podres_source_up{" in b"".join(exporter.metrics_body()).decode()
        reader.broken = True
        task = asyncio.create_task(exporter.run(stop))
        while exporter.state.errors_total[("exporter", "poll")] < 1:
            await asyncio.sleep(0.01)
        stop.set()
        await task
    finally:
        await reader.close()
    assert exporter.state.source_up == {}
    assert "podres_source_up{" not in b"".join(exporter.metrics_body()).decode()
    assert not exporter.state.up


async def test_up_turns_1_only_with_the_ledger_of_that_poll(
        start_sim: StartSim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The render runs in a thread and yields to the loop: a scrape taken meanwhile must
    still say podres_up 0 (the ledger it shows is the one from before the outage), never
    podres_up 1 beside the old ledger."""
    directory = scenario_root() / SCENARIO
    sim = await start_sim(directory)
    reader = NodeReader(SourceOptions(socket=sim.socket_path, sysfs=None,
                                      topology_file=str(directory / "topology.json")))
    exporter = Exporter(reader)
    try:
        assert await exporter.poll_once()
        sim.misbehaviour.unimplemented.add("List")
        sim.set_state(without_pods(sim.state, ("batch", "worker")))
        assert not await exporter.poll_once()
        sim.misbehaviour.unimplemented.clear()

        rendering, release = asyncio.Event(), asyncio.Event()
        seen: list[tuple[bool, bool]] = []
        publish = PublishedState.publish

        async def slow_publish(self: PublishedState, *args: object, **kwargs: object) -> None:
            rendering.set()
            await release.wait()
            await publish(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(PublishedState, "publish", slow_publish)
        task = asyncio.create_task(exporter.poll_once())
        await rendering.wait()
        body = b"".join(exporter.metrics_body()).decode()
        seen.append(("podres_up 0" in body, 'pod="worker"' in body))
        release.set()
        assert await task
        body = b"".join(exporter.metrics_body()).decode()
        seen.append(("podres_up 1" in body, 'pod="worker"' in body))
    finally:
        await reader.close()
    assert seen == [(True, True), (True, False)]
