"""The exporter as it ships, on the real node (docs/real-node.md#daemonset): the image's
entrypoint (`podres-exporter serve`) with exactly the DaemonSet's environment and the
checkpoint patch, its hostPath volumes mapped into the node's namespace; a real Prometheus
scrapes it, and its SQLite history (the DaemonSet's file) records what the kubelet holds,
read back with `history at now` as an operator would through `kubectl exec`."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
import yaml

from realnode.daemonset import DAEMONSET
from realnode.harness import NODE_NAME, NodeConfig
from tests.realnode.checks import agreeing, cpus
from tests.realnode.conftest import REQUIRED, StartNode
from tests.realnode.test_ledger import AMD, drop_in, tree_workload


def _prometheus() -> Any:
    from tests.dashboards.dash_helpers import PrometheusServer
    if shutil.which("prometheus") is None:
        if REQUIRED:
            pytest.fail("PODRES_REQUIRE_REALNODE=1 but prometheus is not installed",
                        pytrace=False)
        pytest.skip("prometheus not installed: apt-get install prometheus")
    return PrometheusServer


def test_the_daemonset_exporter_scraped_and_recorded(start_node: StartNode) -> None:
    node = start_node(NodeConfig(version="1.37", tree=AMD, scope="pod", pod_level=True))
    env = node.exporter_env()
    # Exactly the DaemonSet's variables (mapped), nothing added but PATH.
    container = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"][
        "containers"][0]
    shipped = {e["name"] for e in container["env"]} | {"PODRES_KUBELET_ROOT_DIR"}
    assert set(env) - {"PATH", "GRPC_VERBOSITY"} == shipped
    assert env["PODRES_PODRESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert env["PODRES_SYSFS"] == "/sys" and env["PODRES_KUBELET_ROOT_DIR"] == "/var/lib/kubelet"
    assert env["PODRES_HISTORY_URL"].startswith(f"sqlite:///{node.workdir}/")
    running = drop_in(node, tree_workload())
    serve = node.start_serve(env)
    try:
        ledger, _ = agreeing(lambda: (serve.reload(), serve.ledger())[1], node, running)
        server = _prometheus()
        host_port = serve.url.removeprefix("http://")
        prom = server([{"job_name": "podres-exporter", "static_configs": [
            {"targets": [host_port], "labels": {"node": NODE_NAME}}]}], rules=False)
        try:
            assert prom.wait_for("podres_up == 1", timeout=30), prom.logs()
            scraped = {r["metric"]["pool"]: float(r["value"][1])
                       for r in prom.wait_for("sum by (pool) (podres_cpus)", timeout=15)}
            assert scraped == {k: float(v) for k, v in ledger["cpu_pools"].items()}
            by_numa = prom.query('sum by (numa_node) (podres_cpus{pool="pod_shared"})')
            assert {r["metric"]["numa_node"]: float(r["value"][1]) for r in by_numa
                    if float(r["value"][1])} == {"0": 3.0}
            anomalies = prom.query("sum(podres_anomalies)")
            assert float(anomalies[0]["value"][1]) == 0
        finally:
            prom.stop()
        history = node.exporter("history", "at", "now", "-o", "json", env=env)
        assert history.returncode == 0, history.stderr
        recorded = _held(json.loads(history.stdout))
        shown = {(c["pod"], c["name"]): cpus(c["cpus"]) for c in ledger["containers"]
                 if c["cpus"]}
        assert recorded == shown, (recorded, shown)
    finally:
        serve.stop()


def _held(answer: Any) -> dict[tuple[str, str], frozenset[int]]:
    rows = answer.get("containers", answer) if isinstance(answer, dict) else answer
    return {(r["pod"], r["container"] if "container" in r else r["name"]): cpus(r["cpus"])
            for r in rows if r.get("cpus")}
