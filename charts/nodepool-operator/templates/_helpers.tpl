{{/* The chart's name, or nameOverride. */}}
{{- define "nodepool-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name when it already contains the chart's
name (`helm install nodepool-operator ...` gives deploy/'s names), else release-chart.
*/}}
{{- define "nodepool-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "nodepool-operator.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "nodepool-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "nodepool-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: nodepool-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* What the Deployment, the Service, the PDB and the ServiceMonitor select the Pods by. */}}
{{- define "nodepool-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodepool-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "nodepool-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The Secret holding the cloud API's token: the user's, or the one this chart makes; empty
for a provider that takes its credentials elsewhere (aws: the SDK's chain).
*/}}
{{- define "nodepool-operator.cloudSecret" -}}
{{- if .Values.cloud.credentials.existingSecret }}
{{- .Values.cloud.credentials.existingSecret }}
{{- else if .Values.cloud.credentials.token }}
{{- printf "%s-cloud-token" (include "nodepool-operator.fullname" .) }}
{{- else if has .Values.cloud.provider (list "" "simcloud") }}
{{- fail "set cloud.credentials.existingSecret (a Secret holding the cloud API token) or cloud.credentials.token" }}
{{- end }}
{{- end }}
