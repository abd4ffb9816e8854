"""Golden /metrics for every public scenario, served end to end: the simulated kubelet
(gRPC on a unix socket, HTTPS /pods and /configz) → ``serve`` → a real HTTP scrape.

Regenerate the golden files with ``PODRES_UPDATE_GOLDEN=1 pytest tests/service`` and review
them against the scenario's expect.json before committing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import StartSim
from tests.service.conftest import (
    TOKEN,
    RunServe,
    needs_promtool,
    online_cpus,
    parse_exposition,
    promtool_check,
    scenario_names,
    scenario_root,
    series,
    value,
)

CPU_LIST = re.compile(r"^[0-9]+([-,][0-9]+)+$")
GOLDEN = Path(__file__).with_name("golden")
# Self-metrics whose values change from run to run (or release to release).
VOLATILE = ("podres_last_success_timestamp_seconds", "podres_poll_duration_seconds",
            "podres_build_info")


def stable_lines(text: str) -> str:
    """The exposition without the volatile families (their HELP, TYPE and samples)."""
    keep = []
    for line in text.splitlines(keepends=True):
        parts = line.split(" ", 3)
        name = parts[2] if line.startswith("# ") and len(parts) > 2 else \
            line.split("{", 1)[0].split(" ", 1)[0]
        if name not in VOLATILE:
            keep.append(line)
    return "".join(keep)


async def serve_scenario(start_sim: StartSim, run_serve: RunServe, name: str) -> str:
    """Serve a scenario; the kubelet's HTTPS endpoint only when the scenario captured its
    bodies (a scenario without pods.json has /pods answering 404, as recorded)."""
    directory = scenario_root() / name
    https = (directory / "pods.json").exists() or (directory / "configz.json").exists()
    sim = await start_sim(directory, http=https, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "1m")
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    return await served.metrics_text()


@pytest.mark.parametrize("name", scenario_names())
async def test_golden_metrics(start_sim: StartSim, run_serve: RunServe, name: str) -> None:
    text = stable_lines(await serve_scenario(start_sim, run_serve, name))
    golden = GOLDEN / f"{name}.prom"
    if os.environ.get("PODRES_UPDATE_GOLDEN") == "1":
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden}: run with PODRES_UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", scenario_names())
async def test_metrics_agree_with_expect(start_sim: StartSim, run_serve: RunServe,
                                         name: str) -> None:
    """The hand review of the golden files, automated where expect.json says something."""
    directory = scenario_root() / name
    expect = json.loads((directory / "expect.json").read_text())
    samples = parse_exposition(await serve_scenario(start_sim, run_serve, name))

    pools: dict[str, float] = {}
    for labels, v in series(samples, "podres_cpus").items():
        pool = dict(labels)["pool"]
        pools[pool] = pools.get(pool, 0.0) + v
    assert pools == {k: float(v) for k, v in expect["cpu_pools"].items()}
    # Every online CPU is in exactly one pool.
    assert sum(pools.values()) == online_cpus(directory / "topology.json")
    for numa, counts in (expect.get("cpu_pools_by_numa") or {}).items():
        for pool, n in counts.items():
            assert value(samples, "podres_cpus", pool=pool, numa_node=numa) == n, (numa, pool)
    for mtype, sizes in (expect.get("memory_pools") or {}).items():
        for pool, size in sizes.items():
            assert value(samples, "podres_memory_bytes", pool=pool, memory_type=mtype) == size
    assert value(samples, "podres_reclaimed_cpus") == expect["reclaimed_cpus"]
    assert value(samples, "podres_reclaimable_cpus") == expect["reclaimable_cpus"]
    for key, fields in expect["containers"].items():
        namespace, pod, container = key.split("/")
        got = series(samples, "podres_container_cpus", namespace=namespace, pod=pod,
                     container=container)
        assert len(got) == 1, key
        ((labels, cpus),) = got.items()
        assert dict(labels)["assignment"] == fields["assignment"], key
        if "cpu_count" in fields:
            assert cpus == fields["cpu_count"], key
    for key, fields in expect.get("pods", {}).items():
        namespace, pod = key.split("/")
        if "reclaimed_cpus" in fields:
            assert value(samples, "podres_pod_reclaimed_cpus", namespace=namespace,
                         pod=pod) == fields["reclaimed_cpus"], key
        for pool in ("pod_exclusive", "pod_shared"):
            if f"{pool}_cpus" in fields:
                assert value(samples, "podres_pod_cpus", namespace=namespace, pod=pod,
                             pool=pool) == fields[f"{pool}_cpus"], key
    anomalies = {dict(k)["kind"] for k, v in series(samples, "podres_anomalies").items() if v}
    assert sorted(anomalies) == expect.get("anomaly_kinds", sorted(anomalies))
    # No CPU lists in label values (docs/design.md#metrics).
    for (_name, labels) in samples:
        for label, text in labels:
            assert not CPU_LIST.match(text), (label, text)


@needs_promtool
@pytest.mark.parametrize("name", scenario_names())
async def test_promtool_check_metrics(start_sim: StartSim, run_serve: RunServe,
                                      name: str) -> None:
    text = await serve_scenario(start_sim, run_serve, name)
    result = promtool_check(text)
    assert result.returncode == 0, result.stdout + result.stderr
