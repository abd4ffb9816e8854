"""Device-plugin devices through the kubelet's own device manager and through the model
(docs/design.md#reference, bench/reference_devices.py): seeded workloads that all have
devices, and the kinds of disagreement the reference showed, each shrunk to a case."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from bench.reference import Reference, random_case, run, run_case
from tests.reference.known import classify

CASES = int(os.environ.get("PODRES_REFERENCE_DEVICE_CASES", "20"))
SEED = int(os.environ.get("PODRES_REFERENCE_SEED", "20261202"))


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_devices_agree_with_the_kubelets_device_manager(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    bad = [o.case.describe() + "\n  " + "\n  ".join(o.disagreements)
           for o in run(version, SEED, CASES, devices=True)
           if not o.agrees and classify(o) is None]
    assert not bad, f"{len(bad)} of {CASES} device workloads disagree:\n" + "\n".join(bad[:3])


# Each divergence the device manager showed, as the seed it was found with (the device mix
# of bench/reference_devices.py, devices on every case). Each of these disagreed before the
# model followed the kubelet (checked by undoing each change and running them again).
FOUND = [
    # 1.35.4 walks every NUMA node of the machine for device hints (deviceNUMANodes came in
    # 1.36): a merge then lands on masks with nodes that hold no device.
    ("1.35", 12000069, "hints over every NUMA node"),
    # A pod with pod-level resources under the pod scope gets its devices when its
    # containers start; too few fail the start, the pod stays admitted.
    ("1.37", 13000040, "devices at container start"),
    # After a restart the device hints are regenerated from the devices held: a pod holding
    # a device without topology of a resource with topology has no aligned hint any more.
    ("1.37", 13000055, "held devices' hints at a restart"),
    # A plugin's preferred allocation decides among the hinted devices.
    ("1.37", 13000044, "preferred allocation"),
    # A plugin that asks for PreStartContainer fails the start of a container that gets
    # its devices at start (a pod-level pod under the pod scope): it is asked before the
    # devices are allocated.
    ("1.37", 14000069, "PreStartContainer before the allocation at start"),
    # A restart reads the device checkpoint as last written, with the devices of pods gone
    # since: they stay taken while the pods are admitted again.
    ("1.37", 14000118, "a stale device checkpoint at a restart"),
]


@pytest.mark.parametrize(("version", "seed", "what"), FOUND, ids=[f[2] for f in FOUND])
def test_found_divergence_agrees_now(version: str, seed: int, what: str,
                                     need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcome = run_case(ref, random_case(seed, version, devices=True))
    assert outcome.agrees, (what, outcome.disagreements)
