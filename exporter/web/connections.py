"""Connection hygiene for every server the project runs: a cap on open connections that
only requests in flight can fill, one deadline for the TLS handshake plus the request
headers, an idle timeout between requests (which also bounds how long a response may take
to be read), and a client's malformed request logged as one rate-limited line instead of
an error with a traceback.

aiohttp 3.x offers a keep-alive timeout but no header deadline and no connection cap, and
asyncio allocates a 256 KiB read buffer for each TLS connection as soon as it is accepted.
So connections are accepted here, and handed to asyncio (``connect_accepted_socket``, with
a handshake timeout) and to aiohttp's protocol behind a thin guard that owns the timers.

At the cap, a new connection is not refused while some open connection is only *waiting*:
in its TLS handshake, still sending its request headers, or idle between two requests. The
one that has waited longest is closed to make room (``evicted``), so clients that open
connections and send half a request, reconnecting when dropped, churn among themselves
while a scraper or a probe, which sends its request at once, is answered: a cap on
connections alone let 200 such clients lock every new connection out
(docs/deploy.md#connection-limits).
A connection is refused only when every open one has a request in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from exporter.options import WebOptions

log = logging.getLogger("podres.web")

_REPORT_EVERY = 10.0  # seconds between two info lines about malformed requests


class ProtocolLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger aiohttp's protocol reports to. A request the client got wrong (a bad
    request line, oversized headers: a 4xx aiohttp answers itself) is the client's
    problem, not the server's: one info line at most every ten seconds, with how many
    were seen meanwhile, and debug lines for the others. Errors of our own handlers keep
    their error level."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})
        self._last_report = -_REPORT_EVERY
        self._unreported = 0

    def exception(self, msg: object, *args: object, exc_info: Any = True,
                  **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if not (isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500):
            self.logger.error(msg, *args, exc_info=exc_info, **kwargs)
            return
        remote = args[0] if args else "?"
        detail = " ".join(str(exc.message or exc).split())[:200]
        now = time.monotonic()
        if now - self._last_report < _REPORT_EVERY:
            self._unreported += 1
            self.logger.debug("malformed request", extra={"remote": remote, "why": detail})
            return
        self.logger.info("malformed request", extra={
            "remote": remote, "why": detail, "unreported": self._unreported})
        self._last_report, self._unreported = now, 0


@dataclass
class ConnectionStats:
    """Counts a test or a benchmark can read: connections open now, refused at the cap
    (every open one had a request in flight), closed at the cap to make room for a new one
    (waiting the longest), and closed by a timeout."""

    open: int = 0
    refused: int = 0
    evicted: int = 0
    timed_out: int = 0


# What an open connection with no request in flight is waiting for, in the order they are
# evicted at the cap (the one waiting longest first within each): a request sent in part
# and stalled (what a slow-request attacker holds open), a client silent after its TLS
# handshake, a handshake still going on, and last a connection that has had an answer and
# waits for its next request (a kept-alive scraper). A scraper or a probe on a new
# connection sends its whole request as soon as its handshake is done, so it waits only
# in its own handshake, behind every half-sender: churn among half-senders does not push
# it out (docs/deploy.md#connection-limits).
PARTIAL, SILENT, HANDSHAKE, IDLE = range(4)


class _Slot:
    """One counted connection, released exactly once however it ends. While it waits it is
    in one of its listener's ``waiting`` queues (by stage, oldest first) and may be
    evicted; ``abort`` closes it (set by its stage)."""

    __slots__ = ("_held", "_listener", "_stage", "abort")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._held = True
        self._stage: int | None = None
        self.abort: Callable[[], None] | None = None
        listener.stats.open += 1
        self.wait(HANDSHAKE)

    def wait(self, stage: int | None) -> None:
        """Now waiting at ``stage`` (``None``: a request is in flight, not evictable); a
        new stage puts it last in that stage's queue."""
        if not self._held or stage == self._stage:
            return
        if self._stage is not None:
            self._listener.waiting[self._stage].pop(self, None)
        self._stage = stage
        if stage is not None:
            self._listener.waiting[stage][self] = None

    def release(self) -> None:
        if self._held:
            self.wait(None)
            self._held = False
            self._listener.stats.open -= 1

    def evict(self) -> None:
        abort, self.abort = self.abort, None
        self.release()
        self._listener.stats.evicted += 1
        if abort is not None:
            abort()


