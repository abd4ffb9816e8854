"""The CPU map over time in a real headless Chromium, over the real history API.

A simulated node (the allocator model) runs three steps: pod ``web`` takes 2 CPUs, pod
``db`` takes 3, ``web`` leaves. Each step's ledger is reconciled from the node's PodResources
reports and written by the real ``HistoryWriter`` into SQLite; an aiohttp server serves the
page, the last ledger and the real history routes. Through the DevTools protocol: a click on
a pod lights its CPUs, a slider move shows the node at the first step, and a screenshot is
read by content (the colour at each CPU cell's centre says which CPUs are lit).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import test_cpumap_static
from aiohttp import web
from cpumap_browser import (
    POOL_COLOURS,
    DevTools,
    chromium_binary,
    decode_png,
    dump_dom,
    parse_dom,
)
from test_cpumap_static import Site, ledger_for, topology_node

from exporter.history import HistoryWriter, open_store
from exporter.history.api import add_routes
from reconciler.allocator import ModelConfig, PodPlacement, from_spec
from reconciler.ledger import Ledger
from tests.allocator.helpers import ctr, pod

STATIC = Path(__file__).resolve().parents[2] / "exporter" / "web" / "static"
NODE = "worker-3"
# Where a screenshot for the docs goes when PODRES_DOCS_SCREENSHOTS names a directory.
DOCS_SHOTS_ENV = "PODRES_DOCS_SCREENSHOTS"


site = test_cpumap_static.site  # the static page's server (no history routes): a fixture


@dataclass
class Steps:
    ledgers: list[Ledger]
    held: list[dict[str, frozenset[int]]]  # per step: pod name -> CPUs it holds
    times: list[datetime]


def _ledger(node: Any) -> Ledger:
    from exporter.assemble import snapshot_from_raw
    from reconciler.reconcile import reconcile

    raw = node.state().raw(node.model.topo.to_snapshot())
    return reconcile(snapshot_from_raw(raw, NODE).snapshot)


def _steps() -> Steps:
    from exporter.sim.model_driven import ModelDrivenNode

    node = ModelDrivenNode(from_spec("2x4x1"), ModelConfig(
        topology_policy="single-numa-node", scope="container", reserved_cpus=frozenset({0})))
    ledgers, held = [], []
    now = datetime.now(UTC).replace(microsecond=0)
    for change in ("web", "db", "-web"):
        if change.startswith("-"):
            assert node.delete("default", change[1:])
        else:
            size = "2" if change == "web" else "3"
            assert isinstance(node.add(pod(change, ctr("app", size))), PodPlacement)
        ledgers.append(_ledger(node))
        held.append({name: p.held for (_, name), p in node.model.pods.items()})
    return Steps(ledgers, held, [now - timedelta(minutes=30 - 10 * i) for i in range(3)])


@pytest.fixture
async def history_site(tmp_path: Path) -> AsyncIterator[tuple[str, Steps]]:
    chromium_binary()
    from exporter.service import cpumap

    steps = _steps()
    url = f"sqlite:///{tmp_path / 'history.db'}"
    store = open_store(url)
    writer = HistoryWriter(store, NODE, summary_interval=10)
    await writer.start()
    for ledger, at in zip(steps.ledgers, steps.times, strict=True):
        writer.submit(ledger, at)
    await writer.close()
    store.close()
    reader = open_store(url, mode="readonly")
    last = steps.ledgers[-1]

    async def index(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    async def ledger_route(request: web.Request) -> web.Response:
        return web.json_response(last.to_json())

    async def cpumap_route(request: web.Request) -> web.Response:
        return web.json_response(cpumap(last))

    async def csp(request: web.Request, response: web.StreamResponse) -> None:
        # What serve sends: the page needs nothing but its own origin.
        response.headers["Content-Security-Policy"] = "default-src 'self'"

    app = web.Application()
    app.on_response_prepare.append(csp)
    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api/v1/ledger", ledger_route)
    app.router.add_get("/api/v1/cpumap", cpumap_route)
    add_routes(app, reader)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/", steps
    finally:
        await runner.cleanup()
        reader.close()


LIT = "Array.from(document.querySelectorAll('#cpumap .cpu.lit'))" \
      ".map(c => Number(c.dataset.cpu)).sort((a, b) => a - b)"


async def _click(browser: DevTools, selector: str) -> None:
    """A real mouse click at the centre of the element (scrolled into view first)."""
    box = await browser.evaluate(
        f"(e => (e.scrollIntoView({{block: 'center'}}), JSON.stringify("
        f"e.getBoundingClientRect())))(document.querySelector({json.dumps(selector)}))")
    rect = json.loads(box)
    x, y = rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2
    for kind in ("mousePressed", "mouseReleased"):
        await browser.send("Input.dispatchMouseEvent",
                           {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})


async def _map_screenshot(browser: DevTools) -> tuple[bytes, dict[str, Any]]:
    """A PNG of the CPU map alone, and each CPU cell's centre in it."""
    layout = json.loads(await browser.evaluate("""(() => {
        const map = document.getElementById('cpumap');
        map.scrollIntoView({block: 'start'});
        const m = map.getBoundingClientRect();
        const cells = {};
        map.querySelectorAll('.cpu').forEach(c => {
          const r = c.getBoundingClientRect();
          cells[c.dataset.cpu] = [r.x - m.x + r.width / 2, r.y - m.y + r.height / 4];
        });
        return JSON.stringify({x: m.x + scrollX, y: m.y + scrollY, width: m.width,
                               height: m.height, cells});
    })()"""))
    shot = await browser.send("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": layout["x"], "y": layout["y"], "width": layout["width"],
                 "height": layout["height"], "scale": 1}})
    return base64.b64decode(shot["data"]), layout["cells"]


