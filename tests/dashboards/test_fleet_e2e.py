"""Fleet end-to-end: real exporters, real Prometheus 2.42, the chart's own scrape settings.

Six ``podres-exporter serve`` processes poll simulated kubelets (``exporter.sim``: real gRPC
on unix sockets, real HTTPS) of the nodes described in fleet_nodes.py; a stand-in kubelet per
node serves cAdvisor's series with cAdvisor's real label set, ``/metrics/resource`` and the
resource-manager counters. Scrape configs are rendered from the Helm chart's ServiceMonitor
exactly as prometheus-operator generates them (servicemonitor_config.py), and from
kube-prometheus' kubelet ServiceMonitor. Cluster a's own Prometheus (external label
``cluster="a"``, so no cluster label inside its TSDB) runs the rules on the single-cluster
path; a second, global Prometheus scrapes clusters a and b with every series labelled by its
cluster, as a Thanos query or a federation tier presents them, and runs the rules over two
clusters that reuse namespace and pod names. (Federation itself is not used: federated
samples keep their timestamps, so they get no staleness markers and arrive a scrape late,
which would blur both the dead node and 5 s rates.)

Every PromQL expression of node.json (for every node) and fleet.json (for every cluster)
runs on cluster a's and on the global server: no errors, data exactly where the scenario has
data, hand-computed values for the ratio, reclaimed, saturation and throttling panels. The
rules record, and exactly the alerts of the scenario are pending or firing.

Prometheus applies targets on a 5 s tick: the module's fixture needs ~15 s before the first
assertion.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from dash_helpers import (
    REPO,
    RULE_FILES,
    PrometheusServer,
    dashboard_queries,
    free_port,
    grafana_values,
    prom_substitute,
    prometheus_binary,
    stop_process_group,
    variable_queries,
)
from fleet_nodes import (
    DRA_GPU,
    POOL_LOAD,
    TOPOLOGY,
    KernelFiles,
    Node,
    cadvisor_exposition,
    dcgm_exposition,
    fleet,
    kubelet_exposition,
    resource_exposition,
)
from servicemonitor_config import (
    KUBELET_SERVICE,
    KUBELET_SERVICEMONITOR,
    Endpoint,
    scrape_configs,
)

helm = pytest.importorskip("helm_python", reason="helm-python-sdk renders the chart")

INTERVAL = "5s"   # $__rate_interval: five scrapes at the test's 1 s interval
BUSY_SINCE = "6s"  # INTERVAL and one scrape: how long a counter must have been moving
CHART = REPO / "deploy" / "helm" / "podres-exporter"
EXPORTER_JOB = "podres-exporter"


# --- simulated kubelets on one background event loop ----------------------------------

class SimLoop:
    """Runs every ``SimKubelet`` on one event loop in a background thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 15.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class KubeletStandIn:
    """The kubelet's Prometheus endpoints for one node (plain HTTP on loopback)."""

    def __init__(self, node: Node, t0: float) -> None:
        routes: dict[str, Callable[[Node, float], str]] = {
            "/metrics": kubelet_exposition, "/metrics/cadvisor": cadvisor_exposition,
            "/metrics/resource": resource_exposition,
            # Not the kubelet's: dcgm-exporter's port on the node, served here to save one
            # more server per node.
            "/dcgm/metrics": lambda n, _: dcgm_exposition(n)}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                render = routes.get(self.path)
                if render is None:
                    self.send_error(404)
                    return
                body = render(node, t0).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError):  # Prometheus stopping mid-scrape
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port_v6() -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        return int(s.getsockname()[1])


@dataclass
class Fleet:
    nodes: dict[str, Node]
    addresses: dict[str, str]                # node → exporter address Prometheus scrapes
    clusters: dict[str, PrometheusServer]    # "a": cluster a's own Prometheus
    global_: PrometheusServer
    sims: dict[str, Any]
    loop: SimLoop
    logs: dict[str, Path] = field(default_factory=dict)

    def exporter_logs(self) -> str:
        return "\n".join(f"--- {n}\n{p.read_text(errors='replace')[-1500:]}"
                         for n, p in self.logs.items())


def _render_chart() -> tuple[dict[str, Any], dict[str, Any]]:
    chart = helm.Chart.load(str(CHART))
    # As on a cluster serving monitoring.coreos.com/v1 (the SDK renders without one).
    rendered = chart.render({"serviceMonitor": {"enabled": True}}, name="podres-exporter",
                            namespace="podres-system",
                            is_install=True)
    objects = [d for path, text in rendered.items() if not path.endswith(".txt")
               for d in yaml.safe_load_all(text) if d]
    [sm] = [o for o in objects if o["kind"] == "ServiceMonitor"]
    [svc] = [o for o in objects if o["kind"] == "Service"]
    [ds] = [o for o in objects if o["kind"] == "DaemonSet"]
    return sm, {**svc, "pod_labels": ds["spec"]["template"]["metadata"]["labels"]}