class _Guard(asyncio.Protocol):
    """Sits between a transport and aiohttp's protocol: forwards everything, and aborts
    the connection when the current deadline passes while no request is being handled.

    The header deadline runs from the accept (so it covers the TLS handshake) and, on a
    kept-alive connection, from the first byte of the next request; the idle deadline
    runs from the end of each request's handler."""

    def __init__(self, inner: RequestHandler, listener: Listener, slot: _Slot,
                 accepted_at: float) -> None:
        self._inner = inner
        self._listener = listener
        self._slot = slot
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False
        self._waiting_for_headers = True
        self._arm(accepted_at + listener.options.read_header_timeout)

    def _arm(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if not self._busy and self._transport is not None:
            self._listener.stats.timed_out += 1
            self._transport.abort()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._slot.abort = transport.abort
        self._slot.wait(SILENT)  # the handshake is done (plain: there was none)
        self._listener.guards[self._inner] = self
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._busy:
            self._slot.wait(PARTIAL)  # until aiohttp has the whole head and starts it
            if not self._waiting_for_headers:
                self._waiting_for_headers = True
                self._arm(asyncio.get_running_loop().time()
                          + self._listener.options.read_header_timeout)
        self._inner.data_received(data)

    def eof_received(self) -> None:
        self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = None
        self._listener.guards.pop(self._inner, None)
        self._slot.release()
        self._inner.connection_lost(exc)

    def request_started(self) -> None:
        self._busy = True
        self._slot.wait(None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def request_finished(self) -> None:
        self._busy = False
        self._slot.wait(IDLE)
        self._waiting_for_headers = False
        self._arm(asyncio.get_running_loop().time() + self._listener.options.idle_timeout)


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


@dataclass
class Listener:
    """Listening sockets and their accept loops for one aiohttp ``Server``."""

    server: web.Server
    options: WebOptions
    ssl_context: ssl.SSLContext | None
    sockets: list[socket.socket] = field(default_factory=list)
    stats: ConnectionStats = field(default_factory=ConnectionStats)
    guards: dict[RequestHandler, _Guard] = field(default_factory=dict)
    # Open connections with no request in flight, by stage (PARTIAL...IDLE), each queue
    # the one waiting longest first.
    waiting: tuple[dict[_Slot, None], ...] = field(
        default_factory=lambda: tuple({} for _ in range(IDLE + 1)))
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        # Every request passes here first: the header deadline ends when its handler
        # starts (aiohttp has parsed the headers), the idle one starts when it ends.
        inner: Handler = self.server.request_handler
        guards = self.guards

        async def handle(request: web.BaseRequest) -> web.StreamResponse:
            guard = guards.get(request.protocol)
            if guard is not None:
                guard.request_started()
            try:
                return await inner(request)
            finally:
                if guard is not None:
                    guard.request_finished()
        self.server.request_handler = handle

    async def listen(self, host: str | None, port: int, backlog: int = 128) -> None:
        """Bind ``host:port`` (every interface when ``host`` is None) and start accepting;
        an address that cannot be bound raises ``OSError``, with nothing left bound."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, address in dict.fromkeys(
                    (i[0], i[1], i[2], i[3], i[4]) for i in infos):
                if self.sockets and port == 0:  # one port for every interface
                    address = (address[0], self.port, *address[2:])
                self.sockets.append(_bound(family, kind, proto, address, backlog))
        except OSError:
            self.close()
            raise
        for sock in self.sockets:
            self._spawn(self._accept(sock))

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        failing = False
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:
                # Out of file descriptors and the like: back off rather than spin, and say
                # so once per spell rather than ten times a second.
                (log.debug if failing else log.warning)(
                    "cannot accept a connection", extra={"error": str(exc)})
                failing = True
                await asyncio.sleep(0.1)
                continue
            failing = False
            if self.stats.open >= self.options.max_connections:
                victim = next((next(iter(q)) for q in self.waiting if q), None)
                if victim is None:  # every open connection has a request in flight
                    self.stats.refused += 1
                    conn.close()
                    continue
                victim.evict()
            slot = _Slot(self)
            started = [False]
            task = self._spawn(self._serve(conn, slot, loop.time(), started))

            def abort(task: asyncio.Task[None] = task, conn: socket.socket = conn,
                      started: list[bool] = started) -> None:
                # Cancelled in its handshake, asyncio closes the transport; cancelled before
                # it ran at all, the socket is still only ours to close.
                task.cancel()
                if not started[0]:
                    conn.close()
            slot.abort = abort

    async def _serve(self, conn: socket.socket, slot: _Slot, accepted_at: float,
                     started: list[bool]) -> None:
        started[0] = True
        loop = asyncio.get_running_loop()
        owned = [False]  # a transport took the socket: it closes it, however it ends

        def guard() -> _Guard:
            owned[0] = True
            return _Guard(self.server(), self, slot, accepted_at)

        try:
            await loop.connect_accepted_socket(
                guard, conn, ssl=self.ssl_context,
                ssl_handshake_timeout=(self.options.read_header_timeout
                                       if self.ssl_context is not None else None))
        except BaseException as exc:
            slot.release()
            if not owned[0]:
                # Closed under a transport still registered with the loop, its number
                # would be reused by the next accepted connection, which the loop then
                # refuses ("file descriptor is used by transport"): a legitimate client
                # dropped for each handshake cut short by eviction.
                with contextlib.suppress(OSError):
                    conn.close()
            if not isinstance(exc, Exception):  # cancelled: the server is stopping
                raise
            # A failed or abandoned TLS handshake: the client's doing.
            log.debug("connection dropped before its first request",
                      extra={"error": repr(exc)})

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()


def _bound(family: int, kind: int, proto: int, address: Any, backlog: int) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # The IPv4 socket of the same port is bound separately.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class GuardedSite(web.BaseSite):
    """An aiohttp site served by a ``Listener``."""

    __slots__ = ("_host", "_options", "_port", "listener")

    def __init__(self, runner: web.BaseRunner, host: str | None, port: int, *,
                 options: WebOptions, ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port, self._options = host, port, options
        self.listener: Listener | None = None

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        listener = Listener(server, self._options, self._ssl_context)
        await listener.listen(self._host, self._port)
        self.listener = listener

    async def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()
        await super().stop()
