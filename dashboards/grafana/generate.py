#!/usr/bin/env python3
"""Generates the Grafana dashboards node.json, fleet.json and history.json with Grafana's own
typed builder, grafana-foundation-sdk (a dev dependency in pyproject.toml).

    python dashboards/grafana/generate.py            # rewrite the JSON files
    python dashboards/grafana/generate.py --check    # exit 1 if a committed file differs

The JSON files are what Grafana imports. The SDK's builders make the dashboard, rows, panels,
Prometheus queries, variables, links, thresholds, colours, overrides and transformations, and
its encoder writes the JSON; this script keeps panel ids, grid positions and data source
references consistent. The PostgreSQL queries, which the SDK has no type for, are written
as Grafana names them (``SQLQuery``). tests/dashboards checks that the committed files are
its output, validate against schema/dashboard.schema.json, and that every expression parses
(promtool) and every SQL query runs (SQLite and PostgreSQL).

Conventions: data sources only through the ``${datasource}`` variable (no UIDs); a node is
the ``node`` target label the scrape configuration attaches (the Kubernetes node name, also
the history store's node name), never ``instance``; variables with "All" or several values
are matched with ``=~`` (Grafana regex-escapes their values), single-value variables with
``=`` (Grafana inserts them unescaped: an exact match is safe for any value); every join
and aggregation keeps ``cluster``; cAdvisor series are the kubelet's own (job "kubelet",
metrics_path "/metrics/cadvisor"); Prometheus 2.42 PromQL.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, common, prometheus
from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.builders import stat as stat_sdk
from grafana_foundation_sdk.builders import table as table_sdk
from grafana_foundation_sdk.builders import timeseries as timeseries_sdk
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prometheus_model

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
TAGS = ["podres", "kubernetes", "cpu"]

PROM = {"type": "prometheus", "uid": "${datasource}"}
PG = {"type": "grafana-postgresql-datasource", "uid": "${datasource}"}

ASSIGNMENT_COLORS = {
    "node_exclusive": "purple",
    "pod_exclusive": "blue",
    "pod_shared": "green",
    "node_shared": "text",
    "pod_idle": "yellow",
    "reserved": "orange",
}


class Layout:
    """Panels laid out left to right on Grafana's 24-column grid, rows stacked: each
    builder gets its id and grid position here, so the dashboard builder keeps them."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []  # ("row" | "panel", builder)
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def row(self, title: str) -> None:
        self.newline()
        row = sdk.Row(title).id(self._id()).collapsed(False).grid_pos(
            model.GridPos(h=1, w=24, x=0, y=self.y))
        self.items.append(("row", row))
        self.y += 1

    def newline(self) -> None:
        if self.x:
            self.y += self.row_h
        self.x = 0
        self.row_h = 0

    def add(self, panel: Any, w: int, h: int) -> None:
        if self.x + w > 24:
            self.newline()
        panel.id(self._id()).grid_pos(model.GridPos(h=h, w=w, x=self.x, y=self.y))
        self.items.append(("panel", panel))
        self.x += w
        self.row_h = max(self.row_h, h)


# Containers holding exclusive CPUs that used under 10 % of them for the whole last hour, by
# their own CPU time (their cgroup's, docs/kernel.md): not the busy time of those CPUs, which
# a neighbour running there would fill and hide the stranded core. The fraction is a short
# rate (one $__rate_interval), its worst case over the hour a subquery; the container must
# have held the CPUs an hour ago too: a plain rate(...[1h]) divides what a container younger
# than an hour used by the whole hour, so every young one looked idle (docs/dashboards.md).
# Needs the cgroup source.
_STRANDED_BY = "cluster, node, namespace, pod, container"
_STRANDED_SEL = '{{{sel}, assignment=~"pod_exclusive|node_exclusive"}}'
STRANDED = (
    "max_over_time((\n"
    f"  sum by ({_STRANDED_BY}) (rate(podres_container_cpu_usage_seconds_total{{{{{{sel}}}}}}"
    "[$__rate_interval]))\n"
    f"  / on ({_STRANDED_BY})\n"
    f"  (sum by ({_STRANDED_BY}) (podres_container_cpus{_STRANDED_SEL}) > 0)\n"
    ")[1h:1m]) < 0.1\n"
    f"and on ({_STRANDED_BY})\n"
    f"sum by ({_STRANDED_BY}) (podres_container_cpus{_STRANDED_SEL} offset 1h)")


def _ref(datasource: dict[str, str]) -> model.DataSourceRef:
    return model.DataSourceRef(type_val=datasource["type"], uid=datasource["uid"])


def prom_target(expr: str, ref: str = "A", legend: str = "", *, instant: bool = False,
                table: bool = False) -> prometheus.Dataquery:
    t = (prometheus.Dataquery().datasource(_ref(PROM)).ref_id(ref).expr(expr)
         .editor_mode(prometheus_model.QueryEditorMode.CODE))
    t = t.instant() if instant else t.range()
    if legend:
        t.legend_format(legend)
    if table:
        t.format(prometheus_model.PromQueryFormat.TABLE)
    return t


