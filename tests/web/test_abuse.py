"""The web layer under hostile clients, on loopback: password guessers next to a legitimate
scraper, idle and slow connections (plain and TLS), more connections than the cap,
malformed requests and web config typos. Every server here is the real ``start_site``
with the real middleware; timeouts are short so the tests stay quick, and nothing asserts
a duration: only who was answered, who was closed, and on which thread bcrypt ran."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from aiohttp import web

from exporter.errors import UserError
from exporter.options import WebOptions
from exporter.tlsutil import write_self_signed
from exporter.web.app import auth_middleware
from exporter.web.basicauth import BasicAuth, Verdict
from exporter.web.connections import GRACE
from exporter.web.lifecycle import Listening, start_site
from exporter.web.webconfig import WebConfig, load_web_config

# Long enough never to fire by accident on a loaded machine, short enough to wait for.
SHORT = WebOptions(read_header_timeout=0.5, idle_timeout=0.5, max_connections=64)
PATIENT = WebOptions(read_header_timeout=60.0, idle_timeout=60.0, max_connections=64)
# How long a test waits for the server to close a connection before calling it a failure.
CLOSE_WITHIN = 20.0


def basic(user: str, password: str, scheme: str = "Basic") -> str:
    return f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bcrypt_hash(password: str) -> bytes:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4))


class CheckSpy:
    """Wraps the real ``bcrypt.checkpw``: which passwords it saw, on which threads."""

    def __init__(self) -> None:
        self.real = bcrypt.checkpw
        self.passwords: list[bytes] = []
        self.threads: set[int] = set()
        self.niceness: set[int] = set()

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.passwords.append(password)
        self.threads.add(threading.get_ident())
        self.niceness.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return self.real(password, hashed)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> CheckSpy:
    checker = CheckSpy()
    monkeypatch.setattr(bcrypt, "checkpw", checker)
    return checker


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


Serve = Callable[..., Awaitable[Listening]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    started: list[Listening] = []

    async def start(config: WebConfig | None = None, options: WebOptions = SHORT
                    ) -> Listening:
        config = config or WebConfig()
        app = web.Application(middlewares=[auth_middleware(config)])
        app.router.add_get("/metrics", ok)
        listening = await start_site(app, "127.0.0.1", 0, ssl_context=config.ssl_context,
                                     shutdown_timeout=1.0, options=options)
        started.append(listening)
        return listening

    yield start
    for listening in started:
        await listening.close()


@pytest.fixture
def tls(short_tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it)."""
    cert, key = write_self_signed(short_tmp)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


# ---- basic auth -------------------------------------------------------------------------

async def test_guessers_do_not_hold_up_a_scraper_and_bcrypt_runs_off_the_loop(
        serve: Serve, spy: CheckSpy) -> None:
    listening = await serve(WebConfig(users={"prom": bcrypt_hash("s3cret")}))
    url = listening.url + "/metrics"
    loop_thread = threading.get_ident()

    async def guess(session: aiohttp.ClientSession, n: int) -> list[int]:
        statuses = []
        for i in range(4):
            async with session.get(url, headers={
                    "Authorization": basic("prom", f"guess-{n}-{i}")}) as response:
                statuses.append(response.status)
        return statuses

    async def scrape(session: aiohttp.ClientSession) -> list[int]:
        statuses = []
        for _ in range(10):
            async with session.get(url, headers={
                    "Authorization": basic("prom", "s3cret")}) as response:
                statuses.append(response.status)
        return statuses

    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(scrape(session),
                                       *(guess(session, n) for n in range(16)))
    assert results[0] == [200] * 10
    # A guess is refused or, when the verification queue is full, told to come back.
    assert {status for statuses in results[1:] for status in statuses} <= {401, 503}
    assert loop_thread not in spy.threads
    # ... at the lowest CPU priority: guessers get the CPU the event loop leaves.
    assert spy.niceness == {19}
    # Ten scrapes with the same credentials: one bcrypt check, the rest from the cache.
    assert spy.passwords.count(b"s3cret") == 1


async def test_unknown_user_costs_a_bcrypt_check_like_a_known_one(spy: CheckSpy) -> None:
    auth = BasicAuth({"prom": bcrypt_hash("s3cret")})
    assert await auth.verify(basic("mallory", "s3cret")) is Verdict.DENIED
    assert await auth.verify(basic("prom", "wrong")) is Verdict.DENIED
    assert spy.passwords == [b"s3cret", b"wrong"]
    # The decoy hash never admits anyone, whatever the password.
    assert await auth.verify(basic("mallory", "")) is Verdict.DENIED


