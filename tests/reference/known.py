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
    "refused-pod-level-leak":
        "a pod with pod-level resources refused part-way through its pod-level allocation "
        "leaves CPUs out of the default set that no container or pod entry holds; the model "
        "leaves the state untouched",
    "topology-none-pod-level":
        "with topologyManagerPolicy none the topology manager's none scope calls each "
        "container's Allocate and never AllocatePod, so a pod with pod-level resources gets "
        "no pod-level block: its exclusive containers are placed one by one or refused; the "
        "model carves the block",
    "container-scope-pod-level":
        "under the container scope the kubelet does not hold a pod with pod-level resources "
        "to its budget as the model does (exclusive containers may use it all while another "
        "needs the pod shared pool; an init container may ask for more than is left), and "
        "refuses the pod when one container's hint fails; the model differs both ways",
}


def classify(outcome: Outcome) -> str | None:
    """The known disagreement this outcome is, or None for a new one."""
    cfg = outcome.case.config
    pod = outcome.pod
    if outcome.op == "restart":
        return "restart-readmission"
    if outcome.op == "admit" and pod is not None:
        pod_level_set = pod.resources is not None and pod.resources.is_set
        if not cfg.pod_level and pod_level_set:
            return "pod-level-resources-gate-off"
        lines = outcome.disagreements
        if cfg.pod_level and pod_level_set and all(": default set:" in x for x in lines):
            return "refused-pod-level-leak"
        if cfg.pod_level and pod_level_set and cfg.topology_policy == "none":
            return "topology-none-pod-level"
        if cfg.pod_level and pod_level_set and cfg.scope == "container":
            return "container-scope-pod-level"
    return None
