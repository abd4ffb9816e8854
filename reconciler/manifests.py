"""Kubernetes workload manifests (already-decoded YAML/JSON) → pod templates.

Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job and CronJob, plus ``List`` wrappers.
Pure: reading files belongs to ``exporter``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.kube import PodSpec, SpecError, pod_spec_from_json

KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")
# Kinds that often sit beside workloads in one manifest and hold no pod template: skipped.
# Anything else (a typo such as "Deploymnet", a custom resource) is an error.
NON_WORKLOAD_KINDS = frozenset({
    "Service", "ConfigMap", "Secret", "ServiceAccount", "Namespace", "Ingress",
    "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy", "Role", "RoleBinding",
    "ClusterRole", "ClusterRoleBinding", "PersistentVolumeClaim", "PersistentVolume",
    "StorageClass", "LimitRange", "ResourceQuota", "PriorityClass", "Endpoints",
    "EndpointSlice", "CustomResourceDefinition", "RuntimeClass", "IngressClass",
})


class ManifestError(ValueError):
    """A manifest that is not a workload this tool understands."""


@dataclass(frozen=True, slots=True)
class PodTemplate:
    kind: str
    namespace: str
    name: str
    pod: PodSpec  # named after the workload
    replicas: int = 1
    source: str = ""  # where it came from ("file.yaml#2"), for messages


def _template_path(kind: str) -> tuple[str, ...]:
    if kind == "Pod":
        return ()
    if kind == "CronJob":
        return ("spec", "jobTemplate", "spec", "template")
    return ("spec", "template")


def _dig(obj: Mapping[str, Any], path: tuple[str, ...], where: str) -> Mapping[str, Any]:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping) or not isinstance(cur.get(key), Mapping):
            raise ManifestError(f"{where}: missing {'.'.join(path)}")
        cur = cur[key]
    return cur  # type: ignore[no-any-return]


def _replicas(kind: str, obj: Mapping[str, Any], where: str) -> int:
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        value = spec.get("replicas", 1)
    elif kind == "Job":
        value = spec.get("parallelism", 1)
    else:
        value = 1
    if value is None:
        value = 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where}: replicas/parallelism must be a non-negative integer")
    return value


def templates_from_manifest(doc: object, source: str = "manifest") -> list[PodTemplate]:
    """The pod templates of one decoded YAML document (``None`` documents give none)."""
    if doc is None:
        return []
    if not isinstance(doc, Mapping):
        raise ManifestError(f"{source}: not a Kubernetes object (expected a mapping)")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ManifestError(f"{source}: no 'kind'")
    if kind.endswith("List") and isinstance(doc.get("items"), list):
        out: list[PodTemplate] = []
        for i, item in enumerate(doc["items"]):
            out.extend(templates_from_manifest(item, f"{source} item {i}"))
        return out
    if kind in NON_WORKLOAD_KINDS:
        return []
    if kind not in KINDS:
        raise ManifestError(f"{source}: unsupported kind {kind!r} "
                            f"(supported: {', '.join(KINDS)})")
    return [_workload_template(kind, doc, source)]


def _workload_template(kind: str, doc: Mapping[str, Any], source: str) -> PodTemplate:
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) \
            or not meta.get("name"):
        raise ManifestError(f"{source}: {kind} without metadata.name")
    name = str(meta["name"])
    where = f"{source} ({kind} {name})"
    namespace = str(meta.get("namespace") or "default")
    pod_obj = {"metadata": {"name": name, "namespace": namespace,
                            "uid": str(meta.get("uid") or "")},
               "spec": _pod_spec(_dig(doc, _template_path(kind), where), where)}
    try:
        pod = pod_spec_from_json(pod_obj)
    except SpecError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    return PodTemplate(kind, namespace, name, pod, _replicas(kind, doc, where), source)


def _pod_spec(template: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """The ``spec`` of a pod template, with the container lists it must have."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        raise ManifestError(f"{where}: pod template without a spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ManifestError(f"{where}: the pod template has no containers")
    if not isinstance(spec.get("initContainers", []) or [], list):
        raise ManifestError(f"{where}: initContainers must be a list")
    return spec
