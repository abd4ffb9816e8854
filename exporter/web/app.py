"""The exporter's aiohttp application."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import payload, web
from aiohttp.abc import AbstractStreamWriter

from exporter.metrics.compression import Encoding, choose_encoding
from exporter.runtime import IdleRelease
from exporter.service import Exporter
from exporter.web import runbook
from exporter.web.basicauth import Verdict
from exporter.web.webconfig import WebConfig

STATIC = Path(__file__).with_name("static")
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_LANDING = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>podres-exporter</title></head>
<body><h1>podres-exporter</h1><ul>
<li><a href="/metrics">/metrics</a></li><li><a href="/api/v1/ledger">/api/v1/ledger</a></li>
<li><a href="/api/v1/cpumap">/api/v1/cpumap</a></li><li><a href="/healthz">/healthz</a></li>
<li><a href="/readyz">/readyz</a></li><li><a href="/runbook">/runbook</a></li></ul></body></html>
"""

EXPORTER_KEY = web.AppKey("exporter", Exporter)
# The node-sized answers (/metrics, the ledger, the CPU map) note themselves here.
RELEASE_KEY = web.AppKey("release", IdleRelease)


# On every answer: a JSON error may echo the request (a name, a parameter), and a browser
# must never sniff it into HTML. The web config's headers may say otherwise.
NOSNIFF = {"X-Content-Type-Options": "nosniff"}


def auth_middleware(config: WebConfig) -> Any:
    """Basic auth from the web config on every route (none without users), and the
    config's extra response headers (and :data:`NOSNIFF`) on every answer."""
    checker = config.basic_auth()
    extra = {**NOSNIFF, **dict(config.headers)}

    async def answer(request: web.Request, handler: Handler) -> web.StreamResponse:
        verdict = Verdict.ALLOWED if checker is None else \
            await checker.verify(request.headers.get("Authorization"))
        if verdict is Verdict.BUSY:
            return web.Response(status=503, text="too many authentication attempts\n",
                                headers={"Retry-After": "1"})
        if verdict is Verdict.DENIED:
            return web.Response(status=401, text="Unauthorized\n",
                                headers={"WWW-Authenticate": 'Basic realm="podres-exporter"'})
        return await handler(request)

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await answer(request, handler)
        except web.HTTPException as exc:
            exc.headers.update(extra)
            raise
        if not response.prepared:  # a streamed answer has sent its headers already
            response.headers.update(extra)
        return response
    return auth


class Parts(payload.Payload):
    """A body written as its parts, one after the other, never joined (``/metrics``: the
    exposition as rendered at the ledger's change, then the live self-metrics)."""

    _value: tuple[bytes, ...]

    def __init__(self, parts: tuple[bytes, ...], content_type: str) -> None:
        super().__init__(parts, content_type=content_type)
        self._size = sum(map(len, parts))

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"".join(self._value)

    async def write(self, writer: AbstractStreamWriter) -> None:
        for part in self._value:
            if part:
                await writer.write(part)


def _encoded(request: web.Request, body: bytes | tuple[bytes, bytes], encoding: Encoding,
             content_type: str) -> web.Response:
    """A node-sized answer: once they stop for a while, what they freed goes back."""
    request.app[RELEASE_KEY].note()
    headers = {"Content-Type": content_type, "Vary": "Accept-Encoding"}
    if encoding == "gzip":
        headers["Content-Encoding"] = "gzip"
    if isinstance(body, tuple):
        head, tail = body
        if tail:
            return web.Response(body=Parts(body, content_type), headers=headers)
        body = head  # one part: sent with the headers, as any body
    return web.Response(body=body, headers=headers)


async def metrics(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    encoding = choose_encoding(request.headers.get("Accept-Encoding"))
    return _encoded(request, exporter.metrics_body(encoding), encoding,
                    METRICS_CONTENT_TYPE)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    if exporter.ready:
        return web.Response(text="ready\n")
    return web.Response(status=503, text="not ready: no successful poll yet\n")


def _unavailable(exporter: Exporter) -> web.Response:
    why = "no successful poll yet" if exporter.last_success is None else \
        "the PodResources source has been failing longer than the staleness window"
    return web.Response(status=503, content_type="application/json",
                        text=json.dumps({"error": why}))


async def ledger(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    current = exporter.current()
    if current is None:
        return _unavailable(exporter)
    encoding = choose_encoding(request.headers.get("Accept-Encoding"))
    return _encoded(request, current.ledger_body(encoding), encoding, "application/json")


async def cpumap(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    current = exporter.current()
    if current is None:
        return _unavailable(exporter)
    encoding = choose_encoding(request.headers.get("Accept-Encoding"))
    return _encoded(request, current.cpumap_body(encoding), encoding, "application/json")


async def devices(request: web.Request) -> web.Response:
    """The ledger's ``devices`` object alone (docs/design.md#devices): small, so made per
    request rather than kept with the published ledger."""
    exporter = request.app[EXPORTER_KEY]
    current = exporter.current()
    if current is None:
        return _unavailable(exporter)
    return web.json_response(current.ledger.devices.to_json(),
                             dumps=lambda o: json.dumps(o, ensure_ascii=False))


async def cpuload(request: web.Request) -> web.Response:
    load = request.app[EXPORTER_KEY].cpuload()
    if load is None:
        return web.json_response({"error": "the /proc/stat source is off (--proc.root)"},
                                 status=404)
    return web.json_response(load)


async def index(request: web.Request) -> web.StreamResponse:
    page = STATIC / "index.html"
    if page.is_file():
        return web.FileResponse(page)
    return web.Response(text=_LANDING, content_type="text/html")


def openapi_paths() -> dict[str, Any]:
    """The exporter's own JSON routes, for the OpenAPI document the history API serves."""
    unavailable = {"description": "no successful poll yet, or PodResources stale",
                   "content": {"application/json": {"schema": {"type": "object"}}}}

    def route(summary: str) -> dict[str, Any]:
        return {"get": {"summary": summary, "responses": {
            "200": {"description": "OK",
                    "content": {"application/json": {"schema": {"type": "object"}}}},
            "503": unavailable}}}

    return {
        "/api/v1/ledger": route("The current ledger (schema podres.ledger/v1)"),
        "/api/v1/cpumap": route("Every online CPU with its pool and owner"),
        "/api/v1/devices": route("The ledger's devices: per resource and NUMA node, and "
                                 "per container"),
        "/api/v1/cpuload": {"get": {
            "summary": "Each CPU's busy share between the last two polls (/proc/stat)",
            "responses": {
                "200": {"description": "OK", "content": {
                    "application/json": {"schema": {"type": "object"}}}},
                "404": {"description": "the /proc/stat source is off", "content": {
                    "application/json": {"schema": {"type": "object"}}}}}}},
    }


def build_app(exporter: Exporter, web_config: WebConfig | None = None,
              extra: Callable[[web.Application], None] | None = None) -> web.Application:
    app = web.Application(middlewares=[auth_middleware(web_config or WebConfig())])
    app[EXPORTER_KEY] = exporter
    app[RELEASE_KEY] = IdleRelease()
    app.router.add_get("/", index)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/api/v1/ledger", ledger)
    app.router.add_get("/api/v1/cpumap", cpumap)
    app.router.add_get("/api/v1/devices", devices)
    app.router.add_get("/api/v1/cpuload", cpuload)
    runbook.add_route(app)
    if STATIC.is_dir():
        app.router.add_static("/static/", STATIC)
    if extra is not None:
        extra(app)
    return app
