"""The exporter's kernel sources against cgroups a real runtime wrote
(docs/real-node.md#real-runtime): kubelet 1.37 on containerd v2.4.2 + runc v1.5.3
(realnode/runtime_real.py), on the host's own CPUs, cgroupfs driver, static CPU manager
with CPU 0 reserved. A Guaranteed pod spins on its exclusive CPU; a BestEffort pod sleeps
in the shared pool. `serve` runs as the DaemonSet runs it, kernel sources on.

The judges are read here, independently of the exporter: each container's cgroup
`cpuset.cpus` and `cpuacct.usage` (the path spelt out from /pods' container ids), its
processes' `Cpus_allowed_list` in /proc, the kubelet's `cpu_manager_state` and PodResources
over its socket. The tests share one node and run in order."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from exporter.pb import api_pb2, api_pb2_grpc
from realnode import build
from realnode.harness import (
    NodeConfig,
    Serve,
    burstable_pod,
    guaranteed_pod,
    host_state,
    wait_for,
)
from tests.realnode.checks import KubeletCPUState, agreeing, anomalies, cpus, uids
from tests.realnode.conftest import REQUIRED, need_realnode

CONFIG = NodeConfig(version="1.37", reserved_cpus="0")
PINNED, SHARED = "pinned-realnode", "shared-realnode"
RUNNING = {PINNED, SHARED}
CPUSET = Path("/sys/fs/cgroup/cpuset")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def need_runtime() -> None:
    """The kubelet, containerd and runc built, on a host with a cgroup v1 cpuset hierarchy
    and at least two CPUs; else one line (a failure under PODRES_REQUIRE_REALNODE=1)."""
    need_realnode(CONFIG.version)
    reason = ""
    if not (CPUSET / "cpuset.cpus").is_file() or not (CPUACCT / "cpuacct.usage").is_file():
        reason = "no cgroup v1 cpuset and cpuacct hierarchies under /sys/fs/cgroup"
    elif len(cpus((CPUSET / "cpuset.cpus").read_text())) < 2:
        reason = "the host has fewer than 2 CPUs (one reserved, one exclusive)"
    else:
        from realnode import runtime_real
        try:
            runtime_real.binaries()
        except build.RealNodeUnavailable as exc:
            reason = str(exc).splitlines()[0]
    if reason and REQUIRED:
        pytest.fail(f"real runtime required (PODRES_REQUIRE_REALNODE=1): {reason}",
                    pytrace=False)
    if reason:
        pytest.skip(f"real runtime unavailable: {reason}")


def test_without_a_cpuset_hierarchy_it_skips_in_one_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the real node itself can run but the kernel has no v1 cpuset hierarchy, one
    line says so, and PODRES_REQUIRE_REALNODE=1 makes it a failure."""
    need_realnode(CONFIG.version)
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "CPUSET", tmp_path)
    monkeypatch.setattr(module, "REQUIRED", False)
    with pytest.raises(pytest.skip.Exception, match=r"^real runtime unavailable: no cgroup "
                       r"v1 cpuset and cpuacct hierarchies under /sys/fs/cgroup$"):
        need_runtime()
    monkeypatch.setattr(module, "REQUIRED", True)
    with pytest.raises(pytest.fail.Exception, match=r"^real runtime required "
                       r"\(PODRES_REQUIRE_REALNODE=1\): no cgroup v1 cpuset"):
        need_runtime()


@pytest.fixture(scope="module")
def node() -> Iterator[Any]:
    need_runtime()
    from realnode.runtime_real import RuntimeNode, on_runtime
    before = host_state(), _runtime_paths()
    with RuntimeNode(CONFIG) as n:
        n.add_pod(on_runtime(guaranteed_pod("pinned", cpu="1", memory="32Mi"), spin=True))
        n.add_pod(on_runtime(burstable_pod("shared", cpu=None)))
        n.wait_pods(dict.fromkeys(RUNNING, "Running"), timeout=120)
        yield n
    assert not n.cgroups_left()
    assert not n.container_pids() and not n.shim_pids()
    assert not n.state.exists()
    assert (host_state(), _runtime_paths()) == before


