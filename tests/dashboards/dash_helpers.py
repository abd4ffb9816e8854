"""Shared helpers of the dashboard and rule tests: the dashboards' queries, promtool, and a
real Prometheus server started on loopback (Debian's ``prometheus`` package)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "dashboards" / "grafana"
PROMETHEUS_DIR = REPO / "dashboards" / "prometheus"
RULE_FILES = [PROMETHEUS_DIR / "recording.rules.yml", PROMETHEUS_DIR / "alerts.rules.yml"]
DASHBOARDS = ["node.json", "fleet.json", "history.json"]
SCHEMA = GRAFANA / "schema" / "dashboard.schema.json"


def load_dashboard(name: str) -> dict[str, Any]:
    return json.loads((GRAFANA / name).read_text())


def iter_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])  # collapsed rows keep their panels inside


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref: str
    text: str          # PromQL or SQL, as written in the dashboard
    kind: str          # "promql" | "sql"

    @property
    def where(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref}"


def dashboard_queries(name: str) -> list[Query]:
    out = []
    for p in iter_panels(load_dashboard(name)):
        for t in p.get("targets", []):
            if "expr" in t:
                out.append(Query(name, p["title"], t["refId"], t["expr"], "promql"))
            if "rawSql" in t:
                out.append(Query(name, p["title"], t["refId"], t["rawSql"], "sql"))
    return out


def variable_queries(name: str) -> list[Query]:
    """Template variable queries: the series selector of a Prometheus ``label_values``, or
    the SQL of a PostgreSQL query variable."""
    out = []
    for v in load_dashboard(name).get("templating", {}).get("list", []):
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        if v["datasource"]["type"] == "prometheus":
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q, re.S)
            assert m, f"{name}: variable {v['name']}: unsupported query {q!r}"
            out.append(Query(name, f"variable {v['name']}", "-", m.group(1), "promql"))
        else:
            out.append(Query(name, f"variable {v['name']}", "-", q, "sql"))
    return out


def all_promql() -> list[Query]:
    return [q for d in DASHBOARDS for q in dashboard_queries(d) + variable_queries(d)
            if q.kind == "promql"]


def prom_substitute(expr: str, *, interval: str = "5m", var: str = ".*",
                    values: dict[str, str] | None = None) -> str:
    """What Grafana would send: its interval macros as a duration, the variables in
    ``values`` as given (format them with ``grafana_values``) and every other variable as
    ``var``."""
    values = values or {}
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", interval, expr)
    expr = re.sub(r"\$\{__(rate_interval|interval|range)\}", interval, expr)
    expr = re.sub(r"\$\{(\w+)(:\w+)?\}", lambda m: values.get(m.group(1), var), expr)
    return re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), var), expr)


def grafana_values(dashboard: str, selected: dict[str, str]) -> dict[str, str]:
    """Selected variable values as Grafana's Prometheus data source interpolates them: a
    variable with "All" or several values is regex-escaped (``All`` becomes its allValue),
    a single-value variable is inserted as it is."""
    out = {}
    for v in load_dashboard(dashboard)["templating"]["list"]:
        if v["name"] not in selected:
            continue
        value = selected[v["name"]]
        if v.get("multi") or v.get("includeAll"):
            value = (v.get("allValue", ".*") if value == "All"
                     # doubled: the backslash itself must survive PromQL's string syntax
                     else re.sub(r"[$^*{}\[\]'+?.()|\\]", lambda m: "\\\\" + m.group(0),
                                 value))
        out[v["name"]] = value
    return out


# ---------------------------------------------------------------------------------------
# promtool / prometheus
# ---------------------------------------------------------------------------------------

def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed: apt-get install -y --no-install-recommends "
                    "prometheus")
    return path


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("prometheus not installed: apt-get install -y --no-install-recommends "
                    "prometheus")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fast_rule_copies(directory: Path) -> list[Path]:
    """The rule files with every group evaluated each second and range windows of N minutes
    shortened to N seconds, so that a test scraping every second sees recorded series and
    pending alerts with their real values within seconds."""
    out = []
    for src in RULE_FILES:
        doc = yaml.safe_load(src.read_text())
        for g in doc["groups"]:
            g["interval"] = "1s"
            for r in g["rules"]:
                r["expr"] = re.sub(r"\[(\d+)m\]", r"[\1s]", r["expr"])
        dst = directory / src.name
        dst.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(dst)
    return out


class PrometheusServer:
    """A real Prometheus on loopback with its own config and TSDB in a temporary directory.
    Targets are applied on a 5 s tick: the first answers come after ~5.5 s."""

    def __init__(self, scrape_configs: list[dict[str, Any]], *, rules: bool = True,
                 external_labels: dict[str, str] | None = None) -> None:
        binary = prometheus_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="podres-prom-"))
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s",
                       "external_labels": external_labels or {}},
            "scrape_configs": scrape_configs,
        }
        if rules:
            config["rule_files"] = [str(p) for p in fast_rule_copies(self.dir)]
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.logs()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after {timeout}s: {self.logs()}")

    def logs(self) -> str:
        self.log.flush()
        return (self.dir / "prometheus.log").read_text(errors="replace")[-3000:]

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:  # 400/422: bad query, with Prometheus' reason
            body = json.load(exc)
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def wait_for(self, expr: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def stop_process_group(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM a process started with ``start_new_session=True`` and its children, then
    SIGKILL whatever is still there after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
