"""The kubelet's reading of a machine against the model's (bench/reference_topology.py,
docs/design.md#reference): a table of machine infos, healthy and broken, each with what the
kubelet's topology.Discover makes of it (checked against the reference of every version)
and the model's side without Go; then random machines through both."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.reference import Reference
from bench.reference_topology import (
    Facts,
    Machine,
    differences,
    kubelet_facts,
    model_facts,
    model_topology,
    run_topology,
)
from exporter.cli import main
from reconciler.allocator import TopologyError
from reconciler.kubelet_topology import DiscoverError, RawCore, RawNode


def _machine(nodes: dict[int, list[tuple[int, ...]]], num_cpus: int | None = None,
             sockets: int = 1) -> Machine:
    raw = tuple(RawNode(n, tuple(RawCore(t, 0, None) for t in cores))
                for n, cores in nodes.items())
    count = sum(len(t) for cores in nodes.values() for t in cores)
    return Machine(raw, count if num_cpus is None else num_cpus, sockets, ("table",),
                   probe=(9,))


# (name, machine, the kubelet's answer: Discover's error, or (CPUsPerCore, CPUsPerSocket,
# {cpu: core}) with None for the model's refusal). Source: pkg/kubelet/cm/cpumanager/
# topology/topology.go (Discover, getUniqueCoreID, CPUsPerCore, CPUsPerSocket),
# k8s.io/kubernetes v1.35.4, v1.36.3, v1.37.2; the answers were read from the reference.
TABLE: list[tuple[str, Machine, str | tuple[int, int, dict[int, int]] | None]] = [
    ("healthy, SMT", _machine({0: [(0, 2), (1, 3)]}), (2, 4, {0: 0, 1: 1, 2: 0, 3: 1})),
    ("no CPU count", _machine({0: [(0,)]}, num_cpus=0), "could not detect number of cpus"),
    ("a core without threads", _machine({0: [(0,), ()]}), "no cpus provided"),
    ("a thread twice in a core", _machine({0: [(0, 1, 0)]}), "cpus provided are not unique"),
    # The later core takes the CPU, and CPU 3 stays in the core named after CPU 1, where
    # the model once regrouped it into a core of its own (from_snapshot).
    ("a thread on two cores in two NUMA nodes", _machine({0: [(0,), (1, 3)], 1: [(2, 1)]}),
     (1, 5, {0: 0, 1: 1, 2: 1, 3: 1})),
    ("no sockets", _machine({0: [(0,), (1,)]}, sockets=0), (1, 0, {0: 0, 1: 1})),
    # Discover takes these; the model refuses them (docs/design.md#topology).
    ("no nodes", _machine({}, num_cpus=4), None),
    ("fewer CPUs than cores", _machine({0: [(0,), (1,)]}, num_cpus=1), None),
]


def _model_answer(machine: Machine) -> str | tuple[int, int, dict[int, int]] | None:
    try:
        topo = model_topology(machine)
    except DiscoverError as exc:
        return str(exc)
    except TopologyError:
        return None
    facts = model_facts(topo, machine.probe)
    assert facts.cpus[9] is None
    return (facts.per[0], facts.per[1],
            {cpu: row[0] for cpu, row in facts.cpus.items() if row is not None})


@pytest.mark.parametrize(("name", "machine", "answer"), TABLE, ids=[t[0] for t in TABLE])
def test_the_model_reads_the_machine_as_the_kubelet(name: str, machine: Machine,
                                                    answer: object) -> None:
    assert _model_answer(machine) == answer


def test_a_topology_with_fewer_cpus_than_cores_is_refused_with_the_reason() -> None:
    with pytest.raises(TopologyError, match=r"1 CPUs on 2 cores: the kubelet's CPUsPerCore"):
        model_topology(TABLE[-1][1])


@pytest.mark.parametrize(("counts", "words"), [
    ({"cpus": 1, "cores": 2}, "1 CPUs on 2 cores: the kubelet's CPUsPerCore"),
    (None, "a topology needs at least one CPU"),
])
def test_a_topology_file_the_model_refuses_is_one_line(
        counts: dict[str, int] | None, words: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded topology.json with such counts, or with no CPU the kubelet reads, is an
    operator's file: one line, no traceback."""
    cpus = [{"id": c, "core": c, "socket": 0, "numa_node": 0} for c in range(2)]
    body: dict[str, object] = {"cpus": cpus, "memory": [{"numa_node": 0, "bytes": 2**33}]}
    if counts is None:
        body = {"cpus": [], "kernel": {"online": "0-1", "numa_nodes": [0]}}
    else:
        body["counts"] = {"sockets": 1, "numa_nodes": 1, "uncore_caches": 1, **counts}
    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps(body))
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
                   "  - {name: c, image: x, resources: {limits: {cpu: '1', memory: 1Gi}}}\n")
    assert main(["plan", "-f", str(pod), "--topology", str(topo)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_the_table_is_the_kubelets(version: str, need_reference: Callable[[str], None]
                                   ) -> None:
    need_reference(version)
    with Reference(version) as ref:
        for name, machine, answer in TABLE:
            kubelet = kubelet_facts(ref.request(machine.request()))
            assert differences(kubelet, machine) == [], name
            if isinstance(answer, str):
                assert kubelet == answer, name
            elif answer is not None:
                assert isinstance(kubelet, Facts)
                cores = {cpu: row[0] for cpu, row in kubelet.cpus.items() if row}
                assert (kubelet.per[0], kubelet.per[1], cores) == answer, name
                assert kubelet.cpus[9] is None, name


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_random_machines_agree(version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcomes = list(run_topology(version, 20261205, 500, ref))
    bad = [f"seed {o.seed}: {o.machine.describe()}: {o.differences[:2]}"
           for o in outcomes if not o.agrees]
    assert not bad, bad[:3]
    # The mix reaches each of Discover's refusals, and both machines it takes that the
    # model refuses.
    refusals = {o.kubelet for o in outcomes if isinstance(o.kubelet, str)}
    assert refusals == {"could not detect number of cpus", "no cpus provided",
                        "cpus provided are not unique"}
    read = [o.kubelet for o in outcomes if isinstance(o.kubelet, Facts)]
    assert any(not any(f.cpus.values()) for f in read)
    assert any(f.per[0] == 0 and any(f.cpus.values()) for f in read)
    assert any(o.machine.topo is not None for o in outcomes)


@pytest.mark.parametrize("module", ["bench.reference", "bench.reference_race",
                                    "bench.reference_topology", "bench.reference_options",
                                    "bench.reference_memory_options"])
@pytest.mark.parametrize(("count", "said"), [("0", "must be at least 1"),
                                             ("-3", "must be at least 1"),
                                             ("x", "invalid int value: 'x'")])
def test_a_count_below_one_is_refused_in_one_line(
        module: str, count: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A random run of no cases agreed "0/0" (and "0/-3") and exited 0. Every runner beside
    the differential reads --count alike (bench.reference.at_least_one)."""
    import importlib

    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--count", count])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"argument --count: {said}")
