"""Disagreements between the kubelet and the allocator model that are known, each kept as a
shrunk fixture in data/known/ with the kubelet version it came from (docs/design.md#reference).
The differential tests fail on any disagreement that is none of these."""

from __future__ import annotations

from bench.reference import Outcome

# name -> what the kubelet does that the model does not.
KNOWN = {
    "pod-level-resources-gate-off":
        "without PodLevelResourceManagers a pod with pod-level resources gets no exclusive "
        "CPUs (policy_static.go allocateForAdd); the model pins its containers as before",
    "restart-readmission":
        "after a kubelet restart, a pod with pod-level resources is admitted again through "
        "the topology manager and the kubelet refuses it or moves it; the model keeps it",
    "container-scope-pod-shared-pool":
        "under the container scope the kubelet admits a pod whose exclusive containers use "
        "the whole pod budget though another container needs the pod shared pool; the model "
        "refuses it",
}


def classify(outcome: Outcome) -> str | None:
    """The known disagreement this outcome is, or None for a new one."""
    cfg = outcome.case.config
    pod = outcome.pod
    text = "\n".join(outcome.disagreements)
    if outcome.op == "restart":
        return "restart-readmission"
    if outcome.op == "admit" and pod is not None:
        pod_level_set = pod.resources is not None and pod.resources.is_set
        if not cfg.pod_level and pod_level_set and "model rejects" not in text:
            return "pod-level-resources-gate-off"
        if (cfg.scope == "container" and cfg.pod_level and pod_level_set
                and "kubelet admits, model rejects: empty pod shared pool" in text):
            return "container-scope-pod-shared-pool"
    return None
