"""Headless Chromium helpers for the CPU map tests: run Debian's ``chromium`` on a URL to get
the DOM after the page's scripts ran (``--dump-dom``) or a screenshot, parse the CPU map out
of the DOM, and decode the PNG (zlib only, no imaging library) to check it is not blank.

Shared by ``test_cpumap_static.py`` (static files + fixture JSON) and tests that point the
same checks at a running ``podres-exporter demo``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

# Flags verified on these machines (see TOOLING.md): without the background-networking ones
# Chromium tries the network and stalls.
BASE_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--virtual-time-budget=5000",
)

# Pool colours of style.css (background-color), RGB.
POOL_COLOURS = {
    "reserved": (0x5A, 0x5A, 0x5A),
    "node_shared": (0xE8, 0xE8, 0xE8),
    "node_exclusive": (0xD5, 0x5E, 0x00),
    "pod_exclusive": (0x00, 0x72, 0xB2),
    "pod_shared": (0x56, 0xB4, 0xE9),
    "pod_idle": (0xF0, 0xE4, 0x42),
}


def chromium_binary() -> str:
    """The chromium executable, or skip (fail when PODRES_REQUIRE_CHROMIUM=1)."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("PODRES_REQUIRE_CHROMIUM") == "1":
        pytest.fail("chromium is required (apt-get install -y chromium)")
    pytest.skip("chromium not installed (apt-get install -y chromium)")
    raise AssertionError("unreachable")


