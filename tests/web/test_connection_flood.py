"""The connection-exhaustion attacks of issues 25 and 33, on loopback: 200 clients that each
open a connection, send half a request (on TLS: nothing at all, or half a request after a
completed handshake) and reconnect as soon as they are dropped, against the real
``start_site`` with the default limits (128 connections). A cap on connections alone
locked every new one out (0 of 58 scrapes, 0 of 19 probes); evicting at once the
connection waiting longest cut legitimate ones short under TLS churn (issue 33, D4); with
only connections that have waited a second for their client evicted, and a new one kept in
the backlog until one has, scrapes, probes and a kept-alive scraper are answered.

Bounded in count: the attackers run while a fixed number of scrapes and probes are made;
nothing asserts a duration (each request has a scrape's timeout, 10 s)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from exporter.options import WebOptions
from exporter.tlsutil import write_self_signed
from exporter.web.connections import ConnectionStats
from exporter.web.lifecycle import start_site

ATTACKERS = 200
SCRAPES = 30
PROBES = 15
KEPT = SCRAPES // 2  # a kept-alive scraper's requests, one every second scrape
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
    kept = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    try:
        await _ask(kept, listening.url + "/metrics", client_ssl, answers, "before")
        while listening.connections.open < options.max_connections:  # the cap is full
            await asyncio.sleep(0.05)
        await _legitimate(listening.url, client_ssl, answers, kept)
    finally:
        await kept.close()
        stop.set()
        await asyncio.gather(*attackers, return_exceptions=True)
        await listening.close()
    stats = listening.connections
    assert answers == {"before 200": 1, "scrape 200": SCRAPES, "probe 200": PROBES,
                       "kept 200": KEPT}, (answers, stats, seen)
    # The attack was on: the cap stayed full, waiting connections were pushed out, and the
    # attackers reconnected (each only after its connection was dropped). How many were
    # pushed out is not bounded here from the client's count: connections still in the
    # listen backlog when the attack stops are closed by the client, never accepted.
    assert seen["connected"] > ATTACKERS
    assert stats.evicted > 0
    assert stats.refused == 0


@dataclass
class Churn:
    """What one measurement saw: answers by kind ("scrape 200", "probe ClientOSError"...),
    the server's connection counts, and the attackers' connections (TLS: handshakes)."""

    answers: Counter[str]
    stats: ConnectionStats
    connections: int
    full: bool  # the cap was full when the legitimate requests began
    took: list[float]  # seconds each request on a new connection took, in order

    def share(self, kind: str, asked: int) -> float:
        return self.answers[f"{kind} 200"] / asked


async def _ask(session: aiohttp.ClientSession, url: str, client_ssl: ssl.SSLContext | None,
               answers: Counter[str], kind: str, took: list[float] | None = None) -> None:
    """One request; its answer counted by kind and status (or error), and on a new
    connection the seconds it took appended to ``took`` (reported, never asserted)."""
    started = time.monotonic()
    try:
        async with session.get(url, ssl=True if client_ssl is None else client_ssl) as resp:
            await resp.read()
            answers[f"{kind} {resp.status}"] += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        answers[f"{kind} {type(exc).__name__}"] += 1
    finally:
        if took is not None:
            took.append(time.monotonic() - started)


async def _legitimate(url: str, client_ssl: ssl.SSLContext | None, answers: Counter[str],
                      kept: aiohttp.ClientSession, took: list[float] | None = None) -> None:
    """A scraper and a prober on new connections, side by side, and every third scrape a
    kept-alive scraper's; each request with a scrape's timeout (10 s)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
        async def scrapes() -> None:
            for i in range(SCRAPES):
                await _ask(session, url + "/metrics", client_ssl, answers, "scrape", took)
                await asyncio.sleep(0.1)  # spread over the attack, as scrapes are
                if i % 2 == 0:
                    await _ask(kept, url + "/metrics", client_ssl, answers, "kept")

        async def probes() -> None:
            for _ in range(PROBES):
                await _ask(session, url + "/healthz", client_ssl, answers, "probe", took)
                await asyncio.sleep(0.2)
        await asyncio.gather(scrapes(), probes())


async def measure(tmp: Path, attackers: int, tls: bool = True, processes: int = 2) -> Churn:
    """``attackers`` clients in ``processes`` other processes connect (completing their TLS
    handshake when ``tls``), send half a request and reconnect as soon as they are dropped, against
    the real ``start_site`` with the defaults ``serve`` runs with; once every one of them
    has come back at least once, ``SCRAPES`` scrapes and ``PROBES`` probes on new
    connections, and ``KEPT`` scrapes on a connection kept alive since before the attack.
    Bounded in count: the attackers stop when the requests are made."""
    server_ssl = client_ssl = None
    cafile = "-"
    if tls:
        cert, key = write_self_signed(tmp)
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(cert, key)
        client_ssl = ssl.create_default_context(cafile=str(cert))
        cafile = str(cert)
    options = WebOptions()  # the defaults serve runs with
    app = web.Application()
    app.router.add_get("/metrics", ok)
    app.router.add_get("/healthz", ok)
    listening = await start_site(app, "127.0.0.1", 0, ssl_context=server_ssl,
                                 shutdown_timeout=1.0, options=options)
    answers: Counter[str] = Counter()
    kept = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    churns: list[asyncio.subprocess.Process] = []
    full = False
    took: list[float] = []
    try:
        await _ask(kept, listening.url + "/metrics", client_ssl, answers, "before")
        for share in range(processes):
            churns.append(await asyncio.create_subprocess_exec(
                sys.executable, str(Path(__file__).with_name("tls_churn.py")),
                str(listening.port), cafile, str(len(range(share, attackers, processes))),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE))
        for churn in churns:  # the churn is on: each has been dropped and is back
            assert churn.stdout is not None
            made = 0
            while made < 2 * attackers // processes:
                line = await asyncio.wait_for(churn.stdout.readline(), 60)
                assert line, "the attackers stopped"
                made = int(line)
        full = listening.connections.open >= options.max_connections
        await _legitimate(listening.url, client_ssl, answers, kept, took)
    finally:
        await kept.close()
        made = 0
        for churn in churns:
            out, _ = await churn.communicate(b"")
            made += int(out.split()[-1]) if out.split() else 0
        await listening.close()
    return Churn(answers, listening.connections, made, full, sorted(took))


async def test_tls_clients_that_handshake_and_half_send_do_not_lock_out_scrapes(
        short_tmp: Path) -> None:
    """Issue 33, D4: 200 clients in another process complete their TLS handshake, send half
    a request and reconnect as soon as they are dropped. At least 90 % of scrapes, of
    probes (each on a new connection) and of a kept-alive scraper's requests are answered.
    Evicting at once whatever waited longest, a loaded 2-core CI run answered 41 of 45 new
    ones (probes 13 of 15) and the issue's probe, at ~450 handshakes a second, 10-26 % of
    scrapes: the legitimate connection was cut in its handshake, or between its handshake
    and its request, by the next connection accepted. Figures: docs/performance.md."""
    churn = await measure(short_tmp, ATTACKERS, processes=2)
    print(f"answered {dict(churn.answers)}; {churn.stats}; {churn.connections} handshakes")
    assert churn.share("scrape", SCRAPES) >= 0.9, churn
    assert churn.share("probe", PROBES) >= 0.9, churn
    assert churn.share("kept", KEPT) >= 0.9, churn
    assert churn.full  # the attack was on: the cap was full, and they reconnected
    assert churn.connections > ATTACKERS
    assert churn.stats.evicted > 0
