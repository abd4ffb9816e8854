"""The exporter from its image on the real node (docs/real-node.md#the-image): the OCI image
CI builds (deploy/image/build.sh, named by PODRES_IMAGE_OCI) run by deploy/image/run.py
inside the node's mount namespace as a runtime would run the DaemonSet's container: the
image's entry point, environment and read-only root, the manifest's environment (paths
unmapped: they are the container's), its securityContext's user, and its volumes (plus the
checkpoint patch's) bound at their mount paths from the node's /var/lib/kubelet, /sys and
the service account's files. Its ledger is the kubelet's, CPU by CPU.

Without an image this skips with one line; with PODRES_REQUIRE_IMAGE=1 that is a failure
(as in tests/deploy/test_image.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from realnode.daemonset import daemonset_container
from realnode.harness import Node, NodeConfig
from tests.deploy.image_layout import built_layout
from tests.realnode.checks import agreeing
from tests.realnode.conftest import StartNode
from tests.realnode.test_ledger import AMD, drop_in, tree_workload

RUN = Path(__file__).resolve().parents[2] / "deploy" / "image" / "run.py"


@pytest.fixture
def layout() -> Path:
    return built_layout()


def _in_image(rootfs: Path) -> list[tuple[int, int, str]]:
    """(PID, effective UID, command line) of each process whose root is ``rootfs``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "root")) != rootfs:
                continue
            uid = int(next(line for line in (entry / "status").read_text().splitlines()
                           if line.startswith("Uid:")).split()[2])
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:  # gone meanwhile
            continue
        found.append((int(entry.name), uid, argv))
    return found


def test_the_image_on_the_node_holds_the_kubelets_cpus(layout: Path,
                                                       start_node: StartNode) -> None:
    node: Node = start_node(NodeConfig(version="1.37", tree=AMD, scope="pod",
                                       pod_level=True))
    container = daemonset_container(node)
    assert container.env["PODRES_PODRESOURCES_SOCKET"] == \
        "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert container.env["PODRES_SYSFS"] == "/host/sys"
    assert container.env["PODRES_KUBELET_ROOT_DIR"] == "/host/var/lib/kubelet"
    assert container.user == "0:0"
    running = drop_in(node, tree_workload())
    cache = node.workdir / "image"  # the unpacked root goes with the node's work dir

    def command(port: int) -> list[str]:
        env = {**container.env, "PODRES_WEB_LISTEN_ADDRESS": f"127.0.0.1:{port}"}
        return [sys.executable, str(RUN), str(layout), "--cache", str(cache),
                "--user", container.user,
                *(f"--volume={host}:{path}{':ro' if ro else ''}"
                  for host, path, ro in container.volumes),
                *(f"--env={k}={v}" for k, v in env.items())]

    serve = node.start_serve(command=command, log="image.log")

    def poll_now() -> dict[str, Any] | None:
        serve.reload()  # SIGHUP, through run.py and the namespace's init to serve
        return serve.ledger()

    try:
        ledger, _ = agreeing(poll_now, node, running)
        # It is the image that answers: the serving process runs chrooted in its root, as
        # the DaemonSet's user.
        (rootfs,) = cache.glob("rootfs-*")
        procs = [p for p in _in_image(rootfs) if "podres-exporter serve" in p[2]]
        assert [uid for _, uid, _ in procs] == [0], procs
        # Each volume reached it: the checkpoint files through the patch's kubelet root, the
        # SQLite history in the emptyDir.
        metrics = serve.metrics()
        assert "podres_checkpoint_info{" in metrics, metrics[-2000:]
        assert "podres_up 1" in metrics
        assert (node.workdir / "exporter" / "history" / "history.db").stat().st_size > 0
        assert ledger["node"]["name"] == node.name
    finally:
        serve.stop()
    assert not _in_image(rootfs), "a process of the image outlived serve.stop()"