def run_chromium(url: str, *extra: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    binary = chromium_binary()
    # Chromium's helper processes can still write to the profile while the browser exits.
    with tempfile.TemporaryDirectory(prefix="podres-chromium-",
                                     ignore_cleanup_errors=True) as profile:
        proc = subprocess.run(
            [binary, *BASE_FLAGS, f"--user-data-dir={profile}", *extra, url],
            capture_output=True, text=True, timeout=timeout,
            env={**os.environ, "HOME": profile})
    return proc


def dump_dom(url: str) -> str:
    proc = run_chromium(url, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<html" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def screenshot(url: str, path: Path, width: int = 1280, height: int = 1000) -> bytes:
    proc = run_chromium(url, f"--screenshot={path}", f"--window-size={width},{height}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert path.exists(), proc.stderr[-2000:]
    return path.read_bytes()


# ----------------------------------------------------------------------------- DOM


@dataclass
class CpuMapDom:
    cpus: list[dict[str, str]] = field(default_factory=list)
    legend_pools: list[str] = field(default_factory=list)
    numa_sections: list[str] = field(default_factory=list)
    pod_rows: list[str] = field(default_factory=list)
    pod_cpus: dict[str, str] = field(default_factory=dict)
    anomaly_kinds: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    status: str = ""
    node_name: str = ""
    cpu_detail: str = ""
    tags: Counter[str] = field(default_factory=Counter)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.dom = CpuMapDom()
        self._capture: list[str | None] = []
        self._stack: list[tuple[str, str | None]] = []
        self._in_pods_tbody = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        self.dom.tags[tag] += 1
        target = None
        if "cpu" in classes:
            self.dom.cpus.append(a)
        if "legend-item" in classes:
            self.dom.legend_pools.append(a.get("data-pool", ""))
        if "numa" in classes and tag == "section":
            self.dom.numa_sections.append(a.get("data-numa", ""))
        if tag == "tr" and "data-pod" in a:
            self.dom.pod_rows.append(a["data-pod"])
            self.dom.pod_cpus[a["data-pod"]] = a.get("data-cpus", "")
        if "anomaly" in classes:
            self.dom.anomaly_kinds.append(a.get("data-kind", ""))
        if tag == "a" and "href" in a:
            self.dom.links.append(a["href"])
        if a.get("id") == "status":
            target = "status"
        if a.get("id") == "node-name":
            target = "node_name"
        if a.get("id") == "cpu-detail":
            target = "cpu_detail"
        self._stack.append((tag, target))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            open_tag, _ = self._stack.pop()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, target in self._stack:
            if target:
                setattr(self.dom, target, getattr(self.dom, target) + data)


def parse_dom(html: str) -> CpuMapDom:
    parser = _Parser()
    parser.feed(html)
    parser.close()
    parser.dom.status = parser.dom.status.strip()
    parser.dom.node_name = parser.dom.node_name.strip()
    parser.dom.cpu_detail = parser.dom.cpu_detail.strip()
    return parser.dom


# ----------------------------------------------------------------------------- PNG


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB/RGBA non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos = 8
    idat = b""
    width = height = 0
    colour_type = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    channels = 3 if colour_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        filt = raw[start]
        line = bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = prev[i]
            upleft = prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + left) & 0xFF
            elif filt == 2:
                line[i] = (line[i] + up) & 0xFF
            elif filt == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif filt == 4:
                p = left + up - upleft
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - upleft)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else upleft
                line[i] = (line[i] + pred) & 0xFF
        prev = line
        if channels == 4:
            rgb = bytearray(width * 3)
            rgb[0::3] = line[0::4]
            rgb[1::3] = line[1::4]
            rgb[2::3] = line[2::4]
            rows.append(bytes(rgb))
        else:
            rows.append(bytes(line))
    return width, height, rows


def colour_histogram(rows: list[bytes]) -> Counter[tuple[int, int, int]]:
    counts: Counter[tuple[int, int, int]] = Counter()
    for row in rows:
        for i in range(0, len(row), 3):
            counts[(row[i], row[i + 1], row[i + 2])] += 1
    return counts


def pixels_near(hist: Counter[tuple[int, int, int]], rgb: tuple[int, int, int],
                tolerance: int = 4) -> int:
    return sum(n for colour, n in hist.items()
               if all(abs(c - r) <= tolerance for c, r in zip(colour, rgb, strict=True)))


# ----------------------------------------------------------------------------- DevTools


class DevTools:
    """A minimal Chrome DevTools Protocol client over the browser's loopback WebSocket
    (aiohttp), for real keyboard and mouse input: Chromium is started with
    ``--remote-debugging-port=0`` and writes the port it chose to DevToolsActivePort."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.profile: tempfile.TemporaryDirectory[str] | None = None
        self._ws: Any = None
        self._http: Any = None
        self._next_id = 0
        self.session: str | None = None

    async def start(self, timeout: float = 30.0) -> None:
        import asyncio

        import aiohttp

        binary = chromium_binary()
        self.profile = tempfile.TemporaryDirectory(prefix="podres-cdp-",
                                                   ignore_cleanup_errors=True)
        flags = [f for f in BASE_FLAGS if not f.startswith("--virtual-time-budget")]
        self.proc = subprocess.Popen(
            [binary, *flags, f"--user-data-dir={self.profile.name}",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             "--window-size=1100,800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "HOME": self.profile.name})
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            assert self.proc.poll() is None, "chromium exited"
            assert loop.time() < deadline, "chromium opened no DevTools port"
            await asyncio.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self._http = aiohttp.ClientSession()
        self._ws = await self._http.ws_connect(f"ws://127.0.0.1:{port}{path}", max_msg_size=0)

    async def send(self, method: str, params: dict[str, Any] | None = None,
                   session: bool = True) -> dict[str, Any]:
        import asyncio

        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        await self._ws.send_json(message)
        while True:
            reply = await asyncio.wait_for(self._ws.receive_json(), timeout=30)
            if reply.get("id") == self._next_id:
                assert "error" not in reply, (method, reply["error"])
                result: dict[str, Any] = reply.get("result", {})
                return result

    async def open(self, url: str) -> None:
        target = await self.send("Target.createTarget", {"url": url}, session=False)
        attached = await self.send("Target.attachToTarget",
                                   {"targetId": target["targetId"], "flatten": True},
                                   session=False)
        self.session = attached["sessionId"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate",
                                 {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 15.0) -> Any:
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            assert loop.time() < deadline, f"timed out waiting for {expression}"
            await asyncio.sleep(0.1)

    async def press(self, key: str, code: int) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent",
                            {"type": kind, "key": key, "code": key,
                             "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code})

    async def hover(self, x: float, y: float) -> None:
        await self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._http is not None:
            await self._http.close()
        if self.proc is not None and self.proc.poll() is None:
            # The whole process group: the browser's renderer and helper processes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        if self.profile is not None:
            self.profile.cleanup()
