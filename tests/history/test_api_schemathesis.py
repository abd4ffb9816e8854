"""The OpenAPI document checked against the live API by schemathesis: generated requests
(valid and invalid) never give a 500, and every response matches the documented status
codes, content type and schema."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

import requests  # noqa: E402
from aiohttp import web  # noqa: E402
from histsim import SimNode  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402

from exporter.history import HistoryWriter, open_store  # noqa: E402
from exporter.history.api import ROUTES, add_routes, openapi_document  # noqa: E402


async def _populate(url: str) -> None:
    store = open_store(url)
    sim = SimNode("node-a", 1, pods=10, hostile=True)
    writer = HistoryWriter(store, "node-a", summary_interval=10)
    await writer.start()
    t0 = datetime.now(UTC) - timedelta(hours=1)
    for i in range(30):
        if i:
            sim.step()
        writer.submit(sim.ledger(), t0 + timedelta(seconds=10 * i))
    await writer.close()
    store.close()


class ServerThread:
    def __init__(self, url: str) -> None:
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.base = ""
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        store = open_store(self.url, mode="readonly")
        app = web.Application()
        add_routes(app, store)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = runner.addresses[0][1]
        self.base = f"http://127.0.0.1:{port}"
        self.runner = runner
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())
        store.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def api_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("api") / "history.db"
    url = f"sqlite:///{path}"
    asyncio.run(_populate(url))
    server = ServerThread(url)
    yield server.base
    server.stop()


CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.negative_data_rejection,
]

OPERATIONS = [f"{route.path}" for route in ROUTES] + ["/openapi.json"]


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("path", OPERATIONS)
def test_api_conforms_to_its_openapi_document(api_base: str, path: str, mode: str) -> None:
    schema = schemathesis.openapi.from_dict(openapi_document())
    operation = schema["/api/v1" + path]["GET"]
    if mode == "negative" and not operation.query:
        pytest.skip("no parameters to make invalid")
    strategy = operation.as_strategy(GenerationMode(mode))
    session = requests.Session()

    @settings(max_examples=60, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def check(case: Any) -> None:
        case.call_and_validate(base_url=api_base, session=session, checks=CHECKS)

    check()


def test_overlong_request_line_is_refused_as_documented(api_base: str) -> None:
    # aiohttp refuses a request line over 8 KiB before any handler runs, in plain text:
    # the document must say so, or a client generated from it would choke on the answer.
    resp = requests.get(f"{api_base}/api/v1/anomalies", params={"node": "x" * 9000},
                        timeout=10)
    assert resp.status_code == 400
    documented = openapi_document()["paths"]["/api/v1/anomalies"]["get"]["responses"]["400"]
    assert resp.headers["Content-Type"].split(";")[0] in documented["content"]
