"""A real kubelet node for tests (docs/real-node.md): the kubelet binary of realnode/build.py,
standalone (static pods, no API server), on the kubelet's own fake CRI runtime, in a private
mount namespace that keeps the host as it was. A test tool: the product never imports it.

API::

    from realnode.harness import Node, NodeConfig, guaranteed_pod

    config = NodeConfig(version="1.37", tree="64amd64-4s2n4ca2co", scope="pod",
                        pod_level=True, topology_policy="single-numa-node")
    with Node(config) as node:                        # fake CRI + kubelet up, socket answering
        name = node.add_pod(guaranteed_pod("app", cpu="2"))   # -> "app-realnode"
        node.wait_pods({name: "Running"})             # phases from the kubelet's /pods
        state = node.checkpoint("cpu_manager_state")  # the kubelet's file, json-decoded
        ledger = node.snapshot()                      # `snapshot -o json` as the DaemonSet runs it
        node.restart_kubelet()                        # SIGTERM, then the same kubelet again
        node.remove_pod("app")

- ``NodeConfig``: kubelet version ("1.37"/"1.36"), a hwloc tree name (tests/data/hwloc) bound
  over /sys/devices/system/{cpu,node} and /proc/cpuinfo (None: the host's CPUs), CPU/memory/
  topology manager settings, the PodLevelResourceManagers gate, ``extra`` KubeletConfiguration
  fields merged last, ``images`` the fake runtime knows.
- Paths as the host sees them: ``node.root`` (the kubelet's /var/lib/kubelet),
  ``node.manifests`` (staticPodPath), ``node.socket`` (PodResources), ``node.workdir``;
  ``node.sysfs`` is the sysfs the kubelet reads (the tree's ``sys`` or /sys).
- Inside the node's namespace: ``node.run(argv)`` / ``node.spawn(argv)`` run any command there
  (the kubelet's /var/lib/kubelet is /var/lib/kubelet, the bound tree is /sys);
  ``node.exporter_env()`` is the DaemonSet's environment with its hostPath volumes mapped
  (deploy/manifests/daemonset.yaml + patches/checkpoints.yaml); ``node.exporter(*args)``
  runs ``podres-exporter`` with it, ``node.start_serve()`` starts the image's entrypoint
  (``podres-exporter serve``) with it and returns a :class:`Serve` (``.url``, ``.ledger()``,
  ``.metrics()``, ``.stop()``); ``start_serve(command=...)`` runs something else there
  instead, such as the built image (deploy/image/run.py) with
  :func:`realnode.daemonset.daemonset_container`'s environment, volumes and user.
- ``node.kubelet_url``, ``node.ro_url`` (read-only port), ``node.ca_file``, ``node.token_file``.
- Teardown (``stop()``, also on a failing test): every process stopped by its PID, the
  namespace (and with it every mount) gone, every cgroup under the run's own ``cgroupRoot``
  removed depth first. ``host_state()`` is what a test compares before and after.

- Memory and devices: ``NodeConfig(memory_policy="Static")`` adds the reserved memory the
  memory manager wants (override with ``extra``); the device manager's directory is
  ``node.root / "device-plugins"`` on the host (``/var/lib/kubelet/device-plugins`` inside),
  where a plugin started with ``node.spawn`` (stopped at teardown) or from the host registers.

Tests use ``tests/realnode/conftest.py`` (``start_node`` fixture, ``need_realnode(version)``
which builds or skips, a failure under PODRES_REQUIRE_REALNODE=1) and
``tests/realnode/checks.py`` (``KubeletCPUState.read(node)``, ``agreeing(read, node,
running)``: the first ledger that is the kubelet's, else the last disagreement).

Needs root, cgroup v1 hierarchies and ``unshare``/``nsenter``; ``unavailable()`` says why not.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from exporter.tlsutil import write_self_signed
from realnode import build
from realnode.daemonset import daemonset_env
from realnode.trees import cached_tree

REPO = Path(__file__).resolve().parent.parent
EXPORTER = Path(sys.executable).parent / "podres-exporter"
CGROUP_V1 = Path("/sys/fs/cgroup")
IMAGE = "registry.invalid/workload:1"
NODE_NAME = "realnode"
# The kubelet rewrites these host-wide sysctls when they differ from what it wants
# (setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go): each gets a private
# copy bound over it inside the namespace.
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
_serial = itertools.count()
T = TypeVar("T")


class NodeError(RuntimeError):
    """The node did not come up or a wait timed out; the message ends with the kubelet's
    last error lines."""


def unavailable() -> str | None:
    """Why a real node cannot run here, or None."""
    if os.geteuid() != 0:
        return "the real node needs root (mount namespace, cgroups)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"no {tool}(1) on PATH"
    if not cgroup_hierarchies():
        return "no writable cgroup v1 hierarchy under /sys/fs/cgroup"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return "no mount namespace here (unshare -m failed)"
    return None


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (the kubelet's cgroupfs driver writes in each)."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] == "cgroup" and fields[1].startswith(str(CGROUP_V1)):
            out.append(Path(fields[1]))
    return sorted(set(out))


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (held together so that they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def guaranteed_pod(name: str, cpu: str = "1", memory: str = "64Mi", *,
                   containers: Sequence[tuple[str, str | None]] = (),
                   sidecars: Sequence[tuple[str, str | None]] = (),
                   pod_resources: tuple[str, str] | None = None,
                   image: str = IMAGE) -> dict[str, Any]:
    """A static pod manifest. By default one container ``app`` with ``cpu``/``memory`` as
    requests = limits. ``containers`` lists (name, cpu or None) instead, a None container
    having no resources at all; ``sidecars`` the same for restartable init containers;
    ``pod_resources`` (cpu, memory) sets spec.resources (pod-level resources, KEP-2837)."""
    def res(c: str, m: str) -> dict[str, Any]:
        return {"requests": {"cpu": c, "memory": m}, "limits": {"cpu": c, "memory": m}}

    def container(n: str, c: str | None, **more: Any) -> dict[str, Any]:
        return {"name": n, "image": image, **more, **({"resources": res(c, memory)} if c else {})}
    spec: dict[str, Any] = {"containers": [
        container(n, c) for n, c in (containers or (("app", cpu),))]}
    if sidecars:
        spec["initContainers"] = [container(n, c, restartPolicy="Always") for n, c in sidecars]
    if pod_resources is not None:
        spec["resources"] = res(*pod_resources)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def burstable_pod(name: str, cpu: str | None = "500m", image: str = IMAGE) -> dict[str, Any]:
    """A static pod with one container requesting ``cpu`` and no limit (node shared pool);
    with ``cpu=None`` no request at all (BestEffort)."""
    resources = {"resources": {"requests": {"cpu": cpu}}} if cpu else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "web", "image": image, **resources}]}}


@dataclass
class NodeConfig:
    """How the node is set up; every field ends up in the KubeletConfiguration file."""

    version: str = "1.37"
    tree: str | None = None
    cpu_policy: str = "static"
    reserved_cpus: str = "0"
    cpu_options: Mapping[str, str] = field(default_factory=dict)
    topology_policy: str = "single-numa-node"
    scope: str = "pod"
    pod_level: bool = True
    memory_policy: str = "None"
    extra: Mapping[str, Any] = field(default_factory=dict)
    images: Sequence[str] = (IMAGE,)

    def describe(self) -> str:
        return (f"kubelet {self.version} on {self.tree or 'the host'}: {self.topology_policy}/"
                f"{self.scope}, PodLevelResourceManagers {'on' if self.pod_level else 'off'}")


@dataclass
class Serve:
    """A running ``podres-exporter serve`` inside the node's namespace."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def get(self, path: str, timeout: float = 5) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def ledger(self) -> dict[str, Any] | None:
        """The published ledger, or None while serve answers 503 (no poll done yet)."""
        status, body = self.get("/api/v1/ledger")
        if status == 503:
            return None
        if status != 200:
            raise NodeError(f"serve answered {status} for the ledger: {body[:300]!r}")
        ledger: dict[str, Any] = json.loads(body)
        return ledger

    def metrics(self) -> str:
        return self.get("/metrics")[1].decode()

    def reload(self) -> None:
        """SIGHUP: poll at once."""
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        _stop(self.proc)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for(check: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.2) -> T:
    """``check()``'s first truthy answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise NodeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Node:
    """One real node: start() (or ``with``) to run it, stop() to leave nothing behind."""

    def __init__(self, config: NodeConfig, workdir: Path | None = None) -> None:
        self.config = config
        self.name = NODE_NAME
        # Short: unix socket paths must fit in 107 bytes. A work dir made here goes at
        # stop() unless PODRES_REALNODE_KEEP=1 (its logs/ hold the kubelet's logs).
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="rn-", dir="/tmp"))
        self.var_lib = self.workdir / "var-lib"
        self.root = self.var_lib / "kubelet"
        self.manifests = self.workdir / "manifests"
        self.socket = self.root / "pod-resources" / "kubelet.sock"
        self.cri_socket = self.workdir / "cri.sock"
        self.logs = self.workdir / "logs"
        self.tree = cached_tree(config.tree) if config.tree else None
        self.sysfs = self.tree / "sys" if self.tree else Path("/sys")
        self.cgroup_root = f"/podres-realnode-{os.getpid()}-{next(_serial)}"
        self.port, self.ro_port, self.healthz_port = free_ports(3)
        self.kubelet_url = f"https://127.0.0.1:{self.port}"
        self.ro_url = f"http://127.0.0.1:{self.ro_port}"
        self.ca_file = self.workdir / "sa" / "ca.crt"
        self.token_file = self.workdir / "sa" / "token"
        self._holder: subprocess.Popen[bytes] | None = None
        self._kubelet: subprocess.Popen[bytes] | None = None
        self._cri: subprocess.Popen[bytes] | None = None
        self._procs: list[subprocess.Popen[bytes]] = []
        self._kubelet_starts = 0

    # ---- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> Node:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """The node's files, cgroup root and namespace, then its runtime, then the kubelet."""
        self._binary = build.kubelet(self.config.version)
        for d in (self.var_lib, self.workdir / "var-log", self.manifests, self.logs,
                  self.workdir / "sysctl", self.ca_file.parent, self.workdir / "pki"):
            d.mkdir(parents=True, exist_ok=True)
        cert, key = write_self_signed(self.workdir / "pki", "localhost")
        shutil.copy(cert, self.ca_file)
        self.token_file.write_text("realnode\n")
        make_cgroup_root(self.cgroup_root)
        (self.workdir / "kubelet-config.yaml").write_text(
            yaml.safe_dump(kubelet_config(self, cert, key), sort_keys=False))
        self._start_namespace()
        self._start_runtime()
        self.start_kubelet()

    def _start_runtime(self) -> None:
        """The CRI runtime the kubelet talks to: here the fake one (a subclass may run a real
        one, inside the namespace already made)."""
        fakecri = build.fakecri()
        (self.workdir / "imagefs").mkdir(parents=True, exist_ok=True)
        self._cri = self.spawn([str(fakecri), "-listen", str(self.cri_socket), "-image-fs",
                                str(self.workdir / "imagefs"), *self.config.images],
                               log="fakecri.log")
        wait_for(lambda: self.cri_socket.is_socket() or self._dead(self._cri, "fakecri"),
                 30, "the fake CRI socket")

    def stop(self) -> None:
        """Stops everything this node started, by PID, newest first; removes its cgroups."""
        for proc in reversed(self._procs):
            _stop(proc)
        if self._holder is not None:
            _stop(self._holder, timeout=5)
        remove_cgroups(self.cgroup_root)
        if self._own_workdir and os.environ.get("PODRES_REALNODE_KEEP") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)

    def start_kubelet(self) -> None:
        """Starts the kubelet (again) and waits until PodResources answers."""
        self._kubelet_starts += 1
        self._kubelet = self.spawn(
            [str(self._binary), f"--config={self.workdir / 'kubelet-config.yaml'}",
             "--root-dir=/var/lib/kubelet", f"--cert-dir={self.workdir / 'pki'}",
             f"--hostname-override={NODE_NAME}", "--v=2"],
            log=f"kubelet-{self._kubelet_starts}.log", cwd="kubelet-cwd")
        kubelet = self._kubelet
        wait_for(lambda: self.socket_answers() or self._dead(kubelet, "the kubelet"),
                 60, "the kubelet's PodResources socket")

    def stop_kubelet(self) -> None:
        if self._kubelet is not None:
            _stop(self._kubelet)

    def restart_kubelet(self) -> None:
        self.stop_kubelet()
        self.start_kubelet()

    @property
    def kubelet_pid(self) -> int | None:
        return None if self._kubelet is None or self._kubelet.poll() is not None \
            else self._kubelet.pid

    def pids(self) -> list[int]:
        """Every process this node started (the namespace holder included)."""
        procs = [*self._procs, *([self._holder] if self._holder else [])]
        return [p.pid for p in procs]

    # ---- the namespace -------------------------------------------------------------------

    def _start_namespace(self) -> None:
        """A process that only holds a private mount namespace with the binds; everything
        else enters it with nsenter. When it ends, the namespace and its mounts are gone."""
        w = self.workdir
        lines = ["set -eu"]
        for name in SYSCTLS:
            private = w / "sysctl" / name.replace("/", "_")
            private.write_text(Path("/proc/sys", name).read_text())
            lines.append(f"mount --bind {private} /proc/sys/{name}")
        lines += [f"mount --bind {w / 'var-lib'} /var/lib",
                  f"mount --bind {w / 'var-log'} /var/log"]
        if self.tree is not None:
            lines += [f"mount --bind {self.tree}/sys/devices/system/cpu /sys/devices/system/cpu",
                      f"mount --bind {self.tree}/sys/devices/system/node "
                      "/sys/devices/system/node"]
            cpuinfo = self.tree / "proc" / "cpuinfo"
            if cpuinfo.is_file():
                lines.append(f"mount --bind {cpuinfo} /proc/cpuinfo")
        lines += ["echo ready", "exec sleep 2147483647"]
        self._holder = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        assert self._holder.stdout is not None
        first = self._holder.stdout.readline()
        if first.strip() != b"ready":
            err = self._holder.stderr.read().decode() if self._holder.stderr else ""
            raise NodeError(f"the mount namespace did not come up: {err.strip()[-500:]}")

    def _enter(self, argv: Sequence[str], cwd: str = "cwd") -> list[str]:
        """``argv`` entering the namespace, in an empty directory of the work dir.

        Never in /, where nsenter would leave it: with the fake runtime a container's log
        path is empty, and the kubelet's log cleaner removes what ``<log path>*`` globs,
        relative to its working directory (kubelet/logs Clean): from / it removed the
        /bin symbolic link and /boot before /dev stopped it."""
        assert self._holder is not None, "the node is not started"
        wd = self.workdir / cwd
        wd.mkdir(exist_ok=True)
        return ["nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", f"--wd={wd}", "--",
                *argv]

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Runs ``argv`` inside the node's namespace; its output as text."""
        return subprocess.run(self._enter(argv), capture_output=True, text=True,
                              env=dict(env) if env is not None else None, timeout=timeout,
                              check=False)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
              log: str = "proc.log", cwd: str = "cwd") -> subprocess.Popen[bytes]:
        """Starts ``argv`` inside the node's namespace, output to logs/``log``; stopped by
        PID at teardown."""
        with (self.logs / log).open("ab") as out:
            proc = subprocess.Popen(self._enter(argv, cwd), stdout=out,
                                    stderr=subprocess.STDOUT,
                                    env=dict(env) if env is not None else None,
                                    start_new_session=True)
        self._procs.append(proc)
        return proc

    def _dead(self, proc: subprocess.Popen[bytes] | None, what: str) -> bool:
        if proc is not None and proc.poll() is not None:
            raise NodeError(f"{what} exited with code {proc.returncode}:\n{self.errors()}")
        return False

    def errors(self, n: int = 8) -> str:
        """The kubelet's last error lines (its log of the latest start)."""
        log = self.logs / f"kubelet-{self._kubelet_starts}.log"
        if not log.exists():
            return ""
        lines = [ln for ln in log.read_text(errors="replace").splitlines()
                 if ln[:1] in ("E", "F")]
        return "\n".join(ln[:400] for ln in lines[-n:])

    # ---- cgroups -------------------------------------------------------------------------

    def cgroups_left(self) -> list[Path]:
        """This run's cgroupRoot in every hierarchy where it still exists."""
        return cgroups_left(self.cgroup_root)

    # ---- pods ----------------------------------------------------------------------------

    def add_pod(self, manifest: Mapping[str, Any]) -> str:
        """Drops a static pod into staticPodPath; its name on the node (``<name>-realnode``)."""
        name = manifest["metadata"]["name"]
        path = self.manifests / f"{name}.yaml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(dict(manifest)))
        tmp.rename(path)  # the file source must never read half a manifest
        return f"{name}-{NODE_NAME}"

    def remove_pod(self, name: str) -> None:
        (self.manifests / f"{name.removesuffix('-' + NODE_NAME)}.yaml").unlink()

    def pods(self) -> list[dict[str, Any]]:
        """The kubelet's /pods (read-only port): the pods it runs, with their status."""
        with urllib.request.urlopen(self.ro_url + "/pods", timeout=5) as r:
            items: list[dict[str, Any]] = json.load(r)["items"] or []
            return items

    def phases(self) -> dict[str, str]:
        return {p["metadata"]["name"]: p.get("status", {}).get("phase", "")
                for p in self.pods()}

    def wait_pods(self, want: Mapping[str, str], timeout: float = 60) -> dict[str, Any]:
        """Waits until /pods shows exactly the pods of ``want`` (name -> phase); the pods."""
        def check() -> dict[str, Any] | None:
            try:
                pods = {p["metadata"]["name"]: p for p in self.pods()}
            except OSError:
                return None
            got = {n: p.get("status", {}).get("phase", "") for n, p in pods.items()}
            return pods if got == dict(want) else None
        try:
            return wait_for(check, timeout, f"pods {dict(want)}")
        except NodeError as exc:
            try:
                now = self.phases()
            except OSError as e:
                now = {"unreadable": str(e)}
            raise NodeError(f"{exc}; the kubelet shows {now}\n{self.errors()}") from None

    def checkpoint(self, name: str) -> dict[str, Any]:
        """A checkpoint file of the kubelet's root, json-decoded (as written, checksum
        included)."""
        data: dict[str, Any] = json.loads((self.root / name).read_text())
        return data

    def configz(self) -> dict[str, Any]:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.check_hostname = False
        req = urllib.request.Request(self.kubelet_url + "/configz",
                                     headers={"Authorization": "Bearer realnode"})
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            data: dict[str, Any] = json.load(r)
            return data

    def socket_answers(self) -> bool:
        if not self.socket.is_socket():
            return False
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(str(self.socket))
            return True
        except OSError:
            return False
        finally:
            s.close()

    # ---- the exporter as the DaemonSet runs it -------------------------------------------

    def exporter_env(self, *, listen: str | None = None,
                     checkpoints: bool = True) -> dict[str, str]:
        """The DaemonSet container's environment mapped onto this node
        (:func:`realnode.daemonset.daemonset_env`)."""
        return daemonset_env(self, listen=listen, checkpoints=checkpoints)

    def exporter(self, *args: str, env: Mapping[str, str] | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``podres-exporter ARGS`` inside the namespace with the DaemonSet's environment."""
        return self.run([str(EXPORTER), *args], env=env or self.exporter_env(),
                        timeout=timeout)

    def snapshot(self) -> dict[str, Any]:
        """The exporter's ledger (``snapshot -o json``) read from this node."""
        done = self.exporter("snapshot", "-o", "json")
        if done.returncode != 0:
            raise NodeError(f"snapshot failed ({done.returncode}): {done.stderr.strip()}")
        ledger: dict[str, Any] = json.loads(done.stdout)
        return ledger

    def start_serve(self, env: Mapping[str, str] | None = None,
                    log: str = "serve.log",
                    command: Callable[[int], Sequence[str]] | None = None) -> Serve:
        """The image's entrypoint (``podres-exporter serve``) with the DaemonSet's
        environment on a free loopback port; returns once it answers /healthz.
        ``command(port)``, when given, is what runs instead (the image itself, say: see
        tests/realnode/test_image_on_node.py), listening on ``port``."""
        port = free_ports(1)[0]
        env = dict(env or self.exporter_env())
        env["PODRES_WEB_LISTEN_ADDRESS"] = f"127.0.0.1:{port}"
        argv = command(port) if command is not None else [str(EXPORTER), "serve"]
        proc = self.spawn(argv, env=env, log=log)
        serve = Serve(proc, f"http://127.0.0.1:{port}", self.logs / log, env)

        def up() -> bool:
            if proc.poll() is not None:
                raise NodeError(f"serve exited ({proc.returncode}): "
                                f"{serve.log.read_text()[-1500:]}")
            with contextlib.suppress(OSError):
                return serve.get("/healthz", timeout=2)[0] == 200
            return False
        wait_for(up, 60, "serve's /healthz")
        return serve

    def restart_serve(self, serve: Serve) -> None:
        """Stops ``serve`` and starts it again with the same environment (the same history
        file), in place."""
        serve.stop()
        again = self.start_serve(serve.env, log=serve.log.name + "+")
        serve.proc, serve.url, serve.log = again.proc, again.url, again.log


def kubelet_config(node: Node, cert: Path, key: Path) -> dict[str, Any]:
    """The KubeletConfiguration file of ``node``."""
    c = node.config
    conf: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "staticPodPath": str(node.manifests),
        "fileCheckFrequency": "1s",
        "syncFrequency": "5s",
        "containerRuntimeEndpoint": f"unix://{node.cri_socket}",
        "imageServiceEndpoint": f"unix://{node.cri_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "cgroupRoot": node.cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "address": "127.0.0.1",
        "port": node.port,
        "readOnlyPort": node.ro_port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "featureGates": {"PodLevelResources": True,
                         "PodLevelResourceManagers": c.pod_level},
        "cpuManagerPolicy": c.cpu_policy,
        "cpuManagerReconcilePeriod": "2s",
        "topologyManagerPolicy": c.topology_policy,
        "topologyManagerScope": c.scope,
        "memoryManagerPolicy": c.memory_policy,
        "podPidsLimit": -1,
        "localStorageCapacityIsolation": False,
        "registerNode": False,
    }
    if c.cpu_policy == "static":
        conf["reservedSystemCPUs"] = c.reserved_cpus
    if c.cpu_options:
        conf["cpuManagerPolicyOptions"] = dict(c.cpu_options)
    if c.memory_policy == "Static":
        # The memory manager wants reservedMemory to sum to kube + system reserved +
        # the hard eviction threshold.
        conf.update(kubeReserved={"memory": "1Gi"},
                    evictionHard={"memory.available": "100Mi"},
                    reservedMemory=[{"numaNode": 0, "limits": {"memory": "1124Mi"}}])
    conf.update(c.extra)
    return conf


