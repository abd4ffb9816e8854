"""Connection hygiene for every server the project runs: a cap on open connections that
only requests in flight can fill, one deadline for the TLS handshake plus the request
headers, an idle timeout between requests (which also bounds how long a response may take
to be read), and a client's malformed request logged as one rate-limited line instead of
an error with a traceback.

aiohttp 3.x offers a keep-alive timeout but no header deadline and no connection cap, and
asyncio allocates a 256 KiB read buffer for each TLS connection as soon as it is accepted.
So connections are accepted here, and handed to asyncio (``connect_accepted_socket``, with
a handshake timeout) and to aiohttp's protocol behind a thin guard that owns the timers. A
TLS connection is handed over only once its client has sent something (its ClientHello):
until then it costs a socket and nothing else.

At the cap, a new connection is not refused while some open connection is only *waiting*
for its client: silent, in its TLS handshake, partway through its request head, or idle
between two requests. One that has waited for its client at least ``GRACE`` seconds is
closed to make room (``evicted``); while none has, the new connection waits in the listen
backlog. So clients that open connections and send half a request, reconnecting when
dropped, churn among themselves at most ``max_connections / GRACE`` times a second,
whatever their own rate, and never push out a connection that is making progress: a
scraper or a probe, which sends its whole request head as soon as its handshake is done,
is then in flight and cannot be evicted; a kept-alive scraper between two scrapes is
evicted only when no one else waits (docs/deploy.md#connection-limits). A connection is
refused only when every open one has a request in flight.
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
    (one that had waited at least ``GRACE`` for its client), and closed by a timeout."""

    open: int = 0
    refused: int = 0
    evicted: int = 0
    timed_out: int = 0


# What an open connection with no request in flight is waiting for, in the order they are
# evicted at the cap (the one waiting longest first within each): a request head sent in
# part (what a slow-request attacker holds open), a client that has sent nothing (before
# its ClientHello, or after its TLS handshake), a handshake going on, and last a
# connection that has had an answer and waits for its next request (a kept-alive scraper),
# evicted only when no connection of the other three kinds is open.
PARTIAL, SILENT, HANDSHAKE, IDLE = range(4)

# How long a connection must have waited in its stage before it may be evicted. A real
# client is at most a round trip or two from its next step (a scraper's request head
# follows its handshake at once); an attacker stalls for good. Below this, a new
# connection waits in the backlog rather than cut short one that is making progress:
# under TLS churn, evicting at once closed legitimate connections in their handshake, or
# between their handshake and their request head, before they were read. It also bounds
# how often reconnecting half-senders cost the server a TLS handshake: at most
# max_connections / GRACE a second (docs/deploy.md#connection-limits).
GRACE = 1.0


class _Slot:
    """One counted connection, released exactly once however it ends. While it waits it is
    in one of its listener's ``waiting`` queues (by stage, oldest first) and may be
    evicted; ``abort`` closes it (set by its stage)."""

    __slots__ = ("_held", "_listener", "_stage", "abort", "since")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._held = True
        self._stage: int | None = None
        self.since = 0.0  # loop time it entered its stage
        self.abort: Callable[[], None] | None = None
        listener.stats.open += 1
        self.wait(SILENT)

    def wait(self, stage: int | None) -> None:
        """Now waiting at ``stage`` (``None``: a request is in flight, not evictable); a
        new stage puts it last in that stage's queue."""
        if not self._held or stage == self._stage:
            return
        if self._stage is not None:
            self._listener.waiting[self._stage].pop(self, None)
        self._stage = stage
        if stage is not None:
            self.since = asyncio.get_running_loop().time()
            self._listener.waiting[stage][self] = None

    def release(self) -> None:
        if self._held:
            self.wait(None)
            self._held = False
            self._listener.stats.open -= 1
            self._listener.released.set()

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
        # The last bytes of a request head not yet complete; None once it is.
        self._tail: bytes | None = b""
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
            self._head(data)
            if not self._waiting_for_headers:
                self._waiting_for_headers = True
                self._arm(asyncio.get_running_loop().time()
                          + self._listener.options.read_header_timeout)
        self._inner.data_received(data)

    def _head(self, data: bytes) -> None:
        """A whole request head puts the connection in flight at once: aiohttp starts its
        handler only on a later turn of the loop, and a head read but not yet handled
        must not be what the next accepted connection evicts."""
        tail = self._tail
        if tail is None:  # the head is complete; this is its body
            return
        if b"\r\n\r\n" in data or b"\r\n\r\n" in tail + data[:3]:
            self._tail = None
            self._slot.wait(None)
        else:
            self._tail = (tail + data[-3:])[-3:]
            self._slot.wait(PARTIAL)  # since the head's first byte, not its latest

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
        self._tail = b""
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
    released: asyncio.Event = field(default_factory=asyncio.Event)  # a slot was freed
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
            try:
                room = await self._make_room()
            except BaseException:  # the server is stopping
                conn.close()
                raise
            if not room:  # every open connection has a request in flight
                self.stats.refused += 1
                conn.close()
                continue
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

    async def _make_room(self) -> bool:
        """Below the cap, or once a waiting connection has been evicted: True. False when
        every open connection has a request in flight. Meanwhile the next connections
        wait in the listen backlog."""
        loop = asyncio.get_running_loop()
        while self.stats.open >= self.options.max_connections:
            victim, ready_at = self._victim(loop.time())
            if victim is not None:
                victim.evict()
                return True
            if ready_at is None:
                return False
            self.released.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), ready_at - loop.time())
        return True

    def _victim(self, now: float) -> tuple[_Slot | None, float | None]:
        """The connection to evict now, or else when one may be (None: none is waiting).
        A kept-alive connection only when no other kind is waiting at all."""
        ready_at: float | None = None
        for stage in (PARTIAL, SILENT, HANDSHAKE):
            oldest = next(iter(self.waiting[stage]), None)
            if oldest is None:
                continue
            if oldest.since + GRACE <= now:
                return oldest, now
            when = oldest.since + GRACE
            ready_at = when if ready_at is None else min(ready_at, when)
        if ready_at is not None:
            return None, ready_at
        return next(iter(self.waiting[IDLE]), None), None

    async def _hello(self, conn: socket.socket, deadline: float) -> bool:
        """Wait, holding only the socket, until a TLS client has sent something (its
        ClientHello): False when ``deadline`` passes first."""
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        fd = conn.fileno()

        def ready() -> None:
            if not readable.done():
                readable.set_result(None)
        loop.add_reader(fd, ready)
        try:
            await asyncio.wait_for(readable, max(deadline - loop.time(), 0.0))
        except TimeoutError:
            self.stats.timed_out += 1
            return False
        finally:
            loop.remove_reader(fd)
        return True

    async def _serve(self, conn: socket.socket, slot: _Slot, accepted_at: float,
                     started: list[bool]) -> None:
        started[0] = True
        loop = asyncio.get_running_loop()
        owned = [False]  # a transport took the socket: it closes it, however it ends
        deadline = accepted_at + self.options.read_header_timeout

        def guard() -> _Guard:
            owned[0] = True
            return _Guard(self.server(), self, slot, accepted_at)

        try:
            if self.ssl_context is not None:
                if not await self._hello(conn, deadline):
                    slot.release()
                    conn.close()
                    return
                slot.wait(HANDSHAKE)
            await loop.connect_accepted_socket(
                guard, conn, ssl=self.ssl_context,
                ssl_handshake_timeout=(max(deadline - loop.time(), 0.001)
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
