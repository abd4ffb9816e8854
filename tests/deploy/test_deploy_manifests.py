"""Deployment artefacts: plain manifests, the Helm chart, and the CRD-backed objects.

Real tools only: ``kubernetes-validate --strict`` (bundled Kubernetes schemas), the Helm v4
SDK through ``helm-python-sdk`` (render and ``lint --strict``), ``yamllint``, and jsonschema
against the ServiceMonitor / PrometheusRule CRD schemas in ``deploy/crds``. When
``deploy/crds/npm`` has been installed (``npm ci --prefix deploy/crds/npm``), the validators
that ``@kubernetes-models/prometheus-operator`` generated from the upstream CRDs are run too.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.dashboards.dash_helpers import promtool

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = DEPLOY / "manifests"
OPTIONAL = MANIFESTS / "optional"
CHART = DEPLOY / "helm" / "podres-exporter"
CRDS = DEPLOY / "crds"
NPM_DIR = CRDS / "npm"
YAMLLINT_CONFIG = DEPLOY / ".yamllint.yml"
BIN = Path(sys.executable).parent

RELEASE = "podres-exporter"
NAMESPACE = "podres-system"
# Kubernetes versions the built-in kinds are validated against: the oldest supported by
# the chart (Chart.yaml kubeVersion) and the one Pod-Level Resource Managers went beta in.
KUBE_VERSIONS = ("1.31.0", "1.37.0")
# Labels only Helm adds (the plain manifests are applied with kubectl).
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
# The api reads the fleet's PostgreSQL database: the exporters must write it (the chart
# refuses api.enabled alone), through the api's own Secret.
ALL_OPTIONS = {"legacyProxyAuthz": True, "api": {"enabled": True},
               "history": {"existingSecret": "podres-exporter-history"}}
CRD_KINDS = ("ServiceMonitor", "PrometheusRule")

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is a dev dependency")
kubernetes_validate = pytest.importorskip("kubernetes_validate")


# --------------------------------------------------------------------------- helpers


def load_docs(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc]


def plain_objects(*, optional: bool = False) -> list[dict[str, Any]]:
    files = sorted(MANIFESTS.glob("*.yaml"))
    if optional:
        files += sorted(OPTIONAL.glob("*.yaml"))
    return [doc for path in files for doc in load_docs(path)]


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    chart = helm.Chart.load(str(CHART))
    return chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)


# The chart renders the prometheus-operator objects where the cluster serves their API
# ("auto"); the SDK renders without a cluster, so the tests that look at them say "true".
OPERATOR_ON = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}


def with_operator(values: dict[str, Any] | None) -> dict[str, Any]:
    """``values`` with the operator objects on, unless they say otherwise."""
    merged = copy.deepcopy(values or {})
    for name, on in OPERATOR_ON.items():
        merged.setdefault(name, {}).setdefault("enabled", on["enabled"])
    return merged


def rendered_objects(values: dict[str, Any] | None = None, *,
                     operator: bool = True) -> list[dict[str, Any]]:
    """The chart's objects; ``operator``: as on a cluster with prometheus-operator."""
    if operator:
        values = with_operator(values)
    objects = []
    for path, text in sorted(render(values).items()):
        if path.endswith(".txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def normalize(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for meta in (obj.get("metadata"), obj.get("spec", {}).get("template", {}).get("metadata")):
        if meta and "labels" in meta:
            for label in HELM_ONLY_LABELS:
                meta["labels"].pop(label, None)
    return obj


def by_key(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for obj in objects:
        assert key(obj) not in out, f"duplicate object {key(obj)}"
        out[key(obj)] = normalize(obj)
    return out


def one(objects: list[dict[str, Any]], kind: str, name: str = RELEASE) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def strictify(schema: Any) -> Any:
    """additionalProperties: false wherever an object schema lists its properties: unknown
    fields are errors, as with ``kubectl apply --validate=strict``."""
    if isinstance(schema, dict):
        schema = {k: strictify(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strictify(v) for v in schema]
    return schema


def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    name = {"ServiceMonitor": "servicemonitors", "PrometheusRule": "prometheusrules"}[kind]
    schema = yaml.safe_load(
        (CRDS / f"{name}.monitoring.coreos.com.v1.openapi.yaml").read_text(encoding="utf-8"))
    schema = strictify(schema)
    # Against the meta-schema, but without its "regex" format check: the CRD patterns are Go
    # (RE2) regular expressions, e.g. ^(?i)(abort|warn)?$, which ECMA 262 rejects and
    # Python's re accepts.
    jsonschema.Draft7Validator(jsonschema.Draft7Validator.META_SCHEMA).validate(schema)
    return jsonschema.Draft7Validator(schema)


def crd_errors(obj: dict[str, Any]) -> list[str]:
    errors = crd_validator(obj["kind"]).iter_errors(obj)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def validate_builtin(obj: dict[str, Any]) -> None:
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{key(obj)} invalid for Kubernetes {version}: {path}: {exc.message}")


def rule_groups_from_sources() -> list[dict[str, Any]]:
    groups = []
    for path in sorted((ROOT / "dashboards" / "prometheus").glob("*.rules.yml")):
        groups.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["groups"])
    return groups


# --------------------------------------------------------------------------- sync


def test_generated_files_are_in_sync_with_rule_sources() -> None:
    proc = subprocess.run([sys.executable, str(DEPLOY / "build.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_prometheusrule_holds_every_rule_group_unchanged() -> None:
    sources = rule_groups_from_sources()
    assert sources, "no rule groups in dashboards/prometheus/*.rules.yml"
    plain = one(plain_objects(), "PrometheusRule")
    rendered = one(rendered_objects(), "PrometheusRule")
    assert plain["spec"]["groups"] == sources
    assert rendered["spec"]["groups"] == sources


def test_default_chart_renders_the_plain_manifests() -> None:
    plain = by_key([o for o in plain_objects() if o["kind"] != "Namespace"])
    rendered = by_key(rendered_objects())
    assert sorted(rendered) == sorted(plain)
    for k, obj in plain.items():
        assert rendered[k] == obj, f"{k} differs between the chart and deploy/manifests"


def _history_env(ds: dict[str, Any]) -> dict[str, Any]:
    """Pop the DaemonSet's PODRES_HISTORY_URL entry (the plain manifest writes SQLite, and
    says to point it at the fleet database next to the api; the chart with the api must)."""
    env = ds["spec"]["template"]["spec"]["containers"][0]["env"]
    (entry,) = [e for e in env if e["name"] == "PODRES_HISTORY_URL"]
    env.remove(entry)
    return dict(entry)


def test_chart_options_render_the_optional_manifests() -> None:
    plain = by_key([o for o in plain_objects(optional=True) if o["kind"] != "Namespace"])
    rendered = by_key(rendered_objects(ALL_OPTIONS))
    assert sorted(rendered) == sorted(plain)
    ds = ("DaemonSet", NAMESPACE, RELEASE)
    assert _history_env(rendered[ds])["valueFrom"] == {"secretKeyRef": {
        "name": "podres-exporter-history", "key": "url"}}
    _history_env(plain[ds])
    for k, obj in plain.items():
        assert rendered[k] == obj, f"{k} differs between the chart and deploy/manifests"


@pytest.mark.parametrize("history", [{}, {"url": "sqlite:////data/h.db"}],
                         ids=["default-sqlite", "sqlite-url"])
def test_api_alone_refuses_to_render(history: dict[str, Any]) -> None:
    """api.enabled=true while every exporter keeps its own SQLite: the api would read an
    empty database. The chart says what to set instead of rendering it."""
    with pytest.raises(Exception) as caught:
        render({"api": {"enabled": True}, "history": history})
    text = str(caught.value)
    assert "api.enabled=true" in text
    assert "history.existingSecret=podres-exporter-history" in text


def test_api_with_a_postgresql_url_renders() -> None:
    objects = rendered_objects({"api": {"enabled": True}, "history": {
        "url": "postgresql+psycopg://podres@db.example:5432/podres"}})
    assert ("Deployment", "podres-exporter-api") in {
        (o["kind"], o["metadata"]["name"]) for o in objects}


def test_optional_objects_are_off_by_default() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in rendered_objects()}
    assert ("ClusterRole", "podres-exporter-legacy-proxy") not in kinds
    assert ("Deployment", "podres-exporter-api") not in kinds
    off = rendered_objects({"serviceMonitor": {"enabled": False},
                            "prometheusRule": {"enabled": False}})
    assert not [o for o in off if o["kind"] in CRD_KINDS]


def test_default_install_needs_no_prometheus_operator() -> None:
    """Defaults ("auto") on a cluster that does not serve monitoring.coreos.com/v1 (the
    SDK renders with no API beyond the built-in ones): no object of a CRD kind, which
    `helm install` would refuse; everything else as on a cluster with the operator."""
    bare = rendered_objects(operator=False)
    assert not [o for o in bare if o["kind"] in CRD_KINDS]
    assert by_key(bare) == {k: o for k, o in by_key(rendered_objects()).items()
                            if k[0] not in CRD_KINDS}
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert values["serviceMonitor"]["enabled"] == values["prometheusRule"]["enabled"] == "auto"
    template = (CHART / "templates" / "_helpers.tpl").read_text(encoding="utf-8")
    assert '.Capabilities.APIVersions.Has "monitoring.coreos.com/v1"' in template


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("variant", ["plain", "plain+optional"])
def test_plain_manifests_pass_kubernetes_validate_cli(variant: str) -> None:
    """The verified command line, as an operator would run it, on every file."""
    files = sorted(MANIFESTS.glob("*.yaml"))
    if variant == "plain+optional":
        files = sorted(OPTIONAL.glob("*.yaml"))
    exe = BIN / "kubernetes-validate"
    assert exe.exists(), "kubernetes-validate is a dev dependency"
    for version in KUBE_VERSIONS:
        proc = subprocess.run([str(exe), "--strict", "-k", version, *map(str, files)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "ERROR" not in proc.stdout
        # Only the CRD kinds may be skipped (no built-in schema).
        for line in proc.stdout.splitlines():
            if line.startswith("WARN"):
                assert any(kind in line for kind in CRD_KINDS), line


@pytest.mark.parametrize("values", [{}, ALL_OPTIONS], ids=["defaults", "all-options"])
def test_rendered_chart_passes_kubernetes_validate(values: dict[str, Any]) -> None:
    objects = rendered_objects(values)
    builtin = [o for o in objects if o["kind"] not in CRD_KINDS]
    assert {o["kind"] for o in builtin} >= {"DaemonSet", "ServiceAccount", "ClusterRole",
                                             "ClusterRoleBinding", "Service"}
    for obj in builtin:
        validate_builtin(obj)


def test_kubernetes_validate_catches_a_broken_object() -> None:
    ds = copy.deepcopy(one(plain_objects(), "DaemonSet"))
    ds["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pathh"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, KUBE_VERSIONS[0], strict=True)


@pytest.mark.parametrize("values", [{}, ALL_OPTIONS,
                                    {"history": {"existingSecret": "db", "storage":
                                                 {"type": "hostPath"}},
                                     "kubeletRoot": {"enabled": False},
                                     "kubelet": {"caFile": "", "insecureSkipVerify": True},
                                     "extraArgs": ["--no-collector.pods"],
                                     "priorityClassName": "system-node-critical",
                                     "podAnnotations": {"a": "b"}}],
                         ids=["defaults", "all-options", "variations"])
def test_helm_lint_strict_passes(values: dict[str, Any]) -> None:
    report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE,
                       kube_version="v1.37.0")
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


def test_helm_lint_and_render_reject_bad_values() -> None:
    report = helm.lint(str(CHART), {"legacyProxyAuthz": "yes"}, strict=True)
    assert report["errors"], "values.schema.json should reject a string for a boolean"
    with pytest.raises(helm.HelmError):
        render({"history": {"storage": {"type": "nfs"}}})


def test_rendered_variations_are_valid_and_wired() -> None:
    objects = rendered_objects({"history": {"existingSecret": "podres-db",
                                            "storage": {"type": "hostPath"}},
                                "kernel": {"enabled": False},
                                "kubelet": {"insecureSkipVerify": True}})
    ds = one(objects, "DaemonSet")
    validate_builtin(ds)
    container = ds["spec"]["template"]["spec"]["containers"][0]
    settings = _settings(container)
    assert "PODRES_KUBELET_ROOT_DIR" not in settings
    assert settings["PODRES_KUBELET_INSECURE_SKIP_VERIFY"] == "true"
    env = {e["name"]: e for e in container["env"]}
    assert env["PODRES_HISTORY_URL"]["valueFrom"]["secretKeyRef"] == {"name": "podres-db",
                                                                       "key": "url"}
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert "kubelet-root" not in volumes
    assert volumes["history"]["hostPath"]["type"] == "DirectoryOrCreate"
    # Kernel sources off: no host mount, and serve told so (not left reading its own /proc).
    assert "cgroup" not in volumes and "proc" not in volumes
    assert settings["PODRES_CGROUP_ROOT"] == settings["PODRES_PROC_ROOT"] == ""


def test_yamllint_on_plain_and_rendered_output(tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    for name, values in (("defaults", {}), ("all-options", ALL_OPTIONS)):
        for path, text in render(values).items():
            if path.endswith(".txt"):
                continue
            target = out / name / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    exe = BIN / "yamllint"
    assert exe.exists(), "yamllint is a dev dependency"
    proc = subprocess.run(
        [str(exe), "--strict", "-c", str(YAMLLINT_CONFIG), "-f", "parsable", str(out),
         str(MANIFESTS), str(CHART / "values.yaml"), str(CHART / "Chart.yaml"),
         *map(str, sorted(CRDS.glob("*.yaml")))],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("source", ["plain", "rendered"])
def test_crd_objects_validate_against_crd_schemas(source: str) -> None:
    objects = plain_objects() if source == "plain" else rendered_objects(
        {"serviceMonitor": {"labels": {"release": "kube-prometheus"}},
         "prometheusRule": {"labels": {"role": "alert-rules"}}})
    crd_objects = [o for o in objects if o["kind"] in CRD_KINDS]
    assert sorted(o["kind"] for o in crd_objects) == sorted(CRD_KINDS)
    for obj in crd_objects:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert crd_errors(obj) == [], key(obj)


def test_crd_schemas_reject_mistakes() -> None:
    sm = one(plain_objects(), "ServiceMonitor")
    bad = copy.deepcopy(sm)
    bad["spec"]["endpoints"][0]["scheme"] = "ftp"
    bad["spec"]["endpoints"][0]["intervall"] = "30s"
    del bad["spec"]["selector"]
    errors = crd_errors(bad)
    assert any("scheme" in e for e in errors), errors
    assert any("intervall" in e for e in errors), errors
    assert any("selector" in e for e in errors), errors
    pr = copy.deepcopy(one(plain_objects(), "PrometheusRule"))
    pr["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    pr["spec"]["groups"][0]["rules"][0]["expresion"] = "up"
    errors = crd_errors(pr)
    assert any("5 minutes" in e for e in errors), errors
    assert any("expresion" in e for e in errors), errors


def _npm_checker() -> Path | None:
    node = shutil.which("node")
    installed = (NPM_DIR / "node_modules" / "@kubernetes-models" / "prometheus-operator").is_dir()
    if node and installed:
        return Path(node)
    if os.environ.get("PODRES_REQUIRE_NPM_CHECKS") == "1":
        pytest.fail("node and `npm ci --prefix deploy/crds/npm` are required "
                    "(PODRES_REQUIRE_NPM_CHECKS=1)")
    pytest.skip("upstream CRD validators not installed: npm ci --prefix deploy/crds/npm")
    return None


def test_crd_objects_pass_upstream_generated_validators() -> None:
    node = _npm_checker()
    assert node is not None
    objects = [o for o in plain_objects() + rendered_objects(ALL_OPTIONS)
               if o["kind"] in CRD_KINDS]
    good = subprocess.run([str(node), str(NPM_DIR / "validate.mjs")],
                          input=json.dumps(objects), capture_output=True, text=True,
                          timeout=60, cwd=NPM_DIR)
    assert good.returncode == 0, good.stdout + good.stderr
    assert good.stdout.count("OK ") == len(objects)
    broken = copy.deepcopy(objects[0])
    if broken["kind"] == "ServiceMonitor":
        broken["spec"]["endpoints"][0]["scheme"] = "ftp"
    else:
        broken["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    bad = subprocess.run([str(node), str(NPM_DIR / "validate.mjs")],
                         input=json.dumps([broken]), capture_output=True, text=True,
                         timeout=60, cwd=NPM_DIR)
    assert bad.returncode == 1 and "FAIL" in bad.stdout


# --------------------------------------------------------------------------- security


def _daemonsets() -> list[tuple[str, dict[str, Any]]]:
    return [("plain", one(plain_objects(), "DaemonSet")),
            ("rendered", one(rendered_objects(), "DaemonSet"))]


@pytest.mark.parametrize("source,ds", _daemonsets(), ids=["plain", "rendered"])
def test_daemonset_security_posture(source: str, ds: dict[str, Any]) -> None:
    pod = ds["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["runAsUser"] == 0  # the PodResources socket is root-only
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in sc["capabilities"]
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}


@pytest.mark.parametrize("source,ds", _daemonsets(), ids=["plain", "rendered"])
def test_daemonset_mounts_the_pod_resources_directory(source: str, ds: dict[str, Any]) -> None:
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    host_paths = {v["hostPath"]["path"]: v for v in volumes.values() if "hostPath" in v}
    # The directory, never the socket file (a kubelet restart makes a new socket inode).
    assert not [p for p in host_paths if p.endswith(".sock")]
    pr = volumes["pod-resources"]["hostPath"]
    assert pr == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    assert mounts["pod-resources"]["mountPath"] == "/var/lib/kubelet/pod-resources"
    env = _settings(pod["containers"][0])
    assert env["PODRES_PODRESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    # /sys read-only; every host path mount is read-only.
    assert volumes["sys"]["hostPath"]["path"] == "/sys"
    for name, volume in volumes.items():
        if "hostPath" in volume:
            assert mounts[name].get("readOnly") is True, f"host path {name} must be read-only"
    assert env["PODRES_SYSFS"] == mounts["sys"]["mountPath"]
    # The kernel sources (docs/kernel.md): the cgroup filesystem read-only; /proc/stat from
    # the container's own procfs (the host's counters), the host's /proc not mounted.
    assert volumes["cgroup"]["hostPath"] == {"path": "/sys/fs/cgroup", "type": "Directory"}
    assert env["PODRES_CGROUP_ROOT"] == mounts["cgroup"]["mountPath"]
    assert "proc" not in volumes and env["PODRES_PROC_ROOT"] == "/proc"
    # The history store is writable (the root filesystem is not).
    assert "emptyDir" in volumes["history"]
    assert not mounts["history"].get("readOnly")
    assert env["PODRES_HISTORY_URL"] == "sqlite:////var/lib/podres-exporter/history.db"
    assert mounts["history"]["mountPath"] == "/var/lib/podres-exporter"


# What the default install may read on the host: the PodResources socket's directory and the
# read-only system trees the topology and kernel readings come from. Not the kubelet root:
# it holds every pod's Secret, projected and service-account-token volumes.
DEFAULT_HOST_PATHS = {"/var/lib/kubelet/pod-resources", "/sys", "/sys/fs/cgroup"}


@pytest.mark.parametrize("source,ds", _daemonsets(), ids=["plain", "rendered"])
def test_default_install_mounts_nothing_beyond_what_it_reads(source: str,
                                                              ds: dict[str, Any]) -> None:
    pod = ds["spec"]["template"]["spec"]
    host_paths = {v["name"]: v["hostPath"]["path"].rstrip("/") or "/"
                  for v in pod["volumes"] if "hostPath" in v}
    assert set(host_paths.values()) <= DEFAULT_HOST_PATHS, host_paths
    assert "/var/lib/kubelet/pod-resources" in host_paths.values()
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    for name in host_paths:
        assert mounts[name].get("readOnly") is True, f"host path {name} must be read-only"
    # Nothing else reaches the host either: every other volume is the pod's own.
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= {"hostPath", "emptyDir"}, volume
    assert "PODRES_KUBELET_ROOT_DIR" not in _settings(pod["containers"][0])
    assert not pod["containers"][0].get("args")


def json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` to the end of an array (``/-``): the only operation the deploy
    patches use; anything else fails the test rather than being misapplied."""
    obj = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add" and op["path"].endswith("/-"), op
        target: Any = obj
        for part in op["path"].split("/")[1:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        assert isinstance(target, list), op
        target.append(copy.deepcopy(op["value"]))
    return obj


def test_checkpoint_patch_is_the_charts_opt_in() -> None:
    """The plain manifests' opt-in (patches/checkpoints.yaml) yields the DaemonSet the chart
    renders with kubeletRoot.enabled=true, and wires the read-only mount to the flag."""
    (ops,) = load_docs(MANIFESTS / "patches" / "checkpoints.yaml")
    patched = json_patch(one(plain_objects(), "DaemonSet"), ops)
    validate_builtin(patched)
    rendered = one(rendered_objects({"kubeletRoot": {"enabled": True}}), "DaemonSet")
    assert normalize(rendered) == normalize(patched)
    pod = patched["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert volumes["kubelet-root"]["hostPath"]["path"] == "/var/lib/kubelet"
    assert mounts["kubelet-root"]["readOnly"] is True
    assert (_settings(pod["containers"][0])["PODRES_KUBELET_ROOT_DIR"]
            == mounts["kubelet-root"]["mountPath"])


def _startup_outlasts_the_migration(container: dict[str, Any]) -> None:
    """With history on, ``serve`` listens only once its schema migration is done, which may
    take up to the migration child's bound (a back-fill; docs/deploy.md#start-up). The
    startup probe waits that long and more before the kubelet gives up; liveness, which
    only starts after it, needs no initial delay of its own."""
    from exporter.history.child import child_migrator

    bound = inspect.signature(child_migrator).parameters["timeout"].default
    startup = container["startupProbe"]
    assert startup["httpGet"] == container["livenessProbe"]["httpGet"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert budget >= 1.25 * bound, (budget, bound)
    assert "initialDelaySeconds" not in container["livenessProbe"]


@pytest.mark.parametrize("source,ds", _daemonsets(), ids=["plain", "rendered"])
def test_daemonset_probes_ports_and_downward_api(source: str, ds: dict[str, Any]) -> None:
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    _startup_outlasts_the_migration(container)
    assert container["ports"] == [{"name": "metrics", "containerPort": 9847,
                                   "protocol": "TCP"}]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert env["PODRES_NODE_NAME"]["value"] == "$(NODE_NAME)"
    # $(HOST_IP) is expanded by the kubelet only if HOST_IP is defined earlier in env.
    names = [e["name"] for e in container["env"]]
    assert env["PODRES_KUBELET_URL"]["value"] == "https://$(HOST_IP):10250"
    assert names.index("HOST_IP") < names.index("PODRES_KUBELET_URL")
    assert names.index("NODE_NAME") < names.index("PODRES_NODE_NAME")
    assert env["PODRES_WEB_LISTEN_ADDRESS"]["value"] == ":9847"


def test_rbac_is_least_privilege() -> None:
    objects = plain_objects()
    role = one(objects, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""],
                              "resources": ["nodes/pods", "nodes/configz", "nodes/metrics"],
                              "verbs": ["get"]}]
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE,
                                    "namespace": NAMESPACE}]
    # nodes/proxy only in the optional file / behind legacyProxyAuthz.
    for obj in objects + rendered_objects():
        for rule in obj.get("rules", []):
            assert "nodes/proxy" not in rule["resources"]
    legacy = one(rendered_objects({"legacyProxyAuthz": True}), "ClusterRole",
                 "podres-exporter-legacy-proxy")
    assert legacy["rules"] == [{"apiGroups": [""], "resources": ["nodes/proxy"],
                                "verbs": ["get"]}]


def test_service_and_servicemonitor_select_the_daemonset() -> None:
    objects = plain_objects()
    ds = one(objects, "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    svc = one(objects, "Service")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9847, "targetPort": "metrics",
                                     "protocol": "TCP"}]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    sm = one(objects, "ServiceMonitor")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    # The series name workloads in namespace/pod/container: without honorLabels the
    # operator would overwrite them with the exporter pod's own and break cAdvisor joins.
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"]


def test_api_deployment_runs_unprivileged() -> None:
    dep = one(plain_objects(optional=True), "Deployment", "podres-exporter-api")
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert not [v for v in pod.get("volumes", []) if "hostPath" in v]
    (container,) = pod["containers"]
    assert container["command"] == ["podres-exporter", "api"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["PODRES_HISTORY_URL"]["valueFrom"]


def test_namespace_admits_host_path_pods() -> None:
    ns = one(plain_objects(), "Namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for obj in plain_objects(optional=True):
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, key(obj)


# --------------------------------------------------------------------------- CLI


def _command_parser(command: str) -> Any:
    cli = pytest.importorskip("exporter.cli")
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return parser, sub.choices[command]


def _env_flags(command: str) -> set[str]:
    from exporter.flags import env_name

    _, sub = _command_parser(command)
    return {env_name(opt) for action in sub._actions for opt in action.option_strings
            if opt.startswith("--")}


def _settings(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment variables that have a plain value."""
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _expand(arg: str) -> str:
    # What the kubelet does with $(VAR) references to the container's env.
    return arg.replace("$(HOST_IP)", "10.0.0.7").replace("$(NODE_NAME)", "worker-7")


@pytest.mark.parametrize("values", [{}, {"kubelet": {"insecureSkipVerify": True},
                                         "extraArgs": ["--no-collector.pods"]}],
                         ids=["defaults", "options"])
def test_daemonset_args_and_env_are_flags_of_serve(values: dict[str, Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The DaemonSet's settings parse with the real CLI, read from the environment as the
    container gets it, and every PODRES_* variable it sets belongs to a serve flag: a
    renamed flag breaks this test, not a rollout."""
    for ds in (one(plain_objects(), "DaemonSet"), one(rendered_objects(values), "DaemonSet")):
        (container,) = ds["spec"]["template"]["spec"]["containers"]
        with monkeypatch.context() as env:
            for name, value in _settings(container).items():
                env.setenv(name, _expand(value))
            parser, _ = _command_parser("serve")  # flags read their variables when added
            ns = parser.parse_args(["serve", *map(_expand, container.get("args", []))])
        options = vars(ns)
        assert options["podresources.socket"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
        assert options["kubelet.url"] == "https://10.0.0.7:10250"
        assert options["sysfs"] == "/host/sys"
        assert (options["cgroup.root"], options["proc.root"]) == \
            ("/host/sys/fs/cgroup", "/proc")
        flags = _env_flags("serve")
        for env in container["env"]:
            if env["name"].startswith("PODRES_"):
                assert env["name"] in flags, f"{env['name']} is not a serve flag"


def test_api_deployment_args_and_env_are_flags_of_api() -> None:
    api = pytest.importorskip("exporter.commands.api")
    if "not yet implemented" in api.HELP:  # the placeholder module; strict once it is real
        pytest.skip("podres-exporter api is still a placeholder")
    parser, _ = _command_parser("api")
    dep = one(plain_objects(optional=True), "Deployment", "podres-exporter-api")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["command"][0] == "podres-exporter"
    parser.parse_args([*container["command"][1:], *map(_expand, container["args"])])
    flags = _env_flags("api")
    for env in container["env"]:
        if env["name"].startswith("PODRES_"):
            assert env["name"] in flags, f"{env['name']} is not an api flag"


# --------------------------------------------------------------------------- image


def test_dockerfile_builds_the_cli_image() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    # Debian's python3.11, as deploy/image/build.sh (tests/deploy/test_image.py).
    assert any(line.startswith("FROM debian:bookworm-slim") for line in lines)
    entrypoint = [line for line in lines if line.startswith("ENTRYPOINT")]
    assert entrypoint and json.loads(entrypoint[-1][len("ENTRYPOINT"):]) == [
        "podres-exporter", "serve"]
    assert any("podres-install.sh" in line for line in lines)
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    for pattern in (".git", ".venv", "**/__pycache__", "node_modules"):
        assert any(p.rstrip("/") == pattern for p in ignore), pattern


# --------------------------------------------------------------------------- monitoring


# The runbook the plain manifests' exporters serve (their Service), which the rule sources
# carry and the chart's default replaces with its release's own Service.
PLAIN_RUNBOOK = "http://podres-exporter.podres-system.svc:9847/runbook"


def _relabelings(sm: dict[str, Any]) -> list[dict[str, Any]]:
    (endpoint,) = sm["spec"]["endpoints"]
    return list(endpoint["relabelings"])


@pytest.mark.parametrize("source", ["plain", "rendered"])
def test_servicemonitor_attaches_the_node_and_drops_the_exporter_pods_labels(
        source: str) -> None:
    objects = plain_objects() if source == "plain" else rendered_objects()
    sm = one(objects, "ServiceMonitor")
    relabelings = _relabelings(sm)
    assert {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "node"} in relabelings
    assert {"action": "replace", "targetLabel": "job",
            "replacement": "podres-exporter"} in relabelings
    [drop] = [r for r in relabelings if r["action"] == "labeldrop"]
    for label in ("namespace", "pod", "container"):
        assert re.fullmatch(drop["regex"], label), label
    for label in ("node", "job", "instance", "kind"):
        assert not re.fullmatch(drop["regex"], label), label
    # The job comes from the relabeling, not from a Service label that follows the chart.
    assert "jobLabel" not in sm["spec"]


def _rule_texts(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for g in one(objects, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]


def test_job_name_does_not_follow_name_override() -> None:
    objects = rendered_objects({"nameOverride": "cpu-ledger"})
    sm = one(objects, "ServiceMonitor", "podres-exporter-cpu-ledger")
    assert {"action": "replace", "targetLabel": "job",
            "replacement": "podres-exporter"} in _relabelings(sm)
    rules = one(objects, "PrometheusRule", "podres-exporter-cpu-ledger")["spec"]["groups"]
    # Only the runbook links follow the name: they point at this release's own Service.
    own = "http://podres-exporter-cpu-ledger.podres-system.svc:9847/runbook"
    assert rules == json.loads(json.dumps(rule_groups_from_sources()).replace(
        PLAIN_RUNBOOK, own))


def test_job_name_value_sets_the_servicemonitor_and_the_alerts_alike() -> None:
    objects = rendered_objects({"serviceMonitor": {"jobName": "podres"}})
    assert {"action": "replace", "targetLabel": "job",
            "replacement": "podres"} in _relabelings(one(objects, "ServiceMonitor"))
    exprs = [str(r["expr"]) for r in _rule_texts(objects)]
    assert sum('job="podres"' in e for e in exprs) == 2   # ExporterDown and ExporterAbsent
    assert not [e for e in exprs if "podres-exporter" in e]


def test_runbook_base_url_is_a_value() -> None:
    default = _rule_texts(rendered_objects())
    custom = _rule_texts(rendered_objects(
        {"prometheusRule": {"runbookBaseURL": "https://wiki.example.com/sre/podres/"}}))
    alerts = [r for r in default if "alert" in r]
    assert len(alerts) >= 10
    for rule in alerts:
        anchor = "#" + str(rule["alert"]).lower()
        assert rule["annotations"]["runbook_url"] == PLAIN_RUNBOOK + anchor
    for rule in (r for r in custom if "alert" in r):
        assert rule["annotations"]["runbook_url"] == (
            "https://wiki.example.com/sre/podres" + "#" + str(rule["alert"]).lower())
    with pytest.raises(helm.HelmError):
        render({"prometheusRule": {"runbookBaseURL": "docs/runbook.md"}})


def _objects_of(name: str, namespace: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.Chart.load(str(CHART))
    texts = chart.render(with_operator(values), name=name, namespace=namespace,
                         is_install=True)
    return [doc for path, text in sorted(texts.items()) if not path.endswith(".txt")
            for doc in yaml.safe_load_all(text) if doc]


def _alert_urls(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    [rule] = [o for o in objects if o["kind"] == "PrometheusRule"]
    return [(str(r["alert"]), str(r["annotations"]["runbook_url"]))
            for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


INSTALLS = {
    "plain": None,
    "chart-default": (RELEASE, NAMESPACE, {}),
    "chart-renamed": ("ledger", "monitoring", {"nameOverride": "cpus", "port": 9100}),
}


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_default_runbook_links_point_at_the_exporter_service(install: str) -> None:
    """Every alert's runbook URL is ``<scheme>://<Service>.<namespace>.svc:<port>/runbook``
    of the Service that selects the exporter pods, with the ServiceMonitor's scheme."""
    from urllib.parse import urlsplit

    spec = INSTALLS[install]
    objects = plain_objects() if spec is None else _objects_of(*spec)
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    services = {f"{s['metadata']['name']}.{s['metadata']['namespace']}.svc": s
                for s in objects if s["kind"] == "Service"
                and s["spec"]["selector"].items() <= pod_labels.items()}
    [sm] = [o for o in objects if o["kind"] == "ServiceMonitor"]
    alerts = _alert_urls(objects)
    assert len(alerts) >= 10
    for alert, url in alerts:
        parts = urlsplit(url)
        assert parts.hostname in services, (alert, url, sorted(services))
        service = services[parts.hostname]
        assert parts.port == service["spec"]["ports"][0]["port"], (alert, url)
        container_port = ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]
        assert parts.port == container_port["containerPort"]  # headless: the pod's port
        assert parts.scheme == sm["spec"]["endpoints"][0]["scheme"], (alert, url)
        assert (parts.path, parts.fragment) == ("/runbook", alert.lower()), (alert, url)
    if install == "chart-renamed":
        assert alerts[0][1].startswith("http://ledger-cpus.monitoring.svc:9100/runbook#")


def _build_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("podres_deploy_build", DEPLOY / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("wrong", [
    "https://wiki.example.com/podres#podresexporterdown",             # not the exporters
    "http://podres-exporter.podres-system.svc:9100/runbook#podresexporterdown",  # port
    "http://podres-exporter.podres-system.svc:9847/runbook#podresexporterabsent",  # anchor
    None,                                                              # missing
])
def test_build_refuses_rule_sources_whose_runbook_url_is_not_the_services(
        tmp_path: Path, wrong: str | None) -> None:
    build = _build_module()
    rules = tmp_path / "rules"
    rules.mkdir()
    for source in sorted((ROOT / "dashboards" / "prometheus").glob("*.rules.yml")):
        text = source.read_text(encoding="utf-8")
        if source.name == "alerts.rules.yml":
            line = f'runbook_url: "{PLAIN_RUNBOOK}#podresexporterdown"'
            assert line in text
            text = text.replace(line, "" if wrong is None else f'runbook_url: "{wrong}"')
        (rules / source.name).write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit, match="PodresExporterDown: runbook_url"):
        build.expected_outputs(rules)
    assert build.runbook_base() == PLAIN_RUNBOOK


def test_no_placeholder_host_is_left() -> None:
    """No link to the reserved ``example.invalid`` domain in anything shipped or documented:
    it never resolves."""
    found = []
    for top in ("deploy", "dashboards", "docs", "exporter", "README.md"):
        root = ROOT / top
        for path in [root] if root.is_file() else sorted(root.rglob("*")):
            if not path.is_file() or "node_modules" in path.parts:
                continue
            text = path.read_bytes()
            if b"example.invalid" in text:
                found.append(str(path.relative_to(ROOT)))
    assert not found




def test_helm_rule_copies_pass_promtool(tmp_path: Path) -> None:
    """``promtool check rules`` and the scripted alert scenarios, run on the chart's copies
    and on the groups the chart renders (default values)."""
    tool = promtool()
    copies = sorted((CHART / "files" / "rules").glob("*.rules.yml"))
    assert [p.name for p in copies] == ["alerts.rules.yml", "recording.rules.yml"]
    rendered = tmp_path / "rendered.rules.yml"
    rendered.write_text(yaml.safe_dump(
        {"groups": one(rendered_objects(), "PrometheusRule")["spec"]["groups"]}))
    check = subprocess.run([tool, "check", "rules", *map(str, copies), str(rendered)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    tests_dir = ROOT / "dashboards" / "prometheus" / "tests"
    for rule_files in ([str(p) for p in copies], [str(rendered)]):
        for test in sorted(tests_dir.glob("*_test.yml")):
            doc = yaml.safe_load(test.read_text(encoding="utf-8"))
            wanted = {Path(f).name for f in doc["rule_files"]}
            doc["rule_files"] = [f for f in rule_files
                                 if Path(f).name in wanted or Path(f) == rendered]
            copy_path = tmp_path / f"{len(rule_files)}-{test.name}"
            copy_path.write_text(yaml.safe_dump(doc, sort_keys=False))
            result = subprocess.run([tool, "test", "rules", str(copy_path)],
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- dashboards

DASHBOARDS = sorted((ROOT / "dashboards" / "grafana").glob("*.json"))
# kubectl's client-side apply keeps the object in an annotation of at most 256 KiB.
LAST_APPLIED_LIMIT = 262144


def _dashboard_maps(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects
            if o["kind"] == "ConfigMap" and "-dashboard-" in o["metadata"]["name"]}


@pytest.mark.parametrize("source", ["plain", "rendered"])
def test_dashboards_ship_as_configmaps_the_grafana_sidecar_loads(source: str) -> None:
    """One ConfigMap per dashboard, labelled grafana_dashboard: "1" (kube-prometheus-stack's
    sidecar default), holding the dashboard's JSON unchanged under a prefixed file name."""
    objects = plain_objects() if source == "plain" else rendered_objects()
    maps = _dashboard_maps(objects)
    assert sorted(maps) == [f"{RELEASE}-dashboard-{p.stem}" for p in DASHBOARDS]
    for path in DASHBOARDS:
        cm = maps[f"{RELEASE}-dashboard-{path.stem}"]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == NAMESPACE
        [(name, text)] = cm["data"].items()
        assert name == f"podres-exporter-{path.stem}.json"
        assert json.loads(text) == json.loads(path.read_text(encoding="utf-8"))
        assert len(json.dumps(cm)) < LAST_APPLIED_LIMIT


def test_dashboard_configmaps_follow_the_sidecar_values() -> None:
    values = {"grafanaDashboards": {"label": "example.com/dashboard", "labelValue": "podres",
                                    "namespace": "monitoring",
                                    "annotations": {"grafana_folder": "podres-exporter"}}}
    maps = _dashboard_maps(rendered_objects(values))
    assert len(maps) == len(DASHBOARDS)
    for cm in maps.values():
        meta = cm["metadata"]
        assert meta["namespace"] == "monitoring"
        assert meta["labels"]["example.com/dashboard"] == "podres"
        assert "grafana_dashboard" not in meta["labels"]
        assert meta["annotations"] == {"grafana_folder": "podres-exporter"}
    assert _dashboard_maps(rendered_objects({"grafanaDashboards": {"enabled": False}})) == {}
    with pytest.raises(Exception, match=r"labelValue|pattern|schema"):
        render({"grafanaDashboards": {"labelValue": "not a label value"}})
