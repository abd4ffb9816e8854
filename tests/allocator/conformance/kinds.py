"""How each kind of case in the conformance data is run against the model."""

from __future__ import annotations

from typing import Any

from allocator.conformance.fixtures import TOPOLOGIES
from reconciler.allocator.take import _Acc, take_by_topology, take_distributed
from reconciler.cpuset import format_cpuset, parse_cpuset

Result = tuple[str, str]

# Kinds the model has no counterpart for, with the reason.
UNSUPPORTED_KINDS: dict[str, str] = {
    "accumulator_bookkeeping": "internal helper of the Go accumulator (isSatisfied/isFailed "
                               "after hand-fed takes)",
    "policy_start": "restored-checkpoint validation at start-up",
}

# Options the model implements; a case asking for another is unsupported.
SUPPORTED_OPTIONS = frozenset({"full-pcpus-only", "distribute-cpus-across-numa",
                               "strict-cpu-reservation"})


def missing_feature(body: dict[str, Any]) -> str:
    for option, value in body.get("options", {}).items():
        if option not in SUPPORTED_OPTIONS and value == "true":
            return f"policy option {option}"
    return ""


def _verdict(want: object, got: object) -> Result:
    if want == got:
        return "agree", ""
    return "disagree", f"want {want!r}, got {got!r}"


def free_units(body: dict[str, Any]) -> Result:
    topo = TOPOLOGIES[body["topology"]]
    acc = _Acc(topo, parse_cpuset(body["available"]), 0)
    got: dict[str, list[int]] = {}
    for level in body["expect"]:
        if level == "cpu":
            got[level] = [c for core in acc.cores() for c in sorted(topo.core_cpus[core]
                                                                     & acc.free)]
            continue
        units, order = {"socket": (topo.socket_cpus, acc.sockets),
                        "numa": (topo.numa_cpus, acc.numas),
                        "core": (topo.core_cpus, acc.cores)}[level]
        whole = [u for u in order() if units[u] <= acc.free]
        # The Go test of free sockets sorts before comparing.
        got[level] = sorted(whole) if level == "socket" and len(body["expect"]) == 1 \
            else whole
    return _verdict(body["expect"], got)


def _take_result(body: dict[str, Any], got: frozenset[int] | None) -> Result:
    want = body["expect"]
    if "error" in want:
        return ("agree", "") if got is None else ("disagree", f"took {format_cpuset(got)}")
    if got is None:
        return "disagree", "refused"
    return _verdict(format_cpuset(parse_cpuset(want["cpus"])), format_cpuset(got))


def take_packed(body: dict[str, Any]) -> Result:
    topo = TOPOLOGIES[body["topology"]]
    got = take_by_topology(topo, parse_cpuset(body["available"]), body["num_cpus"])
    return _take_result(body, got)


def take_distributed_case(body: dict[str, Any]) -> Result:
    topo = TOPOLOGIES[body["topology"]]
    got = take_distributed(topo, parse_cpuset(body["available"]), body["num_cpus"],
                           body.get("cpu_group_size", 1))
    return _take_result(body, got)


HANDLERS = {
    "free_units": free_units,
    "take_packed": take_packed,
    "take_distributed": take_distributed_case,
}