def make_cgroup_root(root: str) -> None:
    """The run's own cgroupRoot in every v1 hierarchy (the kubelet refuses one that does
    not exist); its cpuset copies the parent's, as a cpuset child starts empty."""
    for h in cgroup_hierarchies():
        d = h / root.lstrip("/")
        d.mkdir(exist_ok=True)
        if (h / "cpuset.cpus").exists():
            for f in ("cpuset.cpus", "cpuset.mems"):
                (d / f).write_text((h / f).read_text())


def cgroups_left(root: str) -> list[Path]:
    return [h / root.lstrip("/") for h in cgroup_hierarchies()
            if (h / root.lstrip("/")).exists()]


def remove_cgroups(root: str) -> None:
    """Every cgroup under ``root``, bottom up (a cgroup goes only once its children are
    gone)."""
    left = []
    for top in cgroups_left(root):
        for d, _, _ in os.walk(top, topdown=False):
            try:
                os.rmdir(d)
            except OSError:
                left.append(d)
    if left:
        raise NodeError(f"cgroups left behind: {', '.join(left[:5])}")


def host_state() -> dict[str, Any]:
    """What a real node must never change on the host: the entries of /, the sysctls the
    kubelet tunes, what is under /var/lib/kubelet, /var/log/pods and /var/log/containers, a
    kubepods cgroup at the top of any hierarchy (the kubelet's default cgroupRoot), a mount
    over any path the namespace binds. (Another run's own cgroupRoot may come and go meanwhile: each
    run checks its own, see ``Node.cgroups_left``.)"""
    def listing(p: str) -> list[str] | None:
        return sorted(str(q) for q in Path(p).rglob("*")) if Path(p).exists() else None
    bound = {*(f"/proc/sys/{n}" for n in SYSCTLS), "/var/lib", "/var/log", "/proc/cpuinfo",
             "/sys/devices/system/cpu", "/sys/devices/system/node"}
    return {
        "root": sorted(os.listdir("/")),
        "sysctls": {n: Path("/proc/sys", n).read_text().strip() for n in SYSCTLS},
        "var": {p: listing(p) for p in ("/var/lib/kubelet", "/var/log/pods",
                                        "/var/log/containers")},
        "cgroups": sorted(str(d) for h in cgroup_hierarchies() for d in h.glob("kubepods*")),
        "mounts": sorted(line for line in Path("/proc/self/mounts").read_text().splitlines()
                         if line.split()[1] in bound),
    }


def alive(pids: Iterator[int] | Sequence[int]) -> list[int]:
    """Those of ``pids`` that are still running (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(pid)
    return out