def _start_kernel_clock(files: list[KernelFiles]) -> subprocess.Popen[bytes]:
    """The nodes' /proc/stat advancing in real time, in a process of its own."""
    specs = json.dumps([f.clock_spec() for f in files])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("fleet_nodes.py")),
                             specs], env=env, start_new_session=True)


def _start_exporter(node: Node, sim: Any, workdir: Path, address: str,
                    kernel: KernelFiles) -> subprocess.Popen[bytes]:
    topology = workdir / "topology.json"
    topology.write_text(json.dumps(TOPOLOGY))
    token = workdir / "token"
    token.write_text("fleet-test-token\n")
    args = [sys.executable, "-m", "exporter.cli", "serve",
            "--web.listen-address", address,
            "--podresources.socket", sim.socket_path,
            "--kubelet.url", sim.http_url, "--kubelet.ca-file", str(sim.cert_path),
            "--kubelet.token-file", str(token),
            "--topology", str(topology), "--node-name", node.name,
            "--poll.interval", "1s", "--podresources.staleness", "3s",
            # Time runs faster here: /pods is read again within seconds, as it is within
            # the alert windows on a real node (60 s by default).
            "--kubelet.pods-refresh-interval", "2s",
            "--history.url", f"sqlite:///{workdir / 'history.db'}",
            # The node's simulated kernel files, not this machine's.
            "--cgroup.root", str(kernel.cgroup_root), "--proc.root", str(kernel.proc_root),
            "--log.level", "warn"]
    if node.checkpoint is not None:
        root = workdir / "kubelet"
        root.mkdir()
        (root / "cpu_manager_state").write_text(node.checkpoint)
        args += ["--kubelet.root-dir", str(root)]
    log = open(workdir / "exporter.log", "wb")  # noqa: SIM115
    env = dict(os.environ, GRPC_VERBOSITY="ERROR", PYTHONPATH=str(REPO))
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                            cwd=workdir, start_new_session=True)


def _in_cluster(configs: list[dict[str, Any]], cluster: str) -> list[dict[str, Any]]:
    """The same scrape configs as seen through a global view: every series carries its
    cluster (what a Thanos query or a federation tier adds from external labels)."""
    out = []
    for c in configs:
        c = {**c, "job_name": f"{c['job_name']}@{cluster}"}
        c["relabel_configs"] = [*c["relabel_configs"],
                                {"target_label": "cluster", "replacement": cluster}]
        out.append(c)
    return out