class _RawQuery(variants.Dataquery):
    """A query of a data source the SDK has no types for (Grafana's PostgreSQL)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def to_json(self) -> dict[str, Any]:
        return self.body


class SQLQuery(cogbuilder.Builder[variants.Dataquery]):
    def __init__(self, body: dict[str, Any]) -> None:
        self._internal = _RawQuery(body)

    def build(self) -> variants.Dataquery:
        return self._internal


def sql_target(sql: str, ref: str = "A", *, fmt: str = "table") -> SQLQuery:
    return SQLQuery({"datasource": PG, "refId": ref, "format": fmt, "rawQuery": True,
                     "editorMode": "code", "rawSql": sql})


def _thresholds(steps: list[dict[str, Any]]) -> sdk.ThresholdsConfig:
    return sdk.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(
        [model.Threshold(value=s["value"], color=s["color"]) for s in steps])


def _color(spec: dict[str, Any]) -> sdk.FieldColor:
    color = sdk.FieldColor().mode(model.FieldColorModeId(spec["mode"]))
    return color.fixed_color(spec["fixedColor"]) if "fixedColor" in spec else color


# Field defaults written as Grafana names them, each set through its typed builder method.
_DEFAULTS = {
    "unit": lambda b, v: b.unit(v), "min": lambda b, v: b.min(v),
    "max": lambda b, v: b.max(v), "decimals": lambda b, v: b.decimals(v),
    "noValue": lambda b, v: b.no_value(v), "displayName": lambda b, v: b.display_name(v),
    "mappings": lambda b, v: b.mappings(v), "custom": lambda b, v: b.custom(v),
    "thresholds": lambda b, v: b.thresholds(_thresholds(v["steps"])),
    "color": lambda b, v: b.color_scheme(_color(v)),
}


def _panel(p: Any, title: str, targets: list[Any], *, description: str = "",
           unit: str | None = None, defaults: dict[str, Any] | None = None,
           overrides: list[dict[str, Any]] | None = None,
           transformations: list[dict[str, Any]] | None = None,
           datasource: dict[str, str] = PROM) -> Any:
    """What every panel builder takes: title, data source, queries, field defaults,
    overrides, transformations."""
    p.title(title).datasource(_ref(datasource)).targets(targets)
    for key, value in {**(defaults or {}), **({"unit": unit} if unit else {})}.items():
        _DEFAULTS[key](p, value)
    for o in overrides or []:
        p.with_override(model.MatcherConfig(id_val=o["matcher"]["id"],
                                            options=o["matcher"]["options"]),
                        [model.DynamicConfigValue(id_val=v["id"], value=v["value"])
                         for v in o["properties"]])
    if description:
        p.description(description)
    if transformations:
        p.transformations([model.DataTransformerConfig(id_val=t["id"], options=t["options"])
                           for t in transformations])
    return p


def panel(kind: str, title: str, targets: list[Any], *, options: dict[str, Any] | None = None,
          **kwargs: Any) -> sdk.Panel:
    """A panel of a visualisation written with Grafana's own option names (the
    state timelines, whose options mix several of the SDK's types)."""
    return _panel(sdk.Panel().type(kind).options(options or {}), title, targets, **kwargs)


def _last_value() -> common.ReduceDataOptions:
    return common.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


def counts_bargauge(title: str, targets: list[Any], *, description: str = ""
                    ) -> bargauge.Panel:
    """Whole counts as horizontal bars (CPUs per pool, nodes per setting)."""
    p = (bargauge.Panel().orientation(common_model.VizOrientation.HORIZONTAL)
         .display_mode(common_model.BarGaugeDisplayMode.BASIC).show_unfilled(True)
         .value_mode(common_model.BarGaugeValueMode.COLOR).reduce_options(_last_value()))
    return _panel(p, title, targets, description=description,
                  defaults={"min": 0, "decimals": 0,
                            "color": {"mode": "fixed", "fixedColor": "blue"}})


def stat(title: str, expr: str, *, unit: str | None = None, description: str = "",
         thresholds: list[tuple[float | None, str]] | None = None,
         mappings: list[dict[str, Any]] | None = None,
         no_value: str | None = None) -> stat_sdk.Panel:
    defaults: dict[str, Any] = {}
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": [
            {"value": v, "color": c} for v, c in thresholds]}
        defaults["color"] = {"mode": "thresholds"}
    if mappings:
        defaults["mappings"] = mappings
    if no_value:
        defaults["noValue"] = no_value
    p = (stat_sdk.Panel().reduce_options(_last_value())
         .color_mode(common_model.BigValueColorMode.VALUE)
         .graph_mode(common_model.BigValueGraphMode.NONE)
         .text_mode(common_model.BigValueTextMode.AUTO))
    return _panel(p, title, [prom_target(expr, instant=True)], unit=unit,
                  description=description, defaults=defaults)


def timeseries(title: str, targets: list[Any], *, unit: str | None = None,
               description: str = "", stack: bool = False, min0: bool = True,
               overrides: list[dict[str, Any]] | None = None,
               datasource: dict[str, str] = PROM,
               threshold: float | None = None) -> timeseries_sdk.Panel:
    """``threshold``: drawn as a red line (the value an alert fires above)."""
    p = (timeseries_sdk.Panel().draw_style(common_model.GraphDrawStyle.LINE).line_width(1)
         .fill_opacity(60 if stack else 10).show_points(common_model.VisibilityMode.NEVER)
         .span_nulls(False)
         .legend(common.VizLegendOptions().display_mode(common_model.LegendDisplayMode.TABLE)
                 .placement(common_model.LegendPlacement.RIGHT).show_legend(True)
                 .calcs(["lastNotNull"]))
         .tooltip(common.VizTooltipOptions().mode(common_model.TooltipDisplayMode.MULTI)
                  .sort(common_model.SortOrder.DESCENDING)))
    if stack:
        p.stacking(common.StackingConfig().mode(common_model.StackingMode.NORMAL).group("A"))
    defaults: dict[str, Any] = {}
    if threshold is not None:
        p.thresholds_style(common.GraphThresholdsStyleConfig()
                           .mode(common_model.GraphThresholdsStyleMode.LINE))
        defaults["thresholds"] = {"mode": "absolute", "steps": [
            {"value": None, "color": "green"}, {"value": threshold, "color": "red"}]}
    if min0:
        defaults["min"] = 0
    return _panel(p, title, targets, unit=unit, description=description, defaults=defaults,
                  overrides=overrides, datasource=datasource)


def table(title: str, targets: list[Any], *, description: str = "",
          transformations: list[dict[str, Any]] | None = None,
          overrides: list[dict[str, Any]] | None = None, unit: str | None = None,
          datasource: dict[str, str] = PROM) -> table_sdk.Panel:
    p = (table_sdk.Panel().show_header(True).cell_height(common_model.TableCellHeight.SM)
         .footer(common.TableFooterOptions().show(False).reducer(["sum"]).fields([])))
    return _panel(p, title, targets, description=description, unit=unit,
                  transformations=transformations, overrides=overrides, datasource=datasource)


def color_overrides(field_names: dict[str, str]) -> list[dict[str, Any]]:
    """Fixed colours for series named after a pool / assignment."""
    out = []
    for name, color in field_names.items():
        out.append({"matcher": {"id": "byName", "options": name},
                    "properties": [{"id": "color",
                                    "value": {"mode": "fixed", "fixedColor": color}}]})
    return out


# The node dashboard for the row's node and cluster, over the same time range.
NODE_LINK = ("/d/podres-node/podres-exporter-node?var-cluster=${__data.fields.cluster}"
             "&var-node=${__data.fields.node}&${__url_time_range}")


def node_link_override() -> dict[str, Any]:
    """Makes a table's ``node`` column link to the node dashboard."""
    return {"matcher": {"id": "byName", "options": "node"},
            "properties": [{"id": "links", "value": [
                {"title": "Node dashboard of ${__data.fields.node}", "url": NODE_LINK}]}]}


