"""``podres-exporter serve``: the node agent."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
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

# Stopping (SIGTERM) is bounded whatever the history database does (docs/history.md#outages):
# pending history writes get HISTORY_FLUSH seconds, and a process still not gone
# SHUTDOWN_BUDGET seconds after the signal (a thread stuck in a read from a frozen
# database, which nothing can interrupt) exits there. Kubernetes kills at 30 s by default.
HISTORY_FLUSH = 5.0
SHUTDOWN_BUDGET = 8.0
WEB_DRAIN = 2.0  # for requests in flight when stopping (a history query may be stuck)


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
    from exporter.web.lifecycle import exit_within

    return asyncio.run(run_service(options, on_stop=exit_within(SHUTDOWN_BUDGET)))


async def serve(args: argparse.Namespace, *, on_ready: Callable[[str], None] | None = None,
                stop: asyncio.Event | None = None) -> int:
    """``serve`` from parsed arguments (logging left as it is)."""
    return await run_service(ServeOptions.from_args(args), on_ready=on_ready, stop=stop)


async def run_service(options: ServeOptions, *, on_ready: Callable[[str], None] | None = None,
                      stop: asyncio.Event | None = None,
                      on_stop: Callable[[], None] | None = None) -> int:
    """Run until SIGINT/SIGTERM (or ``stop``); ``on_ready`` gets the base URL once
    listening, ``on_stop`` is called when stopping begins."""
    from exporter.commands._sources import source_options
    from exporter.kernel import KernelObserver, KernelOptions
    from exporter.reader import NodeReader
    from exporter.runtime import fix_mmap_threshold, shrink_tls_read_buffer, tune_gc
    from exporter.service import Exporter, ServiceOptions
    from exporter.web.app import build_app
    from exporter.web.lifecycle import start_site, stop_on_signals
    from exporter.web.webconfig import load_web_config

    shrink_tls_read_buffer()  # before the kubelet client's first connection
    fix_mmap_threshold()  # before the first /pods read
    host, port = options.web.bind()
    web_config = load_web_config(options.web.config_file)
    sources = source_options(options.sources)
    reader = NodeReader(sources)
    history = _open_history(options.history, sources.node_name)
    poll = options.poll
    exporter = Exporter(
        reader,
        ServiceOptions(poll_interval=poll.interval, staleness=poll.staleness,
                       pods_collector=poll.pods_collector,
                       pods_max_series=poll.pods_max_series),
        history=history.writer if history else None,
        kernel=KernelObserver(KernelOptions.from_flags(options.kernel)))
    app = build_app(exporter, web_config, _history_routes(history.reader if history else None))
    listening = await start_site(app, host, port, ssl_context=web_config.ssl_context,
                                 address=options.web.listen_address, options=options.web,
                                 shutdown_timeout=WEB_DRAIN)
    log.info("listening", extra={"url": listening.url, "socket": sources.socket})
    stop = stop or asyncio.Event()
    stop_on_signals(stop, on_hup=exporter.wake)
    why = _name_stop_signals(stop)
    if history is not None:
        await history.writer.start()
    tune_gc()
    if on_ready is not None:
        on_ready(listening.url)
    try:
        await exporter.run(stop)
    except BaseException as exc:
        why.append(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        raise
    finally:
        stopping = time.monotonic()
        if on_stop is not None:
            on_stop()
        await listening.close()
        await reader.close()
        if history is not None:
            await history.close()
        # One line whatever ended it: what, and how long the stop took (the budget is
        # SHUTDOWN_BUDGET; history's flush is most of it when the database is slow).
        log.info("stopped", extra={"reason": why[-1] if why else "stop requested",
                                   "seconds": round(time.monotonic() - stopping, 3)})
    return 0


def _name_stop_signals(stop: asyncio.Event) -> list[str]:
    """What stops ``serve``, for its last log line: SIGINT and SIGTERM set ``stop`` as
    ``stop_on_signals`` has them do, and are named in the list returned (empty: ``stop``
    was set by the caller)."""
    why: list[str] = []
    loop = asyncio.get_running_loop()

    def stop_by(name: str) -> None:
        why.append(name)
        stop.set()

    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop_by, signum.name)
    return why


def _history_routes(store: Any) -> Callable[[Any], None] | None:
    if store is None:
        return None

    def mount(app: Any) -> None:
        from exporter.history.api import OPENAPI_EXTRA_KEY, add_routes
        from exporter.web.app import openapi_paths

        add_routes(app, store)
        app[OPENAPI_EXTRA_KEY] = openapi_paths()
    return mount


@dataclass
class _History:
    """``serve``'s history: the writer, the store it writes to and the store the API
    reads (the same SQLAlchemy store on PostgreSQL; on SQLite, the embedded write path and
    a read store opened on the API's first request)."""

    writer: Any
    store: Any
    reader: Any

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.writer.close(HISTORY_FLUSH)
        for store in (self.store,) if self.reader is self.store else (self.store, self.reader):
            with contextlib.suppress(Exception):
                store.close()


def _open_history(options: HistoryOptions, node: str) -> _History | None:
    if not options.enabled:
        return None
    from exporter.history.location import default_history_url, plain_sqlite_database

    url = options.url or default_history_url()
    try:
        from exporter.history.writer import HistoryWriter

        if plain_sqlite_database(url) is not None:
            # SQLite: the write path without SQLAlchemy (memory of every node agent).
            from exporter.history.api import LazyReadStore
            from exporter.history.embedded import open_embedded

            store: Any = open_embedded(url)
            reader: Any = LazyReadStore(url)
        else:
            from exporter.history.connect import open_store

            store = reader = open_store(url, isolated_migrations=True)
    except ImportError as exc:  # an install without the history extra's driver
        print(f"podres-exporter serve: history disabled: {exc}", file=sys.stderr)
        return None
    writer = HistoryWriter(store, node or "localhost", max_pending=options.max_pending,
                           summary_interval=options.summary_interval,
                           retention=options.retention, prune_interval=options.prune_interval)
    return _History(writer, store, reader)
