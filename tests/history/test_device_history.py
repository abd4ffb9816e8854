"""Device intervals (migration 0005, docs/history.md#devices): each container's devices of a
resource recorded on change, reconciled after a restart and pruned by retention; on every
write path (SQLite, embedded, a real PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from backends import History
from sqlalchemy import select

from exporter.history import HistoryWriter
from exporter.history.changes import state_of
from exporter.history.schema import device_intervals
from exporter.history.store import count_rows
from reconciler.kube import KubeletConfig
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import (
    Allocatable,
    ContainerAlloc,
    CPUInfo,
    DeviceAlloc,
    NodeSnapshot,
    PodAlloc,
    Topology,
)

T0 = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
TOPO = Topology(tuple(CPUInfo(i, i, i // 4, i // 4) for i in range(8)))
GPU = "nvidia.com/gpu"


def at(i: int) -> datetime:
    return T0 + timedelta(seconds=10 * i)


def ledger(*pods: PodAlloc) -> Ledger:
    return reconcile(NodeSnapshot(
        pods=pods, topology=TOPO, allocatable=Allocatable(tuple(range(1, 8))),
        kubelet_config=KubeletConfig(cpu_manager_policy="static",
                                     topology_manager_policy="best-effort")))


def trainer(*devices: DeviceAlloc) -> PodAlloc:
    return PodAlloc("ml", "trainer", (ContainerAlloc("train", (2, 3), (), devices),
                                      ContainerAlloc("proxy")))


def rows(history: History) -> list[tuple[str, str, str, str, bool]]:
    d = device_intervals
    with history.reader.read() as conn:
        found = conn.execute(select(d.c.container, d.c.resource, d.c.device_ids,
                                    d.c.numa_nodes, d.c.valid_to.is_(None))
                             .order_by(d.c.id)).all()
    return [tuple(r) for r in found]  # type: ignore[misc]


def test_state_has_a_row_per_container_and_resource() -> None:
    state = state_of(ledger(trainer(DeviceAlloc(GPU, ("GPU-3",), (1,)),
                                    DeviceAlloc(GPU, ("GPU-1",), (0,)),
                                    DeviceAlloc(GPU, ("GPU-1",), (1,)),
                                    DeviceAlloc("intel.com/sriov", ("vf\x000",)))))
    assert sorted(state.devices.values()) == [
        ("ml", "trainer", "train", "intel.com/sriov", "vf\ufffd0", ""),
        ("ml", "trainer", "train", GPU, "GPU-1,GPU-3", "0,1")]


async def test_devices_recorded_on_change_and_across_a_restart(history: History) -> None:
    one = ledger(trainer(DeviceAlloc(GPU, ("GPU-2",), (1,))))
    two = ledger(trainer(DeviceAlloc(GPU, ("GPU-2",), (1,)), DeviceAlloc(GPU, ("GPU-3",), (1,))))
    writer = HistoryWriter(history, "gpu-1", summary_interval=3600)
    await writer.start()
    writer.submit(one, at(0))
    await writer.flush()
    before = count_rows(history.reader)
    for i in range(1, 5):  # unchanged: nothing written
        writer.submit(ledger(trainer(DeviceAlloc(GPU, ("GPU-2",), (1,)))), at(i))
    await writer.flush()
    assert count_rows(history.reader) == before
    writer.submit(two, at(5))
    await writer.close()
    assert rows(history) == [("train", GPU, "GPU-2", "1", False),
                             ("train", GPU, "GPU-2,GPU-3", "1", True)]
    # A new exporter process: the same ledger keeps the open interval, the pod's end
    # closes it.
    writer = HistoryWriter(history, "gpu-1", summary_interval=3600)
    await writer.start()
    writer.submit(two, at(6))
    await writer.flush()
    assert len(rows(history)) == 2
    writer.submit(ledger(), at(7))
    await writer.close()
    assert [r[-1] for r in rows(history)] == [False, False]
    d = device_intervals
    with history.reader.read() as conn:
        ends = conn.execute(select(d.c.valid_to).order_by(d.c.id)).scalars().all()
    assert [e.replace(tzinfo=UTC) if e.tzinfo is None else e for e in ends] == [at(5), at(7)]
    # Retention deletes what ended before the cutoff, keeps what ended after it.
    history.prune(at(6))
    assert rows(history) == [("train", GPU, "GPU-2,GPU-3", "1", False)]


async def test_hostile_and_huge_device_lists_are_stored(history: History) -> None:
    ids = tuple(f"GPU-{i:05}" for i in range(3000))
    hostile = ledger(PodAlloc("ml", 'p"\n', (ContainerAlloc(
        "c\\", (), (), (DeviceAlloc(GPU, ids, (0,)), DeviceAlloc('x"y\n\x00', ("é",)))),)))
    writer = HistoryWriter(history, "gpu-2", summary_interval=3600)
    await writer.start()
    writer.submit(hostile, at(0))
    await writer.close()
    stored = {r[1]: r for r in rows(history)}
    assert stored[GPU][2] == ",".join(ids)[:4000]
    assert stored['x"y\n\ufffd'][2] == "é"
