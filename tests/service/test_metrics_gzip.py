"""``/metrics``, ``/api/v1/ledger`` and ``/api/v1/cpumap`` gzip-compressed for a client
that accepts it: byte-identical to the plain bodies once decompressed, one ordinary gzip
member (curl's ``--compressed`` reads only the first), negotiated with q-values, and
scraped by a real Prometheus."""

from __future__ import annotations

import asyncio
import gc
import gzip
import os
import tracemalloc
import zlib

import aiohttp
import pytest

from exporter.metrics.compression import GzipPrefix, choose_encoding, gzip_bytes
from exporter.sim.server import SimKubelet
from exporter.sources.fixture import load_fixture_dir
from tests.conftest import StartSim
from tests.service.conftest import (
    TOKEN,
    RunServe,
    Served,
    parse_exposition,
    scenario_root,
    series,
    value,
    without_pods,
)

PATHS = ("/metrics", "/api/v1/ledger", "/api/v1/cpumap")


@pytest.mark.parametrize("header, expected", [
    ("gzip", "gzip"),
    ("gzip, deflate, br", "gzip"),
    ("GZIP", "gzip"),
    ("x-gzip", "gzip"),
    ("*", "gzip"),
    ("deflate, *;q=0.5", "gzip"),
    ("identity;q=0.5, gzip;q=0.8", "gzip"),
    ("gzip;q=0.5, identity", "identity"),
    ("gzip;q=0", "identity"),
    ("gzip; q=0.000", "identity"),
    ("*;q=0", "identity"),
    ("*, gzip;q=0", "identity"),
    ("gzip;q=abc", "identity"),
    ("gzip;q=2", "identity"),
    ("deflate, br", "identity"),
    ("identity", "identity"),
    ("", "identity"),
    (None, "identity"),
    (" , ;;, =", "identity"),
])
def test_accept_encoding_negotiation(header: str | None, expected: str) -> None:
    assert choose_encoding(header) == expected


