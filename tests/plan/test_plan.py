"""plan: legacy vs pod-level reservation, admission, placement, suggestions, bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import main
from exporter.commands.plan import REFUSED_EXIT

DATA = Path(__file__).parent / "data"


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "--output", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_motivating_example(capsys: pytest.CaptureFixture[str]) -> None:
    report = _plan(capsys, "-f", str(DATA / "motivating.yaml"))
    (pod,) = report["pods"]
    assert pod["kind"] == "Deployment"
    assert (pod["namespace"], pod["name"]) == ("shop", "web")
    assert pod["qos"] == "Guaranteed"
    assert pod["budget_cpus"] == 3
    assert pod["legacy_cpus"] == 4
    assert pod["pod_level_cpus"] == 3
    assert pod["reclaimed_cpus"] == 1
    assert pod["admitted"] is True
    assert pod["reason"] is None
    assert [(c["name"], c["sidecar"], c["eligible"], c["exclusive_cpus"])
            for c in pod["containers"]] == [("mesh-proxy", True, False, 0),
                                            ("log-shipper", True, False, 0),
                                            ("app", False, True, 2)]
    assert report["total_reclaimed_cpus"] == 1


def test_motivating_example_placement(capsys: pytest.CaptureFixture[str]) -> None:
    report = _plan(capsys, "-f", str(DATA / "motivating.yaml"), "--topology.shape", "1x8x1",
                   "--reserved", "0")
    (pod,) = report["pods"]
    assert pod["cpus"] == "1-3"
    assert pod["numa_nodes"] == [0]
    by = {c["name"]: c for c in pod["containers"]}
    assert by["app"]["cpus"] == "1-2"
    assert by["mesh-proxy"]["cpus"] == "3"


def test_suggest_proposes_budget_3(capsys: pytest.CaptureFixture[str]) -> None:
    report = _plan(capsys, "-f", str(DATA / "motivating-nobudget.yaml"), "--suggest")
    (pod,) = report["pods"]
    assert pod["budget_cpus"] is None
    assert pod["legacy_cpus"] == 4 and pod["pod_level_cpus"] == 4
    s = pod["suggestion"]
    assert s["budget_cpus"] == 3
    assert s["saving_cpus"] == 1
    assert s["admitted"] is True
    assert s["resources"] == {"requests": {"cpu": "3", "memory": "6Gi"},
                              "limits": {"cpu": "3", "memory": "6Gi"}}
    assert sorted(s["move_to_shared_pool"]) == ["log-shipper", "mesh-proxy"]
    assert "resources:" in s["yaml"] and "cpu: '3'" in s["yaml"]


def test_suggest_table_shows_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(DATA / "motivating-nobudget.yaml"), "--suggest"]) == 0
    out = capsys.readouterr().out
    assert "suggested pod budget: 3 CPUs, saves 1 CPU(s)" in out
    assert "resources:" in out and "limits:" in out
    assert "mesh-proxy, log-shipper" in out


def test_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    report = _plan(capsys, "-f", str(DATA / "kinds.yaml"))
    by = {p["name"]: p for p in report["pods"]}
    assert [p["kind"] for p in report["pods"]] == [
        "Pod", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet"]
    assert by["single"]["legacy_cpus"] == 1 and by["single"]["reclaimed_cpus"] == 0
    db = by["db"]
    assert (db["legacy_cpus"], db["pod_level_cpus"], db["reclaimed_cpus"]) == (8, 8, 0)
    assert db["replicas"] == 3
    assert by["agent"]["qos"] == "Burstable"
    assert by["agent"]["pod_level_cpus"] == 0
    assert by["crunch"]["budget_cpus"] is None
    assert "fractional" in by["crunch"]["reason"]
    assert by["crunch"]["replicas"] == 4
    nightly = by["nightly"]
    assert nightly["admitted"] is False
    assert nightly["reason"].startswith("empty pod shared pool")


def test_container_scope(capsys: pytest.CaptureFixture[str]) -> None:
    report = _plan(capsys, "-f", str(DATA / "motivating.yaml"), "--scope", "container")
    (pod,) = report["pods"]
    assert pod["pod_level_cpus"] == 2
    assert pod["reclaimed_cpus"] == 2


def test_topology_rejections(capsys: pytest.CaptureFixture[str]) -> None:
    report = _plan(capsys, "-f", str(DATA / "kinds.yaml"), "--topology.shape", "2x4x1",
                   "--reserved", "0")
    by = {p["name"]: p for p in report["pods"]}
    assert by["db"]["admitted"] is False
    assert "single NUMA node" in by["db"]["reason"]


def test_directory_and_stdin(capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    report = _plan(capsys, "-f", str(DATA))
    assert len(report["pods"]) == 8
    monkeypatch.setattr("sys.stdin", io.StringIO((DATA / "motivating.yaml").read_text()))
    report = _plan(capsys, "-f", "-")
    assert report["pods"][0]["reclaimed_cpus"] == 1


BAD = {
    "broken.yaml": ("kind: Pod\nmetadata: {name: x\n", "invalid YAML"),
    "unknown.yaml": ("apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: s}\n",
                     "unsupported kind 'Deploymnet' (did you mean 'Deployment'?"),
    "only-service.yaml": ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
                          "no pod templates"),
    "nokind.yaml": ("metadata: {name: s}\n", "no 'kind'"),
    "scalar.yaml": ("just a string\n", "not a Kubernetes object"),
    "noname.yaml": ("kind: Pod\nspec: {containers: [{name: a}]}\n", "without metadata.name"),
    "nocontainers.yaml": ("kind: Pod\nmetadata: {name: p}\nspec: {}\n", "no containers"),
    "notemplate.yaml": ("kind: Deployment\nmetadata: {name: d}\nspec: {}\n",
                        "missing spec.template"),
    "badqty.yaml": ("kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
                    "  - name: a\n    resources: {limits: {cpu: lots}}\n", "not a quantity"),
    "badreplicas.yaml": ("kind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: -1\n"
                         "  template: {spec: {containers: [{name: a}]}}\n", "replicas"),
    "empty.yaml": ("", "no pod templates"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_manifests_give_one_clear_line(name: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    text, message = BAD[name]
    path = tmp_path / name
    path.write_text(text)
    assert main(["plan", "-f", str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert message in lines[0]
    assert "Traceback" not in captured.err


def test_non_workload_kinds_are_skipped_in_one_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "app.yaml"
    path.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n---\n"
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n---\n"
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg2}\n---\n"
                    "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\n"
                    "metadata: {name: rules}\n---\n"
                    "apiVersion: v1\nkind: List\nitems:\n"
                    "- {apiVersion: example.com/v1, kind: Widget, metadata: {name: w}}\n---\n"
                    + (DATA / "motivating.yaml").read_text())
    assert main(["plan", "-f", str(path), "--output", "json"]) == 0
    captured = capsys.readouterr()
    assert [p["name"] for p in json.loads(captured.out)["pods"]] == ["web"]
    assert captured.err.splitlines() == [
        "podres-exporter plan: skipped 5 objects that are not workloads: ConfigMap ×2, "
        "PrometheusRule, Service, Widget"]


def test_plan_the_projects_own_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    """The deploy directory mixes a DaemonSet with RBAC, a Service and custom resources."""
    import yaml

    directory = Path(__file__).resolve().parents[2] / "deploy" / "manifests"
    kinds = [doc["kind"] for path in sorted(directory.glob("*.yaml"))
             for doc in yaml.safe_load_all(path.read_text()) if doc]
    others = [kind for kind in kinds if kind != "DaemonSet"]
    assert "PrometheusRule" in others
    assert main(["plan", "-f", str(directory), "--output", "json"]) == 0
    captured = capsys.readouterr()
    assert [p["kind"] for p in json.loads(captured.out)["pods"]] == ["DaemonSet"]
    (line,) = captured.err.splitlines()
    assert line.startswith(f"podres-exporter plan: skipped {len(others)} objects that are "
                           "not workloads: ")
    assert all(kind in line for kind in others)


def test_only_non_workloads_is_one_line_naming_them(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "svc.yaml"
    path.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    assert main(["plan", "-f", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "no pod templates found" in line
    assert "skipped 1 object that is not a workload: Service" in line


def test_missing_file_and_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    good = str(DATA / "motivating.yaml")
    assert main(["plan", "-f", good, "--topology", "2by4"]) == 2
    assert "SOCKETSxCORESxTHREADS" in capsys.readouterr().err
    assert main(["plan", "-f", good, "--topology.shape", "1x4x1", "--reserved", "9"]) == 2
    assert "--reserved" in capsys.readouterr().err
    assert main(["plan", "-f", good, "--cpu-policy-options", "turbo"]) == 2
    assert "turbo" in capsys.readouterr().err


def test_a_pod_larger_than_any_node_is_refused_not_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """5000 CPUs is more than any node the model knows: the verdict is the kubelet's refusal,
    and the command itself succeeds."""
    manifest = tmp_path / "huge.yaml"
    manifest.write_text("kind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n"
                        "  - {name: main, resources: {limits: {cpu: '5000', memory: 1Gi}}}\n")
    assert main(["plan", "-f", str(manifest), "-o", "json"]) == 0
    (pod,) = json.loads(capsys.readouterr().out)["pods"]
    assert pod["admitted"] is False
    assert "not enough cpus available to satisfy request: requested=5000" in pod["reason"]


# -- exit status for CI ----------------------------------------------------------------------

def _pods_manifest(tmp: Path, *pods: tuple[str, str]) -> Path:
    docs = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"namespace": "default", "name": name},
             "spec": {"containers": [{"name": "app", "resources": {
                 "requests": {"cpu": cpu, "memory": "1Gi"},
                 "limits": {"cpu": cpu, "memory": "1Gi"}}}]}}
            for name, cpu in pods]
    path = tmp / "pods.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_fail_on_refusal_exit_status(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    # One physical core of an SMT-2 node under full-pcpus-only refuses a 1-CPU container.
    manifest = _pods_manifest(tmp_path, ("fits", "2"), ("odd", "1"))
    flags = ["-f", str(manifest), "--topology.shape", "1x4x2", "--reserved", "",
             "--cpu-policy-options", "full-pcpus-only"]
    assert main(["plan", *flags]) == 0  # without the flag, a report only
    capsys.readouterr()
    assert main(["plan", *flags, "--fail-on-refusal", "-o", "json"]) == REFUSED_EXIT
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # the plan is printed all the same
    assert [p["admitted"] for p in report["pods"]] == [True, False]
    assert "refused: default/odd" in captured.err
    # Everything admitted: 0 with the flag.
    ok = _pods_manifest(tmp_path, ("fits", "2"))
    assert main(["plan", "-f", str(ok), "--topology.shape", "1x4x2", "--reserved", "",
                 "--cpu-policy-options", "full-pcpus-only", "--fail-on-refusal"]) == 0


# -- suggest, then plan the suggestion ---------------------------------------------------------

def _apply_suggestion(template: dict[str, Any], suggestion: dict[str, Any]) -> dict[str, Any]:
    """The manifest an operator writes from a suggestion: the pod resources block added,
    the CPU request and limit of the containers moved to the shared pool removed."""
    spec = copy.deepcopy(template)
    pod_spec = spec["spec"]["template"]["spec"] if "template" in spec["spec"] else spec["spec"]
    pod_spec["resources"] = suggestion["resources"]
    for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        if c["name"] in suggestion["move_to_shared_pool"]:
            for block in c["resources"].values():
                block.pop("cpu", None)
    return spec


def _padding_manifest() -> dict[str, Any]:
    def ctr(name: str, cpu: str, sidecar: bool = False) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "resources": {
            "requests": {"cpu": cpu, "memory": "256Mi"},
            "limits": {"cpu": cpu, "memory": "256Mi"}}}
        if sidecar:
            c["restartPolicy"] = "Always"
        return c
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "ns", "name": "pad"},
            "spec": {"initContainers": [ctr("a", "1", True), ctr("b", "1", True),
                                        ctr("c", "500m", True)],
                     "containers": [ctr("app", "2"), ctr("log", "1")]}}


_OPTION_SETS = ("", "full-pcpus-only", "full-pcpus-only,distribute-cpus-across-numa",
                "distribute-cpus-across-cores", "align-by-socket")


@pytest.mark.parametrize("shape", ["1x8x1", "1x8x2", "2x8x2"])
@pytest.mark.parametrize("options", _OPTION_SETS)
@pytest.mark.parametrize("scope", ["pod", "container"])
def test_suggestion_is_admitted_when_planned(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             shape: str, options: str, scope: str) -> None:
    """Whatever the node and options, a suggestion marked admitted is admitted when the
    operator plans it, and one marked refused is refused (the suggestion used to be judged
    on a scratch node without SMT, so full-pcpus-only on SMT-2 got a 3-CPU budget that plan
    then refused)."""
    policy = "best-effort" if "align-by-socket" in options else "single-numa-node"
    flags = ["--topology.shape", shape, "--cpu-policy-options", options, "--scope", scope,
             "--topology-policy", policy]
    templates = [yaml.safe_load((DATA / "motivating-nobudget.yaml").read_text()),
                 _padding_manifest()]
    for template in templates:
        source = tmp_path / "in.yaml"
        source.write_text(yaml.safe_dump(template))
        (pod,) = _plan(capsys, "-f", str(source), "--suggest", *flags)["pods"]
        s = pod["suggestion"]
        assert s is not None
        if "full-pcpus-only" in options and shape.endswith("x2"):
            assert s["budget_cpus"] % 2 == 0
        planned = tmp_path / "suggested.yaml"
        planned.write_text(yaml.safe_dump(_apply_suggestion(template, s)))
        (again,) = _plan(capsys, "-f", str(planned), *flags)["pods"]
        assert again["budget_cpus"] == s["budget_cpus"]
        assert (again["admitted"], again["reason"]) == (s["admitted"], s["reason"]), \
            (shape, options, scope, template["metadata"]["name"])
