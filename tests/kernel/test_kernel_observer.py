"""The per-poll observer over the simulator's kernel: drift after the configured reconcile
period, usage counters whose rates equal the injected load, and the ways a source is off."""

from __future__ import annotations

import copy
import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from exporter import kernel
from exporter.kernel import KernelObserver, KernelOptions
from exporter.sim.cgroupfs import (
    ProcStatWriter,
    decorate_pod_list,
    model_cpu_holders,
    model_tree,
    per_cpu_load,
    pod_slice,
    write_cgroup_tree,
)
from exporter.sources.cgroup import pod_refs_from_pod_list
from kernel.helpers import (
    cid,
    container_dir_name,
    pod_dir,
    pod_list,
    small_ledger,
    write_tree,
)
from kernel.test_cgroup_source import three_pods
from kernel.test_sim_roundtrip import ledger_of, place

LOAD = {"reserved": 0.05, "node_shared": 0.4, "pod_exclusive": 0.8, "pod_shared": 0.6,
        "node_exclusive": 0.3, "pod_idle": 0.0}


def test_poll_after_poll(tmp_path: Path) -> None:
    node = place("1.37", "pod", 1)
    ledger, _ = ledger_of(node)
    state = node.state()
    pod_list = decorate_pod_list(state.pod_list)
    configz = copy.deepcopy(state.configz)
    configz["kubeletconfig"]["cpuManagerReconcilePeriod"] = "5s"  # type: ignore[index]
    # A sidecar of a pod with exclusive slices, set loose on every CPU: the kernel narrows
    # that to its pod's cpuset, the whole block, still more than its shared pool.
    victim = next(c for c in ledger.containers if c.assignment == "pod_shared"
                  and node.model.pods[(c.namespace, c.pod)].exclusive)
    key = (victim.namespace, victim.pod, victim.name)
    block = node.model.pods[(victim.namespace, victim.pod)].block
    online = node.model.topo.online
    write_cgroup_tree(tmp_path / "cg", model_tree(node.model, drift={key: online}), online)
    writer = ProcStatWriter(tmp_path / "proc" / "stat", online, user_hz=100)
    load = per_cpu_load(model_cpu_holders(node.model), LOAD)
    observer = KernelObserver(KernelOptions(str(tmp_path / "cg"), "auto",
                                            str(tmp_path / "proc"), 100))

    first = observer.poll(ledger, pod_list, configz, 0.0)
    assert first.usage is None and first.drifts == () and not first.errors
    assert first.enforced.containers[key] == block
    # The daemon hands over only the pods' container references (not the /pods tree):
    # the same cgroups are read.
    refs_only = KernelObserver(KernelOptions(str(tmp_path / "cg"), "auto", "", 100))
    assert refs_only.poll(ledger, pod_refs_from_pod_list(pod_list), configz,
                          0.0).enforced == first.enforced
    writer.advance(4.0, load)
    second = observer.poll(ledger, pod_list, configz, 4.0)
    assert second.drifts == ()  # within the 5 s period
    writer.advance(4.0, load)
    third = observer.poll(ledger, pod_list, configz, 8.0)
    assert [a[:4] for a in third.anomalies] == [("cpuset_drift", *key)]
    assert third.drift_counts["pod_shared"] == 1 and sum(third.drift_counts.values()) == 1
    assert third.usage is not None
    pools = ledger.cpu_pools.to_json()
    for pool, seconds in third.usage.pool_seconds().items():  # 8 s at the injected load
        assert abs(seconds - LOAD[pool] * 8.0 * pools[pool]) <= 0.02 * 2 * pools[pool]
    exclusive = {k: v for k, v in third.usage.pod_seconds().items() if k[2] == "pod_exclusive"}
    assert exclusive and all(v > 0 for v in exclusive.values())

    write_cgroup_tree(tmp_path / "cg", model_tree(node.model), online)  # the fix
    fourth = observer.poll(ledger, pod_list, configz, 9.0)
    assert fourth.drifts == () and not observer.drift_state.pending


