"""The dashboard API over a populated store, on SQLite and PostgreSQL: filters, pagination,
bad parameters (400, never 500), SQL metacharacters, and the OpenAPI document."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from histsim import HOSTILE, SimNode
from openapi_spec_validator import validate as validate_spec
from sqlalchemy import create_engine

from bench.pgcluster import create_database, drop_database
from exporter.history import HistoryWriter, open_store
from exporter.history.api import OPENAPI_EXTRA_KEY, ROUTES, add_routes, openapi_document
from exporter.history.store import HistoryStore

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
STEPS = 60


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=10 * i)


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


async def populate(store: HistoryStore) -> None:
    for n, seed in (("node-a", 1), ("node-b", 2), ("o'hara; --", 3)):
        sim = SimNode(n, seed, pods=12, hostile=True)
        writer = HistoryWriter(store, n, summary_interval=10)
        await writer.start()
        for i in range(STEPS):
            if i:
                sim.step()
            writer.submit(sim.ledger(), at(i))
        await writer.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def populated_url(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One populated database per backend for the whole module (the API only reads)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'history.db'}"
    else:
        server = request.getfixturevalue("pg_server_url")
        url = create_database(server)
    store = open_store(url)
    asyncio.run(populate(store))
    store.close()
    yield url
    if request.param == "postgresql":
        drop_database(server, url)


@pytest.fixture
async def client(populated_url: str) -> AsyncIterator[TestClient[Any, Any]]:
    store = open_store(populated_url, mode="readonly")
    app = web.Application()
    add_routes(app, store)
    async with TestClient(TestServer(app)) as c:
        yield c
    store.close()


async def get(client: TestClient[Any, Any], path: str, status: int = 200,
              **params: Any) -> Any:
    resp = await client.get("/api/v1" + path, params=params)
    body = await resp.json()
    assert resp.status == status, body
    return body


async def all_pages(client: TestClient[Any, Any], path: str, **params: Any) -> list[Any]:
    items: list[Any] = []
    cursor = None
    while True:
        extra = {"cursor": cursor} if cursor else {}
        body = await get(client, path, **params, **extra)
        items.extend(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return items


async def test_nodes(client: TestClient[Any, Any]) -> None:
    body = await get(client, "/nodes")
    assert sorted(n["name"] for n in body["items"]) == ["node-a", "node-b", "o'hara; --"]
    assert body["next_cursor"] is None
    assert all(n["online_cpus"] == 64 for n in body["items"])
    page = await get(client, "/nodes", limit=2)
    assert len(page["items"]) == 2 and page["next_cursor"]


async def test_assignment_filters_and_pagination(client: TestClient[Any, Any]) -> None:
    everything = await all_pages(client, "/assignments", limit=1000)
    paged = await all_pages(client, "/assignments", limit=7)
    assert [i["id"] for i in paged] == [i["id"] for i in everything]
    assert len({i["id"] for i in paged}) == len(paged)
    for field, value in (("node", "node-b"), ("namespace", "prod"), ("container", "c1"),
                         ("assignment", "pod_shared")):
        got = await all_pages(client, "/assignments", **{field: value}, limit=50)
        assert got and all(i[field] == value for i in got)
        assert len(got) == sum(1 for i in everything if i[field] == value)
    when = at(STEPS // 2) + timedelta(seconds=3)
    current = await all_pages(client, "/assignments", node="node-a", at=iso(when), limit=1000)
    assert current
    for i in current:
        assert i["valid_from"] <= iso(when)
        assert i["valid_to"] is None or i["valid_to"] > iso(when)
    # Unix seconds mean the same instant.
    same = await all_pages(client, "/assignments", node="node-a", at=str(when.timestamp()),
                           limit=1000)
    assert same == current
    window = await all_pages(client, "/assignments", node="node-a", limit=1000,
                             **{"from": iso(at(10)), "to": iso(at(12))})
    assert {i["id"] for i in current} <= {i["id"] for i in everything}
    assert all(i["valid_from"] < iso(at(12)) for i in window)


async def test_sql_metacharacters_are_plain_text(client: TestClient[Any, Any]) -> None:
    everything = await all_pages(client, "/assignments", limit=1000)
    hostile_pods = {i["pod"] for i in everything if i["pod"].split("-")[0] in
                    {h.split("-")[0] for h in HOSTILE}}
    assert hostile_pods
    for pod in hostile_pods:
        got = await all_pages(client, "/assignments", pod=pod, limit=1000)
        assert got and all(i["pod"] == pod for i in got)
    for needle in ("%", "_", "' OR '1'='1", "\\", '"', "; DELETE FROM nodes"):
        assert (await get(client, "/assignments", pod=needle))["items"] == []
    got = await get(client, "/nodes")
    assert len(got["items"]) == 3  # nothing was deleted
    assert (await get(client, "/summary", node="o'hara; --",
                      **{"from": iso(at(0)), "to": iso(at(STEPS))}))["points"]


async def test_anomalies(client: TestClient[Any, Any]) -> None:
    every = await all_pages(client, "/anomalies", limit=1000)
    assert every
    open_ = await all_pages(client, "/anomalies", state="open")
    resolved = await all_pages(client, "/anomalies", state="resolved")
    assert len(open_) + len(resolved) == len(every)
    assert all(a["resolved_at"] is None for a in open_)
    kind = every[0]["kind"]
    assert all(a["kind"] == kind for a in await all_pages(client, "/anomalies", kind=kind))


async def test_summary_and_fleet_ratio(client: TestClient[Any, Any]) -> None:
    window = {"from": iso(at(0)), "to": iso(at(STEPS))}
    body = await get(client, "/summary", node="node-a", step="60", **window)
    assert body["step"] == 60
    assert len(body["points"]) == STEPS * 10 // 60
    assert sum(p["samples"] for p in body["points"]) == STEPS
    point = body["points"][0]
    assert point["cpus"]["node_shared"] + point["cpus"]["pod_exclusive"] == 64
    assert (await get(client, "/summary", node="node-a", step="5m", **window))["step"] == 300
    assert (await get(client, "/summary", node="nope", **window))["points"] == []
    ratio = await get(client, "/fleet/ratio", step="1m", **window)
    assert ratio["points"] and all(p["nodes"] == 3 for p in ratio["points"])
    p = ratio["points"][0]
    assert p["ratio"] is None or p["ratio"] == pytest.approx(
        p["pod_shared_cpus"] / p["pod_exclusive_cpus"], rel=1e-4)
    one = await get(client, "/fleet/ratio", step="1m", node="node-a", **window)
    assert all(p["nodes"] == 1 for p in one["points"])


@pytest.mark.parametrize("path, params", [
    ("/summary", {"node": "node-a", "step": "60"}), ("/fleet/ratio", {"step": "1m"}),
    ("/assignments", {})])
async def test_answers_are_encoded_off_the_event_loop(
        client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch,
        path: str, params: dict[str, str]) -> None:
    """A summary can be megabytes of JSON: encoding it on the loop delayed every scrape
    served by the same process. The encoder must run where no event loop runs."""
    from exporter.history import api

    on_loop: list[bool] = []
    real = api._dumps

    def dumps(obj: Any) -> str:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(obj)

    monkeypatch.setattr(api, "_dumps", dumps)
    window = {"from": iso(at(0)), "to": iso(at(STEPS))}
    body = await get(client, path, **params, **window)
    assert body  # decoded, so the bytes were JSON
    assert on_loop == [False]


# Valid RFC 3339 whose offset puts the instant before year 1 or after year 9999 in UTC.
OFFSET_OUT_OF_RANGE = ("0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01")
TIME_ROUTES = {"/assignments": ("at", "from", "to"), "/anomalies": ("at", "from", "to"),
               "/gaps": ("at", "from", "to"), "/summary": ("from", "to"),
               "/fleet/ratio": ("from", "to")}

BAD = [
    ("/assignments", {"limit": "0"}, "limit"),
    ("/assignments", {"limit": "abc"}, "limit"),
    ("/assignments", {"limit": "100000"}, "limit"),
    ("/assignments", {"cursor": "-1"}, "cursor"),
    ("/assignments", {"cursor": "' OR 1=1"}, "cursor"),
    ("/assignments", {"at": "yesterday"}, "at"),
    ("/assignments", {"at": "1e999"}, "at"),
    ("/assignments", {"at": "2026-13-01T00:00:00Z"}, "at"),
    ("/assignments", {"at": "1", "from": "2"}, "at"),
    ("/assignments", {"from": "2000", "to": "1000"}, "from"),
    ("/assignments", {"assignment": "exclusive"}, "assignment"),
    ("/assignments", {"namespace": ""}, "namespace"),
    ("/assignments", {"pod": "x" * 300}, "pod"),
    ("/assignments", {"pod": "a\x00b"}, "pod"),
    ("/assignments", {"bogus": "1"}, "bogus"),
    ("/assignments", {"limit": ["1", "2"]}, "limit"),
    ("/anomalies", {"state": "closed"}, "state"),
    ("/anomalies", {"kind": "nope"}, "kind"),
    ("/summary", {}, "node"),
    ("/summary", {"node": "a", "step": "0"}, "step"),
    ("/summary", {"node": "a", "step": "fast"}, "step"),
    ("/summary", {"node": "a", "step": "1", "from": "0", "to": "100000000"}, "step"),
    ("/fleet/ratio", {"step": "-5"}, "step"),
    ("/nodes", {"node": "x"}, "node"),
    ("/nodes", {"limit": "\u0661\u0660"}, "limit"),  # Arabic-Indic "10": ASCII digits only
    ("/summary", {"node": "a", "step": "\u0661\u0662\u0660"}, "step"),
    ("/assignments", {"at": "\u0661\u0667\u0669\u0665\u0663\u0663\u0668\u0669\u0660\u0660"},
     "at"),
    *[(path, {"node": "a", name: when} if path == "/summary" else {name: when}, name)
      for when in OFFSET_OUT_OF_RANGE
      for path, names in TIME_ROUTES.items() for name in names],
]


@pytest.mark.parametrize(("path", "params", "names"), BAD)
async def test_bad_parameters_answer_400(client: TestClient[Any, Any], path: str,
                                         params: dict[str, Any], names: str) -> None:
    query = [(k, v) for k, vs in params.items() for v in (vs if isinstance(vs, list) else [vs])]
    resp = await client.get("/api/v1" + path, params=query)
    body = await resp.json()
    assert resp.status == 400, body
    assert body["status"] == 400
    assert names in body["error"]
    assert "\n" not in body["error"] and "Traceback" not in body["error"]


async def test_read_only(client: TestClient[Any, Any]) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        resp = await client.request(method, "/api/v1/assignments")
        assert resp.status == 405


async def test_database_down_answers_503() -> None:
    engine = create_engine("postgresql+psycopg://x@/x?host=/nonexistent",
                           connect_args={"connect_timeout": 1})
    app = web.Application()
    add_routes(app, HistoryStore(engine))
    async with TestClient(TestServer(app)) as c:
        resp = await c.get("/api/v1/nodes")
        assert resp.status == 503
        assert (await resp.json())["error"] == "history database unavailable"


def route_set(app: web.Application) -> set[str]:
    out = set()
    for r in app.router.routes():
        info = r.resource.get_info() if r.resource else {}
        path = info.get("path") or info.get("formatter")
        if r.method in ("GET", "POST") and path and path.startswith("/api/v1"):
            out.add(path)
    return out


def test_openapi_document_is_valid_and_matches_the_routes(tmp_path: Any) -> None:
    doc = openapi_document()
    validate_spec(doc)
    app = web.Application()
    add_routes(app, open_store(f"sqlite:///{tmp_path}/h.db"))
    assert route_set(app) == set(doc["paths"])
    for route in ROUTES:
        op = doc["paths"]["/api/v1" + route.path]["get"]
        assert [p["name"] for p in op["parameters"]] == [p.name for p in route.params]
    merged = openapi_document({"/api/v1/ledger": {"get": {
        "responses": {"200": {"description": "the ledger"}}}}})
    validate_spec(merged)
    assert "/api/v1/ledger" in merged["paths"]


async def test_openapi_served_with_extra_paths(client: TestClient[Any, Any],
                                               tmp_path: Any) -> None:
    doc = await get(client, "/openapi.json")
    validate_spec(doc)
    assert doc == openapi_document()
    app = web.Application()
    app[OPENAPI_EXTRA_KEY] = {"/api/v1/cpumap": {"get": {
        "responses": {"200": {"description": "x"}}}}}
    add_routes(app, open_store(f"sqlite:///{tmp_path}/h.db"))
    async with TestClient(TestServer(app)) as c:
        resp = await c.get("/api/v1/openapi.json")
        assert "/api/v1/cpumap" in (await resp.json())["paths"]


async def test_queries_do_not_block_the_event_loop(client: TestClient[Any, Any]) -> None:
    # Many concurrent requests complete (each runs in a worker thread).
    bodies = await asyncio.gather(*[get(client, "/assignments", limit=50) for _ in range(20)])
    assert all(len(b["items"]) == 50 for b in bodies)
