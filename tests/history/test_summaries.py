"""Node summaries: the hourly roll-up, its back-filling migration, and the series the API
computes from it, checked against a brute-force computation over the raw rows."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from backends import History
from sqlalchemy import create_engine, select

from exporter.history import open_store
from exporter.history import queries as q
from exporter.history.changes import ChangeSet
from exporter.history.connect import configure_sqlite
from exporter.history.schema import (
    SUMMARY_COLUMNS,
    node_summaries,
    node_summaries_hourly,
    nodes,
)
from exporter.history.store import HEAD_REVISION, HistoryStore

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)


def summary_values(rng: random.Random) -> dict[str, int]:
    return {c: rng.randint(0, 500) for c in SUMMARY_COLUMNS}


def write_summaries(store: HistoryStore, node: str, count: int, seed: int,
                    interval: int = 60, offset: int = 17) -> None:
    rng = random.Random(seed)
    sets = [ChangeSet(i + 1, T0 + timedelta(seconds=offset + interval * i),
                      T0, summary=summary_values(rng)) for i in range(count)]
    for chunk in range(0, len(sets), 100):
        store.write(node, "w", sets[chunk:chunk + 100])


def brute_force(store: HistoryStore, node: str | None, start: datetime, end: datetime,
                step: int) -> dict[tuple[int, str], tuple[int, dict[str, float]]]:
    with store.read() as conn:
        rows = conn.execute(select(node_summaries, nodes.c.name)
                            .join(nodes, nodes.c.id == node_summaries.c.node_id)).all()
    acc: dict[tuple[int, str], list[Any]] = {}
    for r in rows:
        if not start.timestamp() <= r.at_epoch <= end.timestamp():
            continue
        if node is not None and r.name != node:
            continue
        key = (r.at_epoch - r.at_epoch % step, r.name)
        a = acc.setdefault(key, [0, dict.fromkeys(SUMMARY_COLUMNS, 0.0)])
        a[0] += 1
        for c in SUMMARY_COLUMNS:
            a[1][c] += getattr(r, c)
    return {k: (n, {c: v / n for c, v in sums.items()}) for k, (n, sums) in acc.items()}


@pytest.mark.parametrize("step", [60, 600, 3600, 7200])
def test_summary_series_match_the_raw_rows(history: History, step: int) -> None:
    store = history
    write_summaries(store, "a", 6 * 60, seed=1)
    write_summaries(store, "b", 6 * 60, seed=2)
    for start, end in ((T0 + timedelta(minutes=37), T0 + timedelta(hours=5, minutes=11)),
                       (T0, T0 + timedelta(hours=6)),
                       (T0 + timedelta(hours=2), T0 + timedelta(hours=2, minutes=30))):
        got = q.summary(store, "a", start, end, step)
        want = brute_force(store, "a", start, end, step)
        assert len(got["points"]) == len(want)
        for p in got["points"]:
            b = int(datetime.fromisoformat(p["t"]).timestamp())
            n, avg = want[(b, "a")]
            assert p["samples"] == n
            assert p["cpus"]["pod_shared"] == pytest.approx(avg["cpus_pod_shared"], abs=1e-3)
            assert p["containers"]["node_shared"] == pytest.approx(
                avg["containers_node_shared"], abs=1e-3)
            assert p["reclaimed_cpus"] == pytest.approx(avg["reclaimed_cpus"], abs=1e-3)
        ratio = q.fleet_ratio(store, start, end, step)
        fleet = brute_force(store, None, start, end, step)
        assert len(ratio["points"]) == len({b for b, _ in fleet})
        for p in ratio["points"]:
            b = int(datetime.fromisoformat(p["t"]).timestamp())
            per_node = [want_n for key, want_n in fleet.items() if key[0] == b]
            assert p["nodes"] == len(per_node)
            assert p["pod_shared_cpus"] == pytest.approx(
                sum(a["cpus_pod_shared"] for _, a in per_node), abs=1e-2)
            assert p["pod_exclusive_cpus"] == pytest.approx(
                sum(a["cpus_pod_exclusive"] for _, a in per_node), abs=1e-2)


def test_repeated_summary_time_is_kept_once(history: History) -> None:
    store = history
    write_summaries(store, "a", 3, seed=1)
    write_summaries(store, "a", 3, seed=1)  # a restarted writer repeating the same times
    with store.read() as conn:
        (samples,) = conn.execute(select(node_summaries_hourly.c.samples)).one()
    assert samples == 3


def test_migration_0002_back_fills_the_roll_up(history_url: str) -> None:
    kwargs: dict[str, Any] = {}
    engine = create_engine(history_url, **kwargs)
    if engine.dialect.name == "sqlite":
        configure_sqlite(engine, "create")
    old = HistoryStore(engine)
    old.migrate("0001")
    assert old.revision() == "0001"
    rng = random.Random(5)
    with old.write_transaction() as conn:
        conn.execute(nodes.insert().values(id=1, name="a", first_seen=T0, last_seen=T0))
        rows = []
        for i in range(200):
            t = T0 + timedelta(seconds=30 + 60 * i)
            rows.append({"node_id": 1, "at": t, "at_epoch": int(t.timestamp()),
                         **summary_values(rng)})
        conn.execute(node_summaries.insert(), rows)
    old.close()
    store = open_store(history_url)
    assert store.revision() == HEAD_REVISION
    with store.read() as conn:
        hourly = {r.hour_epoch: r for r in conn.execute(select(node_summaries_hourly))}
    assert sorted(hourly) == sorted({r["at_epoch"] - r["at_epoch"] % 3600 for r in rows})
    for h, r in hourly.items():
        mine = [x for x in rows if x["at_epoch"] - x["at_epoch"] % 3600 == h]
        assert r.samples == len(mine)
        assert r.hour == datetime.fromtimestamp(h, UTC)
        for c in SUMMARY_COLUMNS:
            assert getattr(r, f"sum_{c}") == sum(x[c] for x in mine)
    # And the writer keeps adding to it.
    store.write("a", "w", [ChangeSet(1, T0 + timedelta(seconds=5), T0,
                                     summary=summary_values(rng))])
    with store.read() as conn:
        first = conn.execute(select(node_summaries_hourly.c.samples)
                             .where(node_summaries_hourly.c.hour_epoch ==
                                    int(T0.timestamp()))).scalar_one()
    assert first == hourly[int(T0.timestamp())].samples + 1


def test_prune_removes_whole_hours_of_the_roll_up(history: History) -> None:
    store = history
    write_summaries(store, "a", 180, seed=3, offset=0)
    store.prune(T0 + timedelta(minutes=90))
    with store.read() as conn:
        hours = sorted(conn.execute(select(node_summaries_hourly.c.hour_epoch)).scalars())
    assert hours == [int((T0 + timedelta(hours=h)).timestamp()) for h in (1, 2)]
