"""``python -m realnode.capture`` (docs/real-node.md#captures) against a real node: what it
writes is a fixture that ``snapshot --from`` reads as the kubelet's checkpoint says, holding
the files the committed captures hold, and small."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.cli import main
from realnode.capture import OUT, SCENARIOS, capture
from tests.realnode.checks import KubeletCPUState, assert_ledger_is
from tests.realnode.conftest import need_realnode


def test_a_capture_is_the_kubelets_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need_realnode("1.37")
    out = tmp_path / "1.37-amd-pod"
    files = capture(SCENARIOS["1.37-amd-pod"], out)
    assert files == sorted(p.name for p in (OUT / "1.37-amd-pod").iterdir())
    assert sum((out / f).stat().st_size for f in files) < 20_000
    assert all("kubernetes_feature_enabled" in line
               for line in (out / "metrics.txt").read_text().splitlines())
    assert main(["snapshot", "--from", str(out), "--output", "json"]) == 0
    ledger = json.loads(capsys.readouterr().out)
    state = KubeletCPUState.decode(json.loads((out / "cpu_manager_state").read_text()))
    by_name = {p["metadata"]["name"]: p["metadata"]["uid"]
               for p in json.loads((out / "pods.json").read_text())["items"]}
    assert_ledger_is(ledger, state, by_name, set(by_name))
    assert len(state.pods) == 2
