{{/* The chart's name, or nameOverride. */}}
{{- define "dovetail.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: fullnameOverride, else the release's name where it
contains the chart's name, else RELEASE-NAME (as Karpenter's chart names its
objects).
*/}}
{{- define "dovetail.fullname" -}}
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

{{- define "dovetail.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "dovetail.labels" -}}
helm.sh/chart: {{ include "dovetail.chart" . }}
{{ include "dovetail.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The labels that select the controller's pods. */}}
{{- define "dovetail.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dovetail.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
An object's metadata.annotations (additionalAnnotations and `extra`), with
the newline before it, or nothing: `{{- include "dovetail.annotations" ... }}`.
*/}}
{{- define "dovetail.annotations" -}}
{{- $all := merge (dict) (.extra | default (dict)) (.root.Values.additionalAnnotations | default (dict)) }}
{{- with $all }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}

{{- define "dovetail.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dovetail.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* REPOSITORY:TAG, with @DIGEST when a digest is given. */}}
{{- define "dovetail.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag }}
{{- if .image.digest }}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Adds a labelSelector of the selector labels to a pod (anti-)affinity term or
a topology spread constraint that has none, as Karpenter's chart does.
*/}}
{{- define "dovetail.patchLabelSelector" -}}
{{- if not (hasKey ._target "labelSelector") }}
{{- $selectorLabels := (include "dovetail.selectorLabels" .) | fromYaml }}
{{- $_ := set ._target "labelSelector" (dict "matchLabels" $selectorLabels) }}
{{- end }}
{{- end }}

{{- define "dovetail.patchPodAffinity" -}}
{{- range $term := ._podAffinity.requiredDuringSchedulingIgnoredDuringExecution }}
{{- include "dovetail.patchLabelSelector" (merge (dict "_target" $term) $) }}
{{- end }}
{{- range $weighted := ._podAffinity.preferredDuringSchedulingIgnoredDuringExecution }}
{{- include "dovetail.patchLabelSelector" (merge (dict "_target" $weighted.podAffinityTerm) $) }}
{{- end }}
{{- end }}

{{/* The affinity, deep-copied (values are not changed in place), with selectors added. */}}
{{- define "dovetail.affinity" -}}
{{- $affinity := deepCopy .Values.affinity }}
{{- with $affinity.podAffinity }}
{{- include "dovetail.patchPodAffinity" (merge (dict "_podAffinity" .) $) }}
{{- end }}
{{- with $affinity.podAntiAffinity }}
{{- include "dovetail.patchPodAffinity" (merge (dict "_podAffinity" .) $) }}
{{- end }}
{{- toYaml $affinity }}
{{- end }}

{{- define "dovetail.topologySpreadConstraints" -}}
{{- $constraints := deepCopy .Values.topologySpreadConstraints }}
{{- range $constraint := $constraints }}
{{- include "dovetail.patchLabelSelector" (merge (dict "_target" $constraint) $) }}
{{- end }}
{{- toYaml $constraints }}
{{- end }}

{{/*
The value at a dotted path of .Values, and whether it is there:
(dict "found" BOOL "value" VALUE).
*/}}
{{- define "dovetail.lookupValue" -}}
{{- $v := .root.Values }}
{{- $found := true }}
{{- range $part := splitList "." .path }}
{{- if and $found (kindIs "map" $v) (hasKey $v $part) }}
{{- $v = index $v $part }}
{{- else }}
{{- $found = false }}
{{- end }}
{{- end }}
{{- toJson (dict "found" $found "value" $v) }}
{{- end }}

{{/*
The keys of Karpenter's chart values this chart takes but dovetail does not
act on (karpenter-values.yaml, "ignored"), as "KEY: REASON" lines for those
the values set.
*/}}
{{- define "dovetail.ignoredValues" -}}
{{- $ignored := (.Files.Get "karpenter-values.yaml" | fromYaml).ignored }}
{{- range $key := keys $ignored | sortAlpha }}
{{- $at := include "dovetail.lookupValue" (dict "root" $ "path" $key) | fromJson }}
{{- if $at.found }}
{{ $key }}: {{ index $ignored $key }}
{{- end }}
{{- end }}
{{- end }}

{{/* The data of the settings ConfigMap. */}}
{{- define "dovetail.settings" -}}
{{- $s := .Values.settings -}}
DOVETAIL_CLUSTER_NAME: {{ required "settings.clusterName: the EKS cluster's name is required" $s.clusterName | quote }}
{{- with $s.clusterEndpoint }}
DOVETAIL_CLUSTER_ENDPOINT: {{ . | quote }}
{{- end }}
{{- with $s.clusterCABundle }}
DOVETAIL_CLUSTER_CA_BUNDLE: {{ . | quote }}
{{- end }}
{{- with $s.region }}
DOVETAIL_REGION: {{ . | quote }}
{{- end }}
{{- with $s.interruptionQueue }}
DOVETAIL_INTERRUPTION_QUEUE: {{ . | quote }}
{{- end }}
DOVETAIL_CONFIG_REPO: "/git/current"
{{- if .Values.config.prune }}
DOVETAIL_PRUNE: "true"
{{- end }}
{{- if $s.isolatedVPC }}
DOVETAIL_ISOLATED_VPC: "true"
{{- end }}
{{- with $s.batchMaxDuration }}
DOVETAIL_BATCH_MAX_DURATION: {{ . | quote }}
{{- end }}
{{- with $s.batchIdleDuration }}
DOVETAIL_BATCH_IDLE_DURATION: {{ . | quote }}
{{- end }}
{{- with $s.preferencePolicy }}
DOVETAIL_PREFERENCE_POLICY: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $s.vmMemoryOverheadPercent) }}
{{- /* Karpenter's setting is a fraction (0.075), dovetail's flag a percentage (7.5). */}}
DOVETAIL_VM_MEMORY_OVERHEAD_PERCENT: {{ round (mulf $s.vmMemoryOverheadPercent 100) 6 | toString | quote }}
{{- end }}
{{- if not (kindIs "invalid" $s.reservedENIs) }}
DOVETAIL_RESERVED_ENIS: {{ $s.reservedENIs | toString | quote }}
{{- end }}
{{- with $s.featureGates }}
DOVETAIL_FEATURE_GATES: "ReservedCapacity={{ .reservedCapacity }},SpotToSpotConsolidation={{ .spotToSpotConsolidation }},NodeRepair={{ .nodeRepair }},NodeOverlay={{ .nodeOverlay }},StaticCapacity={{ .staticCapacity }},CapacityBuffer={{ .capacityBuffer }}"
{{- end }}
{{- with .Values.logLevel }}
DOVETAIL_LOG_LEVEL: {{ . | quote }}
{{- end }}
{{- with .Values.logFormat }}
DOVETAIL_LOG_FORMAT: {{ . | quote }}
{{- end }}
{{- end }}
