"""The cgroup source over fixture trees: both drivers, both runtimes, cgroup v1 and v2, and
every way one entry can fail without the rest failing."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from exporter.errors import UserError
from exporter.sources import cgroup
from exporter.sources.cgroup import (
    CgroupSource,
    CgroupUnavailable,
    ContainerRef,
    PodRef,
    cpu_manager_reconcile_period,
    detect_layout,
    pod_refs_from_body,
    pod_refs_from_pod_list,
    read_enforced,
)
from kernel.helpers import FixtureContainer, FixturePod, cid, pod_dir, pod_list, write_tree

LAYOUTS = [(v, d, r) for v in ("v2", "v1") for d in ("systemd", "cgroupfs")
           for r in ("containerd", "cri-o")]


def three_pods(runtime: str) -> list[FixturePod]:
    return [
        FixturePod("prod", "web", "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "guaranteed", [
            FixtureContainer("proxy", cid(1), "4\n", runtime),
            FixtureContainer("app", cid(2), "2-3\n", runtime),
        ], cpuset="2-4"),
        FixturePod("prod", "batch", "aaaaaaaa-0000-0000-0000-000000000001", "burstable", [
            FixtureContainer("sidecar", cid(3), "0-1,5-7\n", runtime),
            FixtureContainer("worker", cid(4), "0-1,5-7\n", runtime),
        ]),
        FixturePod("dev", "toy", "bbbbbbbb-0000-0000-0000-000000000002", "besteffort", [
            FixtureContainer("init-like", cid(5), "0-7\n", runtime),
            FixtureContainer("toy", cid(6), "0-7\n", runtime),
        ]),
    ]


@pytest.mark.parametrize(("version", "driver", "runtime"), LAYOUTS)
def test_reads_every_layout(tmp_path: Path, version: str, driver: str, runtime: str) -> None:
    pods = three_pods(runtime)
    write_tree(tmp_path, version, driver, pods)
    layout = detect_layout(str(tmp_path))
    assert (layout.version, layout.driver) == (version, driver)
    reading = read_enforced(layout, pod_refs_from_pod_list(pod_list(pods)))
    assert reading.errors == ()
    assert dict(reading.enforced.containers) == {
        ("prod", "web", "proxy"): frozenset({4}),
        ("prod", "web", "app"): frozenset({2, 3}),
        ("prod", "batch", "sidecar"): frozenset({0, 1, 5, 6, 7}),
        ("prod", "batch", "worker"): frozenset({0, 1, 5, 6, 7}),
        ("dev", "toy", "init-like"): frozenset(range(8)),
        ("dev", "toy", "toy"): frozenset(range(8)),
    }
    # A pod-level cpuset is only visible on v2 (v1 pod cpusets are always filled in).
    want_pods = {("prod", "web"): frozenset({2, 3, 4})} if version == "v2" else {}
    assert dict(reading.enforced.pods) == want_pods


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_forced_driver(tmp_path: Path, driver: str) -> None:
    write_tree(tmp_path, "v2", driver, three_pods("containerd"))
    assert detect_layout(str(tmp_path), driver).driver == driver
    other = "cgroupfs" if driver == "systemd" else "systemd"
    with pytest.raises(CgroupUnavailable, match=other):
        detect_layout(str(tmp_path), other)
    with pytest.raises(UserError, match=r"--cgroup\.driver"):
        detect_layout(str(tmp_path), "bogus")


def test_missing_mount_is_off_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = CgroupSource(str(tmp_path / "nothing"))
    refs = pod_refs_from_pod_list(pod_list(three_pods("containerd")))
    with caplog.at_level(logging.WARNING, logger="podres.cgroup"):
        first = source.read(refs)
        second = source.read(refs)
    assert first.off is not None and "not a cgroup mount" in first.off
    assert second.off == first.off and not first.enforced.containers
    assert len(caplog.records) == 1  # said once, not every poll
    # Once the mount appears, it reads; should it go away again, it says so again.
    write_tree(tmp_path / "nothing", "v2", "systemd", three_pods("containerd"))
    with caplog.at_level(logging.WARNING, logger="podres.cgroup"):
        assert source.read(refs).off is None
        shutil.rmtree(tmp_path / "nothing")
        assert source.read(refs).off is not None
    assert len(caplog.records) == 2


def test_off_without_pod_list(tmp_path: Path) -> None:
    write_tree(tmp_path, "v2", "systemd", three_pods("containerd"))
    reading = CgroupSource(str(tmp_path)).read(None)
    assert reading.off is not None and "/pods" in reading.off


def test_v2_without_cpuset_controller_is_off(tmp_path: Path) -> None:
    write_tree(tmp_path, "v2", "systemd", three_pods("containerd"))
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    with pytest.raises(CgroupUnavailable, match="cpuset controller"):
        detect_layout(str(tmp_path))


def test_no_kubepods_is_off(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset\n")
    with pytest.raises(CgroupUnavailable, match="kubepods"):
        detect_layout(str(tmp_path))


def _broken_tree(tmp_path: Path) -> tuple[Path, list[FixturePod]]:
    pods = three_pods("containerd")
    base = write_tree(tmp_path, "v2", "systemd", pods)
    return base, pods


def _errors_by_container(reading: cgroup.CgroupReading) -> dict[str | None, str]:
    return {e.container: e.message for e in reading.errors}


@pytest.mark.parametrize(("content", "expect"), [
    (" 2-3 \n", {2, 3}),
    ("2-3\n\n", {2, 3}),
    ("\n2 , 3\n", {2, 3}),
    ("2-3,\n", None),
    ("2-\n3", None),
    ("two", None),
    ("", None),
    ("\n", None),
    ("\xff\xfe", None),
])
def test_odd_cpuset_text(tmp_path: Path, content: str, expect: set[int] | None) -> None:
    base, pods = _broken_tree(tmp_path)
    app = pod_dir(base, "systemd", pods[0]) / f"cri-containerd-{cid(2)}.scope"
    (app / "cpuset.cpus.effective").write_bytes(content.encode("latin-1"))
    reading = read_enforced(detect_layout(str(tmp_path)),
                            pod_refs_from_pod_list(pod_list(pods)))
    got = reading.enforced.containers.get(("prod", "web", "app"))
    if expect is None:
        assert got is None
        assert "unreadable cpuset" in _errors_by_container(reading)["app"]
    else:
        assert got == frozenset(expect) and reading.errors == ()
    assert len(reading.enforced.containers) == 5 + (expect is not None)


def test_fallback_to_configured_cpuset(tmp_path: Path) -> None:
    base, pods = _broken_tree(tmp_path)
    app = pod_dir(base, "systemd", pods[0]) / f"cri-containerd-{cid(2)}.scope"
    (app / "cpuset.cpus.effective").unlink()
    reading = read_enforced(detect_layout(str(tmp_path)),
                            pod_refs_from_pod_list(pod_list(pods)))
    assert reading.enforced.containers[("prod", "web", "app")] == frozenset({2, 3})
    assert reading.errors == ()


def test_missing_files_and_unreadable_entries(tmp_path: Path) -> None:
    base, pods = _broken_tree(tmp_path)
    web = pod_dir(base, "systemd", pods[0])
    batch = pod_dir(base, "systemd", pods[1])
    # No cpuset file at all (controller not enabled below the pod).
    for name in ("cpuset.cpus.effective", "cpuset.cpus"):
        (web / f"cri-containerd-{cid(1)}.scope" / name).unlink()
    # Not a regular file: a FIFO (open must not block on it) and a dangling symlink.
    sidecar = batch / f"cri-containerd-{cid(3)}.scope"
    (sidecar / "cpuset.cpus.effective").unlink()
    os.mkfifo(sidecar / "cpuset.cpus.effective")
    worker = batch / f"cri-containerd-{cid(4)}.scope"
    (worker / "cpuset.cpus.effective").unlink()
    (worker / "cpuset.cpus.effective").symlink_to(tmp_path / "gone")
    # A file far beyond any cpuset's size.
    app = web / f"cri-containerd-{cid(2)}.scope"
    (app / "cpuset.cpus.effective").write_text("0," * 100_000)
    reading = read_enforced(detect_layout(str(tmp_path)),
                            pod_refs_from_pod_list(pod_list(pods)))
    errors = _errors_by_container(reading)
    assert set(errors) == {"proxy", "sidecar", "worker", "app"}
    assert "no cpuset file" in errors["proxy"]
    assert "not a regular file" in errors["sidecar"]
    assert "larger than" in errors["app"]
    assert str(worker) in errors["worker"]
    # The rest of the node is unaffected.
    assert set(reading.enforced.containers) == {("dev", "toy", "init-like"),
                                                ("dev", "toy", "toy")}


def test_container_listed_without_cgroup_and_pod_without_cgroup(tmp_path: Path) -> None:
    base, pods = _broken_tree(tmp_path)
    shutil.rmtree(pod_dir(base, "systemd", pods[0]) / f"cri-containerd-{cid(2)}.scope")
    shutil.rmtree(pod_dir(base, "systemd", pods[2]))
    reading = read_enforced(detect_layout(str(tmp_path)),
                            pod_refs_from_pod_list(pod_list(pods)))
    # Gone, not unreadable: the observer looks them up again (a restart) before calling
    # them errors.
    assert reading.errors == ()
    messages = {(g.entry.pod, g.entry.container): g.entry.message for g in reading.gone}
    assert "is gone" in messages[("web", "app")]
    assert "no pod cgroup" in messages[("toy", None)]
    assert {g.key for g in reading.gone} == {cid(2), pods[2].uid}
    assert ("prod", "web", "proxy") in reading.enforced.containers
    assert len(reading.enforced.containers) == 3


def test_container_vanishing_between_listing_and_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, pods = _broken_tree(tmp_path)
    doomed = pod_dir(base, "systemd", pods[1]) / f"cri-containerd-{cid(4)}.scope"
    real = cgroup.read_kernel_file

    def exit_then_read(path: str, max_bytes: int, *, truncate: bool = False) -> bytes:
        if path.startswith(str(doomed)):
            shutil.rmtree(doomed, ignore_errors=True)  # the container exits right now
        return real(path, max_bytes, truncate=truncate)

    monkeypatch.setattr(cgroup, "read_kernel_file", exit_then_read)
    reading = read_enforced(detect_layout(str(tmp_path)),
                            pod_refs_from_pod_list(pod_list(pods)))
    assert reading.errors == ()
    assert [(g.entry.container, "is gone" in g.entry.message) for g in reading.gone] == \
        [("worker", True)]
    assert len(reading.enforced.containers) == 5


def test_pod_directory_vanishing_after_discovery(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, pods = _broken_tree(tmp_path)
    doomed = pod_dir(base, "systemd", pods[1])
    real = cgroup._pod_dirs

    def discover_then_delete(layout: cgroup.CgroupLayout) -> dict[str, str]:
        found = real(layout)
        shutil.rmtree(doomed)
        return found

    monkeypatch.setattr(cgroup, "_pod_dirs", discover_then_delete)
    reading = read_enforced(detect_layout(str(tmp_path)),
                            pod_refs_from_pod_list(pod_list(pods)))
    assert reading.errors == ()
    assert [(g.entry.pod, g.entry.container) for g in reading.gone] == [
        ("batch", "sidecar"), ("batch", "worker")]
    assert all("is gone" in g.entry.message for g in reading.gone)
    assert len(reading.enforced.containers) == 4


def test_unparsable_pod_cpuset_is_a_pod_error(tmp_path: Path) -> None:
    base, pods = _broken_tree(tmp_path)
    (pod_dir(base, "systemd", pods[0]) / "cpuset.cpus").write_text("2-x\n")
    reading = read_enforced(detect_layout(str(tmp_path)),
                            pod_refs_from_pod_list(pod_list(pods)))
    assert [(e.pod, e.container) for e in reading.errors] == [("web", None)]
    assert not reading.enforced.pods and len(reading.enforced.containers) == 6


def test_pod_refs_from_pod_list() -> None:
    body = {"items": [
        {"metadata": {"namespace": "a", "name": "p", "uid": "u1"},
         "status": {
             "initContainerStatuses": [
                 {"name": "init", "containerID": "containerd://" + "1" * 64,
                  "state": {"terminated": {"exitCode": 0}}},
                 {"name": "mesh", "containerID": "cri-o://" + "2" * 64,
                  "state": {"running": {}}}],
             "containerStatuses": [
                 {"name": "app", "containerID": "containerd://" + "3" * 64},
                 {"name": "pending", "state": {"waiting": {}}},
                 {"name": "odd", "containerID": "nonsense"},
                 "not an object"]}},
        {"metadata": {"namespace": "a", "name": "no-uid"}, "status": {}},
        {"metadata": {"name": "p2", "uid": "u2"}, "status": {"containerStatuses": []}},
        "junk",
    ]}
    assert pod_refs_from_pod_list(body) == (
        PodRef("a", "p", "u1", (ContainerRef("mesh", "cri-o", "2" * 64),
                                ContainerRef("app", "containerd", "3" * 64))),
    )
    assert pod_refs_from_pod_list({"items": "nope"}) == ()
    assert pod_refs_from_pod_list(None) == ()


def test_pod_refs_share_the_strings_pods_repeat() -> None:
    """Namespaces, container names and runtimes repeated across pods are one object each
    in the refs (kept until /pods changes), whatever object each item's decode made."""
    def item(i: int) -> dict[str, object]:
        return json.loads(json.dumps({
            "metadata": {"namespace": "team", "name": f"web-{i}", "uid": f"u{i}"},
            "status": {"containerStatuses": [
                {"name": "app", "containerID": f"containerd://{i:064x}"}]}}))
    refs = pod_refs_from_body(json.dumps({"items": [item(i) for i in range(3)]}).encode())
    assert refs is not None and [r.name for r in refs] == ["web-0", "web-1", "web-2"]
    first, *others = refs
    for other in others:
        assert other.namespace is first.namespace
        assert other.containers[0].name is first.containers[0].name
        assert other.containers[0].runtime is first.containers[0].runtime
        assert other.containers[0].id != first.containers[0].id