def one_member(body: bytes) -> bytes:
    """The content of ``body``, asserting that it is exactly one gzip member."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    content = inflater.decompress(body) + inflater.flush()
    assert inflater.eof and inflater.unused_data == b"", "not exactly one gzip member"
    return content


def test_a_prefix_is_completed_by_any_tail_into_one_member() -> None:
    head = os.urandom(50_000) + b"podres_cpus 1\n" * 5000
    prefix = GzipPrefix(head)
    for tail in (b"", b"podres_up 1\n", os.urandom(70_000)):
        body = prefix.finish(tail)
        assert one_member(body) == head + tail
        assert gzip.decompress(body) == head + tail
    assert one_member(gzip_bytes(head)) == head
    assert gzip_bytes(head) == gzip_bytes(head)  # no timestamp in the header
    # The same header as gzip_bytes: the completed member's bytes tell nothing apart.
    assert prefix.finish(b"")[:10] == gzip_bytes(b"")[:10]


def test_a_prefix_holds_its_compressed_bytes_and_no_compressor() -> None:
    # What a published ledger keeps for its gzip bodies, traced (zlib allocates through
    # Python's raw allocator): a compressor to continue would be ~256 KiB more.
    head = os.urandom(100_000) + b"podres_cpus 1\n" * 30_000
    gc.collect()
    tracemalloc.start()
    try:
        prefix = GzipPrefix(head)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    compressed = len(prefix.finish(b"")) - 10  # less the empty tail's block and trailer
    assert compressed <= held < compressed + 16 * 1024


async def fetch(served: Served, path: str, accept: str | None
                ) -> tuple[int, dict[str, str], bytes]:
    """The raw response: the client adds no Accept-Encoding of its own and decompresses
    nothing."""
    headers = {aiohttp.hdrs.ACCEPT_ENCODING: accept} if accept is not None else {}
    async with aiohttp.ClientSession(auto_decompress=False,
                                     skip_auto_headers=["Accept-Encoding"]) as session, \
            session.get(served.url + path, headers=headers) as response:
        return response.status, dict(response.headers), await response.read()


async def serve_scenario(start_sim: StartSim, run_serve: RunServe, *flags: str,
                         name: str = "sidecar-hybrid") -> tuple[Served, SimKubelet]:
    directory = scenario_root() / name
    sim = await start_sim(directory, http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"), *flags)
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    return served, sim


async def test_gzip_bodies_are_the_plain_bodies(start_sim: StartSim,
                                                run_serve: RunServe) -> None:
    # One poll a minute: nothing changes between the plain and the compressed request.
    served, _ = await serve_scenario(start_sim, run_serve, "--poll.interval", "1m")
    for path in PATHS:
        status, plain_headers, plain = await fetch(served, path, None)
        assert status == 200 and "Content-Encoding" not in plain_headers
        assert plain_headers["Vary"] == "Accept-Encoding"
        for _ in range(2):  # the second answer comes from the cache
            status, headers, body = await fetch(served, path, "gzip")
            assert status == 200, path
            assert headers["Content-Encoding"] == "gzip"
            assert headers["Vary"] == "Accept-Encoding"
            assert headers["Content-Type"] == plain_headers["Content-Type"]
            assert one_member(body) == plain, path
            assert gzip.decompress(body) == plain
            assert len(body) < len(plain)


@pytest.mark.parametrize("accept, compressed", [
    ("identity", False), ("gzip;q=0", False), ("br", False), ("x-gzip;q=0.3", True),
])
async def test_the_encoding_follows_the_request(start_sim: StartSim, run_serve: RunServe,
                                                accept: str, compressed: bool) -> None:
    served, _ = await serve_scenario(start_sim, run_serve, "--poll.interval", "1m")
    for path in PATHS:
        status, headers, body = await fetch(served, path, accept)
        assert status == 200
        assert ("Content-Encoding" in headers) is compressed
        text = (gzip.decompress(body) if compressed else body).decode()
        assert text.startswith("# HELP podres_cpus" if path == "/metrics" else "{")


async def test_the_compressed_body_follows_the_ledger(start_sim: StartSim,
                                                      run_serve: RunServe) -> None:
    served, sim = await serve_scenario(start_sim, run_serve, "--poll.interval", "200ms")

    async def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        status, _, body = await fetch(served, "/metrics", "gzip")
        assert status == 200
        return parse_exposition(one_member(body).decode())

    assert series(await scrape(), "podres_pod_cpus", pod="web")
    state = load_fixture_dir(scenario_root() / "sidecar-hybrid").kubelet
    sim.set_state(without_pods(state, ("shop", "web")))
    for _ in range(300):  # a broken exporter fails here, not by a timing assertion
        samples = await scrape()
        if not series(samples, "podres_pod_cpus", pod="web"):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the compressed body kept the deleted pod")
    assert value(samples, "podres_up") == 1.0  # the live tail is there too


async def test_no_ledger_yet_is_compressed_too(run_serve: RunServe) -> None:
    """Before any successful poll the body is the self-metrics alone."""
    served = await run_serve(None, "--podresources.socket", "/nonexistent/kubelet.sock",
                             "--topology", str(scenario_root() / "sidecar-hybrid" /
                                               "topology.json"), "--poll.interval", "1m")
    status, headers, body = await fetch(served, "/metrics", "gzip")
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    samples = parse_exposition(one_member(body).decode())
    assert value(samples, "podres_up") == 0.0
    # Every configured source's operations are there from the first scrape, whether or not
    # the first poll (which fails both RPCs on the missing socket) has ended yet.
    counts = {value(samples, "podres_source_errors_total", source="podresources",
                    operation=operation) for operation in ("List", "GetAllocatableResources")}
    assert counts in ({0.0}, {1.0})
    assert value(samples, "podres_source_errors_total", source="exporter",
                 operation="poll") == 0.0
    status, _, _ = await fetch(served, "/api/v1/ledger", "gzip")
    assert status == 503


@pytest.mark.slow
async def test_a_real_prometheus_scrapes_the_compressed_body(
        start_sim: StartSim, run_serve: RunServe) -> None:
    """Prometheus always asks for gzip: every series of the exposition, from the part
    compressed at the ledger change and from the live tail, reaches its TSDB."""
    from tests.dashboards.dash_helpers import PrometheusServer, prometheus_binary

    prometheus_binary()
    served, _ = await serve_scenario(start_sim, run_serve, "--poll.interval", "1m")
    status, headers, body = await fetch(served, "/metrics", "gzip")  # Prometheus' header
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    # Prometheus stores no empty label.
    exposed = {(name, frozenset((k, v) for k, v in labels if v))
               for name, labels in parse_exposition(one_member(body).decode())}
    target = served.url.removeprefix("http://")
    prom = await asyncio.to_thread(PrometheusServer, [
        {"job_name": "podres", "static_configs": [{"targets": [target]}]}], rules=False)
    try:
        # The Prometheus helpers block: run them off the loop that serves the exporter.
        up = await asyncio.to_thread(prom.wait_for, 'up{job="podres"} == 1', 30)
        assert up, prom.logs()
        result = await asyncio.to_thread(prom.query, '{__name__=~"podres_.+"}')
    finally:
        await asyncio.to_thread(prom.stop)
    scraped = {(r["metric"]["__name__"], frozenset(
        (k, v) for k, v in r["metric"].items() if k not in ("__name__", "job", "instance")))
        for r in result}
    assert scraped == exposed
    assert {name for name, _ in scraped} >= {"podres_cpus", "podres_build_info"}
