package main

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"
	"go.yaml.in/yaml/v3"
)

// configKeys lists the variables of config.
func configKeys(t *testing.T) []string {
	t.Helper()
	var keys bytes.Buffer
	if err := envconfig.Usagef("", &config{}, &keys, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
		t.Fatal(err)
	}
	return strings.Fields(keys.String())
}

// TestEnvExample checks that .env.example names every variable the bot
// reads, and nothing else.
func TestEnvExample(t *testing.T) {
	data, err := os.ReadFile("../../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	keys := configKeys(t)
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^(?:# )?([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(string(data), -1) {
		listed = append(listed, m[1])
	}
	for _, k := range keys {
		if !slices.Contains(listed, k) {
			t.Errorf(".env.example does not mention %s", k)
		}
	}
	for _, k := range listed {
		if !slices.Contains(keys, k) {
			t.Errorf(".env.example sets %s, which the bot does not read", k)
		}
	}
}

// TestComposeFile checks the parts of docker-compose.yml the bot depends on.
func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Volumes     []yaml.Node       `yaml:"volumes"`
			Build       struct {
				Context string `yaml:"context"`
				Target  string `yaml:"target"`
			} `yaml:"build"`
			DependsOn map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	bot, ok := compose.Services["bot"]
	if !ok {
		t.Fatal("no bot service")
	}
	if _, ok := compose.Services["redis"]; !ok {
		t.Fatal("no redis service")
	}
	keys := configKeys(t)
	for k := range bot.Environment {
		if !slices.Contains(keys, k) {
			t.Errorf("the bot service sets %s, which the bot does not read", k)
		}
	}
	if got := bot.Environment["REDIS_URL"]; !strings.HasPrefix(got, "redis://redis:") {
		t.Errorf("REDIS_URL = %q, want the redis service", got)
	}
	// A missing ./config.yaml must stop compose, not become a directory:
	// only the long form with create_host_path: false does that.
	type bindMount struct {
		Type     string `yaml:"type"`
		Source   string `yaml:"source"`
		Target   string `yaml:"target"`
		ReadOnly bool   `yaml:"read_only"`
		Bind     struct {
			CreateHostPath *bool `yaml:"create_host_path"`
		} `yaml:"bind"`
	}
	var config *bindMount
	for _, n := range bot.Volumes {
		if n.Kind == yaml.ScalarNode {
			if strings.HasPrefix(n.Value, "./config.yaml:") {
				t.Errorf("config.yaml is mounted with the short form %q, which makes Docker create a directory when the file is missing", n.Value)
			}
			continue
		}
		var m bindMount
		if err := n.Decode(&m); err != nil {
			t.Fatalf("volume at line %d: %v", n.Line, err)
		}
		if m.Source == "./config.yaml" {
			config = &m
		}
	}
	switch {
	case config == nil:
		t.Errorf("./config.yaml is not mounted")
	case config.Type != "bind" || config.Target != bot.Environment["CONFIG_FILE"] || !config.ReadOnly:
		t.Errorf("config mount %+v, want a read-only bind at CONFIG_FILE %q", *config, bot.Environment["CONFIG_FILE"])
	case config.Bind.CreateHostPath == nil || *config.Bind.CreateHostPath:
		t.Errorf("config mount has create_host_path %v, want false", config.Bind.CreateHostPath)
	}
	if !strings.Contains(bot.Build.Target, "distroless") {
		t.Errorf("build target %q, want the distroless image by default", bot.Build.Target)
	}
	if bot.DependsOn["redis"].Condition != "service_healthy" {
		t.Error("the bot does not wait for a healthy redis")
	}
}

// dockerStages parses the Dockerfile's stages: name -> the instructions of
// that stage, in order, and the names in order.
func dockerStages(t *testing.T) (map[string][]string, []string) {
	t.Helper()
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	stages := map[string][]string{}
	var order []string
	cur := ""
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); strings.EqualFold(f[0], "FROM") {
			cur = f[len(f)-1]
			if len(f) < 4 || !strings.EqualFold(f[len(f)-2], "AS") {
				t.Fatalf("stage %q has no name", line)
			}
			order = append(order, cur)
		}
		stages[cur] = append(stages[cur], line)
	}
	return stages, order
}

// TestDockerfile checks both images: the distroless default (the last
// stage) and the tools target with a shell, each running as the non-root
// user with the bot's defaults.
func TestDockerfile(t *testing.T) {
	stages, order := dockerStages(t)
	if order[len(order)-1] != "distroless" {
		t.Errorf("stages %q: the default (last) image must be distroless", order)
	}
	for _, name := range []string{"distroless", "tools"} {
		st, ok := stages[name]
		if !ok {
			t.Fatalf("no %s stage in %q", name, order)
		}
		all := strings.Join(st, "\n")
		for _, want := range []string{"COPY --from=build /out/bot /usr/local/bin/bot", "USER 65532:65532", "DATA_DIR=/data", "EXPOSE 8080", "/usr/local/bin/bot\"]"} {
			if !strings.Contains(all, want) {
				t.Errorf("%s stage lacks %q:\n%s", name, want, all)
			}
		}
	}
	tools := strings.Join(stages["tools"], "\n")
	if !strings.Contains(stages["tools"][0], "debian:") || !strings.Contains(stages["tools"][0], "-slim") {
		t.Errorf("tools stage %q, want a slim Debian base", stages["tools"][0])
	}
	for _, want := range []string{"--shell /bin/sh nonroot", `ENTRYPOINT ["/usr/local/bin/bot"]`, "rm -rf /var/lib/apt/lists/*"} {
		if !strings.Contains(tools, want) {
			t.Errorf("tools stage lacks %q:\n%s", want, tools)
		}
	}
	// The bot is PID 1, reaping what tools leave behind: an init in front
	// of it would hold its environment (the tokens) in a process of the
	// same user, readable by the programs it starts (/proc/1/environ).
	for _, stage := range []string{"tools", "distroless"} {
		for _, line := range stages[stage] {
			if strings.HasPrefix(line, "ENTRYPOINT") && line != `ENTRYPOINT ["/usr/local/bin/bot"]` {
				t.Errorf("%s stage: %s; want the bot itself as PID 1", stage, line)
			}
		}
	}
}

// A CONFIG_FILE that is a directory (what Docker makes of a missing file)
// gets an error that says how to fix it.
func TestConfigFileIsADirectory(t *testing.T) {
	env := validEnv(t)
	env["CONFIG_FILE"] = t.TempDir()
	setEnv(t, env)
	err := run(t.Context(), nil, &bytes.Buffer{}, &bytes.Buffer{})
	if code := exitCode(err); code != 2 || err == nil || !strings.Contains(err.Error(), "is a directory, not a file") || !strings.Contains(err.Error(), "config.example.yaml") {
		t.Errorf("run: %v (exit %d), want a configuration error saying the file is a directory", err, code)
	}
}
