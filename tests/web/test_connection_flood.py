"""The connection-exhaustion attack of issue 25, on loopback: 200 clients that each open a
connection, send half a request (or, on TLS, nothing at all) and reconnect as soon as they
are dropped, against the real ``start_site`` with the default limits (128 connections). A
cap on connections alone locked every new one out (0 of 58 scrapes, 0 of 19 probes); with
waiting connections evicted oldest first, every scrape and probe is answered.

Bounded in count: the attackers run while a fixed number of scrapes and probes are made;
nothing asserts a duration (each request has the usual client timeout, as a scraper does)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from exporter.options import WebOptions
from exporter.tlsutil import write_self_signed
from exporter.web.lifecycle import start_site

ATTACKERS = 200
SCRAPES = 30
PROBES = 15
HALF_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: victim\r\nUser-Agent: slow"


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def attacker(port: int, tls: bool, stop: asyncio.Event, seen: Counter[str]) -> None:
    """Connect, send half a request (plain) or nothing (TLS: no handshake), wait to be
    dropped, reconnect at once."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            seen["connect failed"] += 1
            await asyncio.sleep(0.01)
            continue
        seen["connected"] += 1
        try:
            if not tls:
                writer.write(HALF_REQUEST)
            stopping = asyncio.ensure_future(stop.wait())
            dropped = asyncio.ensure_future(reader.read())
            await asyncio.wait({stopping, dropped}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            dropped.cancel()
        except OSError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_half_sent_requests_do_not_lock_out_scrapes_and_probes(
        tls: bool, short_tmp: Path) -> None:
    server_ssl = client_ssl = None
    if tls:
        cert, key = write_self_signed(short_tmp)
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(cert, key)
        client_ssl = ssl.create_default_context(cafile=str(cert))
    options = WebOptions()  # the defaults serve runs with
    assert options.max_connections < ATTACKERS
    app = web.Application()
    app.router.add_get("/metrics", ok)
    app.router.add_get("/healthz", ok)
    listening = await start_site(app, "127.0.0.1", 0, ssl_context=server_ssl,
                                 shutdown_timeout=1.0, options=options)
    stop = asyncio.Event()
    seen: Counter[str] = Counter()
    attackers = [asyncio.ensure_future(attacker(listening.port, tls, stop, seen))
                 for _ in range(ATTACKERS)]
    answers: Counter[str] = Counter()
    try:
        while listening.connections.open < options.max_connections:  # the cap is full
            await asyncio.sleep(0.05)
        # Each request on a new connection, as a probe (and a scraper after an error) makes.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
            for i in range(SCRAPES + PROBES):
                path = "/metrics" if i % 3 else "/healthz"
                kind = "scrape" if path == "/metrics" else "probe"
                try:
                    async with session.get(listening.url + path, ssl=client_ssl) as resp:
                        await resp.read()
                        answers[f"{kind} {resp.status}"] += 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    answers[f"{kind} {type(exc).__name__}"] += 1
    finally:
        stop.set()
        await asyncio.gather(*attackers, return_exceptions=True)
        await listening.close()
    stats = listening.connections
    assert answers == {"scrape 200": SCRAPES, "probe 200": PROBES}, (answers, stats, seen)
    # The attack was on: the cap stayed full, waiting connections were pushed out, and the
    # attackers reconnected (each only after its connection was dropped). How many were
    # pushed out is not bounded here from the client's count: connections still in the
    # listen backlog when the attack stops are closed by the client, never accepted.
    assert seen["connected"] > ATTACKERS
    assert stats.evicted > 0
    assert stats.refused == 0


async def _ask(session: aiohttp.ClientSession, url: str, client_ssl: ssl.SSLContext,
               answers: Counter[str], kind: str) -> None:
    try:
        async with session.get(url, ssl=client_ssl) as resp:
            await resp.read()
            answers[f"{kind} {resp.status}"] += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        answers[f"{kind} {type(exc).__name__}"] += 1


async def test_tls_clients_that_handshake_and_half_send_do_not_lock_out_scrapes(
        short_tmp: Path) -> None:
    """Issue 33, D4: 200 clients in another process complete their TLS handshake, send half
    a request and reconnect as soon as they are dropped. Scrapes and probes on new
    connections, and a kept-alive scraper's (connected before the attack), are answered.
    Here the attackers reach 90-140 handshakes a second, not the probe's 450: this guards
    against the lock-out the probe saw (2 of 20 to 9 of 34 answered), it does not reproduce
    it. Issue 33's target is 90 %: alone this reaches 44-45 of 45, but a loaded 2-core CI
    run answered 41 of 45 (probes 13 of 15), so the guard is 75 % and the 90 % target stays
    open (docs/performance.md). Bounded in count (the attackers stop when the requests are
    made), loopback only."""
    cert, key = write_self_signed(short_tmp)
    server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ssl.load_cert_chain(cert, key)
    client_ssl = ssl.create_default_context(cafile=str(cert))
    options = WebOptions()  # the defaults serve runs with
    app = web.Application()
    app.router.add_get("/metrics", ok)
    app.router.add_get("/healthz", ok)
    listening = await start_site(app, "127.0.0.1", 0, ssl_context=server_ssl,
                                 shutdown_timeout=1.0, options=options)
    answers: Counter[str] = Counter()
    kept = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    attackers = None
    try:
        await _ask(kept, listening.url + "/metrics", client_ssl, answers, "before")
        attackers = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(__file__).with_name("tls_churn.py")),
            str(listening.port), str(cert), str(ATTACKERS),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        # The churn is on: every attacker has been dropped and come back at least once.
        assert attackers.stdout is not None
        handshakes = 0
        while handshakes < 2 * ATTACKERS:
            line = await asyncio.wait_for(attackers.stdout.readline(), 60)
            assert line, "the attackers stopped"
            handshakes = int(line)
        assert listening.connections.open >= options.max_connections, listening.connections
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
            for i in range(SCRAPES + PROBES):
                path = "/metrics" if i % 3 else "/healthz"
                kind = "scrape" if path == "/metrics" else "probe"
                await _ask(session, listening.url + path, client_ssl, answers, kind)
                await asyncio.sleep(0.1)  # spread over the attack, as scrapes are
                if i % 3 == 0:
                    await _ask(kept, listening.url + "/metrics", client_ssl, answers, "kept")
    finally:
        await kept.close()
        handshakes = 0
        if attackers is not None:
            out, _ = await attackers.communicate(b"")
            handshakes = int(out.split()[-1]) if out.split() else 0
        await listening.close()
    stats = listening.connections
    print(f"answered {dict(answers)}; {stats}; {handshakes} attacker handshakes")
    new = answers["scrape 200"] + answers["probe 200"]
    assert new >= 0.75 * (SCRAPES + PROBES), (answers, stats, handshakes)
    assert answers["kept 200"] >= 0.75 * PROBES, (answers, stats, handshakes)
    assert handshakes > ATTACKERS  # they reconnected: the churn was on
    assert stats.evicted > 0
