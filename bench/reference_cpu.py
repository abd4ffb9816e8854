"""The CPU manager beyond placement, in the random differential (docs/design.md#reference):
what the kubelet's PodResources server answers after every step, the CPU manager's
reconcile loop, and the ``none`` CPU policy.

* **Answers.** The reference calls its PodResources v1 server's ``List`` and
  ``GetAllocatableResources`` in-process after every step, and the CPU manager's
  ``GetCPUAffinity`` (the cpuset a container is created with) and ``GetAllCPUs``. The
  exporter reads exactly these, so each is compared with what the model reports for the
  kubelet's version (reconciler/allocator/report.py) and the cpuset the model runs the
  container on.
* **Reconcile.** Now and then a step runs the CPU manager's reconcile loop with random pod
  statuses (running, waiting, terminated, no container ID, no state, a runtime that fails
  the update, or no status for the pod): afterwards each running container whose update did
  not fail must run on the cpuset the model gives it.
* **The none policy.** One workload in ten runs the ``none`` CPU policy: no exclusive CPUs,
  nothing allocatable, and a default set the kubelet leaves empty (containers are not
  pinned), which the model states as every online CPU.

Each part draws from a random stream of its own, so that the rest of a seed's case is as
it was.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from reconciler.allocator import NodeModel
from reconciler.allocator.report import report_pod
from reconciler.cpuset import format_cpuset, parse_cpuset
from reconciler.kube import PodSpec

if TYPE_CHECKING:
    from bench.reference import Case, Reference

NONE_POLICY_SHARE = 0.1
RECONCILE_SHARE = 0.35
# A long-running container's state in a reconcile, and how often (the rest: running).
# "update-fails": running, but the runtime fails the cpuset update (the loop retries next time).
_STATES = (("waiting", 0.06), ("terminated", 0.05), ("no-id", 0.04), ("no-state", 0.03),
           ("missing", 0.02), ("update-fails", 0.05), ("bad-id", 0.02))


def with_cpu_manager(case: Case, version: str, seed: int) -> Case:
    """The case with the ``none`` CPU policy now and then, and reconcile steps between the
    operations of the static one's."""
    rng = random.Random(f"{version}:{seed}:cpu-manager")
    if rng.random() < NONE_POLICY_SHARE:
        # The none policy refuses any option (NewNonePolicy).
        return replace(case, config=replace(case.config, cpu_policy="none",
                                            options=frozenset()))
    ops: list[tuple[str, PodSpec | None]] = []
    for op in case.ops:
        ops.append(op)
        if rng.random() < RECONCILE_SHARE:
            ops.append(("reconcile", None))
    return replace(case, ops=ops)


def expected_cpus(model: NodeModel, uid: str, name: str) -> frozenset[int]:
    """The cpuset the kubelet runs a long-running container on, as the model has it: its
    exclusive CPUs, its pod's shared pool, or the default set; empty under the ``none``
    policy, whose containers are not pinned."""
    if not model.config.static:
        return frozenset()
    for p in model.pods.values():
        if p.uid != uid:
            continue
        for c in p.containers:
            if c.name == name:
                return c.exclusive or (c.cpus if c.assignment == "pod_shared" else
                                       model.default_set)
    return model.default_set


def _ids(raw: Any) -> frozenset[int]:
    return frozenset(int(i) for i in raw or ())


def _fmt(cpus: frozenset[int]) -> str:
    return format_cpuset(cpus) or "-"


