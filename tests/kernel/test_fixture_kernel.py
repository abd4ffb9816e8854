"""A fixture directory's kernel files: what ``record`` captures (``cgroup/``, ``proc_stat``)
reads back as the live tree did, and ``snapshot --from`` shows the enforced sets."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.kernel import KernelOptions, capture_kernel_files, fixture_enforced
from exporter.sim.cgroupfs import SimKernel, decorate_pod_list
from exporter.sources.cgroup import CgroupSource, pod_refs_from_pod_list
from exporter.sources.fixture import write_fixture_dir
from exporter.sources.procstat import read_proc_stat, read_proc_stat_file
from kernel.helpers import place
from reconciler.cpuset import format_cpuset


def test_captured_files_read_back_and_snapshot_shows_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = place("1.37", "pod", 1)
    victim = next((p.namespace, p.name, c.name) for p in node.model.pods.values()
                  for c in p.containers if c.exclusive and not p.block)
    wrong = frozenset(node.model.default_set)
    kernel = SimKernel(node.model, tmp_path / "host-cg", tmp_path / "host-proc" / "stat",
                       load_by_pool={"node_shared": 0.5}, drift={victim: wrong})
    kernel.tick(5.0)
    state = node.state()
    assert state.pod_list is not None
    pod_list = decorate_pod_list(state.pod_list)
    fixture = tmp_path / "fixture"
    write_fixture_dir(fixture, replace(state, pod_list=pod_list).raw(
        node.model.topo.to_snapshot()))

    written, warnings = capture_kernel_files(
        KernelOptions(str(tmp_path / "host-cg"), "auto", str(tmp_path / "host-proc")),
        pod_list, str(fixture))
    assert warnings == [] and sorted(Path(p).name for p in written) == ["cgroup", "proc_stat"]
    live = CgroupSource(str(tmp_path / "host-cg")).read(pod_refs_from_pod_list(pod_list))
    assert fixture_enforced(str(fixture), pod_list) == live.enforced
    assert read_proc_stat_file(fixture / "proc_stat", 100).busy == \
        read_proc_stat(tmp_path / "host-proc", 100).busy

    assert main(["snapshot", "--from", str(fixture), "-o", "json"]) == 0
    body = json.loads(capsys.readouterr().out)
    entry = next(c for c in body["containers"]
                 if (c["namespace"], c["pod"], c["name"]) == victim)
    assert entry["enforced_cpus"] == format_cpuset(wrong) != entry["cpus"]


def test_missing_sources_are_warnings_not_failures(tmp_path: Path) -> None:
    written, warnings = capture_kernel_files(
        KernelOptions(str(tmp_path / "no-cg"), "auto", str(tmp_path / "no-proc")),
        {"items": []}, str(tmp_path))
    assert written == [] and len(warnings) == 2
    assert warnings[0].startswith("cgroup/ not captured")
    assert warnings[1].startswith("proc_stat not captured")
    assert fixture_enforced(str(tmp_path), {"items": []}) is None  # no cgroup/: none shown