def organize(exclude: list[str], rename: dict[str, str] | None = None,
             order: list[str] | None = None) -> dict[str, Any]:
    opts: dict[str, Any] = {"excludeByName": {k: True for k in exclude},
                            "renameByName": rename or {}}
    if order:
        opts["indexByName"] = {k: i for i, k in enumerate(order)}
    return {"id": "organize", "options": opts}


def datasource_var(plugin: str) -> sdk.DatasourceVariable:
    return (sdk.DatasourceVariable("datasource").label("Data source").type(plugin)
            .regex(""))


def prom_query_var(name: str, label: str, query: str, *, include_all: bool = False,
                   multi: bool = False) -> sdk.QueryVariable:
    v = (sdk.QueryVariable(name).label(label).datasource(_ref(PROM))
         .query({"query": query, "refId": f"{name}-variable"})
         .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
         .sort(model.VariableSort.ALPHABETICAL_ASC).include_all(include_all).multi(multi)
         .regex(""))
    if include_all:
        v.all_value(".*").current(model.VariableOption(text="All", value="$__all"))
    return v


def sql_query_var(name: str, label: str, sql: str) -> sdk.QueryVariable:
    return (sdk.QueryVariable(name).label(label).datasource(_ref(PG)).query(sql)
            .refresh(model.VariableRefresh.ON_DASHBOARD_LOAD)
            .sort(model.VariableSort.ALPHABETICAL_ASC).include_all(False).multi(False)
            .regex(""))


def dashboard(uid: str, title: str, description: str, layout: Layout,
              variables: list[Any], *, time_from: str = "now-6h",
              refresh: str = "1m", links: list[sdk.DashboardLink] | None = None
              ) -> dict[str, Any]:
    d = (sdk.Dashboard(title).uid(uid).description(description).tags(TAGS).version(1)
         .editable().tooltip(model.DashboardCursorSync.CROSSHAIR).timezone("browser")
         .refresh(refresh).time(time_from, "now").fiscal_year_start_month(0).live_now(False)
         .link(sdk.DashboardLink("podres-exporter").type(model.DashboardLinkType.DASHBOARDS)
               .tags(["podres"]).as_dropdown(True).include_vars(False).keep_time(True)
               .icon("external link").target_blank(False).tooltip("").url(""))
         .annotation(sdk.AnnotationQuery().name("Annotations & Alerts")
                     .datasource(model.DataSourceRef(type_val="grafana",
                                                     uid="-- Grafana --"))
                     .enable(True).hide(True).icon_color("rgba(0, 211, 255, 1)")
                     .type("dashboard"))
         .variables(variables))
    for link_ in links or []:
        d.link(link_)
    for kind, item in layout.items:
        if kind == "row":
            d.with_row(item)
        else:
            d.with_panel(item)
    built = d.build()
    built.schema_version = SCHEMA_VERSION  # the dashboard model the panels are written for
    for variable in built.templating.list_val or []:
        # The SDK gives every variable the interval variable's auto-step fields; Grafana's
        # schema allows them on interval variables only.
        variable.auto = variable.auto_min = variable.auto_count = None
    result: dict[str, Any] = json.loads(json.dumps(built, cls=JSONEncoder))
    return result


# --------------------------------------------------------------------------------------
# node.json: one node
# --------------------------------------------------------------------------------------

N = 'cluster=~"$cluster", job=~"$job", node="$node"'
# The kubelet's own cAdvisor series of the selected node (not /metrics/resource, not a
# standalone cAdvisor: either would count the same usage twice).
CADVISOR = 'job="kubelet", metrics_path="/metrics/cadvisor", cluster=~"$cluster", node="$node"'
# Anomalies the alerts count (the 1.36 reporting pattern is shown, not alerted).
ALERTED = 'kind!="legacy_shared_report"'
SATURATION_THRESHOLD = 0.9  # PodresPodSharedPoolSaturated


def link(title: str, url: str, tooltip: str) -> sdk.DashboardLink:
    return (sdk.DashboardLink(title).type(model.DashboardLinkType.LINK).url(url)
            .tooltip(tooltip).icon("dashboard").as_dropdown(False).include_vars(False)
            .keep_time(True).target_blank(False).tags([]))


