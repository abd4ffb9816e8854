"""The model started from a hand-built checkpoint state, and containers removed from it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.strategies import topologies
from reconciler.allocator import ModelConfig, ModelError, NodeModel, PodPlacement, from_spec
from reconciler.kube import ContainerSpec, PodSpec, Resources

TOPO = from_spec("1x4x2")  # CPUs 0-7


@settings(max_examples=60, deadline=None)
@given(topologies(), st.data())
def test_removing_every_container_returns_every_cpu(shape: tuple[str, int],
                                                    data: st.DataObject) -> None:
    spec, nps = shape
    topo = from_spec(spec, numa_per_socket=nps)
    # Each CPU goes to the default set (owner 0) or to one of up to four containers.
    owners = data.draw(st.lists(st.integers(0, 4), min_size=len(topo.online),
                                max_size=len(topo.online)))
    state: dict[str, dict[str, set[int]]] = {}
    for cpu, owner in zip(sorted(topo.online), owners, strict=True):
        if owner:
            state.setdefault(f"pod{owner % 2}", {}).setdefault(f"c{owner}", set()).add(cpu)
    default = {cpu for cpu, owner in zip(sorted(topo.online), owners, strict=True)
               if not owner}
    model = NodeModel.from_checkpoint(topo, state, default)
    assert model.default_set == frozenset(default)
    freed: set[int] = set()
    for uid, containers in state.items():
        for name, cpus in containers.items():
            got = model.remove_container(uid, name)
            assert got == frozenset(cpus)
            freed |= got
    assert freed | default == set(topo.online)
    assert model.default_set == topo.online
    assert model.free == set(topo.online)
    assert not model.checkpointed
    assert model.pools()["node_shared"] == len(topo.online)


def test_remove_keeps_cpus_the_state_put_nowhere() -> None:
    model = NodeModel.from_checkpoint(TOPO, {"p": {"a": {1, 2, 3}}}, {4, 5, 6, 7})
    assert model.pools()["node_exclusive"] == 3
    assert model.remove_container("p", "a") == frozenset({1, 2, 3})
    # CPU 0 was in neither the default set nor a container: it stays out.
    assert model.default_set == frozenset(range(1, 8))


def test_removing_an_unknown_container_changes_nothing() -> None:
    model = NodeModel.from_checkpoint(TOPO, {"p": {"a": {1, 3, 5}}}, {2, 4, 6, 7})
    assert model.remove_container("p", "b") == frozenset()
    assert model.remove_container("q", "a") == frozenset()
    assert model.default_set == frozenset({2, 4, 6, 7})
    assert ("p", "a") in model.checkpointed


def test_reserved_cpus_return_to_the_default_set_but_are_never_handed_out() -> None:
    model = NodeModel.from_checkpoint(TOPO, {"p": {"a": {0, 4}}}, {1, 2, 3, 5, 6, 7},
                                      ModelConfig(reserved_cpus=frozenset({0})))
    model.remove_container("p", "a")
    assert model.default_set == TOPO.online
    assert model.free == set(range(1, 8))


def test_freed_cpus_can_be_admitted_again() -> None:
    model = NodeModel.from_checkpoint(TOPO, {"p": {"a": {1, 5}, "b": {2, 6}}}, {0, 3, 4, 7})
    model.remove_container("p", "a")
    big = Resources(6000, 6000, 1 << 30, 1 << 30)
    placed = model.admit(PodSpec("default", "big", "big",
                                 containers=(ContainerSpec("c", big),)))
    assert isinstance(placed, PodPlacement)
    assert placed.containers[0].exclusive == frozenset({0, 1, 3, 4, 5, 7})
    assert model.default_set == frozenset()


@pytest.mark.parametrize(("state", "default", "reason"), [
    ({"p": {"a": {1, 2}, "b": {2, 3}}}, {0}, "held twice"),
    ({"p": {"a": {1, 2}}}, {2, 3}, "held twice"),
    ({"p": {"a": {8}}}, {0}, "not online"),
    ({}, {0, 12}, "not online"),
])
def test_inconsistent_states_are_refused(state: dict[str, dict[str, set[int]]],
                                         default: set[int], reason: str) -> None:
    with pytest.raises(ModelError, match=reason):
        NodeModel.from_checkpoint(TOPO, state, default)