@pytest.mark.parametrize(("body", "seconds"), [
    ({"kubeletconfig": {"cpuManagerReconcilePeriod": "5s"}}, 5.0),
    ({"kubeletconfig": {"cpuManagerReconcilePeriod": "1m30s"}}, 90.0),
    ({"kubeletconfig": {"cpuManagerReconcilePeriod": "500ms"}}, 0.5),
    ({"cpuManagerReconcilePeriod": "20s"}, 20.0),
    ({"kubeletconfig": {}}, 10.0),
    ({"kubeletconfig": {"cpuManagerReconcilePeriod": "soon"}}, 10.0),
    ({"kubeletconfig": {"cpuManagerReconcilePeriod": 7}}, 10.0),
    ("not json", 10.0),
])
def test_reconcile_period(body: object, seconds: float) -> None:
    assert cpu_manager_reconcile_period(body) == seconds


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
@pytest.mark.parametrize("runtime", ["containerd", "cri-o"])
def test_unknown_runtime_scheme_tries_every_scope_name(tmp_path: Path, driver: str,
                                                       runtime: str) -> None:
    pods = three_pods(runtime)
    write_tree(tmp_path, "v2", driver, pods)
    body = pod_list(pods)
    for item in body["items"]:  # type: ignore[attr-defined]
        for st in item["status"]["containerStatuses"]:
            st["containerID"] = st["containerID"].replace(f"{runtime}://", "future-rt://")
    reading = read_enforced(detect_layout(str(tmp_path)), pod_refs_from_pod_list(body))
    assert reading.errors == () and len(reading.enforced.containers) == 6
    # The id decides, not the runtime: CRI-O's conmon scope is never taken for it.
    assert reading.enforced.containers[("prod", "web", "app")] == frozenset({2, 3})


