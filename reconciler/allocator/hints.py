"""Topology hints: which NUMA-node masks can hold a request, and the topology manager's
merge of the CPU and memory providers' hints (docs/design.md#allocator)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

Hint = tuple[frozenset[int], bool]  # (NUMA-node mask, preferred)
MAX_HINT_NUMA_NODES = 8  # the topology manager's own default limit


@dataclass(frozen=True, slots=True)
class HintRecord:
    """One merge as the model made it, for ``explain``: the request, each provider's hints
    (the CPU manager's first when CPUs are asked, then the memory manager's) and the mask
    chosen, or the policy's refusal."""

    what: str  # "pod" or "container NAME"
    cpus: int
    memory: int
    providers: tuple[list[Hint], ...]
    chosen: frozenset[int] | None
    refusal: str | None
    # The device manager's hints, one list per resource asked (sorted by name; empty: no
    # possible affinity, or no preference for devices without topology); merged first.
    devices: tuple[tuple[str, list[Hint]], ...] = ()


class HintError(Exception):
    """The merged affinity does not meet the topology manager policy."""


class MaskTable:
    """Every NUMA-node mask the topology manager considers, narrowest first (past its
    NUMA-node limit only single nodes and the whole machine), laid out so that per-mask sums
    are one pass: each mask is an earlier mask plus one node."""

    def __init__(self, nodes: Sequence[int], limit: int = MAX_HINT_NUMA_NODES) -> None:
        if len(nodes) > limit:
            combos = [(n,) for n in nodes] + [tuple(nodes)]
        else:
            combos = [c for k in range(1, len(nodes) + 1)
                      for c in itertools.combinations(nodes, k)]
        # Within a width the kubelet's fitter mask is the smaller bitmask value
        # (bitmask.IsNarrowerThan): {1,2} before {0,3}.
        combos.sort(key=lambda c: (len(c), _bits(frozenset(c))))
        index = {c: i for i, c in enumerate(combos)}
        self.masks = [frozenset(c) for c in combos]
        self.width = [len(c) for c in combos]
        self.parent = [index.get(c[:-1], -1) for c in combos]
        self.last = [c[-1] for c in combos]
        # The whole-machine mask past the limit has no parent in the table.
        self._loose = [i for i, c in enumerate(combos) if len(c) > 1 and c[:-1] not in index]
        self.single = [i for i, w in enumerate(self.width) if w == 1]
        self.every = list(range(len(combos)))

    def sums(self, per_node: Mapping[int, int], upto: int | None = None) -> list[int]:
        """``per_node`` summed over every mask (or the first ``upto``)."""
        get = per_node.get
        out: list[int] = []
        end = len(self.masks) if upto is None else upto
        for parent, last in zip(self.parent[:end], self.last[:end], strict=True):
            out.append(get(last, 0) + (out[parent] if parent >= 0 else 0))
        for i in self._loose:
            if i < end:
                out[i] = sum(get(n, 0) for n in self.masks[i])
        return out

    def narrowest(self, need: int, total: Mapping[int, int]) -> int | None:
        """How few NUMA nodes could hold ``need`` on an empty machine (``total`` per node)."""
        sums = self.sums(total)
        return min((w for w, cap in zip(self.width, sums, strict=True) if cap >= need),
                   default=None)

    def hints(self, candidates: Sequence[int], need: int, free: Mapping[int, int],
              narrowest: int | None) -> list[Hint]:
        """The masks with room for ``need``; preferred when the mask is as narrow as the
        narrowest mask whose whole capacity, used or not, could hold ``need``."""
        sums = self.sums(free, max(candidates, default=-1) + 1)
        return [(self.masks[i], self.width[i] == narrowest) for i in candidates
                if sums[i] >= need]


Distance = Callable[[frozenset[int]], float]  # a mask's average NUMA distance


