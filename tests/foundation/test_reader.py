"""NodeReader, the one entry to a live node's reading, end to end against the simulated
kubelet: what reaches the ledger (checkpoints, topology, the node name) and a List failure
raised by a one-shot read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.errors import SourceError
from exporter.reader import NodeReader, SourceOptions
from foundation.reading import DB, HYBRID


async def test_checkpoint_facts_travel_to_the_ledger(start_sim: Any, reader_for: Any,
                                                     short_tmp: Path) -> None:
    data = Path(__file__).parents[1] / "checkpoint" / "data"
    root = short_tmp / "kubelet"
    root.mkdir()
    (root / "cpu_manager_state").write_bytes((data / "cpu_v2").read_bytes())
    sim = await start_sim(DB)
    reader = reader_for(sim, kubelet_root=str(root))
    assert reader.sources == {"podresources", "topology", "checkpoint"}
    first = await reader.read()
    assert first.ledger.checkpoints is not None
    assert first.ledger.checkpoints.formats == (("cpu_manager_state", "v2"),)
    assert first.ledger.checkpoints.downgrade_unsafe is False
    assert not (await reader.read()).changed
    # Only the checkpoint changes: a new ledger (the change digest covers it).
    aside = root / "aside"
    aside.write_bytes((data / "cpu_v3").read_bytes())
    aside.replace(root / "cpu_manager_state")
    trap = await reader.read()
    assert trap.changed and trap.ledger.checkpoints is not None
    assert trap.ledger.checkpoints.formats == (("cpu_manager_state", "v3"),)
    assert trap.ledger.checkpoints.downgrade_unsafe is True
    # Corrupt: no format at all rather than the last good one; an error on every poll.
    (root / "cpu_manager_state").write_bytes(b"{not json")
    for _ in range(2):
        broken = await reader.read()
        assert set(broken.errors) == {("checkpoint", "parse")}
        assert broken.ledger.checkpoints is not None
        assert broken.ledger.checkpoints.formats == ()
        assert broken.ledger.checkpoints.downgrade_unsafe is None


async def test_list_failure_raises_source_error_from_read(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB)
    reader = reader_for(sim)
    await reader.read()
    await sim.stop_grpc()
    with pytest.raises(SourceError):
        await reader.read()


async def test_topology_file_and_node_name(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB)
    reader = reader_for(sim, node_name="n-1")
    ledger = (await reader.read()).ledger
    assert ledger.node_name == "n-1" and ledger.numa_nodes is not None


async def test_sysfs_topology(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(HYBRID)
    sysfs = Path(__file__).parent / "data" / "sysfs" / "smt-2socket"
    reader = NodeReader(SourceOptions(socket=sim.socket_path, sysfs=str(sysfs)))
    try:
        first = await reader.read()
        assert first.ledger.online_cpus == 8 and first.ledger.numa_nodes == 2
        assert not (await reader.read()).changed
    finally:
        await reader.close()
