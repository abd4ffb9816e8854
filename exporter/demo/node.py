"""The demo node: ``ModelDrivenNode`` on a 2-socket SMT machine running workload.yaml,
served by a ``SimKubelet``; optional churn adds and removes pods as a cluster would.

The workload arrives a pod at a time (``FIRST_PODS`` at once, then one every
``ARRIVAL_SECONDS``, each followed by a poll at once, SIGHUP as an operator would send it),
as a node filling up does: the history then has a moment per arrival, which the CPU map's
time slider steps through; all at once, every event shared one timestamp."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from exporter.errors import UserError
from exporter.manifest_files import load_templates
from exporter.rawnode import KubeletState
from exporter.sim.cgroupfs import SimKernel, decorate_pod_list
from exporter.sim.model_driven import ModelDrivenNode, pods_from_templates
from exporter.sim.server import SimKubelet
from reconciler.allocator import ModelConfig, ModelError, TopologyError, from_spec
from reconciler.kube import PodSpec

WORKLOAD = Path(__file__).with_name("workload.yaml")
# How busy each pool's CPUs are in the demo's /proc/stat: a pegged pod shared pool beside
# exclusive cores that mostly idle is what the busy-time panels are for.
# Pods running when the demo starts; the rest arrive one every ARRIVAL_SECONDS.
FIRST_PODS = 3
ARRIVAL_SECONDS = 1.0
DEMO_LOAD = {"reserved": 0.15, "node_shared": 0.35, "node_exclusive": 0.6,
             "pod_exclusive": 0.05, "pod_shared": 0.95, "pod_idle": 0.0}


def demo_pods() -> list[PodSpec]:
    return pods_from_templates(load_templates([str(WORKLOAD)]))


def build_node(topology: str, policy_options: str = "",
               pods: int | None = None) -> ModelDrivenNode:
    """The demo node running the first ``pods`` of the workload (default all)."""
    try:
        topo = from_spec(topology)
    except TopologyError as exc:
        raise UserError(f"--topology.shape: {exc}") from None
    # One whole core reserved (CPU 0 and its sibling), as operators usually do.
    siblings = next((sorted(core) for core in _cores(topo) if 0 in core), [0])
    options = frozenset(o.strip() for o in policy_options.split(",") if o.strip())
    try:
        config = ModelConfig(scope="pod", topology_policy="single-numa-node",
                             reserved_cpus=frozenset(siblings), options=options)
    except ModelError as exc:
        raise UserError(f"--cpu-policy-options: {exc}") from None
    node = ModelDrivenNode(topo, config, "1.37", node_name="demo-node")
    node.sync(demo_pods()[:pods])
    return node


def _cores(topo: object) -> list[set[int]]:
    cores: dict[tuple[int, int], set[int]] = {}
    for cpu in topo.to_json()["cpus"]:  # type: ignore[attr-defined]
        cores.setdefault((cpu["socket"], cpu["core"]), set()).add(cpu["id"])
    return list(cores.values())


def demo_drift(node: ModelDrivenNode) -> dict[tuple[str, str, str], frozenset[int]]:
    """One container with CPUs of its own, in a pod without a block, made to run on the
    node's shared pool too: the demo's ``cpuset_drift``."""
    shared = frozenset(node.model.default_set)
    for _, placement in sorted(node.model.pods.items()):
        for c in placement.containers:
            if c.exclusive and not placement.block and shared:
                return {(placement.namespace, placement.name, c.name): c.exclusive | shared}
    return {}


def kubelet_state(node: ModelDrivenNode, kernel: SimKernel) -> KubeletState:
    """The kubelet's answers, ``/pods`` with the container ids the cgroup tree is named
    after; the tree rewritten for the current placements."""
    kernel.sync()
    state = node.state()
    if state.pod_list is None:
        return state
    return replace(state, pod_list=decorate_pod_list(state.pod_list))


class DemoNode:
    """A started simulated kubelet, its kernel files, plus the churn task."""

    def __init__(self, node: ModelDrivenNode, sim: SimKubelet, topology_file: Path,
                 kernel: SimKernel, final: ModelDrivenNode) -> None:
        self.node = node
        # The node once the whole workload has arrived (what the banner describes).
        self.final = final
        self.sim = sim
        self.topology_file = topology_file
        self.kernel = kernel
        self._task: asyncio.Task[None] | None = None
        # The rest of the workload is still to arrive (``start`` not called yet).
        self.waiting = len(node.model.pods) < len(final.model.pods)
        self._clock = asyncio.create_task(kernel.run())

    @property
    def cgroup_root(self) -> str:
        return str(self.kernel.cgroup_root)

    @property
    def proc_root(self) -> str:
        return str(self.kernel.writer.path.parent)

    @property
    def socket_path(self) -> str:
        return self.sim.socket_path

    @property
    def http_url(self) -> str | None:
        return self.sim.http_url

    @property
    def cert_path(self) -> Path | None:
        return self.sim.cert_path

    def start(self, churn: float | None, *, poll_now: Callable[[], None] | None = None,
              seed: int = 1) -> None:
        """Admit the rest of the workload a pod every ``ARRIVAL_SECONDS`` (calling
        ``poll_now`` after each), then churn."""
        self.waiting = False
        self._task = asyncio.create_task(self._run(churn, poll_now, random.Random(seed)))

    async def _run(self, churn: float | None, poll_now: Callable[[], None] | None,
                   rng: random.Random) -> None:
        base = demo_pods()
        for count in range(len(self.node.model.pods) + 1, len(base) + 1):
            await asyncio.sleep(ARRIVAL_SECONDS)
            self.node.sync(base[:count])
            self.sim.set_state(kubelet_state(self.node, self.kernel))
            if poll_now is not None:
                poll_now()
        if churn:
            await self._churn(churn, rng)

    async def _churn(self, interval: float, rng: random.Random) -> None:
        base = demo_pods()
        extra: list[PodSpec] = []
        serial = 0
        while True:
            await asyncio.sleep(interval)
            if extra and (len(extra) >= 4 or rng.random() < 0.4):
                extra.pop(rng.randrange(len(extra)))
            else:
                serial += 1
                template = rng.choice([p for p in base if p.resources is not None])
                extra.append(replace(template, name=f"{template.name}-churn-{serial}",
                                     uid=f"churn-{serial}"))
            self.node.sync(base + extra)
            self.sim.set_state(kubelet_state(self.node, self.kernel))

    async def stop(self) -> None:
        for task in (self._task, self._clock):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.sim.stop()


async def start_demo_node(workdir: Path, topology: str, *, churn: float | None = None,
                          policy_options: str = "", arrive: bool = False
                          ) -> tuple[DemoNode, str]:
    """The demo node, started. With ``arrive`` it runs ``FIRST_PODS`` of the workload and
    the caller calls ``start`` once the exporter polls (the rest then arrive, then the
    churn); else the whole workload at once, churning already if asked."""
    final = build_node(topology, policy_options)
    node = build_node(topology, policy_options, FIRST_PODS) if arrive else final
    topology_file = workdir / "topology.json"
    topology_file.write_text(json.dumps(node.topology_json()), encoding="utf-8")
    kernel = SimKernel(node.model, workdir / "cgroup", workdir / "proc" / "stat",
                       load_by_pool=DEMO_LOAD, drift=demo_drift(final))
    sim = SimKubelet(kubelet_state(node, kernel), socket_path=str(workdir / "kubelet.sock"),
                     http_listen="127.0.0.1:0")
    await sim.start()
    demo = DemoNode(node, sim, topology_file, kernel, final)
    if not arrive:
        demo.start(churn)
    return demo, final.summary()