def merge(policy: str, providers: Sequence[list[Hint]], everything: frozenset[int],
          closest: Distance | None = None) -> frozenset[int] | None:
    """The merged NUMA affinity: a mask every provider offers, preferred when every
    provider prefers it; the best is preferred first, then the narrowest, then the smaller
    bitmask (with ``closest``, prefer-closest-numa-nodes: the shorter average distance
    before the smaller bitmask, except under single-numa-node). ``None`` when the policy
    does not align; :class:`HintError` when the policy refuses the best there is."""
    if policy == "none" or not providers:
        return None
    # Providers list masks narrowest first, the smaller bitmask first within a width.
    first = providers[0]
    if closest is not None and policy != "single-numa-node":
        first = sorted(first, key=lambda h: (len(h[0]), closest(h[0]), _bits(h[0])))
    others = [dict(hints) for hints in providers[1:]]
    mask, preferred = everything, False
    fallback: frozenset[int] | None = None
    for m, pref in first:
        if not all(m in t for t in others):
            continue
        if pref and all(t[m] for t in others):
            mask, preferred = m, True
            break
        if fallback is None:
            fallback = m
    else:
        if fallback is not None:
            mask = fallback
    if policy == "restricted" and not preferred:
        raise HintError(policy_refusal(policy))
    if policy == "single-numa-node" and (not preferred or len(mask) != 1):
        raise HintError(policy_refusal(policy))
    return mask


def policy_refusal(policy: str) -> str:
    """The model's words for a refusal by ``restricted`` or ``single-numa-node``."""
    if policy == "restricted":
        return "topology affinity error: no NUMA placement meets the restricted policy"
    return "topology affinity error: the request fits no single NUMA node (single-numa-node)"


# ---- the topology manager's own merge, as ported for device providers ------------------

KHint = tuple[frozenset[int] | None, bool]  # a hint whose mask may be nil (no preference)


def _bits(mask: frozenset[int]) -> int:
    return sum(1 << n for n in mask)


def _narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """``bitMask.IsNarrowerThan``: fewer nodes, else the lower nodes."""
    return len(a) < len(b) if len(a) != len(b) else _bits(a) < _bits(b)


def _closer(a: frozenset[int], b: frozenset[int], closest: Distance) -> bool:
    """``NUMAInfo.Closest`` picks ``a`` over ``b``: the narrower, else the shorter average
    distance, else the smaller bitmask."""
    if len(a) != len(b):
        return len(a) < len(b)
    da, db = closest(a), closest(b)
    return _bits(a) < _bits(b) if da == db else da < db


def _best(current: KHint | None, candidate: KHint, best_count: int,
          closest: Distance | None = None) -> KHint | None:
    """``HintMerger.compare``; masks compared by ``Narrowest``, or by ``Closest`` under
    prefer-closest-numa-nodes (``closest``)."""
    cmask, cpref = candidate
    assert cmask is not None
    if not cmask:
        return current
    if current is None:
        return candidate
    mask, pref = current
    assert mask is not None

    def narrowest() -> KHint:
        if cmask == mask:
            return current
        fitter = _narrower(cmask, mask) if closest is None else _closer(cmask, mask, closest)
        return candidate if fitter else current

    if pref != cpref:
        return candidate if cpref else current
    if pref:
        return narrowest()
    n, cn = len(mask), len(cmask)
    if n > best_count:
        return narrowest()
    if n == best_count:
        return current if cn != best_count else narrowest()
    if cn > best_count:
        return current
    if cn == best_count:
        return candidate
    if cn != n:
        return candidate if cn > n else current
    return narrowest()


def _filtered(policy: str, providers: Sequence[list[Hint] | None]) -> list[list[KHint]]:
    """``filterProvidersHints`` (and ``filterSingleNumaHints`` under single-numa-node)."""
    lists: list[list[KHint]] = []
    for given in providers:
        if given is None:
            lists.append([(None, True)])
        elif not given:
            lists.append([(None, False)])
        else:
            lists.append(list(given))
    if policy == "single-numa-node":
        lists = [[(m, p) for m, p in one if p and (m is None or len(m) == 1)]
                 for one in lists]
    return lists


def _max_of_narrowest(lists: list[list[KHint]]) -> int:
    """``maxOfMinAffinityCounts``: the widest of the providers' narrowest hints."""
    best = 0
    for one in lists:
        masks = [m for m, _ in one if m is not None]
        if masks:
            narrow = masks[0]
            for m in masks[1:]:
                if _narrower(m, narrow):
                    narrow = m
            best = max(best, len(narrow))
    return best


