"""The demo's kernel files: a cgroup tree matching its placements with one drifting
container, and a /proc/stat whose busy time advances."""

from __future__ import annotations

from pathlib import Path

from exporter.demo.node import demo_drift, start_demo_node
from exporter.sources.cgroup import CgroupSource, pod_refs_from_pod_list
from exporter.sources.procstat import read_proc_stat


async def test_demo_node_has_one_drifting_container_and_busy_time(short_tmp: Path) -> None:
    demo, _ = await start_demo_node(short_tmp, "2x8x2")
    try:
        [(key, cpus)] = demo_drift(demo.node).items()
        pod_list = demo.sim.state.pod_list
        assert pod_list is not None
        reading = CgroupSource(demo.cgroup_root).read(pod_refs_from_pod_list(pod_list))
        assert reading.off is None and reading.errors == ()
        assert reading.enforced.containers[key] == cpus
        own = next(c.exclusive for p in demo.node.model.pods.values() for c in p.containers
                   if (p.namespace, p.name, c.name) == key)
        assert cpus > own  # runs on more than its own CPUs
        before = read_proc_stat(demo.proc_root, 100)
        demo.kernel.tick(10.0)
        after = read_proc_stat(demo.proc_root, 100)
        assert sum(after.busy.values()) > sum(before.busy.values())
    finally:
        await demo.stop()
