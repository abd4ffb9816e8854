"""The CPU map of a running ``podres-exporter demo`` in headless Chromium: one cell per
online CPU of the ledger, every pool of the ledger on the page and on the screenshot."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cpumap_browser import (
    POOL_COLOURS,
    chromium_binary,
    colour_histogram,
    decode_png,
    dump_dom,
    parse_dom,
    pixels_near,
    screenshot,
)

from exporter.demo.node import demo_pods

BIN = Path(sys.executable).parent


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def demo_url() -> Iterator[str]:
    chromium_binary()  # skip before starting anything when there is no browser
    proc = subprocess.Popen(
        [str(BIN / "podres-exporter"), "demo", "--web.listen-address", "127.0.0.1:0",
         "--duration", "120s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "GRPC_VERBOSITY": "ERROR"})
    try:
        assert proc.stdout is not None
        url = None
        seen = []
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            match = re.search(r"(http://127\.0\.0\.1:\d+/)\s*$", line)
            if match and "CPU map" in line:
                url = match.group(1)
        assert url, "demo printed no CPU map URL:\n" + "".join(seen)
        # Ready once a ledger holds the whole workload: the demo's pods arrive one a
        # second after the URLs, and a map of the first few lacks pool pixels.
        want = len(demo_pods())
        deadline = time.monotonic() + 60
        pods = None
        while pods != want:
            assert time.monotonic() < deadline, \
                f"demo's ledger never held its {want} pods (last: {pods})"
            time.sleep(0.2)
            try:
                pods = len(_get_json(url + "api/v1/ledger")["pods"])
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def test_cpu_map_of_a_running_demo(demo_url: str, tmp_path: Path) -> None:
    ledger = _get_json(demo_url + "api/v1/ledger")
    cpumap = _get_json(demo_url + "api/v1/cpumap")
    pools = {pool for pool, count in ledger["cpu_pools"].items() if count}

    dom = parse_dom(dump_dom(demo_url))
    assert "failed" not in dom.status.lower(), dom.status
    assert len(dom.cpus) == ledger["node"]["online_cpus"] == len(cpumap["cpus"])
    assert {c["data-pool"] for c in dom.cpus} == pools
    assert set(dom.legend_pools) == pools
    for pool in pools:
        shown = sum(1 for c in dom.cpus if c["data-pool"] == pool)
        assert shown == ledger["cpu_pools"][pool], pool
    # The table lists the pods that hold CPUs (a block, or node-exclusive containers).
    holding = {(c["namespace"], c["pod"]) for c in ledger["containers"]
               if c["assignment"] == "node_exclusive"}
    assert dom.pod_rows == [f"{p['namespace']}/{p['name']}" for p in ledger["pods"]
                            if p["cpus"] or (p["namespace"], p["name"]) in holding]

    png = screenshot(demo_url, tmp_path / "demo.png", width=1100, height=800)
    if os.environ.get("PODRES_SCREENSHOT_DIR"):
        target = Path(os.environ["PODRES_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        (target / "cpumap-demo.png").write_bytes(png)
    width, height, rows = decode_png(png)
    hist = colour_histogram(rows)
    assert len(hist) > 50
    assert hist.most_common(1)[0][1] < 0.97 * width * height
    for pool in pools:
        assert pixels_near(hist, POOL_COLOURS[pool]) > 300, f"{pool} not on the screenshot"


async def test_own_usage_colouring_on_a_running_demo(demo_url: str) -> None:
    """The demo's simulated cgroup tree gives /metrics the containers' own usage: after two
    polls the page offers the colouring, and it heats exactly CPUs that containers of the
    ledger run on."""
    from cpumap_browser import DevTools

    ledger = _get_json(demo_url + "api/v1/ledger")
    held: set[int] = set()
    for c in ledger["containers"]:
        for part in filter(None, (c["cpus"] or "").split(",")):
            lo, _, hi = part.partition("-")
            held.update(range(int(lo), int(hi or lo) + 1))
    browser = DevTools()
    try:
        await browser.start()
        await browser.open(demo_url)
        # The first poll's exposition may come before the kernel's: the next refresh (15 s).
        await browser.wait_for("(o => o && !o.hidden)("
                               "document.querySelector('option[value=usage]'))", timeout=35)
        await browser.wait_for("!document.querySelector('option[value=usage]').disabled",
                               timeout=25)
        await browser.evaluate("(s => (s.value = 'usage', s.dispatchEvent("
                               "new Event('change'))))(document.getElementById('colour-by'))")
        heated = await browser.wait_for(
            "(l => l.length && l)(Array.from(document.querySelectorAll("
            "'#cpumap .cpu[data-heat]')).map(c => Number(c.dataset.cpu)))")
        assert set(heated) <= held, (heated, held)
        assert await browser.evaluate(
            "document.querySelectorAll('#legend .legend-heat').length") == 6
    finally:
        await browser.close()
