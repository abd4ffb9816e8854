"""PostgreSQL-only behaviour: a real server stopped in the middle of churn, and a fleet of
exporters writing concurrently into one database."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from histsim import SimNode, actual_assignments, expected_assignments
from sqlalchemy import func, select

from bench.pgcluster import PgCluster, create_database, drop_database
from exporter.history import HistoryWriter, open_store
from exporter.history import queries as q
from exporter.history.schema import assignment_intervals, node_summaries, nodes
from exporter.history.store import HistoryStore, count_rows

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=10 * i)


def intervals(store: HistoryStore, node: str) -> list[tuple[Any, ...]]:
    a = assignment_intervals
    with store.read() as conn:
        rows = conn.execute(
            select(a.c.pod_uid, a.c.namespace, a.c.pod, a.c.container, a.c.sidecar,
                   a.c.assignment, a.c.memory_assignment, a.c.cpuset, a.c.cpu_count,
                   a.c.memory_bytes, a.c.numa_nodes, a.c.valid_from, a.c.valid_to)
            .join(nodes, nodes.c.id == a.c.node_id).where(nodes.c.name == node)).all()
    return sorted((tuple(r) for r in rows), key=repr)


def summaries(store: HistoryStore, node: str) -> list[tuple[Any, ...]]:
    s = node_summaries
    with store.read() as conn:
        rows = conn.execute(select(*[c for c in s.c if c.name not in ("id", "node_id")])
                            .join(nodes, nodes.c.id == s.c.node_id)
                            .where(nodes.c.name == node).order_by(s.c.at)).all()
    return [tuple(r) for r in rows]


async def test_server_stopped_mid_churn_loses_nothing(own_pg_cluster: PgCluster,
                                                      tmp_path: Path) -> None:
    pg = open_store(own_pg_cluster.url)
    reference = open_store(f"sqlite:///{tmp_path}/reference.db")
    kwargs: dict[str, Any] = {"retry_initial": 0.05, "retry_max": 0.2,
                              "summary_interval": 30}
    writer = HistoryWriter(pg, "n", **kwargs)
    ref_writer = HistoryWriter(reference, "n", **kwargs)
    await writer.start()
    await ref_writer.start()
    sim = SimNode("n", 21, pods=20)
    stopped_with_pending = 0
    for i in range(90):
        if i:
            sim.step()
        if i == 30:
            await asyncio.to_thread(own_pg_cluster.stop)
        if i == 60:
            stopped_with_pending = writer.pending_writes
            await asyncio.to_thread(own_pg_cluster.start)
        ledger = sim.ledger()
        writer.submit(ledger, at(i))
        ref_writer.submit(ledger, at(i))
        await asyncio.sleep(0.01)
    assert stopped_with_pending > 0  # the outage really buffered writes
    assert await writer.flush(timeout=60)
    await writer.close()
    await ref_writer.close()
    assert writer.dropped_writes_total == 0
    assert intervals(pg, "n") == intervals(reference, "n")
    assert summaries(pg, "n") == summaries(reference, "n")
    assert count_rows(pg)["history_gaps"] == 0
    assert actual_assignments(q.assignments_at(pg, at(89), "n")) == \
        expected_assignments(sim.ledger())


async def test_fleet_of_20_nodes_writing_concurrently(pg_server_url: str) -> None:
    url = create_database(pg_server_url)
    # Twenty exporters start at once against an empty database: one migrates.
    stores: list[HistoryStore] = [None] * 20  # type: ignore[list-item]
    errors: list[BaseException] = []

    def opener(i: int) -> None:
        try:
            stores[i] = open_store(url)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []

    sims = [SimNode(f"node-{i:02d}", 100 + i, pods=15) for i in range(20)]
    writers = [HistoryWriter(stores[i], sims[i].name, summary_interval=20)
               for i in range(20)]
    for w in writers:
        await w.start()
    timelines: list[list[tuple[datetime, Any]]] = [[] for _ in sims]
    for step in range(40):
        for i, sim in enumerate(sims):
            if step:
                sim.step()
            ledger = sim.ledger()
            writers[i].submit(ledger, at(step))
            timelines[i].append((at(step), ledger))
        await asyncio.sleep(0.005)
    for w in writers:
        await w.close()
    assert [w.dropped_writes_total for w in writers] == [0] * 20
    assert [w.last_error for w in writers] == [None] * 20

    check = open_store(url)
    a = assignment_intervals
    with check.read() as conn:
        dup = conn.execute(
            select(a.c.node_id, a.c.namespace, a.c.pod, a.c.container, a.c.valid_from,
                   func.count()).group_by(a.c.node_id, a.c.namespace, a.c.pod,
                                          a.c.container, a.c.valid_from)
            .having(func.count() > 1)).all()
    assert dup == []
    assert len(q.list_nodes(check).items) == 20
    for sim, timeline in zip(sims, timelines, strict=True):
        for when, ledger in timeline:
            got = actual_assignments(q.assignments_at(check, when, sim.name))
            assert got == expected_assignments(ledger), (sim.name, when)
        assert len(summaries(check, sim.name)) == 20
    for store in [*stores, check]:
        store.close()
    drop_database(pg_server_url, url)


async def test_exporter_starts_while_the_database_is_down(own_pg_cluster: PgCluster) -> None:
    own_pg_cluster.stop()
    store = open_store(own_pg_cluster.url)  # no error: metrics must still be served
    assert store.migration_pending
    writer = HistoryWriter(store, "n", retry_initial=0.05, retry_max=0.2)
    await writer.start()
    sim = SimNode("n", 31, pods=5)
    writer.submit(sim.ledger(), at(0))
    for _ in range(1000):  # until the first write attempt has failed
        if writer.last_error:
            break
        await asyncio.sleep(0.01)
    assert writer.pending_writes == 1 and writer.last_error
    await asyncio.to_thread(own_pg_cluster.start)
    assert await writer.flush(timeout=30)
    await writer.close()
    assert not store.migration_pending
    assert actual_assignments(q.assignments_at(store, at(0), "n")) == \
        expected_assignments(sim.ledger())
