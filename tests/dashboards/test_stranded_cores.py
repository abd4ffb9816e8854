"""The "Stranded cores" panels judge an exclusive container by its own CPU time (its cgroup's,
docs/kernel.md), not by the busy time of its CPUs: an idle exclusive container whose core a
neighbour's process runs on is stranded, and is shown. Evaluated by promtool over series as
the exporter publishes them."""

from __future__ import annotations

from pathlib import Path

import yaml
from dash_helpers import dashboard_queries, prom_substitute, promtool, run

LABELS = 'cluster="a", node="n1", job="podres-exporter", namespace="shop"'


def stranded_expr(dashboard: str) -> str:
    [query] = [q for q in dashboard_queries(dashboard) if q.panel == "Stranded cores"]
    return prom_substitute(query.text, values={"cluster": "a", "node": "n1", "job": ".*"})


def test_stranded_by_own_usage_not_by_busy_cpus(tmp_path: Path) -> None:
    series = [
        # idle: 2 exclusive CPUs, uses 0.05 CPU-s/s of them (2.5 %), while a neighbour's
        # process keeps those CPUs 100 % busy: stranded.
        (f'podres_container_cpus{{{LABELS}, pod="idle", container="app", '
         'assignment="pod_exclusive"}', "2x60"),
        (f'podres_container_cpu_usage_seconds_total{{{LABELS}, pod="idle", container="app"}}',
         "0+3x60"),
        (f'podres_pod_cpu_busy_seconds_total{{{LABELS}, pod="idle", pool="pod_exclusive"}}',
         "0+120x60"),
        # busy: 2 exclusive CPUs, uses 1.5 of them (75 %): not stranded.
        (f'podres_container_cpus{{{LABELS}, pod="busy", container="app", '
         'assignment="node_exclusive"}', "2x60"),
        (f'podres_container_cpu_usage_seconds_total{{{LABELS}, pod="busy", container="app"}}',
         "0+90x60"),
        # shared: idle too, but holds no exclusive CPU: never stranded.
        (f'podres_container_cpus{{{LABELS}, pod="busy", container="proxy", '
         'assignment="pod_shared"}', "1x60"),
        (f'podres_container_cpu_usage_seconds_total{{{LABELS}, pod="busy", '
         'container="proxy"}', "0x60"),
    ]
    for dashboard in ("node.json", "fleet.json"):
        rules = {"groups": [{"name": "t", "rules": [
            {"record": "stranded", "expr": stranded_expr(dashboard)}]}]}
        (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
        test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "promql_expr_test": [{"expr": "stranded", "eval_time": "60m", "exp_samples": [{
                "labels": 'stranded{cluster="a", node="n1", namespace="shop", '
                          'pod="idle", container="app"}',
                "value": 0.025}]}]}]}
        (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
        result = run([promtool(), "test", "rules", str(tmp_path / "test.yml")])
        assert result.returncode == 0, (dashboard, result.stdout, result.stderr)
