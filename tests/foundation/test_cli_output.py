"""What the CLI's tables say to an operator: nothing that alarms or puzzles for no reason
(issue 25). Memory in binary units, gates in words, a negative reclaimed count explained,
the 1.36 reporting pattern apart from the errors; mistyped flags get the nearest one, flags
ignored beside --from are refused, the deprecated --topology SxCxT says so, and the demo
announces its deliberate drift."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from exporter.cli import main
from exporter.commands.demo import _print_urls, drift_notes
from exporter.demo.node import demo_drift, start_demo_node
from exporter.render import human_bytes, reclaimed_cell, render_ledger
from foundation.helpers import GI, STATIC, cspec, ctr, mem, pod, pspec, snapshot, topology
from reconciler.reconcile import reconcile

SCENARIO = Path(__file__).parents[2] / ".." / "shared" / "scenarios" / "database-pod-scope"


@pytest.mark.parametrize(("size", "text"), [
    (None, "-"), (0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (512 * 2**20, "512 MiB"),
    (6 * GI, "6 GiB"), (3 * GI // 2, "1.5 GiB"), (2**40, "1 TiB"),
])
def test_human_bytes(size: int | None, text: str) -> None:
    assert human_bytes(size) == text


@pytest.mark.parametrize(("n", "text"), [(None, "-"), (0, "0"), (2, "2"), (-1, "none (+1)")])
def test_reclaimed_cell(n: int | None, text: str) -> None:
    assert reclaimed_cell(n) == text


def _ledger_text() -> str:
    topo = topology(8)
    legacy = pod("legacy", ctr("proxy", [4]), ctr("shipper", [4]), ctr("app", [2, 3]))
    # A 2-CPU budget for one 500m container: legacy cost 1, so reclaimed is -1.
    generous = pod("generous", ctr("app", memory=[mem(GI, "memory", 0)]), cpus=[6, 7],
                   memory=[mem(3 * GI // 2, "memory", 0)])
    specs = [pspec("generous", cspec("app", "500m"), budget="2", budget_memory="1536Mi")]
    config = replace(STATIC, feature_gates=(("PodLevelResourceManagers", True),
                                            ("PodLevelResources", True)))
    snap = snapshot(legacy, generous, topo=topo, specs=specs, config=config)
    snap = replace(snap, kubelet_info=(("feature_gate_metric", "True"),))
    ledger = reconcile(snap)
    assert {a.kind for a in ledger.anomalies} == {"legacy_shared_report"}
    assert [p.reclaimed_cpus for p in ledger.pods if p.name == "generous"] == [-1]
    return render_ledger(ledger)


def test_snapshot_table_reads_as_words() -> None:
    text = _ledger_text()
    # The 1.36 pattern is listed, apart from the errors, as what the docs call it.
    assert "Anomalies: none" in text
    notes = text.split("Notes (reported as anomalies of an informational kind, not errors")[1]
    assert "legacy_shared_report  default    legacy" in notes
    # Gates in words, never a Python bool.
    assert "PodLevelResourceManagers gate (/configz): on" in text
    assert "PodLevelResourceManagers gate (kubelet_feature_enabled metric): on" in text
    assert "True" not in text and "feature_gate_metric" not in text
    # Memory in binary units.
    pools = text.split("Memory pools\n")[1].split("\n\n")[0]
    assert pools.splitlines()[-1].split() == ["memory", "0", "B", "1", "GiB", "512", "MiB"]
    assert str(GI) not in text
    # A budget that costs more than the per-container model: explained, never "-1".
    assert "none (+1)" in text and "the pod budget pins N CPU(s) more" in text
    assert " -1 " not in text and not any(line.endswith(" -1") for line in text.splitlines())


def test_plan_table_never_shows_a_negative_reclaimed(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def guaranteed(cpu: str) -> dict[str, dict[str, str]]:
        return {"requests": {"cpu": cpu, "memory": "1Gi"},
                "limits": {"cpu": cpu, "memory": "1Gi"}}
    docs = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ns", "name": "generous"},
         "spec": {"resources": guaranteed("2"),
                  "containers": [{"name": "app", "resources": guaranteed("500m")}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ns", "name": "refused"},
         "spec": {"resources": guaranteed("2"),
                  "containers": [{"name": "app", "resources": guaranteed("2")},
                                 {"name": "side", "resources": guaranteed("100m")}]}},
    ]
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    assert main(["plan", "-f", str(manifest)]) == 0
    rows = capsys.readouterr().out.splitlines()
    generous = next(r for r in rows if "ns/generous" in r).split()
    refused = next(r for r in rows if "ns/refused" in r).split()
    assert generous[6:9] == ["none", "(+1)", "yes"]
    assert refused[6:8] == ["-", "no"]  # a refused pod reclaims nothing
    assert rows[-1].endswith("net): none (+1)")
    assert not any(" -1" in r for r in rows)
    # JSON keeps the signed figure (docs/design.md#estimates).
    assert main(["plan", "-f", str(manifest), "-o", "json"]) == 0
    assert '"reclaimed_cpus": -1' in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "hint"), [
    (["snapshot", "--kublet.url", "https://x"], "did you mean --kubelet.url?"),
    (["plan", "-f", "x", "--fail-on-refual"], "did you mean --fail-on-refusal?"),
    (["history", "at", "now", "--histroy.url", "sqlite:///x"], "did you mean --history.url?"),
    (["serve", "--web.listen-adress", ":1"], "did you mean --web.listen-address?"),
])
def test_mistyped_flag_gets_did_you_mean(argv: list[str], hint: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: " in err and hint in err


def test_unknown_flag_without_a_near_one_has_no_hint(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    with pytest.raises(SystemExit):
        main(["snapshot", "--zzzzzz"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


def test_from_refuses_the_flags_it_would_ignore(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    if not SCENARIO.is_dir():
        pytest.skip("../shared/scenarios is not beside the checkout")
    code = main(["snapshot", "--from", str(SCENARIO), "--kubelet.url", "https://h:10250",
                 "--sysfs=/x", "--node-name", "n"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--kubelet.url https://h:10250, --sysfs /x would be ignored" in err
    assert "--node-name" not in err
    # The pod's environment (PODRES_*) is not a flag written beside --from.
    monkeypatch.setenv("PODRES_KUBELET_URL", "https://h:10250")
    assert main(["snapshot", "--from", str(SCENARIO), "--node-name", "n"]) == 0
    assert capsys.readouterr().out.startswith("Node n:")


def test_deprecated_topology_shape_warns(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    manifest = Path(__file__).parents[1] / "plan" / "data" / "motivating.yaml"
    assert main(["plan", "-f", str(manifest), "--topology", "1x8x1"]) == 0
    err = capsys.readouterr().err
    assert "--topology 1x8x1 is deprecated" in err and "use --topology.shape 1x8x1" in err
    assert main(["plan", "-f", str(manifest), "--topology.shape", "1x8x1"]) == 0
    assert "deprecated" not in capsys.readouterr().err


async def test_demo_announces_its_drift(short_tmp: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    demo, description = await start_demo_node(short_tmp, "2x8x2")
    try:
        [(namespace, pod_name, container)] = demo_drift(demo.node)
        notes = drift_notes(demo)
        _print_urls(description, notes)("http://127.0.0.1:1")
    finally:
        await demo.stop()
    out = capsys.readouterr().out
    [note] = notes
    assert f"{namespace}/{pod_name}/{container} drifts on purpose" in note
    assert "cpuset_drift" in note and "expected" in note
    lines = out.splitlines()
    printed = note.replace("{url}", "http://127.0.0.1:1")
    assert printed in lines and lines.index(printed) > 0
    assert "metrics             http://127.0.0.1:1/metrics" in out
