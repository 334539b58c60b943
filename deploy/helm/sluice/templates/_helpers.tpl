{{/* The chart's name, or nameOverride. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object names: the release name, with the chart's name unless it already holds it. */}}
{{- define "sluice.fullname" -}}
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

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Secret sluice's environment comes from: the user's, or the chart's when it has anything to hold; empty for none. */}}
{{- define "sluice.secretName" -}}
{{- if .Values.existingSecret }}
{{- .Values.existingSecret }}
{{- else if or .Values.secretEnv .Values.api.token }}
{{- include "sluice.fullname" . }}
{{- end }}
{{- end }}

{{/* "true" when the API requires a bearer token. */}}
{{- define "sluice.tokenEnabled" -}}
{{- if or .Values.api.token (and .Values.existingSecret .Values.api.tokenInExistingSecret) }}true{{ end }}
{{- end }}

{{/*
The Host names the API answers to besides the pod's IP (which the kubelet's
probes and Prometheus send, and which a wildcard listener accepts): the
Service's DNS names, and the user's. A name without a port matches the
listen port or none; with another Service port, clients send name:port.
*/}}
{{- define "sluice.allowedHosts" -}}
{{- $svc := include "sluice.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) }}
{{- $hosts := list }}
{{- range $names }}
{{- $hosts = append $hosts . }}
{{- if ne (int $.Values.service.port) 8080 }}
{{- $hosts = append $hosts (printf "%s:%d" . (int $.Values.service.port)) }}
{{- end }}
{{- end }}
{{- concat $hosts .Values.api.extraAllowedHosts | join "," }}
{{- end }}

{{/* Refuses values the chart cannot honour, before anything renders. */}}
{{- define "sluice.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.fleet.enabled) }}
{{- fail (printf "replicaCount is %d: several replicas need fleet mode, so that they share the pipelines through leases instead of each running every pipeline (every sink would get each event once per replica). Set fleet.enabled: true and put the PostgreSQL checkpoint store in the config (store: { type: postgres, config: {...} } at its top level, docs/configuration.md \"Fleets\"), or set replicaCount to 1 (0 stops sluice)." (int .Values.replicaCount)) }}
{{- end }}
{{- if and .Values.fleet.enabled .Values.persistence.enabled }}
{{- fail "fleet.enabled and persistence.enabled are both true: a fleet keeps no state on the data dir (checkpoints, dead letters and the sources' state are in the PostgreSQL store; the data dir holds only scratch spill files), and one ReadWriteOnce claim attaches to a single node, so pods elsewhere could not start. Leave persistence.enabled false; persistence.emptyDirSizeLimit bounds the spill files." }}
{{- end }}
{{- if and .Values.existingSecret (or .Values.secretEnv .Values.api.token) }}
{{- fail "existingSecret is set together with secretEnv or api.token: the chart makes no Secret when existingSecret names one, so those values would be dropped. Put them in the existing Secret (SLUICE_API_TOKEN for the token, with api.tokenInExistingSecret: true), or leave existingSecret empty." }}
{{- end }}
{{- if and .Values.api.tokenInExistingSecret (not .Values.existingSecret) }}
{{- fail "api.tokenInExistingSecret is true but existingSecret is empty: name the Secret that holds SLUICE_API_TOKEN, or use api.token." }}
{{- end }}
{{- $pipelineFiles := 0 }}
{{- range $file, $_ := .Values.config }}
{{- if or (hasSuffix ".yaml" $file) (hasSuffix ".yml" $file) }}
{{- $pipelineFiles = add1 $pipelineFiles }}
{{- end }}
{{- end }}
{{- if eq $pipelineFiles 0 }}
{{- fail "config holds no pipeline file: sluice reads the keys ending in .yaml or .yml, and needs at least one." }}
{{- end }}
{{- if not (has .Values.logFormat (list "text" "json")) }}
{{- fail (printf "logFormat is %q: use text or json." .Values.logFormat) }}
{{- end }}
{{- end }}
