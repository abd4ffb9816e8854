"""Kubernetes workload manifests (already-decoded YAML/JSON) → pod templates.

Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job and CronJob, plus ``List`` wrappers.
Every other kind (Services, ConfigMaps, custom resources such as a PrometheusRule) sits
beside workloads in real manifests and holds no pod template this tool models: it is
skipped and reported, so that a directory of manifests can be planned as it is. A kind one
typo away from a workload kind ("Deploymnet") is an error instead: skipping it would
silently leave a workload out of the plan.
Pure: reading files belongs to ``exporter``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.kube import PodSpec, SpecError, pod_spec_from_json

# Containers of one pod template, init containers included (docs/plan.md#manifest-limits):
# far past any real pod; planning costs grow with it (the scratch node is sized to the pod).
MAX_CONTAINERS = 1_000

KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")


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


@dataclass(frozen=True, slots=True)
class Workloads:
    """What one decoded document holds: its pod templates, and the kind of every object
    skipped because it is not a workload (one entry per object)."""

    templates: tuple[PodTemplate, ...] = ()
    skipped: tuple[str, ...] = ()

    def __add__(self, other: Workloads) -> Workloads:
        return Workloads(self.templates + other.templates, self.skipped + other.skipped)

    @staticmethod
    def join(parts: Iterable[Workloads]) -> Workloads:
        """All of ``parts`` in order, in time linear in their total (``+`` copies)."""
        parts = list(parts)
        return Workloads(tuple(t for p in parts for t in p.templates),
                         tuple(k for p in parts for k in p.skipped))


def workloads_in_manifest(doc: object, source: str = "manifest") -> Workloads:
    """The pod templates of one decoded YAML document (``None`` documents give none) and
    the kinds it skipped."""
    if doc is None:
        return Workloads()
    if not isinstance(doc, Mapping):
        raise ManifestError(f"{source}: not a Kubernetes object (expected a mapping)")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ManifestError(f"{source}: no 'kind'")
    if kind.endswith("List") and isinstance(doc.get("items"), list):
        parts = [workloads_in_manifest(item, f"{source} item {i}")
                 for i, item in enumerate(doc["items"])]
        return Workloads.join(parts)
    if kind in KINDS:
        return Workloads(templates=(_workload_template(kind, doc, source),))
    near = difflib.get_close_matches(kind, KINDS, n=1, cutoff=0.8)
    if near:
        raise ManifestError(f"{source}: unsupported kind {kind!r} (did you mean {near[0]!r}? "
                            f"supported: {', '.join(KINDS)})")
    return Workloads(skipped=(kind,))


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
    init = spec.get("initContainers", []) or []
    if not isinstance(init, list):
        raise ManifestError(f"{where}: initContainers must be a list")
    if len(containers) + len(init) > MAX_CONTAINERS:
        raise ManifestError(f"{where}: more than {MAX_CONTAINERS} containers in one pod "
                            f"({len(containers) + len(init)})")
    return spec
