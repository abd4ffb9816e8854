"""Fleet-size history benchmark: ``python -m bench.history_fleet [--nodes 200] [--days 30]
[--runs 3] [--postgres URL]``.

A PostgreSQL history holding ``--nodes`` nodes × ``--days`` days of node summaries (one per
node every ``--interval`` seconds, as ``serve`` writes them by default: 8.6 million rows for
200 nodes over 30 days, with the hourly and fleet roll-ups the writers keep), written in
time order as a fleet of exporters would, ending now. The dashboard API (``add_routes`` on
an aiohttp server, the same handlers ``serve`` and ``api`` mount) then answers, ``--runs``
times over the same data, each ``--rounds`` times:

- ``/api/v1/fleet/ratio``: the default window (the last 24 h), 7 days, 30 days (automatic
  steps) and 30 days by day;
- ``/api/v1/summary`` of one node: the last 24 h and 30 days.

Then ``--writers`` exporters (threads, a store each) write one summary a minute for
``--writes`` minutes past the end, all at the same times, so that they add to the same
fleet roll-up buckets at once: p50 and p95 of a summary write (its transaction: raw row,
hourly and fleet roll-ups), and whether any failed (a deadlock would).

Figures: p50 and p95 of each over all runs, and each run's p95, against the floor of
``/api/v1/nodes?limit=1`` on the same server (HTTP, a pooled connection, one indexed row).
Target: every p95 ≤ 200 ms.

PostgreSQL is a throwaway cluster started as the tests start it (bench/pgcluster.py)
unless ``--postgres`` names a server (a new database is created on it and dropped).
Figures, never assertions: prints a table and, as its last line, one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import text

from bench.history_bench import percentile, timed_gets
from bench.pgcluster import create_database, drop_database, start_cluster
from exporter.history import open_store
from exporter.history.changes import ChangeSet
from exporter.history.schema import SUMMARY_COLUMNS
from exporter.history.store import HistoryStore

TARGET_P95_MS = 200.0

# Every summary column as an SQL expression of the node id ``n`` and the time ``e``; the
# two the fleet ratio reads vary with both, so that buckets differ.
_VALUES = {
    "online_cpus": "128", "cpus_reserved": "2", "cpus_node_shared": "30",
    "cpus_node_exclusive": "4", "cpus_pod_exclusive": "60 + (e / 3600 + n) % 11",
    "cpus_pod_shared": "20 + (e / 60 + 7 * n) % 23", "cpus_pod_idle": "3",
    "containers_node_exclusive": "2", "containers_pod_exclusive": "60",
    "containers_pod_shared": "80", "containers_node_shared": "40", "pods": "70",
    "reclaimed_cpus": "50", "reclaimable_cpus": "2", "anomalies": "(e / 600 + n) % 2",
}


@contextmanager
def postgres_database(server: str | None) -> Iterator[str]:
    """A new database on ``server``, or on a throwaway cluster of this run's own."""
    cluster = None
    if server is None:
        cluster = start_cluster()
        if cluster is None:
            raise SystemExit("PostgreSQL binaries (initdb, pg_ctl) not installed: "
                             "apt-get install -y postgresql-15, or give --postgres URL")
        server = cluster.url
    url = create_database(server)
    try:
        yield url
    finally:
        drop_database(server, url)
        if cluster is not None:
            cluster.destroy()


