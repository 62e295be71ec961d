package charttest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "../toolgate"

// testImage is the image repository the tests render the chart with.
const testImage = "registry.example.com/toolgate"

// render renders the chart with the values of valuesFile (relative to the
// chart, "" for none) overlaid with set, and returns the manifests by
// template file name, leaving out empty ones.
func render(t *testing.T, valuesFile string, set map[string]any) (map[string]string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals := map[string]any{}
	if valuesFile != "" {
		data, err := os.ReadFile(filepath.Join(chartDir, valuesFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &vals); err != nil {
			t.Fatalf("%s: %v", valuesFile, err)
		}
	}
	if valuesFile == "" {
		// The chart has no default image (users build their own); the ci
		// values files name one, as an install must.
		vals["image"] = map[string]any{"repository": testImage}
	}
	for k, v := range set {
		vals[k] = v
	}
	rv, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: "tg", Namespace: "ops", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	out, err := engine.Render(chrt, rv)
	if err != nil {
		return nil, err
	}
	manifests := map[string]string{}
	for name, m := range out {
		if strings.TrimSpace(m) != "" && !strings.HasSuffix(name, "NOTES.txt") {
			manifests[filepath.Base(name)] = m
		}
	}
	return manifests, nil
}

func mustRender(t *testing.T, valuesFile string, set map[string]any) map[string]string {
	t.Helper()
	m, err := render(t, valuesFile, set)
	if err != nil {
		t.Fatalf("render %s with %v: %v", valuesFile, set, err)
	}
	return m
}

func deployment(t *testing.T, m map[string]string) appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(m["deployment.yaml"]), &d); err != nil {
		t.Fatalf("deployment.yaml: %v\n%s", err, m["deployment.yaml"])
	}
	return d
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestEmbeddedStore(t *testing.T) {
	m := mustRender(t, "ci/embedded-values.yaml", nil)
	d := deployment(t, m)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %d, strategy %s: want 1 and Recreate (the store file has one owner)", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if e := env(c, "REDIS_URL"); e != nil {
		t.Errorf("REDIS_URL set without Redis: %+v", e)
	}
	if _, ok := m["pvc.yaml"]; !ok {
		t.Error("no PersistentVolumeClaim for the embedded store")
	}
	var pvcUsed bool
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "data" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "tg-toolgate" {
			pvcUsed = true
		}
	}
	if !pvcUsed {
		t.Errorf("the data volume is not the claim: %+v", d.Spec.Template.Spec.Volumes)
	}
	for _, name := range []string{"SLACK_APP_TOKEN", "SLACK_BOT_TOKEN", "OPENAI_API_KEY"} {
		e := env(c, name)
		if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "tg-toolgate" || e.ValueFrom.SecretKeyRef.Key != name {
			t.Errorf("%s is not read from the chart's secret: %+v", name, e)
		}
	}
	var secret corev1.Secret
	if err := yaml.UnmarshalStrict([]byte(m["secret.yaml"]), &secret); err != nil {
		t.Fatalf("secret.yaml: %v", err)
	}
	if secret.StringData["SLACK_BOT_TOKEN"] != "xoxb-test" || secret.StringData["SLACK_APP_TOKEN"] != "xapp-1-test" {
		t.Errorf("secret data %v", secret.StringData)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(m["configmap.yaml"]), &cm); err != nil {
		t.Fatalf("configmap.yaml: %v", err)
	}
	var cfg struct {
		Policy struct {
			Rules []map[string]any `json:"rules"`
		} `json:"policy"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil || len(cfg.Policy.Rules) != 1 {
		t.Errorf("config.yaml in the ConfigMap = %q (%v), want the values' policy", cm.Data["config.yaml"], err)
	}
	if e := env(c, "CONFIG_FILE"); e == nil || e.Value != "/config/config.yaml" {
		t.Errorf("CONFIG_FILE = %+v, want /config/config.yaml", e)
	}
	if e := env(c, "ADMIN_USERS"); e == nil || e.Value != "U01ABCDEF" {
		t.Errorf("ADMIN_USERS = %+v, want the env value", e)
	}
	if _, ok := m["servicemonitor.yaml"]; ok {
		t.Error("a ServiceMonitor although it is off by default")
	}
}

func TestRedisReplicas(t *testing.T) {
	m := mustRender(t, "ci/redis-values.yaml", nil)
	d := deployment(t, m)
	if *d.Spec.Replicas != 3 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("replicas %d, strategy %s: want 3 and RollingUpdate", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	// An upgrade that must replace every replica at once can.
	if d := deployment(t, mustRender(t, "ci/redis-values.yaml", map[string]any{"updateStrategy": "Recreate"})); d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("updateStrategy Recreate: strategy %s, want Recreate", d.Spec.Strategy.Type)
	}
	// Secrets the config file names reach the bot from Secrets, not as
	// values in the Deployment.
	sd := deployment(t, mustRender(t, "ci/redis-values.yaml", map[string]any{"secretEnv": map[string]any{"GITHUB_TOKEN": map[string]any{"secret": "toolgate-mcp", "key": "gh"}}}))
	if e := env(sd.Spec.Template.Spec.Containers[0], "GITHUB_TOKEN"); e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "toolgate-mcp" || e.ValueFrom.SecretKeyRef.Key != "gh" {
		t.Errorf("GITHUB_TOKEN = %+v, want it from the Secret toolgate-mcp, key gh", e)
	}
	if !strings.Contains(m["pdb.yaml"], "unhealthyPodEvictionPolicy: AlwaysAllow") {
		t.Errorf("pdb.yaml lets no drain evict replicas that are all unready:\n%s", m["pdb.yaml"])
	}
	c := d.Spec.Template.Spec.Containers[0]
	e := env(c, "REDIS_URL")
	if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != "toolgate-tokens" || e.ValueFrom.SecretKeyRef.Key != "REDIS_URL" {
		t.Errorf("REDIS_URL = %+v, want it from the existing secret", e)
	}
	if e := env(c, "SLACK_BOT_TOKEN"); e == nil || e.ValueFrom.SecretKeyRef.Name != "toolgate-tokens" {
		t.Errorf("SLACK_BOT_TOKEN = %+v, want it from the existing secret", e)
	}
	for _, f := range []string{"secret.yaml", "pvc.yaml", "configmap.yaml"} {
		if _, ok := m[f]; ok {
			t.Errorf("%s rendered, want none (existing secret and ConfigMap, Redis store)", f)
		}
	}
	var cmUsed bool
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil && v.ConfigMap.Name == "toolgate-config" {
			cmUsed = true
		}
	}
	if !cmUsed {
		t.Error("the existing ConfigMap is not mounted")
	}
	for _, f := range []string{"servicemonitor.yaml", "pdb.yaml", "service.yaml"} {
		if _, ok := m[f]; !ok {
			t.Errorf("no %s", f)
		}
	}
	if !strings.Contains(m["servicemonitor.yaml"], "release: prometheus") || !strings.Contains(m["servicemonitor.yaml"], "path: /metrics") {
		t.Errorf("servicemonitor.yaml:\n%s", m["servicemonitor.yaml"])
	}
}

// Every values file: probes, security, resources and a termination grace
// longer than the bot's.
func TestPodShape(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if len(files) < 3 {
		t.Fatalf("values files %q, want at least 3", files)
	}
	for _, f := range files {
		rel, _ := filepath.Rel(chartDir, f)
		t.Run(rel, func(t *testing.T) {
			d := deployment(t, mustRender(t, rel, nil))
			spec := d.Spec.Template.Spec
			c := spec.Containers[0]
			if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "http" {
				t.Errorf("liveness probe %+v, want GET /healthz on http", p)
			}
			if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
				t.Errorf("readiness probe %+v, want GET /readyz", p)
			}
			if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 {
				t.Errorf("ports %+v, want http 8080", c.Ports)
			}
			if e := env(c, "HTTP_ADDR"); e == nil || e.Value != ":8080" {
				t.Errorf("HTTP_ADDR = %+v, want :8080", e)
			}
			psc, sc := spec.SecurityContext, c.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("security contexts %+v / %+v, want non-root, no escalation, read-only root, no capabilities", psc, sc)
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v, want memory requests and limits", c.Resources)
			}
			grace := env(c, "SHUTDOWN_GRACE")
			if grace == nil {
				t.Fatal("SHUTDOWN_GRACE not set")
			}
			g, err := time.ParseDuration(grace.Value)
			if err != nil {
				t.Fatalf("SHUTDOWN_GRACE %q: %v", grace.Value, err)
			}
			if tg := spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second < g+30*time.Second {
				t.Errorf("terminationGracePeriodSeconds %v, want at least SHUTDOWN_GRACE %v + 30s", tg, g)
			}
			if p := c.ReadinessProbe; p == nil || p.TimeoutSeconds < 4 {
				t.Errorf("readiness probe %+v, want a timeout past /readyz's 3s store check", p)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Error("the service account token is mounted; the bot needs none")
			}
			for _, v := range []string{"/data", "/tmp", "/workspace"} {
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == v }) {
					t.Errorf("no writable volume at %s on the read-only root", v)
				}
			}
		})
	}
}

func TestRefusedValues(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	noKey := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1"}
	tests := []struct {
		name string
		set  map[string]any
		want string
	}{
		{"replicas without redis", map[string]any{"replicaCount": 2, "secrets": tokens}, "replicaCount 2 needs Redis"},
		{"replicas with the workspace tools on each pod's disk", map[string]any{"replicaCount": 2, "secrets": tokens, "redis": map[string]any{"url": "redis://r:6379"}, "config": "builtin_tools:\n  workspace: {root: /workspace}\n"}, "replicaCount 2 with the workspace tools"},
		{"more replicas than Slack has connections for", map[string]any{"replicaCount": 9, "secrets": tokens, "redis": map[string]any{"url": "redis://r:6379"}}, "replicaCount 9: Slack allows an app 10 Socket Mode connections"},
		{"replicas with an existing secret but no redis key", map[string]any{"replicaCount": 2, "secrets": map[string]any{"existingSecret": "s"}}, "needs Redis"},
		{"a memory limit Go cannot read", map[string]any{"secrets": tokens, "goMemLimit": "450Mi"}, `goMemLimit "450Mi": Go reads GOMEMLIMIT as off or a whole number of bytes`},
		{"a memory limit in env Go cannot read", map[string]any{"secrets": tokens, "env": map[string]any{"GOMEMLIMIT": "0.5GiB"}}, `env.GOMEMLIMIT "0.5GiB"`},
		{"no tokens", nil, "secrets.slackAppToken must be the app-level token"},
		{"a token with its file's line end", map[string]any{"secrets": map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1\n"}}, "secrets.slackBotToken has spaces or a line break at its start or end"},
		{"a key with a space", map[string]any{"secrets": map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": " sk-1"}}, "secrets.openaiApiKey has spaces or a line break"},
		{"bot token of the wrong kind", map[string]any{"secrets": map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxp-1"}}, "secrets.slackBotToken must be the bot token"},
		{"redis url with an existing secret", map[string]any{"secrets": map[string]any{"existingSecret": "s"}, "redis": map[string]any{"url": "redis://r:6379"}}, "redis.url cannot be used with secrets.existingSecret"},
		{"redis key without an existing secret", map[string]any{"secrets": tokens, "redis": map[string]any{"existingSecretKey": "URL"}}, "redis.existingSecretKey needs secrets.existingSecret"},
		{"a token in env", map[string]any{"secrets": tokens, "env": map[string]any{"SLACK_BOT_TOKEN": "xoxb-2"}}, "env.SLACK_BOT_TOKEN: secrets go in secrets"},
		{"shutdown grace in env", map[string]any{"secrets": tokens, "env": map[string]any{"SHUTDOWN_GRACE": "10s"}}, "env.SHUTDOWN_GRACE is set by the chart"},
		{"config twice", map[string]any{"secrets": tokens, "config": "policy: {}", "existingConfigMap": "c"}, "not both"},
		{"no room after the grace", map[string]any{"secrets": tokens, "terminationExtraSeconds": 15}, "terminationExtraSeconds must be at least 30"},
		{"rolling update of the embedded store", map[string]any{"secrets": tokens, "updateStrategy": "RollingUpdate"}, "updateStrategy RollingUpdate needs Redis"},
		{"an unknown update strategy", map[string]any{"secrets": tokens, "updateStrategy": "BlueGreen"}, `updateStrategy "BlueGreen"`},
		{"a token in secretEnv", map[string]any{"secrets": tokens, "secretEnv": map[string]any{"SLACK_BOT_TOKEN": map[string]any{"secret": "s", "key": "k"}}}, "secretEnv.SLACK_BOT_TOKEN is set by the chart"},
		{"secretEnv without a key", map[string]any{"secrets": tokens, "secretEnv": map[string]any{"GITHUB_TOKEN": map[string]any{"secret": "s"}}}, "secretEnv.GITHUB_TOKEN needs secret"},
		{"a setting in env and secretEnv", map[string]any{"secrets": tokens, "env": map[string]any{"GITHUB_TOKEN": "x"}, "secretEnv": map[string]any{"GITHUB_TOKEN": map[string]any{"secret": "s", "key": "k"}}}, "GITHUB_TOKEN is in both env and secretEnv"},
		// The bot exits with "OPENAI_API_KEY is required" on OpenAI's own
		// endpoint without a key.
		{"no model key for OpenAI", map[string]any{"secrets": noKey}, "secrets.openaiApiKey is required"},
		{"no model key for OpenAI named explicitly", map[string]any{"secrets": noKey, "env": map[string]any{"OPENAI_BASE_URL": "https://api.openai.com/v1/"}}, "secrets.openaiApiKey is required"},
		{"no model key for Azure OpenAI", map[string]any{"secrets": noKey, "env": map[string]any{"OPENAI_BASE_URL": "https://team.openai.azure.com/openai/deployments/gpt"}}, "secrets.openaiApiKey is required for Azure OpenAI"},
		{"no model key for an Azure API version", map[string]any{"secrets": noKey, "env": map[string]any{"OPENAI_BASE_URL": "https://llm.internal.example/v1", "OPENAI_API_VERSION": "2024-10-21"}}, "secrets.openaiApiKey is required for Azure OpenAI"},
		// A list or map in env came out as "[U1 U2]" or "map[…]".
		{"a list in env", map[string]any{"secrets": tokens, "env": map[string]any{"ADMIN_USERS": []any{"U1", "U2"}}}, `env.ADMIN_USERS is a list: write it as one string, such as "U1,U2"`},
		{"a map in env", map[string]any{"secrets": tokens, "env": map[string]any{"SYSTEM_PROMPT": map[string]any{"a": "b"}}}, "env.SYSTEM_PROMPT is a map"},
		// A key with nothing after it is null, which came out as "<nil>":
		// the bot's system prompt, or its Redis prefix.
		{"an empty value in env", map[string]any{"secrets": tokens, "env": map[string]any{"REDIS_PREFIX": nil}}, "env.REDIS_PREFIX is empty (null"},
		// The collector's credentials, like the tokens, stay out of the
		// Deployment's env.
		{"collector headers in env", map[string]any{"secrets": tokens, "env": map[string]any{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=k"}}, "env.OTEL_EXPORTER_OTLP_HEADERS carries credentials: put it in secretEnv"},
		{"trace collector headers in env", map[string]any{"secrets": tokens, "env": map[string]any{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=k"}}, "env.OTEL_EXPORTER_OTLP_TRACES_HEADERS carries credentials: put it in secretEnv"},
		{"an extra volume named like the chart's", map[string]any{"secrets": tokens, "extraVolumes": []any{map[string]any{"name": "tmp", "emptyDir": map[string]any{}}}}, `extraVolumes: "tmp" is a volume of the chart's`},
		{"no image", map[string]any{"secrets": tokens, "image": map[string]any{"repository": ""}}, "image.repository is required: build and push the image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, "", tt.set)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render with %v: error %v, want %q", tt.set, err, tt.want)
			}
		})
	}
	// The same values with Redis are accepted.
	m := mustRender(t, "", map[string]any{"replicaCount": 2, "secrets": tokens, "redis": map[string]any{"url": "redis://r:6379/0"}})
	if d := deployment(t, m); *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}
	if !strings.Contains(m["secret.yaml"], `REDIS_URL: "redis://r:6379/0"`) {
		t.Errorf("secret.yaml has no REDIS_URL:\n%s", m["secret.yaml"])
	}
	// No key is needed for a server that asks none, nor checked when the
	// key would be in an existing Secret.
	for _, set := range []map[string]any{
		{"secrets": noKey, "env": map[string]any{"OPENAI_BASE_URL": "http://ollama:11434/v1"}},
		{"secrets": noKey, "secretEnv": map[string]any{"OPENAI_BASE_URL": map[string]any{"secret": "s", "key": "k"}}},
		{"secrets": map[string]any{"existingSecret": "s"}},
	} {
		if _, err := render(t, "", set); err != nil {
			t.Errorf("render with %v: %v, want it accepted", set, err)
		}
	}
}

