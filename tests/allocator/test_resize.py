"""In-place resize of a node-exclusive container's CPUs."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.helpers import ctr, pod
from allocator.strategies import topologies
from reconciler.allocator import ModelConfig, NodeModel, PodPlacement, Rejection, from_spec
from reconciler.cpuset import parse_cpuset as S

# The grow and shrink below are the upstream proposal, which no released static policy does;
# the released kubelets are the first two tests (docs/design.md#allocator).
PROPOSAL = ModelConfig(exclusive_cpu_resize="proposal")


def test_released_kubelets_refuse_a_guaranteed_cpu_resize() -> None:
    model = NodeModel(from_spec("1x4x2"))
    placed = model.admit(pod("p", ctr("app", "1")))
    assert isinstance(placed, PodPlacement)
    refused = model.resize("default", "p", "app", 3)
    assert isinstance(refused, Rejection)
    assert refused.reason == ('Infeasible: Resize is infeasible for Guaranteed Pods alongside '
                              'CPU Manager policy "static"')
    assert model.pods[placed.key] == placed


def test_with_the_alpha_gate_the_static_policy_keeps_the_cpus() -> None:
    model = NodeModel(from_spec("1x4x2"), ModelConfig(exclusive_cpu_resize="keep"))
    placed = model.admit(pod("p", ctr("app", "1")))
    assert isinstance(placed, PodPlacement)
    assert model.resize("default", "p", "app", 3) == placed
    assert placed.containers[0].exclusive == S("0")


def test_grow_keeps_the_cpus_and_takes_the_sibling_first() -> None:
    model = NodeModel(from_spec("1x4x2"), PROPOSAL)
    placed = model.admit(pod("p", ctr("app", "1")))
    assert isinstance(placed, PodPlacement)
    assert placed.containers[0].exclusive == S("0")
    grown = model.resize("default", "p", "app", 3)
    assert isinstance(grown, PodPlacement)
    assert grown.containers[0].exclusive == S("0,1,4")  # core 0 completed, then core 1
    assert model.free == set(S("2,3,5-7"))


def test_shrink_keeps_what_the_container_was_admitted_with() -> None:
    model = NodeModel(from_spec("1x4x2"), PROPOSAL)
    model.admit(pod("p", ctr("app", "2")))
    model.resize("default", "p", "app", 6)
    shrunk = model.resize("default", "p", "app", 3)
    assert isinstance(shrunk, PodPlacement)
    assert S("0,4") <= shrunk.containers[0].exclusive
    assert len(shrunk.containers[0].exclusive) == 3
    below = model.resize("default", "p", "app", 1)
    assert isinstance(below, Rejection) and "retained" in below.reason


def test_resize_refusals() -> None:
    model = NodeModel(from_spec("1x4x2"), ModelConfig(options=frozenset({"full-pcpus-only"}),
                                                      exclusive_cpu_resize="proposal"))
    model.admit(pod("p", ctr("app", "2"), ctr("side", "500m")))
    assert isinstance(model.resize("default", "p", "app", 3), Rejection)  # not whole cores
    assert isinstance(model.resize("default", "p", "app", 10), Rejection)  # too many
    assert isinstance(model.resize("default", "p", "side", 2), Rejection)  # shared
    assert isinstance(model.resize("default", "p", "nope", 2), Rejection)
    assert isinstance(model.resize("default", "gone", "app", 2), Rejection)


@settings(max_examples=120, deadline=None)
@given(topo=topologies(), take=st.sampled_from(["packed", "distribute-cpus-across-cores",
                                               "distribute-cpus-across-numa"]),
       seed=st.integers(0, 2**32 - 1))
def test_resizes_keep_sets_disjoint_and_release_returns_everything(
        topo: tuple[str, int], take: str, seed: int) -> None:
    spec, nps = topo
    options = frozenset() if take == "packed" else frozenset({take})
    model = NodeModel(from_spec(spec, numa_per_socket=nps),
                      ModelConfig(options=options, exclusive_cpu_resize="proposal"))
    start = set(model.free)
    rng = random.Random(seed)
    for i in range(6):
        model.admit(pod(f"p{i}", ctr("app", str(rng.randint(1, 3)))))
    for _ in range(12):
        if not model.pods:
            break
        key = rng.choice(sorted(model.pods))
        before = model.pods[key].containers[0].exclusive
        got = model.resize(*key, "app", rng.randint(1, 6))
        if isinstance(got, PodPlacement):
            after = got.containers[0].exclusive
            assert before <= after or after <= before  # grows around or shrinks within
        held = [p.held for p in model.pods.values()]
        assert sum(map(len, held)) == len(frozenset().union(*held))
        assert not frozenset().union(*held) & model.free
    for key in list(model.pods):
        model.release(*key)
    assert model.free == start
