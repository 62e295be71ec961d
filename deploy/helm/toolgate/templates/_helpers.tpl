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
{{- /* Go refuses a GOMEMLIMIT it cannot read at start: every pod would
  crash-loop on a quantity written the Kubernetes way (450Mi). */}}
{{- $limits := dict }}
{{- if .Values.goMemLimit }}{{ $_ := set $limits "goMemLimit" .Values.goMemLimit }}{{ end }}
{{- if hasKey (.Values.env | default dict) "GOMEMLIMIT" }}{{ $_ := set $limits "env.GOMEMLIMIT" .Values.env.GOMEMLIMIT }}{{ end }}
{{- range $key, $v := $limits }}
{{- if kindIs "float64" $v }}{{ $v = int64 $v }}{{ end }}
{{- if not (regexMatch "^(off|[0-9]+(B|KiB|MiB|GiB|TiB)?)$" (toString $v)) }}
{{- fail (printf "%s %q: Go reads GOMEMLIMIT as off or a whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB (450MiB, not 450Mi); the bot would not start" $key (toString $v)) }}
{{- end }}
{{- end }}
{{- if .Values.secrets.existingSecret }}
{{- if .Values.redis.url }}
{{- fail "redis.url cannot be used with secrets.existingSecret: put REDIS_URL in that secret and set redis.existingSecretKey" }}
{{- end }}
{{- else }}
{{- /* The bot's rule (cmd/bot/config.go): a token or key with spaces or
  a line break at either end (a file given to --set-file keeps its last
  line's end) makes it exit at start. */}}
{{- range $key := list "slackAppToken" "slackBotToken" "openaiApiKey" }}
{{- $v := toString (get $.Values.secrets $key) }}
{{- if ne (trim $v) $v }}
{{- fail (printf "secrets.%s has spaces or a line break at its start or end (a file given to --set-file keeps its line's end: remove it); the bot would not start" $key) }}
{{- end }}
{{- end }}
{{- if not (hasPrefix "xapp-" .Values.secrets.slackAppToken) }}
{{- fail "secrets.slackAppToken must be the app-level token (xapp-…), or set secrets.existingSecret" }}
{{- end }}
{{- if not (hasPrefix "xoxb-" .Values.secrets.slackBotToken) }}
{{- fail "secrets.slackBotToken must be the bot token (xoxb-…), or set secrets.existingSecret" }}
{{- end }}
{{- if .Values.redis.existingSecretKey }}
{{- fail "redis.existingSecretKey needs secrets.existingSecret; without one, set redis.url" }}
{{- end }}
{{- /* The bot's rule (cmd/bot/config.go): no key on OpenAI's own endpoint
  is an error. OPENAI_BASE_URL from secretEnv or envFrom cannot be seen:
  trust it. */}}
{{- $baseURL := trimSuffix "/" (toString (default "https://api.openai.com/v1" (get (.Values.env | default dict) "OPENAI_BASE_URL"))) }}
{{- if and (not .Values.secrets.openaiApiKey) (eq $baseURL "https://api.openai.com/v1") (not (hasKey (.Values.secretEnv | default dict) "OPENAI_BASE_URL")) (not .Values.envFrom) }}
{{- fail "secrets.openaiApiKey is required for https://api.openai.com/v1 (the bot exits with \"OPENAI_API_KEY is required\" otherwise); for a server that needs no key, set env.OPENAI_BASE_URL" }}
{{- end }}
{{- /* Azure OpenAI (OPENAI_API_VERSION set, or a host under
  openai.azure.com) always needs a key: the bot exits without one. */}}
{{- if and (not .Values.secrets.openaiApiKey) (not .Values.envFrom) (or (get (.Values.env | default dict) "OPENAI_API_VERSION") (regexMatch "(?i)^https?://[^/?#]*[.]openai[.]azure[.]com(:[0-9]+)?([/?#]|$)" $baseURL)) }}
{{- fail "secrets.openaiApiKey is required for Azure OpenAI (the bot exits with \"OPENAI_API_KEY is required for Azure OpenAI\" otherwise)" }}
{{- end }}
{{- end }}
{{- if and .Values.config .Values.existingConfigMap }}
{{- fail "set config or existingConfigMap, not both" }}
{{- end }}
{{- range $k, $v := .Values.env }}
{{- if kindIs "invalid" $v }}
{{- fail (printf "env.%s is empty (null, as YAML reads a key with nothing after it): leave it out for the bot's default, or quote the value (\"\")" $k) }}
{{- end }}
{{- if kindIs "slice" $v }}
{{- fail (printf "env.%s is a list: write it as one string, such as %q (the bot reads lists comma-separated)" $k (join "," $v)) }}
{{- end }}
{{- if kindIs "map" $v }}
{{- fail (printf "env.%s is a map: env values are strings, numbers or booleans" $k) }}
{{- end }}
{{- if has $k (list "SLACK_APP_TOKEN" "SLACK_BOT_TOKEN" "OPENAI_API_KEY" "REDIS_URL") }}
{{- fail (printf "env.%s: secrets go in secrets or redis, not env" $k) }}
{{- end }}
{{- if has $k (list "OTEL_EXPORTER_OTLP_HEADERS" "OTEL_EXPORTER_OTLP_TRACES_HEADERS") }}
{{- fail (printf "env.%s carries credentials: put it in secretEnv (%s: {secret: …, key: …}), not in the Deployment" $k $k) }}
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
{{- range .Values.extraVolumes }}
{{- if has .name (list "data" "workspace" "tmp" "config") }}
{{- fail (printf "extraVolumes: %q is a volume of the chart's (data, workspace, tmp, config): name yours otherwise" .name) }}
{{- end }}
{{- end }}
{{- if not .Values.image.repository }}
{{- fail "image.repository is required: build and push the image (docker build -t registry.example.com/toolgate:1.0.0 .), then set image.repository and image.tag; see the README's Kubernetes section" }}
{{- end }}
{{- end }}

