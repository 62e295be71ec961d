package botsetup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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
	// Setting names the file in the errors of what it sets up (see
	// Build): LoadFile's setting, such as CONFIG_FILE; a caller may name
	// it otherwise, such as "-config PATH". Empty: "config file".
	Setting string
}

// LoadFile reads and parses the config file at path; an empty path gives
// the empty configuration (no tools, the default policy). setting names
// where the path came from (CONFIG_FILE for the bot, -config for the
// playground); the File keeps it as its Setting. Every error is a
// *ConfigError: "SETTING: PATH is a directory, not a file (...)" for a
// directory (what Docker mounts for a missing file), "SETTING: ..." when
// the file cannot be read, and "config file PATH: ..." when a section
// does not parse.
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
	return File{Policy: policy, Tools: tc, Data: data, Setting: setting}, nil
}

// OneDocument refuses YAML of more than one document (empty ones, as
// after a trailing "---", aside): a parser reads the first, and would drop
// what follows a "---" without a word. YAML that does not parse in its
// first document is left to the parser, which says where.
func OneDocument(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil
	}
	for n := 2; ; n++ {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("parse config: after the first YAML document: %w", err)
		}
		if !empty(&next) {
			return fmt.Errorf("more than one YAML document (document %d starts on line %d): a file is one document; join them into one", n, next.Line)
		}
	}
}

// empty reports whether a YAML document holds nothing, as one after a
// trailing "---" does.
func empty(doc *yaml.Node) bool {
	return len(doc.Content) == 0 || doc.Content[0].Tag == "!!null"
}

// kindName names what a YAML node is, for an error.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	default:
		return "a single value"
	}
}

// Sections are the config file's top-level keys.
var Sections = []string{"mcp_servers", "builtin_tools", "policy"}

// CheckSections refuses a config file with a top-level key that is not one
// of Sections (or an "x-" key that holds anchors): a misspelt "polcy:"
// would otherwise drop every rule in it without a word. It refuses a
// section given twice, of which the parsers would take the last where a
// reader takes the first, and a top-level merge key ("<<: *anchor"), whose
// sections the policy's parser would read and the tools' would not. It
// refuses a file of several YAML documents too: the sections' parsers
// read the first, and would drop what follows a "---", and a file whose
// top level is not a mapping (a list, say), which each section's parser
// would refuse again. A file that does not parse is left to the sections'
// own parsers, which say where.
func CheckSections(data []byte) error {
	if err := OneDocument(data); err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || empty(&doc) {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		// Each section's parser would refuse it, in its own words; one
		// fault is one error.
		return fmt.Errorf("line %d: the file must be a mapping of its sections (%s), not %s", root.Line, strings.Join(Sections, ", "), kindName(root))
	}
	if err := tools.UniqueKeys(root, ""); err != nil {
		return err
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if k.Tag == "!!merge" {
			return tools.TopLevelMergeError(k.Line)
		}
		if strings.HasPrefix(k.Value, "x-") {
			continue // a block kept for its YAML anchors
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
