"""The CPU map shows one moment (issue 31, item 2), each point in a real headless Chromium
driven over the DevTools protocol: devices drawn from the ledger's ``devices`` object, the
containers' own usage from the exposition, a past moment that says what stays live and
scrolls its events into view, text contrast of every cell computed from the computed
styles, the selection cleared whole, the CLI's reclaimed wording, one Tab stop for the map,
and RFC 3339 UTC times.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import test_cpumap_static
from cpumap_browser import DevTools, chromium_binary, dump_dom
from test_cpumap_static import Site, ledger_for, topology_node

from exporter.metrics.catalogue import BY_NAME
from exporter.metrics.exposition import render_family
from exporter.render import reclaimed_cell
from reconciler.devices import ContainerDevices, DeviceCount, DeviceLedger
from reconciler.snapshot import DeviceAlloc

STATIC = Path(__file__).resolve().parents[2] / "exporter" / "web" / "static"
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
LIT = "Array.from(document.querySelectorAll('#cpumap .cpu.lit'))" \
      ".map(c => Number(c.dataset.cpu)).sort((a, b) => a - b)"

site = test_cpumap_static.site  # the static page's server: a fixture


def _devices_json() -> dict[str, Any]:
    """The ledger's devices object as the reconciler serialises it: two GPUs on NUMA node 1
    (GPU-0 held by shop/web/app), and a resource whose plugin reports no topology."""
    return DeviceLedger(
        containers=(ContainerDevices("shop", "web", "app",
                                     (DeviceAlloc("nvidia.com/gpu", ("GPU-0",), (1,)),), ()),
                    ContainerDevices("legacy", "db", "db",
                                     (DeviceAlloc("example.com/fpga", ("fpga-7",), ()),), ())),
        counts=(DeviceCount("example.com/fpga", None, 1, 1, 0),
                DeviceCount("nvidia.com/gpu", 1, 2, 1, 1)),
    ).to_json()


def _exposition(poll_time: float, usage: dict[tuple[str, str, str], float]) -> str:
    """The two families the page reads, written by the exporter's own renderer."""
    out: list[str] = []
    render_family(BY_NAME["podres_container_cpu_usage_seconds_total"],
                  list(usage.items()), out)
    render_family(BY_NAME["podres_last_success_timestamp_seconds"], [((), poll_time)], out)
    return "".join(out)


async def _open(site: Site) -> DevTools:
    browser = DevTools()
    await browser.start()
    await browser.open(site.url)
    await browser.wait_for("document.querySelectorAll('#cpumap .cpu').length === 16")
    return browser


async def _click(browser: DevTools, selector: str) -> None:
    box = await browser.evaluate(
        f"(e => (e.scrollIntoView({{block: 'center'}}), JSON.stringify("
        f"e.getBoundingClientRect())))(document.querySelector({json.dumps(selector)}))")
    rect = json.loads(box)
    x, y = rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2
    for kind in ("mousePressed", "mouseReleased"):
        await browser.send("Input.dispatchMouseEvent",
                           {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})


# --------------------------------------------------------------------------- devices


def test_devices_are_drawn_from_the_ledger(site: Site) -> None:
    ledger = ledger_for(topology_node())
    ledger["devices"] = _devices_json()
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger)
    html = dump_dom(site.url)
    numa1 = re.search(r'<section class="numa[^"]*" data-numa="1".*?</section>', html, re.S)
    assert numa1 is not None
    assert "nvidia.com/gpu: 1 of 2 held, 1 free" in numa1.group(0)
    assert "nvidia.com/gpu GPU-0 · shop/web/app" in numa1.group(0)
    numa0 = re.search(r'<section class="numa[^"]*" data-numa="0".*?</section>', html, re.S)
    assert numa0 is not None and "nvidia.com/gpu" not in numa0.group(0)
    # Without topology: under the map, not on a NUMA node.
    elsewhere = re.search(r'<section id="devices-elsewhere".*?</section>', html, re.S)
    assert elsewhere is not None
    assert "example.com/fpga: 1 of 1 held, 0 free" in elsewhere.group(0)
    assert "example.com/fpga fpga-7 · legacy/db/db" in elsewhere.group(0)


async def test_a_selection_lights_its_devices(site: Site) -> None:
    ledger = ledger_for(topology_node())
    ledger["devices"] = _devices_json()
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger)
    browser = await _open(site)
    try:
        await browser.wait_for("document.querySelector('.device-held') !== null")
        await _click(browser, 'button.select[data-select="pod"][data-key="shop/web"]')
        lit = await browser.wait_for(
            "(l => l.length && l)(Array.from(document.querySelectorAll('.device.lit'))"
            ".map(d => d.dataset.device))")
        assert lit == ["GPU-0"]
    finally:
        await browser.close()


