"""Real fixtures: each scenario's node, captured by ``podres-exporter record`` as the
DaemonSet runs it, into ``tests/data/realnode/<scenario>/`` (docs/real-node.md#captures).

    python -m realnode.capture                      # every scenario
    python -m realnode.capture 1.36-amd-pod         # one
    python -m realnode.capture --cpumap docs/img/cpumap-real.png   # docs/cpumap.md's map

A scenario starts a real kubelet (realnode/harness.py) on a bound hwloc tree, drops in its
static pods, waits until the exporter's ledger is the kubelet's own ``cpu_manager_state``
(tests/realnode/checks.py, the judge of the real-node tests), then records. The kubelet's
``/metrics`` body (hundreds of KB, of which only the feature gate lines are read) is cut
down to the gates of the resource managers (``GATES``), and the kernel's files
(``cgroup/``, ``proc_stat``) are left out: the fake runtime runs no process, so they say
nothing the fixture tests could use. The folder's README.md says how each capture was made.
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from exporter.rawnode import CHECKPOINT_FILES
from realnode.harness import Node, NodeConfig, unavailable

# The workload and the machines of the live ledger scenarios (docs/real-node.md#scenarios).
from tests.realnode.test_ledger import AMD, INTEL
from tests.realnode.test_ledger import tree_workload as workload

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "data" / "realnode"
# The feature gates a capture's metrics.txt keeps: those of the resource managers and of the
# pod shapes they place (the exporter reads every gate line; the other ~240 are noise here).
GATES = re.compile(r'name="(PodLevel\w*|CPUManager\w*|MemoryManager\w*|TopologyManager\w*|'
                   r'SidecarContainers|InPlacePod\w*|KubeletPodResources\w*|'
                   r'DynamicResourceAllocation)"')
# Files of a capture that the fixture tests read; the rest of what record writes is dropped.
KEEP = ("list.json", "allocatable.json", "pods.json", "configz.json", "metrics.txt",
        "topology.json", "node.json", *CHECKPOINT_FILES)


@dataclass(frozen=True)
class Scenario:
    name: str
    config: NodeConfig
    what: str


SCENARIOS = {s.name: s for s in (
    Scenario("1.37-amd-pod", NodeConfig(version="1.37", tree=AMD, scope="pod"),
             "pod-level resource managers as 1.37 ships them: each pod-level pod's block "
             "in the checkpoint's podEntries, its pool containers without entries"),
    Scenario("1.36-amd-pod", NodeConfig(version="1.36", tree=AMD, scope="pod"),
             "1.36's pattern: the pod-level block is held, but every container on the "
             "pod's pool reports the whole block as its own CPUs"),
    Scenario("1.37-intel-container",
             NodeConfig(version="1.37", tree=INTEL, scope="container"),
             "topology manager scope container on a single-NUMA Intel machine"),
)}


def capture(scenario: Scenario, out: Path) -> list[str]:
    """Runs the scenario's node and records it into ``out`` (replaced); the files kept."""
    from tests.realnode.checks import agreeing

    with Node(scenario.config) as node:
        names = {node.add_pod(m) for m in workload().values()}
        node.wait_pods(dict.fromkeys(names, "Running"))
        agreeing(node.snapshot, node, names)
        with tempfile.TemporaryDirectory(prefix="rn-capture-", dir=node.workdir) as tmp:
            target = Path(tmp) / "fixture"
            done = node.exporter("record", str(target))
            if done.returncode != 0:
                raise RuntimeError(f"record failed: {done.stderr.strip()[-2000:]}")
            _trim(target)
            if out.exists():
                shutil.rmtree(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(target, out)
    return sorted(p.name for p in out.iterdir())


def cpumap(scenario: Scenario, png: Path, width: int = 1280, height: int = 806) -> int:
    """A screenshot of ``serve``'s CPU map on the scenario's real node, running with the
    DaemonSet's environment, with CPU 7 (the sidecar's on its pod's pool) focused; its
    size in bytes."""
    from tests.realnode.checks import agreeing
    from tests.web.cpumap_browser import run_chromium

    with Node(scenario.config) as node:
        names = {node.add_pod(m) for m in workload().values()}
        node.wait_pods(dict.fromkeys(names, "Running"))
        serve = node.start_serve()
        try:
            agreeing(serve.ledger, node, names)
            shot = node.workdir / "cpumap.png"
            done = run_chromium(serve.url + "/#cpu-7", f"--screenshot={shot}",
                                f"--window-size={width},{height}")
            if done.returncode != 0 or not shot.is_file():
                raise RuntimeError(f"chromium failed: {done.stderr.strip()[-2000:]}")
            png.write_bytes(shot.read_bytes())
        finally:
            serve.stop()
    return png.stat().st_size


def _trim(fixture: Path) -> None:
    for path in fixture.iterdir():
        if path.name not in KEEP:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    metrics = fixture / "metrics.txt"
    if metrics.is_file():
        lines = metrics.read_text().splitlines()
        metrics.write_text("".join(line + "\n" for line in lines
                                   if "kubernetes_feature_enabled" in line
                                   and (line.startswith("#") or GATES.search(line))))


def readme(captured: dict[str, str]) -> str:
    """The folder's README: one section per scenario, with the date it was captured."""
    from realnode.build import VERSIONS

    out = ["# Real captures", "",
           "Each folder is `podres-exporter record` run, with the DaemonSet's environment",
           "(realnode/daemonset.py), against a real kubelet on the test bed of",
           "docs/real-node.md: the kubelet binary built from k8s.io/kubernetes, on its fake",
           "CRI runtime, with an hwloc tree (tests/data/hwloc) bound over sysfs. Made by",
           "`python -m realnode.capture` (realnode/capture.py); read by",
           "tests/foundation/test_real_captures.py.", "",
           "The workload in each (static pods; `tree_workload()` in",
           "tests/realnode/test_ledger.py):",
           "`legacy`, a Guaranteed pod of 2 CPUs; `pooled`, a pod-level pod of 3 CPUs",
           "(spec.resources) with `app` (1 CPU) and `log`, `mesh` (no resources) on its",
           "shared pool; `sidecar`, a pod-level pod of 2 CPUs with `app` (1 CPU) and a",
           "restartable init container `proxy` (no resources); `burst`, a burstable pod",
           "(500m, no limit).", "",
           "`metrics.txt` keeps only the kubelet's `kubernetes_feature_enabled` lines of the",
           "resource managers' gates (`GATES` in realnode/capture.py); the",
           "kernel's files (`cgroup/`, `proc_stat`) are not kept (the fake runtime runs no",
           "process). Everything else is the kubelet's bytes: a new capture changes the pod",
           "uids (the kubelet hashes the static pod's file path, in a temporary directory),",
           "the ports and paths in `configz.json` and the order of lists (Go map order), so",
           "capture again only to change what is captured (README.md's `snapshot` example",
           "and tests/foundation/test_real_captures.py follow the 1.36 capture).", ""]
    for name, s in SCENARIOS.items():
        c = s.config
        out += [f"## {name}", "",
                f"- kubelet {VERSIONS[c.version][0]}, tree `{c.tree}`",
                f"- cpuManagerPolicy {c.cpu_policy}, reservedSystemCPUs {c.reserved_cpus}, "
                f"topologyManagerPolicy {c.topology_policy}, topologyManagerScope {c.scope}, "
                f"PodLevelResourceManagers {'on' if c.pod_level else 'off'}, "
                f"memoryManagerPolicy {c.memory_policy}",
                f"- {s.what}",
                f"- captured {captured.get(name, 'not yet')}", ""]
    return "\n".join(out)


def _dates(path: Path) -> dict[str, str]:
    """The capture dates the README holds now (kept for the scenarios not run again)."""
    dates: dict[str, str] = {}
    name = None
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.startswith("## "):
                name = line[3:].strip()
            elif line.startswith("- captured ") and name and "not yet" not in line:
                dates[name] = line.removeprefix("- captured ").strip()
    return dates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m realnode.capture", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="*", metavar="SCENARIO",
                        help=f"the scenarios to capture (default: all: {', '.join(SCENARIOS)})")
    parser.add_argument("--out", type=Path, default=OUT,
                        help="the folder of the captures (default: tests/data/realnode)")
    parser.add_argument("--cpumap", type=Path, metavar="PNG",
                        help="instead: a screenshot of serve's CPU map on the 1.37-amd-pod "
                        "node (docs/img/cpumap-real.png in docs/cpumap.md)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.scenario if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r} (one of {', '.join(SCENARIOS)})")
    why = unavailable()
    if why:
        print(f"realnode.capture: {why}", file=sys.stderr)
        return 1
    if args.cpumap is not None:
        size = cpumap(SCENARIOS["1.37-amd-pod"], args.cpumap)
        print(f"{args.cpumap}: {size / 1024:.0f} KB")
        return 0
    dates = _dates(args.out / "README.md")
    for name in args.scenario or SCENARIOS:
        files = capture(SCENARIOS[name], args.out / name)
        dates[name] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        size = sum((args.out / name / f).stat().st_size for f in files)
        print(f"{args.out / name}: {', '.join(files)} ({size / 1024:.1f} KB)")
    (args.out / "README.md").write_text(readme(dates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
