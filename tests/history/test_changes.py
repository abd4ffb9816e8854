"""Pure properties of the ledger → rows reduction and the differences between two states."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.history.changes import clean, diff_states, state_of
from reconciler.cpuset import format_cpuset
from reconciler.ledger import Anomaly, ContainerEntry, CPUCell, Ledger, PoolCounts

NAMES = st.sampled_from(["a", "b", "c", "o'x", "%", "ü"])
ASSIGN = st.sampled_from(["node_exclusive", "pod_exclusive", "pod_shared", "node_shared"])


@st.composite
def ledgers(draw: st.DrawFn) -> Ledger:
    containers = draw(st.lists(st.builds(
        ContainerEntry, NAMES, NAMES, NAMES, st.booleans(), ASSIGN, ASSIGN,
        st.frozensets(st.integers(0, 15), max_size=4), st.integers(0, 1 << 34)),
        max_size=12))
    anomalies = draw(st.lists(st.builds(
        Anomaly, st.sampled_from(["unknown_cpu", "exclusive_overlap"]),
        st.none() | NAMES, st.none() | NAMES, st.none() | NAMES, st.sampled_from(["x", "y"])),
        max_size=4))
    return Ledger("n", 16, None, (), PoolCounts(node_shared=16), (), (), (),
                  tuple(containers), 0, 0, tuple(anomalies))


@settings(max_examples=300, deadline=None)
@given(ledgers(), ledgers())
def test_applying_the_diff_gives_the_new_state(a: Ledger, b: Ledger) -> None:
    old, new = state_of(a), state_of(b)
    d = diff_states(old.assignments, old.anomalies, new)
    rows = dict(old.assignments)
    for key in d.close:
        del rows[key]
    for row in d.open:
        assert row.key not in rows  # never two open intervals for one container
        rows[row.key] = row
    assert rows == new.assignments
    assert (set(old.anomalies) - set(d.resolve)) | set(d.raise_) == new.anomalies
    assert not diff_states(new.assignments, new.anomalies, new)  # unchanged: no rows


@given(ledgers())
def test_first_listing_of_a_duplicated_container_wins(a: Ledger) -> None:
    state = state_of(a)
    firsts: dict[tuple[str, str, str], ContainerEntry] = {}
    for c in a.containers:
        firsts.setdefault((c.namespace, c.pod, c.name), c)
    assert {k: v.assignment for k, v in state.assignments.items()} == \
        {k: v.assignment for k, v in firsts.items()}


@given(ledgers(), st.lists(st.none() | st.integers(0, 3), min_size=16, max_size=16))
def test_a_row_says_what_its_container_holds(a: Ledger, numa: list[int | None]) -> None:
    """Cpuset, count and NUMA nodes as the CPU map places them (CPUs of no known node
    leave none), an empty cpuset and no nodes for a container without CPUs; names and the
    assignment as listed."""
    a = replace(a, cpu_map=tuple(CPUCell(i, "node_shared", numa_node=n)
                                 for i, n in enumerate(numa)))
    state = state_of(a)
    firsts: dict[tuple[str, str, str], ContainerEntry] = {}
    for c in a.containers:
        firsts.setdefault((c.namespace, c.pod, c.name), c)
    for key, c in firsts.items():
        row = state.assignments[key]
        assert (row.cpuset, row.cpu_count) == (format_cpuset(c.cpus), len(c.cpus))
        assert row.numa_nodes == ",".join(map(str, sorted(
            {n for cpu in c.cpus if (n := numa[cpu]) is not None})))
        assert (row.assignment, row.memory_assignment, row.memory_bytes, row.sidecar) == (
            c.assignment, c.memory_assignment, c.memory_bytes, c.sidecar)


def test_clean() -> None:
    assert clean("a\x00b") == "a\ufffdb"
    assert len(clean("x" * 1000)) == 253
    assert clean("x" * 100, 64) == "x" * 64
