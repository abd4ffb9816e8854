"""Properties of takeByTopology and the model's configuration plumbing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.strategies import topologies
from reconciler.allocator import (
    ModelConfig,
    ModelError,
    NodeModel,
    TopologyError,
    from_snapshot,
    from_spec,
    take_by_topology,
)
from reconciler.kube import kubelet_config_from_json


@settings(max_examples=200, deadline=None)
@given(topo=topologies(), data=st.data())
def test_take_is_a_subset_of_the_right_size_with_whole_cores(topo: tuple[str, int],
                                                               data: st.DataObject) -> None:
    spec, nps = topo
    t = from_spec(spec, numa_per_socket=nps)
    available = frozenset(data.draw(st.sets(st.sampled_from(sorted(t.online)))))
    n = data.draw(st.integers(0, len(t.online)))
    got = take_by_topology(t, available, n)
    if n > len(available):
        assert got is None
        return
    assert got is not None
    assert got <= available and len(got) == n
    assert take_by_topology(t, available, n) == got  # deterministic
    tpc = t.threads_per_core
    free_cores = [c for c in t.core_cpus.values() if c <= available]
    whole_taken = [c for c in t.core_cpus.values() if c <= got]
    assert len(whole_taken) >= min(n // tpc, len(free_cores))


def test_config_round_trips_through_configz() -> None:
    cfg = ModelConfig(topology_policy="restricted", scope="pod",
                      options=frozenset({"full-pcpus-only"}),
                      reserved_cpus=frozenset({0, 4}), pod_level=True)
    back = ModelConfig.from_kubelet_config(kubelet_config_from_json(cfg.to_configz()))
    assert back == cfg
    legacy = ModelConfig(reserved_cpu_m=1500, pod_level=False)
    again = ModelConfig.from_kubelet_config(kubelet_config_from_json(legacy.to_configz()))
    assert again == legacy


@pytest.mark.parametrize("kwargs", [
    {"topology_policy": "strict"}, {"scope": "node"}, {"cpu_policy": "dynamic"},
    {"memory_policy": "static"}, {"options": frozenset({"turbo"})},
])
def test_bad_config_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ModelError):
        ModelConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["", "2x2", "0x4x2", "1x4x2x1", "64x64x2"])
def test_bad_topology_spec(spec: str) -> None:
    with pytest.raises(TopologyError):
        from_spec(spec)


def test_reserved_must_be_online() -> None:
    with pytest.raises(ModelError):
        NodeModel(from_spec("1x2x1"), ModelConfig(reserved_cpus=frozenset({7})))


def test_topology_from_a_snapshot() -> None:
    t = from_spec("2x2x2", numa_per_socket=1)
    again = from_snapshot(t.to_snapshot())
    assert again.core_cpus == t.core_cpus
    assert again.numa_cpus == t.numa_cpus
    assert take_by_topology(again, again.online, 4) == frozenset({0, 1, 4, 5})
