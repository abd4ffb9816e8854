"""The dashboard backend: a read-only JSON API over the history store (aiohttp).

``add_routes(app, store)`` mounts it (``serve`` does, and the standalone ``api`` command);
``openapi_document()`` describes it. ``serve`` on SQLite passes a :class:`LazyReadStore`:
the SQLAlchemy read store, queries and all, is loaded on the first request, so that a node
nobody queries never loads it (docs/design.md#history).

Each route's query parameters are declared once, in :data:`ROUTES`, and used both to
validate requests and to write the OpenAPI document, so the two cannot drift apart. Bad
parameters answer 400 with a message naming the parameter; an unreachable database answers
503; nothing a client sends gives a 500.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from exporter import __version__
from exporter.history import fleet_api
from exporter.history import window as w
from exporter.history.common import SUMMARY_POOLS, describe_error, is_database_error
from exporter.history.timeutil import TimeError, now, parse_time
from reconciler.ledger import ANOMALY_KINDS, ASSIGNMENTS

if TYPE_CHECKING:
    from exporter.history.store import HistoryStore

log = logging.getLogger("podres.history.api")

PREFIX = "/api/v1"
MAX_LIMIT = 1000
MAX_NAME = 253
_INTEGER = re.compile(r"-?[0-9]{1,18}")


class ParamError(ValueError):
    """A query parameter the API cannot use; answered with 400 and this message."""


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str  # name | enum | time | int | cursor | step
    description: str
    enum: tuple[str, ...] = ()
    required: bool = False
    default: Any = None
    minimum: int = 1
    maximum: int = MAX_LIMIT

    def schema(self) -> dict[str, Any]:
        if self.kind == "enum":
            out: dict[str, Any] = {"type": "string", "enum": list(self.enum)}
        elif self.kind == "int":
            out = {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        elif self.kind == "name":
            out = {"type": "string", "minLength": 1, "maxLength": MAX_NAME}
        elif self.kind == "time":
            out = {"type": "string",
                   "description": "RFC 3339 (2026-11-30T09:15:00Z) or unix seconds"}
        elif self.kind == "step":
            out = {"type": "string", "description": "seconds (60) or a duration (5m, 1h)"}
        else:  # cursor
            out = {"type": "string", "description": "next_cursor of the previous page"}
        if self.default is not None:
            out["default"] = self.default
        return out

    def parse(self, raw: str) -> Any:
        if "\x00" in raw:
            raise ParamError(f"{self.name}: NUL characters are not allowed")
        if self.kind == "name":
            if not raw:
                raise ParamError(f"{self.name}: must not be empty")
            if len(raw) > MAX_NAME:
                raise ParamError(f"{self.name}: longer than {MAX_NAME} characters")
            return raw
        if self.kind == "enum":
            if raw not in self.enum:
                raise ParamError(f"{self.name}: {raw[:64]!r} is not one of "
                                 f"{', '.join(self.enum)}")
            return raw
        if self.kind == "time":
            try:
                return parse_time(raw)
            except TimeError as exc:
                raise ParamError(f"{self.name}: {exc}") from None
        if self.kind == "int":
            # ASCII digits only (``int`` also takes other scripts' digits, blanks and "_").
            if not _INTEGER.fullmatch(raw):
                raise ParamError(f"{self.name}: {raw[:64]!r} is not an integer")
            value = int(raw)
            if not self.minimum <= value <= self.maximum:
                raise ParamError(f"{self.name}: must be between {self.minimum} and "
                                 f"{self.maximum}")
            return value
        if self.kind == "step":
            return parse_step(self.name, raw)
        # cursor
        if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
            raise ParamError(f"{self.name}: invalid cursor (use next_cursor from a previous "
                             "page)")
        return int(raw)


def parse_step(name: str, raw: str) -> int:
    import argparse

    from exporter.flags import parse_duration

    text = raw.strip()
    try:
        if not text.isascii():  # str.isdigit and float take other scripts' digits
            raise ValueError(text)
        seconds = float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text)
    except (ValueError, argparse.ArgumentTypeError):
        raise ParamError(f"{name}: {raw[:64]!r} is not a step (seconds like 60, or a "
                         "duration like 5m)") from None
    if not 1 <= seconds <= 366 * 86400:
        raise ParamError(f"{name}: must be between 1 second and 366 days")
    return int(seconds)


_NODE = Param("node", "name", "Node name (exact).")
_LIMIT = Param("limit", "int", "Page size.", default=100)
_CURSOR = Param("cursor", "cursor", "Opaque cursor: the next_cursor of the previous page.")
_AT = Param("at", "time", "A point in time: rows current then.")
_FROM = Param("from", "time", "Start of the window (rows overlapping it).")
_TO = Param("to", "time", "End of the window.")
_STEP = Param("step", "step", "Resolution of the time series (default: about 500 points, "
              "at least 60 s).")
_NAMESPACE = Param("namespace", "name", "Namespace (exact).")
_POD = Param("pod", "name", "Pod name (exact).")
_CONTAINER = Param("container", "name", "Container name (exact).")


@dataclass(frozen=True, slots=True)
class Route:
    path: str
    summary: str
    params: tuple[Param, ...]
    schema: str  # component name of the 200 response
    handler_name: str
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


ROUTES: tuple[Route, ...] = (
    Route("/nodes", "Nodes that have written history", (_LIMIT, _CURSOR), "NodePage",
          "nodes"),
    Route("/assignments", "Container assignment intervals",
          (_NODE, _NAMESPACE, _POD, _CONTAINER,
           Param("assignment", "enum", "Assignment (CPU).", enum=ASSIGNMENTS),
           _AT, _FROM, _TO, _LIMIT, _CURSOR),
          "AssignmentPage", "assignments",
          "Which container held which CPUs when. `at` gives the intervals current at that "
          "instant; `from`/`to` those overlapping the window; neither gives all."),
    Route("/anomalies", "Anomaly intervals",
          (_NODE, Param("kind", "enum", "Anomaly kind.", enum=ANOMALY_KINDS),
           _NAMESPACE, _POD, _CONTAINER,
           Param("state", "enum", "open, resolved or any.", enum=("open", "resolved", "any"),
                 default="any"),
           _AT, _FROM, _TO, _LIMIT, _CURSOR),
          "AnomalyPage", "anomalies"),
    Route("/gaps", "Explicit gaps in a node's history (writes dropped during an outage)",
          (_NODE, _AT, _FROM, _TO, _LIMIT, _CURSOR), "GapPage", "gaps"),
    Route("/summary", "A node's summaries as a time series",
          (Param("node", "name", "Node name (exact).", required=True), _FROM, _TO, _STEP),
          "Summary", "summary",
          "Pool sizes, container counts, reclaimed and reclaimable cores, averaged per "
          "step. `from` defaults to 24 h before `to`, `to` to now."),
    Route("/fleet/ratio", "Fleet ratio of pod_shared to pod_exclusive CPUs over time",
          (_NODE, _FROM, _TO, _STEP), "FleetRatio", "fleet_ratio",
          "Per step, each node's samples are averaged, then summed over the nodes; "
          "`ratio` is null when no CPU is pod_exclusive."),
)


def parse_params(route: Route, query: Mapping[str, str] | Any) -> dict[str, Any]:
    allowed = {p.name: p for p in route.params}
    out: dict[str, Any] = {p.name: p.default for p in route.params}
    seen: set[str] = set()
    for key in query:
        if key not in allowed:
            names = ", ".join(allowed) or "none"
            raise ParamError(f"unknown parameter {key[:64]!r} (this endpoint takes: {names})")
        if key in seen:
            continue
        seen.add(key)
        values = query.getall(key) if hasattr(query, "getall") else [query[key]]
        if len(values) > 1:
            raise ParamError(f"{key}: given more than once")
        out[key] = allowed[key].parse(values[0])
    for p in route.params:
        if p.required and p.name not in seen:
            raise ParamError(f"{p.name}: required")
    if out.get("at") is not None and (out.get("from") is not None
                                      or out.get("to") is not None):
        raise ParamError("at: use either at or from/to, not both")
    if out.get("from") is not None and out.get("to") is not None and out["from"] > out["to"]:
        raise ParamError("from: must not be later than to")
    return out


def _window(p: dict[str, Any]) -> w.Window:
    return w.Window(at=p.get("at"), start=p.get("from"), end=p.get("to"))


def _series_window(p: dict[str, Any]) -> tuple[datetime, datetime, int]:
    start, end = w.default_window(p.get("from"), p.get("to"), now())
    if start > end:
        raise ParamError("from: must not be later than to")
    step = p.get("step") or w.auto_step(start, end)
    try:
        w.check_points(start, end, step)
    except ValueError as exc:
        raise ParamError(f"step: {exc}") from None
    return start, end, step


class StoreUnavailable(Exception):
    """The read store could not be opened (answered with 503; tried again next time)."""


class LazyReadStore:
    """The SQLAlchemy read-only store of ``url``, opened on first use (``serve`` on SQLite
    writes through the embedded store and loads SQLAlchemy only when the API is queried).
    A failed open raises :class:`StoreUnavailable` and is tried again on the next use."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._store: HistoryStore | None = None
        self._lock = threading.Lock()

    def get(self) -> HistoryStore:
        with self._lock:
            if self._store is None:
                try:
                    from exporter.history.connect import open_store

                    self._store = open_store(self.url, mode="readonly")
                except Exception as exc:  # a missing driver too: the metrics go on
                    raise StoreUnavailable(describe_error(exc)) from exc
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def _run(store: HistoryStore, name: str, p: dict[str, Any]) -> Any:
    from exporter.history import queries as q

    if name == "nodes":
        return q.list_nodes(store, limit=p["limit"], cursor=p["cursor"]).to_json()
    if name == "assignments":
        return q.assignments(store, node=p["node"], namespace=p["namespace"], pod=p["pod"],
                             container=p["container"], assignment=p["assignment"],
                             window=_window(p), limit=p["limit"],
                             cursor=p["cursor"]).to_json()
    if name == "anomalies":
        return q.anomalies(store, node=p["node"], kind=p["kind"], namespace=p["namespace"],
                           pod=p["pod"], container=p["container"], state=p["state"],
                           window=_window(p), limit=p["limit"], cursor=p["cursor"]).to_json()
    if name == "gaps":
        return q.gaps(store, node=p["node"], window=_window(p), limit=p["limit"],
                      cursor=p["cursor"]).to_json()
    if name == "summary":
        start, end, step = _series_window(p)
        return q.summary(store, p["node"], start, end, step)
    if name == "fleet_ratio":
        start, end, step = _series_window(p)
        return q.fleet_ratio(store, start, end, step, node=p["node"])
    raise AssertionError(name)