// env values are rendered as written: a values file's numbers are floats,
// so a large whole number came out as "1e+06", which the bot refuses.
func TestEnvNumbersAsWritten(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	c := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "env": map[string]any{
		"CONTEXT_BUDGET": float64(1000000), "MAX_STEPS": float64(12), "TEMPERATURE": 0.5, "LOG_LEVEL": "warn", "PPROF": true,
	}})).Spec.Template.Spec.Containers[0]
	for k, want := range map[string]string{"CONTEXT_BUDGET": "1000000", "MAX_STEPS": "12", "TEMPERATURE": "0.5", "LOG_LEVEL": "warn", "PPROF": "true"} {
		if e := env(c, k); e == nil || e.Value != want {
			t.Errorf("%s = %+v, want %q", k, e, want)
		}
	}
}

// The workspace tools' files are a claim of their own when one is named,
// which several replicas share. A claim may be ReadWriteOnce: a rolling
// update's new pod would wait for the old one's volume, which only stops
// once the new one is up, so a claim means Recreate unless updateStrategy
// says RollingUpdate (a ReadWriteMany claim).
func TestWorkspaceClaim(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	config := "builtin_tools:\n  workspace: {root: /workspace}\n"
	for _, tt := range []struct {
		name, claim, updateStrategy string
		replicas                    int
		want                        appsv1.DeploymentStrategyType
	}{
		{"one pod, its own files", "", "", 1, appsv1.RollingUpdateDeploymentStrategyType},
		{"one pod on a claim", "ws", "", 1, appsv1.RecreateDeploymentStrategyType},
		{"replicas sharing a claim", "shared-ws", "", 2, appsv1.RecreateDeploymentStrategyType},
		{"replicas sharing a ReadWriteMany claim", "shared-ws", "RollingUpdate", 2, appsv1.RollingUpdateDeploymentStrategyType},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "redis": map[string]any{"url": "redis://r:6379"},
				"replicaCount": tt.replicas, "config": config, "workspace": map[string]any{"existingClaim": tt.claim}, "updateStrategy": tt.updateStrategy}))
			if d.Spec.Strategy.Type != tt.want {
				t.Errorf("strategy %s, want %s", d.Spec.Strategy.Type, tt.want)
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name != "workspace" {
					continue
				}
				switch {
				case tt.claim == "" && v.EmptyDir == nil:
					t.Errorf("workspace volume %+v, want the pod's own", v)
				case tt.claim != "" && (v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != tt.claim):
					t.Errorf("workspace volume %+v, want claim %s", v, tt.claim)
				}
				return
			}
			t.Error("no workspace volume")
		})
	}
}

