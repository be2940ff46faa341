{{/* Names, labels, and the values checks that make a wrong install fail at render time. */}}

{{- define "tensorgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tensorgate.fullname" -}}
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

{{- define "tensorgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object but the component; KServe copies an InferenceService's labels to its
pods, so the gateway's selector names its component to never select a KServe predictor. */}}
{{- define "tensorgate.commonLabels" -}}
helm.sh/chart: {{ include "tensorgate.chart" . }}
app.kubernetes.io/name: {{ include "tensorgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tensorgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tensorgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "tensorgate.labels" -}}
{{ include "tensorgate.commonLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "tensorgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tensorgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tensorgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* "true" when more than one gateway pod may run. */}}
{{- define "tensorgate.multiReplica" -}}
{{- if or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled }}true{{ end }}
{{- end }}

{{/* "true" when the registry is the shared PostgreSQL one. */}}
{{- define "tensorgate.sharedRegistry" -}}
{{- if or .Values.registry.url .Values.registry.existingSecret.name }}true{{ end }}
{{- end }}

{{/* "true" when the chart makes the admin API key: no credential of any kind was given. */}}
{{- define "tensorgate.generateAdminKey" -}}
{{- $s := .Values.secrets }}
{{- if and $s.generateAdminKey (ne .Values.auth.mode "off") (not (or $s.existingSecret $s.apiKeysJson $s.jwtSecret .Values.auth.jwksUrl)) }}true{{ end }}
{{- end }}

{{/* The Secret holding api-keys.json, jwt-secret and model-key. */}}
{{- define "tensorgate.credentialsSecret" -}}
{{- default (include "tensorgate.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* "true" when pods mount an API key file: given, generated, or possibly in an existing Secret. */}}
{{- define "tensorgate.apiKeysFile" -}}
{{- if or .Values.secrets.existingSecret .Values.secrets.apiKeysJson (include "tensorgate.generateAdminKey" .) }}true{{ end }}
{{- end }}

{{/* "true" when the chart renders its own Secret. */}}
{{- define "tensorgate.chartSecret" -}}
{{- $s := .Values.secrets }}
{{- if or .Values.registry.url (and (not $s.existingSecret) (or $s.apiKeysJson $s.jwtSecret $s.modelKey (include "tensorgate.generateAdminKey" .))) }}true{{ end }}
{{- end }}

{{- define "tensorgate.scheme" -}}
{{- if .Values.server.tlsSecret }}https{{ else }}http{{ end }}
{{- end }}

{{/* How clients reach the gateway: the given URL, else the first ingress host, else the Service. */}}
{{- define "tensorgate.publicUrl" -}}
{{- if .Values.server.publicUrl }}
{{- .Values.server.publicUrl | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts }}
{{- printf "%s://%s" (ternary "https" "http" (gt (len .Values.ingress.tls) 0)) (first .Values.ingress.hosts).host }}
{{- else }}
{{- printf "%s://%s.%s.svc.%s:%d" (include "tensorgate.scheme" .) (include "tensorgate.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.server.httpPort) }}
{{- end }}
{{- end }}

{{/* Host names requests may address (JSON list): the Service's names, the ingress hosts and the
given ones; the pod IP is added in the Deployment, localhost and the public URL's host by serve. */}}
{{- define "tensorgate.allowedHosts" -}}
{{- $svc := include "tensorgate.fullname" . }}
{{- $hosts := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.clusterDomain) }}
{{- if .Values.ingress.enabled }}
{{- range .Values.ingress.hosts }}
{{- $hosts = append $hosts .host }}
{{- end }}
{{- end }}
{{- concat $hosts .Values.server.allowedHosts | uniq | toJson }}
{{- end }}

{{/* The in-cluster URL of a KServe model's predictor (the "<name>-predictor" Service KServe makes
in both deployment modes). Takes (dict "root" $ "name" NAME). */}}
{{- define "tensorgate.kserveUrl" -}}
{{- printf "http://%s-predictor.%s.svc.%s" .name .root.Release.Namespace .root.Values.clusterDomain }}
{{- end }}

{{- define "tensorgate.kserveConfigMap" -}}
{{- printf "%s-model-%s" (include "tensorgate.fullname" .root) .name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Refuses values that would deploy something that cannot work; rendered by the Deployment. */}}
{{- define "tensorgate.validate" -}}
{{- if and (include "tensorgate.multiReplica" .) (not (include "tensorgate.sharedRegistry" .)) }}
{{- fail "replicaCount > 1 or autoscaling.enabled needs a shared PostgreSQL registry: set registry.url (postgres://USER:PASSWORD@HOST:5432/DB) or registry.existingSecret.name. The default SQLite registry is a file inside each pod, so replicas would not see each other's registrations." }}
{{- end }}
{{- if and .Values.registry.url (not (regexMatch "^postgres(ql)?://" .Values.registry.url)) }}
{{- fail "registry.url must be a postgres:// URL; leave it empty for SQLite inside the pod" }}
{{- end }}
{{- if and .Values.state.existingClaim (include "tensorgate.multiReplica" .) }}
{{- fail "state.existingClaim is for a single replica; several replicas keep their state in the shared registry" }}
{{- end }}
{{- if not (has .Values.auth.mode (list "auto" "on" "off")) }}
{{- fail "auth.mode is auto, on or off" }}
{{- end }}
{{- $s := .Values.secrets }}
{{- if and $s.existingSecret (or $s.apiKeysJson $s.jwtSecret $s.modelKey) }}
{{- fail "give secrets.existingSecret or secrets.apiKeysJson/jwtSecret/modelKey, not both" }}
{{- end }}
{{- if and $s.jwtSecret (lt (len $s.jwtSecret) 32) }}
{{- fail "secrets.jwtSecret must be at least 32 characters (HS256 wants 256 bits)" }}
{{- end }}
{{- if and $s.jwtSecret .Values.auth.jwksUrl }}
{{- fail "give either secrets.jwtSecret or auth.jwksUrl, not both" }}
{{- end }}
{{- if and (ne .Values.auth.mode "off") (not (or $s.existingSecret $s.apiKeysJson $s.jwtSecret .Values.auth.jwksUrl (include "tensorgate.generateAdminKey" .))) }}
{{- fail "the gateway binds 0.0.0.0 and refuses to start without a credential: set secrets.apiKeysJson (--set-file secrets.apiKeysJson=api-keys.json), secrets.jwtSecret, auth.jwksUrl or secrets.existingSecret, or leave secrets.generateAdminKey true" }}
{{- end }}
{{- $repo := .Values.modelRepository }}
{{- if not (has $repo.type (list "pvc" "hostPath" "emptyDir")) }}
{{- fail "modelRepository.type is pvc, hostPath or emptyDir" }}
{{- end }}
{{- if and (eq $repo.type "pvc") (not $repo.pvc.claimName) }}
{{- fail "modelRepository.type pvc needs modelRepository.pvc.claimName" }}
{{- end }}
{{- if and (eq $repo.type "hostPath") (not $repo.hostPath.path) }}
{{- fail "modelRepository.type hostPath needs modelRepository.hostPath.path" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (not (or .Values.autoscaling.targetCPUUtilizationPercentage .Values.autoscaling.queueDepth.enabled)) }}
{{- fail "autoscaling needs a metric: targetCPUUtilizationPercentage or queueDepth.enabled" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (ne .Values.auth.mode "off") (not .Values.serviceMonitor.bearerTokenSecret.name) }}
{{- fail "serviceMonitor needs serviceMonitor.bearerTokenSecret.name: /metrics answers 401 without a credential with the monitor role" }}
{{- end }}
{{- $seen := dict }}
{{- range .Values.kserve.models }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" (.name | default "")) }}
{{- fail (printf "kserve.models: %q is not a name KServe takes (lower-case letters, digits and '-', starting with a letter)" (.name | default "")) }}
{{- end }}
{{- if gt (len .name) 53 }}
{{- fail (printf "kserve.models: %q is too long: the %s-predictor Service name must fit in 63 characters" .name .name) }}
{{- end }}
{{- if hasKey $seen .name }}
{{- fail (printf "kserve.models: %q is listed twice" .name) }}
{{- end }}
{{- $_ := set $seen .name true }}
{{- if not (or (and .predictor .predictor.model) (and .predictor .predictor.containers)) }}
{{- fail (printf "kserve.models[%s].predictor needs model (modelFormat, storageUri) or containers" .name) }}
{{- end }}
{{- if not (and .config .config.inputs .config.outputs) }}
{{- fail (printf "kserve.models[%s].config needs inputs and outputs (docs/remote.md)" .name) }}
{{- end }}
{{- end }}
{{- end }}
