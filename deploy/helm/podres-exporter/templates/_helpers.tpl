{{/* Chart name, truncated to a DNS label. */}}
{{- define "podres-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already contains the chart name. */}}
{{- define "podres-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "podres-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels shared by every object. */}}
{{- define "podres-exporter.labels" -}}
helm.sh/chart: {{ include "podres-exporter.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/name: {{ include "podres-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: {{ include "podres-exporter.name" . }}
{{- end }}

{{- define "podres-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "podres-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "podres-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "podres-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "podres-exporter.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Whether a prometheus-operator object is rendered: enabled "auto" (the default) renders
     it only where the cluster serves monitoring.coreos.com/v1, so that a default install
     works without prometheus-operator; true always, false never (docs/deploy.md). */}}
{{- define "podres-exporter.operatorObject" -}}
{{- $enabled := .enabled }}
{{- if eq (toString $enabled) "auto" }}
{{- if .root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- else if $enabled }}true{{ end }}
{{- end }}

{{/* The scheme of the exporter's web server. The chart configures no TLS for it (a
     --web.config.file with TLS comes through extraArgs): the ServiceMonitor and the
     runbook links use this one value. */}}
{{- define "podres-exporter.webScheme" -}}
http
{{- end }}

{{/* The runbook that this release's exporters serve (docs/deploy.md#runbook-links): the
     headless exporter Service's in-cluster name, which resolves to the exporter pods. */}}
{{- define "podres-exporter.runbookURL" -}}
{{- printf "%s://%s.%s.svc:%d/runbook" (include "podres-exporter.webScheme" .) (include "podres-exporter.fullname" .) .Release.Namespace (int .Values.port) }}
{{- end }}