// A service account of the user's (with RBAC they bind to it) for MCP
// servers or programs that talk to the Kubernetes API; none by default.
func TestServiceAccount(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	spec := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens})).Spec.Template.Spec
	if spec.ServiceAccountName != "" || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("default: service account %q, token mounted %v; want the namespace's default, no token", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	spec = deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "serviceAccount": map[string]any{"name": "toolgate-k8s", "automountToken": true}})).Spec.Template.Spec
	if spec.ServiceAccountName != "toolgate-k8s" || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("service account %q, token mounted %v; want toolgate-k8s with its token", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	spec = deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "serviceAccount": map[string]any{"name": "toolgate-k8s"}})).Spec.Template.Spec
	if spec.ServiceAccountName != "toolgate-k8s" || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("service account %q, token mounted %v; want toolgate-k8s without its token unless asked", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
}

// extraVolumes, extraVolumeMounts and envFrom reach the pod as written, next
// to the chart's own.
func TestExtraVolumesAndEnvFrom(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	spec := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens,
		"extraVolumes":      []any{map[string]any{"name": "ca", "secret": map[string]any{"secretName": "corp-ca"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}},
		"envFrom":           []any{map[string]any{"configMapRef": map[string]any{"name": "toolgate-env"}}},
	})).Spec.Template.Spec
	c := spec.Containers[0]
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "ca" && v.Secret != nil && v.Secret.SecretName == "corp-ca"
	}) {
		t.Errorf("volumes %+v, want the Secret corp-ca as ca", spec.Volumes)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "ca" && m.MountPath == "/etc/ssl/corp" && m.ReadOnly
	}) {
		t.Errorf("volume mounts %+v, want ca read-only at /etc/ssl/corp", c.VolumeMounts)
	}
	for _, v := range []string{"data", "workspace", "tmp"} {
		if !slices.ContainsFunc(spec.Volumes, func(vol corev1.Volume) bool { return vol.Name == v }) {
			t.Errorf("the chart's volume %s is gone: %+v", v, spec.Volumes)
		}
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "toolgate-env" {
		t.Errorf("envFrom %+v, want the ConfigMap toolgate-env", c.EnvFrom)
	}
	// None by default.
	c = deployment(t, mustRender(t, "", map[string]any{"secrets": tokens})).Spec.Template.Spec.Containers[0]
	if len(c.EnvFrom) != 0 || len(c.VolumeMounts) != 3 {
		t.Errorf("default: envFrom %+v, mounts %+v; want none, the chart's three", c.EnvFrom, c.VolumeMounts)
	}
}

