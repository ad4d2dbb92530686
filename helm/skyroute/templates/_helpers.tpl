{{/*
Chart name, truncated to the 63 characters a DNS label allows.
*/}}
{{- define "skyroute.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's resources: "<release>-<chart>", or the release name when it
already contains the chart name.
*/}}
{{- define "skyroute.fullname" -}}
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

{{- define "skyroute.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every resource.
*/}}
{{- define "skyroute.labels" -}}
helm.sh/chart: {{ include "skyroute.chart" . }}
{{ include "skyroute.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: skyroute
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels that select the release's Pods (immutable in a Deployment's selector).
*/}}
{{- define "skyroute.selectorLabels" -}}
app.kubernetes.io/name: {{ include "skyroute.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "skyroute.gateway.selectorLabels" -}}
{{ include "skyroute.selectorLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "skyroute.redis.selectorLabels" -}}
{{ include "skyroute.selectorLabels" . }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "skyroute.redis.fullname" -}}
{{- printf "%s-redis" (include "skyroute.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "skyroute.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "skyroute.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "skyroute.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Secret with the client and admin credentials.
*/}}
{{- define "skyroute.authSecretName" -}}
{{- default (printf "%s-auth" (include "skyroute.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/*
Secret with the Redis password (built-in Redis) or URL (external Redis).
*/}}
{{- define "skyroute.redisSecretName" -}}
{{- if .Values.redis.enabled }}
{{- default (printf "%s-redis" (include "skyroute.fullname" .)) .Values.redis.auth.existingSecret }}
{{- else }}
{{- default (printf "%s-redis" (include "skyroute.fullname" .)) .Values.externalRedis.existingSecret }}
{{- end }}
{{- end }}

{{- define "skyroute.policyConfigMapName" -}}
{{- default (printf "%s-policy" (include "skyroute.fullname" .)) .Values.policy.existingConfigMap }}
{{- end }}

{{- define "skyroute.cloudSecretName" -}}
{{- default (printf "%s-cloud" (include "skyroute.fullname" .)) .Values.cloud.existingSecret }}
{{- end }}

{{/*
A value kept across upgrades: the given one, else the one already in the live Secret
(lookup; empty offline, as in `helm template`), else a fresh random one.
Arguments: (list $ secretName key given).
*/}}
{{- define "skyroute.persistentSecretValue" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $key := index . 2 }}
{{- $given := index . 3 }}
{{- if $given }}
{{- $given }}
{{- else }}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace $name }}
{{- if and $existing (hasKey $existing.data $key) }}
{{- index $existing.data $key | b64dec }}
{{- else }}
{{- randAlphaNum 40 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Environment of both containers: Redis and policy location. SKYROUTE_REDIS_URL is built from
the password Secret for the built-in Redis ($(VAR) expansion of an earlier variable), or read
from the URL Secret for an external one.
*/}}
{{- define "skyroute.sharedEnv" -}}
{{- if .Values.redis.enabled }}
- name: SKYROUTE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "skyroute.redisSecretName" . }}
      key: {{ .Values.redis.auth.passwordKey }}
- name: SKYROUTE_REDIS_URL
  value: "redis://:$(SKYROUTE_REDIS_PASSWORD)@{{ include "skyroute.redis.fullname" . }}:6379/0"
{{- else }}
- name: SKYROUTE_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "skyroute.redisSecretName" . }}
      key: {{ .Values.externalRedis.urlKey }}
{{- end }}
- name: SKYROUTE_REDIS_PREFIX
  value: {{ .Values.gateway.config.redisPrefix | quote }}
- name: SKYROUTE_POLICY
  value: {{ printf "%s/%s" (trimSuffix "/" .Values.policy.mountPath) .Values.policy.fileName | quote }}
{{- end }}

{{/*
The store's URL (SKYROUTE_DATABASE_URL), for the gateway and the store worker alike.
*/}}
{{- define "skyroute.databaseEnv" -}}
- name: SKYROUTE_DATABASE_URL
  {{- if .Values.database.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.urlKey }}
  {{- else }}
  value: {{ .Values.database.url | quote }}
  {{- end }}
{{- end }}

{{/*
Checks that fail the render with a clear message instead of deploying something that
cannot work.
*/}}
{{- define "skyroute.validate" -}}
{{- if and (not .Values.redis.enabled) (not .Values.externalRedis.url) (not .Values.externalRedis.existingSecret) }}
{{- fail "redis.enabled is false: set externalRedis.url or externalRedis.existingSecret (without a Redis URL every gateway replica would start its own embedded Redis)" }}
{{- end }}
{{- if and .Values.redis.enabled (or .Values.externalRedis.url .Values.externalRedis.existingSecret) }}
{{- fail "externalRedis is set while redis.enabled is true: choose one" }}
{{- end }}
{{- $g := .Values.gateway }}
{{- if le (float64 $g.terminationGracePeriodSeconds) (addf $g.config.drainDelayS $g.config.shutdownTimeoutS) }}
{{- fail "gateway.terminationGracePeriodSeconds must exceed gateway.config.drainDelayS + gateway.config.shutdownTimeoutS, or the kubelet kills streams the gateway is still finishing" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- end }}
