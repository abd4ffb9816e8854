"""Disagreements between the kubelet and the allocator model that are known, each kept as a
kind still open (docs/design.md#reference). The differential tests fail on any disagreement
that is none of these. Closed kinds are regression tests in test_known.py and
test_known_mixes.py."""

from __future__ import annotations

from bench.reference import Outcome

# name -> what the kubelet does that the model does not. None is open: the last one,
# "device-pod-block-at-restart", was the device checkpoint a refused pod leaves behind
# (test_known_mixes.py).
KNOWN: dict[str, str] = {
    "memory-default-affinity-at-restart": (
        "after a restart the kubelet admits again a pod whose container the model refuses "
        "with the memory manager's \"failed to get the default NUMA affinity\" (1.36.3 "
        "default-mix seeds 20261262783631, 20261265784327, 20261265787188; open)"),
}


def classify(outcome: Outcome) -> str | None:
    """The known disagreement this outcome is, or None for a new one."""
    if outcome.op == "restart" and outcome.case.config.memory_policy == "Static" and any(
            "the kubelet admits" in d and "failed to get the default NUMA affinity" in d
            and "the model refuses" in d for d in outcome.disagreements):
        return "memory-default-affinity-at-restart"
    return None