def _runtime_paths() -> dict[str, bool]:
    """Where containerd and runc write by default: none may appear on the host."""
    return {p: os.path.exists(p) for p in ("/run/containerd", "/run/runc", "/opt/containerd",
                                           "/etc/cni/net.d", "/var/lib/containerd",
                                           "/run/nri")}


@pytest.fixture(scope="module")
def serve(node: Any) -> Iterator[Serve]:
    env = node.exporter_env()
    env["PODRES_POLL_INTERVAL"] = "1s"
    s = node.start_serve(env)
    try:
        yield s
    finally:
        s.stop()


class Written:
    """What runc wrote for one container, read straight from the kernel."""

    def __init__(self, node: Any, pod: dict[str, Any]) -> None:
        status = pod["status"]["containerStatuses"][0]
        self.container = status["name"]
        cid = status["containerID"].removeprefix("containerd://")
        qos = {"Guaranteed": "", "BestEffort": "besteffort/", "Burstable": "burstable/"}[
            pod["status"]["qosClass"]]
        self.rel = f"{node.cgroup_root.lstrip('/')}/kubepods/{qos}pod{pod['metadata']['uid']}/{cid}"
        self.cpuset_file = CPUSET / self.rel / "cpuset.cpus"

    @property
    def cpuset(self) -> frozenset[int]:
        return cpus(self.cpuset_file.read_text())

    @property
    def pids(self) -> list[int]:
        return [int(p) for p in (CPUSET / self.rel / "cgroup.procs").read_text().split()]

    def allowed(self) -> set[frozenset[int]]:
        """Each process's Cpus_allowed_list (one set when they all agree)."""
        out = set()
        for pid in self.pids:
            m = re.search(r"^Cpus_allowed_list:\s*(\S+)$",
                          Path(f"/proc/{pid}/status").read_text(), re.M)
            assert m, pid
            out.add(cpus(m.group(1)))
        return out

    def usage(self) -> float:
        return int((CPUACCT / self.rel / "cpuacct.usage").read_text()) / 1e9


def written(node: Any) -> dict[str, Written]:
    return {p["metadata"]["name"]: Written(node, p) for p in node.pods()}