def error_response(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status,
                             dumps=_dumps)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _handler(store: HistoryStore | LazyReadStore, route: Route) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            params = parse_params(route, request.query)
            # Validation that needs no database is done; the query runs in a thread.
            if route.handler_name in ("summary", "fleet_ratio"):
                _series_window(params)
            # The query and the JSON encoding of its answer (a summary can be megabytes)
            # both run in a worker thread, so that scrapes are answered meanwhile.
            body = await asyncio.to_thread(_answer, store, route.handler_name, params)
        except ParamError as exc:
            return error_response(400, str(exc))
        except StoreUnavailable as exc:
            log.warning("history API cannot open the database",
                        extra={"route": route.path, "error": str(exc)})
            return error_response(503, f"history database unavailable: {exc}")
        except Exception as exc:
            if is_database_error(exc):
                log.warning("history API database error",
                            extra={"route": route.path, "error": describe_error(exc)})
                return error_response(503, "history database unavailable")
            # A bug: logged with its traceback, answered without one.
            log.exception("history API request failed", extra={"route": route.path})
            return error_response(500, "internal error")
        return web.Response(body=body, content_type="application/json", charset="utf-8")
    return handle


def _answer(store: HistoryStore | LazyReadStore, name: str, p: dict[str, Any]) -> bytes:
    if isinstance(store, LazyReadStore):
        store = store.get()
    return _dumps(_run(store, name, p)).encode("utf-8")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def add_routes(app: web.Application, store: HistoryStore | LazyReadStore) -> None:
    """Mount the read-only history API (and its OpenAPI document) on ``app``."""
    for route in ROUTES:
        app.router.add_get(PREFIX + route.path, _handler(store, route))
    def resolve() -> HistoryStore:
        return store.get() if isinstance(store, LazyReadStore) else store

    fleet_api.add_fleet_plan_route(app, PREFIX, resolve=resolve, error_response=error_response,
                                   unavailable=StoreUnavailable)

    async def openapi(request: web.Request) -> web.StreamResponse:
        extra = request.app.get(OPENAPI_EXTRA_KEY, {})
        return web.json_response(openapi_document(extra), dumps=_dumps)

    app.router.add_get(PREFIX + "/openapi.json", openapi)


