"""Properties of the CPU manager policy options the model implements, and of their parsing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.strategies import topologies
from reconciler.allocator import (
    CPUTopology,
    ModelConfig,
    ModelError,
    NodeModel,
    from_spec,
    parse_policy_options,
    take_by_topology,
)
from reconciler.allocator.config import KNOWN_OPTIONS

TRUE = ["1", "t", "T", "TRUE", "true", "True"]
FALSE = ["0", "f", "F", "FALSE", "false", "False"]


@settings(max_examples=200, deadline=None)
@given(values=st.dictionaries(st.sampled_from(KNOWN_OPTIONS), st.sampled_from(TRUE + FALSE)))
def test_option_values_parse_as_go_booleans(values: dict[str, str]) -> None:
    assert parse_policy_options(values) == {k for k, v in values.items() if v in TRUE}


@settings(max_examples=100, deadline=None)
@given(name=st.text(min_size=1, max_size=20).filter(lambda n: n not in KNOWN_OPTIONS),
       value=st.sampled_from(TRUE))
def test_unknown_option_names_are_refused(name: str, value: str) -> None:
    with pytest.raises(ModelError, match="unsupported"):
        parse_policy_options({name: value, "full-pcpus-only": "true"})


@pytest.mark.parametrize("value", ["", "yes", "enabled!", "on", "2", " true"])
def test_non_boolean_values_are_refused(value: str) -> None:
    with pytest.raises(ModelError, match="not a boolean"):
        parse_policy_options({"full-pcpus-only": value})


@pytest.mark.parametrize("options", [
    {"full-pcpus-only", "distribute-cpus-across-cores"},
    {"distribute-cpus-across-numa", "distribute-cpus-across-cores"},
])
def test_options_the_kubelet_refuses_together(options: set[str]) -> None:
    with pytest.raises(ModelError, match="can not be used together"):
        ModelConfig(options=frozenset(options))


def test_align_by_socket_refusals() -> None:
    with pytest.raises(ModelError, match="single-numa-node"):
        ModelConfig(options=frozenset({"align-by-socket"}), topology_policy="single-numa-node")
    with pytest.raises(ModelError, match="can not be used together"):
        ModelConfig(options=frozenset({"prefer-align-cpus-by-uncorecache",
                                       "distribute-cpus-across-numa"}))


@settings(max_examples=150, deadline=None)
@given(topo=topologies(), data=st.data())
def test_spread_puts_each_cpu_on_its_own_core_while_cores_last(topo: tuple[str, int],
                                                               data: st.DataObject) -> None:
    spec, nps = topo
    t = from_spec(spec, numa_per_socket=nps)
    per_socket = len(next(iter(t.socket_cpus.values())))
    cores_per_socket = per_socket // t.threads_per_core
    # Below a NUMA node's worth, no whole unit is taken: only the spread applies.
    smallest_numa = min(len(c) for c in t.numa_cpus.values())
    n = data.draw(st.integers(1, min(cores_per_socket, smallest_numa - 1) or 1))
    got = take_by_topology(t, t.online, n, spread=True)
    assert got is not None and len(got) == n
    if n < smallest_numa:
        assert len({t.by_id[c].core for c in got}) == n
    packed = take_by_topology(t, t.online, n)
    assert packed is not None and len(packed) == n


@settings(max_examples=150, deadline=None)
@given(caches=st.integers(1, 4), per_cache=st.sampled_from([2, 4]), threads=st.integers(1, 2),
       data=st.data())
def test_uncore_take_fits_one_cache_when_one_has_room(caches: int, per_cache: int,
                                                      threads: int, data: st.DataObject
                                                      ) -> None:
    t0 = from_spec(f"1x{caches * per_cache}x{threads}")
    # Consecutive cores share a cache.
    t = CPUTopology(cpus=t0.cpus, uncore=tuple((c.id, c.core // per_cache) for c in t0.cpus))
    busy = data.draw(st.sets(st.sampled_from(sorted(t.online))))
    free = t.online - busy
    n = data.draw(st.integers(1, max(1, len(free))))
    got = take_by_topology(t, free, n, uncore=True)
    if n > len(free):
        assert got is None
        return
    assert got is not None and len(got) == n and got <= free
    cache_of = {cpu: t.by_id[cpu].core // per_cache for cpu in t.online}
    # Less than a cache's worth, and some cache's lowest free cores hold exactly that: the
    # request stays in one cache.
    if n < per_cache * threads and any(_free_whole_prefix(t, k, free, n) == n
                                       for k in t.uncore_cpus):
        assert len({cache_of[c] for c in got}) == 1


def _free_whole_prefix(t: CPUTopology, cache: int, free: frozenset[int], n: int) -> int:
    tpc = t.threads_per_core
    cores = sorted({t.by_id[c].core for c in t.uncore_cpus[cache] & free})
    cores = cores[:(n + tpc - 1) // tpc]
    cpus = [c for core in cores for c in t.core_cpus[core] & free]
    if n % 2 and tpc > 1 and len(cpus) > n:
        cpus = cpus[:-1]
    return len(cpus)


@settings(max_examples=150, deadline=None)
@given(topo=topologies(), data=st.data())
def test_align_by_socket_stays_on_the_hinted_sockets(topo: tuple[str, int],
                                                     data: st.DataObject) -> None:
    spec, nps = topo
    t = from_spec(spec, numa_per_socket=nps)
    model = NodeModel(t, ModelConfig(options=frozenset({"align-by-socket"})))
    node = data.draw(st.sampled_from(t.numa_nodes))
    socket = t.by_id[min(t.numa_cpus[node])].socket
    room = len(t.socket_cpus[socket])
    n = data.draw(st.integers(1, room))
    got = model.allocate_cpus(n, frozenset({node}))
    assert len(got) == n
    # The hint widens to its whole socket (packed there), never past it.
    assert {t.by_id[c].socket for c in got} == {socket}
    plain = NodeModel(t, ModelConfig()).allocate_cpus(n, frozenset({node}))
    assert len(plain & t.numa_cpus[node]) == min(n, len(t.numa_cpus[node]))
