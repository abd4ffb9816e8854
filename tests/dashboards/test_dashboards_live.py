"""The dashboards' PromQL against ``podres-exporter demo`` scraped by a real Prometheus
(Debian's ``prometheus``, started on loopback by the test): the core panels of node.json and
fleet.json return data from the real exporter, equal to what its ledger says.

The whole operator surface (scrape configs rendered from the chart's ServiceMonitor, several
nodes and clusters, cAdvisor, every panel and every rule) is tested in test_fleet_e2e.py.
Prometheus applies targets on a 5 s tick, so the server needs ~6-8 s before answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dash_helpers import (
    PrometheusServer,
    Query,
    dashboard_queries,
    free_port,
    grafana_values,
    prom_substitute,
    prometheus_binary,
    stop_process_group,
)

# $__rate_interval etc.: 5 scrapes at the test's 1 s scrape interval.
INTERVAL = "5s"
# The demo's node (``--node-name`` of the exporter it runs); a scrape configuration attaches
# the same name as the node label.
DEMO_NODE = "demo-node"


def _panel_result(prom: PrometheusServer, dashboard: str, title: str) -> list[dict]:
    q = next(q for q in dashboard_queries(dashboard) if q.panel == title)
    values = grafana_values(dashboard, {"cluster": "All", "job": "All", "node": DEMO_NODE})
    return prom.query(prom_substitute(q.text, interval=INTERVAL, values=values))


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
        stop_process_group(proc)
        log.close()


@pytest.mark.slow
def test_core_panels_return_data_from_demo(demo: str) -> None:
    prometheus_binary()
    prom = PrometheusServer([{"job_name": "podres-exporter",
                              "static_configs": [{"targets": [demo],
                                                  "labels": {"node": DEMO_NODE}}]}],
                            rules=False)
    try:
        assert prom.wait_for("podres_up", timeout=20), f"demo not scraped: {prom.logs()}"
        empty = []
        for (dashboard, title), queries in _core_queries().items():
            values = grafana_values(dashboard, {"cluster": "All", "job": "All",
                                                "node": DEMO_NODE})
            if not any(prom.wait_for(prom_substitute(q.text, interval=INTERVAL,
                                                     values=values), timeout=5)
                       for q in queries):
                empty.append(f"{dashboard} / {title}")
        assert not empty, f"core panels without data from demo: {empty}"
        _compare_with_ledger(prom, demo)
    finally:
        prom.stop()


def _compare_with_ledger(prom: PrometheusServer, address: str) -> None:
    """What the panels show through Prometheus is what the exporter's ledger says."""
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
