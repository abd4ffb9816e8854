"""The reference scenarios (tests/data/scenarios, copied from ../shared/scenarios) through
the real CLI: ``snapshot --from DIR --output json``, and the live path (the simulated kubelet
serving the folder, ``snapshot`` over the unix socket and HTTPS)."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from foundation.helpers import (
    SCENARIO_NAMES,
    SCENARIOS,
    arun_cli,
    compare_expect,
    load_expect,
    run_cli,
)

SHARED = Path("/work/shared/scenarios")


def test_all_three_scenarios_are_present() -> None:
    assert SCENARIO_NAMES == ["database-pod-scope", "legacy-padding", "sidecar-hybrid"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/scenarios not mounted here")
def test_scenario_copies_match_the_shared_originals() -> None:
    for name in SCENARIO_NAMES:
        cmp = filecmp.dircmp(SHARED / name, SCENARIOS / name)
        assert not (cmp.left_only or cmp.right_only or cmp.diff_files), name


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_snapshot_from_fixture_dir(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["snapshot", "--from", str(SCENARIOS / name), "--output", "json"])
    out = capsys.readouterr().out
    assert code == 0
    ledger = json.loads(out)
    assert ledger["schema"] == "podres.ledger/v1"
    assert compare_expect(ledger, load_expect(name)) == []


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_snapshot_from_fixture_dir_console_script(name: str) -> None:
    run = run_cli("snapshot", "--from", str(SCENARIOS / name), "--output", "json")
    assert run.code == 0, run.err
    assert compare_expect(json.loads(run.out), load_expect(name)) == []


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_snapshot_table_output(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--from", str(SCENARIOS / name)]) == 0
    out = capsys.readouterr().out
    assert "CPU pools" in out and "Containers" in out
    for key in load_expect(name).get("containers", {}):
        assert key.split("/")[-1] in out


def _ledger_keys(doc: dict[str, Any]) -> set[str]:
    return set(doc)


def test_ledger_json_has_exactly_the_documented_shape(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    main(["snapshot", "--from", str(SCENARIOS / "database-pod-scope"), "--output", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert _ledger_keys(doc) == {"schema", "node", "cpu_pools", "cpu_pools_by_numa",
                                 "memory_pools", "pods", "containers", "reclaimed_cpus",
                                 "reclaimable_cpus", "anomalies", "devices"}
    assert set(doc["node"]) == {"name", "online_cpus", "numa_nodes", "kubelet"}
    pools = {"reserved", "node_shared", "node_exclusive", "pod_exclusive", "pod_shared",
             "pod_idle"}
    assert set(doc["cpu_pools"]) == pools
    assert all(set(v) == pools for v in doc["cpu_pools_by_numa"].values())
    for v in doc["memory_pools"].values():
        assert set(v) == {"node_exclusive", "pod_exclusive", "pod_shared"}
    for p in doc["pods"]:
        assert set(p) == {"namespace", "name", "cpus", "budget_cpus", "pod_exclusive_cpus",
                          "pod_shared_cpus", "pod_idle_cpus", "node_exclusive_cpus",
                          "reclaimed_cpus", "reclaimable_cpus", "estimate_basis"}
        assert p["estimate_basis"] in ("spec", "podresources")
    for c in doc["containers"]:
        assert set(c) == {"namespace", "pod", "name", "sidecar", "assignment",
                          "memory_assignment", "cpus", "cpu_count"}
    for a in doc["anomalies"]:
        assert set(a) == {"kind", "namespace", "pod", "container", "detail"}
    assert doc["devices"] == {"by_resource": {}, "containers": [], "dropped_resources": 0}


@pytest.mark.parametrize("name", SCENARIO_NAMES)
async def test_snapshot_live_over_socket_and_https(name: str, start_sim: Any,
                                                   short_tmp: Path) -> None:
    folder = SCENARIOS / name
    sim = await start_sim(folder, http=True, token="s3cret")
    token = short_tmp / "token"
    token.write_text("s3cret\n")
    args = ["snapshot", "--output", "json", "--podresources.socket", sim.socket_path,
            "--kubelet.url", sim.http_url, "--kubelet.ca-file", str(sim.cert_path),
            "--kubelet.token-file", str(token), "--topology", str(folder / "topology.json")]
    run = await arun_cli(*args)
    assert run.code == 0, run.err
    live = json.loads(run.out)
    assert compare_expect(live, load_expect(name)) == []
    # Only what the folder lacks may be reported missing (a 404), and nothing else.
    for line in run.err.splitlines():
        assert "HTTP 404" in line, line
        assert any(p in line for p in ("/pods", "/configz", "/metrics")), line
    # The live ledger is the fixture ledger (apart from facts only a live kubelet gives).
    fixture = json.loads(run_cli("snapshot", "--from", str(folder), "--output", "json").out)
    for doc in (live, fixture):
        doc["node"].pop("kubelet")
    assert live == fixture


async def test_live_with_specs_from_https_gives_spec_basis(start_sim: Any) -> None:
    folder = SCENARIOS / "database-pod-scope"
    sim = await start_sim(folder, http=True)
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--kubelet.url", sim.http_url,
                         "--kubelet.ca-file", str(sim.cert_path),
                         "--kubelet.token-file", "/nonexistent/token",
                         "--topology", str(folder / "topology.json"))
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert {p["estimate_basis"] for p in doc["pods"]} == {"spec"}
    assert doc["node"]["kubelet"]["cpu_manager_policy"] == "static"


async def test_live_without_ca_file_fails_tls_with_a_warning(start_sim: Any) -> None:
    folder = SCENARIOS / "sidecar-hybrid"
    sim = await start_sim(folder, http=True)
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--kubelet.url", sim.http_url,
                         "--topology", str(folder / "topology.json"))
    # The PodResources part still works; the kubelet part is one warning per endpoint.
    assert run.code == 0, run.err
    assert "Traceback" not in run.err
    assert "TLS verification" in run.err and "--kubelet.ca-file" in run.err
    assert compare_expect(json.loads(run.out), load_expect("sidecar-hybrid")) == []


async def test_live_insecure_skip_verify(start_sim: Any) -> None:
    folder = SCENARIOS / "database-pod-scope"
    sim = await start_sim(folder, http=True)
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--kubelet.url", sim.http_url,
                         "--kubelet.insecure-skip-verify",
                         "--topology", str(folder / "topology.json"))
    assert run.code == 0 and run.err == "", run.err
    assert compare_expect(json.loads(run.out), load_expect("database-pod-scope")) == []