@pytest.fixture(scope="module")
def fleet_env() -> Iterator[Fleet]:
    prometheus_binary()
    from exporter.sim.cgroupfs import decorate_pod_list
    from exporter.sim.server import Misbehaviour, SimKubelet
    from exporter.sources.fixture import load_fixture_dir

    nodes = {n.name: n for n in fleet()}
    root = Path(tempfile.mkdtemp(prefix="podres-fleet-", dir="/tmp"))
    loop = SimLoop()
    t0 = time.time()
    sims: dict[str, Any] = {}
    procs: list[subprocess.Popen[bytes]] = []
    standins = {name: KubeletStandIn(node, t0) for name, node in nodes.items()}
    servers: list[PrometheusServer] = []
    logs: dict[str, Path] = {}
    addresses: dict[str, str] = {}
    kernels: list[KernelFiles] = []
    try:
        for name, node in nodes.items():
            if not node.exporter:
                addresses[name] = f"127.0.0.1:{free_port()}"   # nobody listens: up == 0
                continue
            workdir = root / name
            fixture = node.write_fixture(workdir / "fixture")
            state = load_fixture_dir(fixture).kubelet
            if state.pod_list is not None:  # container ids that name the cgroup scopes
                state = dataclasses.replace(state, pod_list=decorate_pod_list(state.pod_list))
            kernels.append(KernelFiles(fixture, workdir))
            sim = SimKubelet(state, socket_path=str(root / f"{name[-2:]}.sock"),
                             http_listen="127.0.0.1:0",
                             misbehaviour=Misbehaviour(forbidden_paths=set(node.forbidden)))
            loop.run(sim.start())
            sims[name] = sim
            if node.listen_ipv6:
                addresses[name] = f"[::1]:{free_port_v6()}"
            else:
                addresses[name] = f"127.0.0.1:{free_port()}"
            procs.append(_start_exporter(node, sim, workdir, addresses[name], kernels[-1]))
            logs[name] = workdir / "exporter.log"

        procs.append(_start_kernel_clock(kernels))
        sm, service = _render_chart()
        per_cluster: dict[str, list[dict[str, Any]]] = {}
        for cluster in ("a", "b"):
            members = [n for n in nodes.values() if n.cluster == cluster]
            exporters = [Endpoint(addresses[n.name], "Pod", f"podres-exporter-{n.name[-2:]}",
                                  n.name, "metrics", service["pod_labels"], "exporter")
                         for n in members]
            # An address of the Service under another port name: the operator drops it.
            exporters.append(Endpoint(addresses[members[0].name], "Pod", "podres-exporter-x",
                                      members[0].name, "healthz", service["pod_labels"],
                                      "exporter"))
            kubelets = [Endpoint(standins[n.name].address, "Node", n.name, n.name,
                                 "https-metrics") for n in members]
            per_cluster[cluster] = (
                scrape_configs(sm, service, exporters)
                + scrape_configs(KUBELET_SERVICEMONITOR, KUBELET_SERVICE, kubelets))
        # Cluster a's own Prometheus: no cluster label inside its TSDB (the external label
        # only marks what leaves it), so the rules run on the single-cluster path.
        # dcgm-exporter on the nodes with GPUs, scraped keeping its own namespace, pod and
        # container labels (honor_labels, as its chart's serviceMonitor.honorLabels does).
        dcgm = [{"job_name": "dcgm-exporter", "honor_labels": True, "metrics_path": "/dcgm/metrics",
                 "static_configs": [{"targets": [standins[n.name].address]}
                                    for n in nodes.values() if n.cluster == "a" and n.devices]}]
        a = PrometheusServer(per_cluster["a"] + dcgm, external_labels={"cluster": "a"})
        servers.append(a)
        global_ = PrometheusServer(_in_cluster(per_cluster["a"], "a")
                                   + _in_cluster(per_cluster["b"], "b"))
        servers.append(global_)
        env = Fleet(nodes, addresses, {"a": a}, global_, sims, loop, logs)

        # node-a2's kubelet dies once its ledger has reached Prometheus.
        assert a.wait_for('podres_cpus{node="node-a2"}', timeout=30), (
            a.logs() + env.exporter_logs())
        loop.run(sims["node-a2"].stop())
        assert a.wait_for('podres_up{node="node-a2"} == 0', timeout=15), env.exporter_logs()
        assert a.wait_for('absent(podres_cpus{node="node-a2"})', timeout=15)
        # Enough samples for 5 s rates on both servers.
        assert a.wait_for("count_over_time(container_cpu_usage_seconds_total"
                          '{metrics_path="/metrics/cadvisor"}[10s]) >= 8', timeout=30)
        assert global_.wait_for('count_over_time(container_cpu_usage_seconds_total'
                                '{cluster="b", metrics_path="/metrics/cadvisor"}[10s]) >= 8',
                                timeout=30), global_.logs()
        # The kernel panels' rate() needs each busy-seconds counter to span its whole window:
        # a counter starts at 0 at its exporter's second poll, and rate() of a series younger
        # than the window divides what it saw by the whole window (a series 2.5 s old reads
        # half). Under load the exporters come up seconds after Prometheus, so wait until
        # every counter was already moving one window and one scrape ago (which also says
        # the kernel clock had started by then).
        # (Not node-a2: with its kubelet dead its exporter reads no kernel interval.)
        kernel_nodes = [n.name for n in nodes.values() if n.exporter and n.name != "node-a2"]
        for prom, members in ((a, [n for n in kernel_nodes if nodes[n].cluster == "a"]),
                              (global_, kernel_nodes)):
            moving = ('count(count by (node) (podres_cpu_pool_busy_seconds_total{pool="reserved",'
                      f'node=~"{"|".join(members)}"}} offset {BUSY_SINCE} > 0)) == {len(members)}')
            assert prom.wait_for(moving, timeout=30), prom.logs() + env.exporter_logs()
        yield env
    finally:
        for server in servers:
            server.stop()
        for proc in procs:
            stop_process_group(proc, 10)
        for sim in sims.values():
            with contextlib.suppress(Exception):  # node-a2's is stopped already
                loop.run(sim.stop())
        loop.close()
        for s in standins.values():
            s.stop()
        shutil.rmtree(root, ignore_errors=True)


# --- what the scenario says each panel shows ---------------------------------------------

