"""A model of the kubelet's CPU, memory and topology managers (docs/design.md#allocator).

Pure: no I/O, no clock. Used to drive the model-driven simulated kubelet, by ``plan`` and by
round-trip tests of the reconciler.
"""

from reconciler.allocator.config import parse_policy_options
from reconciler.allocator.model import (
    ContainerTruth,
    ModelConfig,
    ModelError,
    NodeModel,
    PodPlacement,
    Rejection,
    pod_guaranteed_cpus,
)
from reconciler.allocator.take import take_by_topology, take_distributed, take_with_hint
from reconciler.allocator.topology import CPUTopology, TopologyError, from_snapshot, from_spec

__all__ = [
    "CPUTopology",
    "ContainerTruth",
    "ModelConfig",
    "ModelError",
    "NodeModel",
    "PodPlacement",
    "Rejection",
    "TopologyError",
    "from_snapshot",
    "from_spec",
    "parse_policy_options",
    "pod_guaranteed_cpus",
    "take_by_topology",
    "take_distributed",
    "take_with_hint",
]
