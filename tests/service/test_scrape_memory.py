"""What scrapes leave behind: the node-sized answers (/metrics, the ledger, the CPU map) hand
the allocator's free pages back once they stop for a while (``exporter.runtime.IdleRelease``),
and /metrics sends the exposition as rendered, then its live lines, without joining them."""

from __future__ import annotations

import asyncio
from typing import cast

from aiohttp.test_utils import TestClient, TestServer

from exporter.runtime import IdleRelease
from exporter.service import Exporter
from exporter.web.app import RELEASE_KEY, build_app


class _Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


async def test_a_burst_of_answers_is_followed_by_one_release() -> None:
    release = _Counter()
    idle = IdleRelease(0.02, release)
    for _ in range(5):  # one burst: each answer pushes the release on
        idle.note()
    assert release.calls == 0  # nothing while the answers come
    await asyncio.sleep(0.2)
    assert release.calls == 1
    idle.note()  # the next burst
    await asyncio.sleep(0.2)
    assert release.calls == 2


class _Parts:
    """Stands in for the Exporter: a /metrics body in two parts, and no ledger yet."""

    ready = True
    last_success = 0.0

    def metrics_body(self, encoding: str = "identity") -> tuple[bytes, bytes]:
        return b"podres_cpus 1\n" * 40_000, b"podres_up 1\n"

    def current(self) -> None:
        return None


async def test_metrics_is_sent_as_its_parts_and_followed_by_a_release() -> None:
    app = build_app(cast(Exporter, _Parts()))
    release = _Counter()
    app[RELEASE_KEY] = IdleRelease(0.02, release)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        response = await client.get("/healthz")
        assert response.status == 200
        await asyncio.sleep(0.2)
        assert release.calls == 0  # a small answer leaves nothing to give back
        response = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        body = await response.read()
        head, tail = _Parts().metrics_body()
        assert body == head + tail
        assert response.headers["Content-Length"] == str(len(head) + len(tail))
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert response.headers["X-Content-Type-Options"] == "nosniff"  # the middleware's
        await asyncio.sleep(0.2)
        assert release.calls == 1
        # HEAD: the same headers, no body.
        response = await client.head("/metrics")
        assert response.status == 200 and await response.read() == b""
        assert response.headers["Content-Length"] == str(len(head) + len(tail))