# --------------------------------------------------------------------------- usage


async def test_colour_by_the_containers_own_usage_from_the_exposition(site: Site) -> None:
    """Two polls' podres_container_cpu_usage_seconds_total: shop/web/app used 15 s of CPU in
    10 s (1.5 cores over its CPUs 2 and 10: 0.75 each), the sidecar on CPU 3 4 s (0.4)."""
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    site.set_text("/metrics", _exposition(1000.0, {("shop", "web", "app"): 100.0,
                                                    ("shop", "web", "mesh-proxy"): 50.0}))
    heat = "JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll(" \
           "'#cpumap .cpu[data-heat]')).map(c => [c.dataset.cpu, c.dataset.heat])))"
    browser = await _open(site)
    try:
        await browser.wait_for("!document.querySelector('option[value=usage]').hidden")
        # One poll read: offered, not yet usable.
        assert await browser.evaluate("document.querySelector('option[value=usage]').disabled")
        site.set_text("/metrics", _exposition(1010.0, {("shop", "web", "app"): 115.0,
                                                        ("shop", "web", "mesh-proxy"): 54.0}))
        await browser.wait_for("!document.querySelector('option[value=usage]').disabled",
                               timeout=20)
        await browser.evaluate("(s => (s.value = 'usage', s.dispatchEvent("
                               "new Event('change'))))(document.getElementById('colour-by'))")
        assert json.loads(await browser.wait_for(f"(h => h !== '{{}}' && h)({heat})")) == \
            {"2": "8", "10": "8", "3": "4"}
        # The legend shows the ramp, not the pools.
        assert await browser.evaluate(
            "document.querySelectorAll('#legend .legend-heat').length") == 6
        assert await browser.evaluate(
            "document.querySelectorAll('#legend .legend-item').length") == 0
    finally:
        await browser.close()


def test_without_the_usage_series_it_is_not_offered(site: Site) -> None:
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    html = dump_dom(site.url)  # /metrics answers 404 here
    assert "/metrics" in site.hits
    assert re.search(r'<option value="usage"[^>]*hidden', html)


# --------------------------------------------------------------------------- a past moment


def _intervals(now: datetime, n: int) -> list[dict[str, Any]]:
    """``n`` containers of pod ns/p<i>, each starting a minute after the last: n events."""
    return [{"namespace": "ns", "pod": f"p{i}", "container": "app",
             "assignment": "node_exclusive", "cpus": str(1 + i % 6),
             "memory_assignment": "node_shared", "memory_bytes": None,
             "valid_from": (now - timedelta(minutes=n - i)).isoformat().replace("+00:00", "Z"),
             "valid_to": None} for i in range(n)]


