"""The kernel as nodes run it: a kubelet-like cgroup tree built under the machine's real
cpuset hierarchy (cgroup v1 where the cpuset controller is on v1, v2 where it is on v2),
short pinned processes in it, and ``serve`` reading it beside a simulated kubelet whose
``/configz`` names the layout: the systemd and cgroupfs drivers under the default
``cgroupRoot`` and kind's ``/kubelet``.

Checked against the truth: the enforced cpusets are what was written; the container the
test makes run beyond its pool is reported as ``cpuset_drift``; each container's CPU time
(``podres_container_cpu_usage_seconds_total``) is its process's own (``wait4``'s rusage);
the busy time credited to the exclusive CPU covers what the neighbour ran there, while the
idle exclusive container's own usage stays near 0 (the stranded core the dashboards find).

Opt-in, it writes to the host's cgroup filesystem: ``PODRES_REAL_CGROUP=1``, as root, with
the cgroup filesystem writable (a container without it skips, saying why). Everything made
is removed afterwards, failure or not; a layout whose top directory is already there (a
real kubelet's) is skipped rather than touched. See docs/kernel.md#real-kernel-test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from exporter.sim.cgroupfs import TreePod, decorate_pod_list, model_tree
from exporter.sim.model_driven import ModelDrivenNode
from exporter.sources.cgroup_layout import cgroup_path
from reconciler.allocator import ModelConfig, from_spec
from reconciler.cpuset import format_cpuset, parse_cpuset
from tests.allocator.helpers import ctr, pod
from tests.conftest import StartSim
from tests.service.conftest import RunServe, run_serve, series, value

__all__ = ["run_serve"]

pytestmark = pytest.mark.skipif(os.environ.get("PODRES_REAL_CGROUP") != "1",
                                reason="writes to the host's cgroups: set PODRES_REAL_CGROUP=1")

BUSY_SECONDS = 2.0  # CPU time the neighbour's process burns
PERIOD = 1.0  # the simulated kubelet's cpuManagerReconcilePeriod


# -- the machine's hierarchy ---------------------------------------------------------------

@dataclass
class Hierarchy:
    version: str  # v1 | v2
    root: str  # --cgroup.root: holds cpuset/ (v1) or is the v2 mount
    cpuset: Path  # where cpusets are written
    cpuacct: Path | None  # v1: the CPU-accounting hierarchy, when mounted
    made: list[Path] = field(default_factory=list)  # directories made, in order


def _mounts() -> list[tuple[str, str, set[str]]]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, fstype, options, *_ = line.split()
        out.append((point, fstype, set(options.split(","))))
    return out


def find_hierarchy() -> Hierarchy:
    """Where the cpuset controller is, as the exporter will look for it; skips (saying
    why) when it cannot be used here."""
    if os.geteuid() != 0:
        pytest.skip("needs root to write cgroups")
    mounts = _mounts()
    for point, fstype, options in mounts:
        if fstype == "cgroup" and "cpuset" in options:
            if Path(point).name != "cpuset":
                pytest.skip(f"cpuset v1 hierarchy at {point}: the exporter reads <root>/cpuset")
            acct = next((Path(p) for p, t, o in mounts if t == "cgroup" and "cpuacct" in o),
                        None)
            return Hierarchy("v1", str(Path(point).parent), Path(point), acct)
    for point, fstype, _ in mounts:
        controllers = Path(point) / "cgroup.controllers"
        if fstype == "cgroup2" and controllers.exists() and \
                "cpuset" in controllers.read_text().split():
            return Hierarchy("v2", point, Path(point), None)
    pytest.skip("no cpuset controller mounted (neither cgroup v1 nor v2)")


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:  # cgroupfs: one write per value
        f.write(text)


def make_cgroup(h: Hierarchy, relative: str, cpus: frozenset[int] | None) -> Path:
    """Make ``relative`` and its missing parents in the cpuset (and, v1, the cpuacct)
    hierarchy, as the kubelet and the runtime would; the leaf's cpuset set to ``cpus``
    (None: its parent's), every directory made is recorded for cleanup."""
    parts = Path(relative).parts
    for i in range(1, len(parts) + 1):
        d = h.cpuset.joinpath(*parts[:i])
        if not d.exists():
            if h.version == "v2":
                with contextlib.suppress(OSError):  # already on, or not needed
                    _write(d.parent / "cgroup.subtree_control", "+cpuset +cpu")
            d.mkdir()
            h.made.append(d)
            if h.version == "v1":
                _write(d / "cpuset.mems", (d.parent / "cpuset.mems").read_text().strip())
                _write(d / "cpuset.cpus", (d.parent / "cpuset.cpus").read_text().strip())
        if h.cpuacct is not None:
            a = h.cpuacct.joinpath(*parts[:i])
            if not a.exists():
                a.mkdir()
                h.made.append(a)
    leaf = h.cpuset.joinpath(*parts)
    if cpus is not None:
        _write(leaf / "cpuset.cpus", format_cpuset(cpus))
    return leaf


def cleanup(h: Hierarchy) -> list[str]:
    """Remove every directory made, deepest first; what could not be removed."""
    left = []
    for d in reversed(h.made):
        for _ in range(50):  # a killed process leaves its cgroup a moment after exiting
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
        else:
            left.append(str(d))
    return left


# -- the node ------------------------------------------------------------------------------

def real_node(n: int) -> ModelDrivenNode:
    """The machine's CPUs as one socket of ``n`` cores, CPU 0 reserved; an exclusive pod
    on the last CPU (its container idles) and a burstable neighbour (node shared)."""
    node = ModelDrivenNode(from_spec(f"1x{n}x1"), ModelConfig(reserved_cpu_m=1000))
    node.add(pod("pinned", ctr("app", "1", "64Mi"), namespace="shop"))
    node.add(pod("neighbour", ctr("work", "500m", "64Mi", guaranteed=False),
                 namespace="shop"))
    return node


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    cpu_seconds: float | None = None  # from wait4


def start_in(h: Hierarchy, leaf: Path, code: str, affinity: int | None = None) -> Running:
    """A process that joins the container's cgroups (cpuset, and cpuacct on v1) before it
    runs ``code``, optionally bound to one CPU within its cpuset."""
    rel = leaf.relative_to(h.cpuset)
    procs = [str(leaf / "cgroup.procs")]
    if h.cpuacct is not None:
        procs.append(str(h.cpuacct / rel / "cgroup.procs"))

    def join() -> None:
        for f in procs:
            with open(f, "w") as out:
                out.write(str(os.getpid()))
        if affinity is not None:
            os.sched_setaffinity(0, {affinity})

    return Running(subprocess.Popen([sys.executable, "-c", code], preexec_fn=join))


def reap(r: Running, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(r.proc.pid, os.WNOHANG)
        if pid:
            r.proc.returncode = os.waitstatus_to_exitcode(status)
            r.cpu_seconds = usage.ru_utime + usage.ru_stime
            return
        if time.monotonic() > deadline:
            r.proc.kill()
        time.sleep(0.02)


SPIN = ("import time, resource\n"
        "while resource.getrusage(resource.RUSAGE_SELF).ru_utime < {s}: pass\n")
SLEEP = "import time; time.sleep({s})"


@pytest.fixture
def hierarchy() -> Iterator[Hierarchy]:
    h = find_hierarchy()
    try:
        yield h
    finally:
        left = cleanup(h)
        assert not left, f"cgroups left behind: {left}"


LAYOUTS = [("systemd", "/"), ("cgroupfs", "/"), ("systemd", "/kubelet")]


@pytest.mark.parametrize(("driver", "root"), LAYOUTS, ids=["systemd", "cgroupfs", "kind"])
async def test_serve_on_the_real_kernel(hierarchy: Hierarchy, driver: str, root: str,
                                        tmp_path: Path, start_sim: StartSim,
                                        run_serve: RunServe) -> None:
    h = hierarchy
    online = sorted(parse_cpuset(Path("/sys/devices/system/cpu/online").read_text()))
    allowed = parse_cpuset((h.cpuset / ("cpuset.cpus.effective" if h.version == "v2"
                                        else "cpuset.effective_cpus")).read_text())
    if len(online) < 2 or online != list(range(len(online))) or set(online) != allowed:
        pytest.skip(f"needs CPUs 0..n-1 (n >= 2) all in the root cpuset; online {online}")
    node = real_node(len(online))
    root_parts = [p for p in root.strip("/").split("/") if p]
    top = h.cpuset / cgroup_path([*root_parts, "kubepods"], driver).split("/")[0]
    if top.exists():
        pytest.skip(f"{top} exists already (a kubelet's?): not touching it")

    # The tree as the kubelet (pod cgroups) and the runtime (container scopes) make it; the
    # neighbour's container is let onto every CPU, the exclusive one included.
    exclusive = frozenset({online[-1]})
    tree: list[TreePod] = model_tree(node.model, drift={
        ("shop", "neighbour", "work"): frozenset(online)}, pod_cpusets=False)
    qos_of = {p.uid: p.spec.qos for p in node.model.pods.values()}
    names = {p.uid: p.name for p in node.model.pods.values()}
    leaves: dict[tuple[str, str], Path] = {}
    for tp in tree:
        klass = {"Guaranteed": [], "Burstable": ["burstable"]}.get(qos_of[tp.uid],
                                                                   ["besteffort"])
        pod_rel = cgroup_path([*root_parts, "kubepods", *klass, f"pod{tp.uid}"], driver)
        make_cgroup(h, pod_rel, None)
        for c in tp.containers:
            scope = f"cri-containerd-{c.id}.scope" if driver == "systemd" else c.id
            leaf = make_cgroup(h, f"{pod_rel}/{scope}", c.cpus)
            if c.key is not None:
                leaves[(names[tp.uid], c.key[2])] = leaf

    state = node.state()
    configz = json.loads(json.dumps(state.configz))
    configz["kubeletconfig"].update(cgroupRoot=root, cgroupDriver=driver,
                                    cpuManagerReconcilePeriod=f"{PERIOD:g}s")
    sim = await start_sim(replace(state, pod_list=decorate_pod_list(state.pod_list),
                                  configz=configz), http=True)
    topology = tmp_path / "topology.json"
    topology.write_text(json.dumps(node.topology_json()))
    served = await run_serve(sim, "--poll.interval", "0.2s", "--topology", str(topology),
                             "--cgroup.root", h.root, "--proc.root", "/proc")
    busy_before = await served.wait_for(
        lambda s: value(s, "podres_source_up", source="cgroup") == 1.0
        and bool(series(s, "podres_pod_cpu_busy_seconds_total", pod="pinned")),
        what="the real tree read")

    # -- the processes: the pinned container idles, the neighbour spins on its CPU --------
    running = {
        "app": start_in(h, leaves[("pinned", "app")], SLEEP.format(s=BUSY_SECONDS + 1)),
        "work": start_in(h, leaves[("neighbour", "work")], SPIN.format(s=BUSY_SECONDS),
                         affinity=online[-1]),
    }
    try:
        for r in running.values():
            reap(r)
    finally:
        for r in running.values():
            if r.proc.returncode is None:
                r.proc.kill()
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(r.proc.pid, 0)
    work_cpu = running["work"].cpu_seconds or 0.0
    app_cpu = running["app"].cpu_seconds or 0.0
    assert work_cpu >= BUSY_SECONDS

    def usage(s: dict[Any, float], pod_name: str, container: str) -> float:
        return value(s, "podres_container_cpu_usage_seconds_total", namespace="shop",
                     pod=pod_name, container=container) or 0.0

    after = await served.wait_for(
        lambda s: usage(s, "neighbour", "work") >= work_cpu * 0.95
        and (value(s, "podres_anomalies", kind="cpuset_drift") or 0) == 1,
        what="the neighbour's CPU time and its drift", timeout=60)
    # Each container's own CPU time is its process's: rusage also counts the moment between
    # fork and joining the cgroup, so the cgroup's is the same or a few ms less.
    assert work_cpu * 0.95 <= usage(after, "neighbour", "work") <= work_cpu + 0.5
    assert app_cpu - 0.05 <= usage(after, "pinned", "app") <= app_cpu + 0.5 < 1.0
    # The exclusive CPU's busy time, credited to the pinned pod, covers what the neighbour
    # ran there: busy by the CPU, idle by its own usage (a stranded core).
    key = {"namespace": "shop", "pod": "pinned", "pool": "node_exclusive"}
    credited = (value(after, "podres_pod_cpu_busy_seconds_total", **key) or 0.0) \
        - (value(busy_before, "podres_pod_cpu_busy_seconds_total", **key) or 0.0)
    print(f"\n{driver} {root} ({h.version}): neighbour ran {work_cpu:.3f} s "
          f"(cgroup {usage(after, 'neighbour', 'work'):.3f} s), pinned ran {app_cpu:.3f} s "
          f"(cgroup {usage(after, 'pinned', 'app'):.3f} s), busy time credited to the "
          f"pinned pod's CPU {credited:.2f} s")  # the figures, with -s
    assert credited >= work_cpu * 0.9, (credited, work_cpu)
    assert usage(after, "pinned", "app") < 0.1 * credited
    # Drift: the neighbour runs beyond the node's shared pool; nothing else drifts.
    assert value(after, "podres_cpuset_drift", kind="node_shared") == 1.0
    assert sum(series(after, "podres_cpuset_drift").values()) == 1.0
    status, body = await served.get("/api/v1/ledger")
    assert status == 200
    ledger = json.loads(body)
    enforced = {(c["pod"], c["name"]): c["enforced_cpus"] for c in ledger["containers"]}
    assert enforced == {("pinned", "app"): format_cpuset(exclusive),
                        ("neighbour", "work"): format_cpuset(frozenset(online))}
    [drift] = [a for a in ledger["anomalies"] if a["kind"] == "cpuset_drift"]
    assert drift["pod"] == "neighbour" and f"not its own: {online[-1]}" in drift["detail"]
    assert value(after, "podres_source_errors_total", source="cgroup", operation="read") == 0
