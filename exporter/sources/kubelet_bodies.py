"""The kubelet's HTTPS bodies decoded, each in one place (docs/design.md#data-path): ``/pods``
into pod specs, ``/configz`` into the kubelet's configuration, ``/metrics`` into its feature
gates. The client that fetches them is ``exporter.sources.kubelet``; what a body malformed
in any way raises is one of ``MALFORMED``, and ``reason`` says it in one line."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from exporter.sources.kubelet import parse_feature_metrics
from exporter.sources.pod_list import each_pod_item
from reconciler.cpuset import MAX_CPU_ID
from reconciler.kube import (
    KubeletConfig,
    PodSpec,
    SpecError,
    kubelet_config_from_json,
    pod_list_from_json,
    pod_specs_from_items,
)

# What malformed input raises on its way through a parser: json's errors (numbers past
# int's digit limit included), deep nesting, and values of the wrong type in an otherwise
# valid document. Caught only around optional parts.
MALFORMED = (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)

GATE = "PodLevelResourceManagers"


def reason(exc: BaseException) -> str:
    """Why a body did not decode, in one line."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return f"invalid JSON: {exc}"
    if isinstance(exc, ValueError):  # SpecError, numbers past int's digit limit
        return str(exc)[:300]
    # A value of the wrong type where the document's schema wants another.
    return f"malformed document: {type(exc).__name__}: {str(exc)[:300]}"


def parse_json_object(body: bytes) -> dict[str, Any]:
    obj = json.loads(body)
    if not isinstance(obj, dict):
        raise SpecError("expected a JSON object")
    return obj


def pod_specs_from_body(body: bytes) -> tuple[PodSpec, ...]:
    """The pod specs of a ``/pods`` body (reduced or whole)."""
    items = each_pod_item(body)
    if items is not None:
        # Pod by pod (see each_pod_item); on any error the whole body is parsed again, so
        # that what is reported is exactly what the parse of the whole says.
        with contextlib.suppress(*MALFORMED):
            return pod_specs_from_items(items)
    return pod_list_from_json(parse_json_object(body))


def config_from_body(body: bytes, max_cpu: int = MAX_CPU_ID) -> KubeletConfig:
    """The kubelet's configuration from a ``/configz`` body; CPU ids past ``max_cpu`` are
    refused (docs/design.md#cpu-lists)."""
    return kubelet_config_from_json(parse_json_object(body), max_cpu=max_cpu)


def feature_gates(body: bytes) -> dict[str, bool]:
    """Every feature gate a ``/metrics`` body states (``kubernetes_feature_enabled``)."""
    return parse_feature_metrics(body.decode("utf-8", "replace"))


def pod_list_from_object(obj: dict[str, Any] | None) -> tuple[PodSpec, ...] | None:
    """The pod specs of an already-parsed ``/pods`` document (fixtures, the model)."""
    return None if obj is None else pod_list_from_json(obj)


def config_from_object(obj: dict[str, Any] | None) -> KubeletConfig | None:
    """The configuration of an already-parsed ``/configz`` document."""
    return None if obj is None else kubelet_config_from_json(obj)
