"""Fixture directories carry devices (docs/design.md#devices): ``devices`` and
``dynamicResources`` in ``list.json``, ``devices`` in ``allocatable.json``, both optional;
they survive ``record``'s writing and loading back; malformed ones are one clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from exporter.assemble import snapshot_from_raw
from exporter.commands.snapshot import ledger_from_fixture
from exporter.errors import UserError
from exporter.sources.fixture import load_fixture_dir, write_fixture_dir
from reconciler.snapshot import DeviceAlloc

REPO = Path(__file__).resolve().parents[2]
GPU_NODE = REPO / "tests" / "data" / "devices" / "gpu-best-effort"
OLD = REPO / "tests" / "data" / "scenarios" / "sidecar-hybrid"


def test_a_fixture_with_devices_reads_them() -> None:
    snap = snapshot_from_raw(load_fixture_dir(GPU_NODE)).snapshot
    train = snap.pods[0].containers[0]
    assert train.devices == (DeviceAlloc("nvidia.com/gpu", ("GPU-2",), (1,)),)
    assert snap.pods[1].containers[0].dynamic[0].driver == "net.example.com"
    assert snap.allocatable is not None and len(snap.allocatable.devices) == 6
    ledger = ledger_from_fixture(str(GPU_NODE))
    assert [a.kind for a in ledger.anomalies] == ["device_numa_misaligned"]


def test_record_writes_devices_and_loads_them_back(tmp_path: Path) -> None:
    raw = load_fixture_dir(GPU_NODE)
    write_fixture_dir(tmp_path / "again", raw)
    written = json.loads((tmp_path / "again" / "list.json").read_text())
    assert written["podResources"][0]["containers"][0]["devices"][0]["deviceIds"] == ["GPU-2"]
    assert ledger_from_fixture(str(tmp_path / "again")).to_json() == \
        ledger_from_fixture(str(GPU_NODE)).to_json()


def test_old_fixtures_without_devices_still_load() -> None:
    ledger = ledger_from_fixture(str(OLD))
    assert ledger.to_json()["devices"] == {"by_resource": {}, "containers": [],
                                           "dropped_resources": 0}


@pytest.mark.parametrize("bad", [
    {"resourceName": 5},
    {"resourceName": "gpu", "deviceIds": "GPU-0"},
    {"resourceName": "gpu", "topology": {"nodes": [{"ID": "zero"}]}},
    {"resourceName": "gpu", "topology": {"nodes": [{"ID": str(2**64)}]}},
    {"resourceName": "gpu", "deviceIdz": ["GPU-0"]},
])
def test_malformed_devices_are_one_clear_error(tmp_path: Path, bad: dict[str, object]
                                               ) -> None:
    directory = tmp_path / "node"
    shutil.copytree(GPU_NODE, directory)
    listing = json.loads((directory / "list.json").read_text())
    listing["podResources"][0]["containers"][0]["devices"] = [bad]
    (directory / "list.json").write_text(json.dumps(listing))
    with pytest.raises(UserError) as err:
        load_fixture_dir(directory)
    message = str(err.value)
    assert "list.json" in message and "\n" not in message


def test_negative_and_huge_numa_ids_in_a_fixture_are_read_and_not_judged(tmp_path: Path
                                                                        ) -> None:
    directory = tmp_path / "node"
    shutil.copytree(GPU_NODE, directory)
    listing = json.loads((directory / "list.json").read_text())
    listing["podResources"][0]["containers"][0]["devices"] = [
        {"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-2"],
         "topology": {"nodes": [{"ID": "-1"}, {"ID": str(2**62)}]}}]
    (directory / "list.json").write_text(json.dumps(listing))
    ledger = ledger_from_fixture(str(directory))
    assert ledger.anomalies == ()
    # The allocatable list's topology for GPU-2 (node 1) is what it is counted by.
    gpus = ledger.to_json()["devices"]["by_resource"]["nvidia.com/gpu"]
    assert gpus["1"]["assigned"] == 2


def test_snapshot_table_lists_devices_only_on_a_node_with_devices(tmp_path: Path) -> None:
    from exporter.render import render_ledger

    text = render_ledger(ledger_from_fixture(str(GPU_NODE)))
    section = text[text.index("Devices"):text.index("Reclaimed cores")]
    assert "nvidia.com/gpu   1     2            2         0" in section
    assert "claim nic" in section and "GPU-2" in section
    assert "Devices" not in render_ledger(ledger_from_fixture(str(OLD)))
    # A hostile resource name and a long id list stay on one row each.
    directory = tmp_path / "node"
    shutil.copytree(GPU_NODE, directory)
    listing = json.loads((directory / "list.json").read_text())
    listing["podResources"][0]["containers"][0]["devices"] = [
        {"resourceName": "x\ny", "deviceIds": [f"GPU-{i}" for i in range(500)]}]
    (directory / "list.json").write_text(json.dumps(listing))
    text = render_ledger(ledger_from_fixture(str(directory)))
    row = next(line for line in text.splitlines() if line.startswith("ml  ") and "x\\ny" in line)
    assert "GPU-0,GPU-1" in row and "…" in row