def _near(rgb: tuple[int, int, int], want: tuple[int, int, int], tol: int = 12) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(rgb, want, strict=True))


async def test_click_slider_and_screenshot(history_site: tuple[str, Steps],
                                           tmp_path: Path) -> None:
    url, steps = history_site
    web_then, db_now = steps.held[0]["web"], steps.held[2]["db"]
    browser = DevTools()
    try:
        await browser.start()
        await browser.open(url)
        await browser.wait_for("document.querySelectorAll('#cpumap .cpu').length === 8")
        # The change events of the history store: web starts, db starts, web ends.
        await browser.wait_for("!document.getElementById('timeline').hidden && "
                               "document.querySelectorAll('#events .event').length === 3")
        labels = await browser.evaluate(
            "Array.from(document.querySelectorAll('#events .event')).map(e => e.textContent)")
        assert [("default/web" in t, "default/db" in t, "ends" in t) for t in labels] == \
            [(True, False, False), (False, True, False), (True, False, True)]

        # A click on the db pod's row lights its CPUs, and only them.
        await _click(browser, 'button.select[data-select="pod"][data-key="default/db"]')
        assert await browser.wait_for(f"(l => l.length && l)({LIT})") == sorted(db_now)
        selection = await browser.evaluate("document.getElementById('selection').textContent")
        assert selection.startswith("default/db: 3 CPUs")

        # The slider to its first position (Home on the focused slider): the node at the
        # first event, from the history API's intervals at that moment.
        await browser.evaluate("document.getElementById('time-slider').focus()")
        await browser.press("Home", 36)
        await browser.wait_for("document.getElementById('status').className === 'past'")
        owners = json.loads(await browser.evaluate(
            "JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll("
            "'#cpumap .cpu')).map(c => [c.dataset.cpu, [c.dataset.pool, c.dataset.pod]])))"))
        held_then = {int(cpu) for cpu, (pool, who) in owners.items() if who == "default/web"}
        assert held_then == web_then
        assert all(pool == "node_exclusive" for cpu, (pool, _) in owners.items()
                   if int(cpu) in web_then)
        assert not any(who == "default/db" for _, who in owners.values())
        # db did not exist then: nothing is lit, and the selection says so.
        assert await browser.evaluate(LIT) == []
        assert "no CPUs at this moment" in await browser.evaluate(
            "document.getElementById('selection').textContent")
        assert await browser.evaluate(
            "document.querySelector('#events .event.current').textContent.includes('web')")

        # A click on one of web's CPUs selects web: its CPUs are lit.
        first = min(web_then)
        await _click(browser, f'#cpumap .cpu[data-cpu="{first}"]')
        assert await browser.wait_for(f"(l => l.length && l)({LIT})") == sorted(web_then)

        # The screenshot, read by content: the lit CPUs keep web's pool colour, every other
        # CPU is faded away from it.
        png, cells = await _map_screenshot(browser)
        _, _, rows = decode_png(png)
        colour = POOL_COLOURS["node_exclusive"]
        lit_on_screen = set()
        for cpu, (x, y) in cells.items():
            i = int(x) * 3
            rgb = tuple(rows[int(y)][i:i + 3])
            if _near(rgb, colour):  # type: ignore[arg-type]
                lit_on_screen.add(int(cpu))
        assert lit_on_screen == web_then, (lit_on_screen, web_then)
        shots = _docs_dir()
        if shots is not None:
            (shots / "cpumap-history.png").write_bytes(png)
            await browser.evaluate("document.getElementById('cpumap-title').scrollIntoView()")
            page = await browser.send("Page.captureScreenshot", {"format": "png"})
            (shots / "cpumap-over-time.png").write_bytes(base64.b64decode(page["data"]))

        # Back to live: the map follows the node again; db is gone from web's CPUs.
        await _click(browser, "#time-live")
        await browser.wait_for("document.getElementById('status').className === 'ok'")
        assert await browser.evaluate(LIT) == []  # web no longer holds CPUs
    finally:
        await browser.close()


