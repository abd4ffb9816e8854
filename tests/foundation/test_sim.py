"""The simulated kubelet: gRPC (NOT_FOUND for unknown pods, SIGHUP reload of a running
``podres-exporter sim``), HTTPS (bearer token, forbidden paths, large bodies, /metrics) and
its command line."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import contextlib
import gc
import json
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from exporter.errors import SourceError
from exporter.runtime import TLS_READ_BUFFER, shrink_tls_read_buffer
from exporter.sim.server import Misbehaviour
from exporter.sources.fixture import KubeletState, load_fixture_dir
from exporter.sources.kubelet import KubeletClient, parse_feature_metrics
from exporter.sources.podresources import PodResourcesClient
from foundation.helpers import CLI, SCENARIOS, assert_one_clear_line, cli_env, run_cli

DB = SCENARIOS / "database-pod-scope"


class SimProcess:
    """``podres-exporter sim`` in a subprocess, with its output read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def line(self, stream: str, needle: str, timeout: float = 30) -> str:
        reader = self.proc.stdout if stream == "out" else self.proc.stderr
        assert reader is not None

        async def find() -> str:
            while True:
                raw = await reader.readline()
                if not raw:
                    raise AssertionError(f"sim exited before printing {needle!r}")
                text = raw.decode()
                if needle in text:
                    return text

        return await asyncio.wait_for(find(), timeout)