# Node dashboard panels without data for a node, and why. Every other panel has data.
NODE_EMPTY_ALWAYS = {
    # only while anomalies are present
    "Current anomalies",
    # the memory manager's policy is None: no memory blocks
    "Memory pools",
    # no kubelet root mounted (only node-a4 has checkpoints)
    "Checkpoints", "Checkpoint downgrade unsafe",
    # the kernel sources are on, but no pod has held its CPUs for an hour: none is judged
    "Stranded cores",
    # no device plugin on these nodes (docs/design.md#devices)
    "Devices by resource and NUMA node",
}
NODE_EMPTY = {
    # its two GPUs
    "node-a1": NODE_EMPTY_ALWAYS - {"Devices by resource and NUMA node"},
    # the kubelet died: ledger withdrawn, only self-metrics remain
    "node-a2": NODE_EMPTY_ALWAYS | {
        "Online CPUs", "Reclaimed cores", "Reclaimable cores", "Active anomalies",
        "CPU pools by NUMA node", "CPU pools over time", "Memory pools",
        "Containers per assignment", "Pods", "Containers", "Kubelet configuration",
        "Pod shared pool saturation", "CFS throttling of exclusive containers",
        # busy time is attributed to the ledger's pools: none without a ledger
        "Pool saturation", "Containers away from their devices"},
    # anomalies, but no cAdvisor usage of pod_shared or throttled exclusive containers
    "node-a3": (NODE_EMPTY_ALWAYS - {"Current anomalies"}) | {
        "Pod shared pool saturation", "CFS throttling of exclusive containers"},
    # legacy_shared_report is a current anomaly; checkpoints are mounted; no cAdvisor usage
    "node-a4": {"Memory pools", "Pod shared pool saturation",
                "CFS throttling of exclusive containers", "Stranded cores",
                "Devices by resource and NUMA node"},
    "node-b1": NODE_EMPTY_ALWAYS,
    "node-b2": NODE_EMPTY_ALWAYS | {
        "Pod shared pool saturation", "CFS throttling of exclusive containers"},
}
# Fleet panels without data in a cluster (None: on cluster a's server, all clusters).
FLEET_EMPTY = {
    # "older" kubelet metrics are not published by these kubelets
    "always": {"Older kubelet manager errors", "Kubelet container assignment events",
               # no pod has held its CPUs for an hour in this fleet
               "Stranded cores"},
    "b": {"Kubelet allocation errors", "Kubelet allocations", "Exporters down",
          "Nodes with anomalies"},
}


def node_queries(prom: PrometheusServer, node: Node, *, cluster: str) -> dict[str, list[Any]]:
    values = grafana_values("node.json", {"cluster": cluster, "job": "All", "node": node.name})
    out: dict[str, list[Any]] = {}
    for q in dashboard_queries("node.json"):
        if q.kind != "promql":
            continue
        result = prom.query(prom_substitute(q.text, interval=INTERVAL, values=values))
        out.setdefault(q.panel, []).extend(result)
    return out


def fleet_queries(prom: PrometheusServer, cluster: str) -> dict[str, list[Any]]:
    values = grafana_values("fleet.json", {"cluster": cluster, "job": "All"})
    out: dict[str, list[Any]] = {}
    for q in dashboard_queries("fleet.json"):
        result = prom.query(prom_substitute(q.text, interval=INTERVAL, values=values))
        out.setdefault(q.panel, []).extend(result)
    return out


def scalar(results: list[Any]) -> float:
    [sample] = results
    return float(sample["value"][1])


# --- scrape targets ------------------------------------------------------------------------

def test_operator_emulation_adds_the_exporter_pods_labels_before_the_chart_drops_them() -> None:
    """Without the chart's relabelings the operator's own would label every series with the
    exporter pod's namespace/pod/container and name the job after the Service: the live
    checks below would catch a chart that stops dropping them."""
    sm, service = _render_chart()
    endpoint = Endpoint("127.0.0.1:9847", "Pod", "podres-exporter-x", "w1", "metrics",
                        service["pod_labels"], "exporter")
    [config] = scrape_configs(sm, service, [endpoint])
    targets = [r.get("target_label") for r in config["relabel_configs"]]
    for label in ("namespace", "pod", "container", "job", "node"):
        assert label in targets, label
    drop = max(i for i, r in enumerate(config["relabel_configs"])
               if r.get("action") == "labeldrop")
    assert drop > max(i for i, label in enumerate(targets) if label in ("pod", "container"))
    assert config["honor_labels"] is True
    # a selector that does not match the Service keeps nothing
    other = {**sm, "spec": {**sm["spec"], "selector": {"matchLabels": {"app": "other"}}}}
    [config] = scrape_configs(other, service, [endpoint])
    keep = [r for r in config["relabel_configs"] if r.get("action") == "keep"]
    assert keep[0]["regex"] == "(other);true"



def test_targets_carry_the_node_and_not_the_exporter_pods_labels(fleet_env: Fleet) -> None:
    targets = fleet_env.clusters["a"].api("targets")["activeTargets"]
    exporters = [t for t in targets if t["labels"]["job"] == EXPORTER_JOB]
    # five addresses on the metrics port; the healthz address was dropped by the selector
    assert sorted(t["labels"]["node"] for t in exporters) == [
        "node-a1", "node-a2", "node-a3", "node-a4", "node-a5"]
    for t in exporters:
        assert not {"namespace", "pod", "container"} & set(t["labels"]), t["labels"]
        assert t["labels"]["instance"] == fleet_env.addresses[t["labels"]["node"]]
    ipv6 = next(t for t in exporters if t["labels"]["node"] == "node-a1")
    assert ipv6["labels"]["instance"].startswith("[::1]:") and ipv6["health"] == "up"
    kubelets = {(t["labels"]["node"], t["labels"]["metrics_path"]) for t in targets
                if t["labels"]["job"] == "kubelet"}
    assert ("node-a1", "/metrics/cadvisor") in kubelets
    # node-level series name the node and nothing of the exporter pod
    [series] = fleet_env.clusters["a"].query('podres_reclaimed_cpus{node="node-a1"}')
    assert set(series["metric"]) == {"__name__", "endpoint", "instance", "job", "node",
                                     "service"}


