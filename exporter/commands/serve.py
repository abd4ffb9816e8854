"""``podres-exporter serve``: the node agent."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

from exporter.commands._sources import _positive_int, add_source_flags, source_options
from exporter.errors import UserError
from exporter.flags import add_flag, parse_duration

HELP = "poll the kubelet, reconcile, and serve /metrics, the ledger API and history"
DEFAULT_LISTEN = ":9847"

log = logging.getLogger("podres.serve")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_service_flags(parser)
    add_source_flags(parser)


def add_service_flags(parser: argparse.ArgumentParser) -> None:
    web = parser.add_argument_group("web")
    add_flag(web, "--web.listen-address", default=DEFAULT_LISTEN, metavar="[HOST]:PORT",
             help="address to serve /metrics, /api/v1 and the CPU map on")
    add_flag(web, "--web.config.file", default=None, metavar="FILE",
             help="exporter-toolkit web config: TLS and basic auth for every route")
    poll = parser.add_argument_group("polling")
    add_flag(poll, "--poll.interval", default="15s", type=parse_duration, metavar="DURATION",
             help="how often to poll the sources (SIGHUP polls at once)")
    add_flag(poll, "--podresources.staleness", default="1m", type=parse_duration,
             metavar="DURATION",
             help="withdraw the ledger series when PodResources has failed for this long")
    col = parser.add_argument_group("collectors")
    add_flag(col, "--collector.pods", action=argparse.BooleanOptionalAction, default=True,
             help="per-pod and per-container series")
    add_flag(col, "--collector.pods.max-series", default=50_000, type=_positive_int,
             metavar="N", help="cap on per-pod and per-container series")
    hist = parser.add_argument_group("history")
    add_flag(hist, "--history.url", default=None, metavar="URL",
             help="history database: sqlite:///PATH or postgresql+psycopg://...; 'off' "
             "disables it (default: a SQLite file under the state directory)")
    add_flag(hist, "--history.max-pending", default=10_000, type=_positive_int, metavar="N",
             help="history writes buffered while the database is unreachable")
    add_flag(hist, "--history.retention", default="30d", type=parse_duration,
             metavar="DURATION", help="how long history is kept")
    add_flag(hist, "--history.summary-interval", default="60s", type=parse_duration,
             metavar="DURATION", help="how often node summaries are written")
    logs = parser.add_argument_group("logging")
    add_flag(logs, "--log.level", default="info", choices=("debug", "info", "warn", "error"),
             help="log level")
    add_flag(logs, "--log.format", default="logfmt", choices=("logfmt", "json"),
             help="log line format")


def parse_listen(address: str) -> tuple[str | None, int]:
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise UserError(f"--web.listen-address {address!r}: expected [HOST]:PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise UserError(f"--web.listen-address {address!r}: port is not a number") from None
    if not 0 <= port <= 65535:
        raise UserError(f"--web.listen-address {address!r}: port out of range")
    host = host.strip("[]")
    return (host or None), port


def run(args: argparse.Namespace) -> int:
    from exporter.logs import setup_logging

    ns = vars(args)
    setup_logging("warning" if ns["log.level"] == "warn" else ns["log.level"],
                  ns["log.format"])
    return asyncio.run(serve(args))


async def serve(args: argparse.Namespace, *, on_ready: Callable[[str], None] | None = None,
                stop: asyncio.Event | None = None) -> int:
    """Run until SIGINT/SIGTERM (or ``stop``); ``on_ready`` gets the base URL once
    listening."""
    from aiohttp import web

    from exporter.reader import NodeReader
    from exporter.service import Exporter, ServiceOptions
    from exporter.web.app import build_app
    from exporter.web.webconfig import load_web_config

    ns = vars(args)
    host, port = parse_listen(ns["web.listen_address"])
    web_config = load_web_config(ns["web.config.file"])
    options = source_options(args)
    reader = NodeReader(options)
    store, writer = _open_history(ns, options.node_name)
    exporter = Exporter(
        reader,
        ServiceOptions(poll_interval=ns["poll.interval"], staleness=ns["podresources.staleness"],
                       pods_collector=ns["collector.pods"],
                       pods_max_series=ns["collector.pods.max_series"]),
        history=writer)

    def mount_history(app: web.Application) -> None:
        if store is None:
            return
        from exporter.history.api import OPENAPI_EXTRA_KEY, add_routes
        from exporter.web.app import openapi_paths

        add_routes(app, store)
        app[OPENAPI_EXTRA_KEY] = openapi_paths()

    app = build_app(exporter, web_config, mount_history)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=web_config.ssl_context,
                       reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise UserError(f"cannot listen on {ns['web.listen_address']}: {exc.strerror or exc}"
                        ) from None
    bound = _bound_port(site) or port
    scheme = "https" if web_config.ssl_context else "http"
    url = f"{scheme}://{host or '127.0.0.1'}:{bound}"
    log.info("listening", extra={"url": url, "socket": options.socket})

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGHUP, exporter.wake)
    if writer is not None:
        await writer.start()
    from exporter.runtime import tune_gc

    tune_gc()
    if on_ready is not None:
        on_ready(url)
    try:
        await exporter.run(stop)
    finally:
        await runner.cleanup()
        await reader.close()
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.close()
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
    return 0


def _bound_port(site: Any) -> int | None:
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else None


def _open_history(ns: dict[str, Any], node: str) -> tuple[Any, Any]:
    url = ns["history.url"]
    if url is not None and url.strip().lower() in ("off", "none", "", "false"):
        return None, None
    try:
        from exporter.history import HistoryWriter, default_history_url, open_store
    except ImportError as exc:  # an install without the history extra's driver
        print(f"podres-exporter serve: history disabled: {exc}", file=sys.stderr)
        return None, None
    store = open_store(url or default_history_url(), isolated_migrations=True)
    writer = HistoryWriter(store, node or "localhost", max_pending=ns["history.max_pending"],
                           summary_interval=ns["history.summary_interval"],
                           retention=ns["history.retention"])
    return store, writer
