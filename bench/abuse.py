"""Web-layer abuse benchmark: ``python -m bench.abuse [--attackers 64] [--idle 2000]``.

Every party is a process of its own, on loopback: the server (the exporter's middleware
and ``start_site``, TLS and basic auth with a cost-10 bcrypt hash, a static /metrics), the
attackers, and this process, which scrapes and measures.

- auth: a legitimate scraper's ``/metrics`` p99 (one keep-alive TLS connection, good
  credentials) while ``--attackers`` clients send wrong passwords as fast as they are
  answered, against its p99 with nobody attacking. Unattacked and attacked phases
  alternate so that drift of the machine hits both alike. Target: ratio ≤ 2.
- idle: the server's resident set (VmRSS) while ``--idle`` TLS clients connect, complete
  the handshake and then send nothing, first with limits out of the way (no cap,
  hour-long timeouts: what every server did before the limits), then with the default
  ``--web.*`` limits; with the defaults, how many of the clients the server closed
  (refused at the cap or timed out) and its RSS once they are closed.

Prints a table and, as its last line, one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt

from bench.scrape import percentile, vm_status
from exporter.options import WebOptions
from exporter.tlsutil import write_self_signed

AUTH_TARGET = 2.0
PASSWORD = "correct horse battery staple"
BODY = b"# a static exposition of about 64 KiB\n" + b"podres_bench_metric 1\n" * 2900
UNLIMITED = WebOptions(read_header_timeout=3600.0, idle_timeout=3600.0,
                       max_connections=1_000_000)


def _auth(password: str) -> str:
    return "Basic " + base64.b64encode(f"prom:{password}".encode()).decode()


# -- the server and the attackers (child processes) --------------------------------------------

async def _serve(config_file: str, unlimited: bool) -> None:
    from aiohttp import web

    from exporter.web.app import auth_middleware
    from exporter.web.lifecycle import start_site
    from exporter.web.webconfig import load_web_config

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=BODY, content_type="text/plain")

    config = load_web_config(config_file)
    app = web.Application(middlewares=[auth_middleware(config)])
    app.router.add_get("/metrics", metrics)
    listening = await start_site(app, "127.0.0.1", 0, ssl_context=config.ssl_context,
                                 shutdown_timeout=1.0,
                                 options=UNLIMITED if unlimited else WebOptions())
    print(listening.url, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    await listening.close()


async def _attack(url: str, cafile: str, clients: int) -> None:
    context = ssl.create_default_context(cafile=cafile)
    counts: dict[str, int] = {}
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)

    async def attacker(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            try:
                async with session.get(url, ssl=context, headers={
                        "Authorization": _auth(secrets.token_hex(8))}) as response:
                    await response.read()
                    key = str(response.status)
            except aiohttp.ClientError as exc:
                key = type(exc).__name__
            counts[key] = counts.get(key, 0) + 1

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = [asyncio.ensure_future(attacker(session)) for _ in range(clients)]
        print("attacking", flush=True)
        await stop.wait()
        await asyncio.gather(*tasks)
    print(json.dumps(counts), flush=True)


# -- the measuring process ---------------------------------------------------------------------

@contextlib.contextmanager
def _child(*argv: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen([sys.executable, "-m", "bench.abuse", *argv],
                               stdout=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"{process.args!r} exited with status {process.wait()}")
    return line


async def _scrapes(url: str, context: ssl.SSLContext, count: int) -> list[float]:
    latencies = []
    async with aiohttp.ClientSession() as session:
        for _ in range(count):
            start = time.perf_counter()
            async with session.get(url, ssl=context,
                                   headers={"Authorization": _auth(PASSWORD)}) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"legitimate scrape answered {response.status}")
            latencies.append(time.perf_counter() - start)
    return latencies


async def measure_auth(config: Path, cafile: Path, *, attackers: int, scrapes: int,
                       rounds: int) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(cafile))
    quiet: list[float] = []
    attacked: list[float] = []
    answers: dict[str, int] = {}
    with _child("serve", str(config)) as server:
        url = _first_line(server) + "/metrics"
        await _scrapes(url, context, 1)  # the one bcrypt check a scraper ever costs
        for _ in range(rounds):
            quiet += await _scrapes(url, context, scrapes)
            with _child("attack", url, str(cafile), str(attackers)) as attack:
                _first_line(attack)
                await asyncio.sleep(1.0)  # let the flood reach its steady state
                attacked += await _scrapes(url, context, scrapes)
                attack.send_signal(signal.SIGINT)
                for key, n in json.loads(_first_line(attack)).items():
                    answers[key] = answers.get(key, 0) + n
    p99_quiet, p99_attacked = percentile(quiet, 99), percentile(attacked, 99)
    return {"attackers": attackers, "scrapes": len(quiet) + len(attacked),
            "p99_unattacked_ms": round(p99_quiet * 1000, 2),
            "p99_attacked_ms": round(p99_attacked * 1000, 2),
            "ratio": round(p99_attacked / p99_quiet, 2), "target": AUTH_TARGET,
            "attacker_answers": answers}


async def _idle_client(port: int, context: ssl.SSLContext, opened: asyncio.Event
                       ) -> tuple[str, float]:
    """('held' or 'refused', seconds until the server closed it)."""
    start = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except (OSError, ssl.SSLError):
        return "refused", time.monotonic() - start
    with contextlib.suppress(OSError, ssl.SSLError):
        await opened.wait()
        await reader.read()  # returns when the server closes the connection
    writer.close()
    return "held", time.monotonic() - start


async def measure_idle(config: Path, cafile: Path, *, clients: int, unlimited: bool
                       ) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(cafile))
    argv = ["serve", str(config)] + (["--unlimited"] if unlimited else [])
    with _child(*argv) as server:
        port = int(_first_line(server).rsplit(":", 1)[1])
        baseline = vm_status(server.pid)["VmRSS"]
        opened = asyncio.Event()
        tasks = []
        for start in range(0, clients, 100):  # in batches: a burst, not a SYN flood
            tasks += [asyncio.ensure_future(_idle_client(port, context, opened))
                      for _ in range(start, min(clients, start + 100))]
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # every handshake done or refused
        held_rss = vm_status(server.pid)["VmRSS"]
        opened.set()
        result: dict[str, Any] = {"clients": clients, "rss_baseline_mib": baseline,
                                  "rss_with_clients_mib": held_rss}
        if unlimited:  # nothing would ever close them: stop here
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return result
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
        result.update({
            "refused_at_cap": sum(1 for kind, _ in outcomes if kind == "refused"),
            "closed_by_timeout": sum(1 for kind, _ in outcomes if kind == "held"),
            "last_closed_after_s": round(max(t for _, t in outcomes), 1),
            "rss_after_mib": vm_status(server.pid)["VmRSS"]})
        return result


def table(r: dict[str, Any]) -> str:
    a, before, after = r["auth"], r["idle_unlimited"], r["idle_default"]
    verdict = "ok" if a["ratio"] <= a["target"] else "OVER TARGET"
    return "\n".join([
        f"auth: legitimate scraper p99 {a['p99_unattacked_ms']} ms alone, "
        f"{a['p99_attacked_ms']} ms beside {a['attackers']} password guessers: "
        f"ratio {a['ratio']} (target <= {a['target']}: {verdict})",
        f"idle TLS x{before['clients']}, no limits: RSS {before['rss_baseline_mib']} -> "
        f"{before['rss_with_clients_mib']} MiB, all held",
        f"idle TLS x{after['clients']}, default limits: RSS {after['rss_baseline_mib']} -> "
        f"{after['rss_with_clients_mib']} MiB; {after['refused_at_cap']} refused at the "
        f"cap, {after['closed_by_timeout']} closed by the timeout (last after "
        f"{after['last_closed_after_s']} s); RSS after: {after['rss_after_mib']} MiB",
    ])


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cert, key = write_self_signed(workdir)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    config = workdir / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                      f"basic_auth_users:\n  prom: '{hashed}'\n")
    return {
        "auth": await measure_auth(config, cert, attackers=args.attackers,
                                   scrapes=args.scrapes, rounds=args.rounds),
        "idle_unlimited": await measure_idle(config, cert, clients=args.idle,
                                             unlimited=True),
        "idle_default": await measure_idle(config, cert, clients=args.idle,
                                           unlimited=False),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        asyncio.run(_serve(argv[1], "--unlimited" in argv[2:]))
        return 0
    if argv[:1] == ["attack"]:
        asyncio.run(_attack(argv[1], argv[2], int(argv[3])))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.abuse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attackers", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=100, help="per phase")
    parser.add_argument("--rounds", type=int, default=2,
                        help="unattacked/attacked phase pairs")
    parser.add_argument("--idle", type=int, default=2000, help="idle TLS clients")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="podres-abuse-") as workdir:
        result = asyncio.run(run(args, Path(workdir)))
    print(table(result))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