# --- device metrics joined with dcgm-exporter's ------------------------------------------

def test_gpu_use_joins_the_containers_cpu_placement(fleet_env: Fleet) -> None:
    """docs/metrics.md's join, as written there: dcgm-exporter's utilisation of the GPU
    shop/web/app holds, with the node, resource and CPU assignment from the exporter. The
    idle GPU (no pod labels) and every container without a GPU drop out."""
    from exporter.metrics.docs import DEVICE_JOIN

    prom = fleet_env.clusters["a"]
    assert prom.wait_for("DCGM_FI_DEV_GPU_UTIL", timeout=15), prom.logs()
    result = prom.query(DEVICE_JOIN)
    assert len(result) == 1, result
    [joined] = result
    labels = joined["metric"]
    assert (labels["namespace"], labels["pod"], labels["container"]) == ("shop", "web", "app")
    assert labels["node"] == "node-a1" and labels["resource"] == "nvidia.com/gpu"
    assert labels["assignment"] == "pod_exclusive"
    assert labels["device_id"] == labels["UUID"] == fleet_env.nodes["node-a1"].devices[0][
        "deviceIds"][0]
    assert float(joined["value"][1]) == 87.0


def test_dra_gpu_use_joins_the_containers_cpu_placement(fleet_env: Fleet) -> None:
    """docs/metrics.md's DRA join, as written there: the GPU shop/web/app holds through the
    claim shop/web-gpu, joined on the claim device's labels; the device-plugin GPUs (no
    dra_* labels) drop out."""
    from exporter.metrics.docs import DRA_JOIN

    prom = fleet_env.clusters["a"]
    assert prom.wait_for("podres_container_dra_device_info", timeout=15), prom.logs()
    result = prom.query(DRA_JOIN)
    assert len(result) == 1, result
    [joined] = result
    labels = joined["metric"]
    assert (labels["namespace"], labels["pod"], labels["container"]) == ("shop", "web", "app")
    assert (labels["dra_claim_namespace"], labels["dra_claim_name"], labels["dra_driver_name"],
            labels["dra_pool_name"], labels["dra_device_name"]) == (
        "shop", "web-gpu", "gpu.nvidia.com", "node-a1", "gpu-2")
    assert labels["node"] == "node-a1" and labels["assignment"] == "pod_exclusive"
    assert labels["UUID"] == DRA_GPU["uuid"]
    assert float(joined["value"][1]) == 64.0


# --- every expression, every node ---------------------------------------------------------

@pytest.mark.parametrize("where,cluster,expected", [
    ("cluster a", "All", {"node-a1", "node-a2", "node-a3", "node-a4"}),
    ("global", "b", {"node-b1", "node-b2"}),
    ("global", "All", {"node-a1", "node-a2", "node-a3", "node-a4", "node-b1", "node-b2"})])
def test_node_picker_lists_node_names(fleet_env: Fleet, where: str, cluster: str,
                                      expected: set[str]) -> None:
    """The node variable offers Kubernetes node names (what the history dashboard and
    kubectl use), not exporter addresses; the cluster variable offers the clusters."""
    prom = fleet_env.clusters["a"] if where == "cluster a" else fleet_env.global_
    [q] = [q for q in variable_queries("node.json") if q.panel == "variable node"]
    values = grafana_values("node.json", {"cluster": cluster, "job": "All"})
    series = prom.query(prom_substitute(q.text, values=values))
    assert {s["metric"]["node"] for s in series} == expected
    [c] = [q for q in variable_queries("node.json") if q.panel == "variable cluster"]
    clusters = {s["metric"].get("cluster") for s in prom.query(prom_substitute(c.text))}
    assert clusters == ({None} if where == "cluster a" else {"a", "b"})


@pytest.mark.parametrize("where", ["cluster a", "global"])
def test_node_dashboard_has_data_exactly_where_the_scenario_has(fleet_env: Fleet,
                                                                where: str) -> None:
    problems = []
    for name, expected_empty in NODE_EMPTY.items():
        node = fleet_env.nodes[name]
        if where == "cluster a" and node.cluster != "a":
            continue
        prom = fleet_env.clusters["a"] if where == "cluster a" else fleet_env.global_
        cluster = "All" if where == "cluster a" else node.cluster
        panels = node_queries(prom, node, cluster=cluster)
        empty = {p for p, r in panels.items() if not r}
        if empty != expected_empty:
            problems.append(f"{name}: empty {sorted(empty - expected_empty)}, "
                            f"with data {sorted(expected_empty - empty)}")
    assert not problems, problems


@pytest.mark.parametrize("where,cluster", [("cluster a", "All"), ("global", "All"),
                                           ("global", "a"), ("global", "b")])
def test_fleet_dashboard_has_data_exactly_where_the_scenario_has(
        fleet_env: Fleet, where: str, cluster: str) -> None:
    prom = fleet_env.clusters["a"] if where == "cluster a" else fleet_env.global_
    panels = fleet_queries(prom, cluster)
    empty = {p for p, r in panels.items() if not r}
    assert empty == FLEET_EMPTY["always"] | FLEET_EMPTY.get(cluster, set())


