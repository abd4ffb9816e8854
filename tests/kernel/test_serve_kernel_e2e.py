"""End to end: the model-driven simulator places pods and writes the cgroup tree and
``/proc/stat`` a kernel would show, with one container drifting; a real ``serve`` reads
them beside the simulated kubelet. ``cpuset_drift`` appears only after the CPU manager
reconcile period, clears when the tree is corrected, and the busy-seconds counters grow by
exactly the injected load of each pool."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from exporter.sim.cgroupfs import SimKernel, decorate_pod_list
from kernel.helpers import place
from reconciler.cpuset import format_cpuset
from tests.conftest import StartSim
from tests.service.conftest import RunServe, run_serve, series, value

__all__ = ["run_serve"]  # the fixture, imported so that pytest finds it here

LOAD = {"reserved": 0.25, "node_shared": 0.5, "node_exclusive": 1.0, "pod_exclusive": 0.75,
        "pod_shared": 0.5, "pod_idle": 0.0}
PERIOD = 1.0  # cpuManagerReconcilePeriod of the simulated kubelet, seconds


def drift_anomalies(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return value(samples, "podres_anomalies", kind="cpuset_drift") or 0.0


def pool_seconds(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
                 ) -> dict[str, float]:
    return {dict(k)["pool"]: v
            for k, v in series(samples, "podres_cpu_pool_busy_seconds_total").items()}


async def test_drift_after_the_window_cleared_when_fixed_and_usage_per_pool(
        tmp_path: Path, start_sim: StartSim, run_serve: RunServe) -> None:
    node = place("1.37", "pod", 1)
    # A container with CPUs of its own in a pod without a block (a block would bound what
    # its cgroup can be given), made to run on the node's shared pool.
    victim, kind = next(((p.namespace, p.name, c.name), c.assignment)
                        for _, p in sorted(node.model.pods.items())
                        for c in p.containers if c.exclusive and not p.block)
    wrong = frozenset(node.model.default_set)
    kernel = SimKernel(node.model, tmp_path / "cg", tmp_path / "proc" / "stat",
                       load_by_pool=LOAD, drift={victim: wrong})
    state = node.state()
    configz = json.loads(json.dumps(state.configz))
    configz["kubeletconfig"]["cpuManagerReconcilePeriod"] = f"{PERIOD:g}s"
    sim = await start_sim(replace(state, pod_list=decorate_pod_list(state.pod_list),
                                  configz=configz), http=True)
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    started = time.monotonic()
    served = await run_serve(sim, "--poll.interval", "0.1s", "--topology", str(topology),
                             "--cgroup.root", str(tmp_path / "cg"),
                             "--proc.root", str(tmp_path / "proc"))

    first = await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    assert value(first, "podres_source_up", source="cgroup") == 1.0
    assert value(first, "podres_source_up", source="procstat") == 1.0
    assert value(first, "podres_source_errors_total", source="cgroup", operation="read") == 0
    assert drift_anomalies(first) == 0.0  # seen once: the kubelet may still be catching up

    # -- drift: raised only once the reconcile period has passed --------------------------
    drifting = await served.wait_for(lambda s: drift_anomalies(s) == 1.0,
                                     what="cpuset_drift raised")
    assert time.monotonic() - started >= PERIOD
    assert value(drifting, "podres_cpuset_drift", kind=kind) == 1.0
    assert sum(series(drifting, "podres_cpuset_drift").values()) == 1.0
    status, body = await served.get("/api/v1/ledger")
    assert status == 200
    ledger = json.loads(body)
    [entry] = [c for c in ledger["containers"]
               if (c["namespace"], c["pod"], c["name"]) == victim]
    assert entry["enforced_cpus"] == format_cpuset(wrong) != entry["cpus"]
    assert next(a for a in ledger["anomalies"] if a["kind"] == "cpuset_drift")["container"] \
        == victim[2]
    status, body = await served.get("/api/v1/cpumap")
    assert status == 200
    cells = {c["id"]: c for c in json.loads(body)["cpus"]}
    assert all("/".join(victim) in cells[cpu]["enforced"] for cpu in wrong)

    kernel.drift = {}
    kernel.sync()
    fixed = await served.wait_for(lambda s: drift_anomalies(s) == 0.0,
                                  what="cpuset_drift cleared")
    assert sum(series(fixed, "podres_cpuset_drift").values()) == 0.0

    # -- usage: one tick of simulated time, counted exactly once per pool -----------------
    cpus: dict[str, float] = {}
    for labels, n in series(fixed, "podres_cpus").items():
        pool = dict(labels)["pool"]
        cpus[pool] = cpus.get(pool, 0.0) + n
    before = pool_seconds(fixed)
    seconds = 10.0
    kernel.tick(seconds)
    after = pool_seconds(await served.wait_for(lambda s: pool_seconds(s) != before,
                                               what="busy time counted"))
    for pool, load in LOAD.items():
        rate = (after[pool] - before[pool]) / seconds
        assert abs(rate - load * cpus[pool]) < 0.01 * max(1.0, cpus[pool]), \
            (pool, rate, load, cpus[pool])
    per_pod = series(await served.metrics(), "podres_pod_cpu_busy_seconds_total")
    assert per_pod and all(v >= 0 for v in per_pod.values())

    # -- the CPU map's colouring: each CPU's busy share of that tick is its pool's load ----
    status, body = await served.get("/api/v1/cpuload")
    assert status == 200
    shares = {int(cpu): share for cpu, share in json.loads(body)["cpus"].items()}
    assert set(shares) == set(cells)
    for cpu, share in shares.items():
        assert share == pytest.approx(LOAD[cells[cpu]["pool"]], abs=0.01), (cpu, share)


async def test_sources_off_or_failing_leave_the_ledger_as_before(
        tmp_path: Path, start_sim: StartSim, run_serve: RunServe) -> None:
    """No kubepods hierarchy under --cgroup.root: the source is off, the ledger JSON is
    plain podres.ledger/v1. No stat under --proc.root: a counted procstat error, the
    counters published at 0, the rest of the node unaffected."""
    node = place("1.37", "pod", 1)
    state = node.state()
    sim = await start_sim(state, http=True)
    (tmp_path / "cg").mkdir()
    (tmp_path / "proc").mkdir()
    served = await run_serve(sim, "--poll.interval", "0.1s",
                             "--cgroup.root", str(tmp_path / "cg"),
                             "--proc.root", str(tmp_path / "proc"))
    samples = await served.wait_for(
        lambda s: (value(s, "podres_source_errors_total", source="procstat",
                         operation="read") or 0) >= 2, what="procstat errors counted")
    assert value(samples, "podres_up") == 1.0
    assert value(samples, "podres_source_up", source="procstat") == 0.0
    assert set(pool_seconds(samples).values()) == {0.0}
    # The cgroup source is on but --cgroup.root is no cgroup mount: down, with the
    # reason; no drift gauge (drift checking off is not "no drift") and no usage series.
    assert value(samples, "podres_source_up", source="cgroup") == 0.0
    assert value(samples, "podres_source_off_reason", source="cgroup",
                 reason="not_mounted") == 1.0
    assert len(series(samples, "podres_source_off_reason")) == 1
    assert not series(samples, "podres_cpuset_drift")
    assert not series(samples, "podres_container_cpu_usage_seconds_total")
    assert value(samples, "podres_source_errors_total", source="cgroup", operation="read") == 0
    status, body = await served.get("/api/v1/ledger")
    assert status == 200
    ledger = json.loads(body)
    assert ledger["containers"] and not any("enforced_cpus" in c for c in ledger["containers"])
    status, body = await served.get("/api/v1/cpumap")
    assert status == 200 and not any("enforced" in c for c in json.loads(body)["cpus"])
    status, body = await served.get("/api/v1/cpuload")
    assert status == 200 and json.loads(body) == {"cpus": {}}  # no /proc/stat sample yet


async def _polls(served: Any, n: int) -> list[dict[Any, float]]:
    """The metrics after each of the next ``n`` polls (one scrape per poll seen)."""
    seen: list[dict[Any, float]] = []
    last = value(await served.metrics(), "podres_last_success_timestamp_seconds")
    while len(seen) < n:
        samples = await served.wait_for(
            lambda s, last=last: value(s, "podres_last_success_timestamp_seconds") != last,
            what="the next poll")
        last = value(samples, "podres_last_success_timestamp_seconds")
        seen.append(samples)
    return seen


async def test_restart_followed_within_a_poll_on_kinds_layout(
        tmp_path: Path, start_sim: StartSim, run_serve: RunServe) -> None:
    """kind's kubelet (cgroupRoot /kubelet, systemd driver: kubelet.slice/
    kubelet-kubepods.slice/…), found from /configz alone. A container restarts (a new id
    in /pods and in the tree, the same PodResources List): the exporter reads /pods again
    in that poll rather than at its refresh an hour away, keeps reading the container's
    cgroup, and never counts a cgroup error."""
    node = place("1.37", "pod", 1)
    kernel = SimKernel(node.model, tmp_path / "cg", tmp_path / "proc" / "stat",
                       load_by_pool=LOAD, kubelet_root=("kubelet",))
    assert (tmp_path / "cg" / "kubelet.slice" / "kubelet-kubepods.slice").is_dir()
    state = node.state()
    configz = json.loads(json.dumps(state.configz))
    configz["kubeletconfig"].update(cgroupRoot="/kubelet", cgroupDriver="systemd")

    def kubelet() -> Any:
        return replace(state, pod_list=kernel.decorate(state.pod_list), configz=configz)

    sim = await start_sim(kubelet(), http=True)
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    served = await run_serve(sim, "--poll.interval", "0.1s", "--topology", str(topology),
                             "--kubelet.pods-refresh-interval", "1h",
                             "--cgroup.root", str(tmp_path / "cg"),
                             "--proc.root", str(tmp_path / "proc"))
    victim = next((p.namespace, p.name, c.name) for _, p in sorted(node.model.pods.items())
                  for c in p.containers if c.exclusive)
    labels = dict(zip(("namespace", "pod", "container"), victim, strict=True))
    kernel.tick(4.0)
    ran = await served.wait_for(
        lambda s: (value(s, "podres_container_cpu_usage_seconds_total", **labels) or 0) > 0,
        what="the container's own CPU time")
    assert value(ran, "podres_source_up", source="cgroup") == 1.0
    assert not series(ran, "podres_source_off_reason")
    # Every container the ledger lists is read, on kind's layout.
    status, body = await served.get("/api/v1/ledger")
    assert status == 200
    assert all(c["enforced_cpus"] is not None for c in json.loads(body)["containers"])

    reads = sim.http_requests["/pods"]
    kernel.restart(victim)
    sim.set_state(kubelet())
    for samples in await _polls(served, 6):
        assert value(samples, "podres_source_errors_total", source="cgroup",
                     operation="read") == 0
        assert value(samples, "podres_source_up", source="cgroup") == 1.0
    assert sim.http_requests["/pods"] == reads + 1  # read again once, in the restart's poll
    status, body = await served.get("/api/v1/ledger")
    [entry] = [c for c in json.loads(body)["containers"]
               if (c["namespace"], c["pod"], c["name"]) == victim]
    assert entry["enforced_cpus"] == entry["cpus"]
    # Its CPU time is its new cgroup's: it starts again from 0 (a counter reset).
    assert not value(samples, "podres_container_cpu_usage_seconds_total", **labels)
