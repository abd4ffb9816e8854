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


def reduce_pod_list(body: bytes) -> bytes:
    """``body`` with only the fields the exporter reads; ``body`` itself when it is not a
    ``PodList`` whose kept fields have the shapes above (the parsers then say what is
    wrong with it)."""
    try:
        return _ENCODER.encode(_DECODER.decode(body))
    except (msgspec.DecodeError, msgspec.EncodeError, RecursionError):
        return body