def node_dashboard() -> dict[str, Any]:
    lay = Layout()
    lay.row("Overview")
    lay.add(stat("PodResources source up", f"max(podres_up{{{N}}})",
                 description="podres_up: 1 while polls of the kubelet's PodResources API "
                             "succeed.",
                 thresholds=[(None, "red"), (1, "green")],
                 mappings=[{"type": "value", "options": {
                     "0": {"text": "DOWN", "color": "red"},
                     "1": {"text": "UP", "color": "green"}}}]), 4, 4)
    lay.add(stat("Online CPUs", f"sum(podres_cpus{{{N}}})",
                 description="Every online CPU lands in exactly one pool."), 4, 4)
    lay.add(stat("Reclaimed cores", f"sum(podres_reclaimed_cpus{{{N}}})",
                 description="Cores pod-level resource managers gave back: legacy "
                             "per-container cost minus pod budgets "
                             "(docs/design.md#estimates)."), 4, 4)
    lay.add(stat("Reclaimable cores", f"sum(podres_reclaimable_cpus{{{N}}})",
                 description="Cores that pods without a pod-level budget could still give "
                             "back (1-CPU padding containers)."), 4, 4)
    lay.add(stat("Active anomalies", f"sum(podres_anomalies{{{N}, {ALERTED}}})",
                 description="Anomalies the alerts count (every kind but the 1.36 reporting "
                             "pattern). No data while the exporter has withdrawn the ledger "
                             "(PodResources failing): that is not a healthy 0.",
                 thresholds=[(None, "green"), (1, "red")], no_value="no data"), 4, 4)
    lay.add(stat("Last successful poll",
                 f"time() - max(podres_last_success_timestamp_seconds{{{N}}})", unit="s",
                 thresholds=[(None, "green"), (60, "orange"), (300, "red")]), 4, 4)

    lay.row("CPU pools")
    lay.add(counts_bargauge("CPU pools by NUMA node", [prom_target(
        f"sum by (numa_node, pool) (podres_cpus{{{N}}})",
        legend="NUMA {{numa_node}} · {{pool}}", instant=True)],
        description="Each online CPU of the node in its pool, per NUMA node "
                    "(numa_node is empty when the topology is unknown)."),
        10, 10)
    lay.add(timeseries("CPU pools over time", [prom_target(
        f"sum by (pool) (podres_cpus{{{N}}})", legend="{{pool}}")], stack=True,
        overrides=color_overrides(ASSIGNMENT_COLORS)), 14, 10)
    lay.add(timeseries("Memory pools", [prom_target(
        f"sum by (memory_type, pool) (podres_memory_bytes{{{N}}})",
        legend="{{memory_type}} · {{pool}}")], unit="bytes", stack=True), 12, 8)
    lay.add(timeseries("Containers per assignment", [prom_target(
        f'sum by (assignment) (podres_containers{{{N}, resource="cpu"}})',
        legend="{{assignment}}")], stack=True,
        description="Current containers per CPU assignment (pod_exclusive / pod_shared: "
                    "pod-level managers; node_*: per-container model).",
        overrides=color_overrides(ASSIGNMENT_COLORS)), 12, 8)

    lay.row("Pods and containers")
    pod_q = [
        prom_target(f'sum by (namespace, pod) (podres_pod_cpus{{{N}, pool="{pool}"}})',
                    ref=ref, instant=True, table=True)
        for ref, pool in (("A", "pod_exclusive"), ("B", "pod_shared"), ("C", "pod_idle"),
                          ("D", "node_exclusive"))
    ]
    pod_q.append(prom_target(f"sum by (namespace, pod) (podres_pod_reclaimed_cpus{{{N}}})",
                             ref="E", instant=True, table=True))
    lay.add(table("Pods", pod_q,
                  description="CPUs of each pod per pool and the cores its pod-level budget "
                              "reclaimed.",
                  transformations=[
                      {"id": "merge", "options": {}},
                      organize(["Time"], {"Value #A": "pod_exclusive", "Value #B": "pod_shared",
                                          "Value #C": "pod_idle",
                                          "Value #D": "node_exclusive",
                                          "Value #E": "reclaimed"}),
                  ]), 12, 12)
    lay.add(table("Containers", [prom_target(
        f"sum by (namespace, pod, container, assignment) (podres_container_cpus{{{N}}})",
        instant=True, table=True)],
        description="Each container's CPU assignment and CPU count (for pod_shared: the "
                    "size of its pod's shared pool).",
        transformations=[organize(["Time"], {"Value": "cpus"})],
        overrides=[{"matcher": {"id": "byName", "options": "assignment"},
                    "properties": [{"id": "custom.cellOptions",
                                    "value": {"type": "color-text"}},
                                   {"id": "mappings", "value": [
                                       {"type": "value", "options": {
                                           k: {"color": v, "index": i}
                                           for i, (k, v) in enumerate(
                                               ASSIGNMENT_COLORS.items())}}]}]}]), 12, 12)

    lay.row("Anomalies")
    lay.add(table("Current anomalies", [prom_target(
        f"sum by (kind) (podres_anomalies{{{N}}}) > 0", instant=True, table=True)],
        description="Allocation errors the exporter sees now (docs/design.md#anomalies), "
                    "legacy_shared_report included; details per pod at the exporter's "
                    "/api/v1/ledger and in the history dashboard.",
        transformations=[organize(["Time"], {"Value": "count"})]), 8, 8)
    lay.add(timeseries("Anomalies observed", [prom_target(
        f"sum by (kind) (increase(podres_anomalies_observed_total{{{N}}}[$__rate_interval]))",
        legend="{{kind}}")]), 16, 8)

    lay.row("Devices")
    lay.add(table("Devices by resource and NUMA node", [
        prom_target(f'sum by (resource, numa_node) (podres_devices{{{N}, state="{state}"}})',
                    ref=ref, instant=True, table=True)
        for ref, state in (("A", "allocatable"), ("B", "assigned"), ("C", "free"))],
        description="Device-plugin devices (GPUs, SR-IOV VFs) per resource and NUMA node "
                    "(empty: the plugin reports no topology), from GetAllocatableResources "
                    "and List (docs/design.md#devices). Which container holds which device: "
                    "the exporter's /api/v1/ledger (devices.containers).",
        transformations=[
            {"id": "merge", "options": {}},
            organize(["Time"], {"Value #A": "allocatable", "Value #B": "assigned",
                                "Value #C": "free"}),
        ]), 16, 8)
    lay.add(stat("Containers away from their devices",
                 f'sum(podres_anomalies{{{N}, kind="device_numa_misaligned"}})',
                 description="device_numa_misaligned: containers (pods, under the pod scope) "
                             "with exclusive CPUs or memory on a NUMA node none of their "
                             "devices is on. Raised only under the topology policies none "
                             "and best-effort, which admit it silently; PodresDeviceNUMA"
                             "Misaligned alerts on it.",
                 thresholds=[(None, "green"), (1, "orange")], no_value="no data"), 8, 8)

    lay.row("Pod shared pools and exclusive CPUs (cAdvisor)")
    lay.add(timeseries("Pod shared pool saturation", [prom_target(
        "sum by (cluster, namespace, pod) (\n"
        "  sum by (cluster, namespace, pod, container) (\n"
        f'    rate(container_cpu_usage_seconds_total{{{CADVISOR}, container!="", '
        'container!="POD"}[$__rate_interval])\n'
        "  )\n"
        f'  and on (cluster, namespace, pod, container) podres_container_cpus{{{N}, '
        'assignment="pod_shared"}\n'
        ")\n"
        "/ on (cluster, namespace, pod)\n"
        f'max by (cluster, namespace, pod) (podres_pod_cpus{{{N}, pool="pod_shared"}} > 0)',
        legend="{{namespace}}/{{pod}}")], unit="percentunit",
        threshold=SATURATION_THRESHOLD,
        description="CPU used by each pod's pod_shared containers (cAdvisor) over the size "
                    "of its pod shared pool. Near 100 % the sidecars compete for CPU; the "
                    "red line is where PodresPodSharedPoolSaturated fires (after 15 min)."),
        12, 9)
    lay.add(timeseries("CFS throttling of exclusive containers", [prom_target(
        "(\n"
        "  sum by (cluster, namespace, pod, container) (\n"
        f'    rate(container_cpu_cfs_throttled_periods_total{{{CADVISOR}, container!="", '
        'container!="POD"}[$__rate_interval])\n'
        "  )\n"
        "  /\n"
        "  (sum by (cluster, namespace, pod, container) (\n"
        f'    rate(container_cpu_cfs_periods_total{{{CADVISOR}, container!="", '
        'container!="POD"}[$__rate_interval])\n'
        "  ) > 0)\n"
        ")\n"
        "and on (cluster, namespace, pod, container)\n"
        f'podres_container_cpus{{{N}, assignment=~"pod_exclusive|node_exclusive"}}',
        legend="{{namespace}}/{{pod}}/{{container}}")], unit="percentunit",
        description="Fraction of CFS periods in which a container holding exclusive CPUs "
                    "was throttled. Should be empty: the kubelet turns the quota off for "
                    "exclusive CPUs."), 12, 9)

    lay.row("Busy time per pool (/proc/stat, docs/kernel.md)")
    lay.add(timeseries("Pool saturation", [prom_target(
        f"sum by (pool) (rate(podres_cpu_pool_busy_seconds_total{{{N}}}[$__rate_interval]))\n"
        f"/ on (pool) (sum by (pool) (podres_cpus{{{N}}}) > 0)",
        legend="{{pool}}")], unit="percentunit", threshold=SATURATION_THRESHOLD,
        description="Busy fraction of each pool's CPUs, from the kernel's per-CPU busy time "
                    "attributed to the pool holding each CPU (no cAdvisor needed). A pegged "
                    "pod_shared pool beside idle pod_exclusive CPUs is a budget to rebalance.",
        overrides=color_overrides(ASSIGNMENT_COLORS)), 12, 9)
    lay.add(table("Stranded cores", [prom_target(
        STRANDED.format(sel=N), instant=True, table=True)],
        description="Containers with exclusive cores that used under 10 % of them "
                    "throughout the last hour, by their own cgroup's CPU time (not the "
                    "cores' busy time, which a neighbour could fill), held for at least "
                    "that hour: capacity pinned and unused (docs/kernel.md). Containers "
                    "younger than an hour are not judged.",
        transformations=[organize(["Time"], {"Value": "own usage, busiest in the hour"})],
        unit="percentunit"), 12, 9)

    lay.row("Kubelet and exporter")
    lay.add(table("Kubelet configuration", [prom_target(
        f"max by (cpu_manager_policy, memory_manager_policy, topology_manager_policy, "
        f"topology_manager_scope, pod_level_resource_managers) (podres_kubelet_info{{{N}}})",
        instant=True, table=True)],
        transformations=[organize(["Time", "Value"])]), 12, 5)
    lay.add(table("Checkpoints", [
        prom_target(f"max by (file, format) (podres_checkpoint_info{{{N}}})", ref="A",
                    instant=True, table=True)],
        description="Checkpoint files read by the exporter; see also the downgrade stat.",
        transformations=[organize(["Time", "Value"])]), 6, 5)
    lay.add(stat("Checkpoint downgrade unsafe",
                 f"max(podres_checkpoint_downgrade_unsafe{{{N}}})",
                 thresholds=[(None, "green"), (1, "red")],
                 mappings=[{"type": "value", "options": {
                     "0": {"text": "safe", "color": "green"},
                     "1": {"text": "UNSAFE", "color": "red"}}}]), 6, 5)
    lay.add(timeseries("Poll duration", [prom_target(
        f"max(podres_poll_duration_seconds{{{N}}})", legend="last poll")], unit="s",
        description="Duration of the last poll of all sources, reconcile included."), 6, 8)
    lay.add(panel("state-timeline", "Sources up", [prom_target(
        f"max by (source) (podres_source_up{{{N}}})", legend="{{source}}")],
        description="Whether each source (PodResources, kubelet HTTPS, sysfs, checkpoints) "
                    "answered in the last poll.",
        defaults={"color": {"mode": "thresholds"},
                  "thresholds": {"mode": "absolute", "steps": [
                      {"value": None, "color": "red"}, {"value": 1, "color": "green"}]},
                  "mappings": [{"type": "value", "options": {
                      "0": {"text": "down", "color": "red"},
                      "1": {"text": "up", "color": "green"}}}]},
        options={"mergeValues": True, "showValue": "never", "rowHeight": 0.8,
                 "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
                 "tooltip": {"mode": "single", "sort": "none"}}), 6, 8)
    lay.add(timeseries("Source errors", [prom_target(
        f"sum by (source, operation) "
        f"(rate(podres_source_errors_total{{{N}}}[$__rate_interval]))",
        legend="{{source}} {{operation}}")], unit="reqps"), 6, 8)
    lay.add(timeseries("History writes", [
        prom_target(f"max(podres_history_pending_writes{{{N}}})", ref="A", legend="pending"),
        prom_target(f"sum(increase(podres_history_dropped_writes_total{{{N}}}"
                    f"[$__rate_interval]))", ref="B", legend="dropped")]), 6, 8)

    variables = [
        datasource_var("prometheus"),
        # "All" (.*) also matches series without a cluster label: one variable serves a
        # single-cluster Prometheus and a global view.
        prom_query_var("cluster", "Cluster", "label_values(podres_up, cluster)",
                       include_all=True),
        prom_query_var("job", "Job", 'label_values(podres_up{cluster=~"$cluster"}, job)',
                       include_all=True),
        prom_query_var("node", "Node",
                       'label_values(podres_up{cluster=~"$cluster", job=~"$job"}, node)'),
    ]
    return dashboard("podres-node", "podres-exporter / Node",
                     "CPU pools, pod-level assignments, reclaimed cores and anomalies of one "
                     "node (Kubernetes Pod-Level Resource Managers).", lay, variables,
                     links=[link("History of this node",
                                 "/d/podres-history/podres-exporter-history?var-node=${node}",
                                 "Assignment timeline and anomaly log of the same node "
                                 "(the history store names nodes as the node label does)")])


