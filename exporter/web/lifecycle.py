"""Start-up and shutdown shared by every server the project runs (``serve``, ``api``, the
simulated kubelet, ``sim``, ``demo``): an aiohttp site on ``[HOST]:PORT`` with the
connection cap and timeouts of ``exporter.web.connections``, and SIGINT/SIGTERM (and
optionally SIGHUP) handled on the running loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from exporter.errors import UserError
from exporter.options import WebOptions
from exporter.web.connections import ConnectionStats, GuardedSite, ProtocolLog

_log = logging.getLogger("podres.web")


@dataclass(frozen=True)
class Listening:
    """A started site: its runner (``close`` it) and where it listens."""

    runner: web.AppRunner
    host: str | None
    port: int
    tls: bool
    connections: ConnectionStats

    @property
    def url(self) -> str:
        host = self.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_site(app: web.Application, host: str | None, port: int, *,
                     ssl_context: ssl.SSLContext | None = None,
                     shutdown_timeout: float = 60.0, address: str | None = None,
                     options: WebOptions | None = None) -> Listening:
    """Serve ``app`` on ``host:port`` (port 0 picks a free one) with the connection limits
    and timeouts of ``options`` (the web flags; their defaults when None); a port in use or
    a host that cannot be bound is one ``UserError`` line naming ``address`` (the
    operator's spelling of it)."""
    options = options or WebOptions()
    runner = web.AppRunner(app, access_log=None, handle_signals=False,
                           shutdown_timeout=shutdown_timeout,
                           keepalive_timeout=options.idle_timeout,
                           logger=ProtocolLog(logging.getLogger("podres.web.protocol")))
    await runner.setup()
    site = GuardedSite(runner, host, port, options=options, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        where = address or f"{host or ''}:{port}"
        raise UserError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    assert site.listener is not None
    return Listening(runner, host, site.listener.port, ssl_context is not None,
                     site.listener.stats)


def stop_on_signals(stop: asyncio.Event, *, on_hup: Callable[[], None] | None = None
                    ) -> None:
    """SIGINT and SIGTERM set ``stop``; SIGHUP calls ``on_hup`` when given. A loop that
    cannot take signal handlers (not the main thread) is left as it is."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if on_hup is not None:
            loop.add_signal_handler(signal.SIGHUP, on_hup)


def exit_within(seconds: float) -> Callable[[], None]:
    """A function that, called when stopping begins, makes sure the process is gone
    ``seconds`` later: a daemon timer ends it then, saying what it was waiting for
    (``serve`` and ``api``: a thread stuck on a frozen database or in a plan cannot be
    interrupted). For the commands only: a test running a server in its own process must
    not be ended."""
    def arm() -> None:
        def give_up() -> None:
            waiting = sorted(t.name for t in threading.enumerate()
                             if t is not threading.current_thread() and t.is_alive())
            _log.warning("still stopping after %gs; exiting (threads waiting: %s)", seconds,
                         ", ".join(waiting) or "none")
            logging.shutdown()
            os._exit(0)

        timer = threading.Timer(seconds, give_up)
        timer.daemon = True
        timer.start()
    return arm
