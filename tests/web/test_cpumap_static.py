"""The CPU map page (exporter/web/static) in a real headless Chromium.

A small loopback HTTP server serves the static files the way ``serve`` does (``/`` is
index.html, ``/static/…`` the assets) plus fixture JSON at ``/api/v1/cpumap`` and
``/api/v1/ledger``; Chromium runs the page's script and dumps the DOM, then takes a
screenshot that is decoded and checked for the pool colours.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cpumap_browser import (
    POOL_COLOURS,
    colour_histogram,
    decode_png,
    dump_dom,
    parse_dom,
    pixels_near,
    screenshot,
)

STATIC = Path(__file__).resolve().parents[2] / "exporter" / "web" / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8"}
HOSTILE = 'evil/<img src=x onerror="document.title=1">/"quote'

# --------------------------------------------------------------------------- fixtures


def topology_node() -> dict[str, Any]:
    """16 CPUs, 2 sockets = 2 NUMA nodes, 4 cores each, 2 threads per core: CPU i and i+8
    are siblings, as Linux numbers them. Every pool is present."""
    pools = {0: ("reserved", ""), 8: ("reserved", ""),
             1: ("node_shared", ""), 9: ("node_shared", ""),
             2: ("pod_exclusive", "shop/web/app"), 10: ("pod_exclusive", "shop/web/app"),
             3: ("pod_shared", "shop/web"), 11: ("pod_idle", "batch/idle"),
             4: ("node_exclusive", "legacy/db/postgres"),
             12: ("node_exclusive", "legacy/db/postgres"),
             5: ("node_shared", ""), 13: ("node_shared", ""),
             6: ("pod_exclusive", HOSTILE), 14: ("pod_shared", "shop/api"),
             7: ("node_shared", ""), 15: ("node_shared", "")}
    cpus = []
    for cpu in range(16):
        core = cpu % 8
        socket = core // 4
        pool, owner = pools[cpu]
        cpus.append({"id": cpu, "core": core, "socket": socket, "numa_node": socket,
                     "pool": pool, "owner": owner})
    return {"node": "worker-7", "cpus": cpus}


def unknown_topology_node() -> dict[str, Any]:
    """No sysfs topology: core/socket/numa_node unknown (null)."""
    pools = ["reserved", "node_shared", "node_shared", "pod_exclusive", "pod_exclusive",
             "pod_shared"]
    return {"node": "tiny", "cpus": [
        {"id": i, "core": None, "socket": None, "numa_node": None, "pool": pool,
         "owner": "ns/p/app" if pool == "pod_exclusive" else ("ns/p" if pool == "pod_shared"
                                                              else "")}
        for i, pool in enumerate(pools)]}


def ledger_for(cpumap: dict[str, Any]) -> dict[str, Any]:
    pools = dict.fromkeys(POOL_COLOURS, 0)
    for cpu in cpumap["cpus"]:
        pools[cpu["pool"]] += 1
    return {
        "schema": "podres.ledger/v1",
        "node": {"name": cpumap["node"], "online_cpus": len(cpumap["cpus"]), "numa_nodes": 2,
                 "kubelet": {}},
        "cpu_pools": pools,
        "cpu_pools_by_numa": {},
        "memory_pools": {},
        "pods": [
            {"namespace": "shop", "name": "web", "cpus": "2-3,10", "budget_cpus": 3,
             "pod_exclusive_cpus": 2, "pod_shared_cpus": 1, "pod_idle_cpus": 0,
             "node_exclusive_cpus": 0, "reclaimed_cpus": 1, "reclaimable_cpus": None,
             "estimate_basis": "spec"},
            {"namespace": "legacy", "name": "db", "cpus": "", "budget_cpus": None,
             "pod_exclusive_cpus": 0, "pod_shared_cpus": 0, "pod_idle_cpus": 0,
             "node_exclusive_cpus": 2, "reclaimed_cpus": None, "reclaimable_cpus": 0,
             "estimate_basis": "podresources"},
            {"namespace": "evil", "name": '<img src=x onerror="document.title=1">',
             "cpus": "6", "budget_cpus": 1, "pod_exclusive_cpus": 1, "pod_shared_cpus": 0,
             "pod_idle_cpus": 0, "node_exclusive_cpus": 0, "reclaimed_cpus": 0,
             "reclaimable_cpus": None, "estimate_basis": "podresources"},
            {"namespace": "batch", "name": "shared-only", "cpus": "", "budget_cpus": None,
             "pod_exclusive_cpus": 0, "pod_shared_cpus": 0, "pod_idle_cpus": 0,
             "node_exclusive_cpus": 0, "reclaimed_cpus": None, "reclaimable_cpus": 0,
             "estimate_basis": "podresources"},
        ],
        "containers": [
            {"namespace": "shop", "pod": "web", "name": "app", "sidecar": False,
             "assignment": "pod_exclusive", "memory_assignment": "pod_exclusive",
             "cpus": "2,10", "cpu_count": 2},
            {"namespace": "shop", "pod": "web", "name": "mesh-proxy", "sidecar": True,
             "assignment": "pod_shared", "memory_assignment": "pod_shared", "cpus": "3",
             "cpu_count": 1},
            {"namespace": "legacy", "name": "db", "pod": "db", "sidecar": False,
             "assignment": "node_exclusive", "memory_assignment": "node_shared",
             "cpus": "12", "cpu_count": 1},
            {"namespace": "legacy", "name": "cache", "pod": "db", "sidecar": False,
             "assignment": "node_exclusive", "memory_assignment": "node_shared",
             "cpus": "4", "cpu_count": 1},
            {"namespace": "batch", "name": "worker", "pod": "shared-only", "sidecar": False,
             "assignment": "node_shared", "memory_assignment": "node_shared", "cpus": "",
             "cpu_count": 0},
        ],
        "reclaimed_cpus": 1,
        "reclaimable_cpus": 0,
        "anomalies": [
            {"kind": "exclusive_overlap", "namespace": "shop", "pod": "web", "container": "app",
             "detail": "CPU 2 is also exclusive to legacy/db"},
            {"kind": "unknown_cpu", "namespace": None, "pod": None, "container": None,
             "detail": "id 99 is not online"},
        ],
    }


# --------------------------------------------------------------------------- server


@dataclass
class Site:
    url: str
    routes: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)

    def set_json(self, path: str, payload: Any, status: int = 200) -> None:
        self.routes[path] = (status, "application/json", json.dumps(payload).encode())

    def set_text(self, path: str, text: str, content_type: str = "text/plain") -> None:
        self.routes[path] = (200, content_type, text.encode())


@pytest.fixture
def site() -> Iterator[Site]:
    routes: dict[str, tuple[int, str, bytes]] = {}
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            hits.append(path)
            if path in routes:
                status, ctype, body = routes[path]
            elif path == "/":
                status, ctype, body = 200, CONTENT_TYPES[".html"], \
                    (STATIC / "index.html").read_bytes()
            elif path.startswith("/static/") and "/" not in path[len("/static/"):] \
                    and (STATIC / path[len("/static/"):]).is_file():
                file = STATIC / path[len("/static/"):]
                status, ctype, body = 200, CONTENT_TYPES.get(file.suffix, "text/plain"), \
                    file.read_bytes()
            else:
                status, ctype, body = 404, "text/plain", b"not found"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            # What serve should send too: the page needs nothing but its own origin.
            self.send_header("Content-Security-Policy", "default-src 'self'")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(f"http://127.0.0.1:{server.server_address[1]}/", routes, hits)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------- tests


def test_static_files_are_self_contained() -> None:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    js = (STATIC / "cpumap.js").read_text(encoding="utf-8")
    css = (STATIC / "style.css").read_text(encoding="utf-8")
    for text in (html, js, css):
        assert "http://" not in text.replace("http://www.w3.org", "")
        assert "https://" not in text
        assert "@import" not in text
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "eval(" not in js
    assert "<script>" not in html and "style=" not in html  # CSP: no inline script/style


def test_cpu_map_draws_every_cpu_in_chromium(site: Site, tmp_path: Path) -> None:
    cpumap = topology_node()
    ledger = ledger_for(cpumap)
    site.set_json("/api/v1/cpumap", cpumap)
    site.set_json("/api/v1/ledger", ledger)

    html = dump_dom(site.url)
    dom = parse_dom(html)

    assert {"/api/v1/cpumap", "/api/v1/ledger", "/static/cpumap.js",
            "/static/style.css"} <= set(site.hits)
    assert dom.node_name == "worker-7"
    assert "failed" not in dom.status.lower(), dom.status
    # One cell per CPU, each with its pool, focusable, owner in title and aria-label.
    assert len(dom.cpus) == len(cpumap["cpus"])
    by_id = {int(c["data-cpu"]): c for c in dom.cpus}
    assert sorted(by_id) == list(range(16))
    for cpu in cpumap["cpus"]:
        cell = by_id[cpu["id"]]
        assert cell["data-pool"] == cpu["pool"]
        if cpu["owner"]:
            assert cpu["owner"] in cell["title"]
            assert cpu["owner"] in cell["aria-label"]
        else:
            assert "no owner" in cell["aria-label"]
    # Grouped by NUMA node; every pool present is in the legend, once, in a fixed order.
    assert dom.numa_sections == ["0", "1"]
    # The map is one Tab stop (a roving tabindex): the first CPU; the rest are -1.
    assert [c["tabindex"] for c in dom.cpus] == ["0"] + ["-1"] * (len(dom.cpus) - 1)
    assert dom.legend_pools == ["reserved", "node_shared", "node_exclusive", "pod_exclusive",
                                "pod_shared", "pod_idle"]
    assert {c["data-pool"] for c in dom.cpus} == set(POOL_COLOURS)
    # Pods table and anomalies from the ledger; hostile names stay text.
    # Only pods that hold CPUs are listed; a pod without a block shows its node-exclusive
    # sets, and the pod that runs on the node shared pool only is left out of the table.
    assert dom.pod_rows == ["shop/web", "legacy/db", 'evil/<img src=x onerror="document.title=1">']
    assert dom.pod_cpus["legacy/db"] == "4,12"
    assert dom.pod_cpus["shop/web"] == "2-3,10"
    assert "1 other pod runs on the node shared pool only." in html
    assert dom.anomaly_kinds == ["exclusive_overlap", "unknown_cpu"]
    assert dom.tags["img"] == 0
    # Links to the exporter's own endpoints (relative, so a path prefix keeps working).
    for endpoint in ("metrics", "healthz", "readyz", "api/v1/ledger"):
        assert endpoint in dom.links


def test_cpu_map_groups_cores_and_threads(site: Site) -> None:
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    html = dump_dom(site.url)
    # Core 2 of NUMA node 0 holds its two hyperthreads, CPUs 2 and 10, in one group.
    start = html.index('title="Core 2"')
    end = html.index("</ul>", start)
    group = html[start:end]
    assert 'data-cpu="2"' in group and 'data-cpu="10"' in group
    assert group.count('class="cpu') == 2


def test_focused_cpu_shows_its_owner(site: Site) -> None:
    """Focus (here through a #cpu-N link) shows the owner in the detail line and marks the
    other CPUs of the same pod."""
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    dom = parse_dom(dump_dom(site.url + "#cpu-10"))
    assert "CPU 10" in dom.cpu_detail and "shop/web/app" in dom.cpu_detail
    assert "Pod exclusive" in dom.cpu_detail and "NUMA node 0" in dom.cpu_detail
    marked = sorted(int(c["data-cpu"]) for c in dom.cpus if "same-owner" in c["class"].split())
    assert marked == [2, 3, 10]  # shop/web: app's two CPUs and the pod shared pool


def test_unknown_topology_and_failing_ledger(site: Site) -> None:
    cpumap = unknown_topology_node()
    site.set_json("/api/v1/cpumap", cpumap)
    site.set_json("/api/v1/ledger", {"error": "no successful poll yet"}, status=503)
    dom = parse_dom(dump_dom(site.url))
    assert len(dom.cpus) == len(cpumap["cpus"])
    assert dom.numa_sections == [""]
    assert set(dom.legend_pools) == {c["pool"] for c in cpumap["cpus"]}
    assert "Update failed" in dom.status and "503" in dom.status


def test_screenshot_shows_the_pools(site: Site, tmp_path: Path) -> None:
    cpumap = topology_node()
    site.set_json("/api/v1/cpumap", cpumap)
    site.set_json("/api/v1/ledger", ledger_for(cpumap))
    png = screenshot(site.url, tmp_path / "cpumap.png", width=1100, height=800)
    if os.environ.get("PODRES_SCREENSHOT_DIR"):  # keep it, e.g. as a CI artefact
        target = Path(os.environ["PODRES_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        (target / "cpumap-static.png").write_bytes(png)
    width, height, rows = decode_png(png)
    assert (width, height) == (1100, 800)
    hist = colour_histogram(rows)
    # Not blank: many colours, and no single colour covers (almost) everything.
    assert len(hist) > 50
    assert hist.most_common(1)[0][1] < 0.97 * width * height
    # Every pool's colour is on screen (a CPU cell is ~38x38 px).
    for pool, rgb in POOL_COLOURS.items():
        assert pixels_near(hist, rgb) > 300, f"{pool} colour {rgb} not in the screenshot"


async def test_owner_on_keyboard_focus_and_hover(site: Site) -> None:
    """Real input through the DevTools protocol: Tab reaches the CPU cells, the arrow keys
    move between them, and hovering a cell shows its owner too."""
    from cpumap_browser import DevTools

    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    browser = DevTools()
    try:
        await browser.start()
        await browser.open(site.url)
        await browser.wait_for("document.querySelectorAll('#cpumap .cpu').length === 16")

        active = "document.activeElement && document.activeElement.getAttribute('data-cpu')"
        for _ in range(40):  # skip link, endpoint links, then the first CPU
            await browser.press("Tab", 9)
            if await browser.evaluate(active) is not None:
                break
        assert await browser.evaluate(active) == "0"
        detail = "document.getElementById('cpu-detail').textContent"
        assert "CPU 0" in await browser.evaluate(detail)
        assert "Reserved" in await browser.evaluate(detail)
        # CPU 0's sibling thread is CPU 8, then core 1 (CPUs 1 and 9), then core 2.
        for expected in ("8", "1", "9", "2"):
            await browser.press("ArrowRight", 39)
            assert await browser.evaluate(active) == expected
        assert "shop/web/app" in await browser.evaluate(detail)
        assert await browser.evaluate(
            "getComputedStyle(document.activeElement).outlineStyle") == "solid"

        box = await browser.evaluate(
            "JSON.stringify(document.querySelector('.cpu[data-cpu=\"4\"]')"
            ".getBoundingClientRect())")
        rect = json.loads(box)
        await browser.hover(rect["x"] + rect["width"] / 2, rect["y"] + rect["height"] / 2)
        text = await browser.wait_for(
            "(t => t.includes('CPU 4') && t)(document.getElementById('cpu-detail').textContent)")
        assert "legacy/db/postgres" in text and "Node exclusive" in text
        assert await browser.evaluate(
            "document.querySelector('.cpu[data-cpu=\"12\"]').classList.contains('same-owner')")
    finally:
        await browser.close()


def test_busy_share_of_each_cpu_is_drawn(site: Site) -> None:
    """With /proc/stat read, each CPU carries its busy share of the last poll (tenths, for
    the bar) and the percentage in its title; CPUs without a share carry none."""
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    site.set_json("/api/v1/cpuload", {"cpus": {"2": 0.75, "10": 0.04, "3": 1.0}})
    dom = parse_dom(dump_dom(site.url))
    by_id = {int(c["data-cpu"]): c for c in dom.cpus}
    assert by_id[2]["data-busy"] == "8" and "busy 75%" in by_id[2]["title"]
    assert by_id[10]["data-busy"] == "0" and "busy 4%" in by_id[10]["title"]
    assert by_id[3]["data-busy"] == "10"
    assert "data-busy" not in by_id[0] and "busy" not in by_id[0]["title"]
    assert "/api/v1/cpuload" in site.hits


def test_no_load_source_draws_no_bar(site: Site) -> None:
    site.set_json("/api/v1/cpumap", topology_node())
    site.set_json("/api/v1/ledger", ledger_for(topology_node()))
    site.set_json("/api/v1/cpuload", {"error": "the /proc/stat source is off"}, status=404)
    dom = parse_dom(dump_dom(site.url))
    assert dom.cpus and not any("data-busy" in c for c in dom.cpus)
    assert "failed" not in dom.status.lower()