// GOMEMLIMIT keeps the Go heap under the container's memory limit: 90% of
// it by default, goMemLimit when set, the user's own when env sets it.
func TestGoMemLimit(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	limits := func(memory any) map[string]any {
		return map[string]any{"requests": map[string]any{"memory": "128Mi"}, "limits": map[string]any{"memory": memory}}
	}
	for _, tt := range []struct {
		name string
		set  map[string]any
		want string // "" for no GOMEMLIMIT
	}{
		{"the default limit, 512Mi", nil, "483183820"},
		{"1Gi", map[string]any{"resources": limits("1Gi")}, "966367641"},
		{"a decimal suffix", map[string]any{"resources": limits("1G")}, "900000000"},
		{"a fraction", map[string]any{"resources": limits("1.5Gi")}, "1449551462"},
		{"bytes", map[string]any{"resources": limits("536870912")}, "483183820"},
		{"bytes as a number", map[string]any{"resources": limits(float64(536870912))}, "483183820"},
		{"goMemLimit", map[string]any{"goMemLimit": "400MiB"}, "400MiB"},
		{"goMemLimit in bytes, a float as a values file gives it", map[string]any{"goMemLimit": float64(471859200)}, "471859200"},
		// A null drops the default's limit, as in a values file.
		{"goMemLimit without a limit", map[string]any{"goMemLimit": "400MiB", "resources": map[string]any{"limits": nil}}, "400MiB"},
		{"no limit", map[string]any{"resources": map[string]any{"limits": nil}}, ""},
		{"the user's own", map[string]any{"env": map[string]any{"GOMEMLIMIT": "off"}, "goMemLimit": "400MiB"}, "off"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := map[string]any{"secrets": tokens}
			for k, v := range tt.set {
				set[k] = v
			}
			c := deployment(t, mustRender(t, "", set)).Spec.Template.Spec.Containers[0]
			var got []corev1.EnvVar
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					got = append(got, e)
				}
			}
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("GOMEMLIMIT %+v, want none", got)
			case tt.want != "" && (len(got) != 1 || got[0].Value != tt.want):
				t.Errorf("GOMEMLIMIT %+v, want one, %q", got, tt.want)
			}
		})
	}
	// A quantity the chart does not read is the limit itself, in bytes,
	// from the API.
	c := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "resources": limits("1e9")})).Spec.Template.Spec.Containers[0]
	e := env(c, "GOMEMLIMIT")
	if e == nil || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" ||
		e.ValueFrom.ResourceFieldRef.ContainerName != "bot" || e.ValueFrom.ResourceFieldRef.Divisor.String() != "1" {
		t.Errorf("GOMEMLIMIT %+v, want limits.memory in bytes", e)
	}
}

