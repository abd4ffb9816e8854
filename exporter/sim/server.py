"""The simulated kubelet's servers.

``SimKubelet`` serves a node (a ``RawNode``, or a typed ``KubeletState``) over the real
PodResources gRPC service on a unix socket and over HTTPS (``/pods``, ``/configz``,
``/metrics``). It serves the raw bytes as they are, malformed ones included, and
serialises a typed state once per change, so the simulator is never the bottleneck of a
benchmark. Tests can
make it misbehave: answer ``UNIMPLEMENTED`` for chosen RPCs, delay (or hang) answers,
refuse chosen HTTPS paths, or restart with a new socket inode.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from aiohttp import web
from google.protobuf.message import DecodeError

from exporter.errors import UserError
from exporter.pb import api_pb2
from exporter.rawnode import KubeletState, RawNode, body_bytes
from exporter.tlsutil import write_self_signed

log = logging.getLogger("podres.sim")

RPCS = ("List", "GetAllocatableResources", "Get")


@dataclass
class Misbehaviour:
    """Knobs for tests; changed at run time on a live simulator."""

    unimplemented: set[str] = field(default_factory=set)  # RPC names
    delay: float = 0.0  # seconds before every gRPC answer
    forbidden_paths: set[str] = field(default_factory=set)  # HTTPS paths answering 403


class SimKubelet:
    def __init__(self, state: KubeletState | RawNode, *, socket_path: str,
                 http_listen: str | None = None, token: str | None = None,
                 misbehaviour: Misbehaviour | None = None) -> None:
        self.socket_path = socket_path
        self.http_listen = http_listen
        self.token = token
        self.misbehaviour = misbehaviour or Misbehaviour()
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._tls_dir: tempfile.TemporaryDirectory[str] | None = None
        self.cert_path: Path | None = None
        self.http_port: int | None = None
        # The most HTTPS requests ever in progress at once (tests check that a client
        # asks its questions concurrently).
        self.http_peak = 0
        self._http_in_flight = 0
        # Requests answered, by path (tests check what a client asks for, and when).
        self.http_requests: Counter[str] = Counter()
        self.set_state(state)

    # -- state --------------------------------------------------------------------------

    def set_state(self, state: KubeletState | RawNode) -> None:
        raw = state.raw() if isinstance(state, KubeletState) else state
        self.raw = raw
        self._list = raw.list_response or b""
        self._allocatable = raw.allocatable
        # List is served as it is, malformed bytes included (that is what a lying kubelet
        # does); only Get needs it decoded, and finds nothing in bytes that do not decode.
        try:
            listing = api_pb2.ListPodResourcesResponse.FromString(self._list)
        except DecodeError:
            listing = api_pb2.ListPodResourcesResponse()
        self._pods = {(p.namespace, p.name): p for p in listing.pod_resources}
        self._pods_body = body_bytes(raw.pods)
        self._configz_body = raw.configz
        self._metrics_body = raw.metrics if raw.metrics is not None \
            else _feature_metrics(raw.configz)

    @property
    def state(self) -> KubeletState:
        """What is served, as typed values (to derive a changed state from)."""
        return self.raw.kubelet

    # -- gRPC ---------------------------------------------------------------------------

    async def _answer(self, rpc: str, context: grpc.aio.ServicerContext) -> None:
        if rpc in self.misbehaviour.unimplemented:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{rpc} is not implemented")
        if self.misbehaviour.delay:
            await asyncio.sleep(self.misbehaviour.delay)

    def _handler(self) -> grpc.GenericRpcHandler:
        async def list_(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await self._answer("List", context)
            return self._list

        async def allocatable(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await self._answer("GetAllocatableResources", context)
            if self._allocatable is None:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                                    "GetAllocatableResources is not implemented")
            return self._allocatable or b""

        async def get(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await self._answer("Get", context)
            req = api_pb2.GetPodResourcesRequest.FromString(request)
            pod = self._pods.get((req.pod_namespace, req.pod_name))
            if pod is None:
                await context.abort(grpc.StatusCode.NOT_FOUND,
                                    f"pod {req.pod_namespace}/{req.pod_name} not found")
            return api_pb2.GetPodResourcesResponse(pod_resources=pod).SerializeToString()

        def unary(fn: Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]],
                  ) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(fn)

        return grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": unary(list_),
            "GetAllocatableResources": unary(allocatable),
            "Get": unary(get),
        })

    async def start_grpc(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        Path(self.socket_path).parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server(options=[("grpc.max_send_message_length", 64 << 20)])
        server.add_generic_rpc_handlers((self._handler(),))
        server.add_insecure_port(f"unix://{os.path.abspath(self.socket_path)}")
        await server.start()
        os.chmod(self.socket_path, 0o600)  # as the kubelet's: root only
        self._grpc = server

    async def stop_grpc(self) -> None:
        if self._grpc is not None:
            await self._grpc.stop(grace=0.2)
            self._grpc = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def restart_grpc(self) -> None:
        """What a kubelet restart looks like to a client: the socket goes away and a new
        one (new inode) appears at the same path."""
        await self.stop_grpc()
        await self.start_grpc()

    # -- HTTPS --------------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        return request.headers.get("Authorization", "") == f"Bearer {self.token}"

    async def _http_get(self, request: web.Request) -> web.Response:
        self._http_in_flight += 1
        self.http_requests[request.path] += 1
        self.http_peak = max(self.http_peak, self._http_in_flight)
        try:
            return await self._http_answer(request)
        finally:
            self._http_in_flight -= 1

    async def _http_answer(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return web.Response(status=401, text="Unauthorized")
        if request.path in self.misbehaviour.forbidden_paths:
            return web.Response(status=403, text="Forbidden (user=system:serviceaccount, "
                                "verb=get, resource=nodes, subresource=pods)")
        if self.misbehaviour.delay:
            await asyncio.sleep(self.misbehaviour.delay)
        body: bytes | None
        content_type = "application/json"
        if request.path == "/pods":
            body = self._pods_body
        elif request.path == "/configz":
            body = self._configz_body
        else:
            body = self._metrics_body
            content_type = "text/plain"
        if body is None:
            return web.Response(status=404, text="404 page not found")
        return web.Response(body=body, content_type=content_type)

    async def start_http(self) -> None:
        if self.http_listen is None:
            return
        host, _, port = self.http_listen.rpartition(":")
        self._tls_dir = tempfile.TemporaryDirectory(prefix="podres-sim-tls-")
        cert, key = write_self_signed(self._tls_dir.name)
        self.cert_path = cert
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        app = web.Application()
        for path in ("/pods", "/configz", "/metrics"):
            app.router.add_get(path, self._http_get)
        # A plain aiohttp site, not the exporter's own (exporter.web): a test tool stands
        # below what it tests (docs/design.md#structure). A delayed (misbehaving) answer
        # must not hold up stop() for a minute.
        runner = web.AppRunner(app, access_log=None, handle_signals=False,
                               shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port),
                           ssl_context=context)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise UserError(f"cannot listen on {self.http_listen}: {exc.strerror or exc}"
                            ) from None
        self._http = runner
        self.http_port = int(runner.addresses[0][1])

    @property
    def http_url(self) -> str | None:
        if self.http_port is None:
            return None
        return f"https://127.0.0.1:{self.http_port}"

    async def start(self) -> None:
        await self.start_grpc()
        await self.start_http()

    async def stop(self) -> None:
        await self.stop_grpc()
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
        if self._tls_dir is not None:
            self._tls_dir.cleanup()
            self._tls_dir = None


def _feature_metrics(configz: bytes | None) -> bytes | None:
    """``kubernetes_feature_enabled`` lines for the gates the config lists, as a kubelet's
    /metrics would carry them."""
    try:
        obj = json.loads(configz) if configz is not None else None
    except (ValueError, RecursionError):
        return None  # a malformed /configz is served as it is; no gates to derive
    config = obj.get("kubeletconfig") if isinstance(obj, dict) else None
    gates = config.get("featureGates") if isinstance(config, dict) else None
    if not isinstance(gates, dict):
        return None
    lines = ["# HELP kubernetes_feature_enabled This metric records the data about the stage "
             "and enablement of a k8s feature.",
             "# TYPE kubernetes_feature_enabled gauge"]
    for name, enabled in sorted(gates.items()):
        lines.append(f'kubernetes_feature_enabled{{name="{name}",stage="BETA"}} '
                     f"{1 if enabled else 0}")
    # A gate name a kubelet could not have (an unpaired surrogate) is escaped, not fatal.
    return ("\n".join(lines) + "\n").encode("utf-8", "backslashreplace")


def describe(sim: SimKubelet) -> dict[str, Any]:
    return {"socket": sim.socket_path, "https": sim.http_url,
            "ca_file": str(sim.cert_path) if sim.cert_path else None}
