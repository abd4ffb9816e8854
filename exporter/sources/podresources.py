"""PodResources v1 client over the kubelet's unix socket (``grpc.aio``).

Responses are fetched as raw bytes (no deserializer on the call) so that the caller can
recognise an unchanged node by content before paying for decoding; ``decode_*`` turn the
bytes into messages. Every call carries a deadline. An RPC the kubelet answers with
``UNIMPLEMENTED`` is not asked again for a while (``reprobe_interval``), nor until the
kubelet restarts: a kubelet upgrade may start serving it.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import time
from collections.abc import Callable
from typing import Final

import grpc
import grpc.aio

from exporter.errors import SourceError
from exporter.pb import api_pb2
from exporter.sources.convert import allocatable_from_proto, pods_from_wire
from reconciler.snapshot import Allocatable, PodAlloc

DEFAULT_SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_TIMEOUT: Final = 5.0
DEFAULT_MAX_RECV: Final = 16 << 20
DEFAULT_REPROBE: Final = 300.0
SOURCE: Final = "podresources"
OPERATIONS: Final = {SOURCE: ("List", "GetAllocatableResources")}  # a poll's RPCs

_SERVICE = "/v1.PodResourcesLister/"


class Unimplemented(Exception):
    """The kubelet does not offer this RPC (older kubelet, or the endpoint disabled)."""


def _diagnose(path: str) -> str | None:
    """Why a unix socket cannot be reached, in operator terms; None when it can."""
    if not os.path.exists(path):
        parent = os.path.dirname(path) or "."
        where = "" if os.path.isdir(parent) else f" (directory {parent} does not exist either)"
        return (f"socket {path} does not exist{where}: is the kubelet running, and is its "
                "pod-resources directory mounted?")
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            # connect() on a regular file is "refused" on Linux: say what it is instead.
            return f"{path} is not a socket"
    except OSError:
        pass
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except PermissionError:
        return (f"permission denied on {path}: the socket is root-only, run the exporter "
                "as uid 0")
    except ConnectionRefusedError:
        return f"connection refused on {path}: nothing is listening (kubelet restarting?)"
    except OSError as exc:
        if exc.errno == errno.ENOTSOCK:
            return f"{path} is not a socket"
        return f"cannot connect to {path}: {exc.strerror or exc}"
    finally:
        probe.close()
    return None


class PodResourcesClient:
    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout: float = DEFAULT_TIMEOUT,
                 max_receive_bytes: int = DEFAULT_MAX_RECV,
                 reprobe_interval: float = DEFAULT_REPROBE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.max_receive_bytes = max_receive_bytes
        self.reprobe_interval = reprobe_interval
        self._clock = clock
        self._unimplemented: dict[str, float] = {}  # RPC → when it was answered so
        self._channel: grpc.aio.Channel | None = None
        self._socket_id: tuple[int, int, int] | None = None

    @property
    def unimplemented(self) -> set[str]:
        """The RPCs this kubelet answered UNIMPLEMENTED (until asked again)."""
        return set(self._unimplemented)

    def _get_channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[
                    ("grpc.max_receive_message_length", self.max_receive_bytes),
                    ("grpc.max_send_message_length", 4 << 20),
                    # A restarted kubelet is a new socket inode: reconnect promptly.
                    ("grpc.initial_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 2000),
                    ("grpc.enable_retries", 0),
                ],
            )
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def reset(self) -> None:
        """Drop the channel so the next call dials the socket afresh, and ask every RPC
        again: the kubelet behind the socket may be a different one."""
        await self.close()
        self._unimplemented.clear()

    async def follow_restart(self) -> None:
        """``reset`` when the socket is a new file since the last look (a restarted
        kubelet), even if the channel reconnected by itself in between."""
        try:
            st = os.stat(self.socket_path)
        except OSError:
            return  # the call itself will say why
        # The inode number alone is not enough: a file created right after another was
        # removed often gets the freed number back. Its change time tells them apart.
        current = (st.st_dev, st.st_ino, st.st_ctime_ns)
        if self._socket_id is not None and current != self._socket_id:
            await self.reset()
        self._socket_id = current

    async def _call(self, rpc: str, request: bytes) -> bytes:
        since = self._unimplemented.get(rpc)
        if since is not None and self._clock() - since < self.reprobe_interval:
            raise Unimplemented(rpc)
        method = self._get_channel().unary_unary(_SERVICE + rpc)
        try:
            response: bytes = await method(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                self._unimplemented[rpc] = self._clock()
                raise Unimplemented(rpc) from None
            raise self._error(rpc, exc) from None
        self._unimplemented.pop(rpc, None)
        return response

    def _error(self, rpc: str, exc: grpc.aio.AioRpcError) -> SourceError:
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return SourceError(SOURCE, rpc, f"no answer from {self.socket_path} within "
                               f"{self.timeout:g}s (deadline exceeded)")
        if code == grpc.StatusCode.UNAVAILABLE:
            reason = _diagnose(self.socket_path)
            return SourceError(SOURCE, rpc, reason or f"unavailable: {exc.details()}")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return SourceError(SOURCE, rpc, f"response larger than the receive limit of "
                               f"{self.max_receive_bytes} bytes (raise "
                               "--podresources.max-receive-bytes): " + str(exc.details()))
        return SourceError(SOURCE, rpc, f"{code.name}: {exc.details()}")

    async def list_raw(self) -> bytes:
        """Raises ``SourceError`` (never ``Unimplemented``): without ``List`` there is nothing
        to reconcile, and a kubelet that lacks it is asked again next time."""
        try:
            return await self._call("List", b"")
        except Unimplemented:
            self._unimplemented.pop("List", None)
            raise SourceError(SOURCE, "List", f"{self.socket_path} answers UNIMPLEMENTED: "
                              "this kubelet does not serve the PodResources List RPC "
                              "(is the KubeletPodResources API disabled?)") from None

    async def allocatable_raw(self) -> bytes | None:
        """``None`` when the kubelet lacks ``GetAllocatableResources``."""
        try:
            return await self._call("GetAllocatableResources", b"")
        except Unimplemented:
            return None

    async def list(self) -> api_pb2.ListPodResourcesResponse:
        return decode_list(await self.list_raw())

    async def allocatable(self) -> api_pb2.AllocatableResourcesResponse | None:
        raw = await self.allocatable_raw()
        return None if raw is None else decode_allocatable_message(raw)

    async def get(self, namespace: str, name: str) -> api_pb2.PodResources | None:
        """One pod; ``None`` when unknown to the kubelet. Raises ``Unimplemented`` when the
        kubelet has no ``Get``."""
        request = api_pb2.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        try:
            raw = await self._call("Get", request.SerializeToString())
        except SourceError as exc:
            if "NOT_FOUND" in str(exc):
                return None
            raise
        response = api_pb2.GetPodResourcesResponse.FromString(raw)
        return response.pod_resources


def decode_list(raw: bytes) -> api_pb2.ListPodResourcesResponse:
    try:
        return api_pb2.ListPodResourcesResponse.FromString(raw)
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise SourceError(SOURCE, "List", f"undecodable response: {exc}") from None


def decode_pods(raw: bytes) -> tuple[PodAlloc, ...]:
    """The pods of a ``List`` response, read from the wire (``pods_from_wire``): what
    ``decode_list`` would give, or its error, without building the message first."""
    try:
        return pods_from_wire(raw)
    except Exception as exc:  # as in decode_list: the wire reader refuses what it refuses
        raise SourceError(SOURCE, "List", f"undecodable response: {exc}") from None


def decode_allocatable_message(raw: bytes) -> api_pb2.AllocatableResourcesResponse:
    try:
        return api_pb2.AllocatableResourcesResponse.FromString(raw)
    except Exception as exc:
        raise SourceError(SOURCE, "GetAllocatableResources",
                          f"undecodable response: {exc}") from None


def decode_allocatable(raw: bytes) -> Allocatable:
    """What a ``GetAllocatableResources`` answer lets the kubelet hand out, or its
    ``SourceError``."""
    return allocatable_from_proto(decode_allocatable_message(raw))
