"""The dashboards' PromQL and the rules against a real Prometheus server (Debian's
``prometheus``, started on loopback by the test).

1. Static expositions (data/exporter.prom, data/kubelet.prom: podres, cAdvisor and kubelet
   series in both the 1.36 and the 1.37 spelling) served by a tiny HTTP server: every
   expression of node.json and fleet.json returns data, the recording rules record, and the
   alerts the fixture should trigger are pending or firing (and no others).
2. ``podres-exporter demo``: the core panels of node.json and fleet.json return data from
   the real exporter.

Prometheus applies targets on a 5 s tick, so each server needs ~6-8 s before answers.
"""

from __future__ import annotations

import http.server
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dash_helpers import (
    DATA,
    RULE_FILES,
    PrometheusServer,
    Query,
    dashboard_queries,
    free_port,
    prom_substitute,
    prometheus_binary,
)

# $__rate_interval etc.: 5 scrapes at the test's 1 s scrape interval, so that rates are
# exact once 10 s of samples exist (a 1m window would be extrapolated from a few seconds).
INTERVAL = "5s"


# --- a static exposition server -------------------------------------------------------

def render_exposition(path: Path, t0: float) -> str:
    """Sample values: a number, ``now``, or ``B+R/s`` (a counter growing R per second)."""
    now = time.time()
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            if line.startswith(("# TYPE", "# HELP")):
                out.append(line)
            continue
        series, value = line.rsplit(" ", 1)
        if value == "now":
            value = f"{now:.3f}"
        elif m := re.fullmatch(r"([\d.]+)\+([\d.]+)/s", value):
            value = f"{float(m.group(1)) + float(m.group(2)) * (now - t0):.6f}"
        out.append(f"{series} {value}")
    return "\n".join(out) + "\n"


class ExpositionServer:
    """``GET /<name>`` serves data/<name>.prom."""

    def __init__(self) -> None:
        t0 = time.time()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = DATA / (self.path.strip("/") + ".prom")
                if not path.is_file():
                    self.send_error(404)
                    return
                body = render_exposition(path, t0).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_fixture_expositions_parse() -> None:
    """The fixtures are valid exposition text (promtool exits 3 only for lint findings)."""
    from dash_helpers import promtool, run
    tool = promtool()
    for name in ("exporter", "kubelet"):
        result = run([tool, "check", "metrics"],
                     input=render_exposition(DATA / f"{name}.prom", time.time()))
        assert result.returncode in (0, 3), result.stdout + result.stderr


@pytest.fixture(scope="module")
def fixture_prometheus() -> Iterator[PrometheusServer]:
    prometheus_binary()
    server = ExpositionServer()
    dead = f"127.0.0.1:{free_port()}"      # an exporter that is down: up == 0
    prom = PrometheusServer([
        {"job_name": "podres-exporter", "metrics_path": "/exporter",
         "static_configs": [{"targets": [server.address, dead]}]},
        {"job_name": "kubelet", "metrics_path": "/kubelet",
         "static_configs": [{"targets": [server.address]}]},
    ])
    try:
        # Data for rates: the first targets after ~5 s, then a few scrapes.
        assert prom.wait_for("count_over_time(container_cpu_usage_seconds_total[10s]) >= 8",
                             timeout=40), prom.logs()
        yield prom
    finally:
        prom.stop()
        server.stop()


PROM_QUERIES = [q for d in ("node.json", "fleet.json") for q in dashboard_queries(d)
                if q.kind == "promql"]


def test_every_panel_expression_returns_data(fixture_prometheus: PrometheusServer) -> None:
    empty = []
    for q in PROM_QUERIES:
        if not fixture_prometheus.wait_for(prom_substitute(q.text, interval=INTERVAL),
                                           timeout=5):
            empty.append(q.where)
    assert not empty, f"no data for: {empty}"


