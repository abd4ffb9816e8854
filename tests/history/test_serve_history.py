"""End to end: ``serve`` polling a simulated kubelet writes history into a real PostgreSQL;
the server is stopped while pods come and go: metrics keep being served, pending writes and
dropped writes are exported, and after recovery the database holds an explicit gap with the
same dropped count and the current assignments."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.pgcluster import PgCluster
from exporter.history import open_store
from exporter.history import queries as q
from exporter.history.store import count_rows

pytestmark = pytest.mark.postgres

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "scenarios" / "database-pod-scope"


def without_first_pod(state: Any) -> Any:
    from exporter.pb import api_pb2

    listing = api_pb2.ListPodResourcesResponse()
    listing.CopyFrom(state.list_response)
    del listing.pod_resources[0]
    return replace(state, list_response=listing)


async def wait_for(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    """Poll ``check`` until truthy; the timeout only stops a broken test from hanging."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check() if asyncio.iscoroutinefunction(check) else check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, name
    return float(match.group(1))


async def test_serve_survives_a_database_outage(own_pg_cluster: PgCluster,
                                                start_sim: Any) -> None:
    from exporter.cli import build_parser
    from exporter.commands.serve import serve
    from exporter.sources.fixture import load_fixture_dir

    full = load_fixture_dir(SCENARIO).kubelet
    partial = without_first_pod(full)
    sim = await start_sim(full)
    args = build_parser().parse_args([
        "serve", "--web.listen-address", "127.0.0.1:0", "--node-name", "e2e-node",
        "--sysfs", "/nonexistent-sysfs", "--podresources.socket", sim.socket_path,
        "--poll.interval", "100ms", "--history.url", own_pg_cluster.url,
        "--history.max-pending", "2", "--history.summary-interval", "1h"])
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(args, on_ready=ready.set_result, stop=stop))
    base = await asyncio.wait_for(ready, 30)
    reader = open_store(own_pg_cluster.url, mode="readonly")
    session = aiohttp.ClientSession()

    async def metrics() -> str:
        async with session.get(base + "/metrics") as resp:
            assert resp.status == 200
            return await resp.text()

    try:
        await wait_for("the first ledger in the database",
                       lambda: count_rows(reader)["assignment_intervals"] > 0)
        await asyncio.to_thread(own_pg_cluster.stop)
        # Pods come and go while the database is down; scrapes keep being answered.
        for i in range(8):
            sim.set_state(partial if i % 2 == 0 else full)
            await asyncio.sleep(0.35)
            assert metric(await metrics(), "podres_up") == 1
        text = await metrics()
        assert metric(text, "podres_history_pending_writes") >= 2  # the bound (+ inbox)
        dropped = metric(text, "podres_history_dropped_writes_total")
        assert dropped >= 1
        await asyncio.to_thread(own_pg_cluster.start)

        def one_gap() -> Any:
            gaps = q.gaps(reader, node="e2e-node").items
            return gaps if gaps else None

        (gap,) = await wait_for("the gap row", one_gap)

        async def drained() -> str | None:
            text = await metrics()
            return text if metric(text, "podres_history_pending_writes") == 0 else None

        text = await wait_for("the queue to drain", drained)
        assert gap["dropped_writes"] == metric(text, "podres_history_dropped_writes_total")
        # What the database says is current is what the exporter serves as its ledger.
        async with session.get(base + "/api/v1/ledger") as resp:
            ledger = await resp.json()
        current = {(c["namespace"], c["pod"], c["name"], c["assignment"], c["cpus"])
                   for c in ledger["containers"]}
        stored = {(i["namespace"], i["pod"], i["container"], i["assignment"], i["cpus"])
                  for i in q.assignments_at(reader, datetime.now(UTC), "e2e-node")}
        assert stored == current
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await session.close()
        reader.close()