def test_expectations_are_worked_out_once_per_ledger_and_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What each cgroup should run on is a pass over every container: an unchanged node
    (the same ledger, the same kubelet settings) reuses it; a new ledger, or a change of
    the settings it depends on, works it out again, and the drifts follow."""
    node = place("1.37", "pod", 1)
    ledger, _ = ledger_of(node)
    state = node.state()
    pod_list = decorate_pod_list(state.pod_list)
    online = node.model.topo.online
    write_cgroup_tree(tmp_path / "cg", model_tree(node.model), online)
    worked_out: list[object] = []
    real = kernel.expected_cpusets

    def counted(of: Any, options: Any) -> Any:
        worked_out.append(of)
        return real(of, options)

    monkeypatch.setattr(kernel, "expected_cpusets", counted)
    observer = KernelObserver(KernelOptions(str(tmp_path / "cg"), "auto", None, 100))
    for now in (0.0, 1.0, 2.0):
        assert observer.poll(ledger, pod_list, state.configz, now).drifts == ()
    assert worked_out == [ledger]
    same_again = dataclasses.replace(ledger)  # equal, but another object: a recompute
    observer.poll(same_again, pod_list, state.configz, 3.0)
    assert len(worked_out) == 2 and worked_out[1] is same_again
    strict = copy.deepcopy(state.configz)
    strict["kubeletconfig"]["cpuManagerPolicyOptions"] = {  # type: ignore[index]
        "strict-cpu-reservation": "true"}
    observer.poll(same_again, pod_list, strict, 4.0)
    assert len(worked_out) == 3


def test_sources_off_and_failing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = place("1.37", "pod", 1)
    ledger, _ = ledger_of(node)
    pod_list = decorate_pod_list(node.state().pod_list)
    observer = KernelObserver(KernelOptions(str(tmp_path / "no-cgroup"), "auto",
                                            str(tmp_path / "no-proc"), 100))
    with caplog.at_level(logging.WARNING, logger="podres.cgroup"):
        report = observer.poll(ledger, pod_list, None, 0.0)
        again = observer.poll(ledger, None, None, 1.0)
    assert report.cgroup_off is not None and "not a cgroup mount" in report.cgroup_off
    assert again.cgroup_off is not None and "/pods" in again.cgroup_off
    assert list(report.errors) == [("procstat", "read")]
    assert report.usage is None and report.drifts == ()
    assert len(caplog.records) == 2  # one line per reason, not per poll
    quiet = KernelObserver(KernelOptions(None, "auto", None))
    off = quiet.poll(ledger, pod_list, None, 0.0)
    assert off.cgroup_off == "--cgroup.root unset" and not off.errors and off.usage is None


def test_unreadable_entries_are_one_source_error(tmp_path: Path) -> None:
    node = place("1.37", "pod", 1)
    ledger, _ = ledger_of(node)
    online = node.model.topo.online
    write_cgroup_tree(tmp_path, model_tree(node.model), online)
    victim = next(p for p in node.model.pods.values())
    pod_dir = tmp_path / pod_slice(victim.uid, victim.spec.qos)
    for f in pod_dir.glob("*.scope/cpuset.cpus*"):
        f.write_text("garbage\n")
    observer = KernelObserver(KernelOptions(str(tmp_path), proc_root=None))
    report = observer.poll(ledger, decorate_pod_list(node.state().pod_list), None, 0.0)
    assert set(report.errors) == {("cgroup", "read")}
    assert report.entry_errors and all(e.pod == victim.name for e in report.entry_errors)
    assert report.enforced.containers  # the other pods still read


# -- a restarted container: followed within the poll ----------------------------------------

def _restart(tmp_path: Path, pods: list[Any], which: tuple[int, int], new_id: str) -> None:
    """The runtime's side of a restart: the old scope goes, one under the new id comes."""
    pod = pods[which[0]]
    old = pod.containers[which[1]]
    d = pod_dir(tmp_path, "systemd", pod)
    shutil.rmtree(d / container_dir_name("systemd", old))
    old.id = new_id
    scope = d / container_dir_name("systemd", old)
    scope.mkdir()
    assert old.cpus is not None
    (scope / "cpuset.cpus.effective").write_text(old.cpus)


