"""The pool vocabulary, defined here once: the CPU pools every online CPU lands in, the
assignments a container can have, and the memory pools (docs/design.md#cpu-pools,
docs/design.md#classification)."""

from __future__ import annotations

from typing import Literal, get_args

CPUPool = Literal["reserved", "node_shared", "node_exclusive", "pod_exclusive", "pod_shared",
                  "pod_idle"]
Assignment = Literal["node_exclusive", "pod_exclusive", "pod_shared", "node_shared"]
MemoryPool = Literal["node_exclusive", "pod_exclusive", "pod_shared"]

# Order matters: it is the order of JSON keys, metric label values and table columns.
CPU_POOLS: tuple[CPUPool, ...] = get_args(CPUPool)
ASSIGNMENTS: tuple[Assignment, ...] = get_args(Assignment)
MEMORY_POOLS: tuple[MemoryPool, ...] = get_args(MemoryPool)

# The assignments that hold CPUs of their own.
EXCLUSIVE: frozenset[Assignment] = frozenset(("node_exclusive", "pod_exclusive"))
