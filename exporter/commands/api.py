"""``podres-exporter api``: the dashboard API alone, read-only, over a history database
(typically the fleet's PostgreSQL), for a central deployment."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from exporter.options import HistoryOptions, LogOptions, WebOptions

HELP = "serve the read-only history API (/api/v1) over a history database"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    WebOptions.add_flags(parser)
    HistoryOptions.add_flags(parser, only=("url",))
    LogOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    LogOptions.from_args(args).setup()
    return asyncio.run(serve_api(args))


async def serve_api(args: argparse.Namespace, *, stop: asyncio.Event | None = None,
                    on_ready: Callable[[str], None] | None = None) -> int:
    from aiohttp import web

    from exporter.history import open_store
    from exporter.history.api import add_routes
    from exporter.web.app import auth_middleware
    from exporter.web.lifecycle import start_site, stop_on_signals
    from exporter.web.webconfig import load_web_config

    web_options = WebOptions.from_args(args)
    history = HistoryOptions.from_args(args)
    host, port = web_options.bind()
    config = load_web_config(web_options.config_file)
    store = open_store(history.url, mode="readonly")
    app = web.Application(middlewares=[auth_middleware(config)])
    add_routes(app, store)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app.router.add_get("/-/healthy", health)
    try:
        listening = await start_site(app, host, port, ssl_context=config.ssl_context,
                                     address=web_options.listen_address,
                                     options=web_options)
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
        await listening.close()
        store.close()
    return 0
