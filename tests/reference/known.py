"""Disagreements between the kubelet and the allocator model that are known, each kept as a
kind still open (docs/design.md#reference). The differential tests fail on any disagreement
that is none of these. Closed kinds are regression tests in test_known.py."""

from __future__ import annotations

from bench.reference import Outcome

# name -> what the kubelet does that the model does not. None is open.
KNOWN: dict[str, str] = {
    "device-pod-block-at-restart": (
        "a pod with pod-level resources and devices, under the pod scope with "
        "prefer-closest-numa-nodes, gets another block from AllocatePod at a restart than "
        "the model carves (1.37.2, seed 3209010332 of the device mix; open)"),
}


def classify(outcome: Outcome) -> str | None:
    """The known disagreement this outcome is, or None for a new one."""
    case = outcome.case
    if (outcome.op == "restart" and case.devices and case.config.prefer_closest_numa
            and case.config.scope == "pod"
            and any(" pod-level: kubelet " in d for d in outcome.disagreements)):
        return "device-pod-block-at-restart"
    return None