{{/* The update strategy: RollingUpdate with Redis, unless updateStrategy
  says Recreate or a workspace claim is mounted and updateStrategy is empty
  (a ReadWriteOnce claim would keep the surge pod from starting, and the
  old one stops only once it is up). */}}
{{- define "toolgate.updateStrategy" -}}
{{- if not (include "toolgate.redis" .) }}Recreate
{{- else if .Values.updateStrategy }}{{ .Values.updateStrategy }}
{{- else if .Values.workspace.existingClaim }}Recreate
{{- else }}RollingUpdate
{{- end }}
{{- end }}

{{/* The image's tag: image.tag, else the chart's appVersion. A number in
  a values file is a float by the time the chart reads it (20240101 is
  2.0240101e+07, 1.10 is 1.1), which cannot be written back as it was:
  refused, to be quoted. */}}
{{- define "toolgate.imageTag" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if kindIs "float64" $tag }}
{{- fail (printf "image.tag %v is a number in the values, which cannot be read back as written: quote it (tag: \"...\")" $tag) }}
{{- end }}
{{- $tag }}
{{- end }}

{{/* GOMEMLIMIT, or empty for none: goMemLimit as written, else 90% of
  resources.limits.memory in bytes when the chart can read the quantity
  (digits with an optional fraction and a suffix from k to E or Ki to Ei),
  else "fieldRef": the limit itself, from the API. */}}
{{- define "toolgate.goMemLimit" -}}
{{- $mem := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ $mem = .memory }}{{ end }}{{ end }}
{{- if .Values.goMemLimit }}
{{- if kindIs "float64" .Values.goMemLimit }}{{ int64 .Values.goMemLimit }}{{ else }}{{ .Values.goMemLimit }}{{ end }}
{{- else if $mem }}
{{- /* A values file's numbers are floats: 536870912 would be "5.36870912e+08". */}}
{{- if kindIs "float64" $mem }}{{ $mem = int64 $mem }}{{ end }}
{{- $q := toString $mem }}
{{- if regexMatch "^[0-9]+([.][0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" $q }}
{{- $num := regexReplaceAll "(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)$" $q "" }}
{{- $suffix := trimPrefix $num $q }}
{{- $mult := get (dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "E" 1000000000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976) $suffix }}
{{- $bytes := int64 (floor (mulf (float64 $num) $mult)) }}
{{- if gt $bytes 0 }}{{ div (mul $bytes 9) 10 }}{{ end }}
{{- else }}fieldRef
{{- end }}
{{- end }}
{{- end }}
