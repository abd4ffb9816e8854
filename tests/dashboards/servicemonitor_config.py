"""A ServiceMonitor turned into a Prometheus scrape config the way prometheus-operator does it
(``generateServiceMonitorConfig``, role ``endpoints``), with the Kubernetes service discovery
replaced by static targets that carry the ``__meta_kubernetes_*`` labels the discovery would
attach. The operator's own relabelings come first (service selector, port, the
node/pod/namespace/service/container/job/endpoint target labels), then the ServiceMonitor's
``relabelings``, then the sharding rules; so the chart's relabelings are tested exactly as a
real operator would apply them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_RELABEL_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label",
                 "separator": "separator", "regex": "regex", "modulus": "modulus",
                 "replacement": "replacement", "action": "action"}


def sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


@dataclass(frozen=True)
class Endpoint:
    """One address of the Service's Endpoints object: a pod (the exporter) or a node (the
    kubelet's Service that the operator maintains)."""

    address: str                      # host:port Prometheus scrapes
    target_kind: str                  # "Pod" or "Node"
    target_name: str
    node: str
    port_name: str
    pod_labels: dict[str, str] = field(default_factory=dict)
    container: str = ""

    def meta(self, service: dict[str, Any]) -> dict[str, str]:
        meta = service["metadata"]
        labels = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_service_name": meta["name"],
            "__meta_kubernetes_endpoints_name": meta["name"],
            "__meta_kubernetes_endpoint_port_name": self.port_name,
            "__meta_kubernetes_endpoint_port_protocol": "TCP",
            "__meta_kubernetes_endpoint_ready": "true",
            "__meta_kubernetes_endpoint_address_target_kind": self.target_kind,
            "__meta_kubernetes_endpoint_address_target_name": self.target_name,
            "__meta_kubernetes_endpoint_node_name": self.node,
        }
        for k, v in meta.get("labels", {}).items():
            labels[f"__meta_kubernetes_service_label_{sanitize(k)}"] = v
            labels[f"__meta_kubernetes_service_labelpresent_{sanitize(k)}"] = "true"
        if self.target_kind == "Pod":
            labels.update({
                "__meta_kubernetes_pod_name": self.target_name,
                "__meta_kubernetes_pod_node_name": self.node,
                "__meta_kubernetes_pod_ip": self.address.rsplit(":", 1)[0].strip("[]"),
                "__meta_kubernetes_pod_ready": "true",
                "__meta_kubernetes_pod_phase": "Running",
                "__meta_kubernetes_pod_controller_kind": "DaemonSet",
                "__meta_kubernetes_pod_container_name": self.container,
                "__meta_kubernetes_pod_container_port_name": self.port_name,
                "__meta_kubernetes_pod_container_port_number": self.address.rsplit(":", 1)[1],
            })
            for k, v in self.pod_labels.items():
                labels[f"__meta_kubernetes_pod_label_{sanitize(k)}"] = v
                labels[f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"] = "true"
        return labels


def _operator_relabelings(sm: dict[str, Any], ep: dict[str, Any]) -> list[dict[str, Any]]:
    spec = sm["spec"]
    out: list[dict[str, Any]] = [{"source_labels": ["job"],
                                  "target_label": "__tmp_prometheus_job_name"}]
    for k, v in sorted(spec["selector"].get("matchLabels", {}).items()):
        out.append({"action": "keep",
                    "source_labels": [f"__meta_kubernetes_service_label_{sanitize(k)}",
                                      f"__meta_kubernetes_service_labelpresent_{sanitize(k)}"],
                    "regex": f"({v});true"})
    assert not spec["selector"].get("matchExpressions"), "not emulated"
    out.append({"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                "regex": ep["port"]})
    kind = ["__meta_kubernetes_endpoint_address_target_kind",
            "__meta_kubernetes_endpoint_address_target_name"]
    out += [
        {"source_labels": kind, "separator": ";", "regex": "Node;(.*)",
         "replacement": "${1}", "target_label": "node"},
        {"source_labels": kind, "separator": ";", "regex": "Pod;(.*)",
         "replacement": "${1}", "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"],
         "target_label": "container"},
    ]
    for label in spec.get("targetLabels", []):
        out.append({"source_labels": [f"__meta_kubernetes_service_label_{sanitize(label)}"],
                    "target_label": sanitize(label), "regex": "(.+)", "replacement": "${1}"})
    for label in spec.get("podTargetLabels", []):
        out.append({"source_labels": [f"__meta_kubernetes_pod_label_{sanitize(label)}"],
                    "target_label": sanitize(label), "regex": "(.+)", "replacement": "${1}"})
    out.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
                "replacement": "${1}"})
    if spec.get("jobLabel"):
        out.append({"source_labels": [
            f"__meta_kubernetes_service_label_{sanitize(spec['jobLabel'])}"],
            "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
    out.append({"target_label": "endpoint", "replacement": ep["port"]})
    return out


def scrape_configs(sm: dict[str, Any], service: dict[str, Any], endpoints: list[Endpoint],
                   *, interval: str = "1s") -> list[dict[str, Any]]:
    """One scrape config per endpoint of ``sm``, scraping ``endpoints`` of ``service``.
    ``interval`` replaces the endpoint's own (the test cannot wait 30 s per scrape)."""
    meta = sm["metadata"]
    out = []
    for i, ep in enumerate(sm["spec"]["endpoints"]):
        relabel = _operator_relabelings(sm, ep)
        relabel += [{_RELABEL_KEYS[k]: v for k, v in r.items()}
                    for r in ep.get("relabelings", [])]
        relabel += [{"source_labels": ["__address__"], "target_label": "__tmp_hash",
                     "modulus": 1, "action": "hashmod"},
                    {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"}]
        out.append({
            "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{i}",
            "honor_labels": bool(ep.get("honorLabels", False)),
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "metrics_path": ep.get("path", "/metrics"),
            "scheme": ep.get("scheme", "http"),
            "static_configs": [{"targets": [e.address], "labels": e.meta(service)}
                               for e in endpoints],
            "relabel_configs": relabel,
            "metric_relabel_configs": [{_RELABEL_KEYS[k]: v for k, v in r.items()}
                                       for r in ep.get("metricRelabelings", [])],
        })
    return out


# kube-prometheus' ServiceMonitor of the kubelet (trimmed to what matters here): its Service
# is maintained by the operator with node addresses, so the operator's relabelings name the
# node; honorLabels keeps cAdvisor's namespace/pod/container; metrics_path tells the
# cAdvisor endpoint from /metrics/resource.
KUBELET_SERVICE = {"metadata": {"name": "kubelet", "namespace": "kube-system",
                                "labels": {"app.kubernetes.io/name": "kubelet",
                                           "k8s-app": "kubelet"}}}
KUBELET_SERVICEMONITOR = {
    "metadata": {"name": "kubelet", "namespace": "monitoring"},
    "spec": {
        "jobLabel": "app.kubernetes.io/name",
        "selector": {"matchLabels": {"app.kubernetes.io/name": "kubelet"}},
        "endpoints": [
            {"port": "https-metrics", "path": path, "scheme": "http", "honorLabels": True,
             "relabelings": [{"action": "replace", "sourceLabels": ["__metrics_path__"],
                              "targetLabel": "metrics_path"}]}
            for path in ("/metrics", "/metrics/cadvisor", "/metrics/resource")],
    },
}
