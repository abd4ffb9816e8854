"""``POST /api/v1/fleet/plan`` against hostile and large bodies (issue 33, D1 and D3), on a
real aiohttp server over loopback, reading a SQLite history written by the embedded path:
an alias bomb is one 400, a body sent as anything but a manifest is 415, valid manifests up
to 1 MiB are planned whole (every pod, however the body arrives), and more is 413 whether
sent with a length or in chunks."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from exporter.history.api import add_routes
from exporter.history.fleet_api import MAX_BODY
from tests.history.backends import History
from tests.history.test_placement_state import T0, state, write

ROUTE = "/api/v1/fleet/plan"
YAML = {"Content-Type": "application/yaml"}


def alias_bomb() -> str:
    """Nested ``kind: List`` items, each ten aliases of the one before: 10**9 pod
    templates in a few hundred bytes (the probe's 757-byte body, rebuilt)."""
    lines = ["kind: List", "items:",
             "- &a {kind: Pod, metadata: {name: p}, spec: {containers: [{name: c}]}}"]
    previous = "a"
    for anchor in "bcdefghij":
        lines.append(f"- &{anchor} {{kind: List, items: [{', '.join(['*' + previous] * 10)}]}}")
        previous = anchor
    return "\n".join(lines) + "\n"


def pod(name: str, padding: int) -> str:
    """A Guaranteed one-CPU pod carrying ``padding`` bytes in an annotation (real manifests
    grow that way: a config blob, a long command line)."""
    q = '{cpu: "1", memory: 1Gi}'
    return (f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: shop\n"
            f"  annotations: {{blob: {'x' * padding}}}\n"
            f"spec:\n  containers:\n  - name: app\n    image: a\n"
            f"    resources: {{requests: {q}, limits: {q}}}\n")


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    path = tmp_path_factory.mktemp("fleet-route") / "history.db"
    history = History(f"sqlite:///{path}", "embedded")
    try:
        write(history, "node-b", 1, T0, state(frozenset(range(1, 8))))
        yield history
    finally:
        history.close()


@pytest.fixture
async def client(embedded: History) -> AsyncIterator[TestClient[Any, Any]]:
    app = web.Application()
    add_routes(app, embedded.reader)
    async with TestClient(TestServer(app)) as c:
        yield c


async def error(resp: Any) -> str:
    body = await resp.json()
    assert body["status"] == resp.status
    return str(body["error"])


async def test_an_alias_bomb_is_one_400(client: TestClient[Any, Any]) -> None:
    body = alias_bomb()
    assert len(body) < 800
    started = time.monotonic()
    resp = await client.post(ROUTE, data=body, headers=YAML)
    assert resp.status == 400
    assert "alias" in await error(resp)
    assert time.monotonic() - started < 30  # only stops a regression from hanging the run


@pytest.mark.parametrize(("body", "words"), [
    ("a: &a [*a]\n", "contains it"),
    ("---\n" * 10_001, "documents"),
    ("kind: List\nitems:\n" + "".join(
        f"- {{kind: Pod, metadata: {{name: p{i}}}, spec: {{containers: [{{name: c}}]}}}}\n"
        for i in range(1_001)), "pod templates"),
    ("kind: Pod\nmetadata: {name: wide}\nspec:\n  containers:\n"
     + "".join(f"  - {{name: c{i}}}\n" for i in range(1_001)), "containers in one pod"),
])
async def test_manifests_past_the_limits_are_one_400(client: TestClient[Any, Any], body: str,
                                                     words: str) -> None:
    resp = await client.post(ROUTE, data=body, headers=YAML)
    assert resp.status == 400
    message = await error(resp)
    assert words in message and "\n" not in message


@pytest.mark.parametrize("content_type", [
    "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/octet-stream", "text/html"])
async def test_a_body_not_sent_as_a_manifest_is_415(client: TestClient[Any, Any],
                                                    content_type: str) -> None:
    resp = await client.post(ROUTE, data=pod("api", 10).encode(),
                             headers={"Content-Type": content_type})
    assert resp.status == 415
    assert "Content-Type" in await error(resp)


@pytest.mark.parametrize("kib", [400, 700, 1000])
async def test_valid_manifests_up_to_1_mib_are_planned_whole(
        client: TestClient[Any, Any], kib: int) -> None:
    """Before: the handler kept what had arrived at its first read: 400 for a body cut in
    the middle of a document, or 200 with only the first pod planned."""
    padding = (kib << 10) // 2 - 400
    body = pod("first", padding) + "---\n" + pod("second", padding)
    assert (kib - 1) << 10 < len(body) <= min(kib << 10, MAX_BODY)
    resp = await client.post(ROUTE, data=body.encode(), headers=YAML)
    assert resp.status == 200, await resp.text()
    [node] = (await resp.json())["nodes"]
    assert [p["name"] for p in node["pods"]] == ["first", "second"]
    assert node["admitted"] is True


async def _chunks(total: int, size: int = 64 << 10) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        piece = b"# " + b"x" * (min(size, total - sent) - 3) + b"\n"
        sent += len(piece)
        yield piece


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_past_1_mib_is_413(client: TestClient[Any, Any], chunked: bool) -> None:
    """Before: a chunked body of any size was cut at what had arrived, and answered 200."""
    total = MAX_BODY + (2 << 20)
    data: Any = _chunks(total) if chunked else b"".join([c async for c in _chunks(total)])
    resp = await client.post(ROUTE, data=data, headers=YAML)
    assert resp.status == 413
    assert "larger than" in await error(resp)