// With several replicas the pods spread over nodes when they can, so one
// node's loss does not take every replica.
func TestTopologySpread(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	redis := map[string]any{"url": "redis://r:6379"}
	spec := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "redis": redis, "replicaCount": 2})).Spec.Template.Spec
	if len(spec.TopologySpreadConstraints) != 1 {
		t.Fatalf("topologySpreadConstraints %+v, want one", spec.TopologySpreadConstraints)
	}
	tsc := spec.TopologySpreadConstraints[0]
	if tsc.TopologyKey != "kubernetes.io/hostname" || tsc.WhenUnsatisfiable != corev1.ScheduleAnyway || tsc.MaxSkew != 1 ||
		tsc.LabelSelector == nil || tsc.LabelSelector.MatchLabels["app.kubernetes.io/name"] != "toolgate" || tsc.LabelSelector.MatchLabels["app.kubernetes.io/instance"] != "tg" {
		t.Errorf("topologySpreadConstraints %+v, want the release's pods spread over hosts, ScheduleAnyway", tsc)
	}
	if spec := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "redis": redis})).Spec.Template.Spec; len(spec.TopologySpreadConstraints) != 0 {
		t.Errorf("one replica: topologySpreadConstraints %+v, want none", spec.TopologySpreadConstraints)
	}
	own := []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
		"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "toolgate"}}}}
	spec = deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "redis": redis, "replicaCount": 2, "topologySpreadConstraints": own})).Spec.Template.Spec
	if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("topologySpreadConstraints %+v, want the values' own", spec.TopologySpreadConstraints)
	}
}

