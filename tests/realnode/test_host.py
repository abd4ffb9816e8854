"""The real node leaves the host as it was (docs/real-node.md#host): a plain kubelet run
rewrites host-wide sysctls and writes under /var/lib/kubelet and /var/log, creates kubepods
cgroups and leaves processes. Here the kubelet runs a pod, is restarted, and the node is
stopped; then every one of those is as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from realnode import build
from realnode.harness import (
    SYSCTLS,
    Node,
    NodeConfig,
    NodeError,
    alive,
    guaranteed_pod,
    host_state,
)
from tests.realnode.conftest import StartNode, need_realnode


def test_the_host_is_unchanged(start_node: StartNode) -> None:
    before = host_state()
    node = start_node(NodeConfig(version="1.37"))
    node.wait_pods({node.add_pod(guaranteed_pod("app")): "Running"})
    pids = node.pids()
    assert len(alive(pids)) == len(pids) >= 3  # namespace holder, fake CRI, kubelet
    # The kubelet did try: inside its namespace it set the sysctls it wants, and wrote its
    # state under /var/lib/kubelet; none of it reached the host.
    inside = {n: node.run(["cat", f"/proc/sys/{n}"]).stdout.strip() for n in SYSCTLS}
    assert inside != before["sysctls"], inside
    assert node.run(["test", "-S", "/var/lib/kubelet/pod-resources/kubelet.sock"]
                    ).returncode == 0
    assert (node.root / "cpu_manager_state").is_file()
    assert list(Path("/sys/fs/cgroup/cpu").glob(f"{node.cgroup_root.lstrip('/')}/kubepods*"))
    node.restart_kubelet()
    pids = node.pids()
    node.stop()
    assert alive(pids) == []
    assert node.cgroups_left() == []
    assert host_state() == before


def test_a_node_that_fails_to_start_leaves_nothing() -> None:
    """A kubelet that refuses its configuration: the start fails with the kubelet's own
    words, and the fake CRI, the namespace and the cgroups it had are gone."""
    need_realnode("1.37")
    before = host_state()
    node = Node(NodeConfig(version="1.37", topology_policy="bogus"))
    with pytest.raises(NodeError, match="exited") as failed, node:
        pass
    assert "bogus" in str(failed.value)
    assert len(node.pids()) >= 2 and alive(node.pids()) == []
    assert node.cgroups_left() == []
    assert host_state() == before


def test_binaries_are_rebuilt_only_when_their_sources_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With no Go at all, a fresh binary is still found (its stamp matches its sources'
    hash); a stamp from other sources asks for a build."""
    need_realnode("1.37")
    monkeypatch.setattr(build, "go_binary", lambda: None)
    binary = build.kubelet("1.37")
    stamp = binary.with_name(binary.name + ".sha256")
    good = stamp.read_text()
    try:
        stamp.write_text("0" * 64 + "\n")
        with pytest.raises(build.RealNodeUnavailable, match="no Go toolchain"):
            build.kubelet("1.37")
    finally:
        stamp.write_text(good)
    assert build.kubelet("1.37") == binary