def podresources(node: Any) -> dict[tuple[str, str], frozenset[int]]:
    """(pod, container) -> cpu_ids, from the kubelet's PodResources List."""
    with grpc.insecure_channel(f"unix://{node.socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=10)
    return {(p.name, c.name): frozenset(c.cpu_ids)
            for p in reply.pod_resources for c in p.containers}


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics(serve: Serve) -> Samples:
    """Every sample of /metrics: (name, its labels) -> value."""
    out: Samples = {}
    for line in serve.metrics().splitlines():
        m = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if m and not line.startswith("#"):
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[m.group(1), labels] = float(m.group(3))
    return out


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def polled(serve: Serve, sample: tuple[str, frozenset[tuple[str, str]]], after: float,
           timeout: float = 30) -> Samples:
    """/metrics once ``sample`` has moved past ``after`` (a poll finished since)."""
    def check() -> Samples | None:
        serve.reload()
        m = metrics(serve)
        return m if m.get(sample, after) > after else None
    return wait_for(check, timeout, f"{sample} to pass {after}", interval=0.5)


def test_runc_wrote_the_kubelets_cpusets(node: Any) -> None:
    """The cgroups and the processes in them run where the kubelet's CPU manager and
    PodResources say: the exclusive CPU 1 for the Guaranteed container, the rest (the
    reserved CPU 0, in the shared pool as it is not strict) for the BestEffort one."""
    kernel = written(node)
    state = KubeletCPUState.read(node)
    uid = uids(node)
    assert state.policy == "static" and state.default == {0}
    assert state.containers[uid[PINNED]] == {"app": {1}}
    assert kernel[PINNED].cpuset == {1} and kernel[PINNED].allowed() == {frozenset({1})}
    assert kernel[SHARED].cpuset == {0} and kernel[SHARED].allowed() == {frozenset({0})}
    assert podresources(node) == {(PINNED, "app"): {1}, (SHARED, "web"): frozenset()}


def test_exporter_reads_the_cgroups_runc_wrote(node: Any, serve: Serve) -> None:
    """serve's ledger is the kubelet's, each container's enforced_cpus is its cgroup's
    cpuset as read here, no anomaly, and the cgroup source is up with no drift."""
    def read() -> dict[str, Any] | None:
        serve.reload()
        return serve.ledger()
    ledger, _ = agreeing(read, node, RUNNING)
    kernel = written(node)
    enforced = {c["pod"]: cpus(c["enforced_cpus"]) for c in ledger["containers"]}
    assert enforced == {name: w.cpuset for name, w in kernel.items()}
    assert anomalies(ledger) == set()
    m = metrics(serve)
    assert m[key("podres_source_up", source="cgroup")] == 1
    assert m[key("podres_source_up", source="procstat")] == 1
    drift = {dict(labels)["kind"]: v for (name, labels), v in m.items()
             if name == "podres_cpuset_drift"}
    assert drift and not any(drift.values()), drift


def test_busy_per_pool_and_usage_follow_the_kernel(node: Any, serve: Serve) -> None:
    """The spinning container's own CPU time, as the exporter publishes it, lies between
    two readings of its cgroup's cpuacct.usage taken around the poll; the node_exclusive
    pool (CPU 1, its CPU) is credited at least that time between two polls."""
    pinned = written(node)[PINNED]
    usage = key("podres_container_cpu_usage_seconds_total", namespace="default", pod=PINNED,
                container="app")
    pool = key("podres_cpu_pool_busy_seconds_total", pool="node_exclusive")
    first = polled(serve, usage, 0.0)
    time.sleep(3)
    before = pinned.usage()
    # A value first seen after this scrape may come from a poll that read the cgroup before
    # `before`; the poll after that one began after the scrape, so it read it after.
    newer = polled(serve, usage, metrics(serve)[usage])
    second = polled(serve, usage, newer[usage])
    after = pinned.usage()
    assert before <= second[usage] <= after, (before, second[usage], after)
    spun = second[usage] - first[usage]
    credited = second[pool] - first[pool]
    assert spun > 1.0, spun  # the sleeper spins: it used most of the 3 s
    # /proc/stat counts in 10 ms ticks; the pool's CPU also ran the kubelet's odd thread.
    assert credited >= 0.9 * spun, (credited, spun)


def test_a_cpuset_changed_by_hand_is_drift(node: Any, serve: Serve) -> None:
    """Widening the BestEffort container's cpuset over the exclusive CPU (as a tuning daemon
    might): the kernel lets its process onto CPU 1, the kubelet leaves it so (its reconcile
    loop rewrites only what it last wrote differently), and the exporter reports
    cpuset_drift for it alone, with the enforced set; putting it back clears it."""
    shared = written(node)[SHARED]
    shared.cpuset_file.write_text("0-1")
    try:
        assert shared.allowed() == {frozenset({0, 1})}

        def drifting() -> dict[str, Any] | None:
            serve.reload()
            ledger = serve.ledger()
            return ledger if ledger and anomalies(ledger) else None
        ledger = wait_for(drifting, 30, "cpuset_drift", interval=0.5)
        assert anomalies(ledger) == {("cpuset_drift", SHARED)}
        enforced = {c["pod"]: cpus(c["enforced_cpus"]) for c in ledger["containers"]}
        assert enforced == {PINNED: {1}, SHARED: {0, 1}}
        m = metrics(serve)
        assert m[key("podres_cpuset_drift", kind="node_shared")] == 1
        assert m[key("podres_cpuset_drift", kind="node_exclusive")] == 0
        # Two reconcile periods (2 s each) later the kubelet has not put it back.
        time.sleep(5)
        assert shared.cpuset == {0, 1}
    finally:
        shared.cpuset_file.write_text("0")

    def cleared() -> bool:
        serve.reload()
        ledger = serve.ledger()
        return bool(ledger) and not anomalies(ledger)
    wait_for(cleared, 30, "the drift to clear", interval=0.5)
    assert os.path.exists(shared.cpuset_file)
