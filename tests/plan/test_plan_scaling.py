"""Planning a pod is linear in its containers (issue 33, D2): the pod's QoS class is
derived once per pod, not once per container (each derivation reads every container).
Counted, not timed: the number of QoS derivations and the containers they read."""

from __future__ import annotations

from typing import Any

import pytest

import reconciler.kube as kube
from reconciler.allocator.config import ModelConfig
from reconciler.allocator.plan import plan_templates
from reconciler.manifests import workloads_in_manifest


def _pod(containers: int) -> dict[str, Any]:
    q = {"cpu": "1", "memory": "1Mi"}
    return {"kind": "Pod", "metadata": {"name": "wide"}, "spec": {"containers": [
        {"name": f"c{i}", "resources": {"requests": q, "limits": q}}
        for i in range(containers)]}}


def _qos_work(containers: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(QoS derivations, containers they read) to parse and plan one pod."""
    counts = [0, 0]
    derive = kube.compute_qos

    def counting(pod: kube.PodSpec) -> str:
        counts[0] += 1
        counts[1] += len(pod.containers) + len(pod.init_containers)
        return derive(pod)

    monkeypatch.setattr(kube, "compute_qos", counting)
    templates = workloads_in_manifest(_pod(containers)).templates
    [planned] = plan_templates(templates, ModelConfig())
    assert planned.admitted
    return counts[0], counts[1]


def test_qos_is_derived_a_fixed_number_of_times_per_pod(
        monkeypatch: pytest.MonkeyPatch) -> None:
    small, small_read = _qos_work(50, monkeypatch)
    large, large_read = _qos_work(400, monkeypatch)
    # Before: one derivation per container (51 and 401), each reading all of them.
    assert large == small
    assert large_read == 8 * small_read
