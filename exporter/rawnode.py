"""A node's inputs exactly as its sources gave them.

``RawNode`` is what a live read, a fixture directory, ``record``, the simulated kubelet and
``doctor`` have in common: the PodResources responses in protobuf's wire format, the
kubelet's ``/pods``, ``/configz`` and ``/metrics`` bodies, the CPU topology and the
checkpoint files' bytes. Nothing in it has been interpreted yet, so a malformed part stays
what the source sent (for ``record`` and for the error that names it), and one function
(``exporter.assemble.snapshot_from_raw``) turns it into a snapshot. See
docs/design.md#data-path.

``KubeletState`` is the same kubelet answers as typed values (messages and JSON objects),
for building and altering a node in tests and in the model-driven simulator.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from exporter.pb import api_pb2
from reconciler.snapshot import Topology

CHECKPOINT_FILES = ("cpu_manager_state", "memory_manager_state")


def body_digest(data: bytes) -> bytes:
    """The digest a body is known by, held plain or deflated (the ledger cache's key)."""
    return hashlib.blake2b(data, digest_size=16).digest()


class PackedBody:
    """A kubelet body held deflated between polls (``serve`` keeps the reduced ``/pods``
    so: ~1.2 MB on a 1000-pod node, resident for as long as it is held, against ~0.2 MB
    deflated; docs/performance.md#memory). Read back whole only by what decodes it, on a
    recompute; compared, measured and hashed without that (its length and digest)."""

    __slots__ = ("digest", "packed", "size")

    def __init__(self, data: bytes) -> None:
        self.packed = zlib.compress(data, 1)
        self.size = len(data)
        self.digest = body_digest(data)

    def unpack(self) -> bytes:
        return zlib.decompress(self.packed)

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PackedBody) and self.size == other.size
                and self.digest == other.digest)

    def __hash__(self) -> int:
        return hash(self.digest)


Body = bytes | PackedBody


def unpacked(body: Body) -> bytes:
    """A body's bytes, read back if it is held deflated."""
    return body.unpack() if isinstance(body, PackedBody) else body


def body_bytes(body: Body | None) -> bytes | None:
    return None if body is None else unpacked(body)


@dataclass(frozen=True, slots=True)
class RawNode:
    """``list_response`` is ``None`` when List could not be read (``doctor`` needs no pods);
    ``unimplemented`` names the RPCs the kubelet answered UNIMPLEMENTED. ``pods`` is held
    deflated by a live read (``PackedBody``): ``body_bytes`` reads it back."""

    list_response: bytes | None
    allocatable: bytes | None = None
    pods: Body | None = None
    configz: bytes | None = None
    metrics: bytes | None = None
    topology: Topology | None = None
    checkpoints: tuple[tuple[str, bytes], ...] = ()
    unimplemented: frozenset[str] = frozenset()

    @property
    def kubelet(self) -> KubeletState:
        """The kubelet's answers decoded; raises on a part that is not well-formed (a raw
        node from a hostile source has no typed form)."""
        listing = api_pb2.ListPodResourcesResponse()
        if self.list_response is not None:
            listing = api_pb2.ListPodResourcesResponse.FromString(self.list_response)
        allocatable = None
        if self.allocatable is not None:
            allocatable = api_pb2.AllocatableResourcesResponse.FromString(self.allocatable)
        pods = body_bytes(self.pods)
        return KubeletState(
            listing, allocatable,
            json.loads(pods) if pods is not None else None,
            json.loads(self.configz) if self.configz is not None else None,
            self.metrics.decode("utf-8", "replace") if self.metrics is not None else None)


@dataclass(frozen=True)
class KubeletState:
    """What a kubelet answers: PodResources responses and its HTTPS endpoint's bodies."""

    list_response: api_pb2.ListPodResourcesResponse
    allocatable: api_pb2.AllocatableResourcesResponse | None = None
    pod_list: dict[str, Any] | None = None
    configz: dict[str, Any] | None = None
    metrics: str | None = None

    def raw(self, topology: Topology | None = None,
            checkpoints: tuple[tuple[str, bytes], ...] = ()) -> RawNode:
        return RawNode(
            self.list_response.SerializeToString(),
            self.allocatable.SerializeToString() if self.allocatable is not None else None,
            _json_bytes(self.pod_list), _json_bytes(self.configz),
            self.metrics.encode("utf-8") if self.metrics is not None else None,
            topology, checkpoints)


def _json_bytes(obj: dict[str, Any] | None) -> bytes | None:
    return None if obj is None else json.dumps(obj, ensure_ascii=False).encode("utf-8")
