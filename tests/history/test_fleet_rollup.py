"""The fleet roll-up (``fleet_summaries``): what the writers keep equals a recomputation from
the summaries, to the last unit, however the summaries arrive (batches, several writers at
once on PostgreSQL); the fleet ratio read from it equals the raw aggregation; migration 0003
back-fills it in an existing database; pruning one node leaves the others' buckets
answered."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from backends import History
from sqlalchemy import create_engine, func, select

from exporter.history import open_store
from exporter.history import queries as q
from exporter.history.changes import ChangeSet
from exporter.history.connect import configure_sqlite
from exporter.history.fleet import whole_buckets
from exporter.history.schema import (
    SERIES_STEPS,
    SUMMARY_COLUMNS,
    fleet_summaries,
    node_summaries,
    node_summaries_hourly,
    nodes,
)
from exporter.history.store import HEAD_REVISION, HistoryStore

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)  # a Monday; 1 d and 1 week buckets are epoch-aligned


def random_summaries(rng: random.Random, count: int, start: datetime, max_gap: int
                     ) -> list[tuple[datetime, dict[str, int]]]:
    """``count`` summaries at irregular times from ``start`` (a writer's summaries drift and
    pause), with random values."""
    out = []
    t = start + timedelta(seconds=rng.randint(0, 59))
    for _ in range(count):
        out.append((t, {c: rng.randint(0, 400) for c in SUMMARY_COLUMNS}))
        t += timedelta(seconds=rng.choice((60, 60, 60, 61, 59, 120, rng.randint(1, max_gap))))
    return out


def write(store: HistoryStore, node: str, summaries: list[tuple[datetime, dict[str, int]]],
          rng: random.Random, writer: str = "w", sizes: tuple[int, ...] = (1, 1, 2, 5, 30)
          ) -> None:
    """In batches of random ``sizes``, as a writer catching up does."""
    sets = [ChangeSet(i + 1, at, at, summary=values) for i, (at, values) in enumerate(summaries)]
    i = 0
    while i < len(sets):
        n = rng.choice(sizes)
        store.write(node, writer, sets[i:i + n])
        i += n


def fleet_rows(store: HistoryStore) -> dict[tuple[int, int], tuple[int, int, int]]:
    f = fleet_summaries
    with store.read() as conn:
        return {(r.step, r.bucket_epoch): (r.nodes, r.cpus_pod_shared_nano,
                                           r.cpus_pod_exclusive_nano)
                for r in conn.execute(select(f))}


def rebuilt_rows(store: HistoryStore) -> dict[tuple[int, int], tuple[int, int, int]]:
    store.rebuild_rollup()
    return fleet_rows(store)


def brute_force_ratio(store: HistoryStore, start: datetime, end: datetime, step: int
                      ) -> list[tuple[int, int, float, float]]:
    """``(bucket, nodes, pod_shared, pod_exclusive)`` straight from the raw summaries."""
    s = node_summaries
    with store.read() as conn:
        rows = conn.execute(select(s.c.node_id, s.c.at_epoch, s.c.cpus_pod_shared,
                                   s.c.cpus_pod_exclusive)).all()
    acc: dict[tuple[int, int], list[int]] = {}
    for node, epoch, shared, exclusive in rows:
        if start.timestamp() <= epoch <= end.timestamp():
            a = acc.setdefault((epoch - epoch % step, node), [0, 0, 0])
            a[0] += 1
            a[1] += shared
            a[2] += exclusive
    out: dict[int, list[float]] = {}
    for (bucket, _), (n, shared, exclusive) in acc.items():
        point = out.setdefault(bucket, [0, 0.0, 0.0])
        point[0] += 1
        point[1] += shared / n
        point[2] += exclusive / n
    return [(b, int(p[0]), p[1], p[2]) for b, p in sorted(out.items())]


def assert_ratio_matches(store: HistoryStore, start: datetime, end: datetime,
                         step: int) -> None:
    got = q.fleet_ratio(store, start, end, step)["points"]
    want = brute_force_ratio(store, start, end, step)
    assert [(int(datetime.fromisoformat(p["t"]).timestamp()), p["nodes"]) for p in got] == \
        [(b, n) for b, n, _, _ in want], (start, end, step)
    for p, (_, _, shared, exclusive) in zip(got, want, strict=True):
        # Both are rounded to 3 decimals; a node's average is kept to 1e-9 in the roll-up.
        assert p["pod_shared_cpus"] == pytest.approx(shared, abs=1e-3 + 1e-6)
        assert p["pod_exclusive_cpus"] == pytest.approx(exclusive, abs=1e-3 + 1e-6)
        if exclusive:
            assert p["ratio"] == pytest.approx(shared / exclusive, rel=1e-7, abs=1e-6 + 1e-9)
        else:
            assert p["ratio"] is None


def test_roll_up_equals_the_raw_aggregation(history: History) -> None:
    rng = random.Random(13)
    store = history
    span = timedelta(days=16)
    for i in range(4):
        # Nodes join late, pause and drift: buckets with 1 to 4 nodes.
        start = T0 + timedelta(hours=rng.randint(0, 30) * i)
        write(store, f"node-{i}", random_summaries(rng, 700, start, max_gap=3 * 3600), rng)
    assert fleet_rows(store) == rebuilt_rows(store)
    steps = [*SERIES_STEPS, 90, 5400]  # the roll-up's steps and two it does not keep
    for step in steps:
        for _ in range(3):
            a, b = sorted(rng.uniform(0, span.total_seconds()) for _ in range(2))
            start, end = T0 + timedelta(seconds=a), T0 + timedelta(seconds=b)
            if (end - start).total_seconds() / step <= q.MAX_POINTS:
                assert_ratio_matches(store, start, end, step)
        assert_ratio_matches(store, T0, T0 + span, step)  # whole buckets, aligned
    # The roll-up did answer: the 16 days hold whole weeks and days.
    with store.read() as conn:
        assert whole_buckets(conn, 604800, *q._seconds(T0, T0 + span)) == (
            int(T0.timestamp()) - int(T0.timestamp()) % 604800 + 604800,
            int((T0 + span).timestamp()) // 604800 * 604800)


def hourly_rows(store: HistoryStore) -> list[Any]:
    with store.read() as conn:
        return [tuple(r) for r in conn.execute(select(node_summaries_hourly)
                                               .order_by(node_summaries_hourly.c.hour_epoch))]


def test_a_repeated_summary_changes_no_roll_up(history: History) -> None:
    rng = random.Random(2)
    store = history
    summaries = random_summaries(rng, 50, T0, max_gap=60)
    write(store, "a", summaries, rng)
    before, hours = fleet_rows(store), hourly_rows(store)
    write(store, "a", summaries[10:20], rng, writer="restarted")  # same times again
    assert hourly_rows(store) == hours
    assert fleet_rows(store) == before == rebuilt_rows(store)


def test_concurrent_writers_lose_no_update(pg_url: str) -> None:
    """Eight exporters add to the same buckets at the same moments on a real PostgreSQL:
    no deadlock, no lost update (the rows equal a recomputation exactly)."""
    writers = 8
    stores = [open_store(pg_url) for _ in range(writers)]
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        rng = random.Random(i)
        summaries = random_summaries(rng, 240, T0, max_gap=120)
        try:
            barrier.wait()
            write(stores[i], f"node-{i}", summaries, rng)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = fleet_rows(stores[0])
    assert max(n for n, _, _ in got.values()) == writers
    assert got == rebuilt_rows(stores[0])
    for store in stores:
        store.close()


def test_migration_0003_back_fills_an_existing_database(history_url: str) -> None:
    engine = create_engine(history_url)
    if engine.dialect.name == "sqlite":
        configure_sqlite(engine, "create")
    old = HistoryStore(engine)
    old.migrate("0001")
    rng = random.Random(7)
    with old.write_transaction() as conn:
        for node_id in (1, 2, 3):
            conn.execute(nodes.insert().values(id=node_id, name=f"n{node_id}",
                                               first_seen=T0, last_seen=T0))
            conn.execute(node_summaries.insert(), [
                {"node_id": node_id, "at": t, "at_epoch": int(t.timestamp()), **values}
                for t, values in random_summaries(rng, 400, T0, max_gap=7200)])
    old.migrate("0002")  # an exporter of the previous release: summaries and hourly roll-up
    with old.read() as conn:
        kept = {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in (node_summaries, node_summaries_hourly)}
    old.close()

    store = open_store(history_url)
    assert store.revision() == HEAD_REVISION
    with store.read() as conn:
        assert {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in (node_summaries, node_summaries_hourly)} == kept
    back_filled = fleet_rows(store)
    assert {step for step, _ in back_filled} == set(SERIES_STEPS)
    assert back_filled == rebuilt_rows(store)
    end = T0 + timedelta(days=2)
    for step in (300, 3600, 86400):
        assert_ratio_matches(store, T0 + timedelta(minutes=7), end, step)
    # And the writers go on adding to it.
    write(store, "n1", random_summaries(rng, 30, end, max_gap=60), rng)
    assert fleet_rows(store) == rebuilt_rows(store)


def test_one_nodes_prune_leaves_the_others_answered(history: History) -> None:
    rng = random.Random(4)
    store = history
    for node in ("a", "b"):
        write(store, node, random_summaries(rng, 3 * 1440, T0, max_gap=60), rng, sizes=(64,))
    cutoff = T0 + timedelta(days=2)
    store.prune(cutoff, node="a")  # b keeps its older summaries (say, a longer retention)
    kept: Any = fleet_rows(store)
    assert min(b for s, b in kept if s == 86400) == int(cutoff.timestamp())
    # Buckets before the cutoff now come from b's summaries alone.
    for step in (300, 3600, 86400):
        assert_ratio_matches(store, T0, cutoff - timedelta(seconds=1), step)
        points = q.fleet_ratio(store, T0, cutoff - timedelta(seconds=1), step)["points"]
        assert points and {p["nodes"] for p in points} == {1}