OPENAPI_EXTRA_KEY: web.AppKey[dict[str, Any]] = web.AppKey("podres_openapi_extra", dict)


# -- OpenAPI ---------------------------------------------------------------------------

_TIME = {"type": "string", "format": "date-time"}
_NTIME = {"type": "string", "format": "date-time", "nullable": True}
_NSTR = {"type": "string", "nullable": True}
_NUM = {"type": "number", "nullable": True}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props,
            "required": required if required is not None else list(props),
            "additionalProperties": False}


def _page(item: str) -> dict[str, Any]:
    return _obj({"items": {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}},
                 "next_cursor": {"type": "string", "nullable": True}})


SCHEMAS: dict[str, Any] = {
    "Error": _obj({"error": {"type": "string"}, "status": {"type": "integer"}}),
    "Node": _obj({"name": {"type": "string"}, "first_seen": _TIME, "last_seen": _TIME,
                  "online_cpus": {"type": "integer", "nullable": True}}),
    "NodePage": _page("Node"),
    "Assignment": _obj({
        "id": {"type": "integer"}, "node": {"type": "string"}, "pod_uid": _NSTR,
        "namespace": {"type": "string"}, "pod": {"type": "string"},
        "container": {"type": "string"}, "sidecar": {"type": "boolean"},
        "assignment": {"type": "string", "enum": list(ASSIGNMENTS)},
        "memory_assignment": {"type": "string", "enum": list(ASSIGNMENTS)},
        "cpus": {"type": "string", "description": "Linux cpuset list, e.g. 0-3,8"},
        "cpu_count": {"type": "integer"}, "memory_bytes": {"type": "integer"},
        "numa_nodes": {"type": "array", "items": {"type": "integer"}},
        "valid_from": _TIME, "valid_to": _NTIME}),
    "AssignmentPage": _page("Assignment"),
    "Anomaly": _obj({
        "id": {"type": "integer"}, "node": {"type": "string"}, "kind": {"type": "string"},
        "namespace": _NSTR, "pod": _NSTR, "container": _NSTR,
        "subject": {"type": "string"}, "detail": {"type": "string"},
        "first_seen": _TIME, "last_seen": _TIME, "resolved_at": _NTIME}),
    "AnomalyPage": _page("Anomaly"),
    "Gap": _obj({"id": {"type": "integer"}, "node": {"type": "string"}, "from": _TIME,
                 "to": _TIME, "dropped_writes": {"type": "integer"},
                 "reason": {"type": "string"}}),
    "GapPage": _page("Gap"),
    "SummaryPoint": _obj({
        "t": _TIME, "samples": {"type": "integer"},
        "cpus": _obj({p: _NUM for p in SUMMARY_POOLS}),
        "containers": _obj({a: _NUM for a in ASSIGNMENTS}),
        "online_cpus": _NUM, "pods": _NUM, "reclaimed_cpus": _NUM,
        "reclaimable_cpus": _NUM, "anomalies": _NUM}),
    "Summary": _obj({"node": {"type": "string"}, "from": _TIME, "to": _TIME,
                     "step": {"type": "integer"},
                     "points": {"type": "array",
                                "items": {"$ref": "#/components/schemas/SummaryPoint"}}}),
    "FleetRatioPoint": _obj({"t": _TIME, "nodes": {"type": "integer"},
                             "pod_shared_cpus": {"type": "number"},
                             "pod_exclusive_cpus": {"type": "number"},
                             "ratio": _NUM}),
    "FleetRatio": _obj({"from": _TIME, "to": _TIME, "step": {"type": "integer"},
                        "points": {"type": "array",
                                   "items": {"$ref": "#/components/schemas/FleetRatioPoint"}}}),
}