// Nobody publishes the image: an install names the one it built.
func TestImage(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	c := deployment(t, mustRender(t, "", map[string]any{"secrets": tokens, "image": map[string]any{"repository": "registry.example.com/toolgate", "tag": "1.0.0"}})).Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example.com/toolgate:1.0.0" {
		t.Errorf("image %q, want registry.example.com/toolgate:1.0.0", c.Image)
	}
	_, err := render(t, "", map[string]any{"secrets": tokens, "image": map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), "image.repository is required") || !strings.Contains(err.Error(), "README") {
		t.Errorf("render without image.repository: error %v, want it required, pointing at the README", err)
	}
}

// docker-compose.yml gives the bot SHUTDOWN_GRACE and its ~30 s of shutdown
// after it before Docker's SIGKILL, with room for a grace raised to 60s
// (as the chart's ci/redis-values.yaml has); .env.example says so next to
// SHUTDOWN_GRACE.
func TestComposeStopGrace(t *testing.T) {
	data, err := os.ReadFile("../../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			StopGracePeriod string            `json:"stop_grace_period"`
			Environment     map[string]string `json:"environment"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	bot, ok := compose.Services["bot"]
	if !ok {
		t.Fatal("no bot service")
	}
	stop, err := time.ParseDuration(bot.StopGracePeriod)
	if err != nil {
		t.Fatalf("stop_grace_period %q: %v", bot.StopGracePeriod, err)
	}
	if g, ok := bot.Environment["SHUTDOWN_GRACE"]; ok {
		grace, err := time.ParseDuration(g)
		if err != nil {
			t.Fatalf("SHUTDOWN_GRACE %q: %v", g, err)
		}
		if stop < grace+30*time.Second {
			t.Errorf("stop_grace_period %v, want at least SHUTDOWN_GRACE %v + 30s", stop, grace)
		}
	}
	if stop < 60*time.Second+30*time.Second {
		t.Errorf("stop_grace_period %v, want at least 90s: SHUTDOWN_GRACE up to 60s + 30s", stop)
	}
	example, err := os.ReadFile("../../../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	if want := "stop_grace_period (" + bot.StopGracePeriod + ")"; !strings.Contains(string(example), want) || !strings.Contains(string(example), "SHUTDOWN_GRACE + 30 s") {
		t.Errorf(".env.example does not say that docker-compose.yml's %s must cover SHUTDOWN_GRACE + 30 s", want)
	}
}

// An image tag that a values file reads as a number is refused with the
// advice to quote it (20240101 rendered as 2.0240101e+07, 1.10 as 1.1); a
// quoted one, or an integer from --set, is written as given.
func TestImageTagAsWritten(t *testing.T) {
	tokens := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1", "openaiApiKey": "sk-test"}
	for _, written := range []string{"20240101", "1.10"} {
		var vals map[string]any
		if err := yaml.Unmarshal([]byte("tag: "+written), &vals); err != nil { // as Helm reads a values file
			t.Fatal(err)
		}
		_, err := render(t, "", map[string]any{"secrets": tokens, "image": map[string]any{"repository": testImage, "tag": vals["tag"]}})
		if err == nil || !strings.Contains(err.Error(), "quote it") {
			t.Errorf("image.tag: %s in a values file: got %v, want it refused with the advice to quote it", written, err)
		}
	}
	for tag, want := range map[any]string{"1.10": "1.10", int64(20240101): "20240101"} {
		m := mustRender(t, "", map[string]any{"secrets": tokens, "image": map[string]any{"repository": testImage, "tag": tag}})
		if c := deployment(t, m).Spec.Template.Spec.Containers[0]; c.Image != testImage+":"+want {
			t.Errorf("image.tag %v: image %q, want %q", tag, c.Image, testImage+":"+want)
		}
	}
}

// Settings from envFrom are not seen by the chart: without an API key it
// does not refuse to render, as they may name a server that needs none.
func TestEnvFromMayHoldTheModelsSettings(t *testing.T) {
	noKey := map[string]any{"slackAppToken": "xapp-1", "slackBotToken": "xoxb-1"}
	if _, err := render(t, "", map[string]any{"secrets": noKey,
		"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "toolgate-env"}}}}); err != nil {
		t.Errorf("envFrom (a ConfigMap with OPENAI_BASE_URL) and no key: %v", err)
	}
	if _, err := render(t, "", map[string]any{"secrets": noKey}); err == nil || !strings.Contains(err.Error(), "secrets.openaiApiKey is required") {
		t.Errorf("no key, no envFrom: got %v, want the key asked for", err)
	}
	// Azure OpenAI's key may be there too.
	azure := map[string]any{"OPENAI_BASE_URL": "https://example.openai.azure.com/openai/v1", "OPENAI_API_VERSION": "2024-10-21"}
	if _, err := render(t, "", map[string]any{"secrets": noKey, "env": azure,
		"envFrom": []any{map[string]any{"secretRef": map[string]any{"name": "azure-openai"}}}}); err != nil {
		t.Errorf("Azure OpenAI with envFrom holding its key: %v", err)
	}
}
