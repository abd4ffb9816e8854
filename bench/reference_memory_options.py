"""The memory manager's refusals of its own configuration, against the model's
(docs/design.md#reference, docs/performance.md#coverage-of-the-kubelets-own-code).

    python -m bench.reference_memory_options --version 1.37 --seed 1 --count 300

sets up random nodes through the reference with random memory-manager configurations:
``memoryManagerPolicy`` Static, None, BestEffort (Windows only) or a name the kubelet does
not know (``static``, ``Dynamic``), ``reservedMemory`` per NUMA node, none, or on a NUMA node
the machine lacks, and a node-allocatable memory reservation (kubeReserved + systemReserved
+ the hard eviction threshold) equal to the reservedMemory's sum or not. The kubelet either
creates its managers or refuses; the model must do the same through the path the exporter
takes from ``/configz`` (``kubelet_refusal``, ``ModelConfig.from_kubelet_config``, the model
node). Prints one line per kind of configuration (how many agree, an example of a
disagreement), the first disagreements in full, then ``memory options 1.37: A/N agree``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bench.reference import Reference, random_topology
from bench.reference_options import OptionsOutcome, _setup, model_refusal, options_main
from reconciler.allocator import CPUTopology
from reconciler.kube import KubeletConfig

MiB = 2**20
# Names as /configz carries them: the kubelet's NewManager compares them as written.
POLICIES = ("Static", "Static", "Static", "None", "BestEffort", "static", "Dynamic")


@dataclass
class MemoryOptionsOutcome(OptionsOutcome):
    kind: str  # what was drawn, for the report


def random_memory_config(rng: random.Random, topo: CPUTopology) -> tuple[KubeletConfig, str]:
    """A memory-manager configuration, good or bad: the KubeletConfig /configz would carry
    (its kubeReserved memory the node allocatable's reservation, equal to reservedMemory's
    sum or not), and a word for what is wrong with it ("" when nothing is)."""
    policy = rng.choice(POLICIES)
    nodes = list(topo.numa_nodes)
    reserved = {n: rng.choice((256, 512, 1024)) * MiB for n in nodes}
    kind = "" if policy in ("Static", "None") else f"policy {policy}"
    roll = rng.random()
    if roll < 0.12:
        reserved = {}
        kind = kind or "no reservedMemory"
    elif roll < 0.24:
        reserved[max(nodes) + rng.randint(1, 3)] = 256 * MiB
        kind = kind or "reservedMemory on a missing NUMA node"
    total = None
    if rng.random() < 0.12:
        total = sum(reserved.values()) + rng.choice((-256, 512, 1024)) * MiB
        total = max(total, 0)
        kind = kind or "reservedMemory unequal to the allocatable reservation"
    cfg = KubeletConfig(
        cpu_manager_policy="static", memory_manager_policy=policy,
        topology_manager_policy=rng.choice(("none", "best-effort", "restricted",
                                            "single-numa-node")),
        topology_manager_scope=rng.choice(("container", "pod")),
        kube_reserved=(("cpu", "1"), ("memory", str(sum(reserved.values())
                                                    if total is None else total))),
        # Written in Mi, as the reference makes them (binary quantities), so that the
        # kubelet's messages print them as the model's do.
        reserved_memory=tuple({"numaNode": n, "limits": {"memory": f"{b // MiB}Mi"}}
                              for n, b in sorted(reserved.items())))
    return cfg, kind


def run_one(ref: Reference, seed: int, version: str) -> MemoryOptionsOutcome:
    rng = random.Random(f"{version}:{seed}:memory-options")
    topo = random_topology(rng)
    cfg, kind = random_memory_config(rng, topo)
    answer = ref.request(_setup(cfg, topo, version))
    kubelet = "" if answer.get("ok") else str(answer.get("error") or "refused")
    return MemoryOptionsOutcome(seed, kubelet, model_refusal(cfg, topo, version), cfg,
                                kind)


def run_memory_options(version: str, seed: int, count: int, ref: Reference
                       ) -> Iterator[MemoryOptionsOutcome]:
    for i in range(count):
        yield run_one(ref, seed * 1_000_003 + i, version)


def summary(outcomes: Sequence[MemoryOptionsOutcome]) -> list[str]:
    """One line per kind of configuration: how many, how many agree, and an example of a
    disagreement (its seed and both answers)."""
    kinds: dict[str, list[MemoryOptionsOutcome]] = {}
    for o in outcomes:
        kinds.setdefault(o.kind or "consistent", []).append(o)
    out = []
    for kind, got in sorted(kinds.items()):
        bad = [o for o in got if not o.agrees]
        line = f"{kind}: {len(got) - len(bad)}/{len(got)} agree"
        if bad:
            o = bad[0]
            line += (f"; e.g. seed {o.seed}: kubelet {o.kubelet or 'starts'}, model "
                     f"{o.model or 'starts'}")
        out.append(line)
    return out


def _run(args: argparse.Namespace, ref: Reference) -> int:
    outcomes = list(run_memory_options(args.version, args.seed, args.count, ref))
    for line in summary(outcomes):
        print(f"  {line}")
    for o in [o for o in outcomes if not o.agrees][:args.show]:
        print(f"disagreement (seed {o.seed}): kubelet {o.kubelet or 'starts'}; model "
              f"{o.model or 'starts'}\n  {o.config}")
    agree = sum(o.agrees for o in outcomes)
    print(f"memory options {args.version}: {agree}/{args.count} agree")
    return 0 if agree == args.count else 1


def main(argv: Sequence[str] | None = None) -> int:
    return options_main(
        "python -m bench.reference_memory_options",
        "Random memory-manager configurations, good and bad, through the real kubelet's "
        "managers and through the model: both must start, or both refuse "
        "(docs/design.md#reference).", _run, argv, label="memory options")


if __name__ == "__main__":
    sys.exit(main())