def _json_response(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


def _bad_request() -> dict[str, Any]:
    response = _json_response(
        "Bad parameters: JSON naming the parameter; a request line longer than the HTTP "
        "server's limit (8 KiB) is refused before the API sees it, in plain text", "Error")
    response["content"]["text/plain"] = {"schema": {"type": "string"}}
    return response


def openapi_document(extra_paths: dict[str, Any] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.0 document of the history API; ``extra_paths`` (path → path item) adds
    routes served by others on the same server (``serve``'s ledger and CPU map)."""
    paths: dict[str, Any] = {}
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.handler_name,
            "summary": route.summary,
            "parameters": [{"name": p.name, "in": "query", "required": p.required,
                            "description": p.description, "schema": p.schema()}
                           for p in route.params],
            "responses": {
                "200": _json_response("OK", route.schema),
                "400": _bad_request(),
                "503": _json_response("History database unavailable", "Error"),
            },
        }
        if route.description:
            op["description"] = route.description
        paths[PREFIX + route.path] = {"get": op}
    paths[PREFIX + "/openapi.json"] = {"get": {
        "operationId": "openapi", "summary": "This document",
        "responses": {"200": {"description": "OpenAPI 3.0 document", "content": {
            "application/json": {"schema": {"type": "object"}}}}}}}
    paths[PREFIX + fleet_api.PATH] = fleet_api.path_item()
    for path, item in (extra_paths or {}).items():
        paths[path] = copy.deepcopy(item)
    return {
        "openapi": "3.0.3",
        "info": {"title": "podres-exporter dashboard API", "version": __version__,
                 "description": "Read-only history of CPU and memory assignments, anomalies "
                                "and node summaries recorded by podres-exporter."},
        "paths": paths,
        "components": {"schemas": {**copy.deepcopy(SCHEMAS),
                                   "FleetPlan": fleet_api.schema()}},
    }