def _docs_dir() -> Path | None:
    import os

    target = os.environ.get(DOCS_SHOTS_ENV)
    if not target:
        return None
    path = Path(target)
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_without_history_the_timeline_stays_hidden(site: Site) -> None:
    """History off (the assignments route answers 404): the live map alone, no slider, no
    error, and the usage colouring not offered (no usage series: /metrics answers 404)."""
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    html = dump_dom(site.url)
    dom = parse_dom(html)
    assert len(dom.cpus) == 16 and "failed" not in dom.status.lower()
    assert re.search(r'<section[^>]*id="timeline"[^>]*hidden', html)
    assert "/api/v1/assignments" in site.hits
    assert re.search(r'<option value="usage"[^>]*hidden', html)


async def test_colour_by_busy_time(site: Site) -> None:
    """Choosing a colouring through the select (real keyboard input) gives each CPU its heat
    in tenths: the busy share of the last poll. (The containers' own usage:
    test_cpumap_moment.py.)"""
    ledger = ledger_for(topology_node())
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger)
    site.set_json("/api/v1/cpuload", {"cpus": {"2": 0.75, "3": 0.31}})
    heat = "JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll(" \
           "'#cpumap .cpu[data-heat]')).map(c => [c.dataset.cpu, c.dataset.heat])))"
    browser = DevTools()
    try:
        await browser.start()
        await browser.open(site.url)
        await browser.wait_for("document.querySelector('#cpumap .cpu[data-busy]') !== null")
        assert json.loads(await browser.evaluate(heat)) == {}
        await browser.evaluate("document.getElementById('colour-by').focus()")
        await browser.press("ArrowDown", 40)  # pool -> busy time
        assert json.loads(await browser.wait_for(
            f"(h => h !== '{{}}' && h)({heat})")) == {"2": "8", "3": "3"}
        assert await browser.evaluate(
            "document.getElementById('cpumap').classList.contains('by-heat')")
    finally:
        await browser.close()
