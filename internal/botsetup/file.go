package botsetup

import (
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/tools"
)

// File is the config file, parsed by the packages that own each section.
type File struct {
	// Policy is the policy section; with no file, the default policy
	// (every call asks).
	Policy *approvals.Policy
	// Tools are the mcp_servers and builtin_tools sections; with no file,
	// no tools.
	Tools tools.Config
	// Data is the file's text as read; nil with no file.
	Data []byte
}

// LoadFile reads and parses the config file at path; an empty path gives
// the empty configuration (no tools, the default policy). setting names
// where the path came from (CONFIG_FILE for the bot, -config for the
// playground). Every error is a *ConfigError: "SETTING: PATH is a
// directory, not a file (...)" for a directory (what Docker mounts for a
// missing file), "SETTING: ..." when the file cannot be read, and "config
// file PATH: ..." when a section does not parse.
func LoadFile(setting, path string) (File, error) {
	var data []byte
	if path != "" {
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return File{}, &ConfigError{Err: fmt.Errorf("%s: %s is a directory, not a file (Docker creates one when the file to mount is missing: create config.yaml, for example from config.example.yaml)", setting, path)}
		}
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return File{}, &ConfigError{Err: fmt.Errorf("%s: %w", setting, err)}
		}
	}
	if err := CheckSections(data); err != nil {
		return File{}, &ConfigError{Err: fmt.Errorf("config file %s: %w", path, err)}
	}
	policy, err := approvals.ParseConfig(data)
	if err != nil {
		return File{}, &ConfigError{Err: fmt.Errorf("config file %s: %w", path, err)}
	}
	tc, err := tools.ParseConfig(data)
	if err != nil {
		return File{}, &ConfigError{Err: fmt.Errorf("config file %s: %w", path, err)}
	}
	return File{Policy: policy, Tools: tc, Data: data}, nil
}

// Sections are the config file's top-level keys.
var Sections = []string{"mcp_servers", "builtin_tools", "policy"}

// CheckSections refuses a config file with a top-level key that is not one
// of Sections (or a merge key "<<", or an "x-" key that holds anchors): a
// misspelt "polcy:" would otherwise drop every rule in it without a word. A file that does not parse is left to the sections'
// own parsers, which say where.
func CheckSections(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if k.Value == "<<" || strings.HasPrefix(k.Value, "x-") {
			continue // a merge key, or a block kept for its YAML anchors
		}
		known := false
		for _, s := range Sections {
			known = known || k.Value == s
		}
		if !known {
			return fmt.Errorf("unknown section %q (line %d): a config file has only %s", k.Value, k.Line, strings.Join(Sections, ", "))
		}
	}
	return nil
}
