"""The kubelet's refusals of its own configuration, against the model's (docs/design.md#reference).

    python -m bench.reference_options --version 1.37 --seed 1 --count 300

sets up random nodes through the reference with random raw configurations: CPU and topology
policy options with good and bad names and values (``maybe``, ``+9``, ``-3``, ``abc``), the
option gates on, off or left at their defaults, the ``none`` CPU policy with options, a CPU
policy name the kubelet does not know (``Static``), no CPU reservation, two sockets in one
NUMA node, ``prefer-closest-numa-nodes`` with and without NUMA distances. The kubelet
either creates its managers or refuses; the model must do the same, through the path the
exporter takes from ``/configz``: :func:`~reconciler.allocator.config.kubelet_refusal`, then
``ModelConfig.from_kubelet_config`` and the model node. Prints the disagreements, then
``options 1.37: A/N agree``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.reference import (
    OPTIONS,
    VERSIONS,
    Case,
    Reference,
    ReferenceUnavailable,
    at_least_one,
    random_distances,
    random_topology,
    setup_request,
)
from reconciler.allocator import CPUTopology, ModelConfig, ModelError, NodeModel
from reconciler.allocator.config import (
    allocatable_reservation,
    go_quantity,
    kubelet_refusal,
    reserved_memory_limits,
)
from reconciler.kube import KubeletConfig, parse_quantity
from reconciler.snapshot import CPUInfo

BOOLS = ("true", "false", "1", "0", "T", "False", "maybe", "yes", "")
NUMBERS = ("8", "12", "16", "+9", "08", "7", "-3", "0", "abc", "", "9.5")
GATES = ("CPUManagerPolicyAlphaOptions", "CPUManagerPolicyBetaOptions")
# What a gate left out of the configuration is (pkg/features/kube_features.go).
GATE_DEFAULTS = {"CPUManagerPolicyAlphaOptions": False, "CPUManagerPolicyBetaOptions": True}


@dataclass
class OptionsOutcome:
    seed: int
    kubelet: str  # "" when the kubelet starts, else its error
    model: str  # "" when the model starts, else its refusal
    config: KubeletConfig

    @property
    def agrees(self) -> bool:
        return bool(self.kubelet) == bool(self.model)


def random_config(rng: random.Random) -> KubeletConfig:
    """A raw kubelet configuration, good or bad, as ``/configz`` would carry it."""
    # The kubelet's configuration validation checks no CPU policy name: NewManager refuses.
    cpu_policy = rng.choices(("static", "none", "Static"), (0.82, 0.15, 0.03))[0]
    clean = rng.random() < 0.5
    # Half the configurations are well formed (known names, good values, the gates on), so
    # that the checks of valid options against each other and the machine are met too.
    cpu_options: dict[str, str] = {}
    for name in rng.sample(OPTIONS if clean else (*OPTIONS, "bogus-option"),
                           rng.choice((0, 1, 1, 2, 3))):
        cpu_options[name] = "true" if clean else rng.choice(("true", "true", "true", *BOOLS))
    topology_options: dict[str, str] = {}
    if rng.random() < 0.5:
        topology_options["prefer-closest-numa-nodes"] = rng.choice(("true", *BOOLS))
    if rng.random() < 0.5:
        topology_options["max-allowable-numa-nodes"] = rng.choice(NUMBERS)
    if rng.random() < 0.08:
        topology_options["bogus-topology-option"] = "true"
    if clean:
        topology_options = {k: v for k, v in topology_options.items()
                            if k != "bogus-topology-option" and v in ("true", "false", "8",
                                                                      "12", "16")}
    gates = tuple(sorted((g, clean or rng.random() < 0.5) for g in GATES
                         if clean or rng.random() < 0.7))
    roll = 1.0 if clean else rng.random()
    reserved = () if roll < 0.08 else (("cpu", "0"),) if roll < 0.12 else (("cpu", "1"),)
    return KubeletConfig(
        cpu_manager_policy=cpu_policy,
        cpu_manager_policy_options=tuple(sorted(cpu_options.items())),
        topology_manager_policy=rng.choice(("none", "best-effort", "restricted",
                                            "single-numa-node")),
        topology_manager_scope=rng.choice(("container", "pod")),
        topology_manager_policy_options=tuple(sorted(topology_options.items())),
        feature_gates=gates, kube_reserved=reserved)


def two_sockets_one_numa() -> CPUTopology:
    """Two sockets in one NUMA node, which align-by-socket refuses
    (ValidateStaticPolicyOptions)."""
    cpus = tuple(CPUInfo(id=c, core=c, socket=c // 2, numa_node=0) for c in range(4))
    return CPUTopology(cpus=cpus, memory=((0, 8 * 2**30),))


def model_refusal(cfg: KubeletConfig, topo: CPUTopology, version: str) -> str:
    """The model's refusal of ``cfg`` on ``topo`` ("" when it starts)."""
    refusal = kubelet_refusal(cfg, version)
    if refusal:
        return refusal
    try:
        config = replace(ModelConfig.from_kubelet_config(cfg), kubelet_version=version,
                         pod_level=False)
        NodeModel(topo, config)
    except ModelError as exc:
        return str(exc)
    return ""


