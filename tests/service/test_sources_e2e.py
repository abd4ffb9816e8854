"""Sources beyond PodResources, end to end through ``serve``: checkpoint files under
``--kubelet.root-dir``, a kubelet whose answers are malformed or lie, and the anomaly
counters."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from exporter.pb import api_pb2
from exporter.sources.fixture import load_fixture_dir
from tests.conftest import StartSim
from tests.service.conftest import (
    REPO,
    TOKEN,
    RunServe,
    SeriesKey,
    scenario_root,
    series,
    value,
)

CHECKPOINTS = REPO / "tests" / "checkpoint" / "data"
SCENARIO = "sidecar-hybrid"


def up(s: dict[SeriesKey, float]) -> bool:
    return value(s, "podres_up") == 1.0


def install(source: str, root: Path, name: str) -> None:
    """Replace a checkpoint file as the kubelet does: write aside, rename over."""
    tmp = root / f".{name}.tmp"
    shutil.copyfile(CHECKPOINTS / source, tmp)
    os.replace(tmp, root / name)


async def test_checkpoint_formats_follow_the_files(start_sim: StartSim, run_serve: RunServe,
                                                   short_tmp: Path) -> None:
    directory = scenario_root() / SCENARIO
    root = short_tmp / "kubelet-root"
    root.mkdir()
    install("cpu_v2", root, "cpu_manager_state")
    install("mem_v1", root, "memory_manager_state")
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    sim = await start_sim(directory, http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "300ms", "--kubelet.root-dir", str(root))
    first = await served.wait_for(up, what="first poll")
    assert value(first, "podres_checkpoint_info", file="cpu_manager_state",
                 format="v2") == 1.0
    assert value(first, "podres_checkpoint_info", file="memory_manager_state",
                 format="v1") == 1.0
    assert value(first, "podres_checkpoint_downgrade_unsafe") == 0.0
    assert value(first, "podres_source_up", source="checkpoint") == 1.0

    # The kubelet is upgraded (1.36, gate on) and rewrites its CPU checkpoint as V3 while
    # the pods stay the same: the format and the downgrade trap show at the next poll.
    install("cpu_v3", root, "cpu_manager_state")
    trap = await served.wait_for(
        lambda s: value(s, "podres_checkpoint_info", file="cpu_manager_state",
                        format="v3") == 1.0, what="the V3 checkpoint")
    assert not series(trap, "podres_checkpoint_info", format="v2")
    assert value(trap, "podres_checkpoint_downgrade_unsafe") == 1.0

    # A corrupt file: counted, the rest keeps publishing.
    (root / "cpu_manager_state").write_text("{not json")
    broken = await served.wait_for(
        lambda s: (value(s, "podres_source_errors_total", source="checkpoint",
                         operation="parse") or 0) >= 1, what="the parse error")
    assert up(broken) and series(broken, "podres_cpus")
    assert value(broken, "podres_source_up", source="checkpoint") == 0.0
    # Read-only: the exporter never wrote to the kubelet's files.
    assert (root / "memory_manager_state").read_bytes() == before["memory_manager_state"]


async def test_malformed_pod_specs_fall_back(start_sim: StartSim, run_serve: RunServe) -> None:
    directory = scenario_root() / "database-pod-scope"
    sim = await start_sim(directory, http=True, token=TOKEN)
    # Only /pods changes here: it is read again when its refresh is due.
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "300ms", "--kubelet.pods-refresh-interval",
                             "1s")
    await served.wait_for(up, what="first poll")
    sim.set_state(replace(sim.state, pod_list={"kind": "PodList", "items": [{"metadata": 7}]}))
    bad = await served.wait_for(
        lambda s: (value(s, "podres_source_errors_total", source="kubelet",
                         operation="pods") or 0) >= 1, what="the /pods error")
    assert up(bad)
    assert series(bad, "podres_pod_cpus", namespace="db")
    status, _ = await served.get("/api/v1/ledger")
    assert status == 200


async def test_anomalies_current_and_observed(start_sim: StartSim, run_serve: RunServe) -> None:
    """A kubelet that reports a CPU the node does not have: podres_anomalies shows it while
    it lasts; podres_anomalies_observed_total counts each appearance once."""
    directory = scenario_root() / SCENARIO
    good = load_fixture_dir(directory).kubelet
    listing = api_pb2.ListPodResourcesResponse()
    listing.CopyFrom(good.list_response)
    listing.pod_resources.add(name="liar", namespace="x", containers=[
        api_pb2.ContainerResources(name="c", cpu_ids=[4096])])
    lying = replace(good, list_response=listing)
    sim = await start_sim(good, http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "300ms")

    def current(s: dict[SeriesKey, float]) -> float:
        return sum(v for v in series(s, "podres_anomalies").values())

    def observed(s: dict[SeriesKey, float]) -> float:
        return sum(v for v in series(s, "podres_anomalies_observed_total").values())

    clean = await served.wait_for(up, what="first poll")
    assert current(clean) == 0 and observed(clean) == 0
    sim.set_state(lying)
    bad = await served.wait_for(lambda s: current(s) > 0, what="the anomaly")
    kinds = {dict(k)["kind"] for k, v in series(bad, "podres_anomalies").items() if v}
    assert kinds
    first_count = observed(bad)
    assert first_count >= 1
    for kind in kinds:
        assert (value(bad, "podres_anomalies_observed_total", kind=kind) or 0) >= 1
    sim.set_state(good)
    gone = await served.wait_for(lambda s: current(s) == 0, what="the anomaly gone")
    assert observed(gone) == first_count  # a counter: it does not go down
    sim.set_state(lying)
    again = await served.wait_for(lambda s: current(s) > 0, what="the anomaly again")
    assert observed(again) == 2 * first_count