# --- hand-computed values ------------------------------------------------------------------

def test_node_values(fleet_env: Fleet) -> None:
    prom, nodes = fleet_env.clusters["a"], fleet_env.nodes
    a1 = node_queries(prom, nodes["node-a1"], cluster="All")
    # shop/web's pod shared pool (1 CPU): mesh-proxy 0.6 + log-shipper 0.35; the exclusive
    # app's 1.9 and the /metrics/resource copy of the same usage do not count.
    [sat] = a1["Pod shared pool saturation"]
    assert sat["metric"] == {"namespace": "shop", "pod": "web"}
    assert float(sat["value"][1]) == pytest.approx(0.95, abs=0.02)
    # only the exclusive app is reported (0.2 of its periods), not the throttled sidecar
    [thr] = a1["CFS throttling of exclusive containers"]
    assert (thr["metric"]["pod"], thr["metric"]["container"]) == ("web", "app")
    assert float(thr["value"][1]) == pytest.approx(0.2, abs=0.02)
    assert scalar(a1["Reclaimed cores"]) == 1
    assert scalar(a1["Online CPUs"]) == 8
    assert scalar(a1["Active anomalies"]) == 0
    # exclusive_overlap + empty_pod_shared_pool, as the two alerts count them
    a3 = node_queries(prom, nodes["node-a3"], cluster="All")
    assert scalar(a3["Active anomalies"]) == 2
    # the 1.36 reporting pattern is shown, not counted
    a4 = node_queries(prom, nodes["node-a4"], cluster="All")
    assert scalar(a4["Active anomalies"]) == 0
    assert [r["metric"]["kind"] for r in a4["Current anomalies"]] == ["legacy_shared_report"]
    assert scalar(a4["Checkpoint downgrade unsafe"]) == 1
    # the dead kubelet: source down, and no green 0 for anomalies
    a2 = node_queries(prom, nodes["node-a2"], cluster="All")
    assert scalar(a2["PodResources source up"]) == 0
    assert a2["Active anomalies"] == []


def test_dead_kubelet_has_no_source_up(fleet_env: Fleet) -> None:
    """Every configured source is read at every poll, so each one's health is what it was
    just now: with the kubelet dead, nothing the kubelet serves may claim to be up, while
    the topology file (which does not depend on it) truthfully still is."""
    a2 = node_queries(fleet_env.clusters["a"], fleet_env.nodes["node-a2"], cluster="All")
    sources = {r["metric"]["source"]: float(r["value"][1]) for r in a2["Sources up"]}
    assert sources.get("podresources") == 0, sources
    assert all(sources[s] == 0 for s in ("podresources", "kubelet") if s in sources), sources
    # The kernel's files (cgroup tree, /proc/stat) do not depend on the kubelet either.
    assert {s for s, up in sources.items() if up} <= {"topology", "sysfs", "cgroup",
                                                      "procstat"}, sources


def _by_pool(results: list[Any]) -> dict[str, float]:
    return {r["metric"]["pool"]: float(r["value"][1]) for r in results}


# A node's /proc/stat is one file written at once: whatever delays its writer (a busy
# machine) scales every pool of the node alike. Their ratios are exact to a counter step;
# the fractions themselves are held to a wider band.
RATIO_TOLERANCE = 0.15
LOAD_TOLERANCE = 0.4


def _loads_match(got: dict[str, float], *, one_node: bool = True) -> None:
    assert got == pytest.approx({p: POOL_LOAD[p] for p in got}, rel=LOAD_TOLERANCE), got
    if not one_node:  # pools summed over nodes whose files lag differently
        return
    base = got["reserved"]
    ratios = {p: v / base for p, v in got.items()}
    assert ratios == pytest.approx({p: POOL_LOAD[p] / POOL_LOAD["reserved"] for p in got},
                                   rel=RATIO_TOLERANCE), got


