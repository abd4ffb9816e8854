"""``podres-exporter api``: the dashboard API alone, read-only, over a history database
(typically the fleet's PostgreSQL), for a central deployment."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Callable

from exporter.errors import UserError
from exporter.flags import add_flag

HELP = "serve the read-only history API (/api/v1) over a history database"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--history.url", dest="history_url", default=None, metavar="URL",
             help="history database: sqlite:///PATH or postgresql+psycopg://... "
             "(default: the exporter's SQLite file)")
    add_flag(parser, "--web.listen-address", dest="listen", default=":9101",
             metavar="[HOST]:PORT", help="address to listen on")
    add_flag(parser, "--web.config.file", dest="web_config", default=None, metavar="FILE",
             help="exporter-toolkit web config (TLS, basic auth)")


def run(args: argparse.Namespace) -> int:
    return asyncio.run(serve_api(args))


async def serve_api(args: argparse.Namespace, *, stop: asyncio.Event | None = None,
                    on_ready: Callable[[str], None] | None = None) -> int:
    from aiohttp import web

    from exporter.commands.serve import parse_listen
    from exporter.history import open_store
    from exporter.history.api import add_routes
    from exporter.web.app import auth_middleware
    from exporter.web.webconfig import load_web_config

    host, port = parse_listen(args.listen)
    config = load_web_config(args.web_config)

    ssl_context = config.ssl_context
    store = open_store(args.history_url, mode="readonly")
    app = web.Application(middlewares=[auth_middleware(config)])
    add_routes(app, store)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app.router.add_get("/-/healthy", health)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        store.close()
        raise UserError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    url = f"{'https' if ssl_context else 'http'}://{host or '127.0.0.1'}:{bound}"
    if on_ready is not None:
        on_ready(url)
    else:
        print(f"history API on {url}/api/v1/openapi.json", flush=True)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        store.close()
    return 0
