"""The reference is deterministic across restarts (docs/design.md#reference): it answers only
once the device manager has checkpointed every plugin's device list, and no goroutine of the
kubelet's managers runs beside the script's requests.

The fault the first test guards against was one workload in 3,000 to 4,000: after a restart
a pod's devices were gone, because the checkpoint write of a plugin's device list, snapshotted
before the pod's allocation, landed after it. The condition behind it (an answer given while
such a write is still on its way) is seen at every setup with devices: without the wait, half or
more of the setups answered with a checkpoint that did not hold every list yet.

The second runs restart-heavy workloads on the reference built with Go's race detector
(bench/reference_race.py), when that build is there: its first build takes minutes, so it is
made on request (``python -m bench.reference_race --build-only --version V``, or
PODRES_REFERENCE_RACE=1 here)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.reference import Reference, random_case, run_case, setup_request, stale
from bench.reference_race import race_reference, races, restart_heavy

VERSIONS = ["1.35", "1.36", "1.37"]
SEED = 20261205


def _registered(answer: dict[str, object]) -> dict[str, list[str]] | None:
    """The device lists the device manager's checkpoint holds, as the answer read it."""
    state = answer["state"]
    assert isinstance(state, dict)
    raw = state["checkpoints"].get("kubelet_internal_checkpoint")
    if raw is None:
        return None
    listed = json.loads(raw)["Data"]["RegisteredDevices"]
    return {name: sorted(ids) for name, ids in listed.items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_setup_answers_once_every_device_list_is_checkpointed(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    early = []
    started = 0
    with Reference(version, timeout=60) as ref:
        for i in range(30):
            request = setup_request(random_case(SEED * 1_000_003 + i, version, devices=True))
            answer = ref.request(request)
            if not answer.get("ok"):
                continue  # a machine the kubelet refuses (more than 8 NUMA nodes)
            started += 1
            want = {r["name"]: sorted(d["id"] for d in r["devices"] if not d.get("unhealthy"))
                    for r in request["setup"]["devices"]}
            if (got := _registered(answer)) != want:
                early.append(f"setup {i}: checkpoint {got}, plugins {want}")
    assert started >= 20
    assert not early, (f"{len(early)} of {started} setups answered before the device manager had "
                       "checkpointed every plugin's list:\n" + "\n".join(early[:3]))


@pytest.mark.parametrize("version", VERSIONS)
def test_no_data_race_under_the_race_detector(version: str,
                                              need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    if stale(version, race=True) and os.environ.get("PODRES_REFERENCE_RACE") != "1":
        pytest.skip(f"no race build of the kubelet {version} reference (python -m "
                    f"bench.reference_race --build-only --version {version}, minutes)")
    with tempfile.TemporaryDirectory(prefix="podres-race-") as tmp:
        log_dir = Path(tmp)
        with race_reference(version, log_dir, timeout=120) as ref:
            for i in range(8):
                case = random_case(SEED * 1_000_003 + i, version, memory=True, devices=True)
                outcome = run_case(ref, restart_heavy(case))
                assert outcome.agrees, outcome.disagreements
        found = races(log_dir)
    assert not found, f"{len(found)} data races:\n" + "\n".join(found[:2])
