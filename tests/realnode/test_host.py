"""The real node leaves the host as it was (docs/real-node.md#host): a plain kubelet run
rewrites host-wide sysctls and writes under /var/lib/kubelet and /var/log, creates kubepods
cgroups and leaves processes. Here the kubelet runs a pod, is restarted, and the node is
stopped; then every one of those is as before."""

from __future__ import annotations

from pathlib import Path

from realnode.harness import SYSCTLS, NodeConfig, alive, guaranteed_pod, host_state
from tests.realnode.conftest import StartNode


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