def fill(store: HistoryStore, nodes: int, days: int, interval: int, end: int
         ) -> dict[str, Any]:
    """``nodes`` × ``days`` of summaries ending at ``end`` (unix seconds), a day per
    statement, in time order; then the hourly and fleet roll-ups and statistics."""
    start = end - days * 86400
    t0 = time.perf_counter()
    with store.write_transaction() as conn:
        conn.execute(text(
            "INSERT INTO nodes (name, first_seen, last_seen, online_cpus) "
            "SELECT 'node-' || lpad(n::text, 4, '0'), to_timestamp(:s), to_timestamp(:e), 128 "
            "FROM generate_series(1, :nodes) AS n"), {"s": start, "e": end, "nodes": nodes})
    columns = ", ".join(SUMMARY_COLUMNS)
    values = ", ".join(_VALUES[c] for c in SUMMARY_COLUMNS)
    insert = text(
        f"INSERT INTO node_summaries (node_id, at, at_epoch, {columns}) "
        f"SELECT n, to_timestamp(e), e, {values} "
        f"FROM generate_series(:lo, :hi, :step) AS e CROSS JOIN "
        f"(SELECT id AS n FROM nodes) AS ids ORDER BY e, n")
    rows = 0
    for day in range(days):
        lo = start + day * 86400
        hi = min(lo + 86400 - interval, end)
        with store.write_transaction() as conn:
            rows += conn.execute(insert, {"lo": lo, "hi": hi, "step": interval}).rowcount
    filled = time.perf_counter() - t0
    hours = store.rebuild_rollup()
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
        fleet_rows = conn.execute(text("SELECT count(*) FROM fleet_summaries")).scalar_one()
    return {"summary_rows": rows, "hourly_rows": hours, "fleet_rows": fleet_rows,
            "fill_s": round(filled, 1),
            "rollup_and_analyze_s": round(time.perf_counter() - t0 - filled, 1)}


def cases(end: datetime, days: int) -> list[tuple[str, str, dict[str, str]]]:
    window = {"from": (end - timedelta(days=days)).isoformat(), "to": end.isoformat()}
    week = {"from": (end - timedelta(days=min(7, days))).isoformat(), "to": end.isoformat()}
    return [
        ("fleet_ratio_24h", "/api/v1/fleet/ratio", {}),
        ("fleet_ratio_7d", "/api/v1/fleet/ratio", week),
        (f"fleet_ratio_{days}d", "/api/v1/fleet/ratio", window),
        (f"fleet_ratio_{days}d_1d_step", "/api/v1/fleet/ratio", {**window, "step": "1d"}),
        ("summary_24h", "/api/v1/summary", {"node": "node-0001"}),
        (f"summary_{days}d", "/api/v1/summary", {"node": "node-0001", **window}),
    ]


async def measure(store: HistoryStore, end: datetime, args: argparse.Namespace
                  ) -> dict[str, Any]:
    from exporter.history.api import add_routes

    app = web.Application()
    add_routes(app, store)
    out: dict[str, Any] = {}
    async with TestClient(TestServer(app)) as client:

        async def timed(path: str, params: dict[str, str], rounds: int
                        ) -> tuple[list[float], Any]:
            times, bodies = await timed_gets(client, path, params, rounds)
            return times, bodies[-1] if bodies else None

        for path, params in (("/api/v1/nodes", {"limit": "1"}),
                             *[(p, q) for _, p, q in cases(end, args.days)]):
            await client.get(path, params=params)  # warm up: connection, plan cache
        floor, _ = await timed("/api/v1/nodes", {"limit": "1"}, args.rounds * args.runs)
        out["floor_nodes_p95_ms"] = round(percentile(floor, 95) * 1000, 2)
        times: dict[str, list[list[float]]] = {name: [] for name, _, _ in cases(end, args.days)}
        for _ in range(args.runs):  # the cases in turn, so that a burst of load hits one run
            for name, path, params in cases(end, args.days):
                run_times, body = await timed(path, params, args.rounds)
                times[name].append(run_times)
                check(name, path, body, args.nodes)
                out[name] = {"points": len(body["points"]), "step": body["step"]}
        for name, runs in times.items():
            pooled = [t for run in runs for t in run]
            out[name].update({
                "p50_ms": round(percentile(pooled, 50) * 1000, 2),
                "p95_ms": round(percentile(pooled, 95) * 1000, 2),
                "runs_p95_ms": [round(percentile(run, 95) * 1000, 2) for run in runs]})
    return out