# --------------------------------------------------------------------------------------
# fleet.json: every node
# --------------------------------------------------------------------------------------

F = 'cluster=~"$cluster", job=~"$job"'
K = 'cluster=~"$cluster"'  # kubelet series: not the exporter's job


def kubelet_rate(name: str, by: str) -> str:
    """Both spellings of a kubelet resource-manager metric (1.36 bare, 1.37 kubelet_)."""
    return (f"sum by ({by}) (rate({{__name__=~\"(kubelet_)?{name}\", {K}}}"
            f"[$__rate_interval]))")


def node_table(title: str, targets: list[dict[str, Any]], rename: dict[str, str], *,
               description: str = "", exclude: tuple[str, ...] = ("Time",),
               sort: str | None = None) -> dict[str, Any]:
    """A table with one row per (cluster, node) whose node cells link to the node
    dashboard."""
    transformations: list[dict[str, Any]] = []
    if len(targets) > 1:
        transformations.append({"id": "merge", "options": {}})
    transformations.append(organize(list(exclude), rename))
    if sort:
        transformations.append({"id": "sortBy", "options": {"sort": [
            {"field": sort, "desc": True}]}})
    return table(title, targets, description=description, transformations=transformations,
                 overrides=[node_link_override()])


def fleet_dashboard() -> dict[str, Any]:
    lay = Layout()
    shared_c = f'sum(podres_containers{{{F}, resource="cpu", assignment="pod_shared"}})'
    excl_c = f'sum(podres_containers{{{F}, resource="cpu", assignment="pod_exclusive"}})'
    shared_p = f'sum(podres_cpus{{{F}, pool="pod_shared"}})'
    excl_p = f'sum(podres_cpus{{{F}, pool="pod_exclusive"}})'

    lay.row("Pod-level resource managers across the fleet")
    lay.add(stat("Pod-shared per pod-exclusive containers", f"{shared_c} / ({excl_c} > 0)",
                 description="How many sidecars share a pod's pool per container holding "
                             "pod-exclusive CPUs."), 4, 4)
    lay.add(stat("Pod-shared per pod-exclusive CPUs", f"{shared_p} / ({excl_p} > 0)",
                 description="CPUs in pod shared pools per pod-exclusive CPU."), 4, 4)
    lay.add(stat("Reclaimed cores", f"sum(podres_reclaimed_cpus{{{F}}})",
                 description="Cores given back fleet-wide by pod-level budgets."), 4, 4)
    lay.add(stat("Reclaimable cores", f"sum(podres_reclaimable_cpus{{{F}}})",
                 description="Cores still pinned by 1-CPU padding containers of pods "
                             "without a pod-level budget."), 4, 4)
    lay.add(stat("Nodes reporting", f"count(podres_up{{{F}}} == 1)",
                 description="Exporters whose PodResources source is up."), 4, 4)
    lay.add(stat("Active anomalies", f"sum(podres_anomalies{{{F}, {ALERTED}}})",
                 description="Anomalies the alerts count, over every node that publishes a "
                             "ledger (the 1.36 reporting pattern is not counted).",
                 thresholds=[(None, "green"), (1, "red")], no_value="no data"), 4, 4)

    lay.add(timeseries("Pod-shared per pod-exclusive ratio", [
        prom_target(f"{shared_c} / ({excl_c} > 0)", ref="A", legend="containers"),
        prom_target(f"{shared_p} / ({excl_p} > 0)", ref="B", legend="CPUs")]), 12, 8)
    lay.add(timeseries("Containers per assignment", [prom_target(
        f'sum by (assignment) (podres_containers{{{F}, resource="cpu"}})',
        legend="{{assignment}}")], stack=True,
        overrides=color_overrides(ASSIGNMENT_COLORS)), 12, 8)
    lay.add(timeseries("Reclaimed and reclaimable cores", [
        prom_target(f"sum by (cluster) (podres_reclaimed_cpus{{{F}}})", ref="A",
                    legend="reclaimed {{cluster}}"),
        prom_target(f"sum by (cluster) (podres_reclaimable_cpus{{{F}}})", ref="B",
                    legend="reclaimable {{cluster}}")], min0=False), 12, 8)
    lay.add(timeseries("CPU pools", [prom_target(
        f"sum by (pool) (podres_cpus{{{F}}})", legend="{{pool}}")], stack=True,
        overrides=color_overrides(ASSIGNMENT_COLORS)), 12, 8)

    lay.row("Rollout")
    lay.add(counts_bargauge("Nodes by pod-level resource managers", [prom_target(
        f"count by (pod_level_resource_managers) (podres_kubelet_info{{{F}}})",
        legend="enabled: {{pod_level_resource_managers}}", instant=True)],
        description="Rollout progress: nodes whose kubelet runs with the "
                    "PodLevelResourceManagers feature gate (true) or without it (false)."),
        8, 8)
    lay.add(node_table("Resource manager configuration per node", [
        prom_target(f"max by (cluster, node, pod_level_resource_managers, cpu_manager_policy, "
                    f"memory_manager_policy, topology_manager_policy, topology_manager_scope) "
                    f"(podres_kubelet_info{{{F}}})", ref="A", instant=True, table=True),
        prom_target(f"max by (cluster, node) (podres_checkpoint_downgrade_unsafe{{{F}}})",
                    ref="B", instant=True, table=True)],
        {"Value #B": "downgrade unsafe"}, exclude=("Time", "Value #A"),
        description="Which nodes run pod-level resource managers, with which policies; "
                    "'downgrade unsafe' 1 marks kubelet checkpoints an older kubelet cannot "
                    "read (drain the node before a downgrade)."), 16, 8)

    lay.row("Pods and nodes")
    lay.add(node_table("Top pods by reclaimed cores", [prom_target(
        f"topk(20, max by (cluster, node, namespace, pod) (podres_pod_reclaimed_cpus{{{F}}}))",
        instant=True, table=True)], {"Value": "reclaimed cores"}, sort="reclaimed cores"),
        8, 10)
    lay.add(node_table("Nodes by reclaimed cores", [
        prom_target(f"sum by (cluster, node) (podres_reclaimed_cpus{{{F}}})", ref="A",
                    instant=True, table=True),
        prom_target(f"sum by (cluster, node) (podres_reclaimable_cpus{{{F}}})", ref="B",
                    instant=True, table=True)],
        {"Value #A": "reclaimed", "Value #B": "reclaimable"}, sort="reclaimed"), 8, 10)
    lay.add(node_table("Nodes with anomalies", [prom_target(
        f"sum by (cluster, node, kind) (podres_anomalies{{{F}}}) > 0",
        instant=True, table=True)], {"Value": "count"},
        description="Current anomalies per node and kind, legacy_shared_report (the 1.36 "
                    "reporting pattern, not alerted) included."), 8, 10)

    lay.row("Busy time per pool (/proc/stat, docs/kernel.md)")
    lay.add(timeseries("Pool saturation across the fleet", [prom_target(
        f"sum by (pool) (rate(podres_cpu_pool_busy_seconds_total{{{F}}}[$__rate_interval]))\n"
        f"/ on (pool) (sum by (pool) (podres_cpus{{{F}}}) > 0)",
        legend="{{pool}}")], unit="percentunit", threshold=SATURATION_THRESHOLD,
        description="Busy fraction of each pool's CPUs over every node.",
        overrides=color_overrides(ASSIGNMENT_COLORS)), 8, 9)
    lay.add(timeseries("Pod shared pool saturation per node", [prom_target(
        "sum by (cluster, node) (rate(podres_cpu_pool_busy_seconds_total"
        f'{{{F}, pool="pod_shared"}}[$__rate_interval]))\n'
        f'/ on (cluster, node) (sum by (cluster, node) (podres_cpus{{{F}, pool="pod_shared"}})'
        " > 0)",
        legend="{{node}}")], unit="percentunit", threshold=SATURATION_THRESHOLD,
        description="Busy fraction of the pod shared pools of each node."), 8, 9)
    lay.add(table("Stranded cores", [prom_target(
        STRANDED.format(sel=F), instant=True, table=True)],
        description="Containers with exclusive cores that used under 10 % of them "
                    "throughout the last hour (their own cgroup's CPU time), held for at "
                    "least that hour, on every node.",
        transformations=[organize(["Time"], {"Value": "own usage, busiest in the hour"})],
        unit="percentunit"), 8, 9)

    lay.row("Kubelet resource managers (kubelet metrics, 1.36 and 1.37 names)")
    lay.add(timeseries("Kubelet allocation errors", [prom_target(
        kubelet_rate("resource_manager_allocation_errors_total",
                     "cluster, node, resource_name, source"),
        legend="{{cluster}} {{node}} {{resource_name}} {{source}}")], unit="ops",
        description="resource_manager_allocation_errors_total (1.36) or "
                    "kubelet_resource_manager_allocation_errors_total (1.37)."), 8, 8)
    lay.add(timeseries("Kubelet allocations", [prom_target(
        kubelet_rate("resource_manager_allocations_total", "resource_name, source"),
        legend="{{resource_name}} {{source}}")], unit="ops"), 8, 8)
    lay.add(timeseries("Kubelet container assignment events", [prom_target(
        kubelet_rate("resource_manager_container_assignments", "resource_name, assignment_type"),
        legend="{{resource_name}} {{assignment_type}}")], unit="ops",
        description="A counter of assignment events, not current state: current counts are "
                    "the exporter's podres_containers."), 8, 8)
    lay.add(timeseries("Older kubelet manager errors", [
        prom_target(f"sum by (cluster, node) (rate(kubelet_cpu_manager_pinning_errors_total"
                    f"{{{K}}}[$__rate_interval]))", ref="A",
                    legend="cpu pinning {{cluster}} {{node}}"),
        prom_target(f"sum by (cluster, node) (rate(kubelet_memory_manager_pinning_errors_total"
                    f"{{{K}}}[$__rate_interval]))", ref="B",
                    legend="memory pinning {{cluster}} {{node}}"),
        prom_target(f"sum by (cluster, node) (rate("
                    f"kubelet_topology_manager_admission_errors_total{{{K}}}"
                    f"[$__rate_interval]))", ref="C",
                    legend="topology admission {{cluster}} {{node}}")], unit="ops"), 12, 8)
    lay.add(node_table("Exporters down", [prom_target(
        "max by (cluster, node, instance, __name__) (\n"
        f"  (up{{{F}}} == 0\n"
        "   and on (cluster, job)\n"
        f"   group by (cluster, job) (present_over_time(podres_up{{{F}}}[$__range])))\n"
        f"  or podres_up{{{F}}} == 0)",
        instant=True, table=True)], {"__name__": "metric"}, exclude=("Time", "Value"),
        # $job "All" is any job: `up` is kept to the jobs that served podres series in the
        # dashboard's range, as the job variable's own values are.
        description="Scrape failures (up == 0) of this exporter's jobs (those that served "
                    "podres_up in the dashboard's time range) or a failing PodResources "
                    "source (podres_up == 0)."), 12, 8)

    variables = [
        datasource_var("prometheus"),
        prom_query_var("cluster", "Cluster", "label_values(podres_up, cluster)",
                       include_all=True, multi=True),
        prom_query_var("job", "Job", 'label_values(podres_up{cluster=~"$cluster"}, job)',
                       include_all=True),
    ]
    return dashboard("podres-fleet", "podres-exporter / Fleet",
                     "Pod-level resource managers across every node: pod_shared to "
                     "pod_exclusive ratio, reclaimed cores, rollout, anomalies and the "
                     "kubelet's own allocation errors. Node cells link to the node "
                     "dashboard.", lay, variables, time_from="now-7d", refresh="5m")