@contextlib.asynccontextmanager
async def sim_process(*args: str) -> AsyncIterator[SimProcess]:
    proc = await asyncio.create_subprocess_exec(
        CLI, "sim", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    try:
        yield SimProcess(proc)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def pod_names(socket_path: str) -> list[str]:
    client = PodResourcesClient(socket_path)
    try:
        return [p.name for p in (await client.list()).pod_resources]
    finally:
        await client.close()


@pytest.mark.timeout(120)
async def test_sighup_reloads_the_fixture_directory(short_tmp: Path) -> None:
    fixture = short_tmp / "node"
    shutil.copytree(SCENARIOS / "sidecar-hybrid", fixture)
    sock = str(short_tmp / "kubelet.sock")
    async with sim_process("--from", str(fixture), "--socket", sock) as sim:
        await sim.line("out", "sim: PodResources on unix://")
        assert await pod_names(sock) == ["web"]

        listing = json.loads((fixture / "list.json").read_text())
        listing["podResources"][0]["name"] = "web-v2"
        listing["podResources"].append({"name": "new", "namespace": "shop",
                                        "containers": [{"name": "c"}]})
        (fixture / "list.json").write_text(json.dumps(listing))
        sim.proc.send_signal(signal.SIGHUP)
        await sim.line("err", "sim: reloaded")
        assert await pod_names(sock) == ["web-v2", "new"]

        # A broken directory is refused; the previous state is still served.
        (fixture / "list.json").write_text("{not json")
        sim.proc.send_signal(signal.SIGHUP)
        line = await sim.line("err", "reload failed")
        assert "still serving the previous state" in line and "invalid JSON" in line
        assert await pod_names(sock) == ["web-v2", "new"]

        sim.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(sim.proc.wait(), 20) == 0
    assert not Path(sock).exists()


@pytest.mark.timeout(120)
async def test_sim_command_serves_https_with_token(short_tmp: Path) -> None:
    sock = str(short_tmp / "kubelet.sock")
    async with sim_process("--from", str(DB), "--socket", sock, "--http-listen",
                           "127.0.0.1:0", "--token", "tok") as sim:
        await sim.line("out", "sim: PodResources on")
        line = await sim.line("out", "kubelet HTTPS on https://127.0.0.1:")
        url = line.split(" on ", 1)[1].split()[0]
        ca = line.split("CA file ", 1)[1].rstrip(")\n")
        token = short_tmp / "token"
        token.write_text("tok")
        client = KubeletClient(url, ca_file=ca, token_file=str(token))
        try:
            pods = json.loads(await client.fetch("/pods"))
        finally:
            await client.close()
        assert [p["metadata"]["name"] for p in pods["items"]] == [
            p["metadata"]["name"] for p in json.loads((DB / "pods.json").read_text())["items"]]


async def test_get_answers_not_found_for_unknown_pods(start_sim: Any) -> None:
    sim = await start_sim(DB)
    client = PodResourcesClient(sim.socket_path)
    try:
        first = sim.state.list_response.pod_resources[0]
        got = await client.get(first.namespace, first.name)
        assert got == first
        assert await client.get(first.namespace, "no-such-pod") is None
        assert await client.get("", "") is None
    finally:
        await client.close()


async def test_set_state_changes_answers(start_sim: Any) -> None:
    sim = await start_sim(DB)
    sim.set_state(load_fixture_dir(SCENARIOS / "sidecar-hybrid").kubelet)
    assert await pod_names(sim.socket_path) == ["web"]


async def test_bearer_token_required(start_sim: Any, short_tmp: Path) -> None:
    sim = await start_sim(DB, http=True, token="s3cret")
    anonymous = KubeletClient(sim.http_url, ca_file=str(sim.cert_path), token_file=None)
    wrong = short_tmp / "wrong"
    wrong.write_text("nope")
    bad = KubeletClient(sim.http_url, ca_file=str(sim.cert_path), token_file=str(wrong))
    good_file = short_tmp / "token"
    good_file.write_text("s3cret\n")
    good = KubeletClient(sim.http_url, ca_file=str(sim.cert_path), token_file=str(good_file))
    try:
        for client in (anonymous, bad):
            with pytest.raises(SourceError) as info:
                await client.fetch("/pods")
            assert "HTTP 401" in str(info.value)
            assert "grant get on nodes/pods" in str(info.value)
        assert json.loads(await good.fetch("/configz"))["kubeletconfig"]
    finally:
        for client in (anonymous, bad, good):
            await client.close()


async def test_forbidden_path(start_sim: Any) -> None:
    sim = await start_sim(DB, http=True, misbehaviour=Misbehaviour(forbidden_paths={"/pods"}))
    client = KubeletClient(sim.http_url, ca_file=str(sim.cert_path), token_file=None)
    try:
        with pytest.raises(SourceError, match="HTTP 403"):
            await client.fetch("/pods")
        assert await client.fetch("/configz")
    finally:
        await client.close()


async def test_https_delay_past_timeout(start_sim: Any) -> None:
    sim = await start_sim(DB, http=True, misbehaviour=Misbehaviour(delay=30))
    client = KubeletClient(sim.http_url, ca_file=str(sim.cert_path), token_file=None,
                           timeout=0.3)
    try:
        with pytest.raises(SourceError, match="no answer"):
            await asyncio.wait_for(client.fetch("/pods"), 15)
    finally:
        await client.close()


@pytest.mark.parametrize("tls_buffer", [None, TLS_READ_BUFFER], ids=["asyncio", "serve"])
async def test_large_pods_body_is_read_whole(start_sim: Any, tls_buffer: int | None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the body of a busy node's /pods arrives in many chunks; also through
    the smaller TLS read buffer ``serve`` sets, its size checked on the live connection."""
    if tls_buffer is not None:
        monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "max_size",
                            asyncio.sslproto.SSLProtocol.max_size)  # restored afterwards
        shrink_tls_read_buffer()
    base = load_fixture_dir(DB).kubelet
    items = [{"metadata": {"name": f"pod-{i}", "namespace": "ns", "uid": f"u{i}"},
              "spec": {"containers": [{"name": "c" * 200}]}} for i in range(5000)]
    body = {"kind": "PodList", "items": items}
    sim = await start_sim(KubeletState(base.list_response, base.allocatable, body,
                                       base.configz), http=True)
    client = KubeletClient(sim.http_url, ca_file=str(sim.cert_path), token_file=None)
    try:
        raw = await client.fetch("/pods")
        if tls_buffer is not None:
            buffers = [len(o._ssl_buffer) for o in gc.get_objects()
                       if isinstance(o, asyncio.sslproto.SSLProtocol)
                       and o._app_protocol is not None]
            assert buffers and max(buffers) <= tls_buffer, buffers
    finally:
        await client.close()
    assert len(raw) > 1 << 20
    assert json.loads(raw) == body


async def test_metrics_carry_feature_gates(start_sim: Any) -> None:
    sim = await start_sim(DB, http=True)
    client = KubeletClient(sim.http_url, ca_file=str(sim.cert_path), token_file=None)
    try:
        text = (await client.fetch("/metrics")).decode()
    finally:
        await client.close()
    assert parse_feature_metrics(text)["PodLevelResourceManagers"] is True


def test_parse_feature_metrics() -> None:
    text = ('kubernetes_feature_enabled{name="A",stage="BETA"} 1\n'
            'kubernetes_feature_enabled{stage="ALPHA",name="B"} 0\n'
            'other_metric{name="C"} 1\n'
            'kubernetes_feature_enabled{stage=""} 1\n')
    assert parse_feature_metrics(text) == {"A": True, "B": False}


@pytest.mark.parametrize(("args", "needle"), [
    ([], "--from DIR"),
    (["--from", "/nonexistent/fixture"], "not a fixture directory"),
    (["--from", str(DB), "--unimplemented", "List,Bogus"], "unknown RPC Bogus"),
    (["--from", str(DB), "--delay", "soon"], "invalid duration"),
])
def test_sim_command_errors(args: list[str], needle: str) -> None:
    run = run_cli("sim", "--socket", "/tmp/podres-unused.sock", *args)
    assert run.code == 2
    assert_one_clear_line(run, needle)