def compare_answers(model: NodeModel, state: Mapping[str, Any],
                    live: Mapping[str, PodSpec]) -> list[str]:
    """Differences between the PodResources answers of the kubelet and the model's report
    for the same kubelet version, and between ``GetCPUAffinity`` and the cpuset the model
    runs each long-running container on."""
    answers = state.get("answers")
    if answers is None:
        return []
    if answers.get("error"):
        return [f"answers: {answers['error']}"]
    out: list[str] = []
    allocatable = _ids(answers["allocatable"])
    if allocatable != model.allocatable:
        out.append(f"allocatable cpu_ids: kubelet {_fmt(allocatable)}, "
                   f"model {_fmt(model.allocatable)}")
    if _ids(answers["all_cpus"]) != model.topo.online:
        out.append(f"GetAllCPUs: kubelet {_fmt(_ids(answers['all_cpus']))}, "
                   f"model {_fmt(model.topo.online)}")
    # The reference's minor, not the model's configuration: a hand-made case may run a 1.37
    # model against 1.36, whose answers have no pod-level fields.
    style = ".".join(str(answers.get("version") or model.config.kubelet_version)
                     .split(".")[:2])
    placed = {p.uid: p for p in model.pods.values()}
    for uid, pod in live.items():
        said = answers["pods"].get(uid)
        p = placed.get(uid)
        if said is None or p is None:
            out.append(f"{pod.name}: listed by the kubelet {said is not None}, "
                       f"placed by the model {p is not None}")
            continue
        report = report_pod(p, style)
        if _ids(said["cpus"]) != frozenset(report.cpu_ids):
            out.append(f"{pod.name} List pod cpu_ids: kubelet {_fmt(_ids(said['cpus']))}, "
                       f"model {_fmt(frozenset(report.cpu_ids))}")
        modelled = {c.name: frozenset(c.cpu_ids) for c in report.containers}
        listed = said["containers"]
        if set(listed) != {c.name for c in pod.long_running}:
            out.append(f"{pod.name} List containers: kubelet {sorted(listed)}, "
                       f"spec {[c.name for c in pod.long_running]}")
        for name, ids in listed.items():
            if _ids(ids) != modelled.get(name, frozenset()):
                out.append(f"{pod.name}/{name} List cpu_ids: kubelet {_fmt(_ids(ids))}, "
                           f"model {_fmt(modelled.get(name, frozenset()))}")
        for c in pod.long_running:
            got = _ids(said["affinity"].get(c.name))
            want = expected_cpus(model, uid, c.name)
            if got != want:
                out.append(f"{pod.name}/{c.name} GetCPUAffinity: kubelet {_fmt(got)}, "
                           f"model {_fmt(want)}")
    return out


def random_statuses(rng: random.Random, live: Mapping[str, PodSpec]
                    ) -> dict[str, dict[str, str]]:
    """Each live pod's container states for a reconcile; a pod left out has no status."""
    out: dict[str, dict[str, str]] = {}
    for uid, pod in sorted(live.items()):
        if rng.random() < 0.08:
            continue
        states = {}
        for c in pod.long_running:
            roll, state = rng.random(), "running"
            for name, share in _STATES:
                if roll < share:
                    state = name
                    break
                roll -= share
            states[c.name] = state
        for c in pod.init_containers:
            if not c.sidecar:
                states[c.name] = rng.choice(("terminated", "terminated", "missing"))
        out[uid] = states
    return out


def reconcile_step(ref: Reference, model: NodeModel, live: Mapping[str, PodSpec],
                   rng: random.Random) -> list[str]:
    """One run of the CPU manager's reconcile loop: each running container afterwards runs
    on the cpuset the model gives it (a container the loop skips for an empty cpuset, which
    only strict-cpu-reservation can leave, is not compared)."""
    statuses = random_statuses(rng, live)
    answer = ref.request({"op": "reconcile", "statuses": statuses})
    if not answer.get("ok"):
        return [f"reconcile: {answer.get('error')}"]
    runs_on = answer["reconciled"]["cpus"]
    out: list[str] = []
    for uid, states in statuses.items():
        pod = live[uid]
        for c in pod.long_running:
            if states.get(c.name) != "running":
                continue
            want = expected_cpus(model, uid, c.name)
            got = parse_cpuset(runs_on.get(uid, {}).get(c.name, ""))
            if want and got != want:
                out.append(f"{pod.name}/{c.name} after reconcile runs on {_fmt(got)}, "
                           f"model {_fmt(want)}")
    return out


def compare_default(model: NodeModel, state: Mapping[str, Any]) -> list[str]:
    """The default set: under the ``none`` policy the kubelet never writes it (empty: no
    container is pinned), and the model's shared pool is every online CPU."""
    want = parse_cpuset(state["default"])
    if not model.config.static:
        if want or model.default_set != model.topo.online:
            return [f"none policy default set: kubelet {_fmt(want)} (expected empty), model "
                    f"{_fmt(model.default_set)} (expected every online CPU)"]
        return []
    if want != model.default_set:
        return [f"default set: kubelet {format_cpuset(want) or '-'}, "
                f"model {format_cpuset(model.default_set) or '-'}"]
    return []