@pytest.mark.parametrize("where", ["cluster a", "global"])
def test_kernel_panels(fleet_env: Fleet, where: str) -> None:
    """The kernel sources read each node's simulated /proc/stat and cgroup tree: every
    pool's busy fraction is the load its CPUs were given, on both servers; the trees match
    the ledgers, so no cpuset drift; the stranded-cores panels judge no pod yet."""
    prom = fleet_env.clusters["a"] if where == "cluster a" else fleet_env.global_
    nodes = fleet_env.nodes
    for name in ("node-a1", "node-a3", "node-a4", "node-b1", "node-b2"):
        node = nodes[name]
        if where == "cluster a" and node.cluster != "a":
            continue
        panels = node_queries(prom, node, cluster="All" if where == "cluster a"
                              else node.cluster)
        pools = _by_pool(panels["Pool saturation"])
        _loads_match(pools)
        assert {"reserved", "node_shared"} <= set(pools), name
        assert panels["Stranded cores"] == []
    # node-a1: the pod shared pool (CPU 4) at 0.9, its app's exclusive CPUs at 0.3.
    a1 = _by_pool(node_queries(prom, nodes["node-a1"], cluster="All" if where == "cluster a"
                               else "a")["Pool saturation"])
    assert set(a1) == {"reserved", "node_shared", "pod_exclusive", "pod_shared"}
    drift = prom.query('sum(podres_cpuset_drift) or vector(0)')
    assert float(drift[0]["value"][1]) == 0
    for cluster in (["All"] if where == "cluster a" else ["a", "b"]):
        fleet_panels = fleet_queries(prom, cluster)
        per_node = {r["metric"]["node"]: float(r["value"][1])
                    for r in fleet_panels["Pod shared pool saturation per node"]}
        expected = {"node-a1", "node-a4"} if cluster in ("All", "a") else {"node-b1"}
        if where == "global" and cluster == "All":
            expected |= {"node-b1"}
        assert set(per_node) == expected, (cluster, per_node)
        assert all(v == pytest.approx(POOL_LOAD["pod_shared"], rel=LOAD_TOLERANCE)
                   for v in per_node.values())
        _loads_match(_by_pool(fleet_panels["Pool saturation across the fleet"]),
                     one_node=False)


def test_fleet_values_of_cluster_a(fleet_env: Fleet) -> None:
    panels = fleet_queries(fleet_env.clusters["a"], "All")
    # pod_shared / pod_exclusive containers: a1 2/1, a3 1/1, a4 2/1 (a2 withdrawn)
    assert scalar(panels["Pod-shared per pod-exclusive containers"]) == pytest.approx(5 / 3)
    # CPUs: a1 1/2, a3 0/2, a4 1/2
    assert scalar(panels["Pod-shared per pod-exclusive CPUs"]) == pytest.approx(1 / 3)
    assert scalar(panels["Reclaimed cores"]) == 3
    assert scalar(panels["Reclaimable cores"]) == 0
    assert scalar(panels["Nodes reporting"]) == 3
    assert scalar(panels["Active anomalies"]) == 2
    rollout = {r["metric"]["pod_level_resource_managers"]: float(r["value"][1])
               for r in panels["Nodes by pod-level resource managers"]}
    assert rollout == {"true": 3}
    down = {(r["metric"]["node"], r["metric"]["__name__"]) for r in panels["Exporters down"]}
    assert down == {("node-a5", "up"), ("node-a2", "podres_up")}
    errors = {r["metric"]["node"] for r in panels["Kubelet allocation errors"]
              if float(r["value"][1]) > 0}
    assert errors == {"node-a3"}


def test_global_values_per_cluster(fleet_env: Fleet) -> None:
    """Both clusters run shop/web: every number stays with its own cluster."""
    prom = fleet_env.global_
    a = fleet_queries(prom, "a")
    b = fleet_queries(prom, "b")
    assert scalar(a["Pod-shared per pod-exclusive containers"]) == pytest.approx(5 / 3)
    assert scalar(b["Pod-shared per pod-exclusive containers"]) == pytest.approx(2)
    assert scalar(b["Reclaimed cores"]) == 1 and scalar(b["Reclaimable cores"]) == 1
    rollout = {r["metric"]["pod_level_resource_managers"]: float(r["value"][1])
               for r in b["Nodes by pod-level resource managers"]}
    assert rollout == {"true": 1, "false": 1}
    top = {(r["metric"]["cluster"], r["metric"]["node"], r["metric"]["pod"])
           for r in fleet_queries(prom, "All")["Top pods by reclaimed cores"]}
    assert {("a", "node-a1", "web"), ("b", "node-b1", "web")} <= top
    # the same pod name in two clusters: 0.95 in a, (0.2 + 0.1) / 1 in b; never 1.25
    b1 = node_queries(prom, fleet_env.nodes["node-b1"], cluster="b")
    [sat] = b1["Pod shared pool saturation"]
    assert float(sat["value"][1]) == pytest.approx(0.30, abs=0.02)
    a1 = node_queries(prom, fleet_env.nodes["node-a1"], cluster="a")
    [sat] = a1["Pod shared pool saturation"]
    assert float(sat["value"][1]) == pytest.approx(0.95, abs=0.02)
    [thr] = b1["CFS throttling of exclusive containers"]
    assert float(thr["value"][1]) == pytest.approx(0.05, abs=0.01)


def _records() -> list[str]:
    return [r["record"] for p in RULE_FILES for g in yaml.safe_load(p.read_text())["groups"]
            for r in g["rules"] if "record" in r]


