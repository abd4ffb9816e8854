"""Hostile query parameters on every history API route, through aiohttp's test client over
a real SQLite history written by the real writer from reconciled fixture ledgers: each
answer is 200 or a 400 with one error line, never a 500."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from exporter.commands.snapshot import ledger_from_fixture
from exporter.history import HistoryWriter, open_store
from exporter.history.api import ROUTES, add_routes
from fuzz.budget import fuzz, ran, timeout
from fuzz.live import SCENARIOS

pytestmark = pytest.mark.timeout(timeout(180))

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


async def populate(url: str) -> None:
    store = open_store(url)
    writer = HistoryWriter(store, "fuzz-node", summary_interval=10)
    await writer.start()
    for i, name in enumerate(["sidecar-hybrid", "database-pod-scope", "legacy-padding",
                              "sidecar-hybrid"]):
        writer.submit(ledger_from_fixture(str(SCENARIOS / name), "fuzz-node"),
                      T0 + timedelta(seconds=30 * i))
    await writer.close()
    store.close()


class Api:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="podres-fuzz-api-"))
        url = f"sqlite:///{self.root / 'history.db'}"
        self.loop = asyncio.Runner()
        self.loop.run(populate(url))
        self.store = open_store(url, mode="readonly")
        app = web.Application()
        add_routes(app, self.store)

        async def start() -> TestClient[Any, Any]:
            client: TestClient[Any, Any] = TestClient(TestServer(app))
            await client.start_server()
            return client
        self.client = self.loop.run(start())

    def get(self, path: str, params: list[tuple[str, str]]) -> tuple[int, bytes]:
        async def fetch() -> tuple[int, bytes]:
            async with self.client.get(path, params=params) as resp:
                return resp.status, await resp.read()
        return self.loop.run(asyncio.wait_for(fetch(), 30))

    def close(self) -> None:
        self.loop.run(self.client.close())
        self.store.close()
        self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def api() -> Iterator[Api]:
    handle = Api()
    yield handle
    handle.close()


VALUES = st.sampled_from([
    "", "0", "-1", "1", "100", "1001", "٣", "1_0", " 5", "9" * 40, "1e3", "60", "5m", "0s",
    "1h30m", "367d", "nan", "inf", "2026-11-30T08:00:30Z", "2026-11-30T08:00:30+01:00",
    "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01", "1764489630", "-9" * 30,
    "fuzz-node", "o'hara; --", "\x00", "a" * 300, "open", "resolved", "any", "pod_exclusive",
    "node_exclusive", "unknown_cpu",
]) | st.text(max_size=24)


@st.composite
def query(draw: st.DrawFn) -> tuple[str, list[tuple[str, str]]]:
    route = draw(st.sampled_from(ROUTES))
    names = [p.name for p in route.params]
    keys = draw(st.lists(st.sampled_from([*names, "bogus", "LIMIT"]), max_size=4))
    return route.path, [(key, draw(VALUES)) for key in keys]


@fuzz()
@given(request=query())
def test_history_api_parameters(api: Api, request: tuple[str, list[tuple[str, str]]]) -> None:
    ran("history API query parameters")
    path, params = request
    status, body = api.get("/api/v1" + path, params)
    assert status in (200, 400), (status, body[:300])
    answer = json.loads(body)
    if status == 400:
        message = answer["error"]
        assert message and "\n" not in message, answer
