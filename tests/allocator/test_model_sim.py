"""The model-driven ``sim`` command: a real process, a real socket, manifests churned on disk."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.sources.podresources import PodResourcesClient

PLAN_DATA = Path(__file__).parents[1] / "plan" / "data"


async def _list(sock: Path) -> dict[tuple[str, str], object]:
    client = PodResourcesClient(str(sock))
    try:
        resp = await client.list()
    finally:
        await client.close()
    return {(p.namespace, p.name): p for p in resp.pod_resources}


async def _wait_for(sock: Path, want: set[tuple[str, str]], timeout: float = 15.0
                    ) -> dict[tuple[str, str], object]:
    deadline = time.monotonic() + timeout
    pods: dict[tuple[str, str], object] = {}
    while time.monotonic() < deadline:
        if sock.exists():
            try:
                pods = await _list(sock)
            except Exception:  # the server may still be starting
                pods = {}
            if set(pods) == want:
                return pods
        await asyncio.sleep(0.1)
    raise AssertionError(f"pods {sorted(pods)} never became {sorted(want)}")


async def test_sim_places_serves_and_follows_manifest_churn(short_tmp: Path) -> None:
    manifests = short_tmp / "manifests"
    manifests.mkdir()
    shutil.copy(PLAN_DATA / "motivating.yaml", manifests / "web.yaml")
    sock = short_tmp / "kubelet.sock"
    env = dict(os.environ, GRPC_VERBOSITY="ERROR")
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.cli", "sim", "--topology.shape", "1x8x2",
         "--manifests", str(manifests), "--manifests-poll", "100ms", "--socket", str(sock),
         "--reporting", "1.37"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        pods = await _wait_for(sock, {("shop", "web-0"), ("shop", "web-1")})
        web0 = pods[("shop", "web-0")]
        assert len(web0.cpu_ids) == 3  # type: ignore[attr-defined]
        by = {c.name: c for c in web0.containers}  # type: ignore[attr-defined]
        assert len(by["app"].cpu_ids) == 2 and not by["mesh-proxy"].cpu_ids
        # A new pod that cannot fit one NUMA node is rejected; a small one is placed.
        (manifests / "more.yaml").write_text(
            "kind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n  - name: a\n"
            "    resources: {limits: {cpu: '20', memory: 1Gi}}\n---\n"
            "kind: Pod\nmetadata: {name: small}\nspec:\n  containers:\n  - name: a\n"
            "    resources: {limits: {cpu: '1', memory: 1Gi}}\n")
        await _wait_for(sock, {("shop", "web-0"), ("shop", "web-1"), ("default", "small")})
        # Deleting a file releases its pods.
        (manifests / "web.yaml").unlink()
        await _wait_for(sock, {("default", "small")})
        # A broken edit keeps the previous state.
        (manifests / "more.yaml").write_text("kind: Pod\nmetadata: {name: [\n")
        await asyncio.sleep(0.5)
        assert set(await _list(sock)) == {("default", "small")}
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "rejected default/big" in err
    assert "single NUMA node" in err
    assert "still serving the previous state" in err
    assert "model-driven node 1x8x2" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--topology", "2x2"], "SOCKETSxCORESxTHREADS"),
    (["--topology.shape", "1x4x1", "--numa-per-socket", "3"], "--numa-per-socket"),
    (["--topology.shape", "1x4x1", "--manifests", "/nonexistent/x"], "no such file"),
    (["--topology.shape", "1x4x1", "--topology-policy", "single-numa-node", "--reserved", "0-9"],
     "--reserved"),
])
def test_sim_bad_input_is_one_line(args: list[str], message: str, short_tmp: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--socket", str(short_tmp / "k.sock"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_sim_bad_manifest_is_one_line(short_tmp: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    bad = short_tmp / "bad.yaml"
    bad.write_text("kind: Gadget\nmetadata: {name: g}\n")
    assert main(["sim", "--socket", str(short_tmp / "k.sock"), "--topology.shape", "1x4x1",
                 "--manifests", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no pod templates" in err[0] and "Gadget" in err[0], err


def test_sim_metrics_count_assignments_and_errors() -> None:
    import yaml

    from exporter.sim.model_driven import ModelDrivenNode
    from exporter.sources.kubelet import parse_feature_metrics
    from reconciler.allocator import ModelConfig, from_spec
    from reconciler.manifests import workloads_in_manifest

    node = ModelDrivenNode(from_spec("1x4x1"),
                           ModelConfig(scope="pod", topology_policy="best-effort",
                                       reserved_cpus=frozenset({0})), "1.37")
    doc = yaml.safe_load((PLAN_DATA / "motivating.yaml").read_text())
    from exporter.sim.model_driven import pods_from_templates

    pods = pods_from_templates(workloads_in_manifest(doc).templates)
    assert [p.name for p in pods] == ["web-0", "web-1"]
    for pod in pods:
        node.add(pod)
    text = node.state().metrics or ""
    assert parse_feature_metrics(text) == {"PodLevelResources": True,
                                           "PodLevelResourceManagers": True}
    assert 'kubelet_resource_manager_allocations_total{resource_name="cpu",source="pod"} 1' \
        in text
    assert ('kubelet_resource_manager_container_assignments{assignment_type="pod_shared",'
            'resource_name="cpu"} 2') in text
    assert ('kubelet_resource_manager_allocation_errors_total{resource_name="cpu",'
            'source="pod"} 1') in text
    assert len(node.rejected) == 1
    listed = node.state().pod_list or {}
    phases = {i["metadata"]["name"]: i["status"]["phase"] for i in listed["items"]}
    assert phases == {"web-0": "Running", "web-1": "Failed"}