def _panel_result(prom: PrometheusServer, dashboard: str, title: str) -> list[dict]:
    q = next(q for q in dashboard_queries(dashboard) if q.panel == title)
    return prom.query(prom_substitute(q.text, interval=INTERVAL))


def test_panel_values(fixture_prometheus: PrometheusServer) -> None:
    prom = fixture_prometheus
    # Both spellings of the kubelet's allocation errors are found.
    errors = _panel_result(prom, "fleet.json", "Kubelet allocation errors")
    assert {r["metric"]["resource_name"] for r in errors} == {"cpu", "memory"}
    # Fleet ratio: 2 pod_shared containers per 2 pod_exclusive; 1 shared CPU per 3.
    [ratio] = _panel_result(prom, "fleet.json", "Pod-shared per pod-exclusive containers")
    assert float(ratio["value"][1]) == 1.0
    [cpus] = _panel_result(prom, "fleet.json", "Pod-shared per pod-exclusive CPUs")
    assert abs(float(cpus["value"][1]) - 1 / 3) < 1e-9
    # Shared pool of app/web: (0.6 + 0.35) of 1 CPU; the exclusive app's 1.9 not counted.
    [sat] = _panel_result(prom, "node.json", "Pod shared pool saturation")
    assert sat["metric"] == {"namespace": "app", "pod": "web"}
    assert abs(float(sat["value"][1]) - 0.95) < 0.02
    # Only the exclusive postgres is reported throttled (2 of 10 periods), not the proxy.
    [thr] = _panel_result(prom, "node.json", "CFS throttling of exclusive containers")
    assert thr["metric"]["container"] == "postgres"
    assert abs(float(thr["value"][1]) - 0.2) < 0.02
    # Online CPUs: the pools add up to 16.
    [online] = _panel_result(prom, "node.json", "Online CPUs")
    assert float(online["value"][1]) == 16


def test_recording_rules_record(fixture_prometheus: PrometheusServer) -> None:
    records = [r["record"] for p in RULE_FILES for g in yaml.safe_load(p.read_text())["groups"]
               for r in g["rules"] if "record" in r]
    missing = [r for r in records if not fixture_prometheus.wait_for(r, timeout=10)]
    assert not missing, missing
    [ratio] = fixture_prometheus.query(
        "cluster:podres_pod_shared_per_pod_exclusive_cpus:ratio")
    assert abs(float(ratio["value"][1]) - 1 / 3) < 1e-9


def test_alerts_on_a_real_server(fixture_prometheus: PrometheusServer) -> None:
    expected = {
        "PodresExporterDown",                # the dead target
        "PodresSourceErrors",                # configz errors keep growing
        "PodresAllocationAnomaly",           # numa_misaligned (legacy_shared_report is 0)
        "PodresKubeletAllocationErrors",     # both spellings
        "PodresCheckpointDowngradeUnsafe",
        "PodresPodSharedPoolSaturated",      # app/web at 95 %
        "PodresExclusiveContainerThrottled",  # db/pg/postgres
    }
    deadline = time.monotonic() + 20
    while True:
        alerts = fixture_prometheus.api("alerts")["alerts"]
        names = {a["labels"]["alertname"] for a in alerts}
        if names >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert names == expected
    by_name = {a["labels"]["alertname"]: a for a in alerts}
    assert by_name["PodresAllocationAnomaly"]["labels"]["kind"] == "numa_misaligned"
    assert by_name["PodresExclusiveContainerThrottled"]["labels"]["container"] == "postgres"
    assert by_name["PodresKubeletAllocationErrors"]["state"] == "firing"
    errors = {a["labels"]["resource_name"] for a in alerts
              if a["labels"]["alertname"] == "PodresKubeletAllocationErrors"}
    assert errors == {"cpu", "memory"}


# --- podres-exporter demo ----------------------------------------------------------------

