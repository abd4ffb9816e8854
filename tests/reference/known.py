"""Disagreements between the kubelet and the allocator model that are known, each kept as a
kind still open (docs/design.md#reference). The differential tests fail on any disagreement
that is none of these. Closed kinds are regression tests in test_known.py and
test_known_mixes.py."""

from __future__ import annotations

from bench.reference import Outcome

# name -> what the kubelet does that the model does not. None is open: the last one,
# "device-pod-block-at-restart", was the device checkpoint a refused pod leaves behind
# (test_known_mixes.py).
KNOWN: dict[str, str] = {}


def classify(outcome: Outcome) -> str | None:
    """The known disagreement this outcome is, or None for a new one."""
    del outcome  # no kind is open
    return None
