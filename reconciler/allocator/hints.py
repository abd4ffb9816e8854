"""Topology hints: which NUMA-node masks can hold a request, and the topology manager's
merge of the CPU and memory providers' hints (docs/design.md#allocator)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

Hint = tuple[frozenset[int], bool]  # (NUMA-node mask, preferred)
MAX_HINT_NUMA_NODES = 8  # the topology manager's own default limit


class HintError(Exception):
    """The merged affinity does not meet the topology manager policy."""


def hint_masks(nodes: Sequence[int]) -> list[frozenset[int]]:
    """Every mask the topology manager considers, narrowest first. Past its NUMA-node limit
    it only considers single nodes and the whole machine."""
    if len(nodes) > MAX_HINT_NUMA_NODES:
        return [frozenset([n]) for n in nodes] + [frozenset(nodes)]
    return [frozenset(c) for k in range(1, len(nodes) + 1)
            for c in itertools.combinations(nodes, k)]


def narrowest_width(masks: Sequence[frozenset[int]], need: int, total: Mapping[int, int]
                    ) -> int | None:
    """How few NUMA nodes could hold ``need`` on an empty machine (``total`` per node)."""
    return min((len(m) for m in masks if sum(map(total.__getitem__, m)) >= need),
               default=None)


def provider_hints(candidates: Sequence[frozenset[int]], need: int, free: Mapping[int, int],
                   narrowest: int | None) -> list[Hint]:
    """The masks with room for ``need``; preferred when the mask is as narrow as the
    narrowest mask whose whole capacity, used or not, could hold ``need``."""
    free_of = free.get
    return [(m, len(m) == narrowest) for m in candidates
            if sum(free_of(n, 0) for n in m) >= need]


def merge(policy: str, providers: Sequence[list[Hint]], everything: frozenset[int]
          ) -> frozenset[int] | None:
    """The merged NUMA affinity: a mask every provider offers, preferred when every
    provider prefers it; the best is preferred first, then the narrowest, then the lowest
    nodes. ``None`` when the policy does not align; :class:`HintError` when the policy
    refuses the best there is."""
    if policy == "none" or not providers:
        return None
    tables = [dict(hints) for hints in providers]
    candidates = [(not all(t[m] for t in tables), len(m), tuple(sorted(m)), m)
                  for m in tables[0] if all(m in t for t in tables[1:])]
    if candidates:
        not_preferred, _, _, mask = min(candidates, key=lambda c: c[:3])
        preferred = not not_preferred
    else:
        mask, preferred = everything, False
    if policy == "restricted" and not preferred:
        raise HintError("topology affinity error: no NUMA placement meets the restricted "
                        "policy")
    if policy == "single-numa-node" and (not preferred or len(mask) != 1):
        raise HintError("topology affinity error: the request fits no single NUMA node "
                        "(single-numa-node)")
    return mask
