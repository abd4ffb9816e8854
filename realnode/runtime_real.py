"""The real node on a real container runtime (docs/real-node.md): containerd v2.4.2 and runc
v1.5.3, built from the Go module proxy (realnode/containerd/), run the kubelet's pods as
processes on the host's own CPUs, in cgroups that runc writes with the kubelet's cgroupfs
layout. The fake runtime of realnode/harness.py pairs with a bound machine tree; this one
pairs with the host itself, so that the exporter's kernel sources (enforced cpusets,
drift, busy time per pool) are checked against what a runtime really wrote. A test tool:
the product never imports it.

    python -m realnode.runtime_real     # builds what is missing, says how long it took

    with RuntimeNode(NodeConfig(reserved_cpus="0")) as node:  # containerd + kubelet 1.37
        node.add_pod(on_runtime(guaranteed_pod("app", cpu="1"), spin=True))
        node.wait_pods({"app-realnode": "Running"})
        node.container_pids()          # the processes in the cgroups under its cgroupRoot

Everything happens inside the node's private mount namespace, with a private directory
bound over /run there: containerd's state, its shims' sockets and runc's state live in the
node's work dir and vanish with it. Teardown stops the pods through the kubelet, then every
container process, shim, containerd and kubelet by PID, then removes the cgroups.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.reference import go_binary
from realnode import build
from realnode.harness import (
    Node,
    NodeConfig,
    NodeError,
    alive,
    wait_for,
)

MODULE = Path(__file__).resolve().parent / "containerd"
OUT = build.BUILD / "runtime"
CONTAINERD = "github.com/containerd/containerd/v2/cmd/"
# Build tags: no btrfs/devmapper/zfs snapshotters (their C headers are not here, and the
# node uses the native snapshotter), no OpenTelemetry.
CONTAINERD_TAGS = "no_btrfs no_devmapper no_zfs no_tracing"
# (binary, package, cgo, tags)
BINARIES: tuple[tuple[str, str, bool, str], ...] = (
    ("containerd", CONTAINERD + "containerd", False, CONTAINERD_TAGS),
    ("containerd-shim-runc-v2", CONTAINERD + "containerd-shim-runc-v2", False, CONTAINERD_TAGS),
    ("ctr", CONTAINERD + "ctr", False, CONTAINERD_TAGS),
    # runc filters syscalls through libseccomp (Debian's libseccomp-dev), hence cgo.
    ("runc", "github.com/opencontainers/runc", True, "seccomp"),
    ("sleeper", "./cmd/sleeper", False, ""),
)
# The one image: the sandbox (pause) and every container run the static sleeper.
SANDBOX_IMAGE = "localhost/podres-sleeper:1"


def _inputs() -> list[Path]:
    return [MODULE / "go.mod", MODULE / "go.sum", *sorted(MODULE.rglob("*.go"))]


def binaries(*, quiet: bool = True) -> Path:
    """The directory holding containerd, its runc shim, ctr, runc and the sleeper, built
    when missing or when realnode/containerd/ changed (a stamp holds the hash of its
    files). Raises :class:`build.RealNodeUnavailable` when they cannot be built."""
    stamp = OUT / "runtime.sha256"
    digest = build._digest(_inputs(), repr(BINARIES))
    if stamp.exists() and stamp.read_text().strip() == digest and \
            all((OUT / b[0]).exists() for b in BINARIES):
        return OUT
    go = go_binary()
    if go is None:
        raise build.RealNodeUnavailable("no Go toolchain ('go' is not on PATH): containerd "
                                        "and runc cannot be built")
    OUT.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    for name, package, cgo, tags in BINARIES:
        cmd = ["nice", "-n", "10", go, "build", "-o", str(OUT / name)]
        if tags:
            cmd.append(f"-tags={tags}")
        cmd.append(package)
        if not quiet:
            print(f"realnode: building {name}: {' '.join(cmd[3:])}", file=sys.stderr)
        env = {**os.environ, "CGO_ENABLED": "1" if cgo else "0"}
        done = subprocess.run(cmd, cwd=MODULE, env=env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            hint = " (runc needs libseccomp-dev)" if cgo and "seccomp" in done.stderr else ""
            raise build.RealNodeUnavailable(
                f"building {name} failed{hint}:\n{done.stderr.strip()[-4000:]}")
    stamp.write_text(digest + "\n")
    return OUT


def oci_archive(binary: Path, name: str, out: Path) -> None:
    """``binary`` as the single file ``/sleeper`` of a one-layer image named ``name``, in an
    OCI image layout tarball for ``ctr images import``: no registry, no daemon."""
    def blob(data: bytes) -> str:
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def add(t: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(path)
        info.size, info.mode, info.mtime = len(data), mode, 0
        t.addfile(info, io.BytesIO(data))

    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        add(t, "sleeper", binary.read_bytes(), 0o755)
    layer = layer_buf.getvalue()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/sleeper"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [blob(layer)]}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": blob(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": blob(layer), "size": len(layer)}]}).encode()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": blob(manifest), "size": len(manifest),
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": name}}]}).encode()
    with tarfile.open(out, "w") as t:
        add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add(t, "index.json", index)
        for data in (layer, config, manifest):
            add(t, "blobs/sha256/" + blob(data)[7:], data)


def containerd_config(state: Path, runc: Path) -> str:
    """containerd's config (version 3): everything under ``state``; the native snapshotter
    (no overlay on overlay), for the CRI and for ``ctr images import`` (its transfer
    service unpacks only where a platform names the snapshotter); runc through the v2 shim
    with the cgroupfs driver, as the kubelet's; ``restrict_oom_score_adj`` (no
    CAP_SYS_RESOURCE here: the kubelet asks for -997 on Guaranteed containers, which may not
    go below containerd's own); no CNI (the pods use the host's network), yet its conf
    directory in ``state`` (it creates it); the ``opt`` plugin off (it creates
    /opt/containerd). Nothing of it lands on the host."""
    return f"""version = 3
