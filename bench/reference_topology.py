"""The kubelet's reading of a machine, against the model's (docs/design.md#reference).

    python -m bench.reference_topology --version 1.37 --seed 1 --count 500

hands random machine descriptions to the kubelet's ``topology.Discover`` (the reference's
``topology`` op, reference/kubelet/topology_facts.go) and to the model, and compares what
each makes of them: Discover's error, or the counts (NumCPUs, NumCores, NumSockets,
NumNUMANodes, NumUncoreCache), CPUsPerCore, CPUsPerSocket, CPUsPerUncore, each CPU's core,
socket, NUMA node and uncore cache (and ``unknown CPU ID`` for ids not on the machine), and
the CPUs of every core, socket, NUMA node and uncore cache.

Two kinds of machine:

- the random differential's own topologies (``bench.reference.random_topology``), sent as
  its ``setup`` sends them; the model's side is the :class:`CPUTopology` the differential
  hands the model;
- cAdvisor's machine info given node by node and core by core, as cAdvisor would read a
  machine (sockets of unequal size, ``core_id`` restarting per socket, hybrid cores, uncore
  caches per NUMA node, per socket, none, or two), a share of them broken
  (:data:`BREAKAGES`: no CPU count, a core without threads, a thread twice in a core or on
  two cores, no sockets, a wrong CPU count, no nodes, ids missing). The model's side is the
  topology reader's path: ``reconciler.kubelet_topology.discover`` (the reader's model of
  Discover, with its refusals), then ``from_snapshot``.

Prints the disagreements, then ``topology 1.37: A/N agree``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.reference import (
    Case,
    Reference,
    random_topology,
    setup_request,
)
from bench.reference_options import options_main
from reconciler.allocator import CPUTopology, ModelConfig
from reconciler.allocator.topology import TopologyError, from_snapshot
from reconciler.kubelet_topology import DiscoverError, RawCore, RawNode, discover
from reconciler.snapshot import Topology

# What a broken machine info may carry; each names what cAdvisor would have misread.
BREAKAGES = ("no_cpu_count", "core_without_threads", "thread_twice_in_core",
             "thread_on_two_cores", "no_sockets", "cpu_count_low", "cpu_count_high",
             "no_nodes", "node_without_cores", "node_ids_gap", "node_id_twice",
             "socket_ids_gap", "two_uncore_caches")
# Share of the machines given as the random differential's topologies, and of the rest
# that are broken.
CASE_SHARE = 0.25
BROKEN_SHARE = 0.5
UNKNOWN = "unknown CPU ID: {}"


@dataclass(frozen=True)
class Machine:
    """A machine description: the differential's topology (``topo``), or cAdvisor's
    machine info (``nodes``, ``num_cpus``, ``num_sockets``) with what broke it."""

    nodes: tuple[RawNode, ...] = ()
    num_cpus: int = 0
    num_sockets: int = 0
    broken: tuple[str, ...] = ()
    topo: CPUTopology | None = None
    probe: tuple[int, ...] = ()
    # Each core with an uncore cache lists a second one after it (cache id + 100): the
    # kubelet reads the first only, and the model's RawCore keeps the first.
    two_caches: bool = False

    @property
    def kind(self) -> str:
        return "case" if self.topo is not None else ",".join(self.broken) or "raw"

    def request(self) -> dict[str, Any]:
        if self.topo is not None:
            base = Case(0, self.topo, ModelConfig(memory_policy="None"), {})
            cpus = setup_request(base)["setup"]["cpus"]
            return {"op": "topology", "machine": {"cpus": cpus, "probe": list(self.probe)}}
        nodes = [{"id": n.id, "cores": [
            {"id": i, "socket": c.socket, "threads": list(c.threads),
             "uncore": self._caches(c)} for i, c in enumerate(n.cores)]}
            for n in self.nodes]
        return {"op": "topology", "machine": {
            "num_cores": self.num_cpus, "num_sockets": self.num_sockets, "nodes": nodes,
            "probe": list(self.probe)}}

    def _caches(self, core: RawCore) -> list[int]:
        if core.uncore_cache is None:
            return []
        return [core.uncore_cache, core.uncore_cache + 100][:2 if self.two_caches else 1]

    def describe(self) -> str:
        if self.topo is not None:
            return (f"case topology: {len(self.topo.online)} CPUs, "
                    f"{len(self.topo.core_cpus)} cores, {len(self.topo.numa_cpus)} NUMA")
        cores = "; ".join(f"node {n.id}: " + " ".join(
            f"s{c.socket}{list(c.threads)}{'' if c.uncore_cache is None else f'L{c.uncore_cache}'}"
            for c in n.cores) for n in self.nodes)
        return (f"{self.kind}: NumCores {self.num_cpus}, NumSockets {self.num_sockets}, "
                f"{cores or 'no nodes'}")


@dataclass
class Facts:
    """What Discover's topology says, in one form for the kubelet and the model."""

    counts: tuple[int, int, int, int, int]  # CPUs, cores, sockets, NUMA nodes, uncore caches
    per: tuple[int, int, int]  # CPUsPerCore, CPUsPerSocket, CPUsPerUncore
    # Each CPU: (core, socket, NUMA node, uncore cache), or None: unknown CPU ID.
    cpus: dict[int, tuple[int, int, int, int] | None]
    groups: dict[str, dict[int, frozenset[int]]] = field(default_factory=dict)