async def test_a_past_moment_marks_what_is_live_and_scrolls_to_its_events(site: Site) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    site.set_json("/api/v1/assignments", {"items": _intervals(now, 30), "next_cursor": None})
    browser = await _open(site)
    try:
        await browser.wait_for("document.querySelectorAll('#events .event').length === 30")
        # Live: no part is marked.
        assert await browser.evaluate(
            "document.querySelectorAll('.live-while-past').length") == 0
        await browser.evaluate("document.getElementById('time-slider').focus()")
        await browser.press("End", 35)
        await browser.press("ArrowLeft", 37)  # the last event: at the bottom of the list
        await browser.wait_for("document.getElementById('status').className === 'past'")
        parts = json.loads(await browser.evaluate("""JSON.stringify(Array.from(
            document.querySelectorAll('[data-live-part]')).map(p => {
              const note = p.querySelector('.live-note');
              return [p.dataset.livePart, p.classList.contains('live-while-past'),
                      note.offsetParent !== null, note.textContent];
            }))"""))
        assert [p[0] for p in parts] == ["the totals", "the Pods and Containers tables",
                                         "the anomalies"]
        # The tables are rebuilt from the intervals; the anomalies route answers 404 here, so
        # the anomalies (and the totals, which count them) stay live and say so.
        (_, m0, v0, t0), (_, m1, v1, t1), (_, m2, v2, t2) = parts
        assert m0 and v0 and t0.startswith("Live: the totals as of now")
        assert not m1 and v1 and t1.startswith("At ") and "from the history store" in t1
        assert m2 and v2 and t2.startswith("Live: the anomalies as of now")
        # The highlighted event is within the list's visible part.
        inside = await browser.evaluate("""(() => {
            const list = document.getElementById('events');
            const cur = list.querySelector('.event.current');
            const l = list.getBoundingClientRect(), c = cur.getBoundingClientRect();
            return list.scrollHeight > list.clientHeight && c.top >= l.top - 1 &&
                   c.bottom <= l.bottom + 1;
        })()""")
        assert inside
        # Times: RFC 3339 in UTC, as the CLI and the API write them.
        times = await browser.evaluate(
            "Array.from(document.querySelectorAll('#events time')).map(t => t.textContent)")
        assert all(RFC3339_UTC.fullmatch(t) for t in times), times[:3]
        last = (now - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
        assert await browser.evaluate("document.getElementById('time-label').textContent") \
            == last
        assert last in await browser.evaluate("document.getElementById('status').textContent")
        updated = await browser.evaluate("document.getElementById('updated').textContent")
        assert RFC3339_UTC.fullmatch(updated.removeprefix("updated ")), updated
        # Back to live: the marks go.
        await _click(browser, "#time-live")
        await browser.wait_for("document.getElementById('status').className === 'ok'")
        assert await browser.evaluate(
            "document.querySelectorAll('.live-while-past').length") == 0
    finally:
        await browser.close()


ROWS = """JSON.stringify(Array.from(document.querySelectorAll(%s)).map(
    r => Array.from(r.children).map(c => c.textContent.trim())))"""


async def test_a_past_moment_rebuilds_the_totals_tables_and_anomalies(site: Site) -> None:
    """At a past moment the totals, the Pods and Containers tables and the anomalies are the
    history API's records current then, not the live ledger's; each part says so and names
    what the store does not keep. Back to live, the live ledger's return."""
    now = datetime.now(UTC).replace(microsecond=0)
    stamp = (now - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    site.set_json("/api/v1/assignments", {"items": [
        {"namespace": "then", "pod": "gone", "container": "app", "sidecar": False,
         "assignment": "pod_exclusive", "memory_assignment": "pod_exclusive", "cpus": "4-5",
         "cpu_count": 2, "memory_bytes": 1 << 30, "valid_from": stamp, "valid_to": None},
        {"namespace": "then", "pod": "gone", "container": "proxy", "sidecar": True,
         "assignment": "pod_shared", "memory_assignment": "pod_shared", "cpus": "6",
         "cpu_count": 1, "memory_bytes": None, "valid_from": stamp, "valid_to": None},
        {"namespace": "batch", "pod": "old", "container": "job", "sidecar": False,
         "assignment": "node_exclusive", "memory_assignment": "node_shared", "cpus": "9",
         "cpu_count": 1, "memory_bytes": None, "valid_from": stamp, "valid_to": None}],
        "next_cursor": None})
    site.set_json("/api/v1/anomalies", {"items": [
        {"kind": "exclusive_overlap", "namespace": "batch", "pod": "old", "container": "job",
         "subject": "batch/old/job", "detail": "CPU 9 twice", "first_seen": stamp,
         "last_seen": stamp, "resolved_at": None}], "next_cursor": None})
    browser = await _open(site)
    try:
        await browser.wait_for("document.querySelectorAll('#events .event').length === 3")
        live_pods = json.loads(await browser.evaluate(ROWS % "'#pods tbody tr[data-pod]'"))
        assert [r[0] for r in live_pods][:2] == ["shop/web", "legacy/db"]
        await browser.evaluate("document.getElementById('time-slider').focus()")
        await browser.press("Home", 1)
        await browser.wait_for("document.getElementById('status').className === 'past'")
        assert "/api/v1/anomalies" in site.hits
        pods = json.loads(await browser.evaluate(ROWS % "'#pods tbody tr[data-pod]'"))
        # Pod, CPUs, budget, pod exclusive, pod shared, pod idle, node exclusive,
        # reclaimed, reclaimable, basis: what the store does not keep is —.
        assert pods == [["then/gone", "4-6", "—", "2", "1", "—", "0", "—", "—", "—"],
                        ["batch/old", "9", "—", "0", "0", "—", "1", "—", "—", "—"]]
        containers = json.loads(await browser.evaluate(ROWS % "'#containers tbody tr'"))
        assert [r[0] for r in containers] == ["then/gone/app", "then/gone/proxy",
                                              "batch/old/job"]
        assert containers[1][1:] == ["yes", "Pod shared", "Pod shared", "6", "1"]
        anomalies = await browser.evaluate(
            "document.getElementById('anomalies').textContent")
        assert "exclusive_overlap" in anomalies and "batch/old/job" in anomalies
        totals = await browser.evaluate("document.getElementById('totals').textContent")
        assert "1 anomaly" in totals and "reclaimed" not in totals, totals
        notes = json.loads(await browser.evaluate("""JSON.stringify(Array.from(
            document.querySelectorAll('[data-live-part]')).map(p => [
              p.classList.contains('past-part'), p.classList.contains('live-while-past'),
              p.querySelector('.live-note').textContent]))"""))
        for rebuilt, live, text in notes:
            assert rebuilt and not live and text.startswith(f"At {stamp}: "), text
        assert "reclaimed and reclaimable cores are not kept per moment" in notes[0][2]
        assert "budget, idle CPUs" in notes[1][2]
        # Back to live: the live ledger's tables and anomalies.
        await _click(browser, "#time-live")
        await browser.wait_for("document.getElementById('status').className === 'ok'")
        back = json.loads(await browser.evaluate(ROWS % "'#pods tbody tr[data-pod]'"))
        assert back == live_pods
        assert "batch/old/job" not in await browser.evaluate(
            "document.getElementById('anomalies').textContent")
        assert await browser.evaluate(
            "document.querySelectorAll('.past-part, .live-while-past').length") == 0
    finally:
        await browser.close()


# --------------------------------------------------------------------------- contrast

# WCAG 2 contrast of each CPU cell's text on its background, from the computed styles: the
# background colour, and each rgba() colour of its background image (stripes, dots) laid
# over it, whichever is worst; the cell's and its ancestors' opacity fade the text too.
CONTRAST = """(() => {
  const rgba = s => (s.match(/rgba?\\(([^)]+)\\)/) || [null, '0,0,0,0'])[1]
      .split(',').map(Number).concat([1]).slice(0, 4).map((v, i) => i < 3 ? v : v);
  const over = (top, bottom) => {
    const a = isNaN(top[3]) ? 1 : top[3];
    return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat([1]);
  };
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const ratio = (a, b) => {
    const x = lum(a), y = lum(b);
    return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
  };
  const out = {};
  document.querySelectorAll('#cpumap .cpu').forEach(cell => {
    const st = getComputedStyle(cell);
    let opacity = 1;
    for (let e = cell; e; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
    const bg = over(rgba(st.backgroundColor), [255, 255, 255, 1]);
    const layers = [bg].concat((st.backgroundImage.match(/rgba?\\([^)]+\\)/g) || [])
      .map(s => over(rgba(s), bg)));
    let fg = rgba(st.color);
    fg = over([fg[0], fg[1], fg[2], (isNaN(fg[3]) ? 1 : fg[3]) * opacity], bg);
    out[cell.dataset.cpu] = Math.min(...layers.map(l => ratio(fg, l)));
  });
  return JSON.stringify(out);
})()"""

# Whether each busy bar stays clear of its cell's number: the bar's box (the ::after
# pseudo-element's computed left and width) against the text's own box.
BAR_CLEAR = """(() => {
  const bad = [];
  document.querySelectorAll('#cpumap .cpu[data-busy]').forEach(cell => {
    const after = getComputedStyle(cell, '::after');
    if (after.display === 'none') return;
    const r = cell.getBoundingClientRect();
    const border = parseFloat(getComputedStyle(cell).borderLeftWidth);
    const barRight = r.left + border + parseFloat(after.left) + parseFloat(after.width);
    const range = document.createRange();
    range.selectNodeContents(cell);
    if (range.getBoundingClientRect().left < barRight) bad.push(cell.dataset.cpu);
  });
  return JSON.stringify(bad);
})()"""


def _claims() -> dict[str, tuple[str, str, float]]:
    """Each pool's background, text colour and the contrast style.css claims for them."""
    css = (STATIC / "style.css").read_text(encoding="utf-8")
    out = {}
    for name, bg, claim in re.findall(
            r"--([a-z-]+)-bg:\s*(#[0-9a-f]{6});\s*/\*[^*]*?(\d+(?:\.\d+)?):1", css):
        fg = re.search(rf"--{name}-fg:\s*(#[0-9a-f]{{6}})", css)
        assert fg is not None, name
        out[name] = (bg, fg.group(1), float(claim))
    return out


def _ratio(a: str, b: str) -> float:
    def lum(h: str) -> float:
        c = [int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        c = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    x, y = sorted((lum(a), lum(b)))
    return (y + 0.05) / (x + 0.05)


def test_the_stylesheet_claims_the_contrast_it_has() -> None:
    claims = _claims()
    assert set(claims) == {"reserved", "node-shared", "node-exclusive", "pod-exclusive",
                           "pod-shared", "pod-idle"}
    for name, (bg, fg, claim) in claims.items():
        assert abs(_ratio(bg, fg) - claim) < 0.06, (name, bg, fg, _ratio(bg, fg), claim)


async def test_cell_text_contrast_and_the_busy_bar(site: Site) -> None:
    chromium_binary()
    ledger = ledger_for(topology_node())
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger)
    site.set_json("/api/v1/cpuload", {"cpus": {str(i): (i % 11) / 10 for i in range(16)}})
    site.set_text("/metrics", _exposition(1000.0, {("shop", "web", "app"): 1.0}))
    browser = await _open(site)
    try:
        await browser.wait_for("document.querySelectorAll('#cpumap .cpu[data-busy]').length"
                               " === 16")
        # The busy bar is in the legend; it never covers a number.
        assert await browser.wait_for("document.querySelector('#legend .legend-busy') "
                                      "!== null")
        assert json.loads(await browser.evaluate(BAR_CLEAR)) == []
        worst: dict[str, float] = {}
        for mode in ("pool", "busy"):
            await browser.evaluate(
                f"(s => (s.value = '{mode}', s.dispatchEvent(new Event('change'))))"
                "(document.getElementById('colour-by'))")
            if mode == "busy":
                # The legend shows the busy scale, not the pool colours.
                assert await browser.evaluate(
                    "document.querySelectorAll('#legend .legend-item').length") == 0
                assert await browser.evaluate(
                    "document.querySelectorAll('#legend .legend-heat').length") == 6
            for selected in (False, True):
                if selected:
                    await _click(browser,
                                 'button.select[data-select="pod"][data-key="shop/web"]')
                    await browser.wait_for(f"{LIT}.length === 3")
                ratios = json.loads(await browser.evaluate(CONTRAST))
                assert len(ratios) == 16
                worst.update({f"{mode}{'/selected' if selected else ''} CPU {cpu}": r
                              for cpu, r in ratios.items() if r < 4.5})
            await _click(browser, "#clear-selection")
        assert worst == {}
    finally:
        await browser.close()


# --------------------------------------------------------------------------- selection


async def test_clear_the_selection_clears_frames_and_detail(site: Site) -> None:
    ledger = ledger_for(topology_node())
    ledger["pods"][0]["reclaimed_cpus"] = -1  # a budget that costs one CPU more
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger)
    browser = await _open(site)
    try:
        # The Pods table words a negative reclaimed count as the CLI does.
        cell = await browser.wait_for(
            "(r => r && r.children[7].textContent)("
            "document.querySelector('#pods tr[data-pod=\"shop/web\"]'))")
        assert cell == reclaimed_cell(-1) == "none (+1)"
        await _click(browser, '#cpumap .cpu[data-cpu="2"]')
        assert await browser.wait_for(f"(l => l.length && l)({LIT})") == [2, 3, 10]
        assert await browser.evaluate(
            "document.querySelectorAll('#cpumap .cpu.same-owner').length") == 3
        assert "CPU 2" in await browser.evaluate(
            "document.getElementById('cpu-detail').textContent")
        await _click(browser, "#clear-selection")
        await browser.wait_for(f"{LIT}.length === 0")
        assert await browser.evaluate(
            "document.querySelectorAll('#cpumap .same-owner, #cpumap .lit').length") == 0
        assert await browser.evaluate(
            "document.getElementById('cpu-detail').textContent") == "No CPU selected."
    finally:
        await browser.close()


# --------------------------------------------------------------------------- keyboard


async def test_the_map_is_one_tab_stop_with_arrows_and_enter(site: Site) -> None:
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    active = "(e => e.classList.contains('cpu') ? 'cpu ' + e.dataset.cpu : e.id || e.tagName)" \
             "(document.activeElement)"
    browser = await _open(site)
    try:
        await browser.evaluate("document.getElementById('colour-by').focus()")
        await browser.press("Tab", 9)
        assert await browser.evaluate(active) == "cpu 0"  # the first CPU drawn
        # DOM order: CPU 0, 8 (core 0), 1, 9 (core 1), 2, 10 (core 2).
        for _ in range(4):
            await browser.press("ArrowRight", 39)
        assert await browser.evaluate(active) == "cpu 2"
        assert await browser.evaluate(
            "Array.from(document.querySelectorAll('#cpumap [tabindex=\"0\"]'))"
            ".map(c => c.dataset.cpu)") == ["2"]
        await browser.press("Enter", 13)
        assert await browser.wait_for(f"(l => l.length && l)({LIT})") == [2, 3, 10]
        # One more Tab leaves the map.
        await browser.press("Tab", 9)
        assert not (await browser.evaluate(active)).startswith("cpu ")
    finally:
        await browser.close()

