"""The memory manager's refusals of its own configuration against the model's
(bench/reference_memory_options.py, docs/design.md#reference): a table of configurations,
each with the kubelet's words, checked against the model without Go and against the memory
manager of every version; then random configurations, as CI runs them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.reference import Reference
from bench.reference_memory_options import run_memory_options, summary
from bench.reference_options import _setup, model_refusal
from reconciler.allocator import CPUTopology, ModelConfig, ModelError, NodeModel
from reconciler.allocator.config import kubelet_refusal
from reconciler.kube import KubeletConfig, kubelet_config_from_json
from reconciler.snapshot import CPUInfo

VERSIONS = ("1.35", "1.36", "1.37")
GiB = 2**30


def _cfg(policy: str = "Static", reserved: dict[int, str] | None = None,
         kube: str | None = "1Gi", system: str | None = None,
         eviction: str | None = None) -> KubeletConfig:
    """A static CPU policy (one CPU reserved) and the memory manager ``policy``;
    ``reserved``: reservedMemory's memory per NUMA node (default 512Mi on each of 0 and
    1); ``kube``, ``system``: kubeReserved and systemReserved memory; ``eviction``:
    evictionHard's memory.available."""
    reserved = {0: "512Mi", 1: "512Mi"} if reserved is None else reserved
    return KubeletConfig(
        cpu_manager_policy="static", memory_manager_policy=policy,
        topology_manager_policy="best-effort",
        kube_reserved=(("cpu", "1"), *((("memory", kube),) if kube else ())),
        system_reserved=(("memory", system),) if system else (),
        eviction_hard=(("memory.available", eviction),) if eviction else (),
        reserved_memory=tuple({"numaNode": n, "limits": {"memory": q}}
                              for n, q in sorted(reserved.items())))