@dataclass
class TopologyOutcome:
    seed: int
    machine: Machine
    kubelet: Facts | str  # Discover's error, or what it read
    differences: list[str]

    @property
    def agrees(self) -> bool:
        return not self.differences


# ---- random machines -----------------------------------------------------------------------


def random_raw(rng: random.Random) -> tuple[list[list[RawCore]], int]:
    """cAdvisor's nodes as it reads a healthy machine (one list of cores a node, node ids
    0..n-1), and its socket count."""
    sockets = rng.choice((1, 1, 2, 2, 3))
    nodes_per_socket = rng.choice((1, 1, 2))
    threads = rng.choice((1, 2, 2))
    hybrid = threads == 2 and rng.random() < 0.15  # E-cores with one thread
    l3 = rng.choice(("numa", "socket", "none", "pairs"))
    linux_order = rng.random() < 0.7
    # Unequal sockets: each socket's NUMA nodes have their own core count.
    shape = [[rng.randint(1, 4) for _ in range(nodes_per_socket)] for _ in range(sockets)]
    total_cores = sum(map(sum, shape))
    nodes: list[list[RawCore]] = []
    index = 0
    for s, per_node in enumerate(shape):
        for cores in per_node:
            node: list[RawCore] = []
            for i in range(cores):
                n_threads = 1 if hybrid and i % 2 else threads
                ids = tuple(t * total_cores + index if linux_order else index * threads + t
                            for t in range(n_threads))
                cache = {"numa": len(nodes), "socket": s, "none": None,
                         "pairs": index // 2}[l3]
                node.append(RawCore(ids, s, cache))
                index += 1
            nodes.append(node)
    return nodes, sockets


def _break(rng: random.Random, how: str, nodes: list[list[RawCore]], ids: list[int],
           counts: list[int]) -> None:
    """Break the machine info in place (``counts`` is [NumCores, NumSockets])."""
    if how == "no_cpu_count":
        counts[0] = 0
    elif how == "no_sockets":
        counts[1] = 0
    elif how == "cpu_count_low":
        counts[0] = rng.randint(1, max(1, counts[0] - 1))
    elif how == "cpu_count_high":
        counts[0] += rng.randint(1, 8)
    elif how == "no_nodes":
        nodes.clear()
    elif how == "node_without_cores" and nodes:
        nodes.insert(rng.randrange(len(nodes) + 1), [])
    elif how == "node_ids_gap" and ids:
        at = rng.randrange(len(ids))
        ids[at:] = [i + rng.randint(1, 3) for i in ids[at:]]
    elif how == "node_id_twice" and len(ids) > 1:
        at = rng.randrange(1, len(ids))
        ids[at] = ids[at - 1]
    elif how == "socket_ids_gap":
        shift = rng.randint(1, 3)
        for node in nodes:
            node[:] = [c._replace(socket=c.socket + shift if c.socket else 0) for c in node]
    else:
        _break_cores(rng, how, nodes)


def _break_cores(rng: random.Random, how: str, nodes: list[list[RawCore]]) -> None:
    """The breakages of one core's threads; none where no core has a thread left."""
    cores = [(n, i) for n, node in enumerate(nodes) for i, c in enumerate(node) if c.threads]
    if not cores:
        return
    n, i = rng.choice(cores)
    core = nodes[n][i]
    if how == "core_without_threads":
        nodes[n][i] = core._replace(threads=())
    elif how == "thread_twice_in_core":
        nodes[n][i] = core._replace(threads=(*core.threads, rng.choice(core.threads)))
    elif how == "thread_on_two_cores":
        n2, i2 = rng.choice([(a, b) for a, node in enumerate(nodes)
                             for b in range(len(node)) if (a, b) != (n, i)] or [(n, i)])
        other = nodes[n2][i2]
        at = rng.randrange(len(other.threads) + 1)
        nodes[n2][i2] = other._replace(threads=(*other.threads[:at],
                                                rng.choice(core.threads), *other.threads[at:]))


def random_machine(rng: random.Random) -> Machine:
    if rng.random() < CASE_SHARE:
        topo = random_topology(rng)
        top = max(topo.online)
        return Machine(topo=topo, probe=(top + 1, top + rng.randint(2, 64)))
    nodes, sockets = random_raw(rng)
    counts = [sum(len(c.threads) for node in nodes for c in node), sockets]
    broken: tuple[str, ...] = ()
    if rng.random() < BROKEN_SHARE:
        broken = tuple(rng.sample(BREAKAGES, rng.choice((1, 1, 2))))
    ids = list(range(len(nodes)))
    for how in broken:
        _break(rng, how, nodes, ids, counts)
    # A node inserted without cores takes the next id past the others.
    ids = ids[:len(nodes)] + [max(ids, default=-1) + 1 + i for i in range(len(nodes) - len(ids))]
    raw = tuple(RawNode(i, tuple(node)) for i, node in zip(ids, nodes, strict=True))
    seen = [t for n in raw for c in n.cores for t in c.threads]
    top = max(seen, default=-1)
    probe = (top + 1, top + rng.randint(2, 64), rng.randint(0, max(0, top)))
    return Machine(raw, counts[0], counts[1], broken, probe=probe,
                   two_caches="two_uncore_caches" in broken)


# ---- the two sides -------------------------------------------------------------------------


def model_topology(machine: Machine) -> CPUTopology:
    """The model's topology of the machine: the differential's, or the reader's path from
    cAdvisor's machine info (raises DiscoverError or TopologyError when it refuses)."""
    if machine.topo is not None:
        return machine.topo
    cpus, counts = discover(machine.nodes, machine.num_cpus, machine.num_sockets)
    return from_snapshot(Topology(cpus, (), counts=counts))


def model_facts(topo: CPUTopology, probe: Sequence[int]) -> Facts:
    counts = topo.kubelet_counts
    cpus: dict[int, tuple[int, int, int, int] | None] = {}
    for cpu in sorted({*topo.online, *probe}):
        info = topo.by_id.get(cpu)
        cpus[cpu] = None if info is None else (info.core, info.socket, info.numa_node,
                                               topo.uncore_of[cpu])
    return Facts(counts=tuple(counts),  # type: ignore[arg-type]
                 per=(topo.threads_per_core, topo.cpus_per_socket, topo.cpus_per_uncore),
                 cpus=cpus,
                 groups={"cores": dict(topo.core_cpus), "sockets": dict(topo.socket_cpus),
                         "numa_nodes": dict(topo.numa_cpus),
                         "uncore_caches": dict(topo.uncore_cpus)})


def kubelet_facts(answer: Mapping[str, Any]) -> Facts | str:
    """The reference's answer as :class:`Facts`, or Discover's error."""
    got = answer.get("topology")
    if not isinstance(got, Mapping):
        return f"no answer: {answer.get('error')}"
    if got.get("error"):
        return str(got["error"])
    cpus: dict[int, tuple[int, int, int, int] | None] = {}
    for c in got.get("cpus") or ():
        errors = c["errors"]
        if errors == [UNKNOWN.format(c["id"])] * 3:
            cpus[c["id"]] = None
        elif any(errors):
            return f"CPU {c['id']}: errors {errors}"
        else:
            cpus[c["id"]] = (c["core"], c["socket"], c["numa"], c["uncore"])
    groups = {kind: {int(k): frozenset(v) for k, v in rows.items()}
              for kind, rows in got["groups"].items()}
    for kind, ids in got["ids"].items():
        if kind != "cpus" and sorted(groups[kind]) != ids:
            return f"{kind}: ids {ids} beside groups {sorted(groups[kind])}"
    return Facts(counts=(got["num_cpus"], got["num_cores"], got["num_sockets"],
                         got["num_numa_nodes"], got["num_uncore_caches"]),
                 per=(got["cpus_per_core"], got["cpus_per_socket"], got["cpus_per_uncore"]),
                 cpus=cpus, groups=groups)


def differences(kubelet: Facts | str, machine: Machine) -> list[str]:
    """Where the model's reading of ``machine`` differs from the kubelet's."""
    try:
        topo = model_topology(machine)
    except DiscoverError as exc:
        if isinstance(kubelet, str):
            return [] if str(exc) == kubelet else [f"kubelet: {kubelet}; model: {exc}"]
        return [f"kubelet reads the machine; model refuses it: {exc}"]
    except TopologyError as exc:
        # Two machines Discover takes and the model refuses (docs/design.md#topology): one
        # whose nodes hold no CPU (the static policy then cannot reserve a CPU:
        # NewStaticPolicy refuses to start), and one with fewer CPUs than cores, whose
        # CPUsPerCore of 0 the static policy divides by.
        if isinstance(kubelet, Facts) and (
                not any(kubelet.cpus.values()) or kubelet.per[0] == 0):
            return []
        return [f"kubelet: {kubelet if isinstance(kubelet, str) else 'reads it'}; "
                f"model refuses: {exc}"]
    if isinstance(kubelet, str):
        return [f"kubelet: {kubelet}; model reads the machine"]
    model = model_facts(topo, machine.probe)
    out = []
    names = ("NumCPUs", "NumCores", "NumSockets", "NumNUMANodes", "NumUncoreCache",
             "CPUsPerCore", "CPUsPerSocket", "CPUsPerUncore")
    for name, k, m in zip(names, (*kubelet.counts, *kubelet.per), (*model.counts, *model.per),
                          strict=True):
        if k != m:
            out.append(f"{name}: kubelet {k}, model {m}")
    for cpu in sorted(kubelet.cpus.keys() | model.cpus.keys()):
        k_row, m_row = kubelet.cpus.get(cpu, "absent"), model.cpus.get(cpu, "absent")
        if k_row != m_row:
            out.append(f"CPU {cpu} (core, socket, NUMA, uncore): kubelet {k_row}, "
                       f"model {m_row}")
    for kind, rows in kubelet.groups.items():
        if rows != model.groups[kind]:
            out.append(f"{kind}: kubelet {_show(rows)}, model {_show(model.groups[kind])}")
    return out


def _show(rows: Mapping[int, frozenset[int]]) -> str:
    return "{" + ", ".join(f"{k}: {sorted(v)}" for k, v in sorted(rows.items())) + "}"


def run_one(ref: Reference, seed: int, version: str) -> TopologyOutcome:
    rng = random.Random(f"{version}:{seed}:topology")
    machine = random_machine(rng)
    kubelet = kubelet_facts(ref.request(machine.request()))
    return TopologyOutcome(seed, machine, kubelet, differences(kubelet, machine))


def run_topology(version: str, seed: int, count: int, ref: Reference
                 ) -> Iterator[TopologyOutcome]:
    for i in range(count):
        yield run_one(ref, seed * 1_000_003 + i, version)


def main(argv: Sequence[str] | None = None) -> int:
    return options_main(
        "python -m bench.reference_topology",
        "Random machine descriptions, healthy and broken, through the kubelet's "
        "topology.Discover and through the model: the same refusal, or the same counts, ids "
        "and groupings (docs/design.md#reference).", _run, argv, label="topology",
        count=500, what="machines")


def _run(args: argparse.Namespace, ref: Reference) -> int:
    agree = shown = 0
    kinds: Counter[str] = Counter()
    for outcome in run_topology(args.version, args.seed, args.count, ref):
        kinds[outcome.machine.kind.partition(",")[0] or "raw"] += 1
        if outcome.agrees:
            agree += 1
        elif shown < args.show:
            shown += 1
            print(f"disagreement (seed {outcome.seed}): {outcome.machine.describe()}")
            for line in outcome.differences[:4]:
                print(f"  {line}")
    print("(" + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) + ")")
    print(f"topology {args.version}: {agree}/{args.count} agree")
    return 0 if agree == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
