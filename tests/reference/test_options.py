"""The kubelet's refusals of its own configuration against the model's (bench/reference_options.py,
docs/design.md#reference): a table of configurations each checked against the kubelet's CPU and
topology managers of every version, and the model's side of the cases the random configurations
found, without Go."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.reference import Reference
from bench.reference_options import _setup, model_refusal, run_options
from reconciler.allocator import CPUTopology, ModelConfig, NodeModel
from reconciler.allocator.config import kubelet_refusal
from reconciler.kube import KubeletConfig
from reconciler.snapshot import CPUInfo

R1 = (("cpu", "1"),)


def _cfg(cpu: str = "static", cpu_options: tuple[tuple[str, str], ...] = (),
         topology: str = "best-effort", topology_options: tuple[tuple[str, str], ...] = (),
         gates: tuple[tuple[str, bool], ...] = (), reserved: tuple[tuple[str, str], ...] = R1
         ) -> KubeletConfig:
    return KubeletConfig(cpu_manager_policy=cpu, cpu_manager_policy_options=cpu_options,
                         topology_manager_policy=topology,
                         topology_manager_policy_options=topology_options,
                         feature_gates=gates, kube_reserved=reserved)


def _topo(numa: int = 2, distances: bool = False) -> CPUTopology:
    cpus = tuple(CPUInfo(id=c, core=c, socket=0, numa_node=c // 2) for c in range(2 * numa))
    rows = tuple((n, tuple(10 if n == m else 20 for m in range(numa))) for n in range(numa))
    return CPUTopology(cpus=cpus, distances=rows if distances else ())


# (configuration, the kubelet refuses it) on a 2-NUMA node without NUMA distances, every
# version alike. Sources: cpumanager/policy_options.go (NewStaticPolicyOptions,
# CheckPolicyOptionAvailable), policy_none.go (NewNonePolicy), cpu_manager.go (NewManager),
# topologymanager/policy_options.go (NewPolicyOptions), topology_manager.go (NewManager),
# numa_info.go (NewNUMAInfo), k8s.io/kubernetes v1.35.4-v1.37.2.
TABLE: list[tuple[str, KubeletConfig, bool]] = [
    ("plain", _cfg(), False),
    ("none policy with an option", _cfg("none", (("full-pcpus-only", "false"),)), True),
    ("none policy, no reservation", _cfg("none", reserved=()), False),
    # Policy names are compared as written; the model reads /configz lowercased.
    ("CPU policy Static", _cfg("Static"), True),
    ("topology policy Best-Effort", _cfg(topology="Best-Effort"), True),
    ("static without a reservation", _cfg(reserved=()), True),
    ("static with a zero reservation", _cfg(reserved=(("cpu", "0"),)), True),
    ("unknown CPU option", _cfg(cpu_options=(("bogus", "true"),)), True),
    ("a value not a boolean", _cfg(cpu_options=(("full-pcpus-only", "maybe"),)), True),
    ("a Go boolean spelling", _cfg(cpu_options=(("full-pcpus-only", "T"),)), False),
    ("alpha option, gate left out", _cfg(cpu_options=(("align-by-socket", "true"),)), True),
    ("alpha option set false, gate left out",
     _cfg(cpu_options=(("distribute-cpus-across-cores", "false"),)), True),
    ("alpha option, gate on", _cfg(cpu_options=(("align-by-socket", "true"),),
                                   gates=(("CPUManagerPolicyAlphaOptions", True),)), False),
    ("beta option, gate left out",
     _cfg(cpu_options=(("distribute-cpus-across-numa", "true"),)), False),
    ("beta option, gate off", _cfg(cpu_options=(("distribute-cpus-across-numa", "true"),),
                                   gates=(("CPUManagerPolicyBetaOptions", False),)), True),
    ("unknown topology option", _cfg(topology_options=(("bogus", "1"),)), True),
    ("prefer-closest not a boolean",
     _cfg(topology_options=(("prefer-closest-numa-nodes", "maybe"),)), True),
    ("prefer-closest with no NUMA distances",
     _cfg(topology_options=(("prefer-closest-numa-nodes", "true"),)), True),
    ("max-allowable not a number", _cfg(topology_options=(("max-allowable-numa-nodes",
                                                           "abc"),)), True),
    ("max-allowable below 8", _cfg(topology_options=(("max-allowable-numa-nodes", "7"),)),
     True),
    ("max-allowable negative", _cfg(topology_options=(("max-allowable-numa-nodes", "-3"),)),
     True),
    ("max-allowable with a plus sign",
     _cfg(topology_options=(("max-allowable-numa-nodes", "+9"),)), False),
    # The none topology policy reads no option at all.
    ("none topology policy, bad options",
     _cfg(topology="none", topology_options=(("bogus", "x"), ("max-allowable-numa-nodes", "4"),
                                             ("prefer-closest-numa-nodes", "true"))), False),
]


@pytest.mark.parametrize(("name", "cfg", "refused"), TABLE, ids=[t[0] for t in TABLE])
def test_the_model_refuses_what_the_kubelet_refuses(name: str, cfg: KubeletConfig,
                                                    refused: bool) -> None:
    for version in ("1.35", "1.36", "1.37"):
        assert bool(model_refusal(cfg, _topo(), version)) == refused, (name, version)


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_the_table_is_the_kubelets(version: str, need_reference: Callable[[str], None]
                                   ) -> None:
    need_reference(version)
    with Reference(version) as ref:
        for name, cfg, refused in TABLE:
            answer = ref.request(_setup(cfg, _topo(), version))
            assert (not answer["ok"]) == refused, (name, answer.get("error"))


def test_prefer_align_by_uncorecache_was_beta_in_135() -> None:
    cfg = _cfg(cpu_options=(("prefer-align-cpus-by-uncorecache", "true"),),
               gates=(("CPUManagerPolicyBetaOptions", False),))
    assert kubelet_refusal(cfg, "1.35")
    assert kubelet_refusal(cfg, "1.37") is None


def test_the_none_topology_policy_ignores_its_options_in_the_model() -> None:
    """Found by the random configurations: the model refused a max-allowable-numa-nodes
    below 8, and prefer-closest-numa-nodes without distances, under the none policy."""
    cfg = _cfg(topology="none", topology_options=(("max-allowable-numa-nodes", "4"),
                                                  ("prefer-closest-numa-nodes", "true")))
    config = ModelConfig.from_kubelet_config(cfg)
    assert (config.max_numa_nodes, config.prefer_closest_numa) == (8, False)
    NodeModel(_topo(), ModelConfig(topology_policy="none", max_numa_nodes=4))
    NodeModel(_topo(), ModelConfig(topology_policy="none", prefer_closest_numa=True))


def test_max_allowable_numa_nodes_is_read_as_go_reads_a_number() -> None:
    assert _cfg(topology_options=(("max-allowable-numa-nodes", "+9"),)).max_numa_nodes() == 9
    assert _cfg(topology_options=(("max-allowable-numa-nodes", "-3"),)).max_numa_nodes() == -3
    assert _cfg(topology_options=(("max-allowable-numa-nodes", "9.5"),)).max_numa_nodes() \
        is None


def test_an_alpha_option_writes_its_gate_into_configz() -> None:
    from reconciler.kube import kubelet_config_from_json
    config = ModelConfig(options=frozenset({"align-by-socket"}), reserved_cpu_m=1000,
                         reserved_memory=((0, "memory", 2**30),))
    assert kubelet_refusal(kubelet_config_from_json(config.to_configz())) is None


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_random_configurations_agree(version: str, need_reference: Callable[[str], None]
                                     ) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcomes = list(run_options(version, 20261204, 60, ref))
    wrong = [o for o in outcomes if not o.agrees]
    assert not wrong, [(o.seed, o.kubelet, o.model) for o in wrong[:3]]
    # Both sides must meet refusals and starts, not one of them only.
    assert 5 < sum(bool(o.kubelet) for o in outcomes) < 55

