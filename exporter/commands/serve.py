"""``podres-exporter serve``: the node agent."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.options import (
    HistoryOptions,
    KernelSourcesOptions,
    LogOptions,
    PollOptions,
    SourcesOptions,
    WebOptions,
)

HELP = "poll the kubelet, reconcile, and serve /metrics, the ledger API and history"

log = logging.getLogger("podres.serve")


@dataclass(frozen=True)
class ServeOptions:
    """Every flag group of ``serve``, validated."""

    web: WebOptions
    poll: PollOptions
    history: HistoryOptions
    sources: SourcesOptions
    kernel: KernelSourcesOptions

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeOptions:
        return cls(WebOptions.from_args(args), PollOptions.from_args(args),
                   HistoryOptions.from_args(args), SourcesOptions.from_args(args),
                   KernelSourcesOptions.from_args(args))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    WebOptions.add_flags(parser)
    PollOptions.add_flags(parser)
    HistoryOptions.add_flags(parser)
    LogOptions.add_flags(parser)
    SourcesOptions.add_flags(parser)
    KernelSourcesOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    options = ServeOptions.from_args(args)
    LogOptions.from_args(args).setup()
    return asyncio.run(run_service(options))


async def serve(args: argparse.Namespace, *, on_ready: Callable[[str], None] | None = None,
                stop: asyncio.Event | None = None) -> int:
    """``serve`` from parsed arguments (logging left as it is)."""
    return await run_service(ServeOptions.from_args(args), on_ready=on_ready, stop=stop)


async def run_service(options: ServeOptions, *, on_ready: Callable[[str], None] | None = None,
                      stop: asyncio.Event | None = None) -> int:
    """Run until SIGINT/SIGTERM (or ``stop``); ``on_ready`` gets the base URL once
    listening."""
    from exporter.commands._sources import source_options
    from exporter.kernel import KernelObserver, KernelOptions
    from exporter.reader import NodeReader
    from exporter.runtime import tune_gc
    from exporter.service import Exporter, ServiceOptions
    from exporter.web.app import build_app
    from exporter.web.lifecycle import start_site, stop_on_signals
    from exporter.web.webconfig import load_web_config

    host, port = options.web.bind()
    web_config = load_web_config(options.web.config_file)
    sources = source_options(options.sources)
    reader = NodeReader(sources)
    store, writer = _open_history(options.history, sources.node_name)
    poll = options.poll
    exporter = Exporter(
        reader,
        ServiceOptions(poll_interval=poll.interval, staleness=poll.staleness,
                       pods_collector=poll.pods_collector,
                       pods_max_series=poll.pods_max_series),
        history=writer, kernel=KernelObserver(KernelOptions.from_flags(options.kernel)))
    app = build_app(exporter, web_config, _history_routes(store))
    listening = await start_site(app, host, port, ssl_context=web_config.ssl_context,
                                 address=options.web.listen_address, options=options.web)
    log.info("listening", extra={"url": listening.url, "socket": sources.socket})
    stop = stop or asyncio.Event()
    stop_on_signals(stop, on_hup=exporter.wake)
    if writer is not None:
        await writer.start()
    tune_gc()
    if on_ready is not None:
        on_ready(listening.url)
    try:
        await exporter.run(stop)
    finally:
        await listening.close()
        await reader.close()
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.close()
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
    return 0


def _history_routes(store: Any) -> Callable[[Any], None] | None:
    if store is None:
        return None

    def mount(app: Any) -> None:
        from exporter.history.api import OPENAPI_EXTRA_KEY, add_routes
        from exporter.web.app import openapi_paths

        add_routes(app, store)
        app[OPENAPI_EXTRA_KEY] = openapi_paths()
    return mount


def _open_history(options: HistoryOptions, node: str) -> tuple[Any, Any]:
    if not options.enabled:
        return None, None
    try:
        from exporter.history import HistoryWriter, default_history_url, open_store
    except ImportError as exc:  # an install without the history extra's driver
        print(f"podres-exporter serve: history disabled: {exc}", file=sys.stderr)
        return None, None
    store = open_store(options.url or default_history_url(), isolated_migrations=True)
    writer = HistoryWriter(store, node or "localhost", max_pending=options.max_pending,
                           summary_interval=options.summary_interval,
                           retention=options.retention, prune_interval=options.prune_interval)
    return store, writer