@pytest.mark.parametrize(("version", "driver", "runtime"), LAYOUTS)
def test_captured_tree_reads_back_the_same(tmp_path: Path, version: str, driver: str,
                                           runtime: str) -> None:
    pods = three_pods(runtime)
    live = tmp_path / "live"
    write_tree(live, version, driver, pods)
    refs = pod_refs_from_pod_list(pod_list(pods))
    layout = detect_layout(str(live))
    original = read_enforced(layout, refs)
    fixture = tmp_path / "fixture" / "cgroup"
    copied = cgroup.capture_tree(str(live), layout, refs, str(fixture))
    # Per container both cpuset files, per pod its cpuset.cpus, and v2's controllers.
    assert copied == 6 * 2 + 3 + (version == "v2")
    assert not list(fixture.rglob("*conmon*")) and not list(fixture.rglob("f" * 64 + "*"))
    again = read_enforced(detect_layout(str(fixture)), refs)
    assert again.enforced == original.enforced and again.errors == ()


def test_references_are_taken_only_when_there_are_cgroups_to_match(tmp_path: Path) -> None:
    """Handed what takes the references from /pods (as the kernel observer hands them), the
    source takes them only once it found a kubepods hierarchy: a node without one holds no
    reference per container. A body that is no pod list is still ``no_pod_list``."""
    taken: list[int] = []
    pods = three_pods("containerd")

    def refs() -> tuple[PodRef, ...]:
        taken.append(1)
        return pod_refs_from_pod_list(pod_list(pods))

    empty = tmp_path / "empty"
    (empty / "cpuset").mkdir(parents=True)
    assert CgroupSource(str(empty)).read(refs).off_reason == "no_kubepods"
    assert taken == []
    tree = tmp_path / "tree"
    write_tree(tree, "v2", "systemd", pods)
    reading = CgroupSource(str(tree)).read(refs)
    assert taken == [1] and reading.off is None
    assert reading.enforced == CgroupSource(str(tree)).read(refs()).enforced
    assert CgroupSource(str(tree)).read(lambda: None).off_reason == "no_pod_list"
