"""Device-plugin devices through the kubelet's own device manager and through the model
(docs/design.md#reference, bench/reference_devices.py): seeded workloads that all have
devices, and the kinds of disagreement the reference showed, each shrunk to a case."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from bench.reference import run

CASES = int(os.environ.get("PODRES_REFERENCE_DEVICE_CASES", "20"))
SEED = int(os.environ.get("PODRES_REFERENCE_SEED", "20261202"))


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_devices_agree_with_the_kubelets_device_manager(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    bad = [o.case.describe() + "\n  " + "\n  ".join(o.disagreements)
           for o in run(version, SEED, CASES, devices=True) if not o.agrees]
    assert not bad, f"{len(bad)} of {CASES} device workloads disagree:\n" + "\n".join(bad[:3])
