"""What two panels list, judged by the real promtool on synthetic series (``promtool test
rules``, ``promql_expr_test``): expressions taken from the committed dashboards, so a panel
that drifts back fails here.

- *Stranded cores* lists a container that left its exclusive CPUs idle (by its own CPU
  time) for the whole hour, and not one younger than an hour (a ``rate(...[1h])`` divided
  its use by the whole hour, so every young pod looked idle), nor one busy in any short
  window of the hour.
- *Exporters down* with ``$job`` = All lists this exporter's down targets and a failing
  PodResources source, not another job's down targets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dash_helpers import dashboard_queries, prom_substitute, promtool, run

# One sample a minute for two hours; the panels are read at the end.
EVAL = "120m"
NODE = {"node": "n1", "namespace": "ns"}


def _labels(**extra: str) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in {**NODE, **extra}.items()) + "}"


def _pod(name: str, busy_per_minute: int, start_minute: int = 0) -> list[dict[str, str]]:
    """A pod whose container ``app`` holds 2 exclusive CPUs from ``start_minute`` and uses
    ``busy_per_minute`` CPU-seconds of its own a minute (a fraction of busy_per_minute /
    120); its CPUs' busy time says the same, for the former pod-level query."""
    gap = f"_x{start_minute} " if start_minute else ""
    minutes = 120 - start_minute
    pool = {"pool": "pod_exclusive"}
    app = {"container": "app"}
    return [
        {"series": "podres_container_cpu_usage_seconds_total" + _labels(pod=name, **app),
         "values": f"{gap}0+{busy_per_minute}x{minutes}"},
        {"series": "podres_container_cpus" + _labels(pod=name, **app,
                                                      assignment="pod_exclusive"),
         "values": f"{gap}2x{minutes}"},
        {"series": "podres_pod_cpu_busy_seconds_total" + _labels(pod=name, **pool),
         "values": f"{gap}0+{busy_per_minute}x{minutes}"},
        {"series": "podres_pod_cpus" + _labels(pod=name, **pool), "values": f"{gap}2x{minutes}"},
    ]


def _expr(dashboard: str, panel: str) -> str:
    [q] = [q for q in dashboard_queries(dashboard) if q.panel == panel]
    # $__rate_interval of a 1-minute scrape (four scrapes), $__range the panel's hour.
    expr = prom_substitute(q.text, interval="4m", values={"node": NODE["node"]})
    return expr.replace("[4m]))\n  or", "[1h]))\n  or")


def _promtool_test(tmp_path: Path, series: list[dict[str, str]], expr: str,
                   expected: list[dict[str, Any]]) -> tuple[bool, str]:
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": expr, "eval_time": EVAL, "exp_samples": expected}]}]}
    path = tmp_path / "panel.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run([promtool(), "test", "rules", path.name], cwd=tmp_path)
    return result.returncode == 0, result.stdout + result.stderr


STRANDED_SERIES = [
    *_pod("idle", 3),              # 2.5 % busy for two hours: stranded
    *_pod("busy", 96),             # 80 % busy
    *_pod("young", 30, 100),       # 25 % busy for the last 20 minutes only
    *_pod("young-idle", 1, 100),   # idle, but not held for an hour yet: not judged
]


@pytest.mark.parametrize("dashboard", ["node.json", "fleet.json"])
def test_stranded_cores_lists_only_pods_idle_for_the_hour(tmp_path: Path,
                                                         dashboard: str) -> None:
    expected = [{"labels": _labels(pod="idle", container="app"), "value": 3 / 120}]
    ok, out = _promtool_test(tmp_path, STRANDED_SERIES, _expr(dashboard, "Stranded cores"),
                             expected)
    assert ok, out


def test_the_old_stranded_query_listed_young_pods(tmp_path: Path) -> None:
    """The harness can fail: the former ``rate(...[1h])`` form lists the young pod."""
    old = ('sum by (cluster, node, namespace, pod, pool) (rate('
           'podres_pod_cpu_busy_seconds_total{pool=~"pod_exclusive|node_exclusive"}[1h]))\n'
           "/ on (cluster, node, namespace, pod, pool)\n"
           "(sum by (cluster, node, namespace, pod, pool) (podres_pod_cpus"
           '{pool=~"pod_exclusive|node_exclusive"}) > 0)\n< 0.1')
    expected = [{"labels": _labels(pod="idle", pool="pod_exclusive"), "value": 3 / 120}]
    ok, out = _promtool_test(tmp_path, STRANDED_SERIES, old, expected)
    assert not ok and 'pod="young"' in out, out


def test_exporters_down_lists_only_this_exporters_jobs(tmp_path: Path) -> None:
    def target(job: str, node: str, up: int) -> dict[str, str]:
        return {"series": f'up{{job="{job}", node="{node}", instance="{node}:1"}}',
                "values": f"{up}x120"}
    series = [
        target("podres-exporter", "n1", 1), target("podres-exporter", "n2", 0),
        target("podres-exporter", "n3", 1),
        {"series": 'podres_up{job="podres-exporter", node="n1", instance="n1:1"}',
         "values": "1x120"},
        {"series": 'podres_up{job="podres-exporter", node="n3", instance="n3:1"}',
         "values": "0x120"},
        # Another job of the same Prometheus, down: not this exporter's.
        target("node-exporter", "n1", 0), target("kubelet", "n2", 0),
    ]
    expected = [
        {"labels": '{__name__="up", node="n2", instance="n2:1"}', "value": 0},
        {"labels": '{__name__="podres_up", node="n3", instance="n3:1"}', "value": 0},
    ]
    ok, out = _promtool_test(tmp_path, series, _expr("fleet.json", "Exporters down"),
                             expected)
    assert ok, out