# --------------------------------------------------------------------------------------
# history.json: the history store through Grafana's PostgreSQL data source
# --------------------------------------------------------------------------------------

NODE_SQL = "SELECT name FROM nodes ORDER BY name"
NAMESPACE_SQL = ("SELECT DISTINCT ai.namespace FROM assignment_intervals ai "
                 "JOIN nodes n ON n.id = ai.node_id WHERE n.name = '$node' ORDER BY 1")
POD_SQL = ("SELECT DISTINCT ai.pod FROM assignment_intervals ai "
           "JOIN nodes n ON n.id = ai.node_id "
           "WHERE n.name = '$node' AND ai.namespace = '$namespace' ORDER BY 1")

# Intervals of the selected pod overlapping the dashboard's time range.
POD_INTERVALS = """\
FROM assignment_intervals ai
JOIN nodes n ON n.id = ai.node_id
WHERE n.name = '$node'
  AND ai.namespace = '$namespace'
  AND ai.pod = '$pod'
  AND ai.valid_from <= $__timeTo()
  AND (ai.valid_to IS NULL OR ai.valid_to >= $__timeFrom())"""

TIMELINE_SQL = f"""\
SELECT ai.valid_from AS "time", ai.container AS container, ai.assignment AS assignment
{POD_INTERVALS}
UNION ALL
SELECT ai.valid_to AS "time", ai.container AS container, 'gone' AS assignment
{POD_INTERVALS}
  AND ai.valid_to IS NOT NULL
  AND NOT EXISTS (
    SELECT 1 FROM assignment_intervals nx
    WHERE nx.node_id = ai.node_id AND nx.namespace = ai.namespace AND nx.pod = ai.pod
      AND nx.container = ai.container AND nx.valid_from = ai.valid_to)
ORDER BY 1, 2"""

