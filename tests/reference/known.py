"""Disagreements between the kubelet and the allocator model that are known, each kept as a
kind still open (docs/design.md#reference). The differential tests fail on any disagreement
that is none of these. Closed kinds are regression tests in test_known.py."""

from __future__ import annotations

from bench.reference import Outcome

# name -> what the kubelet does that the model does not.
KNOWN = {
    "full-pcpus-only-free-cores":
        "with full-pcpus-only the kubelet refuses a container when too few whole cores are "
        "free (\"not enough free physical CPUs\"), counting free cores its own way; the model "
        "admits the container (found on 1.36.3 without SMT and with "
        "prefer-align-cpus-by-uncorecache; not shrunk or explained yet)",
    "distribute-cpus-across-cores":
        "with distribute-cpus-across-cores the kubelet spreads a container's CPUs over other "
        "cores than the model does (found on 1.35.4, 1.36.3 and 1.37.2; not shrunk or "
        "explained yet)",
}


def classify(outcome: Outcome) -> str | None:
    """The known disagreement this outcome is, or None for a new one."""
    cfg = outcome.case.config
    if any("SMT Alignment Error: not enough free physical CPUs" in x and "model admits" in x
           for x in outcome.disagreements) and "full-pcpus-only" in cfg.options:
        return "full-pcpus-only-free-cores"
    if ("distribute-cpus-across-cores" in cfg.options and outcome.op == "admit"
            and all(": kubelet " in x and ", model " in x for x in outcome.disagreements)):
        return "distribute-cpus-across-cores"
    return None
