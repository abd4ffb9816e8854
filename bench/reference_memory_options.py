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
node). The model checks none of these yet: its refusals are open (the report's list).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from bench.reference import VERSIONS, Reference, ReferenceUnavailable, random_topology
from bench.reference_options import _setup
from reconciler.allocator import CPUTopology, ModelConfig, ModelError, NodeModel
from reconciler.allocator.config import kubelet_refusal
from reconciler.kube import KubeletConfig

MiB = 2**20
# Names as /configz carries them: the kubelet's NewManager compares them as written.
POLICIES = ("Static", "Static", "Static", "None", "BestEffort", "static", "Dynamic")


@dataclass
class MemoryOptionsOutcome:
    seed: int
    kubelet: str  # "" when the kubelet starts, else its error
    model: str  # "" when the model starts, else its refusal
    config: KubeletConfig
    kind: str  # what was drawn, for the report

    @property
    def agrees(self) -> bool:
        return bool(self.kubelet) == bool(self.model)


def random_memory_config(rng: random.Random, topo: CPUTopology
                         ) -> tuple[KubeletConfig, dict[int, int], int | None, str]:
    """A memory-manager configuration, good or bad: the KubeletConfig /configz would carry,
    the reservedMemory per NUMA node, the node-allocatable memory reservation when it
    differs from their sum, and a word for what is wrong with it ("" when nothing is)."""
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
        reserved_memory=tuple({"numaNode": n, "limits": {"memory": str(b)}}
                              for n, b in sorted(reserved.items())))
    return cfg, reserved, total, kind


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


def run_one(ref: Reference, seed: int, version: str) -> MemoryOptionsOutcome:
    rng = random.Random(f"{version}:{seed}:memory-options")
    topo = random_topology(rng)
    cfg, reserved, total, kind = random_memory_config(rng, topo)
    req = _setup(cfg, topo, version)
    req["setup"].update({
        "memory_policy": cfg.memory_manager_policy,
        "reserved_memory": {str(n): b for n, b in reserved.items()},
        "reserved_memory_total": "" if total is None else str(total),
    })
    answer = ref.request(req)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reference_memory_options",
        description="Random memory-manager configurations, good and bad, through the real "
                    "kubelet's managers and through the model: both must start, or both "
                    "refuse (docs/design.md#reference).")
    parser.add_argument("--version", default="1.37", choices=sorted(VERSIONS))
    parser.add_argument("--seed", type=int, default=1, help="first random seed (default 1)")
    parser.add_argument("--count", type=int, default=300,
                        help="random configurations (default 300)")
    args = parser.parse_args(argv)
    try:
        ref = Reference(args.version)
    except ReferenceUnavailable as exc:
        print(f"memory options {args.version}: unavailable: {exc}", file=sys.stderr)
        return 2
    with ref:
        outcomes = list(run_memory_options(args.version, args.seed, args.count, ref))
    for line in summary(outcomes):
        print(f"  {line}")
    agree = sum(o.agrees for o in outcomes)
    print(f"memory options {args.version}: {agree}/{args.count} agree")
    return 0 if agree == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
