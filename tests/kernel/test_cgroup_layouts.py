"""Where the kubelet's cgroups are: its cgroupRoot and driver from /configz (kind's
``/kubelet`` root included), the flags over them, and a source that is on but finds nothing
usable (with the reason, and "permission denied" said as such)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.sources.cgroup import (
    CgroupSource,
    CgroupUnavailable,
    detect_layout,
    kubelet_cgroups,
    pod_refs_from_pod_list,
    read_enforced,
)
from exporter.sources.cgroup_layout import cgroup_path
from kernel.helpers import FixtureContainer, FixturePod, cid, pod_list, write_tree
from kernel.test_cgroup_source import three_pods

REPO = Path(__file__).resolve().parents[2]
WANT = {
    ("prod", "web", "proxy"): frozenset({4}),
    ("prod", "web", "app"): frozenset({2, 3}),
    ("prod", "batch", "sidecar"): frozenset({0, 1, 5, 6, 7}),
    ("prod", "batch", "worker"): frozenset({0, 1, 5, 6, 7}),
    ("dev", "toy", "init-like"): frozenset(range(8)),
    ("dev", "toy", "toy"): frozenset(range(8)),
}


def configz(**cfg: object) -> dict[str, object]:
    return {"kubeletconfig": cfg}


def test_names_as_the_kubelet_writes_them() -> None:
    # The example in k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/cgroup_manager_linux.go
    # (CgroupName.ToSystemd's comment), and its cgroupfs form (ToCgroupfs).
    parts = ["kubepods", "burstable", "pod1234-abcd-5678-efgh"]
    assert cgroup_path(parts, "systemd") == (
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice")
    assert cgroup_path(parts, "cgroupfs") == "kubepods/burstable/pod1234-abcd-5678-efgh"
    # kind: cgroupRoot /kubelet (NodeAllocatableRoot adds kubepods to it).
    assert cgroup_path(["kubelet", "kubepods"], "systemd") == \
        "kubelet.slice/kubelet-kubepods.slice"
    # A root component with a dash: escaped to "_" before the slice is expanded.
    assert cgroup_path(["my-root", "kubepods"], "systemd") == \
        "my_root.slice/my_root-kubepods.slice"


def test_settings_from_configz_and_flags_over_them() -> None:
    kind = configz(cgroupRoot="/kubelet", cgroupDriver="systemd")
    assert kubelet_cgroups(kind)[:3] == ("/kubelet", "systemd", True)
    assert kubelet_cgroups(kind).origin == "/configz"
    # The flags win, each on its own.
    assert kubelet_cgroups(kind, "/other")[:2] == ("/other", "systemd")
    assert kubelet_cgroups(kind, "", "cgroupfs")[:2] == ("/kubelet", "cgroupfs")
    assert kubelet_cgroups(kind, "", "auto").origin == "/configz"
    # Nothing known: the kubelet's defaults for the root, either driver.
    assert kubelet_cgroups(None)[:3] == ("/", None, True)
    assert kubelet_cgroups(configz(cgroupDriver="bogus", cgroupRoot=7))[:2] == ("/", None)
    assert kubelet_cgroups(configz(cgroupsPerQOS=False)).per_qos is False


@pytest.mark.parametrize("version", ["v2", "v1"])
@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_kind_layout_found_from_configz(tmp_path: Path, version: str, driver: str) -> None:
    pods = three_pods("containerd")
    base = write_tree(tmp_path, version, driver, pods, kubelet_root=("kubelet",))
    top = "kubelet.slice/kubelet-kubepods.slice" if driver == "systemd" else "kubelet/kubepods"
    assert (base / top).is_dir()  # the tree is laid out as kind's kubelet lays it out
    refs = pod_refs_from_pod_list(pod_list(pods))
    # Without the kubelet's settings, the default root has no kubepods: off, saying where
    # it looked and how to point it elsewhere.
    off = CgroupSource(str(tmp_path)).read(refs)
    assert off.off_reason == "no_kubepods" and off.off is not None
    assert "cgroupRoot /" in off.off and "/configz" not in off.off
    # From /configz.
    source = CgroupSource(str(tmp_path))
    reading = source.read(refs, configz(cgroupRoot="/kubelet", cgroupDriver=driver))
    assert reading.off is None and reading.errors == () and reading.gone == ()
    assert reading.layout is not None and reading.layout.driver == driver
    assert dict(reading.enforced.containers) == WANT
    # From the flag, /configz unread.
    flagged = CgroupSource(str(tmp_path), kubelet_root="/kubelet").read(refs)
    assert dict(flagged.enforced.containers) == WANT
    # The driver flag over a /configz that names the other one.
    other = "cgroupfs" if driver == "systemd" else "systemd"
    forced = CgroupSource(str(tmp_path), driver).read(
        refs, configz(cgroupRoot="/kubelet", cgroupDriver=other))
    assert dict(forced.enforced.containers) == WANT
    wrong = CgroupSource(str(tmp_path)).read(
        refs, configz(cgroupRoot="/kubelet", cgroupDriver=other))
    assert wrong.off_reason == "no_kubepods" and wrong.off is not None
    assert f"{other} (/configz)" in wrong.off


def test_deeper_root_under_both_drivers(tmp_path: Path) -> None:
    pods = three_pods("cri-o")
    for driver in ("systemd", "cgroupfs"):
        root = tmp_path / driver
        write_tree(root, "v2", driver, pods, kubelet_root=("infra", "kube"))
        layout = detect_layout(str(root), "auto", kubelet_cgroups(
            configz(cgroupRoot="/infra/kube/", cgroupDriver=driver)))
        reading = read_enforced(layout, pod_refs_from_pod_list(pod_list(pods)))
        assert dict(reading.enforced.containers) == WANT, driver


def test_per_qos_off_has_no_pod_cgroups(tmp_path: Path) -> None:
    write_tree(tmp_path, "v2", "systemd", three_pods("containerd"))
    reading = CgroupSource(str(tmp_path)).read(
        pod_refs_from_pod_list(pod_list(three_pods("containerd"))),
        configz(cgroupsPerQOS=False, cgroupDriver="systemd"))
    assert reading.off_reason == "no_qos_cgroups"
    assert reading.off is not None and "cgroupsPerQOS" in reading.off


@pytest.mark.parametrize(("setup", "reason"), [
    (lambda root: None, "not_mounted"),
    (lambda root: (root / "cgroup.controllers").write_text("cpu memory\n"),
     "no_cpuset_controller"),
    (lambda root: (root / "cgroup.controllers").write_text("cpuset\n"), "no_kubepods"),
    (lambda root: (root / "cpuset").mkdir(), "no_kubepods"),
])
def test_off_reasons(tmp_path: Path, setup: object, reason: str) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    setup(root)  # type: ignore[operator]
    reading = CgroupSource(str(root)).read(())
    assert reading.off_reason == reason and reading.off is not None
    assert CgroupSource(str(root)).read(None).off_reason == "no_pod_list"
    with pytest.raises(CgroupUnavailable) as caught:
        detect_layout(str(root))
    assert caught.value.reason == reason


# -- permission denied: read as an unprivileged user, as a misconfigured pod would -------

@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory nobody may look into (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="podres-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_nobody(root: Path, pods: list[FixturePod]) -> list[str]:
    """The reading's off reason and error messages, read by uid 65534."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv not installed (util-linux)")
    script = (
        "import json, sys\n"
        "from exporter.sources.cgroup import CgroupSource, pod_refs_from_pod_list\n"
        "r = CgroupSource(sys.argv[1]).read(pod_refs_from_pod_list(json.loads(sys.argv[2])))\n"
        "print(json.dumps([r.off_reason, r.off] + [e.message for e in r.errors]"
        " + [g.entry.message for g in r.gone]))\n")
    out = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
         script, str(root), json.dumps(pod_list(pods))],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    result: list[str] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to nobody")
