{{/* The chart's name. */}}
{{- define "toolgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, used for every object. */}}
{{- define "toolgate.fullname" -}}
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

{{- define "toolgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "toolgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "toolgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Secret holding the tokens. */}}
{{- define "toolgate.secretName" -}}
{{- default (include "toolgate.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* "true" when the bot uses Redis, else empty. */}}
{{- define "toolgate.redis" -}}
{{- if or .Values.redis.url (and .Values.secrets.existingSecret .Values.redis.existingSecretKey) }}true{{ end }}
{{- end }}

{{/* The ConfigMap holding config.yaml, or empty for none. */}}
{{- define "toolgate.configMapName" -}}
{{- if .Values.existingConfigMap }}{{ .Values.existingConfigMap }}{{ else if .Values.config }}{{ include "toolgate.fullname" . }}{{ end }}
{{- end }}

{{/* Refuses values that cannot work, with a message saying what to change. */}}
{{- define "toolgate.validate" -}}
{{- if gt (int .Values.replicaCount) 8 }}
{{- fail (printf "replicaCount %d: Slack allows an app 10 Socket Mode connections, and each replica holds one, two while it replaces one, with one more pod during a rolling update; run at most 8" (int .Values.replicaCount)) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.workspace.existingClaim) .Values.config }}
{{- $builtins := (fromYaml .Values.config).builtin_tools }}
{{- if and (kindIs "map" $builtins) (hasKey $builtins "workspace") }}
{{- fail (printf "replicaCount %d with the workspace tools: each pod would have its own /workspace, so a call could be previewed on one pod's files and run on another's. Set workspace.existingClaim to a ReadWriteMany claim, or replicaCount: 1" (int .Values.replicaCount)) }}
{{- end }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not (include "toolgate.redis" .)) }}
{{- fail (printf "replicaCount %d needs Redis: the embedded store is a file one process owns. Set redis.url (or redis.existingSecretKey with secrets.existingSecret), or replicaCount: 1" (int .Values.replicaCount)) }}
{{- end }}
{{- if .Values.secrets.existingSecret }}
{{- if .Values.redis.url }}
{{- fail "redis.url cannot be used with secrets.existingSecret: put REDIS_URL in that secret and set redis.existingSecretKey" }}
{{- end }}
{{- else }}
{{- if not (hasPrefix "xapp-" .Values.secrets.slackAppToken) }}
{{- fail "secrets.slackAppToken must be the app-level token (xapp-…), or set secrets.existingSecret" }}
{{- end }}
{{- if not (hasPrefix "xoxb-" .Values.secrets.slackBotToken) }}
{{- fail "secrets.slackBotToken must be the bot token (xoxb-…), or set secrets.existingSecret" }}
{{- end }}
{{- if .Values.redis.existingSecretKey }}
{{- fail "redis.existingSecretKey needs secrets.existingSecret; without one, set redis.url" }}
{{- end }}
{{- end }}
{{- if and .Values.config .Values.existingConfigMap }}
{{- fail "set config or existingConfigMap, not both" }}
{{- end }}
{{- range $k, $v := .Values.env }}
{{- if has $k (list "SLACK_APP_TOKEN" "SLACK_BOT_TOKEN" "OPENAI_API_KEY" "REDIS_URL") }}
{{- fail (printf "env.%s: secrets go in secrets or redis, not env" $k) }}
{{- end }}
{{- if has $k (list "SHUTDOWN_GRACE" "HTTP_ADDR" "DATA_DIR" "CONFIG_FILE") }}
{{- fail (printf "env.%s is set by the chart (see shutdownGraceSeconds, config)" $k) }}
{{- end }}
{{- end }}
{{- range $k, $v := .Values.secretEnv }}
{{- if has $k (list "SLACK_APP_TOKEN" "SLACK_BOT_TOKEN" "OPENAI_API_KEY" "REDIS_URL" "SHUTDOWN_GRACE" "HTTP_ADDR" "DATA_DIR" "CONFIG_FILE") }}
{{- fail (printf "secretEnv.%s is set by the chart (see secrets, redis, shutdownGraceSeconds, config)" $k) }}
{{- end }}
{{- if hasKey $.Values.env $k }}
{{- fail (printf "%s is in both env and secretEnv" $k) }}
{{- end }}
{{- if not (and (kindIs "map" $v) $v.secret $v.key) }}
{{- fail (printf "secretEnv.%s needs secret (a Secret's name) and key" $k) }}
{{- end }}
{{- end }}
{{- if not (has .Values.updateStrategy (list "" "RollingUpdate" "Recreate")) }}
{{- fail (printf "updateStrategy %q: RollingUpdate or Recreate" .Values.updateStrategy) }}
{{- end }}
{{- if and (eq .Values.updateStrategy "RollingUpdate") (not (include "toolgate.redis" .)) }}
{{- fail "updateStrategy RollingUpdate needs Redis: the embedded store's file is owned by one process" }}
{{- end }}
{{- if lt (int .Values.shutdownGraceSeconds) 1 }}
{{- fail "shutdownGraceSeconds must be at least 1" }}
{{- end }}
{{- if lt (int .Values.terminationExtraSeconds) 30 }}
{{- fail "terminationExtraSeconds must be at least 30: after the grace the bot tells threads (6s), stops Socket Mode (5s), its HTTP server (5s) and its MCP servers (5s), flushes traces (5s) and closes the store" }}
{{- end }}
{{- end }}
