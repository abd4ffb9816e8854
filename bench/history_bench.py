"""History benchmarks: ``python -m bench.history_bench [--pods 1000] [--rounds 5]
[--postgres URL]``.

In one run, on a SQLite file written by ``serve``'s embedded store (stdlib ``sqlite3``),
on one written by the SQLAlchemy store (the commands' and PostgreSQL's write path), and on
PostgreSQL when ``--postgres`` is given; reads always through the SQLAlchemy store, as the
dashboard API does:

- unchanged cycle: a 1000-pod ledger is written, then a new but identical ledger is
  submitted: the rows written must be 0;
- full churn: every pod of a 1000-pod node replaced at once (every interval closed, every
  new one opened), from ``submit()`` to committed; floor: the same number of rows inserted
  and updated by raw ``sqlite3`` executemany in one transaction;
- summary write: one node summary (of the 1000-pod ledger) written per minute, each in a
  transaction of its own (raw row, hourly roll-up, fleet roll-up), p50 and p95;
- summary API: 30 days of one node's 60 s summaries (43 200 rows); ``GET /api/v1/summary``
  over the whole window (default and 1 h steps), p50 and p95 over the rounds; floor:
  ``GET /api/v1/nodes`` on the same server.

Figures, never assertions: prints a table and, as its last line, one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from exporter.history import HistoryWriter, open_store
from exporter.history.changes import ChangeSet, state_of
from exporter.history.common import WritePath
from exporter.history.embedded import EmbeddedStore, open_embedded
from exporter.history.schema import node_summaries, nodes
from exporter.history.store import HistoryStore, count_rows
from reconciler.ledger import ContainerEntry, CPUCell, Ledger, PodEntry, PoolCounts

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def synthetic_ledger(pods: int, cpus: int, generation: int) -> Ledger:
    """``pods`` pods of 3 containers (1 exclusive CPU app, 2 pod-shared sidecars)."""
    containers: list[ContainerEntry] = []
    entries: list[PodEntry] = []
    for i in range(pods):
        ns, name = f"ns-{i % 20}", f"pod-{generation}-{i}"
        cpu = frozenset({i % cpus})
        containers.append(ContainerEntry(ns, name, "app", False, "pod_exclusive",
                                         "pod_exclusive", cpu, 1 << 30))
        for s in ("proxy", "logs"):
            containers.append(ContainerEntry(ns, name, s, True, "pod_shared", "pod_shared",
                                             frozenset(), 1 << 27))
        entries.append(PodEntry(ns, name, cpu, 2, 1, 0, 0, 0, 1, None, "spec",
                                uid=f"uid-{generation}-{i}"))
    cells = tuple(CPUCell(c, "node_shared", numa_node=c * 2 // cpus) for c in range(cpus))
    return Ledger(node_name="bench", online_cpus=cpus, numa_nodes=2, kubelet=(),
                  cpu_pools=PoolCounts(node_shared=cpus - min(pods, cpus),
                                       pod_exclusive=min(pods, cpus)),
                  cpu_pools_by_numa=(), memory_pools=(), pods=tuple(entries),
                  containers=tuple(containers), reclaimed_cpus=pods, reclaimable_cpus=0,
                  anomalies=(), cpu_map=cells)


async def write_and_wait(writer: HistoryWriter, ledger: Ledger, at: datetime) -> float:
    start = time.perf_counter()
    writer.submit(ledger, at)
    await writer.flush()
    return time.perf_counter() - start


async def bench_writes(writes: WritePath[Any], store: HistoryStore, pods: int, cpus: int,
                       rounds: int) -> dict[str, Any]:
    """``writes``: the write path under test; ``store``: the same database, read."""
    writer = HistoryWriter(writes, "bench", summary_interval=1e9)
    await writer.start()
    gen = 0
    first = await write_and_wait(writer, synthetic_ledger(pods, cpus, gen), T0)
    unchanged_rows = []
    churn = []
    churn_rows = []
    for r in range(rounds):
        before_rows = writer.rows_written_total
        before_tables = count_rows(store)
        await write_and_wait(writer, synthetic_ledger(pods, cpus, gen),
                             T0 + timedelta(seconds=2 * r + 1))
        unchanged_rows.append(writer.rows_written_total - before_rows +
                              sum(count_rows(store).values()) - sum(before_tables.values()))
        gen += 1
        before_rows = writer.rows_written_total
        churn.append(await write_and_wait(writer, synthetic_ledger(pods, cpus, gen),
                                          T0 + timedelta(seconds=2 * r + 2)))
        churn_rows.append(writer.rows_written_total - before_rows)
    await writer.close()
    return {"first_write_s": round(first, 4), "unchanged_cycle_rows": max(unchanged_rows),
            "full_churn_s_median": round(statistics.median(churn), 4),
            "full_churn_s_max": round(max(churn), 4), "full_churn_rows": churn_rows[0]}


def bench_summary_writes(store: WritePath[Any], pods: int, cpus: int, rounds: int
                         ) -> dict[str, Any]:
    summary = state_of(synthetic_ledger(pods, cpus, 0)).summary
    times = []
    for i in range(rounds):
        at = T0 + timedelta(seconds=60 * i + i % 7)
        start = time.perf_counter()
        store.write("bench-summaries", "bench", [ChangeSet(i + 1, at, at, summary=summary)])
        times.append(time.perf_counter() - start)
    return {"summary_write_p50_ms": round(percentile(times, 50) * 1000, 2),
            "summary_write_p95_ms": round(percentile(times, 95) * 1000, 2)}


def sqlite_floor(rows: int, rounds: int) -> float:
    """Raw sqlite3: close ``rows/2`` intervals by key and insert ``rows/2``, one commit."""
    times = []
    with tempfile.TemporaryDirectory() as d:
        db = sqlite3.connect(f"{d}/floor.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v TEXT, n INTEGER, "
                   "f TEXT, e TEXT)")
        db.execute("CREATE UNIQUE INDEX u ON t(k) WHERE e IS NULL")
        half = rows // 2
        for r in range(rounds + 1):
            start = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.executemany("UPDATE t SET e = ? WHERE k = ? AND e IS NULL",
                           [("x", f"{r - 1}-{i}") for i in range(half)])
            db.executemany("INSERT INTO t (k, v, n, f) VALUES (?, ?, ?, ?)",
                           [(f"{r}-{i}", "0-3", 4, "2026") for i in range(half)])
            db.execute("COMMIT")
            if r:
                times.append(time.perf_counter() - start)
        db.close()
    return statistics.median(times)


def fill_summaries(store: HistoryStore, days: int, interval: int) -> int:
    count = days * 86400 // interval
    base = {"online_cpus": 512, "cpus_reserved": 2, "cpus_node_shared": 100,
            "cpus_node_exclusive": 10, "cpus_pod_exclusive": 300, "cpus_pod_shared": 90,
            "cpus_pod_idle": 10, "containers_node_exclusive": 5,
            "containers_pod_exclusive": 1000, "containers_pod_shared": 2000,
            "containers_node_shared": 50, "pods": 1000, "reclaimed_cpus": 900,
            "reclaimable_cpus": 3, "anomalies": 0}
    store.write("summary-node", "bench", [ChangeSet(1, T0, T0, summary=base)])
    with store.write_transaction() as conn:
        node_id = conn.execute(nodes.select().where(nodes.c.name == "summary-node")) \
            .one().id
        rows = []
        for i in range(1, count):
            t = T0 + timedelta(seconds=interval * i)
            rows.append({"node_id": node_id, "at": t, "at_epoch": int(t.timestamp()),
                         **base, "cpus_pod_shared": 90 + i % 7})
            if len(rows) == 5000:
                conn.execute(node_summaries.insert(), rows)
                rows = []
        if rows:
            conn.execute(node_summaries.insert(), rows)
    store.rebuild_rollup("summary-node")
    return count


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def timed_gets(client: TestClient[Any, Any], path: str, params: dict[str, str],
                     rounds: int) -> tuple[list[float], list[Any]]:
    """``rounds`` GETs of ``path``: each one's seconds and JSON body; an answer other than
    200 ends the bench."""
    times, bodies = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        resp = await client.get(path, params=params)
        body = await resp.json()
        times.append(time.perf_counter() - start)
        if resp.status != 200:
            raise SystemExit(f"{path}: HTTP {resp.status}: {body}")
        bodies.append(body)
    return times, bodies


async def bench_summary_api(store: HistoryStore, rounds: int) -> dict[str, Any]:
    from exporter.history.api import add_routes

    count = fill_summaries(store, 30, 60)
    app = web.Application()
    add_routes(app, store)
    end = T0 + timedelta(days=30)
    window = {"node": "summary-node", "from": T0.isoformat(), "to": end.isoformat()}
    out: dict[str, Any] = {"summary_rows": count}
    async with TestClient(TestServer(app)) as client:
        samples: list[int] = []

        async def timed(path: str, params: dict[str, str]) -> list[float]:
            times, bodies = await timed_gets(client, path, params, rounds)
            samples.extend(sum(p["samples"] for p in body["points"])
                           for body in bodies if "points" in body)
            return times

        await timed("/api/v1/summary", window)  # warm up
        floor = await timed("/api/v1/nodes", {})
        auto = await timed("/api/v1/summary", window)
        hourly = await timed("/api/v1/summary", {**window, "step": "1h"})
    if set(samples) != {count}:
        raise SystemExit(f"summary answers covered {set(samples)} samples, not {count}")
    out.update({
        "floor_nodes_p95_ms": round(percentile(floor, 95) * 1000, 2),
        "summary_auto_step_p50_ms": round(percentile(auto, 50) * 1000, 2),
        "summary_auto_step_p95_ms": round(percentile(auto, 95) * 1000, 2),
        "summary_1h_step_p50_ms": round(percentile(hourly, 50) * 1000, 2),
        "summary_1h_step_p95_ms": round(percentile(hourly, 95) * 1000, 2),
    })
    return out


async def run_backend(name: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    store = open_store(url)
    writes: EmbeddedStore | HistoryStore = open_embedded(url) if name == "embedded" else store
    figures: dict[str, Any] = {"backend": name}
    figures.update(await bench_writes(writes, store, args.pods, args.cpus, args.rounds))
    figures.update(bench_summary_writes(writes, args.pods, args.cpus, args.summary_writes))
    figures.update(await bench_summary_api(store, args.api_rounds))
    if writes is not store:
        writes.close()
    store.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--cpus", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--api-rounds", type=int, default=40)
    parser.add_argument("--summary-writes", type=int, default=200)
    parser.add_argument("--postgres", default=None, metavar="URL",
                        help="also run on this (empty, disposable) PostgreSQL database")
    args = parser.parse_args(argv)
    results = []
    for backend in ("embedded", "sqlite"):
        with tempfile.TemporaryDirectory() as d:
            results.append(asyncio.run(run_backend(
                backend, f"sqlite:///{Path(d) / 'bench.db'}", args)))
    if args.postgres:
        results.append(asyncio.run(run_backend("postgresql", args.postgres, args)))
    floor = sqlite_floor(results[0]["full_churn_rows"], args.rounds)
    summary: dict[str, Any] = {"pods": args.pods, "containers": args.pods * 3,
                               "sqlite_raw_floor_s": round(floor, 4), "backends": results}
    for r in results:
        print(f"[{r['backend']}]")
        print(f"  unchanged {args.pods}-pod cycle: {r['unchanged_cycle_rows']} rows written")
        print(f"  full churn ({r['full_churn_rows']} rows): median "
              f"{r['full_churn_s_median']:.3f} s, max {r['full_churn_s_max']:.3f} s "
              f"(target <= 1 s; {r['full_churn_s_median'] / floor:.1f}x raw sqlite3 floor "
              f"{floor:.3f} s)")
        print(f"  summary write of an unchanged node: p50 {r['summary_write_p50_ms']} ms, "
              f"p95 {r['summary_write_p95_ms']} ms")
        print(f"  /api/v1/summary over 30 days ({r['summary_rows']} summaries): p95 "
              f"{r['summary_auto_step_p95_ms']} ms auto step, {r['summary_1h_step_p95_ms']} "
              f"ms 1h step (target <= 200 ms; floor /api/v1/nodes p95 "
              f"{r['floor_nodes_p95_ms']} ms)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
