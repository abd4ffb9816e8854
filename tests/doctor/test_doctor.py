"""doctor: the enablement checklist and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.commands.doctor import Check, doctor_checks, exit_code
from reconciler.kube import kubelet_config_from_json

HERE = Path(__file__).parent


def test_ready_node_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--from", str(HERE / "ready")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert "ready: no check fails" in out


def test_unready_node_exits_1_and_names_failures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--from", str(HERE / "unready"), "--output", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ready"] is False
    failing = {c["name"] for c in report["checks"] if c["status"] == "fail"}
    assert failing == {"PodLevelResourceManagers gate", "topology manager policy",
                       "static CPU manager policy", "Static memory manager policy",
                       "checkpoint downgrade trap"}
    for c in report["checks"]:
        if c["status"] == "fail":
            assert c["fix"], c


def test_unready_table_names_the_failing_items(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--from", str(HERE / "unready")]) == 1
    out = capsys.readouterr().out
    assert "not ready: failing: PodLevelResourceManagers gate" in out
    assert "fix:" in out


@pytest.mark.parametrize("fixture", ["unreadable", "does-not-exist"])
def test_unreadable_node_exits_2(fixture: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--from", str(HERE / fixture)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot read the node" in err[0]


def test_malformed_configz_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "configz.json").write_text("{oops")
    assert main(["doctor", "--from", str(tmp_path)]) == 2
    assert "invalid JSON" in capsys.readouterr().err


def test_live_without_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 2
    assert "--kubelet.url" in capsys.readouterr().err


def _names(checks: list[Check], status: str) -> set[str]:
    return {c.name for c in checks if c.status == status}


def test_metrics_override_config_for_gates() -> None:
    cfg = kubelet_config_from_json({"featureGates": {"PodLevelResourceManagers": True}})
    checks = doctor_checks(cfg, {"PodLevelResourceManagers": False}, [], "linux")
    assert "PodLevelResourceManagers gate" in _names(checks, "fail")


def test_nothing_known_is_unknown_not_failing() -> None:
    checks = doctor_checks(None, None, None, None)
    assert _names(checks, "fail") == set()
    assert exit_code(checks) == 0
    assert all(c.status == "unknown" for c in checks)


def test_reserved_cpus_that_leave_no_room() -> None:
    cfg = kubelet_config_from_json({"cpuManagerPolicy": "static", "reservedSystemCPUs": "0-3"})
    checks = doctor_checks(cfg, None, [], "linux", online_cpus=4)
    assert "reserved CPUs leave room" in _names(checks, "fail")
    cfg2 = kubelet_config_from_json({"cpuManagerPolicy": "static",
                                     "kubeReserved": {"cpu": "1500m"}})
    ok = doctor_checks(cfg2, None, [], "linux", online_cpus=4)
    assert "reserved CPUs leave room" in _names(ok, "pass")
    empty = doctor_checks(cfg2, None, [], "linux", allocatable_cpus=0)
    assert "reserved CPUs leave room" in _names(empty, "fail")


def test_non_linux_fails() -> None:
    checks = doctor_checks(None, None, None, "win32")
    assert "Linux" in _names(checks, "fail")


@pytest.mark.parametrize(("options", "status", "detail"), [
    ({"full-pcpus-only": "true", "align-by-socket": "false"}, "pass",
     "enabled: full-pcpus-only"),
    ({"prefer-align-cpus-by-uncorecache": "T", "distribute-cpus-across-cores": "0"}, "pass",
     "enabled: prefer-align-cpus-by-uncorecache"),
    ({"full-pcpus-only": "yes"}, "fail", "is not a boolean"),
    ({"full-pcpu-only": "true"}, "fail", "unsupported cpuManagerPolicyOptions option"),
    ({"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"}, "fail",
     "can not be used together"),
])
def test_cpu_manager_policy_options_as_the_kubelet_reads_them(
        options: dict[str, str], status: str, detail: str) -> None:
    """The options are parsed the way the kubelet parses them: it refuses to start on an
    unknown name, a value that is not a Go boolean, or a pair it does not combine."""
    config = kubelet_config_from_json({"kubeletconfig": {
        "cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
        "topologyManagerPolicy": "restricted", "cpuManagerPolicyOptions": options}})
    checks = {c.name: c for c in doctor_checks(config, None, None, "linux")}
    check = checks["CPU manager policy options"]
    assert check.status == status and detail in check.detail, check
    assert bool(check.fix) == (status == "fail")