@pytest.mark.parametrize("scheme", ["Basic", "basic", "BASIC", "bAsIc"])
async def test_basic_scheme_is_case_insensitive(scheme: str) -> None:
    auth = BasicAuth({"prom": bcrypt_hash("s3cret")})
    assert await auth.verify(basic("prom", "s3cret", scheme)) is Verdict.ALLOWED


@pytest.mark.parametrize("header", [None, "", "Basic", "Bearer abc", "Basic !!!",
                                    "Basic " + base64.b64encode(b"no-colon").decode(),
                                    "Basic " + base64.b64encode(b"\xff:\xfe").decode()])
async def test_malformed_authorization_is_denied(header: str | None, spy: CheckSpy) -> None:
    auth = BasicAuth({"prom": bcrypt_hash("s3cret")})
    assert await auth.verify(header) is Verdict.DENIED
    assert spy.passwords == []


async def test_a_full_verification_queue_answers_busy(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    release = threading.Event()
    entered = threading.Event()
    real = bcrypt.checkpw

    def slow(password: bytes, hashed: bytes) -> bool:
        entered.set()
        release.wait(30)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", slow)
    auth = BasicAuth({"prom": bcrypt_hash("s3cret")}, max_pending=1, busy_wait=0.01)
    first = asyncio.ensure_future(auth.verify(basic("prom", "guess")))
    await asyncio.to_thread(entered.wait, 30)
    assert await auth.verify(basic("prom", "another guess")) is Verdict.BUSY
    release.set()
    assert await first is Verdict.DENIED
    # The queue drained: checks are taken again.
    assert await auth.verify(basic("prom", "s3cret")) is Verdict.ALLOWED


async def test_busy_is_a_503_with_retry_after(serve: Serve, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    release = threading.Event()
    monkeypatch.setattr(bcrypt, "checkpw", lambda p, h: release.wait(30) and False)
    listening = await serve(WebConfig(users={"prom": bcrypt_hash("s3cret")}))
    url = listening.url + "/metrics"
    async with aiohttp.ClientSession() as session:
        async def guess(n: int) -> tuple[int, str | None]:
            async with session.get(url, headers={"Authorization": basic("prom", str(n))}
                                   ) as response:
                return response.status, response.headers.get("Retry-After")
        # 40 guesses against a queue of 32: the excess is told to come back.
        tasks = [asyncio.ensure_future(guess(n)) for n in range(40)]
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        assert next(iter(done)).result() == (503, "1")
        release.set()
        results = await asyncio.gather(*tasks)
    assert {status for status, _ in results} == {401, 503}


# ---- connections ------------------------------------------------------------------------

async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (EOF or reset) before CLOSE_WITHIN."""
    try:
        while await asyncio.wait_for(reader.read(4096), CLOSE_WITHIN):
            pass
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return True


async def test_idle_tls_clients_that_never_handshake_are_closed(
        serve: Serve, tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ssl, _ = tls
    listening = await serve(WebConfig(ssl_context=server_ssl))
    clients = [await asyncio.open_connection("127.0.0.1", listening.port) for _ in range(20)]
    closed = await asyncio.gather(*(closed_by_server(reader) for reader, _ in clients))
    assert all(closed)
    for _, writer in clients:
        writer.close()
    assert listening.connections.open == 0


async def test_idle_plain_clients_that_never_send_are_closed(serve: Serve) -> None:
    listening = await serve()
    clients = [await asyncio.open_connection("127.0.0.1", listening.port) for _ in range(20)]
    closed = await asyncio.gather(*(closed_by_server(reader) for reader, _ in clients))
    assert all(closed)
    for _, writer in clients:
        writer.close()
    assert listening.connections.timed_out == 20
    assert listening.connections.open == 0


@pytest.mark.parametrize("use_tls", [True, False], ids=["tls", "plain"])
async def test_slow_headers_are_cut_off(serve: Serve, use_tls: bool,
                                        tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ssl, client_ssl = tls
    listening = await serve(WebConfig(ssl_context=server_ssl if use_tls else None))

    async def slowloris() -> bool:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", listening.port, ssl=client_ssl if use_tls else None)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        # One header byte at a time, never the blank line that ends them.
        trickle = asyncio.ensure_future(_trickle(writer))
        try:
            return await closed_by_server(reader)
        finally:
            trickle.cancel()
            writer.close()

    assert all(await asyncio.gather(*(slowloris() for _ in range(10))))
    assert listening.connections.timed_out >= 10


async def _trickle(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        while not writer.is_closing():
            writer.write(b"X")
            await writer.drain()
            await asyncio.sleep(0.05)


async def test_kept_alive_connection_is_closed_when_idle(
        serve: Serve, tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ssl, client_ssl = tls
    listening = await serve(WebConfig(ssl_context=server_ssl))
    reader, writer = await asyncio.open_connection("127.0.0.1", listening.port,
                                                   ssl=client_ssl)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"ok\n"), CLOSE_WITHIN)
    assert head.startswith(b"HTTP/1.1 200")
    assert await closed_by_server(reader)
    writer.close()
    assert listening.connections.timed_out == 1


async def test_at_the_cap_the_longest_waiting_connection_makes_room(
        serve: Serve, tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server_ssl, client_ssl = tls
    cap = WebOptions(read_header_timeout=60.0, idle_timeout=60.0, max_connections=5)
    listening = await serve(WebConfig(ssl_context=server_ssl), cap)
    held = []
    for _ in range(5):  # five clients that never even start their TLS handshake
        held.append(await asyncio.open_connection("127.0.0.1", listening.port))
        while listening.connections.open < len(held):  # accepted in this order
            await asyncio.sleep(0.01)
    async with aiohttp.ClientSession() as session, \
            session.get(listening.url + "/metrics", ssl=client_ssl) as response:
        assert response.status == 200
    assert listening.connections.refused == 0
    assert listening.connections.evicted == 1
    assert await closed_by_server(held[0][0])  # the oldest waiter made room
    for _, w in held:
        w.close()


async def test_at_the_cap_a_connection_making_progress_is_not_cut_short(
        serve: Serve) -> None:
    """Issue 33, D4: at the cap, the next connection waits in the backlog rather than
    evict one that has waited less than GRACE for its client. Evicting at once, a client
    a moment slow to send its request (a handshake's round trip under load) was closed
    before its request was read."""
    cap = WebOptions(read_header_timeout=60.0, idle_timeout=60.0, max_connections=1)
    listening = await serve(options=cap)
    first = await asyncio.open_connection("127.0.0.1", listening.port)
    while listening.connections.open < 1:
        await asyncio.sleep(0.01)
    second = await asyncio.open_connection("127.0.0.1", listening.port)  # in the backlog
    await asyncio.sleep(GRACE / 5)  # the first client is slow, well within GRACE
    answers = []
    for reader, writer in (first, second):
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        answers.append(await asyncio.wait_for(reader.readuntil(b"ok\n"), CLOSE_WITHIN))
    assert [a.split(b"\r\n")[0] for a in answers] == [b"HTTP/1.1 200 OK"] * 2
    assert await closed_by_server(first[0])  # kept alive, it made room once answered
    for _, writer in (first, second):
        writer.close()
    assert listening.connections.evicted == 1
    assert listening.connections.refused == 0


async def test_at_the_cap_with_every_request_in_flight_a_new_connection_is_refused(
        serve: Serve) -> None:
    release = asyncio.Event()
    started = 0

    async def slow(_: web.Request) -> web.Response:
        nonlocal started
        started += 1
        await release.wait()
        return web.Response(text="done\n")

    cap = WebOptions(read_header_timeout=60.0, idle_timeout=60.0, max_connections=3)
    app = web.Application()
    app.router.add_get("/slow", slow)
    listening = await start_site(app, "127.0.0.1", 0, shutdown_timeout=1.0, options=cap)
    try:
        async with aiohttp.ClientSession() as session:
            busy = [asyncio.ensure_future(session.get(listening.url + "/slow"))
                    for _ in range(3)]
            while started < 3:
                await asyncio.sleep(0.01)
            reader, writer = await asyncio.open_connection("127.0.0.1", listening.port)
            assert await closed_by_server(reader)
            writer.close()
            assert listening.connections.refused == 1
            assert listening.connections.evicted == 0
            release.set()
            for response in await asyncio.gather(*busy):
                assert response.status == 200  # requests in flight are never cut
                response.release()
    finally:
        await listening.close()


async def test_patient_limits_leave_a_slow_but_honest_client_alone(
        serve: Serve) -> None:
    listening = await serve(options=PATIENT)
    reader, writer = await asyncio.open_connection("127.0.0.1", listening.port)
    for part in (b"GET /metrics HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
        writer.write(part)
        await asyncio.sleep(0.2)
    head = await asyncio.wait_for(reader.readuntil(b"ok\n"), CLOSE_WITHIN)
    assert head.startswith(b"HTTP/1.1 200")
    writer.close()
    assert listening.connections.timed_out == 0


# ---- logging ----------------------------------------------------------------------------

async def test_malformed_requests_are_one_info_line_not_errors(
        serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    listening = await serve(options=PATIENT)
    caplog.set_level(logging.DEBUG)
    for _ in range(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", listening.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
        head = await asyncio.wait_for(reader.read(), CLOSE_WITHIN)
        assert head.split(b"\r\n")[0].endswith(b" 400 Bad Request")
        writer.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    reports = [r for r in caplog.records if r.getMessage() == "malformed request"]
    assert [r.levelno for r in reports] == [logging.INFO] + [logging.DEBUG] * 4
    assert all(r.exc_info is None for r in reports)


async def test_handler_errors_keep_their_error_level(
        caplog: pytest.LogCaptureFixture) -> None:
    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("bug")

    app = web.Application()
    app.router.add_get("/", broken)
    listening = await start_site(app, "127.0.0.1", 0, shutdown_timeout=1.0)
    try:
        async with aiohttp.ClientSession() as session, \
                session.get(listening.url + "/") as response:
            assert response.status == 500
    finally:
        await listening.close()
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


# ---- web config -------------------------------------------------------------------------

TYPOS = {
    "client_auth": ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                    "  client_auth: RequireAndVerifyClientCert\n", "did you mean client_auth_type"),
    "min_versoin": ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                    "  min_versoin: TLS13\n", "did you mean min_version"),
    "http-typo": ("http_server_config:\n  header:\n    X-Frame-Options: deny\n",
                  "did you mean headers"),
    "http-not-a-mapping": ("http_server_config: [http2]\n", "must be a mapping"),
    "http2-not-bool": ("http_server_config:\n  http2: maybe\n", "http2 must be true or false"),
    "header-not-allowed": ("http_server_config:\n  headers:\n    Server: podres\n",
                           "cannot be configured"),
    "header-bad-value": ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
                         "X-Frame-Options must be one of deny, sameorigin"),
    "rate_limit": ("rate_limit:\n  interval: 1s\n", "rate_limit is not supported"),
    "client_allowed_sans": ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                            "  client_allowed_sans: [a]\n", "client_allowed_sans is not"),
    "max-below-min": ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                      "  min_version: TLS13\n  max_version: TLS12\n", "below min_version"),
    "ca-without-policy": ("tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                          "  client_ca_file: CERT\n", "client_auth_type is NoClientCert"),
    "short-hash": ("basic_auth_users:\n  alice: $2y$10$tooshort\n", "is not a bcrypt hash"),
}


@pytest.mark.parametrize("case", sorted(TYPOS))
def test_web_config_typos_are_refused(case: str, short_tmp: Path) -> None:
    cert, key = write_self_signed(short_tmp)
    text, message = TYPOS[case]
    path = short_tmp / "web.yml"
    path.write_text(text.replace("CERT", str(cert)).replace("KEY", str(key)))
    with pytest.raises(UserError) as raised:
        load_web_config(str(path))
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


async def test_configured_headers_are_on_every_answer(serve: Serve, short_tmp: Path) -> None:
    path = short_tmp / "web.yml"
    path.write_text(f"""
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    Content-Security-Policy: default-src 'none'
basic_auth_users:
  prom: {bcrypt_hash("s3cret").decode()}
""")
    listening = await serve(load_web_config(str(path)))
    async with aiohttp.ClientSession() as session:
        for auth, status in ((basic("prom", "s3cret"), 200), (None, 401)):
            headers = {"Authorization": auth} if auth else {}
            async with session.get(listening.url + "/metrics", headers=headers) as response:
                assert response.status == status
                assert response.headers["X-Frame-Options"] == "deny"
                assert response.headers["Content-Security-Policy"] == "default-src 'none'"


def test_max_version_is_applied(short_tmp: Path) -> None:
    cert, key = write_self_signed(short_tmp)
    path = short_tmp / "web.yml"
    path.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                    "  max_version: TLS12\n")
    context = load_web_config(str(path)).ssl_context
    assert context is not None
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2
