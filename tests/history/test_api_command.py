"""``podres-exporter api`` as an operator meets it (issue 31, Deploy; issue 33): ``GET /``
is a JSON index, every error is JSON with ``X-Content-Type-Options: nosniff``, ``/metrics``
has the process's figures and request counters (every route at 0 from the start,
``promtool check metrics`` clean), and SIGTERM ends it within 10 s whatever is in flight
(a query stuck on a frozen PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from foundation.helpers import CLI, cli_env

from bench.pgcluster import PgCluster
from exporter.cli import build_parser
from exporter.commands.api import serve_api
from tests.history.test_cli import populate
from tests.history.test_serve_frozen_db import frozen

BUDGET = 10.0  # what the issue and the Deployment's grace period allow
PROMTOOL = Path("/usr/bin/promtool")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[str]:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    await populate(url, steps=3)
    args = build_parser().parse_args(["api", "--history.url", url,
                                      "--web.listen-address", "127.0.0.1:0"])
    stop = asyncio.Event()
    ready: asyncio.Queue[str] = asyncio.Queue()
    task = asyncio.create_task(serve_api(args, stop=stop, on_ready=ready.put_nowait))
    try:
        yield await asyncio.wait_for(ready.get(), 30)
    finally:
        stop.set()
        assert await task == 0


async def test_the_index_and_every_error_are_json(api: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(api + "/") as resp:
            assert resp.status == 200
            index = await resp.json()
            assert index["links"]["openapi"] == "/api/v1/openapi.json"
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
        for method, path, status in (("GET", "/nope", 404), ("POST", "/api/v1/nodes", 405),
                                     ("GET", "/api/v1/nodes?limit=<b>x</b>", 400),
                                     ("POST", "/api/v1/fleet/plan", 415)):
            async with session.request(method, api + path) as resp:
                assert resp.status == status, path
                assert resp.content_type == "application/json", path
                assert (await resp.json())["status"] == status
                assert resp.headers["X-Content-Type-Options"] == "nosniff", path


def _value(text: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    assert match, series
    return float(match.group(1))


async def test_metrics_counts_requests_from_zero(api: str) -> None:
    nodes = 'podres_api_requests_total{route="/api/v1/nodes",method="GET",status="2xx"}'
    async with aiohttp.ClientSession() as session:
        async with session.get(api + "/metrics") as resp:
            assert resp.status == 200
            first = await resp.text()
        assert _value(first, nodes) == 0
        assert _value(first, 'podres_api_requests_total{route="/api/v1/fleet/plan",'
                             'method="POST",status="4xx"}') == 0
        assert _value(first, "process_resident_memory_bytes") > 0
        assert _value(first, "process_start_time_seconds") > 1e9
        async with session.get(api + "/api/v1/nodes") as resp:
            assert resp.status == 200
        async with session.get(api + "/nope") as resp:
            assert resp.status == 404
        async with session.get(api + "/metrics") as resp:
            second = await resp.text()
    assert _value(second, nodes) == 1
    assert _value(second, 'podres_api_requests_total{route="unmatched",method="GET",'
                          'status="4xx"}') == 1
    if not PROMTOOL.exists():
        pytest.skip("promtool not installed: apt-get install -y prometheus")
    check = subprocess.run([str(PROMTOOL), "check", "metrics"], input=second, text=True,
                           capture_output=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.postgres
async def test_sigterm_ends_api_within_its_budget_with_a_query_in_flight(
        own_pg_cluster: PgCluster) -> None:
    """Before: ``api`` drained requests for up to 60 s, then waited for the query's thread:
    20-30 s after SIGTERM, or as long as the database stayed frozen."""
    await populate(own_pg_cluster.url, steps=3)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        CLI, "api", "--web.listen-address", f"127.0.0.1:{port}",
        "--history.url", own_pg_cluster.url, env=cli_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(base + "/healthz") as resp:
                        if resp.status == 200:
                            break
                assert time.monotonic() < deadline, "api did not start"
                await asyncio.sleep(0.2)
            with frozen(own_pg_cluster):
                query = asyncio.ensure_future(session.get(
                    base + "/api/v1/nodes", timeout=aiohttp.ClientTimeout(total=60)))
                await asyncio.sleep(2.0)
                assert not query.done()
                started = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), BUDGET)
                except TimeoutError:
                    pytest.fail(f"api still running {BUDGET:g} s after SIGTERM")
                took = time.monotonic() - started
                query.cancel()
                with contextlib.suppress(BaseException):
                    await query
        assert proc.stderr is not None
        err = (await proc.stderr.read()).decode()
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        print(f"api stopped {took:.1f} s after SIGTERM")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
