"""The three hint providers together (docs/design.md#reference): the kubelet runs the device
manager, the CPU manager and the memory manager on one node, so seeded workloads with
device-plugin devices under the Static memory manager (``--memory --devices``) must agree
too, and the divergences their combination showed stay fixed."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from bench.reference import Reference, random_case, run, run_case
from tests.reference.test_differential import check_agreement

CASES = int(os.environ.get("PODRES_REFERENCE_COMBINED_CASES", "15"))
SEED = int(os.environ.get("PODRES_REFERENCE_SEED", "20261204"))


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_memory_and_devices_agree_with_the_kubelet(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    check_agreement(version, run(version, SEED, CASES, memory=True, devices=True), CASES)


# Each divergence found when the branches were joined, as the seed it was found with (the
# memory mix, devices on a share of the cases). Each disagreed before the model followed
# the kubelet.
FOUND = [
    # The none CPU policy pins no CPU, but the Static memory manager still pins a
    # Guaranteed pod's memory, and refuses what does not fit.
    ("1.37", 7001021014, "memory under the none CPU policy: refusal"),
    ("1.37", 7001021037, "memory under the none CPU policy: blocks"),
    # The memory path under the none CPU policy takes the pod's devices on its own hint:
    # they are not taken a second time as for a pod that pins nothing.
    ("1.37", 7001021054, "devices taken once beside memory under the none CPU policy"),
]


@pytest.mark.parametrize(("version", "seed", "what"), FOUND, ids=[f[2] for f in FOUND])
def test_found_divergence_agrees_now(version: str, seed: int, what: str,
                                     need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcome = run_case(ref, random_case(seed, version, memory=True))
    assert outcome.agrees, (what, outcome.disagreements)
