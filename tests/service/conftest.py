"""End-to-end harness for ``serve``: a simulated kubelet (real gRPC on a unix socket, real
HTTPS), the exporter running in-process on the test's event loop, and a real HTTP client.

``await run_serve(sim, *flags)`` starts ``serve`` against a running ``SimKubelet`` (socket,
HTTPS URL, CA file and a bearer token wired in), waits until it listens and returns a
``Served`` handle; every exporter started is stopped at teardown.
"""

from __future__ import annotations

import asyncio
import math
import os
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import pytest

from exporter.sim.server import SimKubelet

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).with_name("podres-exporter"))
PROMTOOL = "/usr/bin/promtool"
TOKEN = "sim-token-for-tests"


def scenario_root() -> Path:
    """The public scenarios: the project's copy when present, else the shared folder."""
    local = REPO / "tests" / "data" / "scenarios"
    if local.is_dir() and any((p / "expect.json").exists() for p in local.iterdir()):
        return local
    return Path("/work/shared/scenarios")


def scenario_names() -> list[str]:
    root = scenario_root()
    return sorted(p.name for p in root.iterdir() if (p / "expect.json").exists())


# -- exposition parsing ---------------------------------------------------------------------

SeriesKey = tuple[str, frozenset[tuple[str, str]]]


def parse_exposition(text: str) -> dict[SeriesKey, float]:
    """Every sample of a text exposition, keyed by (name, label set); parsed by the
    official Python parser so escaping is checked independently of our renderer."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def series(samples: Mapping[SeriesKey, float], name: str, **labels: str
           ) -> dict[frozenset[tuple[str, str]], float]:
    """Samples of one metric whose labels include ``labels``."""
    want = set(labels.items())
    return {lbls: v for (n, lbls), v in samples.items() if n == name and want <= lbls}


def value(samples: Mapping[SeriesKey, float], name: str, **labels: str) -> float | None:
    """The value of exactly the series ``name{labels}``; None when absent."""
    return samples.get((name, frozenset(labels.items())))


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, "check", "metrics"], input=text, text=True,
                          capture_output=True, timeout=60, check=False)


needs_promtool = pytest.mark.skipif(not os.access(PROMTOOL, os.X_OK),
                                    reason=f"{PROMTOOL} not installed (Debian: prometheus)")


# -- the exporter under test ----------------------------------------------------------------

@dataclass
class Served:
    url: str
    session: aiohttp.ClientSession
    stop: asyncio.Event
    task: asyncio.Task[int]
    ssl: ssl.SSLContext | bool | None = None
    auth: str | None = None  # an Authorization header value (see basic_auth)
    extra: dict[str, Any] = field(default_factory=dict)

    async def get(self, path: str, *, auth: str | Literal["default"] | None = "default",
                  **kwargs: Any) -> tuple[int, bytes]:
        """GET ``path``; ``auth`` overrides the handle's credentials (None: send none)."""
        kwargs.setdefault("ssl", self.ssl)
        header = self.auth if auth == "default" else auth
        headers = dict(kwargs.pop("headers", None) or {})
        if header is not None:
            headers.setdefault("Authorization", header)
        async with self.session.get(self.url + path, headers=headers, **kwargs) as response:
            return response.status, await response.read()

    async def metrics_text(self) -> str:
        status, body = await self.get("/metrics")
        assert status == 200, (status, body[:300])
        return body.decode("utf-8")

    async def metrics(self) -> dict[SeriesKey, float]:
        return parse_exposition(await self.metrics_text())

    async def wait_for(self, predicate: Callable[[dict[SeriesKey, float]], bool], *,
                       what: str, timeout: float = 30.0) -> dict[SeriesKey, float]:
        """Scrape until ``predicate`` holds. The timeout only stops a broken test from
        hanging; it is not a performance assertion."""
        deadline = time.monotonic() + timeout
        while True:
            samples = await self.metrics()
            if predicate(samples):
                return samples
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)


def basic_auth(user: str, password: str) -> str:
    """An ``Authorization: Basic`` header value."""
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


RunServe = Callable[..., Awaitable[Served]]


def sim_flags(sim: SimKubelet, token_file: Path | None) -> list[str]:
    flags = ["--podresources.socket", sim.socket_path]
    if sim.http_url is not None:
        flags += ["--kubelet.url", sim.http_url, "--kubelet.ca-file", str(sim.cert_path),
                  "--kubelet.token-file", str(token_file) if token_file else ""]
    return flags


@pytest.fixture
async def run_serve(short_tmp: Path) -> AsyncIterator[RunServe]:
    from exporter.cli import build_parser
    from exporter.commands.serve import serve

    token_file = short_tmp / "token"
    token_file.write_text(TOKEN + "\n")
    served: list[Served] = []
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def start(sim: SimKubelet | None, *flags: str, listen: str = "127.0.0.1:0",
                    client_ssl: ssl.SSLContext | bool | None = None,
                    auth: str | None = None) -> Served:
        argv = ["serve", "--web.listen-address", listen, "--history.url", "off",
                "--node-name", "test-node", "--sysfs", "/nonexistent-sysfs",
                "--cgroup.root", "", "--proc.root", ""]  # not this machine's kernel
        if sim is not None:
            argv += sim_flags(sim, token_file)
        argv += list(flags)
        args = build_parser().parse_args(argv)
        stop = asyncio.Event()
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve(args, on_ready=ready.set_result, stop=stop))
        done, _ = await asyncio.wait({task, ready}, timeout=30,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # raises what serve raised
            raise AssertionError("serve returned before listening")
        assert ready in done, "serve did not start listening"
        handle = Served(ready.result(), session, stop, task, client_ssl, auth)
        served.append(handle)
        return handle

    try:
        yield start
    finally:
        for handle in served:
            handle.stop.set()
            try:
                await asyncio.wait_for(handle.task, timeout=30)
            except Exception:  # a test that already failed reports its own error
                handle.task.cancel()
        await session.close()


def online_cpus(topology_file: Path) -> int:
    import json

    return len(json.loads(topology_file.read_text())["cpus"])


def finite(v: float) -> bool:
    return not (math.isnan(v) or math.isinf(v))


def without_pods(state: Any, *names: tuple[str, str]) -> Any:
    """A copy of a ``KubeletState`` without the pods ``(namespace, name)``, in both the
    PodResources List and the /pods body: what a kubelet reports once they are deleted."""
    from dataclasses import replace

    from exporter.pb import api_pb2

    drop = set(names)
    listing = api_pb2.ListPodResourcesResponse()
    listing.CopyFrom(state.list_response)
    del listing.pod_resources[:]
    listing.pod_resources.extend(p for p in state.list_response.pod_resources
                                 if (p.namespace, p.name) not in drop)
    pod_list = state.pod_list
    if pod_list is not None:
        pod_list = dict(pod_list, items=[
            i for i in pod_list.get("items", [])
            if (i["metadata"]["namespace"], i["metadata"]["name"]) not in drop])
    return replace(state, list_response=listing, pod_list=pod_list)
