{{/* Chart name, possibly overridden. */}}
{{- define "gpuplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
Base name of every object: the release name, prefixed with the chart name
unless the release name already contains it. At most 40 characters, so that
"-server-grpc" and the like still fit in a 63-character name.
*/}}
{{- define "gpuplane.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuplane.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "gpuplane.labels" -}}
helm.sh/chart: {{ include "gpuplane.chart" . }}
app.kubernetes.io/name: {{ include "gpuplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuplane
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: pass (dict "ctx" $ "component" "server"). */}}
{{- define "gpuplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuplane.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuplane.componentLabels" -}}
{{ include "gpuplane.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuplane.serverServiceAccount" -}}
{{- default (printf "%s-server" (include "gpuplane.fullname" .)) .Values.server.serviceAccount.name -}}
{{- end -}}
{{- define "gpuplane.workerServiceAccount" -}}
{{- default (printf "%s-worker" (include "gpuplane.fullname" .)) .Values.worker.serviceAccount.name -}}
{{- end -}}
{{- define "gpuplane.migrateServiceAccount" -}}
{{- default (printf "%s-migrate" (include "gpuplane.fullname" .)) .Values.migrations.serviceAccount.name -}}
{{- end -}}

{{/*
A component's ServiceAccount: pass (dict "ctx" $ "component" "server"
"name" <name> "sa" <component>.serviceAccount "hook" <bool>).
*/}}
{{- define "gpuplane.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "gpuplane.componentLabels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
  {{- if or .sa.annotations .hook }}
  annotations:
    {{- if .hook }}
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-weight: "-10"
    helm.sh/hook-delete-policy: before-hook-creation
    {{- end }}
    {{- with .sa.annotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
automountServiceAccountToken: false
{{- end -}}

{{/*
A component's HorizontalPodAutoscaler: pass (dict "ctx" $ "component"
"server" "autoscaling" <component>.autoscaling).
*/}}
{{- define "gpuplane.hpa" -}}
{{- $a := .autoscaling -}}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "gpuplane.fullname" .ctx }}-{{ .component }}
  namespace: {{ .ctx.Release.Namespace }}
  labels:
    {{- include "gpuplane.componentLabels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "gpuplane.fullname" .ctx }}-{{ .component }}
  minReplicas: {{ $a.minReplicas }}
  maxReplicas: {{ $a.maxReplicas }}
  {{- if not (or $a.targetCPUUtilizationPercentage $a.targetMemoryUtilizationPercentage) }}
  {{- fail (printf "%s.autoscaling: set targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" .component) }}
  {{- end }}
  metrics:
    {{- range $resource, $target := dict "cpu" $a.targetCPUUtilizationPercentage "memory" $a.targetMemoryUtilizationPercentage }}
    {{- if $target }}
    - type: Resource
      resource:
        name: {{ $resource }}
        target:
          type: Utilization
          averageUtilization: {{ $target }}
    {{- end }}
    {{- end }}
{{- end -}}

{{/*
The extra volume mounts, envFrom and volumes every gpuplane container and
pod gets (values extraVolumeMounts, extraEnvFrom, extraVolumes).
*/}}
{{- define "gpuplane.extraVolumeMounts" -}}
{{- with .Values.extraVolumeMounts }}{{ toYaml . }}{{ end -}}
{{- end -}}
{{- define "gpuplane.extraVolumes" -}}
{{- with .Values.extraVolumes }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{- define "gpuplane.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/*
Security contexts: the restricted Pod Security profile (the image runs as
the distroless "nonroot" user, 65532) with podSecurityContext and
containerSecurityContext merged over it.
*/}}
{{- define "gpuplane.podSecurityContext" -}}
{{- toYaml (mergeOverwrite (include "gpuplane.podSecurityContextDefaults" . | fromYaml) (deepCopy .Values.podSecurityContext)) -}}
{{- end -}}
{{- define "gpuplane.containerSecurityContext" -}}
{{- toYaml (mergeOverwrite (include "gpuplane.containerSecurityContextDefaults" . | fromYaml) (deepCopy .Values.containerSecurityContext)) -}}
{{- end -}}
{{- define "gpuplane.podSecurityContextDefaults" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "gpuplane.containerSecurityContextDefaults" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* DATABASE_URL, always from the existing Secret, which must be named. */}}
{{- define "gpuplane.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret is required: create a Secret holding the PostgreSQL URL (kubectl create secret generic gpuplane-database --from-literal=url='postgres://...') and set --set database.existingSecret=gpuplane-database" .Values.database.existingSecret }}
      key: {{ .Values.database.key }}
{{- end -}}

{{/* A setting from its plain value, else from a Secret key, else nothing. */}}
{{- define "gpuplane.valueOrSecret" -}}
{{- if .value }}
- name: {{ .env }}
  value: {{ .value | quote }}
{{- else if and .secret .key }}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end }}
{{- end -}}

{{/*
OIDC settings besides the claims (which are in the ConfigMap): the API
server verifies tokens with them, the worker configures virtual API
servers with them.
*/}}
{{- define "gpuplane.oidcEnv" -}}
{{- $oidc := .Values.oidc -}}
{{- with include "gpuplane.valueOrSecret" (dict "env" "GPUPLANE_OIDC_ISSUER_URL" "value" $oidc.issuerURL "secret" $oidc.existingSecret "key" $oidc.issuerURLKey) | trim }}
{{ . }}
{{- end }}
{{- with include "gpuplane.valueOrSecret" (dict "env" "GPUPLANE_OIDC_CLIENT_ID" "value" $oidc.clientID "secret" $oidc.existingSecret "key" $oidc.clientIDKey) | trim }}
{{ . }}
{{- end }}
{{- if or $oidc.caBundle.configMap $oidc.caBundle.secret }}
- name: GPUPLANE_OIDC_CA_FILE
  value: /etc/gpuplane/oidc-ca/{{ $oidc.caBundle.key }}
{{- end }}
{{- end -}}
{{- define "gpuplane.oidcVolumeMount" -}}
{{- $ca := .Values.oidc.caBundle -}}
{{- if or $ca.configMap $ca.secret }}
- name: oidc-ca
  mountPath: /etc/gpuplane/oidc-ca
  readOnly: true
{{- end }}
{{- end -}}
{{- define "gpuplane.oidcVolume" -}}
{{- $ca := .Values.oidc.caBundle -}}
{{- if $ca.configMap }}
- name: oidc-ca
  configMap:
    name: {{ $ca.configMap }}
    items:
      - key: {{ $ca.key }}
        path: {{ $ca.key }}
{{- else if $ca.secret }}
- name: oidc-ca
  secret:
    secretName: {{ $ca.secret }}
    items:
      - key: {{ $ca.key }}
        path: {{ $ca.key }}
{{- end }}
{{- end -}}

{{/*
Host cluster access: in-cluster by default; with a kubeconfig Secret,
KUBECONFIG points at the mounted file.
*/}}
{{- define "gpuplane.hostClusterEnv" -}}
{{- if .Values.hostCluster.kubeconfigSecret.name }}
- name: KUBECONFIG
  value: /etc/gpuplane/host-cluster/{{ .Values.hostCluster.kubeconfigSecret.key }}
{{- end }}
{{- end -}}
{{- define "gpuplane.hostClusterVolumeMount" -}}
{{- if .Values.hostCluster.kubeconfigSecret.name }}
- name: host-kubeconfig
  mountPath: /etc/gpuplane/host-cluster
  readOnly: true
{{- end }}
{{- end -}}
{{- define "gpuplane.hostClusterVolume" -}}
{{- if .Values.hostCluster.kubeconfigSecret.name }}
- name: host-kubeconfig
  secret:
    secretName: {{ .Values.hostCluster.kubeconfigSecret.name }}
    items:
      - key: {{ .Values.hostCluster.kubeconfigSecret.key }}
        path: {{ .Values.hostCluster.kubeconfigSecret.key }}
{{- end }}
{{- end -}}

{{/*
Helm (inside the worker) keeps its repository cache and registry
configuration under these directories; the root filesystem is read-only,
so they live on the /tmp emptyDir.
*/}}
{{- define "gpuplane.scratchEnv" -}}
- name: HOME
  value: /tmp
- name: XDG_CACHE_HOME
  value: /tmp/.cache
- name: HELM_CACHE_HOME
  value: /tmp/helm/cache
- name: HELM_CONFIG_HOME
  value: /tmp/helm/config
- name: HELM_DATA_HOME
  value: /tmp/helm/data
{{- end -}}

{{/* Default anti-affinity: spread replicas of one component over nodes. */}}
{{- define "gpuplane.affinity" -}}
{{- if .affinity -}}
{{ toYaml .affinity }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gpuplane.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* A map as "k=v,k2=v2" (sorted keys), for list-valued GPUPLANE_* variables. */}}
{{- define "gpuplane.keyValues" -}}
{{- $out := list -}}
{{- range $k, $v := . -}}
{{- $out = append $out (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}