def _topo() -> CPUTopology:
    cpus = tuple(CPUInfo(id=c, core=c, socket=0, numa_node=c // 2) for c in range(4))
    return CPUTopology(cpus=cpus, memory=((0, 8 * GiB), (1, 8 * GiB)))


NOT_EQUAL = ('the total amount "{}" of type "memory" is not equal to the value "{}" '
             "determined by Node Allocatable feature")
# (name, configuration, the kubelet's refusal or "" when it starts), on a machine of NUMA
# nodes 0 and 1 with 8 GiB each, every version alike. Sources: memorymanager/
# memory_manager.go (NewManager, getTotalMemoryTypeReserved, validateReservedMemory,
# convertReserved), policy_static.go (NewPolicyStatic), cm/node_container_manager_linux.go
# (GetNodeAllocatableReservation), cm/helpers.go (hardEvictionReservation),
# k8s.io/kubernetes v1.35.4-v1.37.2.
TABLE: list[tuple[str, KubeletConfig, str]] = [
    ("Static, reservedMemory adding up to kubeReserved", _cfg(), ""),
    ("Static, kube + system + eviction add up",
     _cfg(reserved={0: "1Gi", 1: "100Mi"}, kube="512Mi", system="512Mi", eviction="100Mi"),
     ""),
    ("None reads no reservation", _cfg("None", reserved={5: "1Gi"}, kube="3Gi"), ""),
    ("BestEffort is Windows' only", _cfg("BestEffort"),
     'policy "BestEffort" is not available for platform "linux"'),
    # Compared as written: the model reads /configz lowercased, the kubelet does not.
    ("static, lowercase", _cfg("static"), 'unknown policy: "static"'),
    ("a policy it does not know", _cfg("Dynamic"), 'unknown policy: "Dynamic"'),
    ("Static with no reservation at all", _cfg(reserved={}, kube=None),
     "[memorymanager] you should specify the system reserved memory"),
    ("Static with no reservedMemory", _cfg(reserved={}), NOT_EQUAL.format("0", "1Gi")),
    ("reservedMemory short of kubeReserved", _cfg(reserved={0: "512Mi"}),
     NOT_EQUAL.format("512Mi", "1Gi")),
    ("the eviction threshold left out of reservedMemory", _cfg(eviction="100Mi"),
     NOT_EQUAL.format("1Gi", "1124Mi")),
    ("reservedMemory on a NUMA node the machine lacks",
     _cfg(reserved={0: "512Mi", 3: "512Mi"}),
     "the reserved memory configuration references a NUMA node 3 that does not exist on "
     "this machine"),
]


@pytest.mark.parametrize(("name", "cfg", "refusal"), TABLE, ids=[t[0] for t in TABLE])
def test_the_model_refuses_what_the_memory_manager_refuses(name: str, cfg: KubeletConfig,
                                                           refusal: str) -> None:
    for version in VERSIONS:
        assert model_refusal(cfg, _topo(), version) == refusal, (name, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_table_is_the_kubelets(version: str, need_reference: Callable[[str], None]
                                   ) -> None:
    need_reference(version)
    with Reference(version) as ref:
        for name, cfg, refusal in TABLE:
            answer = ref.request(_setup(cfg, _topo(), version))
            got = "" if answer["ok"] else answer["error"].removeprefix("memory manager: ")
            assert got == refusal, name


def test_a_missing_numa_node_is_the_machines_to_refuse() -> None:
    """The configuration alone passes; the model node refuses it, as the kubelet's
    getTotalMemoryTypeReserved compares reservedMemory with the machine's NUMA nodes."""
    cfg = _cfg(reserved={0: "512Mi", 3: "512Mi"})
    assert kubelet_refusal(cfg) is None
    config = ModelConfig.from_kubelet_config(cfg)
    assert config.reserved_memory == ((0, "memory", 512 << 20), (3, "memory", 512 << 20))
    with pytest.raises(ModelError, match="NUMA node 3 that does not exist"):
        NodeModel(_topo(), config)
    # A node with memory and no CPU is the machine's too (cAdvisor lists it).
    memory_only = CPUTopology(cpus=_topo().cpus, memory=((0, GiB), (1, GiB), (3, GiB)))
    NodeModel(memory_only, config)
    # Under the None policy the memory manager reads no reservation.
    NodeModel(_topo(), ModelConfig.from_kubelet_config(_cfg("None", reserved={3: "1Gi"})))


def test_reservations_the_configuration_alone_cannot_decide() -> None:
    """evictionHard's memory.available as a share of the capacity depends on the machine's
    memory (GetThresholdQuantity): the model does not refuse on it. 0% and 100% are no
    threshold at all (parseThresholdStatement)."""
    assert kubelet_refusal(_cfg(eviction="5%")) is None
    assert kubelet_refusal(_cfg(eviction="100%")) is None
    assert kubelet_refusal(_cfg(eviction="0%")) is None


def test_reserved_memory_not_whole_bytes_is_refused() -> None:
    """convertReserved's AsInt64 (memory_manager.go): equal sums of a quantity that is no
    whole number of bytes still fail."""
    cfg = _cfg(reserved={0: "1500m"}, kube="1500m")
    assert kubelet_refusal(cfg) == "could not covert a variable of type Quantity to int64"


@pytest.mark.parametrize("entry", [{"numaNode": "0", "limits": {"memory": "1Gi"}},
                                   {"numaNode": 0, "limits": {"memory": "lots"}},
                                   {"numaNode": 0, "limits": ["memory"]}, "node0"])
def test_a_reserved_memory_entry_that_is_none_is_refused(entry: object) -> None:
    cfg = KubeletConfig(cpu_manager_policy="none", memory_manager_policy="Static",
                        kube_reserved=(("memory", "1Gi"),), reserved_memory=(entry,))
    refusal = kubelet_refusal(cfg)
    assert refusal and refusal.startswith("reservedMemory[0]"), refusal
    assert ModelConfig.from_kubelet_config(cfg).reserved_memory == ()


def test_eviction_hard_is_read_from_configz() -> None:
    body = {"kubeletconfig": {
        "memoryManagerPolicy": "Static", "kubeReserved": {"memory": "1Gi"},
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1124Mi"}}]}}
    cfg = kubelet_config_from_json(body)
    assert dict(cfg.eviction_hard)["memory.available"] == "100Mi"
    assert kubelet_refusal(cfg) is None  # the real node's configuration (realnode/harness.py)


def test_a_reservation_round_trips_through_configz() -> None:
    config = ModelConfig(reserved_cpu_m=1000, reserved_memory=((0, "memory", GiB),
                                                               (1, "memory", GiB // 2)))
    cfg = kubelet_config_from_json(config.to_configz())
    assert kubelet_refusal(cfg) is None
    assert ModelConfig.from_kubelet_config(cfg) == config


# A version's random configurations here, in CI too (a few seconds a version).
COUNT = 300


@pytest.mark.parametrize("version", VERSIONS)
def test_random_memory_configurations_agree(version: str,
                                            need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcomes = list(run_memory_options(version, 20261204, COUNT, ref))
    wrong = [o for o in outcomes if not o.agrees]
    assert not wrong, summary(outcomes)
    # Both sides must meet refusals and starts, and every kind of bad configuration.
    assert 0 < sum(bool(o.kubelet) for o in outcomes) < COUNT
    assert len({o.kind for o in outcomes}) >= 6, summary(outcomes)
