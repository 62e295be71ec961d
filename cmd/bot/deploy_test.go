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
			Volumes     []string          `yaml:"volumes"`
			DependsOn   map[string]struct {
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
	if !slices.Contains(bot.Volumes, "./config.yaml:"+bot.Environment["CONFIG_FILE"]+":ro") {
		t.Errorf("CONFIG_FILE %q is not mounted read-only from ./config.yaml: %q", bot.Environment["CONFIG_FILE"], bot.Volumes)
	}
	if bot.DependsOn["redis"].Condition != "service_healthy" {
		t.Error("the bot does not wait for a healthy redis")
	}
}
