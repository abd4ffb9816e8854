"""The kubelet's ``/pods`` reduced to what the exporter reads of it (docs/design.md#sources).

A kubelet's ``v1.PodList`` is some 10 KB a pod: labels, annotations, managed fields, env,
probes, volume mounts, conditions. The exporter reads a few fields of each pod: its name,
namespace and uid; each container's name, resources and restart policy; the pod-level
resources; the QoS class and phase; and each container status's name, state and
container id (to find its cgroup). Decoding the whole body into Python objects costs tens
of milliseconds and a peak of several times its size in memory on a 1000-pod node, and
that memory is not all handed back to the system afterwards.

``reduce_pod_list`` decodes only those fields (msgspec skips the rest without building
them) and encodes them again: the result is an ordinary ``/pods`` body, a few percent of
the original's size, that every reader of ``/pods`` (the pod-spec parser, the cgroup
match, ``record``) takes unchanged. It never decides what is valid: the values of the
fields kept are copied as they are, and a body it cannot reduce (not JSON, or a kept field
of an unexpected shape) is returned whole, so that the parsers report it exactly as they
would have.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec

_UNSET: Any = msgspec.UNSET


class _View(msgspec.Struct, omit_defaults=True):
    """Absent fields stay absent (``UNSET``), so the reduced body says what the original
    said about every field it keeps."""


class _Meta(_View):
    name: Any = _UNSET
    namespace: Any = _UNSET
    uid: Any = _UNSET


class _Container(_View, rename={"restart_policy": "restartPolicy"}):
    name: Any = _UNSET
    resources: Any = _UNSET
    restart_policy: Any = _UNSET


class _Spec(_View, rename={"init_containers": "initContainers"}):
    containers: list[_Container] | msgspec.UnsetType | None = _UNSET
    init_containers: list[_Container] | msgspec.UnsetType | None = _UNSET
    resources: Any = _UNSET


class _ContainerStatus(_View, rename={"container_id": "containerID"}):
    name: Any = _UNSET
    state: Any = _UNSET
    container_id: Any = _UNSET


class _Status(_View, rename={"qos_class": "qosClass",
                             "container_statuses": "containerStatuses",
                             "init_container_statuses": "initContainerStatuses"}):
    qos_class: Any = _UNSET
    phase: Any = _UNSET
    container_statuses: list[_ContainerStatus] | msgspec.UnsetType | None = _UNSET
    init_container_statuses: list[_ContainerStatus] | msgspec.UnsetType | None = _UNSET


class _Pod(_View):
    metadata: _Meta | msgspec.UnsetType | None = _UNSET
    spec: _Spec | msgspec.UnsetType | None = _UNSET
    status: _Status | msgspec.UnsetType | None = _UNSET


class _PodList(_View):
    items: list[_Pod] | msgspec.UnsetType | None = _UNSET


_DECODER = msgspec.json.Decoder(_PodList)
_ENCODER = msgspec.json.Encoder()


def reduce_pod_list(body: bytes | bytearray) -> bytes:
    """``body`` with only the fields the exporter reads; ``body`` itself (as bytes) when it
    is not a ``PodList`` whose kept fields have the shapes above (the parsers then say what
    is wrong with it). ``body`` may be the buffer it was read into (not copied first)."""
    if not body.isascii():
        try:
            body.decode("utf-8")  # msgspec does not check the bytes of what it skips
        except UnicodeDecodeError:
            return bytes(body)
    # Encoded into a buffer and copied out: ``encode`` returns its working buffer, which
    # holds some 30% more than the body (1.56 MB for 1.2 on a 1000-pod node), for as long
    # as the body is kept.
    buffer = bytearray()
    try:
        _ENCODER.encode_into(_DECODER.decode(body), buffer)
    except (msgspec.DecodeError, msgspec.EncodeError, RecursionError):
        return bytes(body)
    return bytes(buffer)


class _Items(msgspec.Struct, forbid_unknown_fields=True):
    """A reduced body's shape. Any other field sends the body to the whole decode: msgspec
    would skip it unchecked (a number past ``int``'s digit limit, say), where ``json``
    fails the body."""

    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


_ITEMS = msgspec.json.Decoder(_Items)


def each_pod_item(body: bytes) -> Iterator[Any] | None:
    """The items of a ``/pods`` body, each decoded by ``json.loads`` on its own as it is
    reached; ``None`` when the body is not an object whose ``items``, if present, is a list
    (a decode of the whole body then says what it is).

    Why not ``json.loads(body)``: the whole tree of a 1000-pod list is some 150,000 small
    objects, and what a parser keeps of it (a pod's names, a container's id) is allocated
    among them. Freed, the tree leaves the allocator's arenas pinned by those few survivors:
    7 MiB of a node agent's resident memory, for good (docs/performance.md#memory). One
    item at a time, the temporaries of each pod reuse the space the last one freed."""
    try:
        items = _ITEMS.decode(body).items
    except (msgspec.DecodeError, RecursionError):
        return None
    return (json.loads(bytes(item)) for item in items)