root = "{state}/root"
state = "{state}/state"
disabled_plugins = ["io.containerd.internal.v1.opt"]
[grpc]
  address = "{state}/containerd.sock"
[ttrpc]
  address = "{state}/containerd.sock.ttrpc"
[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
  platform = "linux/amd64"
  snapshotter = "native"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{SANDBOX_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{state}/cni/bin"]
    conf_dir = "{state}/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
"""


def on_runtime(manifest: Mapping[str, Any], *, spin: bool = False) -> dict[str, Any]:
    """A harness pod manifest made runnable here: the host's network (no CNI), the local
    image never pulled (no registry), and with ``spin`` its containers keep a CPU busy."""
    pod: dict[str, Any] = json.loads(json.dumps(manifest))
    spec = pod["spec"]
    spec["hostNetwork"] = True
    for c in [*spec["containers"], *spec.get("initContainers", [])]:
        c["image"] = SANDBOX_IMAGE
        c["imagePullPolicy"] = "Never"
        if spin:
            c["args"] = ["spin"]
    return pod


class RuntimeNode(Node):
    """A :class:`Node` whose CRI runtime is containerd + runc instead of the fake one."""

    def __init__(self, config: NodeConfig, workdir: Path | None = None) -> None:
        super().__init__(config, workdir)
        self.state = self.workdir / "containerd"
        self.cri_socket = self.state / "containerd.sock"
        self.run_dir = self.workdir / "run"
        self._containerd: subprocess.Popen[bytes] | None = None

    def _start_runtime(self) -> None:
        """containerd, its image imported, in place of the fake CRI runtime."""
        bin_dir = binaries()
        for d in (self.state, self.run_dir):
            d.mkdir(parents=True, exist_ok=True)
        # The shims' sockets (/run/containerd/s) and runc's state (/run/containerd/runc)
        # are fixed paths: a private /run keeps them, and the host's /run, untouched.
        self._check(self.run(["mount", "--bind", str(self.run_dir), "/run"]), "binding /run")
        conf = self.state / "containerd.toml"
        conf.write_text(containerd_config(self.state, bin_dir / "runc"))
        env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        self._containerd = self.spawn([str(bin_dir / "containerd"), "--config", str(conf)],
                                      env=env, log="containerd.log")
        containerd = self._containerd
        wait_for(lambda: self.cri_socket.is_socket() or self._dead(containerd, "containerd"),
                 60, "containerd's socket")
        archive = self.state / "sleeper.tar"
        oci_archive(bin_dir / "sleeper", SANDBOX_IMAGE, archive)
        self._check(self.ctr("images", "import", "--snapshotter", "native", str(archive)),
                    "importing the image")

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``ctr`` on this node's containerd, in the kubelet's namespace (k8s.io)."""
        return self.run([str(OUT / "ctr"), "--address", str(self.cri_socket),
                         "--namespace", "k8s.io", *args], timeout=60)

    @staticmethod
    def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
        if done.returncode != 0:
            raise NodeError(f"{what} failed ({done.returncode}): "
                            f"{(done.stderr or done.stdout).strip()[-800:]}")

    # ---- what runc made ------------------------------------------------------------------

    def cgroup_dirs(self, hierarchy: str = "cpuset") -> list[Path]:
        """Every cgroup under this node's cgroupRoot in one v1 hierarchy, parents first."""
        top = Path("/sys/fs/cgroup", hierarchy, self.cgroup_root.lstrip("/"))
        return sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts))

    def container_pids(self) -> list[int]:
        """Every process in a cgroup under this node's cgroupRoot (containers and
        sandboxes; runc starts them there, the shims stay outside)."""
        pids: list[int] = []
        for d in self.cgroup_dirs():
            with contextlib.suppress(OSError):
                pids += [int(p) for p in (d / "cgroup.procs").read_text().split()]
        return pids

    def shim_pids(self) -> list[int]:
        """The runc shims this node's containerd started (their ``-address`` names its
        socket)."""
        out = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if argv[0].endswith(b"containerd-shim-runc-v2") and \
                        str(self.cri_socket).encode() in argv:
                    out.append(int(proc.name))
        return out

    # ---- teardown ------------------------------------------------------------------------

    def stop(self) -> None:
        """The pods stopped by the kubelet (while it runs), then every container process,
        shim, containerd and kubelet by PID, then the cgroups and containerd's state."""
        try:
            if self.kubelet_pid is not None:
                for manifest in self.manifests.glob("*.yaml"):
                    manifest.unlink()
                with contextlib.suppress(NodeError, OSError):
                    wait_for(lambda: not self.container_pids(), 60, "the pods to stop")
            shims = self.shim_pids()
            for pid in [*self.container_pids(), *shims]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while (self.container_pids() or alive(shims)) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            super().stop()
            shutil.rmtree(self.state, ignore_errors=True)
            shutil.rmtree(self.run_dir, ignore_errors=True)


def main() -> int:
    t0 = time.monotonic()
    try:
        out = binaries(quiet=False)
    except build.RealNodeUnavailable as exc:
        print(f"realnode: {exc}", file=sys.stderr)
        return 1
    print(f"realnode: containerd, runc and the sleeper ready in {out} "
          f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
