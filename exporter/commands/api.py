"""``podres-exporter api``: the dashboard API alone, read-only, over a history database
(typically the fleet's PostgreSQL), for a central deployment."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from exporter.options import HistoryOptions, LogOptions, WebOptions

if TYPE_CHECKING:
    from exporter.history.store import HistoryStore

HELP = "serve the read-only history API (/api/v1) over a history database"
# Stopping is bounded as ``serve``'s is (exporter.web.lifecycle.exit_within): requests in
# flight get WEB_DRAIN seconds, and a process still not gone SHUTDOWN_BUDGET seconds after
# the signal (a plan or a query running in a thread, which nothing can interrupt) exits.
SHUTDOWN_BUDGET = 8.0
WEB_DRAIN = 2.0
# A readiness check that takes longer counts as "database not answering": the kubelet's
# probe times out at 5 s (deploy/), and a frozen database must not hold it that long.
READY_TIMEOUT = 3.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    WebOptions.add_flags(parser)
    HistoryOptions.add_flags(parser, only=("url",))
    LogOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    from exporter.web.lifecycle import exit_within

    LogOptions.from_args(args).setup()
    return asyncio.run(serve_api(args, on_stop=exit_within(SHUTDOWN_BUDGET)))


def index_body() -> dict[str, Any]:
    """``GET /``: what this server is, and where its routes are."""
    from exporter import __version__

    return {"name": "podres-exporter api", "version": __version__,
            "links": {"openapi": "/api/v1/openapi.json", "metrics": "/metrics",
                      "healthz": "/healthz", "readyz": "/readyz", "runbook": "/runbook"}}


def json_errors() -> Any:
    """Every error as the history API answers its own (``{"error", "status"}``, JSON): a
    path no route serves, a method not allowed, a refused login, a probe's "not ready".
    The answer's other headers (WWW-Authenticate, Retry-After, the web config's) stay."""
    from aiohttp import web

    from exporter.history.api import error_response

    def as_json(status: int, text: str, headers: Any) -> web.Response:
        answer = error_response(status, text.strip() or f"HTTP {status}")
        for name, value in headers.items():
            if name.lower() not in ("content-type", "content-length"):
                answer.headers[name] = value
        return answer

    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return as_json(exc.status, exc.reason if exc.text is None else exc.text,
                           exc.headers)
        if response.status < 400 or response.prepared \
                or response.content_type == "application/json":
            return response
        assert isinstance(response, web.Response)
        return as_json(response.status, response.text or "", response.headers)
    return middleware


def add_probes(app: Any, store: HistoryStore) -> None:
    """The probes Kubernetes asks (docs/deploy.md#probes), as ``serve`` answers them:
    ``/healthz`` (the process answers; ``/-/healthy`` is its older name) and ``/readyz``
    (the database answers a query within ``READY_TIMEOUT``). One check runs at a time: while
    one is stuck on a frozen database, the next probes are answered "not ready" at once
    instead of piling up threads."""
    from aiohttp import web

    running: list[asyncio.Future[Any]] = []

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if running and not running[0].done():
            return web.Response(status=503, text="not ready: the history database has not "
                                "answered the last check yet\n")
        running[:] = [asyncio.ensure_future(asyncio.to_thread(store.revision))]
        try:
            await asyncio.wait_for(asyncio.shield(running[0]), READY_TIMEOUT)
        except TimeoutError:
            return web.Response(status=503, text=f"not ready: the history database did not "
                                f"answer within {READY_TIMEOUT:g} s\n")
        except Exception as exc:  # any driver error: said, not raised
            from exporter.history.common import describe_error

            return web.Response(status=503, text=f"not ready: history database: "
                                f"{describe_error(exc)}\n")
        return web.Response(text="ready\n")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/-/healthy", healthz)
    app.router.add_get("/readyz", readyz)


async def serve_api(args: argparse.Namespace, *, stop: asyncio.Event | None = None,
                    on_ready: Callable[[str], None] | None = None,
                    on_stop: Callable[[], None] | None = None) -> int:
    """Run until SIGINT/SIGTERM (or ``stop``); ``on_ready`` gets the base URL once
    listening, ``on_stop`` is called when stopping begins."""
    from aiohttp import web

    from exporter.history import open_store
    from exporter.history.api import add_routes
    from exporter.web import runbook
    from exporter.web.app import auth_middleware
    from exporter.web.lifecycle import start_site, stop_on_signals
    from exporter.web.requestmetrics import RequestCounter, add_metrics_route
    from exporter.web.webconfig import load_web_config

    web_options = WebOptions.from_args(args)
    history = HistoryOptions.from_args(args)
    host, port = web_options.bind()
    config = load_web_config(web_options.config_file)
    store = open_store(history.url, mode="readonly")
    counter = RequestCounter()
    app = web.Application(middlewares=[counter.middleware(), json_errors(),
                                       auth_middleware(config)])

    async def index(_: web.Request) -> web.Response:
        return web.json_response(index_body())

    app.router.add_get("/", index)
    add_routes(app, store)
    runbook.add_route(app)  # alert links may point at the central API too
    add_probes(app, store)
    add_metrics_route(app, counter, "podres_api")
    try:
        listening = await start_site(app, host, port, ssl_context=config.ssl_context,
                                     address=web_options.listen_address,
                                     options=web_options, shutdown_timeout=WEB_DRAIN)
    except BaseException:
        store.close()
        raise
    if on_ready is not None:
        on_ready(listening.url)
    else:
        print(f"history API on {listening.url}/api/v1/openapi.json", flush=True)
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    try:
        await stop.wait()
    finally:
        if on_stop is not None:
            on_stop()
        await listening.close()
        store.close()
    return 0
