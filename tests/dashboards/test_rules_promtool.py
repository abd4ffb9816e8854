"""Prometheus rules and the dashboards' PromQL, checked by the real promtool (Prometheus 2.42
from Debian): every expression parses, the rule files pass ``check rules`` and their unit
tests pass ``test rules``; every alert has its annotations and a runbook section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from dash_helpers import (
    PROMETHEUS_DIR,
    REPO,
    RULE_FILES,
    all_promql,
    prom_substitute,
    promtool,
    run,
)

RUNBOOK = REPO / "docs" / "runbook.md"
# The runbook the plain manifests' exporters serve at /runbook (docs/deploy.md#runbook-links);
# the Helm chart swaps this base for its release's own Service or prometheusRule.runbookBaseURL.
RUNBOOK_BASE = "http://podres-exporter.podres-system.svc:9847/runbook"
TEST_FILES = sorted((PROMETHEUS_DIR / "tests").glob("*.yml"))


def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    """Each expression (``$var`` → ``.*``, ``$__rate_interval`` → ``5m``) as a recording rule
    of its own group, so that promtool's error names the panel."""
    tool = promtool()
    queries = all_promql()
    assert len(queries) > 40
    groups = []
    for i, q in enumerate(queries):
        groups.append({"name": f"{i:03d} {q.where}",
                       "rules": [{"record": f"podres_dashboard_check_{i}",
                                  "expr": prom_substitute(q.text)}]})
    path = tmp_path / "dashboard-expressions.rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    result = run([tool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_expression_check_catches_errors(tmp_path: Path) -> None:
    """The harness above really fails on a broken expression."""
    tool = promtool()
    path = tmp_path / "bad.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [
        {"record": "x", "expr": prom_substitute('sum by (pool) (podres_cpus{job=~"$job"}')}]}]}))
    assert run([tool, "check", "rules", str(path)]).returncode != 0


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_check_rules(path: Path) -> None:
    result = run([promtool(), "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_rule_unit_tests(path: Path) -> None:
    result = run([promtool(), "test", "rules", path.name], cwd=path.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _rules(kind: str) -> list[dict[str, object]]:
    out = []
    for path in RULE_FILES:
        for g in yaml.safe_load(path.read_text())["groups"]:
            out += [r for r in g["rules"] if kind in r]
    return out


def _unit_tests() -> list[dict[str, object]]:
    tests = []
    for path in TEST_FILES:
        tests += yaml.safe_load(path.read_text())["tests"]
    return tests


def test_every_alert_has_a_firing_and_a_non_firing_case() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for t in _unit_tests():
        for case in t.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    alerts = {r["alert"] for r in _rules("alert")}
    assert alerts - firing == set(), "alerts without a firing case"
    assert alerts - silent == set(), "alerts without a non-firing case"


def test_every_recording_rule_has_a_value_test() -> None:
    tested = set()
    for t in _unit_tests():
        for case in t.get("promql_expr_test", []):
            if case.get("exp_samples"):
                tested.add(case["expr"].strip())
    records = {r["record"] for r in _rules("record")}
    assert records - tested == set()


def _anchor(heading: str) -> str:
    """GitHub's heading anchor."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_alert_is_documented() -> None:
    anchors = {_anchor(h) for h in re.findall(r"^#{1,6}\s+(.+)$", RUNBOOK.read_text(), re.M)}
    for rule in _rules("alert"):
        ann = rule["annotations"]
        assert isinstance(ann, dict)
        assert ann.get("summary") and ann.get("description"), rule["alert"]
        url = str(ann["runbook_url"])
        # Absolute: Alertmanager, pagers and chat have no repository to resolve a path in.
        assert url.startswith(RUNBOOK_BASE + "#"), url
        assert url == f"{RUNBOOK_BASE}#{rule['alert'].lower()}", url
        assert url.split("#", 1)[1] in anchors, f"{rule['alert']}: no section {url}"
        assert str(rule["labels"]["severity"]), rule["alert"]  # type: ignore[index]
        # Alerts name the node by the node label, never by the exporter pod's address.
        if "absent(" not in str(rule["expr"]):
            assert "$labels.node" in str(ann["summary"]), rule["alert"]
        assert "$labels.instance }}" not in str(ann["summary"]), rule["alert"]