INTERVALS_SQL = f"""\
SELECT ai.container AS container, ai.assignment AS assignment,
       ai.memory_assignment AS memory_assignment, ai.cpuset AS cpuset,
       ai.cpu_count AS cpus, ai.memory_bytes AS memory_bytes, ai.numa_nodes AS numa_nodes,
       ai.valid_from AS valid_from, ai.valid_to AS valid_to
{POD_INTERVALS}
ORDER BY ai.valid_from DESC, ai.container"""

ANOMALY_SQL = """\
SELECT an.first_seen AS first_seen, an.last_seen AS last_seen, an.resolved_at AS resolved_at,
       an.kind AS kind, an.namespace AS namespace, an.pod AS pod, an.container AS container,
       an.detail AS detail
FROM anomaly_intervals an
JOIN nodes n ON n.id = an.node_id
WHERE n.name = '$node'
  AND an.first_seen <= $__timeTo()
  AND (an.resolved_at IS NULL OR an.resolved_at >= $__timeFrom())
ORDER BY an.first_seen DESC, an.kind"""

POOLS_SQL = """\
SELECT s.at AS "time",
       s.cpus_reserved AS reserved, s.cpus_node_shared AS node_shared,
       s.cpus_node_exclusive AS node_exclusive, s.cpus_pod_exclusive AS pod_exclusive,
       s.cpus_pod_shared AS pod_shared, s.cpus_pod_idle AS pod_idle
FROM node_summaries s
JOIN nodes n ON n.id = s.node_id
WHERE n.name = '$node' AND $__timeFilter(s.at)
ORDER BY 1"""

