"""``takeByTopology``: which CPUs the static policy picks for a request
(docs/design.md#allocator).

Packed form: whole free NUMA nodes and sockets (the larger unit first) while a whole one is
still needed, then whole free physical cores while a core's worth is needed, then single
CPUs. Candidates are ordered once per level, before that level takes anything: grouped by
the enclosing unit (NUMA node or socket, whichever is larger, then the other), and within a
group fewest free CPUs first (best fit: pack the most-used unit), ties by lower id.

Distributed form (``distribute-cpus-across-numa``): the request is spread in groups of
``group`` CPUs over the fewest NUMA nodes that can hold an even share, choosing the nodes
(and the nodes that take the remainder) that leave free CPUs most balanced across the
machine; when no combination works it falls back to the packed form. From 1.37, with
``align-by-socket`` too, a combination on one socket beats any across sockets and each
node's share is capped at what the emptiest node of the combination can give.

Which form, with which options, is :func:`policy_taker` (the static policy's
``takeByTopology``); the kubelet uses it for the CPUs it reserves itself as well.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from operator import attrgetter

from reconciler.allocator.config import version_at_least
from reconciler.allocator.topology import CPUTopology
from reconciler.snapshot import CPUInfo

_NUMA: Callable[[CPUInfo], int] = attrgetter("numa_node")
_SOCKET: Callable[[CPUInfo], int] = attrgetter("socket")
_CORE: Callable[[CPUInfo], int] = attrgetter("core")


class _Acc:
    """Free CPUs of one take and the CPUs taken so far."""

    def __init__(self, topo: CPUTopology, available: Iterable[int], n: int,
                 resize: bool = False) -> None:
        self.topo = topo
        self.free = {c for c in available if c in topo.by_id}
        self.need = n
        self.result: set[int] = set()
        # A resize keeps close to the CPUs the container keeps: units holding some of them
        # come first, and a unit counts as whole when kept plus free CPUs fill it.
        self.resize = resize
        # NUMA nodes larger than sockets (or equal): NUMA nodes are the outer level. The
        # kubelet compares its counts (NumSockets, NumNUMANodes), not the rows.
        counts = topo.kubelet_counts
        self.numa_first = counts.sockets >= counts.numa_nodes

    def take(self, cpus: Iterable[int]) -> None:
        got = set(cpus)
        self.result |= got
        self.free -= got
        self.need -= len(got)

    def free_in(self, units: dict[int, frozenset[int]], uid: int) -> int:
        return len(units[uid] & self.free)

    def _ordered(self, units: dict[int, frozenset[int]], ids: Iterable[int]) -> list[int]:
        present = [u for u in ids if units[u] & self.free]
        key = (lambda u: (not units[u] & self.result, self.free_in(units, u), u)) \
            if self.resize else (lambda u: (self.free_in(units, u), u))
        return sorted(present, key=key)

    def _inner(self, outer: Sequence[int], outer_units: dict[int, frozenset[int]],
               units: dict[int, frozenset[int]], unit_of: Callable[[CPUInfo], int],
               *, once: bool = True) -> list[int]:
        """Units of ``units`` grouped by the ``outer`` order, each group best-fit sorted; a
        unit in two outer groups comes once, or (``once=False``) in each of them."""
        out: list[int] = []
        seen: set[int] = set()
        by_id = self.topo.by_id
        for o in outer:
            members = {unit_of(by_id[c]) for c in outer_units[o] & self.free}
            if once:
                members -= seen
                seen |= members
            out.extend(self._ordered(units, members))
        return out

    def numas(self) -> list[int]:
        topo = self.topo
        if self.numa_first:
            return self._ordered(topo.numa_cpus, topo.numa_cpus)
        return self._inner(self.sockets(), topo.socket_cpus, topo.numa_cpus, _NUMA)

    def sockets(self) -> list[int]:
        topo = self.topo
        if self.numa_first:
            return self._inner(self.numas(), topo.numa_cpus, topo.socket_cpus, _SOCKET)
        return self._ordered(topo.socket_cpus, topo.socket_cpus)

    def cores(self) -> list[int]:
        topo = self.topo
        if self.numa_first:
            return self._inner(self.sockets(), topo.socket_cpus, topo.core_cpus, _CORE)
        return self._inner(self.numas(), topo.numa_cpus, topo.core_cpus, _CORE)

    def take_whole(self, order: list[int], units: dict[int, frozenset[int]],
                   per_unit: int | None = None) -> None:
        """Each unit of ``order`` that is free, taken whole while a whole one is needed.
        Free is every CPU of the unit free, or with ``per_unit`` (sockets and cores: the
        kubelet's ``isSocketFree`` and ``isCoreFree``) exactly ``per_unit`` CPUs free, the
        machine's average, and then the unit is taken with all its CPUs, busy ones
        included: on a machine of unequal sockets or cores the kubelet claims a larger
        unit with CPUs in use and never a smaller one (docs/design.md#allocator)."""
        for uid in order:
            cpus = units[uid]
            free = cpus & self.free
            if self.resize:
                if len(cpus & self.result) + len(free) == len(cpus) \
                        and self.need >= len(free):
                    self.take(free)
            elif per_unit is not None:
                if len(free) == per_unit and self.need >= len(cpus):
                    self.take(cpus)
            elif len(free) == len(cpus) and self.need >= len(cpus):
                self.take(cpus)

    def take_single(self) -> None:
        for core in self.cores():
            for cpu in sorted(self.topo.core_cpus[core] & self.free):
                if self.need <= 0:
                    return
                self.take((cpu,))

    def uncores(self) -> list[int]:
        """Uncore caches grouped by the NUMA-node order, each group best-fit sorted; a cache
        across two NUMA nodes comes in both groups, as ``sortAvailableUncoreCaches`` lists
        it (docs/design.md#allocator)."""
        uncore_of = self.topo.uncore_of
        return self._inner(self.numas(), self.topo.numa_cpus, self.topo.uncore_cpus,
                           lambda info: uncore_of[info.id], once=False)

    def take_uncore(self) -> None:
        """``prefer-align-cpus-by-uncorecache``: whole free caches while a cache's worth is
        needed, else the first cache whose lowest free cores hold exactly what is left. A
        resize takes whole caches once, first, then tries each cache in turn."""
        topo = self.topo
        if self.resize:
            self.take_whole(self.uncores(), topo.uncore_cpus)
        per_cache = topo.cpus_per_uncore
        for cache in self.uncores():
            if not self.resize and self.need >= per_cache:
                self._take_full_uncores()
            if self.need <= 0:
                return
            self._take_partial_uncore(cache)
            if self.need <= 0:
                return

    def _take_full_uncores(self) -> None:
        """``takeFullUncore``: the free caches are listed once and each is taken whole while
        a cache's worth is needed, without looking again. A cache across two NUMA nodes is
        listed twice, so it is counted twice and the kubelet hands out fewer CPUs than asked
        (docs/design.md#allocator); the model does the same."""
        caches = self.topo.uncore_cpus
        for cache in [u for u in self.uncores() if caches[u] <= self.free]:
            if self.need >= len(caches[cache]):
                self.take(caches[cache])

    def _take_partial_uncore(self, cache: int) -> None:
        topo = self.topo
        tpc = topo.threads_per_core
        if self.resize and tpc > 1:
            self._complete_kept_cores(cache)
        cores = sorted({topo.by_id[c].core for c in topo.uncore_cpus[cache] & self.free})
        cores = cores[:(self.need + tpc - 1) // tpc]
        cpus = sorted(c for core in cores for c in topo.core_cpus[core] & self.free)
        # An odd remainder on SMT needs one thread of the last core only.
        if self.need % 2 and tpc > 1 and len(cpus) > self.need:
            cpus = cpus[:-1]
        if len(cpus) == self.need:
            self.take(cpus)

    def _complete_kept_cores(self, cache: int) -> None:
        """A resize first fills the cores of ``cache`` it keeps a thread of."""
        topo = self.topo
        in_cache = topo.uncore_cpus[cache]
        kept = {topo.by_id[c].core for c in in_cache & self.result}
        for core in sorted(kept & {topo.by_id[c].core for c in in_cache & self.free}):
            cpus = topo.core_cpus[core]
            free = cpus & self.free
            if len(cpus & self.result) + len(free) != len(cpus):
                continue
            if self.need < len(free):
                break
            self.take(free)

    def take_spread(self) -> None:
        """``distribute-cpus-across-cores``: CPUs socket by socket in id order, which puts
        consecutive picks on different cores where siblings are numbered apart."""
        for socket in self.sockets():
            for cpu in sorted(self.topo.socket_cpus[socket] & self.free):
                if self.need <= 0:
                    return
                self.take((cpu,))


def take_by_topology(topo: CPUTopology, available: Iterable[int], n: int, *,
                     spread: bool = False, uncore: bool = False) -> frozenset[int] | None:
    """``n`` CPUs out of ``available`` in the packed order, or ``None`` when too few. With
    ``spread`` whole cores are not sought and single CPUs are spread across cores; with
    ``uncore`` uncore caches are filled before cores are sought."""
    if n <= 0:
        return frozenset()
    acc = _Acc(topo, available, n)
    if n > len(acc.free):
        return None
    return _take_levels(acc, spread, uncore)


def _take_levels(acc: _Acc, spread: bool, uncore: bool = False) -> frozenset[int] | None:
    topo = acc.topo
    levels = [(acc.numas, topo.numa_cpus, None),
              (acc.sockets, topo.socket_cpus, topo.cpus_per_socket)]
    if not acc.numa_first:
        levels.reverse()
    for order, units, per_unit in levels:
        acc.take_whole(order(), units, per_unit)
    if uncore and acc.need > 0:
        acc.take_uncore()
    if spread:
        acc.take_spread()
    else:
        acc.take_whole(acc.cores(), topo.core_cpus, topo.threads_per_core)
        acc.take_single()
    return frozenset(acc.result) if acc.need == 0 else None


def take_for_resize(topo: CPUTopology, available: Iterable[int], n: int,
                    allocated: frozenset[int], baseline: frozenset[int] = frozenset(), *,
                    spread: bool = False, uncore: bool = False) -> frozenset[int] | None:
    """An in-place resize of a container holding ``allocated`` to ``n`` exclusive CPUs. It
    grows from ``available`` (the free CPUs) keeping all it holds, or shrinks within
    ``available`` (its own CPUs) keeping ``baseline`` (what it was admitted with); new CPUs
    sit as close to the kept ones as the topology allows. ``None`` when it cannot."""
    start = resize_start(topo, available, n, allocated, baseline)
    if not isinstance(start, _Acc):
        return start
    return _take_levels(start, spread, uncore)


def resize_start(topo: CPUTopology, available: Iterable[int], n: int,
                 allocated: frozenset[int], baseline: frozenset[int]
                 ) -> _Acc | frozenset[int] | None:
    """What every resize take starts from: the accumulator holding the CPUs kept, or the
    answer already (the same size, nothing more to take, or not enough free CPUs)."""
    if allocated and baseline and not baseline <= allocated:
        return None
    acc = _Acc(topo, available, n, resize=True)
    if allocated:
        if n == len(allocated):
            return allocated
        acc.take(allocated if n > len(allocated) else baseline)
    if acc.need <= 0:
        return frozenset(acc.result)
    if acc.need > len(acc.free):
        return None
    return acc


# Go's malloc size classes up to 2 KiB, in bytes: append rounds a new backing array up to one.
_SIZE_CLASSES = (8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240,
                 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024,
                 1152, 1280, 1408, 1536, 1792, 2048)


def _grown_cap(cap: int, length: int) -> int:
    """The capacity ``append`` gives a ``[]int`` of capacity ``cap`` growing to ``length``
    (runtime growslice: double below 256 elements, then round up to a size class)."""
    want = length if length > 2 * cap else 2 * cap
    return next((size // 8 for size in _SIZE_CLASSES if size >= want * 8), want)


def _go_combinations(items: Sequence[int], k: int) -> Iterator[list[int]]:
    """The kubelet's ``iterateCombinations``, slices and all: each k-subset of ``items`` in
    order, as the backing array of the Go slice it is (the subset is its first ``k``
    items). The recursion appends to one prefix slice per level, so siblings share an
    array wherever it had room, and a subset the kubelet kept reads what later ones wrote
    there: its best NUMA-node combination is not always the one it scored best."""
    if k < 1:
        return

    def walk(left: int, start: int, arr: list[int], length: int, cap: int
             ) -> Iterator[list[int]]:
        if left == 0:
            yield arr
            return
        for i in range(start, len(items) - left + 1):
            if length < cap:
                arr[length] = items[i]
                yield from walk(left - 1, i + 1, arr, length + 1, cap)
            else:
                new_cap = _grown_cap(cap, length + 1)
                grown = arr[:length] + [items[i]] + [0] * (new_cap - length - 1)
                yield from walk(left - 1, i + 1, grown, length + 1, new_cap)

    yield from walk(k, 0, [], 0, 0)


def _stdev(values: Iterable[int]) -> float:
    """The balance score, rounded as the kubelet rounds it (so ties break the same way)."""
    xs = list(values)
    mean = round(sum(xs) / len(xs) * 1000) / 1000
    var = sum((x - mean) ** 2 for x in xs) / len(xs)
    return round(math.sqrt(var) * 1000) / 1000


def _spread(left: dict[int, int], nodes: Sequence[int], remainder: int, group: int) -> None:
    """Hand ``remainder`` CPUs out round-robin, ``group`` at a time, to ``nodes`` with room."""
    while remainder > 0:
        gave = False
        for m in nodes:
            if remainder == 0:
                break
            if left[m] < group:
                continue
            left[m] -= group
            remainder -= group
            gave = True
        if not gave:
            return


def _best_remainder(left: dict[int, int], combo: Sequence[int], remainder: int,
                    group: int, whole_groups: bool = False, aliased: bool = False
                    ) -> tuple[float, tuple[int, ...]] | None:
    """The subset of ``combo`` that takes the remainder and keeps free CPUs most balanced
    (larger subsets tried first, so the remainder is spread as widely as possible). With
    ``whole_groups`` a subset's room is counted in whole groups (the resize variant); with
    ``aliased`` the subset returned is what the kubelet's kept slice holds in the end
    (:func:`_go_combinations`)."""
    if remainder == 0:
        return _stdev(left.values()), ()
    room = [m for m in combo if left[m] >= group]
    best: tuple[float, tuple[int, ...]] | None = None
    kept: tuple[list[int], int] | None = None
    for k in range(len(room), 0, -1):
        subsets: Iterable[Sequence[int]] = _go_combinations(room, k) if aliased \
            else itertools.combinations(room, k)
        for arr in subsets:
            subset = tuple(arr[:k])
            fits = sum(left[m] // group for m in subset) * group if whole_groups \
                else sum(left[m] for m in subset)
            if fits < remainder:
                continue
            after = dict(left)
            _spread(after, subset, remainder, group)
            score = _stdev(after.values())
            if best is None or score < best[0]:
                best = (score, subset)
                if aliased:
                    kept = (arr, k)  # type: ignore[assignment]
    if best is not None and kept is not None:
        return best[0], tuple(kept[0][:kept[1]])
    return best


def _fits(acc: _Acc, combo: Sequence[int], n: int, group: int, align: bool = False
          ) -> int | None:
    """The even share per node of ``combo``, or ``None`` when the combo cannot hold it.
    With ``align`` the share shrinks to what the emptiest node of the combo can give."""
    counts = [acc.free_in(acc.topo.numa_cpus, m) for m in combo]
    if sum(counts) < n or sum(c // group for c in counts) * group < n:
        return None
    share = (n // len(combo) // group) * group
    if align:
        share = min([share, *(c // group * group for c in counts)])
    return share if all(c >= share for c in counts) else None


def _choose_combo(acc: _Acc, numas: list[int], k: int, n: int, group: int,
                  align: bool = False
                  ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The combo of ``k`` nodes and its remainder nodes, as the kubelet ends up holding them
    (:func:`_go_combinations`). With ``align`` (1.37's align-by-socket) a combo on one
    socket beats any across sockets, whatever the balance."""
    best: tuple[float, list[int], tuple[int, ...]] | None = None
    best_one_socket = False
    for arr in _go_combinations(numas, k):
        if best is not None and best[0] == 0 and (not align or best_one_socket):
            break
        combo = tuple(arr[:k])
        share = _fits(acc, combo, n, group, align)
        if share is None:
            continue
        left = {m: acc.free_in(acc.topo.numa_cpus, m) for m in numas}
        for m in combo:
            left[m] -= share
        scored = _best_remainder(left, combo, n - share * len(combo), group, aliased=True)
        if scored is None:
            continue
        one_socket = align and len({acc.topo.by_id[c].socket for m in combo
                                    for c in acc.topo.numa_cpus[m]}) <= 1
        better = best is None or scored[0] < best[0]
        if align and best is not None and one_socket != best_one_socket:
            better = one_socket
        if better:
            best = (scored[0], arr, scored[1])
            best_one_socket = one_socket
    return None if best is None else (tuple(best[1][:k]), best[2])


def _numa_range(acc: _Acc, group: int, total: int | None = None) -> tuple[int, int]:
    """The fewest and most NUMA nodes a distributed take of ``total`` CPUs (what is still
    needed by default) could use."""
    topo = acc.topo
    groups = (len(topo.by_id) - 1) // group + 1
    per_node = (groups - 1) // len(topo.numa_cpus) + 1
    needed = ((acc.need if total is None else total) - 1) // group + 1
    with_free = sum(1 for cpus in topo.numa_cpus.values() if cpus & acc.free)
    return (needed - 1) // per_node + 1, min(needed, with_free)


def _take_remainder(acc: _Acc, nodes: Sequence[int], group: int, remainder: int) -> None:
    """``remainder`` CPUs, ``group`` at a time, round the ``nodes`` with room. The kubelet
    counts the remainder down whatever a node gave, and loops for ever when no node has
    room; the model stops there (the take then fails)."""
    topo = acc.topo
    while remainder > 0:
        before = remainder
        for m in nodes:
            if remainder == 0:
                break
            here = acc.free & topo.numa_cpus[m]
            if len(here) < group:
                continue
            acc.take(take_by_topology(topo, here, group) or ())
            remainder -= group
        if remainder == before:
            return


def take_distributed(topo: CPUTopology, available: Iterable[int], n: int,
                     group: int = 1, *, align_by_socket: bool = False,
                     cap_share: bool = False) -> frozenset[int] | None:
    """``n`` CPUs spread evenly (in groups of ``group``) over NUMA nodes; see the module
    docstring. ``align_by_socket``: 1.37's takeByTopologyNUMADistributed with align-by-socket,
    which prefers NUMA nodes of one socket (1.35 and 1.36 ignore the option here);
    ``cap_share``: 1.37 caps each chosen node's share at what it has free. ``None`` when
    fewer than ``n`` are available."""
    pool = frozenset(available)
    if n % group:
        return take_by_topology(topo, pool, n)
    acc = _Acc(topo, pool, n)
    if n <= 0:
        return frozenset()
    if n > len(acc.free):
        return None
    numas = acc.numas()
    low, high = _numa_range(acc, group)
    for k in range(low, high + 1):
        chosen = _choose_combo(acc, numas, k, n, group, align_by_socket)
        if chosen is None:
            continue
        combo, rest = chosen
        share = (n // len(combo) // group) * group
        if cap_share:
            share = min([share, *(acc.free_in(topo.numa_cpus, m) // group * group
                                  for m in combo)])
        for m in combo:
            acc.take(take_by_topology(topo, acc.free & topo.numa_cpus[m], share) or ())
        _take_remainder(acc, rest, group, n - share * len(combo))
        return frozenset(acc.result) if acc.need == 0 else None
    return take_by_topology(topo, pool, n)


Taker = Callable[[CPUTopology, frozenset[int], int], "frozenset[int] | None"]


def policy_taker(topo: CPUTopology, options: frozenset[str], version: str = "1.37"
                 ) -> Taker:
    """The static policy's ``takeByTopology`` in kubelet ``version``: the take its options
    choose. The kubelet takes with it everywhere, the reserved CPUs it picks itself
    included."""
    if "distribute-cpus-across-numa" in options:
        group = topo.threads_per_core if "full-pcpus-only" in options else 1
        newer = version_at_least(version, "1.37")
        return partial(take_distributed, group=group, cap_share=newer,
                       align_by_socket=newer and "align-by-socket" in options)
    return partial(take_by_topology, spread="distribute-cpus-across-cores" in options,
                   uncore="prefer-align-cpus-by-uncorecache" in options)


def take_with_hint(topo: CPUTopology, available: Iterable[int], n: int,
                   numa_hint: frozenset[int] | None, taker: Taker | None = None
                   ) -> frozenset[int] | None:
    """As the static policy does with a NUMA affinity: as much as possible from the hinted
    nodes first (with ``taker``, packed by default), the rest from anywhere."""
    take = taker or take_by_topology
    pool = frozenset(available)
    # No count up front, as allocateCPUs has none: the hinted take can claim a core or a
    # socket whole with CPUs outside the pool, and what is left may then be enough
    # (docs/design.md#allocator). The second take fails when it is not.
    first: frozenset[int] = frozenset()
    if numa_hint is not None:
        aligned = pool & topo.cpus_of_numa(numa_hint)
        first = take(topo, aligned, min(n, len(aligned))) or frozenset()
    rest = take(topo, pool - first, n - len(first))
    if rest is None:
        return None
    return first | rest
