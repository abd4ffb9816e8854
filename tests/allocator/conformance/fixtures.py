"""The CPU topologies of the kubelet's CPU manager tests, as allocator topologies.

Translated from the fixture definitions in ``pkg/kubelet/cm/cpumanager/policy_test.go``
(kubernetes/kubernetes, commit in ``SOURCE``): each is written here as the facts it states
(which CPUs share a core, a socket, a NUMA node), not as the Go literal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from reconciler.allocator import CPUTopology
from reconciler.cpuset import parse_cpuset
from reconciler.snapshot import CPUInfo, TopologyCounts

SOURCE = ("pkg/kubelet/cm/cpumanager/policy_test.go",
          "89b74acb59c25bdaece19c02bf1daef308e54fc4")


def _build(rows: Iterable[tuple[int, int, int, int]]) -> CPUTopology:
    """``rows``: (cpu, core, socket, numa)."""
    return CPUTopology(cpus=tuple(CPUInfo(c, core, s, n)
                                  for c, core, s, n in sorted(rows)))


def _siblings(cores: dict[int, tuple[int, int, str]]) -> CPUTopology:
    """``cores``: core id -> (socket, numa, cpuset of its threads)."""
    return _build((cpu, core, s, n) for core, (s, n, cpus) in cores.items()
                  for cpu in parse_cpuset(cpus))


def _numa_lists(numa_cpus: dict[int, str], sockets: dict[int, int], cores: int) -> CPUTopology:
    """A machine described by ``lscpu``-style NUMA node lists; CPU ``c``'s core is
    ``c % cores`` (threads of a core are ``cores`` apart); ``sockets`` maps NUMA -> socket."""
    return _build((cpu, cpu % cores, sockets[n], n) for n, text in numa_cpus.items()
                  for cpu in parse_cpuset(text))


# 1 socket, 4 cores, 2 threads: core c holds CPUs c and c+4.
SINGLE_SOCKET_HT = _siblings({c: (0, 0, f"{c},{c + 4}") for c in range(4)})

# 2 sockets (one NUMA node each), 6 cores, 2 threads: even cores on socket 0, odd on 1;
# core c holds CPUs c and c+6.
DUAL_SOCKET_HT = _siblings({c: (c % 2, c % 2, f"{c},{c + 6}") for c in range(6)})

# 2 sockets, 8 cores, no SMT: CPUs 0-3 on socket 0, 4-7 on socket 1.
DUAL_SOCKET_NO_HT = _build((c, c, c // 4, c // 4) for c in range(8))

# 3 sockets, 9 cores, 2 threads (a made-up machine): socket 1 holds CPUs 0-5 (cores 0-2),
# socket 0 CPUs 6-11 (cores 3-5), socket 2 CPUs 12-17 (cores 6-8); core c = cpu // 2.
_TRIPLE_SOCKET = {0: 1, 1: 1, 2: 1, 3: 0, 4: 0, 5: 0, 6: 2, 7: 2, 8: 2}
TRIPLE_SOCKET_HT = _build((c, c // 2, _TRIPLE_SOCKET[c // 2], _TRIPLE_SOCKET[c // 2])
                          for c in range(18))

# Dual Xeon Gold 6230: 2 sockets x 20 cores x 2 threads, 4 NUMA nodes (2 per socket).
DUAL_SOCKET_MULTI_NUMA_HT = _numa_lists(
    {0: "0-9,40-49", 1: "10-19,50-59", 2: "20-29,60-69", 3: "30-39,70-79"},
    {0: 0, 1: 0, 2: 1, 3: 1}, cores=40)

# The same CPUs with sockets and NUMA nodes swapped: 4 sockets, 2 NUMA nodes.
_FAKE_SOCKETS = {0: "0-9,40-49", 1: "10-19,50-59", 2: "20-29,60-69", 3: "30-39,70-79"}
MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT = _build(
    (cpu, cpu % 40, s, s // 2) for s, text in _FAKE_SOCKETS.items() for cpu in parse_cpuset(text))

# Dual AMD EPYC 7742: 2 sockets x 64 cores x 2 threads, 8 NUMA nodes (NPS=4).
DUAL_SOCKET_MULTI_NUMA_HT_LARGE = _numa_lists(
    {n: f"{16 * n}-{16 * n + 15},{128 + 16 * n}-{128 + 16 * n + 15}" for n in range(8)},
    {n: n // 4 for n in range(8)}, cores=128)

# Knights Landing SNC-4 (hwloc lstopo picture): 4 sockets (one NUMA node each) x 18 cores
# x 4 threads, with scattered core ids and CPU numbers. core id -> its four CPUs.
_QUAD = {
    0: {0: "0,109,169,229", 1: "50,110,170,230", 64: "1,13,25,38", 65: "2,14,26,39",
        72: "9,21,33,46", 73: "10,22,34,47", 8: "57,117,177,237", 9: "58,118,178,238",
        24: "71,131,191,251", 25: "72,132,192,252", 32: "79,139,199,259",
        33: "80,140,200,260", 40: "87,147,207,267", 41: "88,148,208,268",
        48: "95,155,215,275", 49: "96,156,216,276", 56: "103,163,223,283",
        57: "104,164,224,284"},
    1: {66: "3,15,27,40", 67: "4,16,28,41", 74: "11,23,35,48", 75: "12,24,36,49",
        2: "51,111,171,231", 3: "52,112,172,232", 10: "59,119,179,239",
        11: "60,120,180,240", 18: "65,125,185,245", 19: "66,126,186,246",
        26: "73,133,193,253", 27: "74,134,194,254", 34: "81,141,201,261",
        35: "82,142,202,262", 42: "89,149,209,269", 43: "90,150,210,270",
        50: "97,157,217,277", 51: "98,158,218,278"},
    2: {68: "5,17,29,42", 69: "6,18,30,43", 4: "53,113,173,233", 5: "54,114,174,234",
        12: "61,121,181,241", 13: "62,122,182,242", 20: "67,127,187,247",
        21: "68,128,188,248", 28: "75,135,195,255", 29: "76,136,196,256",
        36: "83,143,203,263", 37: "84,144,204,264", 44: "91,151,211,271",
        45: "92,152,212,272", 52: "99,159,219,279", 53: "100,160,220,280",
        60: "105,165,225,285", 61: "106,166,226,286"},
    3: {70: "7,19,31,44", 71: "8,20,32,45", 63: "37,108,168,228", 62: "107,167,227,287",
        6: "55,115,175,235", 7: "56,116,176,236", 14: "63,123,183,243",
        15: "64,124,184,244", 22: "69,129,189,249", 23: "70,130,190,250",
        30: "77,137,197,257", 31: "78,138,198,258", 38: "85,145,205,265",
        39: "86,146,206,266", 46: "93,153,213,273", 47: "94,154,214,274",
        54: "101,161,221,281", 55: "102,162,222,282"},
}
QUAD_SOCKET_FOUR_WAY_HT = _siblings({core: (s, s, cpus) for s, cores in _QUAD.items()
                                     for core, cpus in cores.items()})

# The socket CPU lists the Go source states beside that fixture (a cross-check).
QUAD_SOCKET_LISTS = {
    0: "0-2,9-10,13-14,21-22,25-26,33-34,38-39,46-47,50,57-58,71-72,79-80,87-88,95-96,"
       "103-104,109-110,117-118,131-132,139-140,147-148,155-156,163-164,169-170,177-178,"
       "191-192,199-200,207-208,215-216,223-224,229-230,237-238,251-252,259-260,267-268,"
       "275-276,283-284",
    1: "3-4,11-12,15-16,23-24,27-28,35-36,40-41,48-49,51-52,59-60,65-66,73-74,81-82,89-90,"
       "97-98,111-112,119-120,125-126,133-134,141-142,149-150,157-158,171-172,179-180,"
       "185-186,193-194,201-202,209-210,217-218,231-232,239-240,245-246,253-254,261-262,"
       "269-270,277-278",
    2: "5-6,17-18,29-30,42-43,53-54,61-62,67-68,75-76,83-84,91-92,99-100,105-106,113-114,"
       "121-122,127-128,135-136,143-144,151-152,159-160,165-166,173-174,181-182,187-188,"
       "195-196,203-204,211-212,219-220,225-226,233-234,241-242,247-248,255-256,263-264,"
       "271-272,279-280,285-286",
    3: "7-8,19-20,31-32,37,44-45,55-56,63-64,69-70,77-78,85-86,93-94,101-102,107-108,"
       "115-116,123-124,129-130,137-138,145-146,153-154,161-162,167-168,175-176,183-184,"
       "189-190,197-198,205-206,213-214,221-222,227-228,235-236,243-244,249-250,257-258,"
       "265-266,273-274,281-282,287",
}

TOPOLOGIES: dict[str, CPUTopology] = {
    "topoSingleSocketHT": SINGLE_SOCKET_HT,
    "topoDualSocketHT": DUAL_SOCKET_HT,
    "topoDualSocketNoHT": DUAL_SOCKET_NO_HT,
    "topoTripleSocketHT": TRIPLE_SOCKET_HT,
    "topoDualSocketMultiNumaPerSocketHT": DUAL_SOCKET_MULTI_NUMA_HT,
    "fakeTopoMultiSocketDualSocketPerNumaHT": MULTI_SOCKET_DUAL_SOCKET_PER_NUMA_HT,
    "topoDualSocketMultiNumaPerSocketHTLarge": DUAL_SOCKET_MULTI_NUMA_HT_LARGE,
    "topoQuadSocketFourWayHT": QUAD_SOCKET_FOUR_WAY_HT,
}

# The machine topology_hints_test.go builds from cAdvisor data: 2 NUMA nodes (one socket
# each) of 3 cores x 2 threads; NUMA 0 holds 0,6 1,7 2,8 and NUMA 1 holds 3,9 4,10 5,11.
# cAdvisor numbers cores per node (0-2 on each); here core ids are made machine-wide,
# which changes nothing for hints.
CADVISOR_DUAL_NUMA = _siblings({c: (c // 3, c // 3, f"{c},{c + 6}") for c in range(6)})
TOPOLOGIES["cadvisorDualNUMA"] = CADVISOR_DUAL_NUMA

# Uncore-cache machines, from the descriptions beside the uncore cases in
# cpu_assignment_test.go (the fixture definitions themselves were not available).


def _with_uncore(topo: CPUTopology, caches: dict[int, str]) -> CPUTopology:
    return CPUTopology(cpus=topo.cpus, memory=topo.memory,
                       uncore=tuple((cpu, cache) for cache, text in caches.items()
                                    for cpu in parse_cpuset(text)))


_FOUR_CACHES = {k: f"{4 * k}-{4 * k + 3}" for k in range(4)}
# 1 socket, 1 NUMA node, 16 cores without SMT; cache k holds CPUs 4k..4k+3.
UNCORE_SINGLE_SOCKET_NO_SMT = _with_uncore(_build((c, c, 0, 0) for c in range(16)),
                                           _FOUR_CACHES)
# 2 sockets (CPUs 0-7 and 8-15), 1 NUMA node, no SMT; caches 0-1 on socket 0, 2-3 on 1.
UNCORE_DUAL_SOCKET_NO_SMT = _with_uncore(_build((c, c, c // 8, 0) for c in range(16)),
                                         _FOUR_CACHES)
# 1 socket, 2 NUMA nodes (CPUs 0-7 and 8-15), no SMT; caches 0-1 on NUMA 0, 2-3 on 1.
UNCORE_SINGLE_SOCKET_MULTI_NUMA = _with_uncore(_build((c, c, 0, c // 8) for c in range(16)),
                                               _FOUR_CACHES)
# 1 socket, 1 NUMA node, 8 cores x 2 threads (core c: CPUs c and c+8); cache 0 holds
# cores 0-3, cache 1 cores 4-7.
UNCORE_SINGLE_SOCKET_SMT = _with_uncore(_build((c, c % 8, 0, 0) for c in range(16)),
                                        {0: "0-3,8-11", 1: "4-7,12-15"})

TOPOLOGIES.update({
    "topoUncoreSingleSocketNoSMT": UNCORE_SINGLE_SOCKET_NO_SMT,
    "topoUncoreDualSocketNoSMT": UNCORE_DUAL_SOCKET_NO_SMT,
    "topoUncoreSingleSocketMultiNuma": UNCORE_SINGLE_SOCKET_MULTI_NUMA,
    "topoUncoreSingleSocketSMT": UNCORE_SINGLE_SOCKET_SMT,
})


def _from_go_literal(entry: dict[str, object]) -> CPUTopology:
    """A topology as a Go literal states it: CoreIDs as written (the kubelet keys cores on
    CoreID alone, so two sockets' core 0 are one core to it), each CPU's UncoreCacheID,
    and the header counts as declared, which the CPU manager divides by."""
    rows = entry["cpus"]
    counts = entry["counts"]
    assert isinstance(rows, list) and isinstance(counts, dict)
    cpus = tuple(CPUInfo(c, core, s, n) for c, core, s, n, _ in rows)
    declared = TopologyCounts(counts.get("NumCPUs", 0), counts.get("NumCores", 0),
                              counts.get("NumSockets", 0), counts.get("NumNUMANodes", 0),
                              counts.get("NumUncoreCache", 0))
    return CPUTopology(cpus=cpus, uncore=tuple((c, u) for c, _, _, _, u in rows),
                       counts=declared)


# The uncore machines of TestStaticPolicyAddWithUncoreAlignment, read from the Go module
# (topologies/uncore.json says where).
_UNCORE_DATA = json.loads((Path(__file__).parent / "topologies" / "uncore.json")
                          .read_text(encoding="utf-8"))
TOPOLOGIES.update({name: _from_go_literal(entry)
                   for name, entry in _UNCORE_DATA["topologies"].items()})