def test_recording_rules_per_cluster_on_the_global_server(fleet_env: Fleet) -> None:
    prom = fleet_env.global_
    missing = [r for r in _records() if not prom.wait_for(r, timeout=10)]
    assert not missing, missing
    sat = {(r["metric"]["cluster"], r["metric"]["node"]): float(r["value"][1])
           for r in prom.query("node_namespace_pod:podres_pod_shared_pool_usage:ratio_rate5m")}
    assert set(sat) == {("a", "node-a1"), ("b", "node-b1")}
    assert sat[("a", "node-a1")] == pytest.approx(0.95, abs=0.02)
    assert sat[("b", "node-b1")] == pytest.approx(0.30, abs=0.02)
    thr = {(r["metric"]["cluster"], r["metric"]["container"]): float(r["value"][1])
           for r in prom.query(
               "node_namespace_pod_container:podres_exclusive_cfs_throttled_periods"
               ":ratio_rate5m")}
    assert thr == {("a", "app"): pytest.approx(0.2, abs=0.02),
                   ("b", "app"): pytest.approx(0.05, abs=0.01)}
    ratio = {r["metric"]["cluster"]: float(r["value"][1]) for r in prom.query(
        "cluster:podres_pod_shared_per_pod_exclusive_containers:ratio")}
    assert ratio == {"a": pytest.approx(5 / 3), "b": pytest.approx(2)}


# --- alerts --------------------------------------------------------------------------------

EXPECTED_ALERTS_A = {
    ("PodresExporterDown", "node-a5", ""),
    ("PodresSourceDown", "node-a2", ""),
    ("PodresSourceErrors", "node-a4", "kubelet/pods"),
    ("PodresAllocationAnomaly", "node-a3", "exclusive_overlap"),
    ("PodresPodSharedPoolEmpty", "node-a3", "shop/cart"),
    ("PodresKubeletAllocationErrors", "node-a3", "cpu"),
    ("PodresCheckpointDowngradeUnsafe", "node-a4", ""),
    ("PodresPodSharedPoolSaturated", "node-a1", "shop/web"),
    ("PodresExclusiveContainerThrottled", "node-a1", "shop/web/app"),
}


def _alert_key(labels: dict[str, str]) -> tuple[str, str, str]:
    name = labels["alertname"]
    if name == "PodresSourceErrors":
        what = f"{labels['source']}/{labels['operation']}"
    elif name == "PodresAllocationAnomaly":
        what = labels["kind"]
    elif name == "PodresKubeletAllocationErrors":
        what = labels["resource_name"]
    elif "container" in labels:
        what = f"{labels['namespace']}/{labels['pod']}/{labels['container']}"
    elif "pod" in labels:
        what = f"{labels['namespace']}/{labels['pod']}"
    else:
        what = ""
    return name, labels.get("node", ""), what


def _alerts(prom: PrometheusServer, expected: set[Any], key: Callable[..., Any]) -> list[Any]:
    deadline = time.monotonic() + 20
    while True:
        alerts = prom.api("alerts")["alerts"]
        if {key(a["labels"]) for a in alerts} >= expected or time.monotonic() > deadline:
            return list(alerts)
        time.sleep(0.5)


def test_each_condition_raises_its_own_alert_once(fleet_env: Fleet) -> None:
    alerts = _alerts(fleet_env.clusters["a"], EXPECTED_ALERTS_A, _alert_key)
    keys = [_alert_key(a["labels"]) for a in alerts]
    assert sorted(keys) == sorted(EXPECTED_ALERTS_A), sorted(keys)  # once each, nothing else
    for a in alerts:
        node = a["labels"]["node"]
        assert f"node {node}" in a["annotations"]["summary"], a
        assert a["annotations"]["runbook_url"] == (
            "http://podres-exporter.podres-system.svc:9847/runbook#"
            + a["labels"]["alertname"].lower()), a
        assert "namespace" not in a["labels"] or a["labels"]["namespace"] != "podres-system"
    by_name = {a["labels"]["alertname"]: a for a in alerts}
    assert by_name["PodresAllocationAnomaly"]["labels"]["severity"] == "critical"
    assert by_name["PodresCheckpointDowngradeUnsafe"]["labels"]["severity"] == "info"


def test_global_alerts_keep_their_cluster(fleet_env: Fleet) -> None:
    expected = {("a", "PodresPodSharedPoolSaturated", "node-a1"),
                ("a", "PodresExclusiveContainerThrottled", "node-a1"),
                ("b", "PodresExclusiveContainerThrottled", "node-b1")}

    def key(labels: dict[str, str]) -> tuple[str, str, str]:
        return labels.get("cluster", ""), labels["alertname"], labels.get("node", "")

    alerts = _alerts(fleet_env.global_, expected, key)
    workload = {key(a["labels"]) for a in alerts if a["labels"]["alertname"] in (
        "PodresPodSharedPoolSaturated", "PodresExclusiveContainerThrottled")}
    assert workload == expected


def test_every_exporter_exposition_passes_promtool_check_metrics(fleet_env: Fleet) -> None:
    from dash_helpers import promtool, run
    tool = promtool()
    for name, address in fleet_env.addresses.items():
        if not fleet_env.nodes[name].exporter:
            continue
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert "podres_up" in text
        result = run([tool, "check", "metrics"], input=text)
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"
