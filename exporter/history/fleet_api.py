"""``POST /api/v1/fleet/plan``: ``plan --fleet`` as a dashboard API route (docs/plan.md#fleet,
docs/history.md#dashboard-api). The body is the manifest (YAML or JSON, as ``plan -f``
reads it); the answer is ``plan --fleet -o json``'s. It reads the database and writes
nothing: a POST only because a manifest does not fit in a query string."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from exporter.errors import UserError
from exporter.history.common import describe_error, is_database_error

if TYPE_CHECKING:
    from exporter.history.store import HistoryStore

log = logging.getLogger("podres.history")

PATH = "/fleet/plan"
MAX_BODY = 1 << 20  # a manifest of a few hundred templates; more is not a manifest
# What a manifest is sent as; a form or an upload of anything else is refused (415), so that
# a browser's cross-site form post, which cannot send these, never reaches the planner.
CONTENT_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml",
                 "application/json", "text/plain")


def _plan(resolve: Callable[[], HistoryStore], text: str) -> bytes:
    from exporter.history.fleetread import answer_json, plan_on_fleet
    from exporter.manifest_files import parse_documents, skipped_summary, workloads_in_documents
    from reconciler.allocator.config import ModelConfig

    found = workloads_in_documents(parse_documents(text, "body"), "body")
    if not found.templates:
        skipped = skipped_summary(found.skipped)
        raise UserError("no pod templates found in the body"
                        + (f" ({skipped})" if skipped else ""))
    store = resolve()
    # A node whose /configz was not read is modelled with plan's default policies.
    answer = answer_json(plan_on_fleet(store, found.templates, ModelConfig()))
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The whole body, however it is sent (a length or chunks); ``None`` once past
    ``limit`` bytes. ``content.read(n)`` returns only what has arrived, so one call cut a
    large manifest short."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 << 10):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def add_fleet_plan_route(app: web.Application, prefix: str, *,
                         resolve: Callable[[], HistoryStore],
                         error_response: Callable[[int, str], web.Response],
                         unavailable: type[Exception]) -> None:
    """Mount the route; the API module (:mod:`exporter.history.api`) passes how to reach
    the read store (``resolve`` raises ``unavailable`` when it cannot be opened) and how
    it answers errors, so that both answer alike."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.content_type not in CONTENT_TYPES:
            return error_response(415, f"body: Content-Type {request.content_type} is not a "
                                  f"manifest (send one of {', '.join(CONTENT_TYPES)})")
        if request.content_length is not None and request.content_length > MAX_BODY:
            return error_response(413, f"body: larger than {MAX_BODY} bytes")
        raw = await read_body(request, MAX_BODY)
        if raw is None:
            return error_response(413, f"body: larger than {MAX_BODY} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return error_response(400, "body: not UTF-8 text")
        try:
            body = await asyncio.to_thread(_plan, resolve, text)
        except UserError as exc:
            return error_response(400, str(exc))
        except unavailable as exc:
            return error_response(503, f"history database unavailable: {exc}")
        except Exception as exc:
            if is_database_error(exc):
                log.warning("history API database error",
                            extra={"route": PATH, "error": describe_error(exc)})
                return error_response(503, "history database unavailable")
            log.exception("history API request failed", extra={"route": PATH})
            return error_response(500, "internal error")
        return web.Response(body=body, content_type="application/json", charset="utf-8")

    app.router.add_post(prefix + PATH, handle)


def path_item() -> dict[str, Any]:
    """The route in the OpenAPI document."""
    def response(description: str, schema: str) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{schema}"}}}}

    text = {"schema": {"type": "string"}}
    return {"post": {
        "operationId": "fleet_plan",
        "summary": "Place the manifest's pods on every recorded node and rank the nodes",
        "description": "The body is a manifest (YAML or JSON, as plan -f reads it). "
                       "Nodes are ranked: admitted first; among admitted, fewer NUMA nodes, "
                       "then more CPUs left; then refused nodes; then nodes without a "
                       "recorded placement state. Reads only.",
        "requestBody": {"required": True, "content": {
            t: {"schema": {"type": "object"}} if t == "application/json" else text
            for t in CONTENT_TYPES}},
        "responses": {"200": response("The ranked nodes", "FleetPlan"),
                      "400": response("Not a manifest, no pod template in it, or one past "
                                      "the limits (docs/plan.md#manifest-limits)", "Error"),
                      "413": response("Body larger than 1 MiB", "Error"),
                      "415": response("Body not sent as YAML, JSON or text", "Error"),
                      "503": response("History database unavailable", "Error")}}}


def schema() -> dict[str, Any]:
    nullable_int = {"type": "integer", "nullable": True}
    nullable_str = {"type": "string", "nullable": True}
    pod = {"type": "object", "properties": {
        "kind": {"type": "string"}, "namespace": {"type": "string"},
        "name": {"type": "string"}, "admitted": {"type": "boolean"},
        "reason": nullable_str, "cpus": nullable_str,
        "numa_nodes": {"type": "array", "items": {"type": "integer"}}}}
    node = {"type": "object", "required": ["rank", "node", "admitted", "reason"],
            "properties": {
                "rank": {"type": "integer"}, "node": {"type": "string"},
                "admitted": {"type": "boolean", "nullable": True}, "reason": nullable_str,
                "numa_nodes": {"type": "array", "items": {"type": "integer"}},
                "cpus_left": nullable_int,
                "config": {"type": "string", "nullable": True,
                           "enum": ["recorded", "assumed", None]},
                "recorded_at": {"type": "string", "format": "date-time", "nullable": True},
                "last_seen": {"type": "string", "format": "date-time", "nullable": True},
                "pods": {"type": "array", "items": pod}}}
    return {"type": "object", "required": ["order", "nodes"], "properties": {
        "order": {"type": "string"}, "nodes": {"type": "array", "items": node}}}