def _memory(cfg: KubeletConfig) -> dict[str, Any]:
    """The memory manager's part of a setup: its policy, reservedMemory's memory per NUMA
    node in bytes, and what ``GetNodeAllocatableReservation`` gives it of memory (the
    reference takes a number: a threshold that is a share of the capacity cannot be
    sent)."""
    terms = allocatable_reservation(cfg).get("memory", [])
    if terms is None:
        raise ValueError("evictionHard memory.available as a share: the reference takes bytes")
    reserved: dict[str, int] = {}
    for numa, name, value in reserved_memory_limits(cfg):
        if name == "memory":
            reserved[str(numa)] = reserved.get(str(numa), 0) + int(parse_quantity(value))
    return {"memory_policy": cfg.memory_manager_policy, "reserved_memory": reserved,
            # Written as the kubelet's sum writes it, so that its messages read as the model's.
            "reserved_memory_total": go_quantity(terms)}


def _setup(cfg: KubeletConfig, topo: CPUTopology, version: str) -> dict[str, Any]:
    base = Case(0, topo, ModelConfig(memory_policy="None", kubelet_version=version), {})
    req = setup_request(base)
    setup = req["setup"]
    setup.pop("reserved_cpus", None)
    setup.update({
        "cpu_policy": cfg.cpu_manager_policy,
        "cpu_policy_options": dict(cfg.cpu_manager_policy_options),
        "topology_policy": cfg.topology_manager_policy,
        "topology_scope": cfg.topology_manager_scope,
        "topology_options": dict(cfg.topology_manager_policy_options),
        "reserved_cpu": dict(cfg.kube_reserved).get("cpu", ""),
        **_memory(cfg),
        # Every gate explicit: the reference process keeps a gate's last setting.
        "feature_gates": {**GATE_DEFAULTS, **dict(cfg.feature_gates),
                          "PodLevelResources": True,
                          **({} if version == "1.35" else {"PodLevelResourceManagers": False})},
    })
    return req


def run_one(ref: Reference, seed: int, version: str) -> OptionsOutcome:
    rng = random.Random(f"{version}:{seed}:options")
    topo = two_sockets_one_numa() if rng.random() < 0.08 else random_topology(rng)
    if rng.random() < 0.7:
        topo = CPUTopology(topo.cpus, topo.memory, topo.uncore, topo.counts,
                           random_distances(rng, topo))
    cfg = random_config(rng)
    answer = ref.request(_setup(cfg, topo, version))
    kubelet = "" if answer.get("ok") else str(answer.get("error") or "refused")
    return OptionsOutcome(seed, kubelet, model_refusal(cfg, topo, version), cfg)


def run_options(version: str, seed: int, count: int, ref: Reference) -> Iterator[OptionsOutcome]:
    for i in range(count):
        yield run_one(ref, seed * 1_000_003 + i, version)


def options_main(prog: str, description: str,
                 run: Callable[[argparse.Namespace, Reference], int],
                 argv: Sequence[str] | None = None, *, label: str = "options",
                 count: int = 300, what: str = "configurations") -> int:
    """The command line of a random run beside the differential (this module's,
    bench/reference_memory_options.py's and bench/reference_topology.py's): the version,
    first seed, count of random ``what`` and how many disagreements to print, then
    ``run(args, ref)`` on that version's reference, whose result is the exit status; 2 when
    the reference cannot run."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", default="1.37", choices=sorted(VERSIONS))
    parser.add_argument("--seed", type=int, default=1, help="first random seed (default 1)")
    parser.add_argument("--count", type=at_least_one, default=count,
                        help=f"random {what} (default {count})")
    parser.add_argument("--show", type=int, default=5,
                        help="disagreements to print in full (default 5)")
    args = parser.parse_args(argv)
    try:
        ref = Reference(args.version)
    except ReferenceUnavailable as exc:
        print(f"{label} {args.version}: unavailable: {exc}", file=sys.stderr)
        return 2
    with ref:
        return run(args, ref)


def _run(args: argparse.Namespace, ref: Reference) -> int:
    agree = refused = shown = 0
    for outcome in run_options(args.version, args.seed, args.count, ref):
        refused += bool(outcome.kubelet)
        if outcome.agrees:
            agree += 1
        elif shown < args.show:
            shown += 1
            print(f"disagreement (seed {outcome.seed}): kubelet "
                  f"{outcome.kubelet or 'starts'}; model {outcome.model or 'starts'}\n"
                  f"  {outcome.config}")
    print(f"({refused} of {args.count} configurations refused by the kubelet)")
    print(f"options {args.version}: {agree}/{args.count} agree")
    return 0 if agree == args.count else 1


def main(argv: Sequence[str] | None = None) -> int:
    return options_main(
        "python -m bench.reference_options",
        "Random kubelet configurations, good and bad, through the real kubelet's CPU and "
        "topology managers and through the model: both must start, or both refuse "
        "(docs/design.md#reference).", _run, argv)


if __name__ == "__main__":
    sys.exit(main())
