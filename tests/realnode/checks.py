"""The judge of the real-node scenarios: the kubelet's own ``cpu_manager_state``, read here
independently of the exporter's checkpoint parser, against the exporter's ledger.

The checkpoint is json-decoded in a few lines below (the kubelet's formats: the plain one, a
top-level ``podEntries``, or the content inside a ``data`` string). Minimal on purpose: it
reads only what the assertions compare, and a format it does not know fails loudly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from realnode.harness import Node, wait_for


def cpus(text: str | None) -> frozenset[int]:
    """A kernel CPU list ("0-2,7") as a set; empty or None is the empty set."""
    out: set[int] = set()
    for part in (text or "").split(","):
        if part.strip():
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


@dataclass(frozen=True)
class KubeletCPUState:
    """What the kubelet's CPU manager holds, as its checkpoint says."""

    policy: str
    default: frozenset[int]
    containers: dict[str, dict[str, frozenset[int]]]  # pod uid -> container -> CPUs
    pods: dict[str, frozenset[int]]  # pod uid -> its pod-level block

    @classmethod
    def read(cls, node: Node) -> KubeletCPUState:
        return cls.decode(node.checkpoint("cpu_manager_state"))

    @classmethod
    def decode(cls, raw: dict[str, Any]) -> KubeletCPUState:
        """The state a json-decoded ``cpu_manager_state`` holds (a live node's or a
        capture's, tests/data/realnode)."""
        if isinstance(raw.get("data"), str):
            raw = {**raw, **json.loads(raw["data"])}
        unknown = set(raw) - {"policyName", "defaultCpuSet", "entries", "podEntries",
                              "checksum", "data", "dataChecksum"}
        assert not unknown, f"a cpu_manager_state field this judge does not know: {unknown}"
        pods = {}
        for uid, entry in (raw.get("podEntries") or {}).items():
            pods[uid] = cpus(entry["cpuSet"] if isinstance(entry, dict) else entry)
        return cls(
            policy=raw["policyName"],
            default=cpus(raw.get("defaultCpuSet")),
            containers={uid: {n: cpus(s) for n, s in entry.items()}
                        for uid, entry in (raw.get("entries") or {}).items()},
            pods=pods,
        )


def uids(node: Node) -> dict[str, str]:
    """Pod name -> uid, from the kubelet's /pods (static pods' uids are the kubelet's)."""
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in node.pods()}


def agreeing(read: Callable[[], dict[str, Any] | None], node: Node, running: set[str],
             timeout: float = 30) -> tuple[dict[str, Any], KubeletCPUState]:
    """The first ledger ``read()`` gives that is the kubelet's (see
    :func:`assert_ledger_is_the_kubelets`) within ``timeout`` seconds; else the last
    disagreement. The exporter polls: it may lag the kubelet by a poll, never more."""
    deadline = time.monotonic() + timeout
    while True:
        ledger = read()
        try:
            if ledger is None:
                raise AssertionError("no ledger yet")
            return ledger, assert_ledger_is_the_kubelets(ledger, node, running)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def settled(node: Node, running: set[str], timeout: float = 30) -> None:
    """Waits until the checkpoint holds CPUs only for ``running`` pods. PodResources drops a
    removed pod at once, but the CPU manager frees its CPUs in its reconcile loop's stale
    state sweep (cpuManagerReconcilePeriod, 2 s here): in between, the exporter shows them
    free while the checkpoint still holds them (docs/real-node.md#findings)."""
    def check() -> bool:
        by_name = uids(node)
        want = {by_name[n] for n in running if n in by_name}
        state = KubeletCPUState.read(node)
        return set(state.containers) <= want and set(state.pods) <= want
    wait_for(check, timeout, f"the checkpoint to hold only {sorted(running)}")


def anomalies(ledger: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, pod) of every anomaly the ledger shows."""
    return {(a["kind"], a.get("pod") or "") for a in ledger["anomalies"]}


def assert_ledger_is_the_kubelets(ledger: dict[str, Any], node: Node,
                                  running: set[str]) -> KubeletCPUState:
    """The exporter's ledger equals the kubelet's CPU manager, CPU by CPU: the pods are the
    ``running`` ones (once the checkpoint has let go of every other, see :func:`settled`);
    each container shows the CPUs the checkpoint holds for it (none when it
    has no entry), each pod its pod-level block; the reserved and node-shared pools are the
    default set, and the pools add up to the node's CPUs."""
    settled(node, running)
    state = KubeletCPUState.read(node)
    assert_ledger_is(ledger, state, uids(node), running)
    return state


def assert_ledger_is(ledger: dict[str, Any], state: KubeletCPUState,
                     by_name: dict[str, str], running: set[str]) -> None:
    """:func:`assert_ledger_is_the_kubelets` once the kubelet's ``state`` and its pods'
    uids (``by_name``) are read: also what a capture's checkpoint implies of its ledger."""
    pods = {p["name"]: p for p in ledger["pods"]}
    containers = {(c["pod"], c["name"]): c for c in ledger["containers"]}
    assert set(pods) == running, (sorted(pods), sorted(running))
    for name in running:
        uid = by_name[name]
        held = state.containers.get(uid, {})
        mine = {n: cpus(c["cpus"]) for (p, n), c in containers.items() if p == name}
        for container, shown in mine.items():
            assert shown == held.get(container, frozenset()), (name, container, shown, held)
        assert set(held) <= set(mine), (name, held, mine)
        assert cpus(pods[name]["cpus"]) == state.pods.get(uid, frozenset()), (
            name, pods[name]["cpus"], state.pods.get(uid))
    # The pools: the default set is reserved + node shared; a container's own CPUs outside
    # any pod-level block are node exclusive; the blocks are the pod pools.
    pools = ledger["cpu_pools"]
    blocks = frozenset().union(*state.pods.values())
    own = frozenset().union(*(c for uid, entry in state.containers.items()
                              for c in entry.values()))
    why = (pools, state, ledger["containers"])
    assert pools["reserved"] + pools["node_shared"] == len(state.default), why
    assert pools["node_exclusive"] == len(own - blocks), why
    assert pools["pod_exclusive"] + pools["pod_shared"] + pools["pod_idle"] == len(blocks), why
    assert sum(pools.values()) == ledger["node"]["online_cpus"]