# Panels that must show data for any running exporter: the node's ledger and the fleet view
# built from it. Anomaly, error, checkpoint and cAdvisor panels may rightly be empty.
CORE_PANELS = {
    "node.json": ["PodResources source up", "Online CPUs", "Reclaimed cores",
                  "Reclaimable cores", "Last successful poll", "CPU pools by NUMA node",
                  "CPU pools over time", "Containers per assignment", "Pods", "Containers",
                  "Kubelet configuration", "Poll duration"],
    "fleet.json": ["Pod-shared per pod-exclusive containers",
                   "Pod-shared per pod-exclusive CPUs", "Reclaimed cores",
                   "Reclaimable cores", "Nodes reporting", "Pod-shared per pod-exclusive ratio",
                   "Containers per assignment", "Reclaimed and reclaimable cores", "CPU pools",
                   "Top pods by reclaimed cores", "Nodes by reclaimed cores"],
}


def _core_queries() -> dict[tuple[str, str], list[Query]]:
    out: dict[tuple[str, str], list[Query]] = {}
    for dashboard, titles in CORE_PANELS.items():
        queries = dashboard_queries(dashboard)
        for title in titles:
            out[(dashboard, title)] = [q for q in queries if q.panel == title]
            assert out[(dashboard, title)], f"{dashboard}: no panel {title!r}"
    return out


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[str]:
    """``podres-exporter demo`` on a free loopback port; yields its address once /metrics
    answers. NOTE: fails (rather than skips) while ``demo`` is not implemented."""
    port = free_port()
    log = open(tmp_path / "demo.log", "wb")  # noqa: SIM115
    env = dict(os.environ, GRPC_VERBOSITY="ERROR", HOME=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.cli", "demo",
         "--web.listen-address", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail("podres-exporter demo exited with "
                            f"{proc.returncode}: {(tmp_path / 'demo.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    if r.status == 200 and b"podres_up" in r.read():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("demo did not serve /metrics within 30 s: "
                            f"{(tmp_path / 'demo.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


@pytest.mark.slow
def test_core_panels_return_data_from_demo(demo: str) -> None:
    prometheus_binary()
    prom = PrometheusServer([{"job_name": "podres-exporter",
                              "static_configs": [{"targets": [demo]}]}], rules=False)
    try:
        assert prom.wait_for("podres_up", timeout=20), f"demo not scraped: {prom.logs()}"
        empty = []
        for (dashboard, title), queries in _core_queries().items():
            if not any(prom.wait_for(prom_substitute(q.text, interval=INTERVAL), timeout=5)
                       for q in queries):
                empty.append(f"{dashboard} / {title}")
        assert not empty, f"core panels without data from demo: {empty}"
        _compare_with_ledger(prom, demo)
    finally:
        prom.stop()


def _compare_with_ledger(prom: PrometheusServer, address: str) -> None:
    """What the panels show through Prometheus is what the exporter's ledger says."""
    import json
    with urllib.request.urlopen(f"http://{address}/api/v1/ledger", timeout=10) as r:
        ledger = json.load(r)

    def value(dashboard: str, title: str) -> float:
        [sample] = _panel_result(prom, dashboard, title)
        return float(sample["value"][1])

    assert value("node.json", "Online CPUs") == ledger["node"]["online_cpus"]
    assert value("node.json", "Reclaimed cores") == ledger["reclaimed_cpus"]
    assert value("fleet.json", "Reclaimable cores") == ledger["reclaimable_cpus"]
    pools = {r["metric"]["pool"]: float(r["value"][1])
             for r in _panel_result(prom, "node.json", "CPU pools over time")}
    assert pools == {k: float(v) for k, v in ledger["cpu_pools"].items()}
    by_assignment: dict[str, int] = {}
    for c in ledger["containers"]:
        by_assignment[c["assignment"]] = by_assignment.get(c["assignment"], 0) + 1
    if by_assignment.get("pod_exclusive"):
        ratio = value("fleet.json", "Pod-shared per pod-exclusive containers")
        expected = by_assignment.get("pod_shared", 0) / by_assignment["pod_exclusive"]
        assert abs(ratio - expected) < 1e-9