def _merged_permutations(lists: list[list[KHint]]) -> dict[KHint, None]:
    """``mergePermutation`` over every permutation, each distinct partial result walked
    once: (the AND of the masks so far, or ``None`` before any; preferred so far, which
    implies every mask so far equals that AND). Masks are bitmasks here, and the ANDs of
    every pair of a partial result and a hint are counted all at once (:func:`_and_counts`),
    so that long memory hint lists stay cheap."""
    none: set[bool] = {True}  # preferred flags of the partial results still without a mask
    pref: set[int] = set()  # masks of preferred partial results
    other: set[int] = set()  # masks of the others
    for one in lists:
        none, pref, other = _merge_step(none, pref, other, one)
    out: dict[KHint, None] = {(None, p): None for p in sorted(none, reverse=True)}
    for masks, p in ((pref, True), (other, False)):
        for m in sorted(masks):
            out[(frozenset(i for i in range(m.bit_length()) if m >> i & 1), p)] = None
    return out


def _merge_step(none: set[bool], pref: set[int], other: set[int], one: list[KHint]
                ) -> tuple[set[bool], set[int], set[int]]:
    """One more provider's hints merged into the partial results."""
    if len(one) == 1 and one[0][0] is None:
        if one[0][1]:
            return none, pref, other
        return ({False} if none else set()), set(), other | pref
    hints = [(_bits(m), p) for m, p in one if m is not None]
    new_pref = pref & {m for m, p in hints if p}
    counts = _and_counts([*pref, *other], [m for m, _ in hints])
    new_other = {t for t, n in counts.items() if n - (t in new_pref) > 0}
    for p in none:
        for m, q in hints:
            (new_pref if p and q else new_other).add(m)
    return set(), new_pref, new_other


def _and_counts(left: list[int], right: list[int]) -> dict[int, int]:
    """How many pairs (a, b) of ``left`` and ``right`` have ``a & b == t``, for every ``t``
    that some pair gives: by pairs when the lists are short, else by the superset sums of
    both and their Moebius inversion."""
    if not left or not right:
        return {}
    if len(left) * len(right) <= 4096:
        out: dict[int, int] = {}
        for a in left:
            for b in right:
                out[a & b] = out.get(a & b, 0) + 1
        return out
    width = max(max(left), max(right)).bit_length()
    size = 1 << width
    sums = []
    for side in (left, right):
        f = [0] * size
        for m in side:
            f[m] += 1
        for i in range(width):
            bit = 1 << i
            for u in range(size):
                if not u & bit:
                    f[u] += f[u | bit]
        sums.append(f)
    c = [x * y for x, y in zip(sums[0], sums[1], strict=True)]
    for i in range(width):
        bit = 1 << i
        for u in range(size):
            if not u & bit:
                c[u] -= c[u | bit]
    return {t: n for t, n in enumerate(c) if n}


def kubelet_merge(policy: str, providers: Sequence[list[Hint] | None],
                  everything: frozenset[int], closest: Distance | None = None
                  ) -> frozenset[int] | None:
    """The topology manager's merge as v1.37.2 ``policy.go`` has it (``filterProvidersHints``,
    ``mergePermutation``, ``HintMerger.Merge``, ``filterSingleNumaHints``): every
    permutation of one hint per resource, the masks ANDed, preferred only when every hint is
    preferred and their masks are equal. A provider entry of ``None`` has no preference; an
    empty list has no possible affinity. ``None`` when the policy does not align (or
    single-numa-node's answer is the whole machine); :class:`HintError` when the policy
    refuses."""
    return kubelet_merge_hint(policy, providers, everything, closest)[0]


def kubelet_merge_hint(policy: str, providers: Sequence[list[Hint] | None],
                       everything: frozenset[int], closest: Distance | None = None
                       ) -> tuple[frozenset[int] | None, bool]:
    """:func:`kubelet_merge` with whether the merged hint is preferred, which the memory
    manager looks at (docs/design.md#memory-in-the-model)."""
    if policy == "none" or not providers:
        return None, False
    lists = _filtered(policy, providers)
    best_count = _max_of_narrowest(lists)
    if policy == "single-numa-node":
        closest = None
    best: KHint | None = None
    for mask, pref in _merged_permutations(lists):
        best = _best(best, (everything if mask is None else mask & everything, pref),
                     best_count, closest)
    chosen, preferred = best if best is not None else (everything, False)
    assert chosen is not None
    if policy in ("restricted", "single-numa-node") and not preferred:
        raise HintError("topology affinity error: Resources cannot be allocated with "
                        f"Topology locality ({policy})")
    if policy == "single-numa-node" and chosen == everything:
        return None, preferred
    return chosen, preferred