CONTAINERS_SQL = """\
SELECT s.at AS "time",
       s.containers_node_exclusive AS node_exclusive, s.containers_pod_exclusive AS pod_exclusive,
       s.containers_pod_shared AS pod_shared, s.containers_node_shared AS node_shared
FROM node_summaries s
JOIN nodes n ON n.id = s.node_id
WHERE n.name = '$node' AND $__timeFilter(s.at)
ORDER BY 1"""

RECLAIMED_SQL = """\
SELECT s.at AS "time", s.reclaimed_cpus AS reclaimed, s.reclaimable_cpus AS reclaimable,
       s.anomalies AS anomalies
FROM node_summaries s
JOIN nodes n ON n.id = s.node_id
WHERE n.name = '$node' AND $__timeFilter(s.at)
ORDER BY 1"""

GAPS_SQL = """\
SELECT g.gap_from AS gap_from, g.gap_to AS gap_to, g.dropped_writes AS dropped_writes,
       g.reason AS reason
FROM history_gaps g
JOIN nodes n ON n.id = g.node_id
WHERE n.name = '$node'
  AND g.gap_from <= $__timeTo() AND g.gap_to >= $__timeFrom()
ORDER BY g.gap_from DESC"""


def history_dashboard() -> dict[str, Any]:
    lay = Layout()
    value_colors = {**ASSIGNMENT_COLORS, "gone": "transparent"}
    lay.row("Assignments of $namespace/$pod")
    lay.add(panel("state-timeline", "Assignment timeline", [sql_target(TIMELINE_SQL)],
                  datasource=PG,
                  description="CPU assignment of each container of the pod over time, from "
                              "the history store's assignment intervals.",
                  defaults={"color": {"mode": "fixed", "fixedColor": "text"},
                            # one row per container (the label partitionByValues adds)
                            "displayName": "${__field.labels.container}",
                            "custom": {"fillOpacity": 80, "lineWidth": 0},
                            "mappings": [{"type": "value", "options": {
                                k: {"color": v, "index": i}
                                for i, (k, v) in enumerate(value_colors.items())}}]},
                  transformations=[{"id": "partitionByValues",
                                    "options": {"fields": ["container"],
                                                "keepFields": False}}],
                  options={"mergeValues": True, "showValue": "auto", "alignValue": "left",
                           "rowHeight": 0.8,
                           "legend": {"displayMode": "list", "placement": "bottom",
                                      "showLegend": True},
                           "tooltip": {"mode": "single", "sort": "none"}}), 24, 9)
    lay.add(table("Assignment intervals", [sql_target(INTERVALS_SQL)], datasource=PG,
                  description="Every interval of the pod's containers that overlaps the time "
                              "range; an open interval (no valid_to) is the current one.",
                  overrides=[{"matcher": {"id": "byName", "options": "memory_bytes"},
                              "properties": [{"id": "unit", "value": "bytes"}]}]), 24, 9)

    lay.row("Anomaly log of $node")
    lay.add(table("Anomaly log", [sql_target(ANOMALY_SQL)], datasource=PG,
                  description="Anomalies (docs/design.md#anomalies) with first and last "
                              "sighting; resolved_at is empty while the anomaly persists."),
            24, 10)
    lay.add(table("History gaps", [sql_target(GAPS_SQL)], datasource=PG,
                  description="Explicit gaps recorded when the store was unreachable for "
                              "longer than the writer's buffer."), 24, 5)

    lay.row("Node summaries of $node")
    lay.add(timeseries("CPU pools", [sql_target(POOLS_SQL, fmt="time_series")], stack=True,
                       datasource=PG, overrides=color_overrides(ASSIGNMENT_COLORS)), 12, 8)
    lay.add(timeseries("Containers per assignment",
                       [sql_target(CONTAINERS_SQL, fmt="time_series")], stack=True,
                       datasource=PG, overrides=color_overrides(ASSIGNMENT_COLORS)), 12, 8)
    lay.add(timeseries("Reclaimed and reclaimable cores, anomalies",
                       [sql_target(RECLAIMED_SQL, fmt="time_series")], min0=False,
                       datasource=PG), 24, 8)

    variables = [
        datasource_var("grafana-postgresql-datasource"),
        sql_query_var("node", "Node", NODE_SQL),
        sql_query_var("namespace", "Namespace", NAMESPACE_SQL),
        sql_query_var("pod", "Pod", POD_SQL),
    ]
    return dashboard("podres-history", "podres-exporter / History",
                     "The history store (PostgreSQL fleet database) through Grafana's "
                     "PostgreSQL data source: assignment timeline of a pod, anomaly log, "
                     "node summaries.", lay, variables, time_from="now-24h", refresh="",
                     links=[link("Node dashboard of this node",
                                 "/d/podres-node/podres-exporter-node?var-node=${node}",
                                 "Live pools and assignments of the same node (Prometheus)")])


DASHBOARDS = {
    "node.json": node_dashboard,
    "fleet.json": fleet_dashboard,
    "history.json": history_dashboard,
}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name](), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="compare instead of writing; exit 1 when a file is out of date")
    args = ap.parse_args(argv)
    stale = []
    for name in DASHBOARDS:
        path = HERE / name
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run {Path(__file__).name}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
