"""``/metrics`` of a server that has no ledger (``api``): the process's own figures, under
the names every Prometheus client library gives them, and a count of the requests it
answered by route, method and status class (docs/deploy.md#5-fleet-history-and-the-central-api).

Every route the application serves is published at 0 from the start, for every status
class, so that a rate over the counter has a series before the first request of its kind
(``rate()`` of a series that appears with 1 misses that first request)."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from exporter import __version__
from exporter.metrics.catalogue import BUILD_INFO
from exporter.metrics.exposition import escape_label, format_value

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
UNMATCHED = "unmatched"  # the route label of a path no route serves (a 404)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Sample = tuple[tuple[str, ...], float]


class RequestCounter:
    """Requests answered, by (route, method, status class)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}

    def publish_routes(self, app: web.Application) -> None:
        """Put every route of ``app`` (and the unmatched path) at 0 in every status class."""
        for route in app.router.routes():
            if route.method in ("HEAD", "*") or route.resource is None:
                continue
            for status in STATUS_CLASSES:
                self.counts.setdefault((route.resource.canonical, route.method, status), 0)
        for method in ("GET", "POST"):
            self.counts.setdefault((UNMATCHED, method, "4xx"), 0)

    def count(self, request: web.Request, status: int) -> None:
        info = request.match_info
        route = info.route.resource.canonical \
            if info.http_exception is None and info.route.resource is not None else UNMATCHED
        key = (route, request.method if request.method in ("GET", "POST") else "other",
               f"{min(max(status // 100, 2), 5)}xx")
        self.counts[key] = self.counts.get(key, 0) + 1

    def middleware(self) -> Any:
        @web.middleware
        async def counted(request: web.Request, handler: Handler) -> web.StreamResponse:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                self.count(request, exc.status)
                raise
            except BaseException:
                self.count(request, 500)
                raise
            self.count(request, response.status)
            return response
        return counted

    def samples(self) -> list[Sample]:
        return [(key, float(n)) for key, n in sorted(self.counts.items())]


def _family(name: str, kind: str, help_text: str, labels: tuple[str, ...],
            samples: Iterable[Sample], out: list[str]) -> None:
    out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
    for values, value in samples:
        pairs = ",".join(f'{k}="{escape_label(v)}"' for k, v in zip(labels, values,
                                                                     strict=True))
        out.append(f"{name}{{{pairs}}} {format_value(value)}\n" if pairs
                   else f"{name} {format_value(value)}\n")


def _process_start_time() -> float | None:
    """When this process started, in unix seconds (/proc: field 22 of stat, in clock ticks
    since boot, plus the boot time)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def process_families(out: list[str], start_time: float | None) -> None:
    """The process collector's families of the Prometheus client libraries, from /proc."""
    times = os.times()
    _family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent "
            "in seconds.", (), [((), times.user + times.system)], out)
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            vsize, rss = (int(x) * resource.getpagesize() for x in f.read().split()[:2])
        _family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                (), [((), vsize)], out)
        _family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                (), [((), rss)], out)
        open_fds = len(os.listdir("/proc/self/fd"))
        _family("process_open_fds", "gauge", "Number of open file descriptors.", (),
                [((), open_fds)], out)
    except (OSError, ValueError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        _family("process_max_fds", "gauge", "Maximum number of open file descriptors.", (),
                [((), soft)], out)
    if start_time is not None:
        _family("process_start_time_seconds", "gauge", "Start time of the process since unix "
                "epoch in seconds.", (), [((), start_time)], out)


def add_metrics_route(app: web.Application, counter: RequestCounter, prefix: str) -> None:
    """``/metrics``: the process families, ``{prefix}_requests_total`` and
    ``podres_build_info``. Call it once every other route is added (they are published at
    0 when the application starts)."""
    start_time = _process_start_time() or time.time()

    async def metrics(_: web.Request) -> web.Response:
        out: list[str] = []
        process_families(out, start_time)
        _family(f"{prefix}_requests_total", "counter", "HTTP requests answered, by route "
                "(the path pattern; 'unmatched' for a path no route serves), method and "
                "status class.", ("route", "method", "status"), counter.samples(), out)
        _family(BUILD_INFO.name, BUILD_INFO.type, BUILD_INFO.help, BUILD_INFO.labels,
                [((__version__,), 1.0)], out)
        return web.Response(body="".join(out).encode("utf-8"),
                            headers={"Content-Type": METRICS_CONTENT_TYPE})

    app.router.add_get("/metrics", metrics)

    async def publish(app: web.Application) -> None:
        counter.publish_routes(app)

    app.on_startup.append(publish)
