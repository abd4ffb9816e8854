"""Hostile cpuset and /proc/stat text through the kernel sources (issue 25): numbers of any
length, 64 KiB of overlapping ranges and ranges past the node give an error entry for the
one cgroup (or a skipped line) and cost work in proportion to the text, never the poll."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from exporter.kernel import KernelObserver, KernelOptions
from exporter.sim.cgroupfs import ProcStatWriter, decorate_pod_list, model_tree, write_cgroup_tree
from exporter.sources.procstat import parse_proc_stat
from kernel.test_sim_roundtrip import ledger_of, place
from reconciler import cpuset
from reconciler.ledger import Ledger

HOSTILE = {
    "5000 digits": "9" * 5000 + "\n",
    "5000-digit range end": "0-" + "9" * 5000 + "\n",
    "64 KiB of overlapping ranges past the node": ",".join(["0-1048575"] * 6500) + "\n",
    "a million CPUs": "0-1048575\n",
    "one CPU past the node": "0-32\n",
}


def _observer(tmp_path: Path) -> tuple[KernelObserver, Ledger, Any, Any, Path]:
    node = place("1.37", "pod", 1)
    ledger, _ = ledger_of(node)
    state = node.state()
    online = node.model.topo.online
    write_cgroup_tree(tmp_path / "cg", model_tree(node.model), online)
    ProcStatWriter(tmp_path / "proc" / "stat", online, user_hz=100).write()
    observer = KernelObserver(KernelOptions(str(tmp_path / "cg"), "auto",
                                            str(tmp_path / "proc"), 100))
    return observer, ledger, decorate_pod_list(state.pod_list), copy.deepcopy(state.configz), \
        tmp_path / "cg"


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_cpuset_file_is_one_error_entry(tmp_path: Path, name: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    observer, ledger, pod_list, configz, root = _observer(tmp_path)
    clean = observer.poll(ledger, pod_list, configz, 0.0)
    assert not clean.errors
    last_cpu = max(c.id for c in ledger.cpu_map)
    assert last_cpu == 31  # so "0-32" is one CPU past the node
    victims = sorted(root.rglob("cpuset.cpus.effective"))
    victim = next(p for p in victims if ".scope" in str(p))
    victim.write_text(HOSTILE[name])
    # Count the CPU ids the parser materialises: bounded by the node, whatever the text.
    expanded: list[int] = []
    real = cpuset.cpu_ranges

    def counting(text: str, max_cpu: int = cpuset.MAX_CPU_ID) -> list[tuple[int, int]]:
        ranges = real(text, max_cpu)
        expanded.append(sum(hi - lo + 1 for lo, hi in ranges))
        return ranges

    monkeypatch.setattr(cpuset, "cpu_ranges", counting)
    report = observer.poll(ledger, pod_list, configz, 1.0)
    assert max(expanded, default=0) <= last_cpu + 1  # the hostile text expanded nothing
    assert list(report.errors) == [("cgroup", "read")]
    message = report.errors[("cgroup", "read")]
    assert "1 unreadable entries" in message and len(message) < 600  # not the text back
    assert len(report.enforced.containers) == len(clean.enforced.containers) - 1
    assert report.usage is not None or clean.usage is None  # procstat unaffected


def test_without_a_topology_the_bound_is_the_largest_possible_id(tmp_path: Path) -> None:
    observer, ledger, pod_list, configz, root = _observer(tmp_path)
    victim = next(p for p in sorted(root.rglob("cpuset.cpus.effective")) if ".scope" in str(p))
    victim.write_text("0-32\n")  # past this node's 32 CPUs, but no topology says so
    blind = dataclasses.replace(ledger, numa_nodes=None)
    report = observer.poll(blind, pod_list, configz, 0.0)
    assert not report.errors


@pytest.mark.parametrize("line", [
    "cpu" + "7" * 5000 + " 1 2 3 4 5 6 7 8 0 0",
    "cpu3 " + "1" * 5000 + " 2 3 4 5 6 7 8 0 0",
    "cpu3 1 2 3 " + "9" * 21 + " 5 6 7 8 0 0",  # past a u64
    "cpu" + "0" * 100_000 + "1 1 2 3 4",  # leading zeros: cpu1, then cpu1 twice
])
def test_hostile_proc_stat_line_is_skipped(line: str) -> None:
    text = "cpu  10 0 10 100\ncpu0 1 0 1 10\ncpu1 1 0 1 10\n" + line + "\nintr 1\n"
    stat = parse_proc_stat(text, 100)
    assert stat.malformed >= 1
    assert 0 in stat.busy


def test_proc_stat_ids_past_the_node_are_skipped() -> None:
    text = "cpu0 1 0 1 10\ncpu7 1 0 1 10\ncpu8 1 0 1 10\ncpu1048576 1 0 1 10\n"
    stat = parse_proc_stat(text, 100, max_cpu=7)
    assert sorted(stat.busy) == [0, 7] and stat.malformed == 2


def test_checkpoint_and_configz_ids_past_the_node_are_refused() -> None:
    from exporter.sources.checkpoint import CheckpointError, parse_checkpoint
    from reconciler.kube import SpecError, kubelet_config_from_json

    body = {"policyName": "static", "defaultCpuSet": "0-7",
            "entries": {"uid-1": {"app": "0-1048575"}}, "checksum": 1}
    data = json.dumps(body).encode()
    assert parse_checkpoint("cpu_manager_state", data).policy_name == "static"
    with pytest.raises(CheckpointError, match="past the node's last CPU 7"):
        parse_checkpoint("cpu_manager_state", data, max_cpu=7)
    config = {"kubeletconfig": {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0-9"}}
    assert kubelet_config_from_json(config).reserved_system_cpus == frozenset(range(10))
    with pytest.raises(SpecError, match="past the node's last CPU 7"):
        kubelet_config_from_json(config, max_cpu=7)
