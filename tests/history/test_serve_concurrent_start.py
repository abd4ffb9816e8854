"""Concurrent first start, end to end (issue 33, item 5): ``serve`` processes started at
the same instant on one new history database (five on a SQLite file, two on a fresh
PostgreSQL database) all come up, answer /healthz and write history. Real processes,
a simulated kubelet over real gRPC; test_concurrent_start.py holds the deterministic
reproduction of the race."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import create_engine, inspect, text

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "tests" / "data" / "scenarios" / "database-pod-scope"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nodes_written(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("node_summaries"):
                return set()
            rows = conn.execute(text(
                "SELECT DISTINCT n.name FROM nodes n JOIN node_summaries s "
                "ON s.node_id = n.id")).all()
            return {r[0] for r in rows}
    except Exception:  # the schema is being made: not yet
        return set()
    finally:
        engine.dispose()


async def _healthy(session: aiohttp.ClientSession, address: str) -> bool:
    try:
        async with session.get(f"http://{address}/healthz") as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def _start_together(url: str, count: int, sim: Any, tmp: Path) -> None:
    """Start ``count`` serve processes at once on ``url``; return once every one of them
    answers /healthz and has written a summary of its node."""
    names = [f"node-{i}" for i in range(count)]
    addresses = [f"127.0.0.1:{_free_port()}" for _ in names]
    logs = [tmp / f"{n}.log" for n in names]
    env = dict(os.environ, GRPC_VERBOSITY="ERROR", PYTHONPATH=str(REPO))
    procs = []
    try:
        for name, address, log in zip(names, addresses, logs, strict=True):
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "exporter.cli", "serve",
                "--web.listen-address", address, "--node-name", name,
                "--sysfs", "/nonexistent-sysfs", "--podresources.socket", sim.socket_path,
                "--poll.interval", "200ms", "--history.url", url,
                "--history.summary-interval", "1s",
                "--cgroup.root", "", "--proc.root", "", "--log.level", "warn",
                stdout=log.open("wb"), stderr=asyncio.subprocess.STDOUT, env=env))
        deadline = time.monotonic() + 180  # only stops a broken test from hanging
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                dead = [p for p in procs if p.returncode is not None]
                healthy = [await _healthy(session, a) for a in addresses]
                written = await asyncio.to_thread(_nodes_written, url)
                if all(healthy) and written == set(names):
                    break
                if dead or time.monotonic() > deadline:
                    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in logs)
                    raise AssertionError(
                        f"{len(dead)} exited; healthy {healthy}; wrote {sorted(written)}\n"
                        f"{tails}")
                await asyncio.sleep(0.3)
    finally:
        for p in procs:
            if p.returncode is None:
                p.terminate()
        for p in procs:
            await p.wait()
    assert all(p.returncode == 0 for p in procs), [p.returncode for p in procs]


async def test_five_serve_on_one_new_sqlite_file(tmp_path: Path, start_sim: Any) -> None:
    sim = await start_sim(SCENARIO)
    await _start_together(f"sqlite:///{tmp_path / 'history.db'}", 5, sim, tmp_path)


@pytest.mark.postgres
async def test_two_serve_on_one_new_postgres_database(pg_url: str, tmp_path: Path,
                                                      start_sim: Any) -> None:
    sim = await start_sim(SCENARIO)
    await _start_together(pg_url, 2, sim, tmp_path)