def test_permission_denied_is_said_so(open_tmp: Path) -> None:
    pods = three_pods("containerd")
    base = write_tree(open_tmp / "cg", "v2", "systemd", pods)
    for d in (open_tmp / "cg").rglob("*"):
        if d.is_dir():
            d.chmod(0o755)
    # A container's cgroup nobody may enter: that entry says so, the rest reads.
    scope = next(base.rglob(f"cri-containerd-{cid(2)}.scope"))
    scope.chmod(0o700)
    off, _, *messages = _as_nobody(open_tmp / "cg", pods)
    assert off is None
    assert messages == [f"{scope}/cpuset.cpus.effective: permission denied"]
    scope.chmod(0o755)
    # The kubepods hierarchy nobody may list: the source is off, saying why.
    (base / "kubepods.slice").chmod(0o700)
    off, message, *messages = _as_nobody(open_tmp / "cg", pods)
    assert off == "permission_denied" and "permission denied" in message
    assert "kubepods" in message and not messages
    # The mount itself.
    (open_tmp / "cg").chmod(0o700)
    off, message, *_ = _as_nobody(open_tmp / "cg", pods)
    assert off == "permission_denied" and "not a cgroup mount" not in message


def test_usage_from_each_cgroup(tmp_path: Path) -> None:
    """cgroup v1 ``cpuacct.usage`` (nanoseconds, in the cpuacct hierarchy, mounted alone or
    as cpu,cpuacct) and v2 ``cpu.stat`` ``usage_usec``: seconds per container and pod."""
    pods = [FixturePod("prod", "web", "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "guaranteed", [
        FixtureContainer("proxy", cid(1), "4\n"), FixtureContainer("app", cid(2), "2-3\n"),
    ], cpuset="2-4")]
    usage = {cid(1): 1_500_000, cid(2): 250, pods[0].uid: 3_000_000}
    for version, driver in (("v2", "systemd"), ("v1", "cgroupfs"), ("v1", "systemd")):
        root = tmp_path / f"{version}-{driver}"
        write_tree(root, version, driver, pods, usage=usage)
        if driver == "systemd" and version == "v1":  # cpu,cpuacct with a cpuacct link
            (root / "cpuacct").rename(root / "cpu,cpuacct")
            (root / "cpuacct").symlink_to("cpu,cpuacct")
        reading = read_enforced(detect_layout(str(root)),
                                pod_refs_from_pod_list(pod_list(pods)))
        assert reading.errors == ()
        assert dict(reading.container_usage) == {("prod", "web", "proxy"): 1.5,
                                                 ("prod", "web", "app"): 0.00025}
        assert dict(reading.pod_usage) == {("prod", "web"): 3.0}
    # A cgroup without accounting has no reading (no error); a malformed one is an entry
    # error and the cpusets still read.
    next((tmp_path / "v2-systemd").rglob(f"*{cid(1)}.scope")).joinpath("cpu.stat").write_text(
        "user_usec 5\n")
    next((tmp_path / "v2-systemd").rglob(f"*{cid(2)}.scope")).joinpath("cpu.stat").unlink()
    reading = read_enforced(detect_layout(str(tmp_path / "v2-systemd")),
                            pod_refs_from_pod_list(pod_list(pods)))
    assert [(e.container, "usage_usec" in e.message) for e in reading.errors] == \
        [("proxy", True)]
    assert dict(reading.container_usage) == {}
    assert len(reading.enforced.containers) == 2