def test_restarted_container_is_found_again_within_the_poll(tmp_path: Path) -> None:
    pods = three_pods("containerd")
    write_tree(tmp_path, "v2", "systemd", pods)
    ledger = small_ledger()
    observer = KernelObserver(KernelOptions(str(tmp_path), proc_root=None))
    before = pod_list(pods)  # what the exporter's /pods says until its next refresh
    first = observer.poll(ledger, before, None, 0.0)
    assert not first.errors and first.enforced.containers[("prod", "web", "app")]

    _restart(tmp_path, pods, (0, 1), cid(9))
    after = pod_list(pods)
    asked: list[int] = []

    def refresh() -> Any:
        asked.append(1)
        return pod_refs_from_pod_list(after)

    second = observer.poll(ledger, before, None, 1.0, refresh)
    assert asked == [1]  # /pods read again at once, not at its next refresh
    assert not second.errors and not second.entry_errors
    assert second.enforced.containers[("prod", "web", "app")] == frozenset({2, 3})
    assert second.enforced == first.enforced
    # The next poll has the fresh /pods: nothing is missing, nothing is read twice.
    third = observer.poll(ledger, after, None, 2.0, refresh)
    assert asked == [1] and not third.errors


def test_a_stopped_container_is_not_looked_for(tmp_path: Path) -> None:
    """Crash-looping: the old cgroup is gone and /pods, read again, says ``waiting``."""
    pods = three_pods("containerd")
    write_tree(tmp_path, "v2", "systemd", pods)
    before = pod_list(pods)
    waiting = copy.deepcopy(before)
    status = waiting["items"][1]["status"]  # type: ignore[index]
    status["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    shutil.rmtree(pod_dir(tmp_path, "systemd", pods[1])
                  / container_dir_name("systemd", pods[1].containers[1]))
    observer = KernelObserver(KernelOptions(str(tmp_path), proc_root=None))
    for now in range(5):
        report = observer.poll(small_ledger(), before if now == 0 else waiting, None,
                               float(now), lambda: pod_refs_from_pod_list(waiting))
        assert not report.errors and report.cgroup_off is None, now
        assert ("prod", "batch", "worker") not in report.enforced.containers


def test_a_cgroup_missing_for_good_is_an_error_after_two_polls(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """/pods read again still names it (a layout the source misreads, a kubelet whose
    status lags): not an error at once, one after GONE_POLLS polls; /pods is not read again
    for it after that."""
    pods = three_pods("containerd")
    write_tree(tmp_path, "v2", "systemd", pods)
    shutil.rmtree(pod_dir(tmp_path, "systemd", pods[2]))
    body = pod_list(pods)
    asked: list[int] = []

    def refresh() -> Any:
        asked.append(1)
        return pod_refs_from_pod_list(body)

    observer = KernelObserver(KernelOptions(str(tmp_path), proc_root=None))
    reports = [observer.poll(small_ledger(), body, None, float(t), refresh) for t in range(4)]
    assert [bool(r.errors) for r in reports] == [False] + [True] * (kernel.GONE_POLLS - 1) \
        + [True] * (4 - kernel.GONE_POLLS)
    assert len(asked) == kernel.GONE_POLLS
    assert "no pod cgroup" in reports[-1].errors[("cgroup", "read")]
    # Without a way to read /pods again (no kubelet client), the same count holds.
    quiet = KernelObserver(KernelOptions(str(tmp_path), proc_root=None))
    assert [bool(quiet.poll(small_ledger(), body, None, float(t)).errors)
            for t in range(3)] == [False, True, True]
