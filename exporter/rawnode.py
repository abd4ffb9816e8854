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

import json
from dataclasses import dataclass
from typing import Any

from exporter.pb import api_pb2
from reconciler.snapshot import Topology

CHECKPOINT_FILES = ("cpu_manager_state", "memory_manager_state")


@dataclass(frozen=True, slots=True)
class RawNode:
    """``list_response`` is ``None`` when List could not be read (``doctor`` needs no pods);
    ``unimplemented`` names the RPCs the kubelet answered UNIMPLEMENTED."""

    list_response: bytes | None
    allocatable: bytes | None = None
    pods: bytes | None = None
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
        return KubeletState(
            listing, allocatable,
            json.loads(self.pods) if self.pods is not None else None,
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