def concurrent_writes(url: str, writers: int, writes: int, end: int) -> dict[str, Any]:
    """``writers`` nodes writing a summary at the same instants, ``writes`` times after a
    first one (not timed: the store's connection and compiled statements are made then)."""
    stores = [open_store(url) for _ in range(writers)]
    barrier = threading.Barrier(writers)
    times: list[float] = []
    errors: list[str] = []
    values = {c: 7 for c in SUMMARY_COLUMNS}

    def run(i: int) -> None:
        for k in range(writes + 1):
            at = datetime.fromtimestamp(end + 60 * (k + 1) + i % 60, UTC)
            barrier.wait()
            start = time.perf_counter()
            try:
                stores[i].write(f"node-{i + 1:04d}", "bench",
                                [ChangeSet(k + 1, at, at, summary=values)])
            except Exception as exc:  # reported in the figures
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
            if k:
                times.append(time.perf_counter() - start)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for store in stores:
        store.close()
    return {"writers": writers, "writes": len(times), "failed": len(errors),
            "errors": sorted(set(errors))[:3],
            "p50_ms": round(percentile(times, 50) * 1000, 2),
            "p95_ms": round(percentile(times, 95) * 1000, 2)}


def check(name: str, path: str, body: Any, nodes: int) -> None:
    points = body["points"]
    if not points:
        raise SystemExit(f"{name}: no points")
    if path.endswith("/fleet/ratio") and max(p["nodes"] for p in points) != nodes:
        raise SystemExit(f"{name}: a point covers {max(p['nodes'] for p in points)} "
                         f"nodes, not {nodes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--interval", type=int, default=60,
                        help="seconds between a node's summaries")
    parser.add_argument("--rounds", type=int, default=30, help="requests per case and run")
    parser.add_argument("--runs", type=int, default=3,
                        help="measurements of every case over the same data")
    parser.add_argument("--writers", type=int, default=50,
                        help="exporters writing summaries at the same instants")
    parser.add_argument("--writes", type=int, default=10, help="summaries each of them writes")
    parser.add_argument("--postgres", default=None, metavar="URL",
                        help="a server's maintenance database to create the bench database on "
                             "(default: a throwaway cluster)")
    args = parser.parse_args()
    end_epoch = int(time.time()) // 60 * 60
    end = datetime.fromtimestamp(end_epoch, UTC)
    with postgres_database(args.postgres) as url:
        store = open_store(url)
        try:
            figures: dict[str, Any] = {"backend": "postgresql", "nodes": args.nodes,
                                       "days": args.days, "interval_s": args.interval}
            figures.update(fill(store, args.nodes, args.days, args.interval, end_epoch))
            print(f"filled {figures['summary_rows']} summaries, {figures['hourly_rows']} "
                  f"hourly rows, {figures['fleet_rows']} fleet rows in {figures['fill_s']} s "
                  f"(+{figures['rollup_and_analyze_s']} s roll-up, ANALYZE)", flush=True)
            figures.update(asyncio.run(measure(store, end, args)))
            writes = concurrent_writes(url, min(args.writers, args.nodes), args.writes,
                                       end_epoch)
        finally:
            store.close()
    p95s = {k: v["p95_ms"] for k, v in figures.items() if isinstance(v, dict)}
    print(f"{'query':<26} {'points':>7} {'step':>7} {'p50 ms':>9} {'p95 ms':>9}  p95 per run")
    for name, v in figures.items():
        if isinstance(v, dict):
            print(f"{name:<26} {v['points']:>7} {v['step']:>7} {v['p50_ms']:>9} "
                  f"{v['p95_ms']:>9}  {v['runs_p95_ms']}")
    print(f"floor /api/v1/nodes?limit=1 p95 {figures['floor_nodes_p95_ms']} ms; "
          f"target every p95 <= {TARGET_P95_MS:g} ms")
    print(f"{writes['writers']} writers adding to the same fleet buckets: summary write p50 "
          f"{writes['p50_ms']} ms, p95 {writes['p95_ms']} ms, {writes['failed']} of "
          f"{writes['writes']} failed")
    figures["concurrent_summary_writes"] = writes
    figures["worst_p95_ms"] = max(p95s.values())
    figures["target_p95_ms"] = TARGET_P95_MS
    figures["target_met"] = figures["worst_p95_ms"] <= TARGET_P95_MS
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
