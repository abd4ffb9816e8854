"""The PodResources client against the simulated kubelet on a real unix socket: every RPC,
and every failure mode (missing socket, not a socket, refused, permission denied, deadline,
UNIMPLEMENTED, responses over 4 MiB)."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from exporter.errors import SourceError, UserError
from exporter.pb import api_pb2
from exporter.reader import NodeReader, SourceOptions
from exporter.sim.server import Misbehaviour
from exporter.sources.convert import pods_to_proto
from exporter.sources.fixture import KubeletState, load_fixture_dir
from exporter.sources.podresources import (
    DEFAULT_MAX_RECV,
    PodResourcesClient,
    Unimplemented,
    decode_allocatable_message,
    decode_list,
)
from foundation.helpers import SCENARIOS, arun_cli, assert_one_clear_line
from reconciler.snapshot import ContainerAlloc, PodAlloc

HYBRID = SCENARIOS / "sidecar-hybrid"


def state(name: str = "sidecar-hybrid") -> KubeletState:
    return load_fixture_dir(SCENARIOS / name).kubelet


@pytest.fixture
async def client_for(short_tmp: Path) -> Any:
    clients: list[PodResourcesClient] = []

    def make(path: str | Path, **kw: Any) -> PodResourcesClient:
        c = PodResourcesClient(str(path), **kw)
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.close()


async def test_list_allocatable_and_get(start_sim: Any, client_for: Any) -> None:
    sim = await start_sim(HYBRID)
    client = client_for(sim.socket_path)
    listing = await client.list()
    assert listing == sim.state.list_response
    assert decode_list(await client.list_raw()) == listing
    alloc = await client.allocatable()
    assert alloc is not None and list(alloc.cpu_ids) == list(range(1, 8))
    raw = await client.allocatable_raw()
    assert raw is not None and decode_allocatable_message(raw) == alloc
    pod = await client.get("shop", "web")
    assert pod is not None and pod.name == "web" and list(pod.cpu_ids) == [2, 3, 4]
    assert client.unimplemented == set()


async def test_get_unknown_pod_is_not_found(start_sim: Any, client_for: Any) -> None:
    sim = await start_sim(HYBRID)
    client = client_for(sim.socket_path)
    assert await client.get("shop", "nope") is None
    assert await client.get("other", "web") is None
    # The raw status is NOT_FOUND.
    import grpc.aio

    async with grpc.aio.insecure_channel(f"unix://{sim.socket_path}") as channel:
        get = channel.unary_unary("/v1.PodResourcesLister/Get")
        req = api_pb2.GetPodResourcesRequest(pod_name="nope", pod_namespace="shop")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await get(req.SerializeToString(), timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_missing_socket(client_for: Any, short_tmp: Path) -> None:
    client = client_for(short_tmp / "kubelet.sock")
    with pytest.raises(SourceError) as info:
        await client.list_raw()
    message = str(info.value)
    assert "does not exist" in message and str(short_tmp / "kubelet.sock") in message
    assert "\n" not in message
    assert isinstance(info.value, UserError)


async def test_missing_socket_directory(client_for: Any, short_tmp: Path) -> None:
    client = client_for(short_tmp / "nodir" / "kubelet.sock")
    with pytest.raises(SourceError, match=r"directory .* does not exist either"):
        await client.list_raw()


async def test_not_a_socket(client_for: Any, short_tmp: Path) -> None:
    path = short_tmp / "kubelet.sock"
    path.write_text("I am a file")
    with pytest.raises(SourceError, match="not a socket"):
        await client_for(path).list_raw()


async def test_nothing_listening(client_for: Any, short_tmp: Path) -> None:
    path = short_tmp / "kubelet.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))  # bound but never listening: connect() is refused
    try:
        with pytest.raises(SourceError, match="connection refused"):
            await client_for(path).list_raw()
    finally:
        sock.close()


@pytest.mark.timeout(60)
async def test_hang_past_the_deadline(start_sim: Any, client_for: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(delay=30.0))
    client = client_for(sim.socket_path, timeout=0.3)
    # The call must fail (not hang): a generous bound, far below the server's delay.
    with pytest.raises(SourceError) as info:
        await asyncio.wait_for(client.list_raw(), 15)
    assert "deadline" in str(info.value) and "0.3s" in str(info.value)
    assert info.value.operation == "List"


async def test_unimplemented_allocatable_is_remembered_and_not_fatal(
        start_sim: Any, client_for: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(
        unimplemented={"GetAllocatableResources"}))
    client = client_for(sim.socket_path)
    assert await client.allocatable_raw() is None
    assert client.unimplemented == {"GetAllocatableResources"}
    # Remembered: not asked again even once the kubelet would answer.
    sim.misbehaviour.unimplemented.clear()
    assert await client.allocatable() is None
    assert (await client.list()).pod_resources


async def test_unimplemented_is_asked_again_periodically(start_sim: Any,
                                                        client_for: Any) -> None:
    now = [1000.0]
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(
        unimplemented={"GetAllocatableResources"}))
    client = client_for(sim.socket_path, reprobe_interval=60.0, clock=lambda: now[0])
    assert await client.allocatable_raw() is None
    sim.misbehaviour.unimplemented.clear()  # the kubelet now serves it
    now[0] += 59.0
    assert await client.allocatable_raw() is None  # not asked yet
    now[0] += 1.0
    assert await client.allocatable_raw() is not None
    assert client.unimplemented == set()


async def test_reset_forgets_unimplemented(start_sim: Any, client_for: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(
        unimplemented={"GetAllocatableResources"}))
    client = client_for(sim.socket_path)
    assert await client.allocatable_raw() is None
    sim.misbehaviour.unimplemented.clear()
    await client.reset()
    assert await client.allocatable_raw() is not None


async def test_kubelet_without_allocatable_rpc(start_sim: Any, client_for: Any) -> None:
    # A fixture without allocatable.json: the simulator answers UNIMPLEMENTED by itself.
    s = state()
    sim = await start_sim(KubeletState(s.list_response))
    client = client_for(sim.socket_path)
    assert await client.allocatable_raw() is None
    assert "GetAllocatableResources" in client.unimplemented


async def test_unimplemented_get(start_sim: Any, client_for: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(unimplemented={"Get"}))
    client = client_for(sim.socket_path)
    with pytest.raises(Unimplemented):
        await client.get("shop", "web")
    assert client.unimplemented == {"Get"}
    with pytest.raises(Unimplemented):
        await client.get("shop", "web")


async def test_unimplemented_list_is_a_clear_source_error(start_sim: Any,
                                                          client_for: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(unimplemented={"List"}))
    client = client_for(sim.socket_path)
    with pytest.raises(SourceError, match="UNIMPLEMENTED"):
        await client.list_raw()
    # List is required: asked again next time, and works once the kubelet answers.
    sim.misbehaviour.unimplemented.clear()
    assert (await client.list()).pod_resources


async def test_reader_builds_ledger_without_allocatable(start_sim: Any, short_tmp: Path
                                                        ) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(
        unimplemented={"GetAllocatableResources"}))
    reader = NodeReader(SourceOptions(socket=sim.socket_path, sysfs=None,
                                      topology_file=str(HYBRID / "topology.json")))
    try:
        reading = await reader.read()
    finally:
        await reader.close()
    assert reading.errors == {}
    ledger = reading.ledger
    assert dict(ledger.kubelet)["rpcs_unimplemented"] == "GetAllocatableResources"
    assert ledger.cpu_pools.pod_exclusive == 2 and ledger.cpu_pools.pod_shared == 1
    assert ledger.cpu_pools.reserved == 0  # unknown without allocatable or config


def big_state(min_bytes: int = 5 << 20) -> KubeletState:
    pods = []
    size = 0
    i = 0
    while size < min_bytes:
        containers = tuple(ContainerAlloc(f"container-{j}-" + "x" * 100, (i % 64,))
                           for j in range(4))
        pods.append(PodAlloc("namespace-" + "n" * 50, f"pod-{i:06d}-" + "p" * 100,
                             containers))
        size += 4 * 120 + 200
        i += 1
    listing = pods_to_proto(pods)
    assert listing.ByteSize() > 4 << 20
    return KubeletState(listing)


async def test_response_over_4_mib_with_default_limit(start_sim: Any, client_for: Any
                                                      ) -> None:
    big = big_state()
    sim = await start_sim(big)
    client = client_for(sim.socket_path)
    assert client.max_receive_bytes == DEFAULT_MAX_RECV == 16 << 20
    raw = await client.list_raw()
    assert len(raw) > 4 << 20
    assert decode_list(raw) == big.list_response


async def test_response_over_a_small_limit_is_a_clear_error(start_sim: Any,
                                                            client_for: Any) -> None:
    sim = await start_sim(big_state())
    client = client_for(sim.socket_path, max_receive_bytes=1 << 20)
    with pytest.raises(SourceError) as info:
        await client.list_raw()
    message = str(info.value)
    assert "receive limit" in message and "--podresources.max-receive-bytes" in message


async def test_client_survives_a_kubelet_restart(start_sim: Any, client_for: Any) -> None:
    sim = await start_sim(HYBRID)
    client = client_for(sim.socket_path)
    await client.list_raw()
    await sim.restart_grpc()  # the socket file is removed and created again
    last: Exception | None = None
    for _ in range(50):  # bounded retries, as the poll loop would do
        try:
            await client.list_raw()
            break
        except SourceError as exc:
            last = exc
            await client.reset()
            await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"never reconnected: {last}")


async def test_undecodable_response_is_a_source_error() -> None:
    with pytest.raises(SourceError, match="undecodable"):
        decode_list(b"\xff\xff\xff")
    with pytest.raises(SourceError, match="undecodable"):
        decode_allocatable_message(b"\x0a\xff")


# -- through the CLI ----------------------------------------------------------------------

async def test_cli_missing_socket(short_tmp: Path) -> None:
    run = await arun_cli("snapshot", "--podresources.socket", str(short_tmp / "k.sock"),
                         "--topology", str(HYBRID / "topology.json"))
    assert run.code == 2
    assert_one_clear_line(run, "does not exist", "podres-exporter snapshot: error")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to nobody")
async def test_cli_permission_denied(start_sim: Any, short_tmp: Path) -> None:
    import shutil

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv not installed")
    sim = await start_sim(HYBRID)
    os.chmod(short_tmp, 0o755)  # nobody may look up the socket, not connect to it
    assert os.stat(sim.socket_path).st_mode & 0o777 == 0o600
    run = await arun_cli("snapshot", "--podresources.socket", sim.socket_path,
                         "--topology", str(HYBRID / "topology.json"),
                         prefix=[setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"])
    assert run.code == 2, run
    assert_one_clear_line(run, "permission denied", sim.socket_path)


@pytest.mark.timeout(60)
async def test_cli_deadline(start_sim: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(delay=30.0))
    run = await arun_cli("snapshot", "--podresources.socket", sim.socket_path,
                         "--podresources.timeout", "300ms",
                         "--topology", str(HYBRID / "topology.json"), timeout=20)
    assert run.code == 2
    assert_one_clear_line(run, "deadline")


async def test_cli_unimplemented_list(start_sim: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(unimplemented={"List"}))
    run = await arun_cli("snapshot", "--podresources.socket", sim.socket_path,
                         "--topology", str(HYBRID / "topology.json"))
    assert run.code == 2
    assert_one_clear_line(run, "List", "UNIMPLEMENTED")


async def test_cli_unimplemented_allocatable_still_prints_ledger(start_sim: Any) -> None:
    sim = await start_sim(HYBRID, misbehaviour=Misbehaviour(
        unimplemented={"GetAllocatableResources"}))
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--topology", str(HYBRID / "topology.json"))
    assert run.code == 0 and run.err == "", run.err
    assert '"rpcs_unimplemented": "GetAllocatableResources"' in run.out


async def test_cli_small_receive_limit(start_sim: Any) -> None:
    sim = await start_sim(big_state())
    run = await arun_cli("snapshot", "--podresources.socket", sim.socket_path,
                         "--podresources.max-receive-bytes", "1048576", "--sysfs", "/sys")
    assert run.code == 2
    assert_one_clear_line(run, "receive limit")
